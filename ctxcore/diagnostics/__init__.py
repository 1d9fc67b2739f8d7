"""Diagnostics: name the likely causes of a bad turn, point at the packets, offer a fix.

Seeing where the budget went is not yet an answer. ``diagnose(trace)`` runs a set of
detectors over one built trace and returns ``Finding``s (detector id, severity, the
packet ids it is about, one sentence, the numbers behind it, and — for lost packets — a
verified smallest config change). ``diagnose_session`` does it per turn and says in which
turn each item was first lost. The app shows the findings on Inspect and Timeline, the
store keeps them as columns, ``ctxscope check`` turns them into a CI exit code, and
``ctxcore.testing`` wraps them as pytest assertions.

Detectors (ids are stable; thresholds live in ``DiagnosticsOptions``):

==================== ==============================================================
must_have_lost       a must-keep packet, the task, the instructions or a user
                     constraint from an earlier turn missing or only in a summary
budget_flooded       one packet or one kind takes too much of the window; tool-log
                     noise (repeated lines, ANSI, spinners) as a share of tokens
greedy_waste         tokens a break/skip fill left unused vs the optimal fill
stale_or_repeated    the same content twice, an old plan next to a newer one, the
                     same error observation carried turn after turn
unlabelled_evidence  evidence or tool output without a source id
injection_like       text in evidence/tool output that poses as instructions
relevance_blind_spot unspaced (CJK) text scored ≈0 by whitespace word overlap
compression_damage   [Task]/[Output] cut, budget still exceeded, a cut without marker
estimate_drift       a heuristic token count >10% off the real tokenizer
summary_coverage     identifiers, paths and numbers a summary lost
evidence_starved     none of the current turn's tool results is in the prompt
error_evidence_lost  a failing test, traceback or compiler error filtered or dropped
import_loss          parts of an imported source kept as JSON text
cache_break          the prompt cache broke: why, the tokens written again, the fix
repeated_tool_call   the same tool call, arguments and result again (a stuck loop)
==================== ==============================================================

Typical use: Inspect calls ``diagnose(trace, session_traces=earlier_turns)`` (with fixes);
bulk work (ingest, a whole-session Timeline) passes ``options=INGEST_OPTIONS`` (no fix
search); the Playground applies a fix with ``patched_config(trace.config, finding.fix)``;
``counterfactuals(trace, packet_id)`` answers "what would have kept it?" for any packet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from ctxcore.diagnostics.context import (
    LOST,
    SEVERITY_RANK,
    DiagnosticsOptions,
    SessionFolds,
    TraceView,
)
from ctxcore.diagnostics.counterfactual import (
    BuildCache,
    Counterfactual,
    counterfactuals,
    patched_config,
    rebuild,
    smallest_fix,
)
from ctxcore.diagnostics.detectors import budget_flooded, greedy_waste, must_have_lost
from ctxcore.diagnostics.detectors_content import (
    cites_other_packets,
    import_loss,
    injection_like,
    relevance_blind_spot,
    stale_or_repeated,
    summary_coverage,
    unlabelled_evidence,
)
from ctxcore.diagnostics.detectors_cost import cache_break, repeated_tool_call
from ctxcore.diagnostics.detectors_evidence import error_evidence_lost, evidence_starved
from ctxcore.diagnostics.detectors_tokens import compression_damage, estimate_drift
from ctxcore.diagnostics.session import LostItem, SessionDiagnosis, TurnFindings, lost_items
from ctxcore.errors import InputError
from ctxcore.fingerprints import source_fingerprint
from ctxcore.models import BuildResult, Finding, Status, Trace

Detector = Callable[[TraceView], list[Finding]]

#: detector id → (function, one-line description for filters and legends), in display order
DETECTORS: dict[str, tuple[Detector, str]] = {
    "must_have_lost": (
        must_have_lost,
        "a must-keep packet, the task, the instructions or an earlier user constraint is "
        "missing or survives only in a summary",
    ),
    "budget_flooded": (
        budget_flooded,
        "one packet or one kind takes too much of the window, or tool-log noise does",
    ),
    "greedy_waste": (
        greedy_waste,
        "a break/skip fill left tokens unused that an optimal fill uses",
    ),
    "stale_or_repeated": (
        stale_or_repeated,
        "the same content twice, an old plan next to a newer one, or an error carried for turns",
    ),
    "unlabelled_evidence": (unlabelled_evidence, "evidence or tool output without a source id"),
    "injection_like": (
        injection_like,
        "evidence or tool output containing text that poses as instructions",
    ),
    "relevance_blind_spot": (
        relevance_blind_spot,
        "Chinese or other unspaced text scored ≈0 by whitespace word overlap",
    ),
    "compression_damage": (
        compression_damage,
        "[Task] or [Output] cut, budget still exceeded, or a cut without a marker",
    ),
    "estimate_drift": (estimate_drift, "a heuristic token count >10% off the real tokenizer"),
    "summary_coverage": (summary_coverage, "identifiers, paths and numbers a summary lost"),
    "evidence_starved": (
        evidence_starved,
        "none of the current turn's tool results is in the prompt although there were some",
    ),
    "error_evidence_lost": (
        error_evidence_lost,
        "a failing test, traceback or compiler error was filtered or dropped",
    ),
    "import_loss": (
        import_loss,
        "parts of an imported request or log of types ctxscope does not read (kept as text)",
    ),
    "cache_break": (
        cache_break,
        "the call read less of the prompt cache than the previous prompt would have served",
    ),
    "repeated_tool_call": (
        repeated_tool_call,
        "the same tool called with the same arguments got the same result again",
    ),
}
DETECTOR_IDS: tuple[str, ...] = tuple(DETECTORS)

#: for bulk work such as ingest: every detector, no counterfactual search (a fix costs up
#: to ``fix_build_budget`` re-runs); ``diagnose`` with the defaults adds the fixes on demand
INGEST_OPTIONS = DiagnosticsOptions(counterfactuals=False)
SEVERITIES: tuple[str, ...] = ("info", "warning", "error")


def severity_at_least(finding: Finding, severity: str) -> bool:
    if severity not in SEVERITY_RANK:
        raise InputError(f"unknown severity {severity!r}; choose one of {', '.join(SEVERITIES)}")
    return SEVERITY_RANK[finding.severity] >= SEVERITY_RANK[severity]


def ensure_built(trace: Trace) -> Trace:
    """The trace itself, or — for a trace recorded without a result — the trace re-built."""
    if trace.result is not None:
        return trace
    from ctxcore.pipeline import build, resolve_config

    cfg = resolve_config(trace.config, trace.input)
    return trace.model_copy(update={"config": cfg, "result": build(trace.input, cfg)})


#: the detectors that read the session's other turns (``TraceView.session_traces``): user
#: constraints from earlier turns, an error carried turn after turn, summaries of earlier
#: content, the prompt cache over the earlier calls, tool calls repeated from them. The
#: others see only the trace itself (tests/test_diagnostics_reuse.py holds each of them to
#: that).
SESSION_DETECTORS: frozenset[str] = frozenset(
    {"must_have_lost", "stale_or_repeated", "summary_coverage", "cache_break", "repeated_tool_call"}
)
#: for a session detector that reads other turns only in some traces: whether it does in
#: this one (held to it by the same test)
READS_OTHER_TURNS: dict[str, Callable[[TraceView], bool]] = {
    "summary_coverage": cites_other_packets,
}


def reads_other_turns(detector: str, view: TraceView) -> bool:
    """Does ``detector`` read the session's other turns for the trace of ``view``?"""
    if detector not in SESSION_DETECTORS:
        return False
    when = READS_OTHER_TURNS.get(detector)
    return when is None or when(view)


