"""Read trace files into the store: idempotent, resumable, and tolerant of bad lines.

Agents append JSONL while we read it, so ingest remembers per file how many bytes (and
lines) it consumed, in the same transaction as the traces they held: after a crash the
next run starts exactly where the last committed one stopped, with nothing lost or
duplicated. A last line without its newline is a writer still writing; it is left for the
next call. A bad line becomes a row in ``ingest_errors`` (file, line, a sentence saying
what to fix) and never stops the rest of the file.

Each file's new traces commit in one transaction with its offset; a transaction holds
whole files only (several, up to TX_BYTES of input), and a big file streams in chunks
inside one. Lines are validated by ``ctxcore.store.fastdecode`` (msgspec) when the store does
not diagnose at insert, else by the pydantic models. With ``workers``, chunks of big files
are parsed, validated and turned into Arrow rows in worker processes; only the owning
process touches DuckDB.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import hashlib
import importlib.abc
import json
import os
import queue
import shutil
import sys
import tempfile
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import IO, Any, cast

import pyarrow as pa
from pydantic import ValidationError

from ctxcore import settings
from ctxcore.errors import InputError
from ctxcore.loading import parse_json, trace_from_obj
from ctxcore.models import Trace
from ctxcore.store import fastdecode
from ctxcore.store.rows import _SCHEMAS, Prepared, TraceView, prepare
from ctxcore.store.tracestore import (
    FileOffset,
    IngestCounts,
    IngestErrorRow,
    TraceStore,
    insert_table,
)

SUFFIXES = (".jsonl", ".json", ".jsonl.gz")
#: bytes read per step of a big file.
CHUNK_BYTES = 8 * 1024 * 1024
#: files with less than this to read are read whole and prepared in groups of up to
#: GROUP_FILES files / GROUP_BYTES bytes.
SMALL_FILE_BYTES = 4 * 1024 * 1024
GROUP_BYTES = 16 * 1024 * 1024
GROUP_FILES = 500
#: big ingests parse and validate in worker processes; small ones are not worth starting them.
POOL_MIN_BYTES = 64 * 1024 * 1024
#: input bytes per transaction (files are never split across transactions); a transaction's
#: decision rows are one streamed insert (``_DecisionStream``).
TX_BYTES = 1024 * 1024 * 1024
MAX_WORKERS = 4
#: bytes per chunk handed to a worker.
POOL_CHUNK_BYTES = 4 * 1024 * 1024
#: parse chunks in the ingesting process while the workers start (they import for ~0.3 s)
HELP_WHILE_POOL_STARTS = True
#: A line this long is refused unread: no valid trace gets near it (content <= 10 MB/packet).
MAX_LINE_BYTES = 256 * 1024 * 1024
_FP_BYTES = 64

Progress = Callable[[int, int], None]  # (bytes done, bytes total)


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


def _fingerprint(data: bytes) -> str:
    return hashlib.blake2b(data[-_FP_BYTES:], digest_size=8).hexdigest()


@dataclass
class _FileRun:
    """What one file contributes: its traces, its errors and where reading stopped."""

    key: str
    #: may lines skip pydantic (``ctxcore.store.fastdecode``)? Not when the store diagnoses at
    #: insert or ingest redacts: both work on ``models.Trace``.
    fast: bool = False
    items: list[tuple[TraceView, bytes]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    errors: list[tuple[str, int, str]] = field(default_factory=list)
    redact: bool = field(default_factory=settings.redact_on_ingest)

    def keep(self, lineno: int, trace: Trace, raw: bytes) -> None:
        if self.redact:
            from ctxcore.formats.redact import redact_trace

            trace, found = redact_trace(trace)
            if found:  # what is stored is the redacted trace, and nothing else
                raw = trace.to_json().encode("utf-8", "surrogatepass")
        self.items.append((trace, raw))
        self.lines.append(lineno)

    def line(self, lineno: int, raw: bytes) -> None:
        if raw[:1].isspace() or raw[-1:].isspace():  # (strip copies the line)
            raw = raw.strip()
        if not raw:
            return
        if len(raw) > MAX_LINE_BYTES:
            self.errors.append(
                (self.key, lineno, f"line is {len(raw):,} bytes, over the {MAX_LINE_BYTES:,}"
                 " byte limit; capture slices or summaries of big tool outputs")
            )  # fmt: skip
            return
        if self.fast and not self.redact:
            view = fastdecode.decode(raw)  # strict JSON: NaN and Infinity are refused
            if view is not None:
                self.items.append((view, raw))
                self.lines.append(lineno)
                return
        if b"NaN" not in raw and b"Infinity" not in raw:
            # pydantic parses and validates in one pass. (Its JSON parser takes NaN, which
            # JSON does not, so lines that may hold one take the strict path.)
            try:
                trace = Trace.model_validate_json(raw)
            except ValidationError:
                pass
            else:
                self.keep(lineno, trace, raw)
                return
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.errors.append(
                (self.key, lineno, f"invalid UTF-8 at byte {exc.start} of the line "
                 f"({raw[exc.start : exc.start + 4]!r}); write the trace as UTF-8")
            )  # fmt: skip
            return
        try:
            trace = trace_from_obj(parse_json(text))
        except InputError as exc:
            self.errors.append((self.key, lineno, str(exc)))
            return
        self.keep(lineno, trace, raw)

    def obj(self, lineno: int, data: Any, where: str) -> None:
        try:
            trace = trace_from_obj(data, where)
        except InputError as exc:
            self.errors.append((self.key, lineno, str(exc)))
            return
        self.keep(
            lineno, trace, json.dumps(data, ensure_ascii=False).encode("utf-8", "surrogatepass")
        )


class _Ingest:
    """One ingest run. Small files are read first and prepared in groups; a big file
    streams in chunks. A transaction spans files until TX_BYTES were read (each file's
    traces and offset still commit together); in it, decision rows stream into one INSERT
    as they are prepared, and the small tables are inserted at the commit."""

    def __init__(self, store: TraceStore, progress: Progress | None, complete_tail: bool) -> None:
        self.store = store
        self.progress = progress
        self.complete_tail = complete_tail
        self.counts = IngestCounts()
        self.offsets = store.file_offsets()
        self.done = 0
        self.total = 0
        self.pool: ProcessPoolExecutor | None = None
        self.pool_ready = False  # a worker has finished a chunk (they have started)
        self.max_inflight = 2
        self.chunk_bytes = CHUNK_BYTES
        self.spill_dir = ""
        self.small_file_bytes = SMALL_FILE_BYTES
        self.group: list[tuple[_FileRun, FileOffset | None]] = []
        self.group_bytes = 0
        self.pending_errors: list[tuple[str, int, str]] = []
        self.tx_tables: dict[str, list[pa.Table]] = {}
        self.tx_known: dict[str, tuple[str, str | None]] = {}
        self._stream: _DecisionStream | None = None
        self._read_cur: Any = None
        self._tx: ExitStack | None = None
        self._tx_cur: Any = None
        self.tx_bytes = 0
        self.tx_offsets: list[FileOffset] = []
        self._writer: ThreadPoolExecutor | None = None

    def tick(self, n: int) -> None:
        self.done += n
        if self.progress is not None:
            self.progress(self.done, self.total)

    # ------------------------------------------------------------------ writing

    def cur(self) -> Any:
        """The cursor of the open write transaction (opened on first use)."""
        if self._tx is None:
            stack = ExitStack()
            self._tx_cur = stack.enter_context(self.store.transaction())
            self._tx = stack
        return self._tx_cur

    def commit(self) -> None:
        if self._tx is None:
            return
        cur = self._tx_cur
        if self._stream is not None:
            stream, self._stream = self._stream, None
            stream.close()  # the decisions INSERT has every row once this returns
        for name in ("traces", "partitions", "findings"):
            parts = self.tx_tables.pop(name, [])
            if parts:
                insert_table(cur, name, pa.concat_tables(parts))
        self.tx_tables, self.tx_known = {}, {}
        if self.pending_errors:
            rows = self.store.insert_errors(cur, self.pending_errors)
            self.counts.errors += len(rows)
            self.counts.error_rows += rows
            self.pending_errors = []
        self.store.set_file_offsets(cur, self.tx_offsets)
        tx, self._tx, self._tx_cur, self.tx_bytes = self._tx, None, None, 0
        self.tx_offsets = []
        tx.close()

    def abort(self) -> None:
        """Roll the open transaction back (an exception is on its way up)."""
        if self._stream is not None:
            stream, self._stream = self._stream, None
            stream.abort()
        if self._tx is not None:
            tx, self._tx, self._tx_cur = self._tx, None, None
            tx.__exit__(RuntimeError, RuntimeError("ingest aborted"), None)

    def flush(self, runs: Sequence[_FileRun]) -> None:
        """Prepare the rows of the traces and errors the runs hold."""
        items = [it for r in runs for it in r.items]
        where = [(r.key, ln) for r in runs for ln in r.lines]
        errors = [e for r in runs for e in r.errors]
        prep = prepare(items, [w[0] for w in where], self.store.diagnose) if items else None
        self.apply(prep, where, errors)
        for r in runs:
            r.items, r.lines, r.errors = [], [], []

    def apply(
        self,
        prep: Prepared | _Spilled | None,
        where: Sequence[tuple[str, int]],
        errors: list[tuple[str, int, str]],
    ) -> None:
        """New traces' decision rows go to the transaction's decisions stream at once;
        their other rows and the errors wait for the commit (they are small)."""
        self.cur()
        if prep is not None:
            if isinstance(prep, _Spilled):
                prep = prep.load()
            if self._read_cur is None:
                self._read_cur = self.store.read_cursor()
            tables, res = self.store.plan_insert(self._read_cur, prep, self.tx_known)
            self.counts.traces_added += res.added
            self.counts.traces_skipped += res.skipped
            for idx, tid, src in res.conflicts:
                errors.append(
                    (*where[idx], f"trace_id {tid!r} is already stored (from {src}) with "
                     "different content; give this trace its own trace_id")
                )  # fmt: skip
            decisions = tables.pop("decisions", None)
            if decisions is not None:
                if self._stream is None:
                    if self._writer is None:
                        self._writer = ThreadPoolExecutor(1, thread_name_prefix="ctxscope-ingest")
                    self._stream = _DecisionStream(self._tx_cur, self._writer)
                self._stream.put(decisions)
            for name, table in tables.items():
                self.tx_tables.setdefault(name, []).append(table)
        self.pending_errors += errors

    def done_with(self, offsets: Sequence[FileOffset], nbytes: int) -> None:
        """Files fully read: their offsets join the open transaction (written at commit),
        which commits once it holds TX_BYTES of input."""
        self.cur()
        self.tx_offsets += offsets
        self.tx_bytes += nbytes
        if self.tx_bytes >= TX_BYTES:
            self.commit()

    def flush_group(self) -> None:
        if not self.group:
            return
        group, nbytes = self.group, self.group_bytes
        self.group, self.group_bytes = [], 0
        self.flush([r for r, _ in group])
        self.done_with([off for _, off in group if off is not None], nbytes)

    # ------------------------------------------------------------------ per file

    def file(self, path: Path) -> None:
        key = str(path.resolve())
        try:
            st = path.stat()
        except FileNotFoundError:
            return  # a temp file renamed away between listing and reading
        prev = self.offsets.get(key)
        name = path.name
        if prev is not None and prev.size == st.st_size and prev.mtime == st.st_mtime:
            # Unchanged. A waiting last line is only worth another look in complete_tail mode.
            if not self.complete_tail or name.endswith(".gz") or prev.offset >= st.st_size:
                return
        self.counts.files += 1
        run = _FileRun(key, fast=not self.store.diagnose)
        gz = name.endswith(".jsonl.gz")
        left = st.st_size - (prev.offset if prev is not None and not gz else 0)
        try:
            if left > self.small_file_bytes and not name.endswith(".json"):
                self.flush_group()  # keep files in order
                big = self.big_file(run, st, prev, gz)
                self.done_with([big], left)
                return
            off: FileOffset | None
            if name.endswith((".jsonl.gz", ".jsonl")):
                off = self.lines(run, st, prev, gz, None)
            elif name.endswith(".json"):
                off = self.whole(run, st, path)
            else:
                run.errors.append((key, 0, f"not a trace file (expected {', '.join(SUFFIXES)})"))
                off = FileOffset(key, st.st_size, 0, st.st_size, st.st_mtime)
        except FileNotFoundError:
            return
        except OSError as exc:
            run = _FileRun(key)
            run.errors.append((key, 0, f"cannot read ({exc.strerror}); check permissions"))
            off = None
        self.group.append((run, off))
        self.group_bytes += max(left, 0)
        if self.group_bytes >= GROUP_BYTES or len(self.group) >= GROUP_FILES:
            self.flush_group()

    def big_file(
        self, run: _FileRun, st: os.stat_result, prev: FileOffset | None, gz: bool
    ) -> FileOffset:
        """Stream a big file in chunks; with a worker pool, chunks are parsed, validated
        and turned into Arrow rows in parallel while this process inserts them in order."""
        pool = self.pool
        if pool is None:
            off = self.lines(run, st, prev, gz, lambda: self.flush([run]), None)
            self.flush([run])
            return off
        # Workers number their lines from 1. The line before a chunk is known when it is
        # submitted (a .gz: the reader counts them) or, for a plain file whose lines this
        # process never reads, when it is consumed: chunks are consumed in order.
        inflight: deque[tuple[Future[_Chunk], int | None]] = deque()
        line_before = [0]

        def consume(item: tuple[Future[_Chunk], int | None]) -> None:
            fut, known = item
            spilled, errors, lines, n_lines = fut.result()
            base = line_before[0] if known is None else known
            line_before[0] = base + n_lines
            # mapped only when inserted: two batches in memory (pending and inserting)
            # were most of the owner's peak
            self.apply(
                spilled,
                [(run.key, base + ln) for ln in lines],
                [(k, base + ln, msg) for k, ln, msg in errors],
            )

        def submit(payload: bytes | tuple[int, int, bytes], first: int | None = None) -> None:
            if (
                HELP_WHILE_POOL_STARTS
                and not self.pool_ready
                and len(inflight) >= self.max_inflight
            ):
                # The workers are still starting (importing): this process, idle until
                # their first chunk, parses this one itself meanwhile.
                fut: Future[_Chunk] = Future()
                try:
                    fut.set_result(_prepare_chunk(run.key, payload, self.store.diagnose, None))
                except Exception as exc:
                    fut.set_exception(exc)
            else:
                fut = pool.submit(
                    _prepare_chunk, run.key, payload, self.store.diagnose, self.spill_dir
                )
            inflight.append((fut, first))
            while len(inflight) > self.max_inflight:
                if not self.pool_ready:
                    self.pool_ready = any(f.done() for f, _ in inflight)
                    if not self.pool_ready and len(inflight) < 4 * self.max_inflight:
                        return
                consume(inflight.popleft())

        if gz:  # a .gz cannot seek: its bytes travel down the pool's pipe
            off = self.lines(run, st, prev, gz, None, lambda data, _at, first: submit(data, first))
            while inflight:
                consume(inflight.popleft())
            self.flush([run])  # the last line, read in this process (complete_tail)
            return off
        # A plain file: this process only finds where chunks end (a few kB read per chunk);
        # each worker reads its byte range itself, from the page cache.
        with open(run.key, "rb") as f:
            start, line_before[0], _tail = _resume(f, st, prev, False)
            size, pos = st.st_size, start
            while pos < size:
                end = _chunk_end(f, pos, min(pos + self.chunk_bytes, size), size)
                if end < 0:
                    break
                f.seek(max(pos, end - _FP_BYTES))
                submit((pos, end - pos, f.read(min(end - pos, _FP_BYTES))))
                self.tick(end - pos)
                pos = end
            f.seek(pos)
            rest = f.read(size - pos)
            f.seek(max(0, pos - _FP_BYTES))
            tail = f.read(min(pos, _FP_BYTES))
        while inflight:
            consume(inflight.popleft())
        lineno = line_before[0]
        if rest.strip():
            if self.complete_tail and _is_json(rest):
                lineno += 1
                run.line(lineno, rest)
                pos += len(rest)
                tail = (tail + rest[-_FP_BYTES:])[-_FP_BYTES:]
            else:
                self.counts.pending.append((run.key, lineno + 1))
        self.flush([run])
        fp = _fingerprint(tail) if pos else None
        return FileOffset(run.key, pos, lineno, st.st_size, st.st_mtime, fp)

    def _open(self, key: str, gz: bool) -> IO[bytes]:
        if gz:
            return cast(IO[bytes], gzip.open(key, "rb"))
        return open(key, "rb")  # noqa: SIM115 - closed by the caller

    def lines(
        self,
        run: _FileRun,
        st: os.stat_result,
        prev: FileOffset | None,
        gz: bool,
        on_chunk: Callable[[], None] | None,
        submit: Callable[[bytes, int, int], None] | None = None,
    ) -> FileOffset:
        """Read complete lines from the stored offset on; returns the new offset.

        Lines go to ``run`` (and ``on_chunk`` is called after each chunk), or, with
        ``submit``, each chunk of complete lines is handed over whole (with its offset and
        the number of the line before it)."""
        key = run.key
        with self._open(key, gz) as f:
            offset, lineno, tail = _resume(f, st, prev, gz)
            buf = b""
            truncated_gz = False
            while True:
                try:
                    chunk = f.read(self.chunk_bytes)
                except (EOFError, gzip.BadGzipFile, zlib.error):
                    truncated_gz = True  # a .gz still being written: wait for the rest
                    chunk = b""
                if not chunk:
                    break
                if not gz:
                    self.tick(len(chunk))
                buf += chunk
                end = buf.rfind(b"\n")
                if end < 0:
                    continue
                complete, buf = buf[: end + 1], buf[end + 1 :]
                if submit is not None:
                    submit(complete, offset, lineno)
                    lineno += complete.count(b"\n")
                else:
                    for raw in complete.split(b"\n")[:-1]:
                        lineno += 1
                        run.line(lineno, raw)
                offset += len(complete)
                tail = (tail + complete[-_FP_BYTES:])[-_FP_BYTES:]
                del complete
                if on_chunk is not None:
                    on_chunk()
            if buf.strip():
                if self.complete_tail and not truncated_gz and _is_json(buf):
                    lineno += 1
                    run.line(lineno, buf)
                    offset += len(buf)
                    tail = (tail + buf[-_FP_BYTES:])[-_FP_BYTES:]
                else:
                    self.counts.pending.append((key, lineno + 1))
        fp = _fingerprint(tail) if offset else None
        return FileOffset(key, offset, lineno, st.st_size, st.st_mtime, fp)

    def whole(self, run: _FileRun, st: os.stat_result, path: Path) -> FileOffset:
        key = run.key
        data = path.read_bytes()
        self.tick(len(data))
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            run.errors.append(
                (key, line, f"invalid UTF-8 at byte {exc.start}; re-save the file as UTF-8")
            )
            text = None
        if text is not None and text.strip():
            try:
                obj = json.loads(text, parse_constant=_no_constant)
            except json.JSONDecodeError as exc:
                run.errors.append(
                    (key, exc.lineno, f"malformed JSON at column {exc.colno}: {exc.msg}")
                )
            except ValueError as exc:
                run.errors.append((key, 1, str(exc)))
            else:
                if isinstance(obj, list):
                    for k, item in enumerate(obj):
                        run.obj(0, item, f"traces[{k}]")
                elif isinstance(obj, dict) and "traces" in obj and "schema" not in obj:
                    for k, item in enumerate(obj["traces"] or []):
                        run.obj(0, item, f"traces[{k}]")
                else:
                    run.obj(1, obj, "")
        return FileOffset(key, len(data), 0, st.st_size, st.st_mtime, _fingerprint(data))


class _DecisionStream:
    """One ``INSERT INTO decisions`` per transaction, fed chunk by chunk while the next
    chunks are parsed. DuckDB pulls the rows from a queue (without holding the GIL while it
    writes), and one append this size goes to disk once: separate inserts of a few hundred
    thousand rows each left DuckDB a rewrite of about a second at its next checkpoint."""

    def __init__(self, cur: Any, writer: ThreadPoolExecutor) -> None:
        self._q: queue.Queue[pa.Table | None] = queue.Queue(maxsize=8)
        schema = _SCHEMAS["decisions"]

        def batches() -> Iterator[pa.RecordBatch]:
            while True:
                table = self._q.get()
                if table is None:
                    return
                yield from table.cast(schema).to_batches()

        def run() -> None:
            insert_table(cur, "decisions", pa.RecordBatchReader.from_batches(schema, batches()))

        self._job: Future[None] = writer.submit(run)

    def put(self, table: pa.Table | None) -> None:
        while True:
            if self._job.done():  # the INSERT failed: raise its error here
                self._job.result()
                raise RuntimeError("the decisions insert stopped before its input ended")
            try:
                self._q.put(table, timeout=0.1)
                return
            except queue.Full:
                continue

    def close(self) -> None:
        self.put(None)
        self._job.result()

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self.put(None)
        with contextlib.suppress(Exception):
            self._job.result()


@dataclass
class _Spilled:
    """A worker's ``Prepared`` with its Arrow tables in files: sending them down the pool's
    pipe copied every byte three times and cost more CPU than building them."""

    ids: list[str]
    digests: list[str]
    sources: list[str | None]
    paths: dict[str, str]

    @staticmethod
    def save(prep: Prepared, folder: str) -> _Spilled:
        fd, base = tempfile.mkstemp(dir=folder)
        os.close(fd)
        os.unlink(base)
        paths: dict[str, str] = {}
        for name, table in prep.tables.items():
            paths[name] = f"{base}.{name}.arrow"
            with pa.OSFile(paths[name], "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
                w.write_table(table)
        return _Spilled(prep.ids, prep.digests, prep.sources, paths)

    def load(self) -> Prepared:
        """The tables, memory-mapped (no copy); the files are gone once read."""
        tables: dict[str, pa.Table] = {}
        for name, path in self.paths.items():
            tables[name] = pa.ipc.open_file(pa.memory_map(path, "r")).read_all()
            os.unlink(path)  # the mapping outlives the name
        return Prepared(self.ids, self.digests, self.sources, tables)


_Chunk = tuple[_Spilled | Prepared | None, list[tuple[str, int, str]], list[int], int]


class _NoPandas(importlib.abc.MetaPathFinder):
    """An import finder that answers "no such module" for pandas (see ``_worker_init``)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"no {name} in an ingest worker", name=name)
        return None


