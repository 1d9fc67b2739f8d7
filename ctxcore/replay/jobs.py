"""One session's replay (a job), in this process or in a worker process."""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxcore.diagnostics.context import SessionFolds
from ctxcore.models import Finding, Trace
from ctxcore.replay.compare import first_losses, turn_report
from ctxcore.replay.report import FirstLoss, TurnError, TurnReport
from ctxcore.replay.stored import TraceLike, _turn_order
from ctxcore.replay.variants import _rebuild_of, _same_build, _side


@dataclass(frozen=True)
class _Job:
    """One session's traces (any order; replayed in turn order) and the two sides."""

    traces: Sequence[TraceLike]
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    findings: bool
    keep_variants: bool
    #: keep the recorded side's findings for the next replay (in this process only: a
    #: worker's memory would be spent on sessions it is not asked about again)
    remember: bool = False
    #: the recorded side's findings as an earlier replay of these traces found them
    #: (``Recorded``: the trace ids in turn order, each turn's findings), or None
    known: Recorded | None = None
    #: hand the recorded side's findings back when this job diagnoses them (``known``)
    share: bool = False


#: a session's recorded side as diagnosed: its trace ids in turn order, each turn's findings
Recorded = tuple[tuple[str, ...], list[list[Finding]]]


@dataclass(frozen=True)
class _JobResult:
    turns: list[TurnReport]
    errors: list[TurnError]
    first_lost: list[FirstLoss]
    findings_before: Counter[str]
    findings_after: Counter[str]
    variants: list[Trace]
    #: the recorded side's findings, diagnosed by this job (for the next replay of the
    #: same traces, ``replay(recorded=...)``), else None
    recorded: Recorded | None = None


class _RecordedFindings:
    """The recorded side's findings per session, kept for the next replay of the session.

    Replaying against the recording diagnoses the recorded builds, and the next knob change
    (the app's Replay view, a script trying settings) would diagnose the very same builds
    again. A few sessions are kept; an entry is used only for the same traces in the same
    order (the same objects, or equal ones: a cache that returns copies still hits). At
    most ``sessions`` sessions and ``traces`` traces are kept (the traces are held alive).
    """

    def __init__(self, sessions: int = 4, traces: int = 500) -> None:
        self._data: OrderedDict[tuple[str, ...], tuple[list[Trace], list[list[Finding]]]] = (
            OrderedDict()
        )
        self._sessions = sessions
        self._traces = traces
        self._lock = threading.Lock()

    def get(self, traces: list[Trace]) -> list[list[Finding]] | None:
        key = tuple(t.trace_id for t in traces)
        with self._lock:
            entry = self._data.get(key)
            if entry is not None:
                self._data.move_to_end(key)
        if entry is None:
            return None
        kept, found = entry
        if all(x is y or x == y for x, y in zip(kept, traces, strict=True)):
            return found
        return None

    def put(self, traces: list[Trace], found: list[list[Finding]]) -> None:
        if len(traces) > self._traces:
            return
        key = tuple(t.trace_id for t in traces)
        with self._lock:
            self._data[key] = (list(traces), found)
            self._data.move_to_end(key)
            while len(self._data) > self._sessions or (
                sum(len(k) for k in self._data) > self._traces
            ):
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


RECORDED_FINDINGS = _RecordedFindings()


def _run_job(job: _Job) -> _JobResult:
    """Replay one session turn by turn: both sides of a turn are built and diagnosed one after
    the other, so every build of the turn reuses the one prepared form of its input (the
    pipeline keeps a few), and a turn the new settings build exactly as before (and every
    turn before it) has the same findings without diagnosing it again."""
    stored: dict[str, Sequence[Finding]] = {}
    traces, errors = _turn_order(job.traces, stored)
    if not traces:
        return _JobResult([], errors, [], Counter(), Counter(), [])
    session = _SessionReplay(job, traces, stored, errors)
    for i, rec in enumerate(traces):
        session.replay_turn(i, rec)
    session.remember()
    return session.result()


