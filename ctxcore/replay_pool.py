"""Where the replay workers come from: the fork server they are forked from and its imports.

Light on purpose (the standard library only): ``ctxscope replay --all`` starts the server
(``start_workers``) before it imports anything heavy, so the server's imports (the replay,
the detectors, the default tokenizer's tables: about two seconds of CPU) overlap the
command's own start and its reading of the store (docs/design.md, "Diagnostics").
"""

from __future__ import annotations

import os
from multiprocessing import forkserver
from multiprocessing.context import BaseContext

from ctxcore.processes import fork_server_fits, worker_context

#: what the fork server imports before it forks a worker: the replay, the default
#: tokenizer's tables (``ctxcore.replay_preload``) and, for a replay with findings, the
#: detectors
PRELOAD = ("ctxcore.replay", "ctxcore.replay_preload")
DIAGNOSTICS = ("ctxcore.diagnostics", "ctxcore.diagnostics.session")


def pool_context(findings: bool) -> BaseContext:
    """The context the replay workers are made in: forked from a server that has imported
    ``PRELOAD`` (and ``DIAGNOSTICS`` when asked for; each worker importing them again cost
    it a third of a second of CPU); spawned where the server's socket does not fit in the
    temporary folder (``ctxcore.processes``)."""
    return worker_context([*PRELOAD, *(DIAGNOSTICS if findings else ())])


def start_workers(findings: bool = True) -> None:
    """Start the server the replay workers are forked from, now, in the background. A later
    replay uses the running server; one with more detectors than it was started for
    imports them in each worker."""
    pool_context(findings)
    if fork_server_fits():
        forkserver.ensure_running()


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)
