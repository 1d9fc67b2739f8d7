"""Comparing the two sides of a replayed turn: the packets whose fate flipped (and how bad a
loss is), the findings as the report compares them; over a session, the first turn each item
was lost on either side."""

from __future__ import annotations

from collections.abc import Iterable

from ctxcore.models import Decision, Finding, Packet, Status, Trace
from ctxcore.replay.report import FirstLoss, Flip, TurnReport
from ctxcore.summarize import error_evidence

#: how far into the prompt a status gets a packet (a lower rank after than before is a loss)
_REACH = {
    Status.KEPT: 3,
    Status.TRUNCATED: 2,
    Status.SUMMARIZED: 1,
    Status.DROPPED: 0,
    Status.FILTERED: 0,
    Status.NOT_RENDERED: 0,
}

#: one side of a session as built: per turn that built, the trace and its findings
Built = list[tuple[Trace, list[Finding]]]


def turn_report(
    recorded: Trace,
    a: Trace,
    b: Trace,
    found_a: list[Finding],
    found_b: list[Finding],
    evidence: dict[str, bool],
) -> TurnReport:
    """The report of one turn built on both sides (``a`` before, ``b`` after); ``evidence``
    is the session's cache for ``_flips``."""
    assert a.result is not None and b.result is not None
    ka = {_finding_key(f) for f in found_a}
    kb = {_finding_key(f) for f in found_b}
    return TurnReport(
        session_id=recorded.session_id,
        turn=recorded.turn,
        trace_id=recorded.trace_id,
        before_id=a.trace_id,
        after_id=b.trace_id,
        used_before=a.result.totals.used,
        used_after=b.result.totals.used,
        budget_before=a.result.report.budget,
        budget_after=b.result.report.budget,
        flips=_flips(recorded, a, b, evidence),
        findings_added=sorted(kb - ka),
        findings_cleared=sorted(ka - kb),
    )


def _flips(recorded: Trace, a: Trace, b: Trace, errors: dict[str, bool]) -> list[Flip]:
    """``errors`` caches, per packet id, whether its text is error evidence (ids are stable
    across the turns of a session, and the scan is the costly part of comparing)."""
    assert a.result is not None and b.result is not None
    before = {d.packet_id: d for d in a.result.decisions}
    after = {d.packet_id: d for d in b.result.decisions}
    packets = {p.id: p for p in recorded.input.packets}
    out: list[Flip] = []
    for pid in [*before, *(p for p in after if p not in before)]:
        da, db = before.get(pid), after.get(pid)
        sa = da.status if da is not None else None
        sb = db.status if db is not None else None
        if sa != sb:
            out.append(_flip(pid, da, db, packets.get(pid), errors))
    return out


def _flip(
    pid: str,
    da: Decision | None,
    db: Decision | None,
    packet: Packet | None,
    errors: dict[str, bool],
) -> Flip:
    """The flip of packet ``pid``, decided ``da`` before and ``db`` after (None: absent)."""
    sa = da.status if da is not None else None
    sb = db.status if db is not None else None
    kind = da.kind if da is not None else db.kind if db is not None else "?"
    must = packet.must_keep if packet is not None else False
    err = False
    if packet is not None:
        if pid not in errors:
            errors[pid] = bool(error_evidence(packet.content))
        err = errors[pid]
    return Flip(
        packet_id=pid,
        kind=kind,
        before=sa.value if sa is not None else "absent",
        after=sb.value if sb is not None else "absent",
        must_keep=must,
        error_evidence=err,
        loss=_loss(sa, sb, must or err),
    )


def _loss(before: Status | None, after: Status | None, vital: bool) -> str | None:
    """How bad a packet's move from ``before`` to ``after`` is (``Flip.loss``); ``vital``: it
    is must-keep or error evidence."""
    ra = _REACH[before] if before is not None else 0
    rb = _REACH[after] if after is not None else 0
    if rb >= ra:
        return None
    if vital and rb <= _REACH[Status.SUMMARIZED]:
        return "error"
    return "warning" if rb == 0 else "info"


def _finding_key(f: Finding) -> str:
    ids = f" [{', '.join(f.packet_ids)}]" if f.packet_ids else ""
    return f"{f.severity} {f.detector}{ids}"


def first_losses(
    session_id: str, built_a: Built, built_b: Built, findings: bool
) -> list[FirstLoss]:
    """The first turn each item left the prompt on each side (``FirstLoss``); the user
    constraints only with ``findings`` (they come from the findings)."""
    from ctxcore.diagnostics.session import TurnFindings, lost_items

    only_a = [t for t, _ in built_a]
    only_b = [t for t, _ in built_b]
    ta = [TurnFindings(trace_id=t.trace_id, turn=t.turn, findings=x) for t, x in built_a]
    tb = [TurnFindings(trace_id=t.trace_id, turn=t.turn, findings=x) for t, x in built_b]
    # an item in either side's prompt counts as had on both (``FirstLoss``)
    seen = _first_in_prompt([*only_a, *only_b])
    lost_a = {x.item: x for x in lost_items(only_a, ta if findings else [], seen=seen)}
    lost_b = {x.item: x for x in lost_items(only_b, tb if findings else [], seen=seen)}
    return [
        FirstLoss(
            session_id=session_id,
            item=item,
            kind=(lost_a.get(item) or lost_b[item]).kind,
            before_turn=lost_a[item].lost_turn if item in lost_a else None,
            after_turn=lost_b[item].lost_turn if item in lost_b else None,
        )
        for item in sorted({*lost_a, *lost_b})
    ]


def _first_in_prompt(traces: Iterable[Trace]) -> dict[str, int]:
    """Per packet id, the first turn any of ``traces`` had it in the prompt."""
    from ctxcore.diagnostics.context import IN_PROMPT

    out: dict[str, int] = {}
    for t in traces:
        assert t.result is not None
        for d in t.result.decisions:
            if d.status in IN_PROMPT and t.turn < out.get(d.packet_id, t.turn + 1):
                out[d.packet_id] = t.turn
    return out
