"""Context regression tests: assertions for a user's own pytest suite.

Capture an input once, then pin what must stay true of the context built from it::

    from ctxcore.testing import assert_kept, assert_no_findings

    def test_failing_log_stays_in_window():
        assert_kept("tests/captures/turn14.json", "tool:call_12", config={"max_tokens": 8000})
        assert_no_findings("tests/captures/turn14.json", min_severity="error")

``trace_or_input`` is a ``Trace``, a ``CapturedInput``, a dict of either, or a path to a
JSON file holding one. A captured input is always built (with ``config``, default preset
otherwise). A trace is judged as recorded unless ``config`` is given; then its captured
input is re-built with the trace's config patched by ``config`` — which is how a change to
the builder's settings is tested. Failures are ``AssertionError``s whose message shows the
decision (status, reason code and sentence, rank, score, tokens) and, when one exists, the
smallest verified config change that would have kept the packet.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ctxcore.errors import InputError
from ctxcore.knobs import summarized
from ctxcore.loading import input_from_obj, load_input_or_trace, trace_from_obj
from ctxcore.models import CapturedInput, Config, Decision, Finding, Status, Trace
from ctxcore.replay import ReplayReport

TraceLike = Trace | CapturedInput | Mapping[str, Any] | str | Path
ConfigLike = Config | Mapping[str, Any] | None

KEPT_STATUSES: tuple[Status, ...] = (Status.KEPT, Status.TRUNCATED)
DROPPED_STATUSES: tuple[Status, ...] = (Status.DROPPED, Status.FILTERED, Status.NOT_RENDERED)


def _config_from(base: Config | None, config: ConfigLike) -> Config:
    if isinstance(config, Config):
        return config
    data: dict[str, Any] = {}
    patch = dict(config or {})
    if base is not None:
        data = base.model_dump(exclude_none=True)
        if "preset" in patch and patch["preset"] != base.preset:
            data = {}  # another preset's resolved knobs do not carry over
    data.update(patch)
    from ctxcore.loading import config_from_obj

    return config_from_obj(data, "config")


def resolve_trace(trace_or_input: TraceLike, config: ConfigLike = None) -> Trace:
    """The built trace the assertions look at (see the module docstring for the rules)."""
    from ctxcore.pipeline import build_trace

    trace: Trace | None = None
    inp: CapturedInput | None = None
    label = "ctxcore.testing"
    if isinstance(trace_or_input, Trace):
        trace = trace_or_input
    elif isinstance(trace_or_input, CapturedInput):
        inp = trace_or_input
    elif isinstance(trace_or_input, str | Path):
        inp, _, trace = load_input_or_trace(trace_or_input)
        label = Path(trace_or_input).name
    elif isinstance(trace_or_input, Mapping):
        data = dict(trace_or_input)
        if "schema" in data:
            trace = trace_from_obj(data, "trace")
        else:
            inp = input_from_obj(data, "captured input")
    else:
        raise InputError(
            f"expected a Trace, CapturedInput, dict or path, got {type(trace_or_input).__name__}"
        )
    if trace is not None:
        if config is None and trace.result is not None:
            return trace
        cfg = _config_from(trace.config, config)
        return build_trace(
            trace.input,
            cfg,
            trace_id=trace.trace_id,
            session_id=trace.session_id,
            turn=trace.turn,
            source_trace_id=trace.trace_id,
        )
    assert inp is not None
    return build_trace(inp, _config_from(None, config), trace_id=label)


def describe_decision(d: Decision) -> str:
    parts = [f"{d.status.value} ({d.reason.value}: {d.reason_text})"]
    facts = []
    if d.rank is not None:
        facts.append(f"rank {d.rank}")
    if d.score is not None:
        facts.append(f"score {d.score:.3f}")
    if d.relevance is not None:
        facts.append(f"relevance {d.relevance:.3f}")
    if d.recency is not None:
        facts.append(f"recency {d.recency:.3f}")
    facts.append(f"tokens {d.tokens_before:,} → {d.tokens_after:,}")
    if d.budget_left is not None:
        facts.append(f"budget left {d.budget_left:,}")
    parts.append(", ".join(facts))
    if d.notes:
        parts.append("notes: " + "; ".join(d.notes))
    return "\n  ".join(parts)


def _config_line(trace: Trace) -> str:
    """The preset and the knobs ``ctxcore.knobs`` marks for summaries (``Knob.summary``)."""
    cfg = trace.config.model_dump(exclude_none=True)
    keys = ("preset", *summarized())
    return ", ".join(f"{k}={cfg[k]}" for k in keys if k in cfg)


def _decision(trace: Trace, packet_id: str) -> Decision:
    assert trace.result is not None
    for d in trace.result.decisions:
        if d.packet_id == packet_id:
            return d
    ids = [d.packet_id for d in trace.result.decisions]
    close = difflib.get_close_matches(packet_id, ids, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    raise AssertionError(
        f"trace {trace.trace_id!r} has no decision for packet {packet_id!r}{hint}\n"
        f"  packet ids: {', '.join(ids[:20])}{' …' if len(ids) > 20 else ''}"
    )


def assert_kept(
    trace_or_input: TraceLike,
    packet_id: str,
    config: ConfigLike = None,
    *,
    statuses: Iterable[Status | str] = KEPT_STATUSES,
) -> Decision:
    """Fail unless ``packet_id`` reached the prompt (kept, or truncated); return its decision."""
    __tracebackhide__ = True
    trace = resolve_trace(trace_or_input, config)
    d = _decision(trace, packet_id)
    wanted = {Status(s) for s in statuses}
    if d.status in wanted:
        return d
    msg = (
        f"expected {packet_id!r} to be {'/'.join(sorted(s.value for s in wanted))}, but it was "
        f"{describe_decision(d)}\n  config: {_config_line(trace)}"
    )
    fix = _fix_hint(trace, packet_id)
    if fix:
        msg += f"\n  fix: {fix}"
    raise AssertionError(msg)


def assert_dropped(
    trace_or_input: TraceLike,
    packet_id: str,
    config: ConfigLike = None,
    *,
    statuses: Iterable[Status | str] = DROPPED_STATUSES,
) -> Decision:
    """Fail unless ``packet_id`` stayed out of the prompt (dropped, filtered or not rendered)."""
    __tracebackhide__ = True
    trace = resolve_trace(trace_or_input, config)
    d = _decision(trace, packet_id)
    wanted = {Status(s) for s in statuses}
    if d.status in wanted:
        return d
    raise AssertionError(
        f"expected {packet_id!r} to be {'/'.join(sorted(s.value for s in wanted))}, but it was "
        f"{describe_decision(d)}\n  config: {_config_line(trace)}"
    )


def assert_no_findings(
    trace_or_input: TraceLike,
    config: ConfigLike = None,
    min_severity: str = "warning",
    ignore: Iterable[str] = (),
) -> list[Finding]:
    """Fail if the diagnostics report anything at ``min_severity`` or above.

    ``ignore`` holds detector ids to leave out (e.g. ``("unlabelled_evidence",)``).
    Returns the findings below the threshold (or ignored), for further checks.
    """
    __tracebackhide__ = True
    from ctxcore.diagnostics import DETECTOR_IDS, diagnose, severity_at_least

    ignored = set(ignore)
    unknown = ignored - set(DETECTOR_IDS)
    if unknown:
        raise InputError(
            f"ignore: unknown detector(s) {', '.join(sorted(unknown))}; "
            f"choose from {', '.join(DETECTOR_IDS)}"
        )
    trace = resolve_trace(trace_or_input, config)
    findings = diagnose(trace)
    bad = [f for f in findings if f.detector not in ignored and severity_at_least(f, min_severity)]
    if not bad:
        return [f for f in findings if f not in bad]
    lines = [
        f"  {f.severity} {f.detector}: {f.message}"
        + (f" [{', '.join(f.packet_ids)}]" if f.packet_ids else "")
        + (f"\n    fix: {f.evidence.get('fix')}" if f.fix else "")
        for f in bad
    ]
    raise AssertionError(
        f"{len(bad)} finding(s) at {min_severity} or above in trace {trace.trace_id!r} "
        f"({_config_line(trace)}):\n" + "\n".join(lines)
    )


def assert_no_new_losses(report: ReplayReport, min_severity: str = "warning") -> None:
    """Fail if a replay (``ctxcore.replay``) lost, at ``min_severity`` or above, what the
    other side kept: ``error`` = a must-keep packet or error evidence left the prompt,
    ``warning`` = any packet in the prompt before is out after, ``info`` = squeezed too.
    """
    __tracebackhide__ = True
    losses = report.losses(min_severity)
    failed = report.new_failures
    if not losses and not failed:
        return
    lines = [
        f"  {e.session_id} turn {e.turn} ({e.trace_id}): the build fails with the new "
        f"settings: {e.message}"
        for e in failed[:10]
    ]
    lines += [
        f"  {t.session_id} turn {t.turn} ({t.trace_id}): {f.loss} {f.packet_id} "
        f"{f.before} → {f.after}" + (" [must-keep]" if f.must_keep else "")
        for t, f in losses[:40]
    ]
    more = f"\n  … and {len(losses) - 40} more" if len(losses) > 40 else ""
    raise AssertionError(
        f"{len(losses)} loss(es) at {min_severity} or above and {len(failed)} failed "
        f"build(s) replaying {report.after} "
        f"against {report.before}:\n" + "\n".join(lines) + more
    )


def _fix_hint(trace: Trace, packet_id: str) -> str | None:
    from ctxcore.diagnostics import smallest_fix

    cf = smallest_fix(trace, packet_id)
    return cf.sentence if cf is not None else None


__all__ = [
    "DROPPED_STATUSES",
    "KEPT_STATUSES",
    "assert_dropped",
    "assert_kept",
    "assert_no_new_losses",
    "assert_no_findings",
    "describe_decision",
    "resolve_trace",
]
