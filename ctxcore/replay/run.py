"""``replay`` and ``replay_sessions``: sessions spread over worker processes, their results
merged into one report."""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait

from ctxcore.errors import InputError
from ctxcore.models import Trace
from ctxcore.replay.jobs import (
    Recorded,
    _Job,
    _JobResult,
    _run_in_worker,
    _run_job,
    _worker_start,
)
from ctxcore.replay.pool import default_workers, worker_pool
from ctxcore.replay.report import FirstLoss, ReplayReport
from ctxcore.replay.stored import TraceLike
from ctxcore.replay.variants import Settings, settings_label

#: below this many traces a process pool costs more than it saves
POOL_MIN_TRACES = 48


def _jobs(traces: Iterable[Trace]) -> list[list[Trace]]:
    by_session: dict[str, list[Trace]] = {}
    for t in traces:
        by_session.setdefault(t.session_id, []).append(t)
    return list(by_session.values())


def _first_key(x: FirstLoss) -> tuple[str, int, str]:
    turns = [n for n in (x.before_turn, x.after_turn) if n is not None]
    return (x.session_id, min(turns, default=0), x.item)


def replay(
    traces: Iterable[Trace],
    settings: Settings | None,
    *,
    against: Settings | None = None,
    findings: bool = True,
    workers: int | None = None,
    keep_variants: bool = False,
    recorded: SharedRecorded | None = None,
) -> ReplayReport:
    """Replay ``traces`` with ``settings`` (a config patch) and compare with the recorded builds.

    ``against`` replaces the recorded side with a second patch ("32K vs 64K"). Traces are
    grouped by session (the cross-turn detectors need the earlier turns of the same side) and
    sessions are spread over ``workers`` processes (default: one per CPU; a small replay runs
    in this process). ``findings=False`` skips the diagnostics (about as costly as the builds:
    a turn rebuilt exactly as recorded, with every turn before it, keeps the recorded findings,
    and the recorded side of a session is diagnosed once per process). ``keep_variants`` keeps
    the rebuilt traces on the report (for ``--save``). ``recorded``: the recorded side's
    findings of each session, shared by the replays of the same traces with other settings
    (``evaluate``): a session found there is not diagnosed again, one diagnosed is added.
    """
    groups = _jobs(traces)
    if len(groups) == 1 or sum(len(g) for g in groups) < POOL_MIN_TRACES:
        workers = 1
    # largest sessions first, so one long session does not finish last on its own
    groups.sort(key=lambda g: -sum(len(t.input.packets) + 1 for t in g))
    return replay_sessions(
        groups,
        settings,
        against=against,
        findings=findings,
        workers=workers,
        keep_variants=keep_variants,
        recorded=recorded,
    )


def replay_sessions(
    sessions: Iterable[Sequence[TraceLike]],
    settings: Settings | None,
    *,
    against: Settings | None = None,
    findings: bool = True,
    workers: int | None = None,
    keep_variants: bool = False,
    recorded: SharedRecorded | None = None,
) -> ReplayReport:
    """``replay`` over sessions read one at a time (each the traces of one session, as
    ``Trace``s or as their stored JSON, ``TraceJson``).

    At most two sessions per worker are in flight, so a caller that reads sessions lazily
    (``ctxscope replay --all``) holds a few sessions in memory, never the whole store. Fewer
    than ``POOL_MIN_TRACES`` traces in all are replayed in this process: starting the
    workers would cost more than they save.
    """
    start = time.perf_counter()
    before = None if against is None else dict(against)
    after = None if settings is None else dict(settings)
    share = recorded is not None and against is None and findings
    jobs = (
        _Job(g, before, after, findings, keep_variants, known=_known(recorded, g), share=share)
        for g in sessions
        if g
    )
    n = workers if workers is not None else default_workers()
    results = _run_jobs(jobs, n, findings)
    if recorded is not None:
        recorded.update((_session_key(r.recorded[0]), r.recorded) for r in results if r.recorded)
    if not results:
        raise InputError("replay: no traces were selected")
    if not any(r.turns for r in results) and any(r.errors for r in results):
        raise InputError(
            "replay: no turn could be replayed; the first error: "
            + next(f"{e.trace_id}: {e.message}" for r in results for e in r.errors)
        )
    return _merge(results, settings_label(against), settings_label(settings), findings, start)


#: the recorded side's findings of sessions, by their trace ids sorted (``replay``'s
#: ``recorded``): the ids in turn order and each turn's findings
SharedRecorded = dict[tuple[str, ...], Recorded]


def _session_key(ids: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(ids))


def _known(recorded: SharedRecorded | None, session: Sequence[TraceLike]) -> Recorded | None:
    """The recorded side's findings of ``session`` in ``recorded``, if there (the job uses
    them only for the same trace ids in the same turn order)."""
    if not recorded:
        return None
    return recorded.get(_session_key(t.trace_id for t in session))


def _run_jobs(jobs: Iterator[_Job], n: int, findings: bool) -> list[_JobResult]:
    """Every job's result: on ``n`` worker processes once the jobs looked ahead at reach
    ``POOL_MIN_TRACES`` traces, else in this process (which keeps the recorded side's
    findings for the next replay, ``RECORDED_FINDINGS``)."""
    first: list[_Job] = []
    if n > 1:
        # look ahead until the replay is big enough for a pool (or the sessions run out)
        for job in jobs:
            first.append(job)
            if sum(len(j.traces) for j in first) >= POOL_MIN_TRACES:
                break
        else:
            n = 1
    todo = itertools.chain(first, jobs)
    if n <= 1:
        return [_run_job(dataclasses.replace(j, remember=True)) for j in todo]
    results: list[_JobResult] = []
    with worker_pool(n, findings, _worker_start) as pool:
        pending: set[Future[_JobResult]] = set()
        for job in todo:
            pending.add(pool.submit(_run_in_worker, job))
            if len(pending) >= 2 * n:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                results.extend(f.result() for f in done)
        results.extend(f.result() for f in pending)
    return results


def _merge(
    results: list[_JobResult], before: str, after: str, findings: bool, start: float
) -> ReplayReport:
    """The sessions' results as one report, in session, turn and trace order; ``start``: when
    the replay started (``time.perf_counter``)."""
    fb: Counter[str] = Counter()
    fa: Counter[str] = Counter()
    for r in results:
        fb.update(r.findings_before)
        fa.update(r.findings_after)
    return ReplayReport(
        before=before,
        after=after,
        turns=sorted(
            (t for r in results for t in r.turns), key=lambda t: (t.session_id, t.turn, t.trace_id)
        ),
        first_lost=sorted((x for r in results for x in r.first_lost), key=_first_key),
        findings_before=dict(sorted(fb.items())),
        findings_after=dict(sorted(fa.items())),
        findings_compared=findings,
        errors=sorted(
            (e for r in results for e in r.errors), key=lambda e: (e.session_id, e.turn, e.trace_id)
        ),
        seconds=round(time.perf_counter() - start, 3),
        variants=[v for r in results for v in r.variants],
    )
