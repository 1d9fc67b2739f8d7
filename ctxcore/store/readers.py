"""Reading trace files for ingest: which files, where the last run stopped, complete lines.

Agents append JSONL while ingest reads it, so a file is read on from the offset the last
committed run stored, once it is found to be the file read then: the same inode, at least
as long, the same first bytes (a fingerprint of up to HEAD_BYTES) and the same bytes just
before the offset (FP_BYTES). A file that was replaced (renamed over, truncated, rewritten)
is read again from its start; the traces already stored are skipped. Only complete lines
are handed on: a last line without its newline is a writer still writing. A ``.jsonl.gz``
cannot seek: it is decompressed from its start, the bytes before the offset skipped.

Memory stays bounded on any input: a line longer than MAX_LINE_BYTES is dropped while it
is read (its number and size are kept for one error row), never held whole. A ``.gz``
that is not gzip, is corrupt or ends early is the file's error (``ReadState.error``),
after the complete lines before the damage. Nothing here parses a trace (``workers``
does) or writes the store (``ingest`` does, through ``Store.bulk_writer``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol, cast

from ctxcore.errors import InputError
from ctxcore.loading import GZIP_ERRORS, gzip_error, open_regular
from ctxcore.settings import MAX_LINE_BYTES
from ctxcore.store.records import FileOffset

SUFFIXES = (".jsonl", ".json", ".jsonl.gz")
#: what ``ctxscope app`` appends to its store's name for the note it leaves beside it
APP_NOTE_SUFFIX = ".app.json"
#: bytes of a file just before its offset that must be unchanged to read on from there.
FP_BYTES = 64
#: bytes at the start of a file that must be unchanged to read on from the offset.
HEAD_BYTES = 64 * 1024
#: bytes read per step when skipping into a .gz.
_SKIP_BYTES = 8 * 1024 * 1024
#: bytes read per step when looking for a chunk's last newline.
_WINDOW = 64 * 1024


def is_app_note(path: str | Path) -> bool:
    """The note a running ``ctxscope app`` leaves beside its store (``<store>.app.json``,
    ``ctxcore/cli/app.py``): a store usually sits in the folder the app watches, and the
    note is not a trace file."""
    p = Path(path)
    return (
        p.name.endswith(APP_NOTE_SUFFIX) and p.with_name(p.name[: -len(APP_NOTE_SUFFIX)]).is_file()
    )


def is_trace_file(path: str | Path) -> bool:
    """A file ingest reads: .jsonl/.json/.jsonl.gz, not hidden, not an editor's temp file,
    not an app's note beside its store."""
    name = Path(path).name
    return not name.startswith(".") and name.endswith(SUFFIXES) and not is_app_note(path)


def find_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand folders (recursively) into trace files; explicit files are kept as given.

    A path given explicitly that is not a regular file (a FIFO, a device) is refused at
    once: reading it would block. Inside a folder such an entry with a trace file's name is
    kept, for ingest to report it once."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if is_trace_file(f) and not f.is_dir())
        elif p.is_file():
            out.append(p)
        elif p.exists():
            raise InputError(
                f"{p}: not a regular file (a FIFO, socket or device); ingest reads files only"
            )
        else:
            raise InputError(f"{p}: no such file or folder")
    return list(dict.fromkeys(out))


def fingerprint(data: bytes) -> str:
    """The fingerprint of the bytes just before an offset (the last FP_BYTES of ``data``)."""
    return digest(data[-FP_BYTES:])


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=8).hexdigest()