def diagnose(
    trace: Trace,
    *,
    session_traces: Iterable[Trace] | None = None,
    options: DiagnosticsOptions | None = None,
    rebuilt: BuildResult | None = None,
    alone: Sequence[Finding] | None = None,
    folds: SessionFolds | None = None,
) -> list[Finding]:
    """Every finding for one trace, most severe first.

    ``session_traces`` are the other turns of the session (any order; only earlier turns
    are used) for the cross-turn checks: user constraints from earlier turns, errors carried
    turn after turn, summaries of earlier content. ``rebuilt`` is what
    ``rebuild(trace)`` returns (the pipeline re-run on the captured input with the trace's
    config), for a caller that has just made that very build (``ctxcore.replay``): the
    detectors that compare with a re-run then use it instead of building again. It must be
    that build, not merely a similar one; the findings are the same either way.

    ``alone`` is this trace's findings as ``diagnose(trace, options=options)`` gave them
    without ``session_traces``, by this very code (``fingerprint()``: the store keeps the
    findings it computed at insert with it): the detectors that do not read other turns for
    this trace (``reads_other_turns``) are taken from it instead of run again, the findings
    in the same order as ever.

    ``folds`` is ``diagnose_session``'s: the session's traces in the order it diagnoses
    them, ``session_traces`` being those before this one; the session detectors then carry
    what they gather from the earlier turns over from the turn before (the same findings).
    """
    opts = options or DiagnosticsOptions()
    unknown = [d for d in (opts.enabled or ()) if d not in DETECTORS]
    if unknown:
        raise InputError(
            f"unknown detector(s) {', '.join(sorted(unknown))}; "
            f"choose from {', '.join(DETECTOR_IDS)}"
        )
    trace = ensure_built(trace)
    view = TraceView(
        trace, opts, [t for t in (session_traces or ()) if t.result is not None], rebuilt, folds
    )
    found: list[Finding] = []
    if alone is not None:
        again = {d for d in DETECTORS if opts.wants(d) and reads_other_turns(d, view)}
        found = [f for f in alone if f.detector not in again]
    for det_id, (fn, _) in DETECTORS.items():
        if opts.wants(det_id) and (alone is None or det_id in again):
            found.extend(fn(view))
    if opts.counterfactuals and opts.rerun:
        found = _attach_fixes(view, found)
    order = {d: i for i, d in enumerate(DETECTORS)}
    return sorted(found, key=lambda f: (-SEVERITY_RANK[f.severity], order[f.detector]))