class _SessionReplay:
    """One session being replayed (``_run_job``): per turn, each side's build (None where it
    failed: the turn is reported as an error and left out of that side's history for the
    cross-turn detectors) and each side's findings."""

    def __init__(
        self,
        job: _Job,
        traces: list[Trace],
        stored: dict[str, Sequence[Finding]],
        errors: list[TurnError],
    ) -> None:
        self.job = job
        self.traces = traces
        #: the findings that came with a stored trace, by its id (``TraceJson.findings``)
        self.stored = stored
        self.errors = errors
        #: the recorded side's findings are kept for the next replay of the session
        self.cache = job.findings and job.before is None and job.remember
        self.known = RECORDED_FINDINGS.get(traces) if self.cache else None
        ids = tuple(t.trace_id for t in traces)
        if job.findings and job.before is None and job.known is not None and job.known[0] == ids:
            self.known = job.known[1]
        self.side_a: list[Trace | None] = []
        self.side_b: list[Trace | None] = []
        self.found_a: list[list[Finding]] = []
        self.found_b: list[list[Finding]] = []
        #: each side's builds so far, for its session detectors to carry what they gather
        #: from one turn to the next (``SessionFolds``); None once a build cannot be added
        self.folds_a: SessionFolds | None = SessionFolds([])
        self.folds_b: SessionFolds | None = SessionFolds([])
        #: this turn and every one before it are the same builds on both sides
        self.same_so_far = True

    def replay_turn(self, i: int, rec: Trace) -> None:
        """Build and diagnose both sides of turn ``i`` (the recorded trace ``rec``)."""
        a, b = self._build(rec)
        self.folds_a = _grown(self.folds_a, a)
        self.folds_b = _grown(self.folds_b, b)
        if not self.job.findings:
            self.found_a.append([])
            self.found_b.append([])
            return
        fresh = [x for x in (b, a) if x is not None and x is not rec]  # built just now
        self.same_so_far = self.same_so_far and (a is None or b is None or _same_build(a, b))
        xa: list[Finding] = []
        if self.known is not None:
            xa = self.known[i]
        elif a is not None:
            # the recording as stored: its findings alone are the store's
            alone = self.stored.get(rec.trace_id) if a is rec else None
            xa = _diagnose(a, self.side_a[:i], fresh, alone, self.folds_a)
        xb: list[Finding] = []
        if b is None:
            pass
        elif self.same_so_far:
            xb = xa
        else:
            xb = _diagnose(b, self.side_b[:i], fresh, folds=self.folds_b)
        self.found_a.append(xa)
        self.found_b.append(xb)

    def _build(self, rec: Trace) -> tuple[Trace | None, Trace | None]:
        """Both sides of one turn built (None: failed, and the turn's error noted). A variant
        the report does not keep is built without its sentences (the report reads none of
        them)."""
        ra = _side(rec, self.job.before, self.job.keep_variants)
        rb = _side(rec, self.job.after, self.job.keep_variants)
        a = ra if isinstance(ra, Trace) else None
        b = rb if isinstance(rb, Trace) else None
        self.side_a.append(a)
        self.side_b.append(b)
        if a is None or b is None:
            failed = "both" if a is None and b is None else "before" if a is None else "after"
            why = ra if isinstance(ra, str) else rb
            self.errors.append(
                TurnError(
                    session_id=rec.session_id,
                    turn=rec.turn,
                    trace_id=rec.trace_id,
                    side=failed,
                    message=str(why),
                )
            )
            self.same_so_far = self.same_so_far and a is None and b is None
        return a, b

    def remember(self) -> None:
        """Keep the recorded side's findings for the next replay (``RECORDED_FINDINGS``)."""
        if self.cache and self.known is None and all(x is not None for x in self.side_a):
            RECORDED_FINDINGS.put(self.traces, self.found_a)

    def _recorded(self) -> Recorded | None:
        """The recorded side's findings to hand back (``_Job.share``): diagnosed here, on
        every turn (a turn whose recording did not build has none to share)."""
        job = self.job
        if not (job.share and job.findings and job.before is None and self.known is None):
            return None
        if any(x is None for x in self.side_a):
            return None
        return tuple(t.trace_id for t in self.traces), self.found_a

    def result(self) -> _JobResult:
        """The session's turns compared, its first losses and findings by detector."""
        built_a = [(t, x) for t, x in zip(self.side_a, self.found_a, strict=True) if t is not None]
        built_b = [(t, x) for t, x in zip(self.side_b, self.found_b, strict=True) if t is not None]
        evidence: dict[str, bool] = {}
        sides = zip(self.traces, self.side_a, self.side_b, self.found_a, self.found_b, strict=True)
        turns = [
            turn_report(rec, a, b, xa, xb, evidence)
            for rec, a, b, xa, xb in sides
            if a is not None and b is not None
        ]
        kept: list[Trace] = []  # the rebuilt traces, with ``keep_variants``
        if self.job.keep_variants and self.job.before is not None:
            kept += [t for t, _ in built_a]
        if self.job.keep_variants:
            kept += [t for t, _ in built_b]
        return _JobResult(
            recorded=self._recorded(),
            turns=turns,
            errors=self.errors,
            first_lost=first_losses(self.traces[0].session_id, built_a, built_b, self.job.findings),
            findings_before=Counter(f.detector for _, x in built_a for f in x),
            findings_after=Counter(f.detector for _, x in built_b for f in x),
            variants=kept,
        )


