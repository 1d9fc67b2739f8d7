"""What a failure of the store's file means, in one line a person can act on.

DuckDB words its failures for its developers ("Corrupt database file: computed checksum
... in block at location 0"); the CLI and the app show one line saying what happened to
the store and what to do. Only a live lock held by another process is
``StoreLockedError``: a damaged file must never read as "in use" (its message mentions a
"block", which once passed for "lock"). See docs/design.md, "Store".
"""

from __future__ import annotations

import re
from pathlib import Path

from ctxcore.errors import StoreError, StoreLockedError

_LOCK_RE = re.compile(r"held in (?P<prog>.+?) \(PID (?P<pid>\d+)\)")
#: DuckDB's words for a file that is not a readable database (bit flips, a cut copy).
_DAMAGED = (
    "corrupt",
    "checksum",
    "not a valid duckdb database",
    "could not read enough bytes",
    "invalid block",
    "too short",
)


def store_fault(path: Path, exc: BaseException) -> StoreError:
    """A DuckDB (or OS) failure on the store as one line: what happened, what to do."""
    msg = str(exc)
    first = msg.strip().splitlines()[0] if msg.strip() else type(exc).__name__
    low = msg.lower()
    if "could not set lock" in low or "conflicting lock" in low:
        m = _LOCK_RE.search(msg)
        holder = f"PID {m['pid']} ({Path(m['prog']).name})" if m else "another process"
        return StoreLockedError(
            f"{path} is in use by {holder}; only one process can write the store: drop your "
            f"trace files into the folder that process watches (e.g. {path.parent}/) instead"
        )
    if "no space left" in low or "disk is full" in low or "disk full" in low:
        return StoreError(
            f"{path}: the disk is full ({first}); nothing of the interrupted write was "
            "stored: free some space and run the command again"
        )
    if "read-only file system" in low or "permission denied" in low:
        return StoreError(
            f"{path}: cannot write the store or its folder ({first}); make the folder "
            "writable or point --db (CTXSCOPE_DB) at a writable place"
        )
    if any(word in low for word in _DAMAGED):
        return StoreError(
            f"{path} is damaged or not a ctxscope store ({first}); move it aside (e.g. "
            f"mv {path} {path}.broken) and ingest the trace files again to rebuild it"
        )
    if "invalidated" in low:
        return StoreError(
            f"{path}: the store stopped after an earlier failure ({first}); close the app or "
            "command and open the store again"
        )
    return StoreError(f"{path}: the trace store failed ({first})")
