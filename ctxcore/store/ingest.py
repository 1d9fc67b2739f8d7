"""Read trace files into the store: idempotent, resumable, and tolerant of bad lines.

Agents append JSONL while we read it, so ingest remembers per file how many bytes (and
lines) it consumed, in the same transaction as the traces they held: after a crash the
next run starts exactly where the last committed one stopped, with nothing lost or
duplicated. A last line without its newline is a writer still writing; it is left for the
next call. A bad line becomes a row in ``ingest_errors`` (file, line, a sentence saying
what to fix) and never stops the rest of the file; a file keeps at most
MAX_ERRORS_PER_FILE rows per run, and one more row counts the rest.

A file that cannot be read at all (a FIFO, a broken ``.gz``, no permission, a document over
MAX_DOCUMENT_BYTES, or any unexpected exception while it is read) costs that file only:
it gets an error row and its offset row says why (``FileOffset.failed``; the app shows
``Store.failing_files``), and it is not tried again until its size, mtime or inode
change. Only a failure of the store itself stops a run.

Each file's new traces commit in one transaction with its offset; a transaction holds
whole files only (several, up to TX_BYTES of input), and a big file streams in chunks
inside one. This module orchestrates; ``readers`` finds files, offsets and complete lines,
``workers`` parses lines into rows (in worker processes for big ingests), and the store's
``BulkWriter`` (``protocol``) owns the transactions. Only the ingesting process touches the
store. See docs/design.md, "Ingest and the watcher".
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from types import TracebackType

from ctxcore import sharing
from ctxcore.errors import InputError, StoreError
from ctxcore.loading import open_regular, too_long
from ctxcore.settings import MAX_DOCUMENT_BYTES
from ctxcore.store import readers
from ctxcore.store.protocol import Store
from ctxcore.store.readers import SUFFIXES, ReadState, find_files
from ctxcore.store.records import FileOffset, IngestCounts, IngestErrorRow
from ctxcore.store.rows import RowTables, prepare
from ctxcore.store.workers import (
    FileRun,
    ParsedChunk,
    ParsePool,
    Spilled,
    clean_stale_spills,
    clip,
)

#: bytes read per step of a big file.
CHUNK_BYTES = 8 * 1024 * 1024
#: files with less than this to read are read whole and prepared in groups of up to
#: GROUP_FILES files / GROUP_BYTES bytes.
SMALL_FILE_BYTES = 4 * 1024 * 1024
GROUP_BYTES = 16 * 1024 * 1024
GROUP_FILES = 500
#: big ingests parse and validate in worker processes; small ones are not worth starting them.
POOL_MIN_BYTES = 64 * 1024 * 1024
#: input bytes per transaction (files are never split across transactions; a mid-run
#: commit stalls the pipeline); a transaction's decision rows are one streamed insert
#: (see ``BulkWriter``).
TX_BYTES = 1024 * 1024 * 1024
MAX_WORKERS = 4
#: bytes per chunk handed to a worker.
POOL_CHUNK_BYTES = 4 * 1024 * 1024

Progress = Callable[[int, int], None]  # (bytes done, bytes total)
#: the part tables of the files this process tails (docs/design.md, "Shared traces")
PART_TABLES = sharing.PartTables()


class _Ingest:
    """One ingest run of ``files``, set up at construction (the worker pool when there is
    enough to read) and ended by ``close()`` (it is a context manager).

    Small files are read first and prepared in groups; a big file streams in chunks. A
    transaction spans files until TX_BYTES were read (each file's traces and offset still
    commit together)."""

    def __init__(
        self,
        store: Store,
        files: Sequence[Path],
        progress: Progress | None,
        *,
        complete_tail: bool,
        workers: int | None,
    ) -> None:
        self.store = store
        self.files = files
        self.progress = progress
        self.complete_tail = complete_tail
        self.counts = IngestCounts()
        self.offsets = store.file_offsets()
        self.total = sum(self._left(f) for f in files)
        self.done = 0
        self.group: list[tuple[FileRun, FileOffset | None]] = []
        self.group_bytes = 0
        self.tx_bytes = 0
        # Auto: one worker per CPU. This process only reads line boundaries and waits for
        # DuckDB, which inserts without holding the GIL (bench/bench_store.py, 2 CPUs: 2
        # workers 117k packets/s, no pool 83k).
        n = min((os.cpu_count() or 1) if workers is None else workers, MAX_WORKERS)
        n = n if self.total >= POOL_MIN_BYTES and n > 1 else 0
        # with workers using the CPUs, the store's engine may keep to fewer threads
        self.writer = store.bulk_writer(workers=n)
        try:
            self.pool = ParsePool(n, store.diagnose) if n else None
        except BaseException:
            self.writer.close()
            raise
        self.chunk_bytes = CHUNK_BYTES if self.pool is None else POOL_CHUNK_BYTES

    def _left(self, path: Path) -> int:
        """Bytes of ``path`` not read yet (for progress)."""
        try:
            st = path.stat()
        except OSError:
            return 0
        prev = self.offsets.get(str(path.resolve()))
        if prev is not None and prev.failed is not None and _same_file(prev, st):
            return 0  # not tried again until it changes
        read = prev.offset if prev is not None and not path.name.endswith(".gz") else 0
        return max(0, st.st_size - read)

    def run(self) -> IngestCounts:
        """Ingest the files; what was added, skipped and refused (errors by file and line)."""
        for f in self.files:
            self.file(f)
        self.flush_group()
        self.commit()
        self.counts.error_rows.sort(key=lambda e: (e.file, e.line))
        return self.counts

    def close(self) -> None:
        """Roll back what is not committed (an exception is on its way up), stop the
        workers and the writer's thread."""
        try:
            self.writer.close()
        finally:
            if self.pool is not None:
                self.pool.close()

    def __enter__(self) -> _Ingest:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def tick(self, n: int) -> None:
        self.done += n
        if self.progress is not None:
            self.progress(self.done, self.total)

    # ------------------------------------------------------------------ writing

    def commit(self) -> None:
        errors = self.writer.commit()
        self.counts.errors += len(errors)
        self.counts.error_rows += errors
        self.tx_bytes = 0

    def flush(self, runs: Sequence[FileRun]) -> None:
        """Prepare the rows of the traces and errors the runs hold."""
        items = [it for r in runs for it in r.items]
        where = [(r.key, ln) for r in runs for ln in r.lines]
        errors = [e for r in runs for e in r.errors]
        rows = prepare(items, [w[0] for w in where], self.store.diagnose) if items else None
        self.apply(rows, where, errors)
        for r in runs:
            r.items, r.lines, r.errors = [], [], []

    def apply(
        self,
        rows: RowTables | Spilled | None,
        where: Sequence[tuple[str, int]],
        errors: list[tuple[str, int, str]],
    ) -> None:
        """New traces go to the writer (their decision rows into the transaction's INSERT
        at once); a trace_id stored with other content, or a trace whose rows could not be
        built, becomes an error on its line."""
        if rows is not None:
            # A worker's rows are mapped only now: two batches in memory (waiting and
            # inserting) were most of this process's peak.
            res = self.writer.add(rows.load() if isinstance(rows, Spilled) else rows)
            self.counts.traces_added += res.added
            self.counts.traces_skipped += res.skipped
            for idx, tid, src in res.conflicts:
                errors.append(
                    (*where[idx], clip(f"trace_id {tid!r} is already stored (from {src}) "
                     "with different content; give this trace its own trace_id"))
                )  # fmt: skip
            errors += [(*where[idx], why) for idx, why in res.rejected]
        self.writer.add_errors(errors)

    def apply_chunk(self, run: FileRun, line_before: int, chunk: ParsedChunk) -> None:
        """A parsed chunk of ``run``'s file, whose lines it numbered from 1."""
        run.absorb(chunk, line_before)
        errors, run.errors = run.errors, []
        self.apply(chunk.rows, [(run.key, line_before + ln) for ln in chunk.lines], errors)

    def done_with(self, offsets: Sequence[FileOffset], nbytes: int) -> None:
        """Files fully read: their offsets join the open transaction (written at commit),
        which commits once it holds TX_BYTES of input."""
        self.writer.add_offsets(offsets)
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
            st = os.stat(path)
        except FileNotFoundError:
            return  # a temp file renamed away between listing and reading
        except OSError as exc:
            self.fail(key, None, None, f"cannot read ({exc.strerror}); check permissions")
            return
        prev = self.offsets.get(key)
        name = path.name
        gz = name.endswith(".jsonl.gz")
        if prev is not None and _same_file(prev, st):
            if prev.failed is not None:
                return  # it failed as it is: tried again once it changes
            # Unchanged. A waiting last line is only worth another look in complete_tail mode.
            if not self.complete_tail or gz or prev.offset >= st.st_size:
                return
        self.counts.files += 1
        if not stat.S_ISREG(st.st_mode):
            why = "not a regular file (a FIFO, socket or device); ingest reads files only"
            self.fail(key, st, prev, why)
            return
        run = FileRun(key, fast=not self.store.diagnose)
        left = st.st_size - (prev.offset if prev is not None and not gz else 0)
        try:
            if left > SMALL_FILE_BYTES and not name.endswith(".json"):
                self.flush_group()  # keep files in order
                big = self.big_file(run, st, prev, gz)
                self.done_with([big], left)
                return
            off: FileOffset | None
            if name.endswith((".jsonl.gz", ".jsonl")):
                off = self.lines(run, st, prev, gz)
            elif name.endswith(".json"):
                off = self.whole(run, st)
            else:
                run.error(0, f"not a trace file (expected {', '.join(SUFFIXES)})")
                off = FileOffset(key, st.st_size, 0, st.st_size, st.st_mtime, inode=st.st_ino)
            _list_the_rest(run)
        except FileNotFoundError:
            return
        except StoreError:
            raise  # the store failed, not this file: the run stops
        except Exception as exc:
            self.fail(key, st, prev, _why(key, exc))
            return
        self.group.append((run, off))
        self.group_bytes += max(left, 0)
        if self.group_bytes >= GROUP_BYTES or len(self.group) >= GROUP_FILES:
            self.flush_group()

    def fail(self, key: str, st: os.stat_result | None, prev: FileOffset | None, why: str) -> None:
        """The file ``key`` cannot be read: an error row, and (with its stat) an offset row
        saying why, so that it is not tried again until it changes. What it had been read
        up to stays (a later read goes on from there if the file is still the same)."""
        if self.pool is not None:
            self.pool.discard()  # chunks of it still in flight
        self.writer.add_errors([(key, 0, clip(why))])
        if st is not None:
            base = prev or FileOffset(key, 0, 0, 0, 0.0)
            off = FileOffset(
                key, base.offset, base.line, st.st_size, st.st_mtime, base.fingerprint,
                st.st_ino, base.head, clip(why),
            )  # fmt: skip
            self.writer.add_offsets([off])

    def big_file(
        self, run: FileRun, st: os.stat_result, prev: FileOffset | None, gz: bool
    ) -> FileOffset:
        """Stream a big file in chunks; with the worker pool, chunks are parsed, validated
        and turned into Arrow rows in parallel while this process inserts them in order."""
        # shared lines name parts of the lines before them: such a file is read in order
        pool = None if sharing.may_hold_shared(run.key, gz) else self.pool
        if pool is None:
            off = self.lines(run, st, prev, gz, each_block=lambda: self.flush([run]))
            _list_the_rest(run)
            self.flush([run])
            return off
        if gz:
            # A .gz cannot seek: its bytes travel down the pool's pipe, each block numbered
            # from the line before it, which the reader counted.
            def submit(data: bytes, line_before: int) -> None:
                pool.submit(run.key, data, partial(self.apply_chunk, run, line_before))

            off = self.lines(run, st, prev, gz, submit=submit)
            pool.drain()
            _list_the_rest(run)
            self.flush([run])  # the last line, read in this process (complete_tail)
            return off
        # A plain file: this process only finds where chunks end (a few kB read per chunk);
        # each worker reads its byte range itself, from the page cache.
        with open_regular(run.key) as f:
            state = readers.resume(f, st, prev, False)

            def count_lines(chunk: ParsedChunk) -> None:
                # Workers number lines within their range; ranges come back in order.
                line_before, state.line = state.line, state.line + chunk.n_lines
                self.apply_chunk(run, line_before, chunk)

            for start, length, tail in readers.line_ranges(f, state, st.st_size, self.chunk_bytes):
                pool.submit(run.key, (start, length, tail), count_lines)
                self.tick(length)
        pool.drain()
        self.last_line(run, state)
        _list_the_rest(run)
        self.flush([run])
        return state.file_offset(run.key, st, state.error)

    def lines(
        self,
        run: FileRun,
        st: os.stat_result,
        prev: FileOffset | None,
        gz: bool,
        *,
        each_block: Callable[[], None] | None = None,
        submit: Callable[[bytes, int], None] | None = None,
    ) -> FileOffset:
        """Read complete lines from the stored offset on; returns the new offset (which
        says why, when a .gz broke off: the lines before the damage are read).

        Lines go to ``run`` (and ``each_block`` is called after each block of them), or,
        with ``submit``, each block is handed over whole (with the number of the line
        before it)."""
        with readers.open_file(run.key, gz) as f:
            state = readers.resume(f, st, prev, gz)
            run.parts = PART_TABLES.get(run.key, st.st_ino, state.offset, gz)
            # progress counts the file's bytes (a .gz's decompressed ones are not)
            blocks = readers.LineBlocks(f, state, self.chunk_bytes, None if gz else self.tick)
            for first, block in blocks:
                if submit is not None:
                    submit(block, first)
                else:
                    run.read_lines(first, block.split(b"\n")[:-1])
                del block  # not kept alive while the rows are inserted
                _long_lines(run, state)
                if each_block is not None:
                    each_block()
        _long_lines(run, state)
        self.last_line(run, state)
        PART_TABLES.keep(run.key, st.st_ino, state.offset, run.parts)
        return state.file_offset(run.key, st, state.error)

    def last_line(self, run: FileRun, state: ReadState) -> None:
        """A last line without its newline: read when ``complete_tail`` and it is a whole
        JSON value, else left for the next run (reported in ``pending``). After a broken
        .gz, what follows the damage is not a line: the damage is the error."""
        if state.error is not None:
            run.error(state.line + 1, state.error)
            return
        if state.rest_over:
            run.error(state.line + 1, too_long())  # the same words once it ends
            return
        rest = state.rest
        if not rest.strip():
            return
        if self.complete_tail and readers.is_json(rest):
            run.line(state.line + 1, rest)
            state.advance(rest, 1)
        else:
            self.counts.pending.append((run.key, state.line + 1))

    def whole(self, run: FileRun, st: os.stat_result) -> FileOffset:
        """A .json file, read whole (up to MAX_DOCUMENT_BYTES: it is parsed at once)."""
        with open_regular(run.key) as f:
            data = f.read(MAX_DOCUMENT_BYTES + 1)
        self.tick(len(data))
        if len(data) > MAX_DOCUMENT_BYTES:
            why = (
                f"over {MAX_DOCUMENT_BYTES:,} bytes, the limit for a single JSON document; "
                "write the traces as JSONL (one per line), which has no size limit"
            )
            run.error(0, why)
            return FileOffset(run.key, 0, 0, st.st_size, st.st_mtime, None, st.st_ino, None, why)
        values, error = readers.json_values(data)
        if error is not None:
            run.error(*error)
        for line, value, where in values:
            run.obj(line, value, where)
        return FileOffset(
            run.key, len(data), 0, st.st_size, st.st_mtime, readers.fingerprint(data), st.st_ino
        )