def _worker_init() -> None:
    """Set up an ingest worker process (the pool's initializer).

    - Nothing a worker does needs pandas, but pyarrow imports it the first time it builds
      an array, to recognise pandas objects: 0.2-0.3 s of CPU per worker. A worker's
      imports do not find it, and pyarrow carries on without it.
    - The cyclic garbage collector is off: decoding a chunk allocates hundreds of thousands
      of objects, none in cycles (all freed by reference counting), and the collections
      they set off cost 13% of a worker's time. Everything imported is frozen first, and
      ``_prepare_chunk`` collects what little is left after each chunk.
    """
    sys.meta_path.insert(0, _NoPandas())
    pa.array([0])  # pyarrow's pandas check, now settled without pandas
    gc.freeze()
    gc.disable()


def _prepare_chunk(
    key: str,
    payload: bytes | tuple[int, int, bytes],
    diagnose: bool,
    spill_dir: str | None,
) -> _Chunk:
    """Worker-process half of ingest: complete lines -> validated traces -> Arrow rows.

    ``payload``: the lines, or (offset, length, last bytes) of them in the file ``key``.
    Lines are numbered from 1 within the chunk; returns how many it held."""
    if isinstance(payload, bytes):
        data = payload
    else:
        start, length, tail = payload
        with open(key, "rb") as f:
            f.seek(start)
            data = f.read(length)
        if len(data) != length or not data.endswith(tail):
            raise InputError(f"{key} changed while it was being read; ingest it again")
    run = _FileRun(key, fast=not diagnose)
    lines = data.split(b"\n")[:-1]
    del data
    for lineno, raw in enumerate(lines, 1):
        run.line(lineno, raw)
    n_lines = len(lines)
    del lines
    if not run.items:
        return None, run.errors, run.lines, n_lines
    prep = prepare(run.items, [key] * len(run.items), diagnose)
    run.items.clear()
    if spill_dir is None:  # parsed in the ingesting process itself
        return prep, run.errors, run.lines, n_lines
    out = _Spilled.save(prep, spill_dir)
    del prep
    if not gc.isenabled():  # a pool worker (see _worker_init): collect after each chunk
        gc.collect()
    return out, run.errors, run.lines, n_lines


