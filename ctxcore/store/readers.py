"""Reading trace files for ingest: which files, where the last run stopped, complete lines.

Agents append JSONL while ingest reads it, so a file is read on from the offset the last
committed run stored, once the bytes just before it are found to be the ones read then (a
fingerprint of the last FP_BYTES); a file that shrank or changed there was replaced and is
read again from its start. Only complete lines are handed on: a last line without its
newline is a writer still writing. A ``.jsonl.gz`` cannot seek: it is decompressed from
its start, the bytes before the offset skipped. Nothing here parses a trace (``workers``
does) or writes the store (``ingest`` does, through ``TraceStore.bulk_writer``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from ctxcore.errors import InputError
from ctxcore.store.tracestore import FileOffset

SUFFIXES = (".jsonl", ".json", ".jsonl.gz")
#: bytes of a file just before its offset that must be unchanged to read on from there.
FP_BYTES = 64
#: bytes read per step when skipping into a .gz.
_SKIP_BYTES = 8 * 1024 * 1024
#: bytes read per step when looking for a chunk's last newline.
_WINDOW = 64 * 1024


def is_trace_file(path: str | Path) -> bool:
    """A file ingest reads: .jsonl/.json/.jsonl.gz, not hidden, not an editor's temp file."""
    name = Path(path).name
    return not name.startswith(".") and name.endswith(SUFFIXES)


def find_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand folders (recursively) into trace files; explicit files are kept as given."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.is_file() and is_trace_file(f))
        elif p.exists():
            out.append(p)
        else:
            raise InputError(f"{p}: no such file or folder")
    return list(dict.fromkeys(out))


def fingerprint(data: bytes) -> str:
    """The fingerprint of the bytes just before an offset (the last FP_BYTES of ``data``)."""
    return hashlib.blake2b(data[-FP_BYTES:], digest_size=8).hexdigest()


@dataclass
class ReadState:
    """How far a file has been read, and what follows its last complete line."""

    offset: int
    #: lines before ``offset``
    line: int
    #: the bytes just before ``offset`` (up to FP_BYTES), for its fingerprint
    tail: bytes
    #: what follows the last complete line read (set once the file was read to its end)
    rest: bytes = b""
    #: a .gz whose stream ends early: still being written, its last line is not final
    truncated: bool = False

    def advance(self, data: bytes, lines: int) -> None:
        """``data`` (holding ``lines`` lines) was consumed."""
        self.offset += len(data)
        self.line += lines
        self.tail = (self.tail + data[-FP_BYTES:])[-FP_BYTES:]

    def file_offset(self, key: str, st: os.stat_result) -> FileOffset:
        """The offset to store for the file ``key`` (``st``: its stat when reading began)."""
        fp = fingerprint(self.tail) if self.offset else None
        return FileOffset(key, self.offset, self.line, st.st_size, st.st_mtime, fp)


def open_file(key: str, gz: bool) -> IO[bytes]:
    """The file's bytes (decompressed, for a .gz); the caller closes it."""
    if gz:
        return cast(IO[bytes], gzip.open(key, "rb"))
    return open(key, "rb")  # noqa: SIM115 - closed by the caller


def resume(f: IO[bytes], st: os.stat_result, prev: FileOffset | None, gz: bool) -> ReadState:
    """Where to go on reading ``f`` (left positioned there): the stored offset when the
    bytes before it are the ones read last time, else the start."""
    offset, lineno = (prev.offset, prev.line) if prev is not None else (0, 0)
    tail = b""
    if offset and (gz or offset <= st.st_size):
        if gz:
            ok = _skip(f, offset - FP_BYTES)
            tail = f.read(min(offset, FP_BYTES)) if ok else b""
        else:
            f.seek(max(0, offset - FP_BYTES))
            tail = f.read(min(offset, FP_BYTES))
        if prev is None or fingerprint(tail) != prev.fingerprint:
            offset, lineno, tail = 0, 0, b""
    elif offset:
        offset, lineno = 0, 0  # the file shrank: it was replaced; read it again
    if offset == 0:
        f.seek(0)
    return ReadState(offset, lineno, tail)


