"""Ingest's parse step: lines -> validated traces -> Arrow rows, here or in worker processes.

``FileRun`` parses one file's lines (msgspec's fast path, ``ctxcore.store.fastdecode``,
when the store does not diagnose at insert and ingest does not redact the line, or no
redaction rule can match it; else the pydantic models) and keeps the traces, the errors and
their line numbers. The ingesting process uses it for small files; for a big file
``ParsePool`` hands chunks to worker processes, which parse them, turn them into
``RowTables`` and spill these to Arrow files the owner maps.
Only the ingesting process touches DuckDB.

One bad line never costs a good one: whatever goes wrong while one line is decoded,
validated or redacted becomes that line's error (``FileRun.line``), and a file keeps at
most MAX_ERRORS_PER_FILE error rows (the rest are counted in one more). Workers end with
the ingesting process, also when it is killed (they watch it), and a run cleans up the
spill folders that killed runs left behind.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.abc
import json
import os
import shutil
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import pyarrow as pa
from pydantic import ValidationError

from ctxcore import settings
from ctxcore.errors import InputError
from ctxcore.formats.redact import may_hold_secret
from ctxcore.formats.redact_memo import Redactor
from ctxcore.loading import (
    UTF8_BOM,
    explain_errors,
    open_regular,
    parse_json,
    too_long,
    trace_from_obj,
)
from ctxcore.models import Trace
from ctxcore.processes import die_with, worker_context
from ctxcore.settings import MAX_ERRORS_PER_FILE, MAX_LINE_BYTES
from ctxcore.sharing import PartTable, is_shared, line_pieces
from ctxcore.store import fastdecode
from ctxcore.store.readers import FP_BYTES, LineBlocks, RangeReader, ReadState
from ctxcore.store.rows import RowTables, TraceLike, prepare, unexpected

#: parse chunks in the ingesting process while the workers start (they import for ~0.3 s)
HELP_WHILE_POOL_STARTS = True
#: An error message longer than this is cut: messages may quote what was in the line.
MAX_MESSAGE_CHARS = 2000
#: The spill folders of ingest runs: ``ctxscope-ingest-<pid of the run>-<random>``.
SPILL_PREFIX = "ctxscope-ingest-"
#: Lines the redaction check reads together (``clean_lines``): what a call of the check
#: costs beyond its bytes, shared by this many lines (docs/design.md, "Ingest and the watcher").
SCAN_LINES = 16


def clip(message: str) -> str:
    """An error message, cut to MAX_MESSAGE_CHARS."""
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return message[: MAX_MESSAGE_CHARS - 1] + "…"


def clean_lines(raws: Sequence[bytes]) -> list[bool]:
    """For each line, is it clean: can no redaction rule match it (``may_hold_secret``)?
    Read ``SCAN_LINES`` lines at a time, joined by newlines: every string of each line
    stands in the joined text as it does in the line (a newline starts no escape), so a
    group no rule can match holds no line a rule can match; the lines of any other group
    are read one by one. After such a group the next is read line by line, and groups come
    back after one whose lines were all clean: in a session's log a word a rule's guard
    names comes every few lines, and each group would be read twice. A line over
    MAX_LINE_BYTES is not read (it is refused unread)."""
    out: list[bool] = []
    together = True
    for at in range(0, len(raws), SCAN_LINES):
        group = raws[at : at + SCAN_LINES]
        if (
            together
            and len(group) > 1
            and sum(map(len, group)) <= MAX_LINE_BYTES
            and not may_hold_secret(b"\n".join(group))
        ):
            out += [True] * len(group)
            continue
        answers = [len(raw) <= MAX_LINE_BYTES and not may_hold_secret(raw) for raw in group]
        out += answers
        together = all(answers)
    return out


def unlisted_errors(more: int) -> str:
    return (
        f"{more:,} more bad lines in this file from this one on are not listed (only the "
        f"first {MAX_ERRORS_PER_FILE:,} are); fix what writes the file"
    )


@dataclass
class FileRun:
    """What one file contributes: its traces, its errors and their line numbers."""

    key: str
    #: may lines skip pydantic (``ctxcore.store.fastdecode``)? Not when the store diagnoses at
    #: insert, nor for a line that ingest redacts: both work on ``models.Trace``.
    fast: bool = False
    items: list[tuple[TraceLike, bytes]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    errors: list[tuple[str, int, str]] = field(default_factory=list)
    redact: bool = field(default_factory=settings.redact_on_ingest)
    #: errors seen in the file so far (listed or not), and the line of the first not listed
    n_errors: int = 0
    first_unlisted: int = 0
    #: the parts of the file's shared lines read so far (docs/design.md, "Shared traces")
    parts: PartTable = field(default_factory=PartTable)
    #: what redacts a line's trace: a session's traces repeat their texts, each read once
    redactor: Redactor = field(default_factory=Redactor)

    def error(self, lineno: int, message: str) -> None:
        """An error on line ``lineno``; past MAX_ERRORS_PER_FILE it is only counted."""
        self.n_errors += 1
        if self.n_errors <= MAX_ERRORS_PER_FILE:
            self.errors.append((self.key, lineno, clip(message)))
        elif not self.first_unlisted:
            self.first_unlisted = lineno

    def unlisted(self) -> tuple[str, int, str] | None:
        """The row that counts the errors not listed (None when all were)."""
        more = self.n_errors - MAX_ERRORS_PER_FILE
        if more <= 0:
            return None
        return (self.key, self.first_unlisted, unlisted_errors(more))

    def absorb(self, chunk: ParsedChunk, line_before: int) -> None:
        """A worker's chunk of this file: its errors join the file's (and its cap)."""
        for _, lineno, message in chunk.errors:
            self.error(line_before + lineno, message)
        hidden = chunk.n_errors - len(chunk.errors)
        if hidden > 0:
            if not self.first_unlisted:
                self.first_unlisted = line_before + chunk.first_unlisted
            self.n_errors += hidden

    def keep(self, lineno: int, trace: Trace, raw: bytes, clean: bool = False) -> None:
        """Keep a validated trace and its JSON; redacted first when ingest redacts, unless
        ``clean`` (``may_hold_secret`` said no rule can match its line)."""
        if self.redact and not clean:
            trace, found = self.redactor.trace(trace)
            if found:  # what is stored is the redacted trace, and nothing else
                raw = trace.to_json_bytes()
        self.items.append((trace, raw))
        self.lines.append(lineno)

    def shared_clean(self, line: bytes, clean: bool | None) -> bool:
        """Whether no rule can match the whole trace of a shared line, read from what the
        line brings (``clean``: the redaction check's answer for the line, when known),
        never from the whole trace: a session's call repeats the parts of the calls
        before, cleared when their lines brought them (``sharing.line_pieces``; the table
        knows whether all were, ``PartTable.cleared``). A piece the check cannot clear is
        read by the rules (once per text). After a part held a secret, or one came in
        unread, every later trace of the file is redacted whole."""
        if not self.parts.cleared:
            return False
        if clean or (clean is None and not may_hold_secret(line)):
            return True
        try:
            return all(
                not may_hold_secret(piece) or self.redactor.clean_json(piece)
                for piece in line_pieces(line)
            )
        except (msgspec.MsgspecError, RecursionError):
            return False  # a line the table refuses: it says why

    def read_lines(self, first: int, raws: Sequence[bytes]) -> None:
        """Parse lines numbered from ``first`` + 1 on, each as ``line`` does; when ingest
        redacts, the redaction check reads them a group at a time (``clean_lines``)."""
        if not self.redact:
            for lineno, raw in enumerate(raws, first + 1):
                self.line(lineno, raw)
            return
        for lineno, raw, clean in zip(range(first + 1, first + 1 + len(raws)), raws,
                                      clean_lines(raws), strict=True):  # fmt: skip
            self.line(lineno, raw, clean)

    def line(self, lineno: int, raw: bytes, clean: bool | None = None) -> None:
        """Parse one line of a .jsonl file (numbered ``lineno``; ``clean``: the redaction
        check's answer for it, when known). Any exception on the way (decode, validate,
        redact) is this line's error, never the file's."""
        try:
            self._line(lineno, raw, clean)
        except Exception as exc:
            self.error(lineno, unexpected(exc))

    def _line(self, lineno: int, raw: bytes, clean: bool | None) -> None:
        if raw[:3] == UTF8_BOM:  # a file's first line, as Windows tools write it
            raw = raw[3:]
        if raw[:1].isspace() or raw[-1:].isspace():  # (strip copies the line)
            raw = raw.strip()
        if not raw:
            return
        if len(raw) > MAX_LINE_BYTES:
            self.error(lineno, too_long())
            return
        checked = False  # the fast decoder's patterns: read on the whole trace
        if raw[:1] == b"{" and is_shared(raw):
            clean = self.shared_clean(raw, clean) if self.redact else None
            plain = fastdecode.plain(raw)
            checked = plain and self.parts.plain  # (the table's before this line's parts)
            try:  # the whole trace's JSON
                raw = self.parts.expand(raw, cleared=bool(clean), plain=plain)
            except InputError as exc:
                self.error(lineno, str(exc))
                return
        # A line in which no redaction rule can match passes through as it is: one read of
        # it (docs/design.md, "Capture, import, export, redaction") instead of a walk. (The
        # BOM and spaces cut off above only took characters out of what ``clean`` read.)
        if clean is None:
            clean = self.redact and not may_hold_secret(raw)
        else:
            clean = self.redact and clean
        if self.fast and (clean or not self.redact):
            view = fastdecode.decode(raw, checked)  # strict JSON: NaN, Infinity refused
            if view is not None:
                self.items.append((view, raw))
                self.lines.append(lineno)
                return
        refused: list[Any] | None = None
        if b"NaN" not in raw and b"Infinity" not in raw:
            # pydantic parses and validates in one pass. (Its JSON parser takes NaN, which
            # JSON does not, so lines that may hold one take the strict path.)
            try:
                trace = Trace.model_validate_json(raw)
            except ValidationError as exc:
                # Its errors without their context: that holds a validator's exception,
                # whose traceback ties this frame (and the ingest holding the store) into a
                # cycle through pydantic's objects that the collector cannot break.
                refused = exc.errors(include_url=False, include_context=False)
            else:
                self.keep(lineno, trace, raw, clean)
                return
        # The strict path words the error (or takes a line with NaN in its text).
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.error(
                lineno, f"invalid UTF-8 at byte {exc.start} of the line "
                f"({raw[exc.start : exc.start + 4]!r}); write the trace as UTF-8",
            )  # fmt: skip
            return
        try:
            data = parse_json(text)
            trace = trace_from_obj(data)
        except InputError as exc:
            self.error(lineno, str(exc))
            return
        if refused is not None:
            # Python's parser took what pydantic's refused: stored, the line could not be
            # read back (Inspect and export read it with pydantic's).
            self.error(lineno, str(explain_errors(refused, data)))
            return
        self.keep(lineno, trace, raw, clean)

    def obj(self, lineno: int, data: Any, where: str) -> None:
        """Validate one trace of a .json file (already parsed; ``where`` in the file);
        as with lines, any exception is this trace's error."""
        try:
            trace = trace_from_obj(data, where)
            raw = json.dumps(data, ensure_ascii=False).encode("utf-8", "surrogatepass")
            self.keep(lineno, trace, raw)
        except InputError as exc:
            self.error(lineno, str(exc))
        except Exception as exc:
            self.error(lineno, f"{where + ': ' if where else ''}{unexpected(exc)}")


@dataclass
class Spilled:
    """A worker's ``RowTables`` with its Arrow tables in files: sending them down the pool's
    pipe copied every byte three times and cost more CPU than building them."""

    ids: list[str]
    digests: list[str]
    sources: list[str | None]
    paths: dict[str, str]
    positions: list[int] = field(default_factory=list)
    rejected: list[tuple[int, str]] = field(default_factory=list)
    text_digests: list[bytes] = field(default_factory=list)

    @staticmethod
    def save(rows: RowTables, folder: str) -> Spilled:
        fd, base = tempfile.mkstemp(dir=folder)
        os.close(fd)
        os.unlink(base)
        paths: dict[str, str] = {}
        for name, table in rows.tables.items():
            paths[name] = f"{base}.{name}.arrow"
            with pa.OSFile(paths[name], "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
                w.write_table(table)
        return Spilled(
            rows.ids,
            rows.digests,
            rows.sources,
            paths,
            rows.positions,
            rows.rejected,
            rows.text_digests,
        )

    def load(self) -> RowTables:
        """The tables, memory-mapped (no copy); the files are gone once read."""
        tables: dict[str, pa.Table] = {}
        for name, path in self.paths.items():
            tables[name] = pa.ipc.open_file(pa.memory_map(path, "r")).read_all()
            os.unlink(path)  # the mapping outlives the name
        return RowTables(
            self.ids,
            self.digests,
            self.sources,
            tables,
            self.positions,
            self.rejected,
            self.text_digests,
        )

    def discard(self) -> None:
        """Remove the files unread (a chunk of a file that failed)."""
        for path in self.paths.values():
            with contextlib.suppress(OSError):
                os.unlink(path)


class ParsedChunk(NamedTuple):
    """A chunk of lines, parsed: its rows (spilled when a worker made them), its errors and
    the numbers of the lines its traces were on, counted from 1 within the chunk."""

    rows: Spilled | RowTables | None
    errors: list[tuple[str, int, str]]
    lines: list[int]
    #: how many lines the chunk held
    n_lines: int
    #: errors in the chunk, listed or not, and the line of the first one not listed
    n_errors: int = 0
    first_unlisted: int = 0


#: The lines of a chunk, or (offset, length, last bytes) of them in the file.
Payload = bytes | tuple[int, int, bytes]
#: What to do with a chunk once parsed (its rows inserted, its line numbers made the file's).
Then = Callable[[ParsedChunk], None]


class _NoPandas(importlib.abc.MetaPathFinder):
    """An import finder that answers "no such module" for pandas (see ``_worker_init``)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"no {name} in an ingest worker", name=name)
        return None


def _worker_init(owner: int) -> None:
    """Set up an ingest worker process (the pool's initializer).

    - It ends with the ingesting process ``owner`` (``ctxcore.processes.die_with``).
    - Nothing a worker does needs pandas, but pyarrow imports it the first time it builds
      an array, to recognise pandas objects: 0.2-0.3 s of CPU per worker. A worker's
      imports do not find it, and pyarrow carries on without it.
    - The cyclic garbage collector is off: decoding a chunk allocates hundreds of thousands
      of objects, none in cycles (all freed by reference counting), and the collections
      they set off cost 13% of a worker's time. Everything imported is frozen first, and
      ``_prepare_chunk`` collects what little is left after each chunk.
    """
    die_with(owner)
    sys.meta_path.insert(0, _NoPandas())
    pa.array([0])  # pyarrow's pandas check, now settled without pandas
    gc.freeze()
    gc.disable()


#: bytes a worker reads of its range at a time
_RANGE_READ_BYTES = 4 * 1024 * 1024


def _parse_range(run: FileRun, start: int, length: int, tail: bytes) -> int:
    """Parse the lines in ``length`` bytes of ``run.key`` from ``start``; how many lines
    there were. Read through ``LineBlocks``: a line over the limit is never held whole."""
    with open_regular(run.key) as f:
        state = ReadState(0, 0, b"")
        for first, block in LineBlocks(RangeReader(f, start, length), state, _RANGE_READ_BYTES):
            run.read_lines(first, block.split(b"\n")[:-1])
            del block
    if state.offset != length or state.rest or state.tail != tail[-FP_BYTES:]:
        raise InputError(f"{run.key} changed while it was being read; ingest it again")
    for lineno, _size in state.long_lines:
        run.error(lineno, too_long())
    return state.line


def _prepare_chunk(
    key: str, payload: Payload, diagnose: bool, spill_dir: str | None
) -> ParsedChunk:
    """Worker-process half of ingest: complete lines -> validated traces -> Arrow rows.

    ``payload``: the lines, or (offset, length, last bytes) of them in the file ``key``.
    ``spill_dir``: where a worker spills the rows; None when the ingesting process parses."""
    run = FileRun(key, fast=not diagnose)
    if isinstance(payload, bytes):
        lines = payload.split(b"\n")[:-1]
        run.read_lines(0, lines)
        n_lines = len(lines)
        del lines
    else:
        n_lines = _parse_range(run, *payload)
    counted = (n_lines, run.n_errors, run.first_unlisted)
    if not run.items:
        return ParsedChunk(None, run.errors, run.lines, *counted)
    rows = prepare(run.items, [key] * len(run.items), diagnose)
    run.items.clear()
    if spill_dir is None:
        return ParsedChunk(rows, run.errors, run.lines, *counted)
    out = Spilled.save(rows, spill_dir)
    del rows
    if not gc.isenabled():  # a pool worker (see _worker_init): collect after each chunk
        gc.collect()
    return ParsedChunk(out, run.errors, run.lines, *counted)


#: temp folders already cleaned by this process (the watcher ingests often)
_CLEANED: set[str] = set()


def clean_stale_spills() -> None:
    """Remove the spill folders of ingest runs that are gone (killed: they could not clean
    up), once per process and temp folder; a live run's folder is left alone."""
    folder = tempfile.gettempdir()
    if folder in _CLEANED:
        return
    _CLEANED.add(folder)
    for path in Path(folder).glob(f"{SPILL_PREFIX}*"):
        pid = path.name[len(SPILL_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except PermissionError:
            continue


class ParsePool:
    """Worker processes that parse the chunks of big files; chunks come back in order.

    Workers start with multiprocessing's forkserver, whose server imports what workers need
    once (on its first start; later pools fork from it warm): workers start in a few ms
    instead of importing for ~0.3 s each. The forkserver re-imports the ``__main__``
    script: only start a pool from a script guarded by ``if __name__ == "__main__"``.
    While the workers start, the ingesting process parses chunks itself. Workers end with
    this process, however it ends (``ctxcore.processes.die_with``).
    """

    def __init__(self, n_workers: int, diagnose: bool) -> None:
        self.diagnose = diagnose
        self.max_inflight = n_workers + 1
        self._ready = False  # a worker has finished a chunk (they have started)
        self._inflight: deque[tuple[Future[ParsedChunk], Then]] = deque()
        self.spill_dir = tempfile.mkdtemp(prefix=f"{SPILL_PREFIX}{os.getpid()}-")
        ctx = worker_context(["__main__", __name__])
        self._pool = ProcessPoolExecutor(
            max_workers=n_workers,
            mp_context=ctx,
            initializer=_worker_init,
            initargs=(os.getpid(),),
        )
        # Start the workers now, and meanwhile let pyarrow import pandas here (it does on
        # its first array, to recognise pandas objects): inside the first chunk's insert,
        # with the workers busy, that import stalled the pipeline for up to a second.
        self._pool.submit(int)
        pa.array([0])

    def submit(self, key: str, payload: Payload, then: Then) -> None:
        """Parse a chunk of the file ``key``, then call ``then`` with it. Chunks are handed
        on in the order they were submitted: here, as far as needed to keep at most
        ``max_inflight`` in flight, and the rest in ``drain``."""
        inflight = self._inflight
        if HELP_WHILE_POOL_STARTS and not self._ready and len(inflight) >= self.max_inflight:
            # The workers are still starting (importing): this process, idle until their
            # first chunk, parses this one itself meanwhile.
            fut: Future[ParsedChunk] = Future()
            try:
                fut.set_result(_prepare_chunk(key, payload, self.diagnose, None))
            except Exception as exc:
                fut.set_exception(exc)
        else:
            fut = self._pool.submit(_prepare_chunk, key, payload, self.diagnose, self.spill_dir)
        inflight.append((fut, then))
        while len(inflight) > self.max_inflight:
            if not self._ready:
                self._ready = any(f.done() for f, _ in inflight)
                if not self._ready and len(inflight) < 4 * self.max_inflight:
                    return
            self._take()

    def drain(self) -> None:
        """Hand on every chunk still in flight, in order."""
        while self._inflight:
            self._take()

    def discard(self) -> None:
        """Drop every chunk in flight unused (their file failed): wait for each, remove
        what it spilled."""
        while self._inflight:
            fut, _ = self._inflight.popleft()
            try:
                chunk = fut.result()
            except Exception:
                continue
            if isinstance(chunk.rows, Spilled):
                chunk.rows.discard()

    def _take(self) -> None:
        fut, then = self._inflight.popleft()
        then(fut.result())

    def close(self) -> None:
        """Stop the workers (chunks not started are cancelled) and remove the spill files."""
        self._inflight.clear()
        try:
            self._pool.shutdown(cancel_futures=True)
        finally:
            shutil.rmtree(self.spill_dir, ignore_errors=True)