@dataclass
class ReadState:
    """How far a file has been read, and what follows its last complete line."""

    offset: int
    #: lines before ``offset``
    line: int
    #: the bytes just before ``offset`` (up to FP_BYTES), for its fingerprint
    tail: bytes
    #: the file's first bytes (up to HEAD_BYTES, never past ``offset``)
    head: bytes = b""
    #: what follows the last complete line read (set once the file was read to its end)
    rest: bytes = b""
    #: the unfinished last line is already longer than the limit (its size so far)
    rest_over: int = 0
    #: why the file's bytes could not be read on (a broken .gz), after ``offset``
    error: str | None = None
    #: (line number, size) of lines over the limit, skipped unread; the caller reports them
    long_lines: list[tuple[int, int]] = field(default_factory=list)

    def advance(self, data: bytes, lines: int) -> None:
        """``data`` (holding ``lines`` lines) was consumed."""
        if len(self.head) < HEAD_BYTES:
            self.head += data[: HEAD_BYTES - len(self.head)]
        self.offset += len(data)
        self.line += lines
        self.tail = (self.tail + data[-FP_BYTES:])[-FP_BYTES:]

    def skip_line(self, first: bytes, last: bytes, size: int) -> None:
        """A line of ``size`` bytes (newline included) over the limit was dropped unread;
        ``first`` and ``last`` are its first and last bytes, for the fingerprints."""
        if len(self.head) < HEAD_BYTES:
            self.head += first[: HEAD_BYTES - len(self.head)]
        self.long_lines.append((self.line + 1, size))
        self.offset += size
        self.line += 1
        self.tail = (self.tail + last[-FP_BYTES:])[-FP_BYTES:]

    def file_offset(self, key: str, st: os.stat_result, failed: str | None = None) -> FileOffset:
        """The offset to store for the file ``key`` (``st``: its stat when reading began)."""
        fp = fingerprint(self.tail) if self.offset else None
        head = digest(self.head) if self.offset else None
        return FileOffset(
            key, self.offset, self.line, st.st_size, st.st_mtime, fp, st.st_ino, head, failed
        )


@contextmanager
def open_file(key: str, gz: bool) -> Iterator[IO[bytes]]:
    """The file's bytes (decompressed, for a .gz). Anything but a regular file is refused
    without blocking (``InputError``)."""
    with open_regular(key) as f:
        if gz:
            with gzip.GzipFile(fileobj=f, mode="rb") as z:
                yield cast(IO[bytes], z)
        else:
            yield f


def resume(f: IO[bytes], st: os.stat_result, prev: FileOffset | None, gz: bool) -> ReadState:
    """Where to go on reading ``f`` (left positioned there): the stored offset when the
    file is the one read last time (same inode, first bytes and bytes before the offset),
    else the start."""
    state = _resume(f, st, prev, gz)
    if state is None:
        f.seek(0)
        return ReadState(0, 0, b"")
    return state


def _resume(
    f: IO[bytes], st: os.stat_result, prev: FileOffset | None, gz: bool
) -> ReadState | None:
    if prev is None or prev.offset <= 0:
        return None
    offset = prev.offset
    if prev.inode is not None and prev.inode != st.st_ino:
        return None  # another file now has this name (renamed over it)
    if not gz and offset > st.st_size:
        return None  # the file shrank: it was truncated or replaced
    try:
        head = f.read(min(offset, HEAD_BYTES))
        if len(head) < min(offset, HEAD_BYTES):
            return None
        if prev.head is not None and digest(head) != prev.head:
            return None
        if gz:
            last = _skip(f, offset - len(head))
            if last is None:
                return None
            tail = (head + last)[-FP_BYTES:]
        else:
            f.seek(max(0, offset - FP_BYTES))
            tail = f.read(min(offset, FP_BYTES))
    except GZIP_ERRORS:
        return None  # read from the start: the broken part is reported there
    if fingerprint(tail) != prev.fingerprint:
        return None
    if not gz:
        f.seek(offset)
    return ReadState(offset, prev.line, tail, head)


class Readable(Protocol):
    """What ``LineBlocks`` reads from: a file, a GzipFile or a ``RangeReader``."""

    def read(self, size: int = -1, /) -> bytes: ...