def _resume(
    f: IO[bytes], st: os.stat_result, prev: FileOffset | None, gz: bool
) -> tuple[int, int, bytes]:
    """Where to go on reading ``f`` (offset, lines before it, the bytes just before it):
    the stored offset when the bytes before it are the ones read last time, else 0."""
    offset, lineno = (prev.offset, prev.line) if prev is not None else (0, 0)
    tail = b""  # the last bytes consumed, for the fingerprint
    if offset and (gz or offset <= st.st_size):
        if gz:
            ok = _skip(f, offset - _FP_BYTES)
            tail = f.read(min(offset, _FP_BYTES)) if ok else b""
        else:
            f.seek(max(0, offset - _FP_BYTES))
            tail = f.read(min(offset, _FP_BYTES))
        if prev is None or _fingerprint(tail) != prev.fingerprint:
            offset, lineno, tail = 0, 0, b""
    elif offset:
        offset, lineno = 0, 0  # the file shrank: it was replaced; read it again
    if offset == 0:
        f.seek(0)
    return offset, lineno, tail


_WINDOW = 64 * 1024


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


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON (NaN and Infinity are not numbers in JSON)")


def _is_json(buf: bytes) -> bool:
    try:
        json.loads(buf)
    except ValueError:
        return False
    return True