class LineBlocks:
    """The complete lines of ``f`` from ``state.offset`` on, one block (about chunk_bytes)
    at a time: iterating gives (the number of the line before the block, the block), with
    ``state`` already past the block. At the end ``state.rest`` holds what follows the
    last newline (and ``state.truncated`` says whether a .gz ended early).

    An iterator class rather than a generator: a suspended generator would keep the last
    block alive while the caller works on it (the caller drops it before it inserts)."""

    def __init__(
        self,
        f: IO[bytes],
        state: ReadState,
        chunk_bytes: int,
        on_read: Callable[[int], None] | None = None,
    ) -> None:
        """``on_read`` is told the size of every read (progress)."""
        self.state = state
        self._f = f
        self._chunk_bytes = chunk_bytes
        self._on_read = on_read
        self._buf = b""
        self._done = False

    def __iter__(self) -> LineBlocks:
        return self

    def __next__(self) -> tuple[int, bytes]:
        state = self.state
        while not self._done:
            try:
                chunk = self._f.read(self._chunk_bytes)
            except (EOFError, gzip.BadGzipFile, zlib.error):
                state.truncated = True  # a .gz still being written: wait for the rest
                chunk = b""
            if not chunk:
                self._done = True
                state.rest, self._buf = self._buf, b""
                break
            if self._on_read is not None:
                self._on_read(len(chunk))
            buf = self._buf + chunk
            end = buf.rfind(b"\n")
            if end < 0:
                self._buf = buf
                continue
            block, self._buf = buf[: end + 1], buf[end + 1 :]
            del buf
            first = state.line
            state.advance(block, block.count(b"\n"))
            return first, block
        raise StopIteration


def line_ranges(
    f: IO[bytes], state: ReadState, size: int, chunk_bytes: int
) -> Iterator[tuple[int, int, bytes]]:
    """(start, length, last FP_BYTES bytes) of consecutive ranges of about ``chunk_bytes``
    of complete lines of a plain file, from ``state.offset`` on, found with small reads
    near each range's end (the lines themselves are read by whoever parses the range).
    At the end ``state.offset`` and ``state.tail`` are past the last range and
    ``state.rest`` holds what follows it; ``state.line`` is the caller's to count."""
    pos = state.offset
    while pos < size:
        end = _chunk_end(f, pos, min(pos + chunk_bytes, size), size)
        if end < 0:
            break
        f.seek(max(pos, end - FP_BYTES))
        yield pos, end - pos, f.read(min(end - pos, FP_BYTES))
        pos = end
    f.seek(pos)
    state.rest = f.read(size - pos)
    f.seek(max(0, pos - FP_BYTES))
    state.offset, state.tail = pos, f.read(min(pos, FP_BYTES))


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


def _skip(f: IO[bytes], n: int) -> bool:
    """Read and discard ``n`` bytes (gzip streams cannot seek cheaply); False if shorter."""
    while n > 0:
        got = f.read(min(n, _SKIP_BYTES))
        if not got:
            return False
        n -= len(got)
    return True


def is_json(buf: bytes) -> bool:
    """Is ``buf`` one complete JSON value (a last line the writer did not end yet)?"""
    try:
        json.loads(buf)
    except ValueError:
        return False
    return True


def json_values(data: bytes) -> tuple[list[tuple[int, Any, str]], tuple[int, str] | None]:
    """The traces a whole .json file holds: (line, value, where in the file) for a list of
    traces, a ``{"traces": [...]}`` export, or one trace; or the (line, message) of the
    error that stops the file from being read."""
    try:
        text = data.decode("utf-8")
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
    if isinstance(obj, list):
        return [(0, item, f"traces[{k}]") for k, item in enumerate(obj)], None
    if isinstance(obj, dict) and "traces" in obj and "schema" not in obj:
        return [(0, item, f"traces[{k}]") for k, item in enumerate(obj["traces"] or [])], None
    return [(1, obj, "")], None


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON (NaN and Infinity are not numbers in JSON)")
