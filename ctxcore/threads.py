"""Helper threads and the signals that stop a command (docs/design.md, "Command line").

Python runs a signal's handler in the main thread only. The kernel gives a signal sent to
the process to any thread that does not block it: one that lands on a helper thread trips
the handler's flag, and the main thread, waiting in a write or a read (an output FIFO whose
reader has stalled), does not wake until that call ends, which may be never. A helper
thread therefore blocks the stop signals first thing, and they reach the main thread.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

#: what a terminal (Ctrl-C) or a supervisor sends to stop a command
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


def leave_signals_to_main() -> None:
    """Block ``STOP_SIGNALS`` in the calling thread (a helper thread's first call), so the
    kernel gives them to the main thread. Nothing to do where threads have no signal mask
    (Windows, where Ctrl-C is no signal)."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def helper_thread(
    target: Callable[[], object], name: str, *, daemon: bool = False
) -> threading.Thread:
    """A thread (not started) that runs ``target`` with ``STOP_SIGNALS`` blocked: only in the
    thread it starts, never in a caller that runs ``target`` itself."""

    def run() -> None:
        leave_signals_to_main()
        target()

    return threading.Thread(target=run, name=name, daemon=daemon)
