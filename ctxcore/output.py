"""Where a command's output goes: whole or nothing onto a file, in place onto anything else.

A rename is what makes a write whole or nothing, and a rename replaces whatever stood at the
target: run as root, ``-o /dev/null`` used to leave the machine with a regular file where its
null device had been. So the kind of the target decides (docs/design.md, "Capture, import,
export, redaction", "Writing outputs"):

- a regular file, or a path where nothing is yet: a temporary file beside it, flushed to disk,
  then renamed over it; an existing file keeps its permission bits;
- a symbolic link: followed, and its target written as above; the link stays a link;
- a character or block device or a FIFO: opened and written through in place, no rename;
- a Unix socket: connected to (stream), and the output sent;
- ``-``: standard output;
- a folder (or anything else): refused in one line.

Only the first two are whole or nothing; a stream that fails part-way has already sent what
came before the failure.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

from ctxcore.errors import InputError

#: the spelling of standard output on every ``-o``
STDOUT = "-"
#: A file written whole or nothing goes to the disk this many bytes at a time while it is
#: written (``_Syncer``), so that its last fsync waits for the last part only.
SYNC_BYTES = 8 * 1024 * 1024


def is_stdout(target: str | Path) -> bool:
    """True when ``target`` names standard output (``-o -``)."""
    return str(target) == STDOUT


def write_output(
    target: str | Path,
    chunks: Iterable[str] | Iterable[bytes],
    *,
    stdout: TextIO | None = None,
    mode: int | None = None,
) -> None:
    """Write the text ``chunks`` (``str``, or ``bytes`` that are UTF-8 already) to
    ``target`` as the module docstring says.

    ``stdout`` is where ``-`` writes (``sys.stdout`` at call time by default); ``mode`` sets
    the permission bits of a file created or replaced here (else a replaced file keeps its
    own, and a new one gets the umask's). An error raised by ``chunks`` goes on up; a file
    written whole or nothing is then left as it was."""
    if is_stdout(target):
        _to_stream(stdout if stdout is not None else sys.stdout, chunks)
        return
    path = Path(target)
    # A link is followed to where it points (also a dangling one: the file is made there).
    real = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        st: os.stat_result | None = os.stat(real)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise InputError(f"{path}: cannot write ({exc.strerror}); nothing was written") from exc
    if st is None or stat.S_ISREG(st.st_mode):
        keep = mode if mode is not None else (stat.S_IMODE(st.st_mode) if st else None)
        _atomic(real, chunks, keep, shown=path)
    elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        _in_place(real, chunks, shown=path)
    elif stat.S_ISSOCK(st.st_mode):
        _to_socket(real, chunks, shown=path)
    elif stat.S_ISDIR(st.st_mode):
        raise InputError(f"{path}: is a folder; name a file in it to write there")
    else:
        raise InputError(f"{path}: not a file, device, FIFO or socket; nothing was written")


def _utf8(chunks: Iterable[str] | Iterable[bytes]) -> Iterator[bytes]:
    """The chunks as UTF-8 (a ``str`` encoded, as a text file would)."""
    for chunk in chunks:
        yield chunk if type(chunk) is bytes else chunk.encode("utf-8")  # type: ignore[union-attr]


def _atomic(
    path: Path, chunks: Iterable[str] | Iterable[bytes], mode: int | None, *, shown: Path
) -> None:
    """Whole or nothing: a full disk, a read-only folder or a failing ``chunks`` leaves no
    empty or half-written file behind, and a watcher never sees a partial one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as fh, _Syncer(fh.fileno()) as syncer:
            written = 0
            due = SYNC_BYTES
            for chunk in _utf8(chunks):
                fh.write(chunk)
                written += len(chunk)
                if written >= due:
                    fh.flush()
                    syncer.sync()
                    due = written + SYNC_BYTES
            fh.flush()
            syncer.close()
            os.fsync(fh.fileno())
            if mode is not None:
                os.fchmod(fh.fileno(), mode)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        hint = "; free some space or write elsewhere" if exc.errno == errno.ENOSPC else ""
        raise InputError(
            f"{shown}: cannot write ({exc.strerror}){hint}; nothing was written"
        ) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class _Syncer:
    """Hands a file being written to the disk in the background: ``sync`` wakes a thread
    that runs ``fdatasync`` (without the GIL) while the writer goes on, so that the writer's
    own fsync at the end has only the last part left to wait for (the kernel would
    otherwise hold a 30 MB output in memory until then). Its thread starts at the first
    ``sync`` and is gone once ``close`` returns; an error it met is raised by ``close``
    (the file's next fsync would not report it again)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.wanted = threading.Event()
        self.stopping = False
        self.error: OSError | None = None
        self.thread: threading.Thread | None = None

    def __enter__(self) -> _Syncer:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def sync(self) -> None:
        if self.error is not None:
            raise self.error
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="ctxscope-sync", daemon=True)
            self.thread.start()
        self.wanted.set()

    def close(self) -> None:
        """Wait for the thread's last sync and end it; raise what it met."""
        self._stop()
        if self.error is not None:
            raise self.error

    def _stop(self) -> None:
        if self.thread is not None:
            self.stopping = True
            self.wanted.set()
            self.thread.join()
            self.thread = None

    def _run(self) -> None:
        sync = getattr(os, "fdatasync", os.fsync)
        while True:
            self.wanted.wait()
            self.wanted.clear()
            if self.stopping:
                return
            try:
                sync(self.fd)
            except OSError as exc:
                self.error = exc
                return


def _in_place(path: Path, chunks: Iterable[str] | Iterable[bytes], *, shown: Path) -> None:
    # No O_CREAT and no O_TRUNC: the node exists and stays what it is (a rename would have
    # replaced it); a FIFO's open waits for its reader, as a shell's ``>`` does.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(f"{shown}: cannot write ({exc.strerror})") from exc
    # Unbuffered: nothing is left to flush at close, so a Ctrl-C while a FIFO's reader has
    # stalled ends the command (a buffered file's close would wait on the pipe again).
    with open(fd, "wb", buffering=0, closefd=True) as fh:
        try:
            for chunk in _utf8(chunks):
                view = memoryview(chunk)
                while view:  # a pipe may take part of a write
                    view = view[fh.write(view) or 0 :]
        except OSError as exc:
            raise InputError(f"{shown}: cannot write ({exc.strerror})") from exc


def _to_socket(path: Path, chunks: Iterable[str] | Iterable[bytes], *, shown: Path) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(str(path))
            for chunk in _utf8(chunks):
                sock.sendall(chunk)
        except OSError as exc:
            why = exc.strerror or str(exc)
            raise InputError(f"{shown}: cannot write to this socket ({why})") from exc


def _to_stream(out: TextIO, chunks: Iterable[str] | Iterable[bytes]) -> None:
    try:
        for chunk in chunks:
            out.write(chunk.decode("utf-8") if type(chunk) is bytes else chunk)  # type: ignore[arg-type]
        out.flush()
    except BrokenPipeError:
        # the reader went away (``| head``): what it wanted it has; Python would otherwise
        # complain again when it flushes standard output at exit
        try:
            fileno = out.fileno()
        except (OSError, ValueError):
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, fileno)
        finally:
            os.close(devnull)


__all__ = ["STDOUT", "is_stdout", "write_output"]