def fingerprint() -> str:
    """What the findings of this process depend on, as a short hash: the source of every
    ctxcore module (the detectors, the pipeline they re-run, the tokenizers, the models),
    Python's version (its regular expressions and Unicode tables) and the versions of the
    libraries that compute (numpy, pydantic, tiktoken, toktok-rs). Findings stored with
    the same fingerprint are what this code would compute again."""
    import ctxcore

    return source_fingerprint(Path(ctxcore.__file__).parent)


def _attach_fixes(view: TraceView, found: list[Finding]) -> list[Finding]:
    """A verified smallest fix on must_have_lost findings about dropped/filtered packets."""
    budget = view.options.max_counterfactuals
    builds = view.options.fix_build_budget
    cache: BuildCache = {}
    out = []
    for f in found:
        d = view.by_id.get(f.packet_ids[0]) if len(f.packet_ids) == 1 else None
        if (
            budget > 0
            and f.detector == "must_have_lost"
            and f.fix is None
            and d is not None
            and (d.status in LOST or d.status == Status.SUMMARIZED)
        ):
            budget -= 1
            before = len(cache)
            cf = smallest_fix(view.trace, d.packet_id, max_builds=max(builds, 0), cache=cache)
            builds -= len(cache) - before
            if cf is not None:
                f = f.model_copy(
                    update={
                        "fix": cf.patch,
                        "evidence": {**f.evidence, "fix_label": cf.label, "fix": cf.sentence},
                    }
                )
        out.append(f)
    return out


def diagnose_session(
    traces: Sequence[Trace],
    *,
    options: DiagnosticsOptions | None = None,
    alone: Mapping[str, Sequence[Finding]] | None = None,
) -> SessionDiagnosis:
    """Findings per turn of one session, and the first turn where each item was lost.

    ``alone`` maps trace ids to their findings as ``diagnose(trace, options=options)`` gave
    them by this very code (the store's, ``Store.stored_findings`` with ``fingerprint()``):
    those turns run only the detectors that read the other turns (``diagnose``'s ``alone``).
    """
    if not traces:
        raise InputError("diagnose_session needs at least one trace")
    sessions = sorted({t.session_id for t in traces})
    if len(sessions) > 1:
        raise InputError(
            f"traces from {len(sessions)} sessions ({', '.join(sessions[:3])}) were given; "
            "diagnose one session at a time"
        )
    ordered = sorted((ensure_built(t) for t in traces), key=lambda t: (t.turn, t.created_at))
    folds = SessionFolds(ordered)  # each turn's detectors carry on from the turn before's
    turns = []
    for i, t in enumerate(ordered):
        mine = alone.get(t.trace_id) if alone is not None else None
        findings = diagnose(t, session_traces=ordered[:i], options=options, alone=mine, folds=folds)
        turns.append(TurnFindings(trace_id=t.trace_id, turn=t.turn, findings=findings))
    return SessionDiagnosis(session_id=sessions[0], turns=turns, lost=lost_items(ordered, turns))


__all__ = [
    "Counterfactual",
    "DETECTORS",
    "DETECTOR_IDS",
    "DiagnosticsOptions",
    "INGEST_OPTIONS",
    "READS_OTHER_TURNS",
    "SESSION_DETECTORS",
    "LostItem",
    "SEVERITIES",
    "SessionDiagnosis",
    "TurnFindings",
    "counterfactuals",
    "diagnose",
    "diagnose_session",
    "ensure_built",
    "fingerprint",
    "patched_config",
    "reads_other_turns",
    "rebuild",
    "severity_at_least",
    "smallest_fix",
    "source_fingerprint",
]