class LineBlocks:
    """The complete lines of ``f`` from ``state.offset`` on, one block (about chunk_bytes)
    at a time: iterating gives (the number of the line before the block, the block), with
    ``state`` already past the block. A line longer than ``max_line`` is dropped while it
    is read (``state.long_lines``). At the end ``state.rest`` holds what follows the last
    newline, and ``state.error`` says why a .gz could not be read to its end.

    An iterator class rather than a generator: a suspended generator would keep the last
    block alive while the caller works on it (the caller drops it before it inserts)."""

    def __init__(
        self,
        f: Readable,
        state: ReadState,
        chunk_bytes: int,
        on_read: Callable[[int], None] | None = None,
        max_line: int = MAX_LINE_BYTES,
    ) -> None:
        """``on_read`` is told the size of every read (progress). ``chunk_bytes`` is at
        most ``max_line``: a line inside one read is then never over the limit, and only
        the line a read continues needs measuring."""
        if chunk_bytes > max_line:
            raise ValueError("LineBlocks reads at most max_line bytes at a time")
        self.state = state
        self._f = f
        self._chunk_bytes = chunk_bytes
        self._on_read = on_read
        self._max_line = max_line
        #: the start of an unfinished line, and its size
        self._parts: list[bytes] = []
        self._size = 0
        #: inside a line over the limit: its first bytes, last bytes and size so far
        self._skipping: tuple[bytes, bytes, int] | None = None
        self._done = False

    def __iter__(self) -> LineBlocks:
        return self

    def _read(self) -> bytes:
        try:
            if isinstance(self._f, gzip.GzipFile):
                # read1: what one step of decompression gives. A .gz that breaks off then
                # loses only that step; ``read`` would drop all it had gathered for a chunk.
                return self._f.read1(self._chunk_bytes)
            return self._f.read(self._chunk_bytes)
        except GZIP_ERRORS as exc:
            self.state.error = gzip_error(exc)
            return b""

    def _skip(self, chunk: bytes) -> bytes:
        """Drop the bytes of the over-long line; what follows its end (if it ended)."""
        assert self._skipping is not None
        first, last, size = self._skipping
        end = chunk.find(b"\n")
        piece = chunk if end < 0 else chunk[: end + 1]
        if len(first) < HEAD_BYTES:
            first += piece[: HEAD_BYTES - len(first)]
        if end < 0:
            self._skipping = (first, (last + chunk[-FP_BYTES:])[-FP_BYTES:], size + len(chunk))
            return b""
        self.state.skip_line(first, last + piece, size + end + 1)
        self._skipping = None
        return chunk[end + 1 :]

    def _start_skipping(self) -> None:
        first = b""
        for part in self._parts:
            if len(first) >= HEAD_BYTES:
                break
            first += part[: HEAD_BYTES - len(first)]
        last = b""
        for part in reversed(self._parts):
            if len(last) >= FP_BYTES:
                break
            last = part[-FP_BYTES:] + last
        self._skipping = (first, last[-FP_BYTES:], self._size)
        self._parts, self._size = [], 0

    def __next__(self) -> tuple[int, bytes]:
        state = self.state
        while not self._done:
            chunk = self._read()
            if not chunk:
                self._done = True
                if self._skipping is not None:
                    state.rest_over = self._skipping[2]
                    self._skipping = None
                state.rest = b"".join(self._parts)
                self._parts, self._size = [], 0
                break
            if self._on_read is not None:
                self._on_read(len(chunk))
            if self._skipping is not None:
                chunk = self._skip(chunk)
                if not chunk:
                    continue
            end = chunk.rfind(b"\n")
            if end < 0:
                self._parts.append(chunk)
                self._size += len(chunk)
                if self._size > self._max_line:
                    self._start_skipping()
                continue
            first_end = chunk.find(b"\n")
            if self._parts and self._size + first_end > self._max_line:
                # the line that was waiting for its end ends here, over the limit
                self._start_skipping()
                chunk = self._skip(chunk)
                end = chunk.rfind(b"\n")
                if end < 0:
                    self._parts, self._size = ([chunk], len(chunk)) if chunk else ([], 0)
                    continue
            block = b"".join([*self._parts, chunk[: end + 1]])
            rest = chunk[end + 1 :]
            self._parts, self._size = ([rest], len(rest)) if rest else ([], 0)
            del chunk
            first = state.line
            state.advance(block, block.count(b"\n"))
            return first, block
        raise StopIteration


class RangeReader:
    """``length`` bytes of a file from ``start`` on, read like a file (what a worker reads
    of a big file, through ``LineBlocks``: a line longer than the limit is never held)."""

    def __init__(self, f: IO[bytes], start: int, length: int) -> None:
        f.seek(start)
        self._f = f
        self._left = length

    def read(self, n: int = -1) -> bytes:
        n = self._left if n < 0 else min(n, self._left)
        data = self._f.read(n) if n > 0 else b""
        self._left -= len(data)
        return data


