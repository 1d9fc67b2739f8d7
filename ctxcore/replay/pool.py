"""Where the replay workers come from: the fork server they are forked from and its imports.

Light on purpose (the standard library only, and ``ctxcore.replay`` imports its names on first
use): ``ctxscope replay --all`` starts the server (``start_workers``) before it imports anything
heavy, so the server's imports (the replay, the detectors, the default tokenizer's tables:
about two seconds of CPU) overlap the command's own start and its reading of the store
(docs/design.md, "Diagnostics"). The workers end with the replaying process, also when it is
killed with SIGKILL (``worker_pool``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import forkserver
from multiprocessing.context import BaseContext

from ctxcore.processes import die_with, fork_server_fits, worker_context

#: what the fork server imports before it forks a worker: the replay (``jobs``, which a
#: worker runs, and every module it imports), the default tokenizer's tables
#: (``ctxcore.replay.preload``) and, for a replay with findings, the detectors
PRELOAD = ("ctxcore.replay.jobs", "ctxcore.replay.preload")
DIAGNOSTICS = ("ctxcore.diagnostics", "ctxcore.diagnostics.session")


def pool_context(findings: bool) -> BaseContext:
    """The context the replay workers are made in: forked from a server that has imported
    ``PRELOAD`` (and ``DIAGNOSTICS`` when asked for; each worker importing them again cost
    it a third of a second of CPU); spawned where the server's socket does not fit in the
    temporary folder (``ctxcore.processes``)."""
    return worker_context([*PRELOAD, *(DIAGNOSTICS if findings else ())])


def _start(owner: int, then: Callable[[], None]) -> None:
    die_with(owner)
    then()


def worker_pool(n: int, findings: bool, initializer: Callable[[], None]) -> ProcessPoolExecutor:
    """``n`` replay workers (``pool_context``), each set up by ``initializer`` (a module-level
    function). Each ends with this process, however it ends (``ctxcore.processes.die_with``):
    before, a replay killed with SIGKILL left its workers, the fork server and the resource
    tracker running (some 450 MB), the workers waiting on the queue of a pool gone."""
    return ProcessPoolExecutor(
        max_workers=n,
        mp_context=pool_context(findings),
        initializer=_start,
        initargs=(os.getpid(), initializer),
    )


def start_workers(findings: bool = True) -> None:
    """Start the server the replay workers are forked from, now, in the background. A later
    replay uses the running server; one with more detectors than it was started for
    imports them in each worker."""
    pool_context(findings)
    if fork_server_fits():
        forkserver.ensure_running()


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)
