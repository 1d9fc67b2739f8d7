"""Reading a DuckDB store that another process may be writing (docs/design.md, "Store"):
the DuckDB engine's ``Engine.read`` (``engines.read_store`` picks it for a file path).

DuckDB lets one process open a file read-write, and while it does, no other process may open
it at all, not even read-only (the lock is taken on open, shared or exclusive). The app holds
its store for as long as it runs, so a command that only reads (``replay``, ``export``) would
fail whenever the app is open. ``read_duckdb`` opens the store read-only when it can; when
another process holds it, it copies the file and its write-ahead log as they are now and opens
the copy read-only: the reader sees every transaction committed before the copy, the writer
is never disturbed, and the copy is removed afterwards.

A copy taken while the writer writes may be torn. The file's and the log's size and mtime are
compared before and after each copy, and DuckDB itself refuses a torn copy (block checksums,
and a log whose checkpoint iteration is not the file's): either way the copy is taken again, a
few times, before the command says in one line that the store kept changing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ctxcore.errors import StoreError, StoreLockedError
from ctxcore.processes import pid_alive
from ctxcore.store.tracestore import TraceStore

#: copies of a busy store tried before giving up, each after a longer pause (up to
#: ``_MAX_PAUSE``): a writer committing without a break tore a third of the copies
COPY_ATTEMPTS = 20
_PAUSE = 0.05
_MAX_PAUSE = 0.5

_Stamp = tuple[int, int, int] | None


def _stamp(path: Path) -> _Stamp:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _wal(path: Path) -> Path:
    return path.with_name(path.name + ".wal")


def _copy_of(src: Path, dst: Path) -> bool:
    """Copy the store and its log to ``dst``; False when either changed meanwhile."""
    before = (_stamp(src), _stamp(_wal(src)))
    shutil.copyfile(src, dst)
    try:
        shutil.copyfile(_wal(src), _wal(dst))
    except FileNotFoundError:  # no log: everything is checkpointed into the file
        _wal(dst).unlink(missing_ok=True)
    return (_stamp(src), _stamp(_wal(src))) == before


def _snapshot_dir(path: Path) -> Path:
    """A folder for the copy beside the store (the same disk, where a copy of a big store
    fits if the store did), else in the temporary folder. Copies left by a reader that was
    killed (its PID is gone) are removed first."""
    prefix = f".{path.name}.read-"
    with contextlib.suppress(OSError):
        for old in path.parent.glob(f"{prefix}*"):
            pid = old.name[len(prefix) :].split("-", 1)[0]
            if pid.isdigit() and not pid_alive(int(pid)):
                shutil.rmtree(old, ignore_errors=True)
    try:
        return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=path.parent))
    except OSError:
        return Path(tempfile.mkdtemp(prefix=f"ctxscope-read-{os.getpid()}-"))


@contextmanager
def _snapshot(path: Path) -> Iterator[TraceStore]:
    where = _snapshot_dir(path)
    copy = where / path.name
    try:
        last: StoreError | None = None
        for attempt in range(COPY_ATTEMPTS):
            if attempt:
                time.sleep(min(_PAUSE * attempt, _MAX_PAUSE))
            try:
                steady = _copy_of(path, copy)
            except OSError as exc:
                raise StoreError(
                    f"{path} is open for writing in another process, and the copy of it "
                    f"to read could not be made in {where} ({exc.strerror or exc}): free some "
                    "space there, or stop that process"
                ) from exc
            if not steady:
                continue
            try:
                store = TraceStore(copy, read_only=True)
            except StoreError as exc:
                last = exc  # torn between two writes of the holder, or really damaged
                continue
            with store:
                yield store
            return
        if last is not None:
            # the same failure on every steady copy: the store itself is at fault
            raise StoreError(str(last).replace(str(copy), str(path)))
        raise StoreError(
            f"{path} kept changing while it was copied to be read (it is written by "
            f"another process); run the command again"
        )
    finally:
        shutil.rmtree(where, ignore_errors=True)


@contextmanager
def read_duckdb(
    path: str | Path, *, note: Callable[[str], None] | None = None
) -> Iterator[TraceStore]:
    """The store at ``path``, read-only, even while another process writes it (then a copy
    taken now; ``note`` is told so in one line). Any fault of the file is one ``StoreError``
    (``store_fault``), on open or on a read."""
    path = Path(path)
    try:
        store = TraceStore(path, read_only=True)
    except StoreLockedError:
        if note is not None:
            note(f"{path} is open for writing in another process; reading a copy of it as of now")
        with _snapshot(path) as copied:
            yield copied
        return
    with store:
        yield store


__all__ = ["COPY_ATTEMPTS", "read_duckdb"]
