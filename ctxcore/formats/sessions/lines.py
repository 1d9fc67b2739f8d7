"""Reading a JSONL log as a stream: one parsed line at a time, a broken line is its own error.

A session log can be hundreds of megabytes and a line can be cut (the agent was killed while
writing) or corrupt. Lines are read from the file (gunzipped when it ends in ``.gz``) and
parsed with msgspec, one by one, so memory holds one line at a time (at most
``MAX_LINE_BYTES``: a longer one is that line's error, skipped unread); a line that is not
JSON becomes an error naming ``file:line`` and the reader goes on with the next one. Each line
knows where it starts, so a reader that let go of a line can read it again
(``values_at``).
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from ctxcore.errors import InputError
from ctxcore.loading import too_deep, too_long, without_bom
from ctxcore.settings import MAX_LINE_BYTES

#: How many bytes of a file ``first_values`` reads to tell its format.
SNIFF_BYTES = 256 * 1024
#: How many bytes ``read_lines`` reads at a time.
BLOCK_BYTES = 1024 * 1024
_decoder = msgspec.json.Decoder()


@dataclass(frozen=True, slots=True)
class LogLine:
    """One non-empty line: its parsed value, or why it could not be parsed, and where it
    starts in the (unpacked) file (-1: not read from a file)."""

    number: int
    value: Any
    error: str | None = None
    offset: int = -1


def _open(path: Path) -> io.BufferedIOBase:
    try:
        if path.suffix == ".gz":
            return gzip.GzipFile(path, "rb")
        return open(path, "rb")
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from exc


def _parse(raw: bytes, label: str, n: int = 0) -> LogLine | Any:
    """A line's value, or a ``LogLine`` saying why it has none (a byte order mark that starts
    it is skipped; nesting past the parser's stack is ``too_deep``, that line's error).
    ``label`` and ``n`` name it (``label:n``; ``n`` 0: ``label`` alone)."""
    try:
        return _decoder.decode(without_bom(raw))
    except msgspec.DecodeError as exc:
        return LogLine(0, None, f"{_where(label, n)}: not a JSON line ({exc})")
    except RecursionError:
        return LogLine(0, None, str(too_deep(_where(label, n))))


def _where(label: str, n: int) -> str:
    return f"{label}:{n}" if n else label


def read_lines(path: Path, name: str | None = None) -> Iterator[LogLine]:
    """Every non-empty line of ``path``, parsed (``name`` labels errors; default the path).
    A line over ``MAX_LINE_BYTES`` is that line's error, skipped to its end unread."""
    label = name or str(path)
    n = 0
    offset = 0
    with _open(path) as fh:
        try:
            for raw, length in _split(fh, MAX_LINE_BYTES):
                n += 1
                at, offset = offset, offset + length
                if raw is None:
                    yield LogLine(n, None, f"{label}:{n}: {too_long(MAX_LINE_BYTES)}", at)
                    continue
                # blank, as ``not raw.strip()`` says, without copying a line of megabytes
                if not raw or raw.isspace():
                    continue
                value = _parse(raw, label, n)
                if isinstance(value, LogLine):
                    yield LogLine(n, None, value.error, at)
                else:
                    yield LogLine(n, value, None, at)
        except (OSError, EOFError) as exc:  # a cut or corrupt gzip stream
            raise InputError(f"{label}: cannot read past line {n} ({exc})") from exc


def _split(fh: io.BufferedIOBase, limit: int) -> Iterator[tuple[bytes | None, int]]:
    """The file's lines, read up to ``BLOCK_BYTES`` at a time (``read1``: a cut .gz gives
    what it holds before the cut, then its error) and cut where ``bytes.find`` finds
    their ends (a buffered reader's line iteration looks at every byte in Python's C loop,
    ~2 % of an ``import -o``): each without its newline, and its length with it. A line
    over ``limit`` bytes is ``None``, its bytes let go as they come."""
    parts: list[bytes] = []
    size = 0
    while True:
        block = fh.read1(BLOCK_BYTES)
        if not block:
            break
        start = 0
        while True:
            end = block.find(b"\n", start)
            if end < 0:
                break
            size += end - start
            if size > limit:
                yield None, size + 1
            elif parts:
                parts.append(block[start:end])
                yield b"".join(parts), size + 1
            else:
                yield block[start:end], size + 1
            parts, size = [], 0
            start = end + 1
        if start < len(block):
            size += len(block) - start
            if size <= limit:
                parts.append(block[start:])
            else:
                parts = []  # over the limit: counted, not kept
    if size:
        yield (b"".join(parts) if size <= limit else None), size


def values_at(path: Path, offsets: Iterable[int]) -> dict[int, Any]:
    """The lines of ``path`` that start at these offsets (``LogLine.offset``), read and parsed
    again, in one pass over the file; a line that no longer parses, or a file that can no
    longer be read, maps to None (the caller says what that line then lacks)."""
    out: dict[int, Any] = {}
    try:
        with _open(path) as fh:
            for at in sorted(set(offsets)):
                fh.seek(at)  # forward only: a .gz is unpacked once, up to the last one
                value = _parse(fh.readline(), "")
                out[at] = None if isinstance(value, LogLine) else value
    except (OSError, EOFError, InputError):
        pass
    return out


def first_values(path: Path, limit: int = 5) -> tuple[list[Any], int]:
    """The first ``limit`` lines of a file that parse as JSON (to tell a log's format), and
    how many non-empty lines the file's head has."""
    out: list[Any] = []
    try:
        with _open(path) as fh:
            head = fh.read(SNIFF_BYTES)
    except (OSError, EOFError, InputError):
        return out, 0
    lines = [raw for raw in head.split(b"\n")[:50] if raw.strip()]
    for raw in lines:
        value = _parse(raw, "")
        if not isinstance(value, LogLine):
            out.append(value)
            if len(out) >= limit:
                break
    return out, len(lines)


def parse_time(value: Any) -> datetime | None:
    """An ISO 8601 time (``2025-09-03T00:47:21.540Z``) as an aware datetime, or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def log_time(path: Path, default_now: datetime | None) -> datetime:
    """The time a log file's calls take when a call records none: the one given, else the
    file's modification time (whole seconds), what every stream reader defaults to."""
    if default_now is not None:
        return default_now
    return datetime.fromtimestamp(path.stat().st_mtime, tz=UTC).replace(microsecond=0)


def unexpected(exc: Exception) -> str:
    """An unexpected shape's exception, as the one line a record's error is."""
    detail = str(exc).splitlines()[0] if str(exc) else "no detail"
    return f"not a record this reader can read ({type(exc).__name__}: {detail})"


__all__ = [
    "LogLine",
    "first_values",
    "log_time",
    "parse_time",
    "read_lines",
    "unexpected",
    "values_at",
]