def _same_file(prev: FileOffset, st: os.stat_result) -> bool:
    """Is the file as it was when ``prev`` was stored (size, mtime and inode)?"""
    return (
        prev.size == st.st_size
        and prev.mtime == st.st_mtime
        and (prev.inode is None or prev.inode == st.st_ino)
    )


def _long_lines(run: FileRun, state: ReadState) -> None:
    """Lines the reader skipped for their length become errors."""
    for lineno, _size in state.long_lines:
        run.error(lineno, too_long())
    state.long_lines.clear()


def _list_the_rest(run: FileRun) -> None:
    """The file is read: one more row counts the errors past MAX_ERRORS_PER_FILE."""
    row = run.unlisted()
    if row is not None:
        run.errors.append(row)


def _why(key: str, exc: Exception) -> str:
    """Why a file could not be read, in words (an unexpected exception is named)."""
    if isinstance(exc, InputError):
        return str(exc).removeprefix(f"{key}: ")
    if isinstance(exc, OSError):
        return f"cannot read ({exc.strerror or exc}); check permissions"
    detail = str(exc).strip().splitlines()
    return (
        f"could not be read ({type(exc).__name__}: {detail[0][:300] if detail else 'no detail'})"
        "; the other files were read. This is a bug in ctxscope: please report it"
    )


def ingest_paths(
    store: Store,
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
    clean_stale_spills()
    with _Ingest(store, files, progress, complete_tail=complete_tail, workers=workers) as job:
        return job.run()


# ---------------------------------------------------------------------------- CLI


def format_counts(c: IngestCounts) -> str:
    return (
        f"{c.traces_added} new traces from {c.files} files "
        f"({c.traces_skipped} already stored, {c.errors} errors)"
    )


def format_error(e: IngestErrorRow) -> str:
    return f"{e.file}:{e.line}: {e.message}"


__all__ = [
    "format_counts",
    "format_error",
    "ingest_paths",
]
