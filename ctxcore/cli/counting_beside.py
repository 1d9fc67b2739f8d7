"""Which imports count in a process of their own (``ctxcore.counting``), and that process's
life beside the command: ``ctxscope import -o`` of a long session log (docs/design.md,
"Capture, import, export, redaction"). The CLI's, not the core's: telling a session log
needs the session readers (``formats.sessions.sniff``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence

from ctxcore.counting import CountingProcess

#: Below this many bytes of files to import, ``import -o`` counts in its own process: the
#: other process's start (~0.5 s of CPU, on the other core) is worth it for a long log only.
MIN_BYTES = 1024 * 1024


@contextlib.contextmanager
def counting_beside(paths: Sequence[str], fmt: str = "auto") -> Iterator[CountingProcess | None]:
    """While the block runs, an import of ``paths`` (``--from fmt``) that is worth it
    (``worth_it``) has its exact counts made in a ``CountingProcess``
    (``tokens.count_elsewhere``). The process is started before the session readers are
    imported to tell whether the files are session logs (they are most of the command's
    imports), and killed if they are not; it ends with the block, killed at once if the
    block raised (Ctrl-C included)."""
    proc = CountingProcess.start() if _long(paths, fmt) else None
    if proc is not None:
        try:
            logs = _session_logs(paths, fmt)
        except BaseException:
            proc.kill()
            raise
        if not logs:
            proc.kill()
            proc = None
    if proc is None:
        yield None
        return
    from ctxcore import tokens

    tokens.count_elsewhere(proc.backend)
    try:
        yield proc
    except BaseException:
        tokens.count_elsewhere(None)
        proc.kill()
        raise
    tokens.count_elsewhere(None)
    proc.close()


def worth_it(paths: Sequence[str], fmt: str = "auto") -> bool:
    """Whether an import of ``paths`` (``--from fmt``) is worth a counting process: session
    logs (their importer counts a batch of calls' new texts at once, and reads on while they
    are counted) of ``MIN_BYTES`` or more together, or a folder holding one. Other formats
    count each trace's texts before the next is made: a request to the other process each
    (~0.1-0.2 ms), which thousands of small traces would pay many times over."""
    return _long(paths, fmt) and _session_logs(paths, fmt)


#: the formats whose importer counts in batches (``formats.sessions.LOG_FORMATS``, said
#: here so that telling needs no import)
_LOG_FORMATS = ("claude-code", "codex", "pi")


def _long(paths: Sequence[str], fmt: str) -> bool:
    """``MIN_BYTES`` of files or more, or a folder, in a format that may be a session log."""
    if fmt != "auto" and fmt not in _LOG_FORMATS:
        return False
    total = 0
    for p in paths:
        if os.path.isdir(p):
            return True
        try:
            total += os.stat(p).st_size
        except OSError:
            continue
    return total >= MIN_BYTES


def _session_logs(paths: Sequence[str], fmt: str) -> bool:
    """Whether ``paths`` are session logs: as ``--from`` says, else the first file (a
    folder's first JSONL file) sniffed as one (``formats.sessions.sniff``)."""
    if fmt != "auto":
        return fmt in _LOG_FORMATS
    from ctxcore.formats.sessions import sniff

    for p in paths:
        if os.path.isdir(p):
            return any(sniff(f) is not None for f in _logs_below(p))
        if os.path.isfile(p):
            return sniff(p) is not None
    return False


def _logs_below(folder: str) -> Iterator[str]:
    """The first JSONL file below ``folder`` (in name order), if any."""
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".jsonl") and not name.startswith("."):
                yield os.path.join(root, name)
                return


__all__ = ["MIN_BYTES", "counting_beside", "worth_it"]
