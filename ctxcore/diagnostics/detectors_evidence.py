"""Detectors about fresh evidence: the current turn's tool results and error output.

Losing the failing test log is the very failure ctxscope exists to expose (issue 13): a
prompt that holds none of what the last tool calls returned, or that lost the traceback
the agent must fix, makes the model reason without the evidence. Both detectors read only
the trace (its input, decisions and prompt), so they judge any builder's build, an
imported prompt included; what counts as "current turn" and "error evidence" is the
ctxscope preset's own definition (``ctxcore.pipeline.signals``, ``summarize.error_evidence``;
docs/design.md, "Diagnostics").
"""

from __future__ import annotations

from ctxcore.diagnostics.context import TraceView, finding, id_list, normalize_ws, short, ws_head
from ctxcore.diagnostics.text import normalized_ws
from ctxcore.models import Decision, Finding, Reason, Status
from ctxcore.summarize import error_evidence

#: a packet counts as in the prompt when its decision says so (a summary keeps the gist:
#: the tool-log summary keeps error lines verbatim), else when its text is found there
_PRESENT = frozenset({Status.KEPT, Status.TRUNCATED, Status.SUMMARIZED})


def _in_prompt(v: TraceView, packet_id: str, content: str) -> bool:
    d = v.by_id.get(packet_id)
    if d is not None and d.status in _PRESENT and d.tokens_after > 0:
        return True
    probe = ws_head(content, 120)
    return bool(probe) and v.prompt_contains(probe)


def evidence_starved(v: TraceView) -> list[Finding]:
    """Warning: none of the current turn's tool results is in the prompt although there
    were some (empty ones do not count)."""
    sources = v.sources
    fresh = [k for k in v.current_turn if sources[k].text.strip()]
    if not fresh or any(_in_prompt(v, sources[k].id, sources[k].text) for k in fresh):
        return []
    ids = [sources[k].id for k in sorted(fresh)]
    return [
        finding(
            "evidence_starved",
            "warning",
            f"the prompt holds none of the current turn's {len(ids)} tool result"
            f"{'s' if len(ids) != 1 else ''} ({id_list(ids)}): "
            + "; ".join(f"{pid} {v.reason_of(pid)}" for pid in ids[:2]),
            ids,
            {"current_turn": ids, "why": {pid: v.reason_of(pid) for pid in ids}},
        )
    ]


def _score(d: Decision | None) -> float | None:
    if d is None:
        return None
    return d.score if d.score is not None else d.relevance


def error_evidence_lost(v: TraceView) -> list[Finding]:
    """Error: a candidate carrying a failing test, a traceback or a compiler error was
    filtered or dropped and none of its error lines is in the prompt — when it is the
    latest error output, belongs to the current turn, or less relevant items were kept."""
    sources = v.sources
    errors = {k: error_evidence(s.text) for k, s in enumerate(sources)}
    errors = {k: lines for k, lines in errors.items() if lines}
    if not errors:
        return []
    stamped = [k for k in errors if sources[k].timestamp is not None]
    latest = max(stamped, key=lambda k: (sources[k].timestamp, k)) if stamped else max(errors)
    kept = [
        d
        for d in v.decisions
        if d.status in _PRESENT and d.reason != Reason.MUST_KEEP and d.packet_id in v.packets
    ]
    # copies of one output are one finding naming every copy (the latest copy speaks)
    groups: dict[str, list[int]] = {}
    for k in sorted(errors):
        groups.setdefault(normalized_ws(sources[k].text), []).append(k)
    out: list[Finding] = []
    for members in groups.values():
        found = _lost_output(v, members, errors, latest, kept)
        if found is not None:
            out.append(found)
    return out


def _lost_output(
    v: TraceView,
    members: list[int],
    errors: dict[int, list[str]],
    latest: int,
    kept: list[Decision],
) -> Finding | None:
    """The finding on one error output (``members``: the indexes of its copies among the
    sources, ``errors`` their error lines), when none of it is in the prompt and it is the
    ``latest`` error output, of the current turn, or scored above a ``kept`` item."""
    sources = v.sources
    if any(_in_prompt(v, sources[k].id, sources[k].text) for k in members):
        return None
    k = latest if latest in members else members[-1]
    s, lines = sources[k], errors[k]
    if any(v.prompt_contains(normalize_ws(ln)[:120]) for ln in lines):
        return None  # a summary or another rendering carries the error lines
    mine = max(
        (x for m in members if (x := _score(v.by_id.get(sources[m].id))) is not None),
        default=None,
    )
    weaker = [
        d.packet_id
        for d in kept
        if mine is not None and (ds := _score(d)) is not None and ds < mine
    ]
    is_fresh = any(m in v.current_turn for m in members)
    if latest not in members and not is_fresh and not weaker:
        return None
    ids = [sources[m].id for m in members]
    why = "the latest error output" if latest in members else "error output"
    if is_fresh:
        why += " of the current turn"
    copies = f" (and {len(ids) - 1} cop{'ies' if len(ids) > 2 else 'y'})" if len(ids) > 1 else ""
    return finding(
        "error_evidence_lost",
        "error",
        f"{why} {s.id}{copies} ({short(lines[0])!r}) is not in the prompt: "
        f"{v.reason_of(s.id)}"
        + (f"; less relevant items were kept ({id_list(weaker, 3)})" if weaker else ""),
        ids,
        {"error_lines": lines[:5], "latest": latest in members, "kept_weaker": weaker[:10]},
    )


__all__ = ["error_evidence_lost", "evidence_starved"]