def line_ranges(
    f: IO[bytes], state: ReadState, size: int, chunk_bytes: int, max_line: int = MAX_LINE_BYTES
) -> Iterator[tuple[int, int, bytes]]:
    """(start, length, last FP_BYTES bytes) of consecutive ranges of about ``chunk_bytes``
    of complete lines of a plain file, from ``state.offset`` on, found with small reads
    near each range's end (the lines themselves are read by whoever parses the range).
    At the end ``state.offset``, ``state.head`` and ``state.tail`` are past the last range
    and ``state.rest`` holds what follows it (unless it is already over ``max_line``:
    ``state.rest_over``); ``state.line`` is the caller's to count."""
    pos = state.offset
    while pos < size:
        end = _chunk_end(f, pos, min(pos + chunk_bytes, size), size)
        if end < 0:
            break
        f.seek(max(pos, end - FP_BYTES))
        yield pos, end - pos, f.read(min(end - pos, FP_BYTES))
        pos = end
    if size - pos > max_line:
        state.rest_over = size - pos
    else:
        f.seek(pos)
        state.rest = f.read(size - pos)
    f.seek(max(0, pos - FP_BYTES))
    state.offset, state.tail = pos, f.read(min(pos, FP_BYTES))
    f.seek(0)
    state.head = f.read(min(pos, HEAD_BYTES))


def _chunk_end(f: IO[bytes], pos: int, target: int, size: int) -> int:
    """The offset just past the last newline in [pos, target), or past the first one after
    it (a line longer than a chunk); -1 when no newline follows ``pos``."""
    hi = target
    while hi > pos:
        lo = max(pos, hi - _WINDOW)
        f.seek(lo)
        i = f.read(hi - lo).rfind(b"\n")
        if i >= 0:
            return lo + i + 1
        hi = lo
    hi = target
    while hi < size:
        f.seek(hi)
        buf = f.read(min(_WINDOW, size - hi))
        if not buf:
            break
        i = buf.find(b"\n")
        if i >= 0:
            return hi + i + 1
        hi += len(buf)
    return -1


def _skip(f: IO[bytes], n: int) -> bytes | None:
    """Read and discard ``n`` bytes (gzip streams cannot seek cheaply); the last FP_BYTES
    of them, or None if the stream is shorter."""
    last = b""
    while n > 0:
        got = f.read(min(n, _SKIP_BYTES))
        if not got:
            return None
        n -= len(got)
        last = (last + got[-FP_BYTES:])[-FP_BYTES:]
    return last


def is_json(buf: bytes) -> bool:
    """Is ``buf`` one complete JSON value (a last line the writer did not end yet)?"""
    try:
        json.loads(buf)
    except (ValueError, RecursionError):
        return False
    return True


def json_values(data: bytes) -> tuple[list[tuple[int, Any, str]], tuple[int, str] | None]:
    """The traces a whole .json file holds: (line, value, where in the file) for a list of
    traces, a ``{"traces": [...]}`` export, or one trace; or the (line, message) of the
    error that stops the file from being read."""
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")  # a byte order mark is no JSON
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        return [], (line, f"invalid UTF-8 at byte {exc.start}; re-save the file as UTF-8")
    if not text.strip():
        return [], None
    try:
        obj = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        return [], (exc.lineno, f"malformed JSON at column {exc.colno}: {exc.msg}")
    except ValueError as exc:
        return [], (1, str(exc))
    except RecursionError:
        return [], (1, "JSON nested too deeply to read (hundreds of levels)")
    if isinstance(obj, list):
        return [(0, item, f"traces[{k}]") for k, item in enumerate(obj)], None
    if isinstance(obj, dict) and "traces" in obj and "schema" not in obj:
        traces = obj["traces"] or []
        if not isinstance(traces, list):
            return [], (1, "'traces' must be a list of traces")
        return [(0, item, f"traces[{k}]") for k, item in enumerate(traces)], None
    return [(1, obj, "")], None


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON (NaN and Infinity are not numbers in JSON)")
