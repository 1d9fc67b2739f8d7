"""Where ctxcore's worker processes come from, how many there may be, and how they end: ingest's
parsers and replay's workers.

Both are forked from multiprocessing's fork server, which imports what the workers need once
(docs/design.md, "Ingest and the watcher" and "Diagnostics"). Every worker ends with the
process that started it, also when that one is killed with SIGKILL (``die_with``).

The server listens on an AF_UNIX socket in the temporary folder
(``pymp-XXXXXXXX/listener-XXXXXXXX`` under it), and a socket's path holds at most 107 bytes on
Linux (103 on macOS): under a long ``TMPDIR`` the server cannot start ("AF_UNIX path too
long"). There the workers are spawned instead; each then imports what it needs itself (slower
to start, the same results).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from multiprocessing import get_context
from multiprocessing.context import BaseContext

from ctxcore.errors import InputError

#: what multiprocessing puts after the temporary folder: "/pymp-XXXXXXXX/listener-XXXXXXXX"
SOCKET_TAIL = len("/pymp-12345678/listener-12345678")
#: the longest AF_UNIX path (``sun_path`` less its terminating NUL)
SOCKET_PATH_MAX = 103 if sys.platform == "darwin" else 107
#: ``--workers`` may ask for up to this many processes, or one per CPU where there are more:
#: each is a Python process of its own (tens to hundreds of MB), and past the CPUs more only
#: cost memory
WORKERS_CAP = 32


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs (one of another user's counts: it exists)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def fork_server_fits() -> bool:
    """Can the fork server's socket be made in the temporary folder?"""
    return len(os.fsencode(tempfile.gettempdir())) + SOCKET_TAIL <= SOCKET_PATH_MAX


def worker_context(preload: Sequence[str]) -> BaseContext:
    """The fork server's context, the server importing ``preload``; where its socket would
    not fit, the spawn context."""
    if not fork_server_fits():
        return get_context("spawn")
    ctx = get_context("forkserver")
    ctx.set_forkserver_preload(list(preload))
    return ctx


def workers_limit() -> int:
    """The most worker processes a command may be asked for (``WORKERS_CAP``)."""
    return max(os.cpu_count() or 1, WORKERS_CAP)


def check_workers(n: int, flag: str = "--workers") -> int:
    """``n`` if it is a number of workers a command may start, else an ``InputError``."""
    limit = workers_limit()
    if not 1 <= n <= limit:
        raise InputError(
            f"{flag} {n}: give a number from 1 to {limit} (each worker is a process of its own)"
        )
    return n


_PR_SET_PDEATHSIG = 1


def die_with(owner: int) -> None:
    """End this worker as soon as the process ``owner`` that started it is gone, even killed
    with SIGKILL (call it first thing in a worker). A worker's parent is the fork server, which
    lives on while any worker holds its pipe, and a worker waiting for its next job holds the
    pool's queue: so the worker watches the owner itself (a pidfd where Linux has them, else a
    poll), and dies with the fork server too (``PR_SET_PDEATHSIG``). Then the fork server, its
    last client gone, exits by itself, and the resource tracker with it."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    try:
        fd: int | None = os.pidfd_open(owner)
    except ProcessLookupError:
        os._exit(1)
    except (AttributeError, OSError):
        fd = None

    def watch() -> None:
        if fd is not None:
            select.select([fd], [], [])
        else:
            while True:
                time.sleep(0.5)
                try:
                    os.kill(owner, 0)
                except ProcessLookupError:
                    break
                except PermissionError:
                    continue
        os._exit(1)

    threading.Thread(target=watch, name="ctxscope-owner-watch", daemon=True).start()