def _skip(f: IO[bytes], n: int) -> bool:
    """Read and discard ``n`` bytes (gzip streams cannot seek cheaply); False if shorter."""
    while n > 0:
        got = f.read(min(n, CHUNK_BYTES))
        if not got:
            return False
        n -= len(got)
    return True


def ingest_paths(
    store: TraceStore,
    paths: Sequence[str | Path],
    progress: Progress | None = None,
    *,
    complete_tail: bool = False,
    workers: int | None = 1,
) -> IngestCounts:
    """Ingest files and folders of traces; each file's new traces in one transaction.

    ``complete_tail``: also read a last line that lacks its newline when it is a complete
    JSON value (the one-shot CLI does this; the watcher does not, a writer may be mid-line).
    ``workers``: processes that parse and validate big files (``None``: one per CPU, up
    to MAX_WORKERS; default 1 = none). Only runs with at least POOL_MIN_BYTES to
    read use them.
    Workers start with multiprocessing's forkserver, which re-imports the ``__main__``
    script: only pass ``workers`` > 1 from a script guarded by ``if __name__ == "__main__"``
    (the CLI is).
    """
    files = find_files(paths)
    job = _Ingest(store, progress, complete_tail)
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        prev = job.offsets.get(str(f.resolve()))
        job.total += max(
            0, st.st_size - (prev.offset if prev and not f.name.endswith(".gz") else 0)
        )
    # Auto: one worker per CPU. This process only reads line boundaries and waits for
    # DuckDB, which inserts without holding the GIL (bench/bench_store.py, 2 CPUs: 2 workers
    # 117k packets/s, no pool 83k).
    n_workers = (os.cpu_count() or 1) if workers is None else workers
    if job.total >= POOL_MIN_BYTES and min(n_workers, MAX_WORKERS) > 1:
        ctx = get_context("forkserver")
        # The server imports what workers need once (on its first start; later pools fork
        # from it warm): workers start in a few ms instead of importing for ~0.3 s each.
        ctx.set_forkserver_preload(["__main__", "ctxcore.store.ingest"])
        job.pool = ProcessPoolExecutor(
            max_workers=min(n_workers, MAX_WORKERS), mp_context=ctx, initializer=_worker_init
        )
        # Start the workers now, and meanwhile let pyarrow import pandas here (it does on
        # its first array, to recognise pandas objects): inside the first chunk's insert,
        # with the workers busy, that import stalled the pipeline for up to a second.
        job.pool.submit(int)
        pa.array([0])
        job.max_inflight = min(n_workers, MAX_WORKERS) + 1
        job.chunk_bytes = POOL_CHUNK_BYTES
        job.spill_dir = tempfile.mkdtemp(prefix="ctxscope-ingest-")
    try:
        with (
            store.threads(1) if job.pool is not None and not store.read_only
            else contextlib.nullcontext()
        ):  # fmt: skip
            for f in files:
                job.file(f)
            job.flush_group()
            job.commit()
    except BaseException:
        job.abort()
        raise
    finally:
        if job.pool is not None:
            job.pool.shutdown(cancel_futures=True)
        if job._writer is not None:
            job._writer.shutdown()
        if job._read_cur is not None:  # the watcher ingests often: no cursor left open
            with contextlib.suppress(Exception):
                job._read_cur.close()
        if job.spill_dir:
            shutil.rmtree(job.spill_dir, ignore_errors=True)
    job.counts.error_rows.sort(key=lambda e: (e.file, e.line))
    return job.counts


# ---------------------------------------------------------------------------- CLI


def format_counts(c: IngestCounts) -> str:
    return (
        f"{c.traces_added} new traces from {c.files} files "
        f"({c.traces_skipped} already stored, {c.errors} errors)"
    )


def format_error(e: IngestErrorRow) -> str:
    return f"{e.file}:{e.line}: {e.message}"


__all__ = [
    "SUFFIXES",
    "find_files",
    "format_counts",
    "ingest_paths",
    "is_trace_file",
]
