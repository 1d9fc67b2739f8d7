"""Where ctxcore's worker processes come from: ingest's parsers and replay's workers.

Both are forked from multiprocessing's fork server, which imports what the workers need once
(docs/design.md, "Ingest and the watcher" and "Diagnostics"). The server listens on an
AF_UNIX socket in the temporary folder (``pymp-XXXXXXXX/listener-XXXXXXXX`` under it), and a
socket's path holds at most 107 bytes on Linux (103 on macOS): under a long ``TMPDIR`` the
server cannot start ("AF_UNIX path too long"). There the workers are spawned instead; each
then imports what it needs itself (slower to start, the same results).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Sequence
from multiprocessing import get_context
from multiprocessing.context import BaseContext

#: what multiprocessing puts after the temporary folder: "/pymp-XXXXXXXX/listener-XXXXXXXX"
SOCKET_TAIL = len("/pymp-12345678/listener-12345678")
#: the longest AF_UNIX path (``sun_path`` less its terminating NUL)
SOCKET_PATH_MAX = 103 if sys.platform == "darwin" else 107


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