def _grown(folds: SessionFolds | None, built: Trace | None) -> SessionFolds | None:
    """A side's folds with its build of this turn added (a failed build is left out of the
    side's history, so out of its folds too); None once a build cannot be added: the rest
    of the side is diagnosed without them (the same findings, from the earlier turns)."""
    if folds is None or built is None:
        return folds
    return folds if folds.append(built) else None


def _diagnose(
    trace: Trace,
    history: list[Trace | None],
    fresh: list[Trace],
    alone: Sequence[Finding] | None = None,
    folds: SessionFolds | None = None,
) -> list[Finding]:
    """``trace``'s findings with ``INGEST_OPTIONS``, after the turns of ``history`` that built;
    a build of ``fresh`` (made just now) that is its rebuild is not made again. ``folds``:
    the side's builds up to and with ``trace`` (``_SessionReplay``), as ``diagnose_session``
    passes them."""
    from ctxcore.diagnostics import INGEST_OPTIONS, diagnose

    built = next((x for x in fresh if _rebuild_of(trace, x)), None)
    return diagnose(
        trace,
        session_traces=[x for x in history if x is not None],
        options=INGEST_OPTIONS,
        rebuilt=built.result if built is not None else None,
        alone=alone,
        folds=folds,
    )


#: the collector's thresholds in a replay worker (Python's defaults: 700, 10, 10)
_WORKER_GC = (50_000, 20, 100)


def _worker_start() -> None:
    """A worker process's setup. A session's replay makes some hundred thousand objects that
    live until it is done (traces, builds, findings, the detectors' memos) and almost no
    cycles: with Python's default thresholds the collector walked the whole heap some twenty
    times a run and took a sixth of the CPU (bench/bench_replay.py). It runs less often, and
    never over what the worker was forked with (the modules the server imported)."""
    import gc

    gc.freeze()
    gc.set_threshold(*_WORKER_GC)


def _run_in_worker(job: _Job) -> _JobResult:
    """``_run_job`` in a worker process, which then lets go of what only this session could
    use: the prepared inputs (the pipeline keeps 64, and no turn of another session is one
    of them) and the detectors' memos (keyed by this session's prompts and packets). Kept,
    a worker held ~50 MB more of them by its twentieth session, for no hit (bench_replay.py:
    the same CPU seconds either way)."""
    from ctxcore.diagnostics.text import clear_memos
    from ctxcore.pipeline.gather import PREPARED

    try:
        return _run_job(job)
    finally:
        PREPARED.clear()
        clear_memos()
