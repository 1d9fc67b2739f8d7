"""``ctxscope import`` and ``ctxscope export``: files into the store or watched folder, and out."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import glob
import hashlib
import sys
from collections.abc import Iterable, Iterator
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING

from ctxcore import settings
from ctxcore.errors import CtxscopeError, InputError, StoreError, StoreLockedError
from ctxcore.formats.accounting import LABELS, describe_trace, source_counts
from ctxcore.formats.load import iter_traces, jsonl_lines, load_file, write_jsonl
from ctxcore.models import Message, Packet, Trace
from ctxcore.output import STDOUT, is_stdout, write_output

if TYPE_CHECKING:
    from ctxcore.cli.import_findings import Diagnosed, FindingsJob, FindingsProcess
    from ctxcore.formats.redact_memo import Redactor
    from ctxcore.store.objects import SharedTraces
    from ctxcore.store.protocol import BulkWriter, Store


#: Traces prepared and inserted into the store together (``BulkWriter.add``): at most this
#: many, or this many bytes of trace JSON (each call of a long session holds its whole
#: context, so a batch is bounded by size too).
BATCH_TRACES = 500
BATCH_BYTES = 8 * 1024 * 1024
#: Trace JSON per store transaction. An import smaller than this is stored whole or not at
#: all; a bigger one commits each time this much has been added (the writer holds a
#: transaction's trace rows until its commit, so one transaction for all would not be
#: bounded).
TX_BYTES = 256 * 1024 * 1024
#: How many traces ``ctxscope import`` describes (counts against the source), and lists.
DESCRIBED = 20
LISTED = 3
#: Buffers of at least this many bytes get pages of their own, returned when freed (glibc's
#: M_MMAP_THRESHOLD, set): a call's trace JSON and prompt are as long as its context, and
#: glibc otherwise raises the threshold to the biggest buffer freed so far and carves such
#: buffers out of its heaps, whose freed gaps stay in memory
#: (docs/design.md, "Capture, import, export, redaction").
MMAP_BYTES = 1024 * 1024
#: ``import -o`` keeps a call's prompt on the heap: buffers from this size are mapped, and up
#: to ``OUTPUT_TRIM_BYTES`` of freed heap top stay with the process (glibc's
#: M_TRIM_THRESHOLD). A long session's prompt (1-2 MB as UCS-4 text) is then made in the
#: memory the previous call's freed, not in fresh pages faulted in one by one (0.6 s of
#: system time on a 40 MB log, for 7 % more peak memory).
OUTPUT_MMAP_BYTES = 4 * 1024 * 1024
OUTPUT_TRIM_BYTES = 32 * 1024 * 1024
_M_MMAP_THRESHOLD = -3  # malloc.h
_M_TRIM_THRESHOLD = -1
#: ``import -o``'s first-generation threshold of the cyclic garbage collector (Python's is
#: 700): an import makes millions of objects and almost no cycles, and each collection of
#: the older generations walks everything the importer holds (0.2 s of a 40 MB log).
GC_YOUNG = 50_000


@contextlib.contextmanager
def _few_collections() -> Iterator[None]:
    """The garbage collector run seldom while traces are written (``GC_YOUNG``), then as
    before."""
    before = gc.get_threshold()
    gc.set_threshold(GC_YOUNG, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def big_buffers_mapped(threshold: int = MMAP_BYTES, keep: int | None = None) -> bool:
    """Have the C allocator map buffers of ``threshold`` bytes or more for themselves
    (``MMAP_BYTES``), and keep up to ``keep`` bytes of freed heap top if given; False where
    it is not glibc's (macOS, Windows, musl), which is left as it is."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    if keep is not None and not mallopt(_M_TRIM_THRESHOLD, keep):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))


class _Reached:
    """``accounting.imported_counts`` of each trace, made from the previous trace of its
    session when its messages start with that one's (the same objects, as a session log's
    importer shares them between calls): only the new messages are looked at, where
    every call of a long session would walk its whole context again."""

    def __init__(self) -> None:
        #: session -> the last trace's messages, their source message ids and their sums
        #: (system parts, tool calls, media, thinking, compactions, replaced tool results)
        self.last: dict[str, tuple[list[Message], set[str], list[int]]] = {}
        #: session -> the last trace's packets and how many of them are tool results
        self.packets: dict[str, tuple[list[Packet], int]] = {}

    def counts(self, trace: Trace) -> dict[str, int]:
        messages = (trace.result.messages if trace.result is not None else None) or []
        prev, sources, sums = self.last.get(trace.session_id, ([], set(), []))
        n = len(prev)
        # the previous trace's set and sums go on (only this trace's are needed next) when
        # its messages start this one's: the same objects, found at C speed (a list
        # comparison tries identity first; an equal message would count alike)
        if not (n and len(messages) >= n and messages[:n] == prev):
            sources, sums, n = set(), [0] * 6, 0
        for m in messages[n:]:
            mid = m.id or ""
            if mid.startswith("msg-"):
                sources.add(mid.split(".")[0])
            meta = m.metadata
            sums[0] += m.role in ("system", "developer")
            sums[1] += len(meta.get("tool_calls") or [])
            sums[2] += len(meta.get("media") or [])
            sums[3] += len(meta.get("thinking") or [])
            sums[4] += bool(meta.get("compaction"))
            sums[5] += bool(meta.get("replaced_by")) and m.role == "tool"
        self.last[trace.session_id] = (messages, sources, sums)
        results = self._results(trace.session_id, trace.input.packets)
        return source_counts(
            {
                "messages": len(sources),
                "system_parts": sums[0],
                "tool_calls": sums[1],
                "tool_results": results + sums[5],
                "tools": len(trace.input.tools),
                "media": sums[2],
                "thinking": sums[3],
                "compactions": sums[4],
            }
        )

    def _results(self, session: str, packets: list[Packet]) -> int:
        """How many of ``packets`` are tool results: the previous trace's count and the new
        ones', when they start with its packets (the same objects)."""
        prev, results = self.packets.get(session, ([], 0))
        n = len(prev)
        if not (n and len(packets) >= n and packets[:n] == prev):  # as ``counts``
            results, n = 0, 0
        results += sum(1 for p in packets[n:] if p.kind == "tool_result")
        self.packets[session] = (packets, results)
        return results


class _SourceTally:
    """What one source file held against what reached its traces, per category: the
    format's accounting (``metadata.import.source``) beside ``imported_counts``, for each
    session the most any of its calls held (a session log's later call holds the context of
    the earlier ones: summing them would count a message once per call), summed over its
    sessions. What a call lost is counted call by call, so a loss a later call does not
    repeat is still said; parts kept only as JSON text are counted apart (docs/design.md,
    "Capture, import, export, redaction")."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.traces = 0
        self.formats: dict[str, None] = {}
        #: session -> category -> the most one of its calls held / got
        self.held: dict[str, dict[str, int]] = {}
        self.reached: dict[str, dict[str, int]] = {}
        self.lost: dict[str, int] = dict.fromkeys(LABELS, 0)
        self.lost_calls = 0
        self.as_text = 0
        self.as_text_first: str | None = None
        self.counted = _Reached()

    def add(self, trace: Trace) -> None:
        self.traces += 1
        meta = trace.metadata.get("import") if isinstance(trace.metadata, dict) else None
        if not isinstance(meta, dict) or not isinstance(meta.get("source"), dict):
            return  # ctxscope's own traces: nothing was converted
        self.formats[str(meta.get("format"))] = None
        got = self.counted.counts(trace)
        held = self.held.setdefault(trace.session_id, dict.fromkeys(LABELS, 0))
        reached = self.reached.setdefault(trace.session_id, dict.fromkeys(LABELS, 0))
        short = False
        for key in LABELS:
            a, b = int(meta["source"].get(key, 0) or 0), int(got.get(key, 0))
            held[key], reached[key] = max(held[key], a), max(reached[key], b)
            if b < a:
                self.lost[key] += a - b
                short = True
        self.lost_calls += short
        listed = meta.get("kept_as_text") or []
        self.as_text += int(meta.get("kept_as_text_total", len(listed)) or 0)
        if listed and self.as_text_first is None:
            self.as_text_first = str(listed[0])

    def totals(self) -> tuple[dict[str, int], dict[str, int]]:
        """Per category, what the sessions held and what reached their traces."""
        return (
            {k: sum(h[k] for h in self.held.values()) for k in LABELS},
            {k: sum(r[k] for r in self.reached.values()) for k in LABELS},
        )

    def lines(self) -> list[str]:
        """One line of the counts; one more naming what was lost or kept as text, if any."""
        if not self.formats:
            return []
        held, reached = self.totals()
        counts = ", ".join(
            f"{LABELS[k]} {held[k]}" + (f" → {reached[k]}" if reached[k] != held[k] else "")
            for k in LABELS
            if held[k] or reached[k]
        )
        out = [
            f"  {self.path} ({', '.join(self.formats)}, {self.traces} trace(s)): "
            f"in the source → in the traces: {counts or 'nothing counted'}"
        ]
        said = []
        if self.lost_calls:
            lost = ", ".join(f"{LABELS[k]} {n}" for k, n in self.lost.items() if n)
            said.append(f"lost in {self.lost_calls} trace(s): {lost}")
        if self.as_text:
            said.append(
                f"{self.as_text} part(s) of a type the importer does not know kept as JSON text "
                f"(first: {self.as_text_first})"
            )
        if said:
            out.append("    " + "; ".join(said))
        return out


def _drop_name(sources: list[Path], args: argparse.Namespace) -> str:
    """The file name an import takes in a watched folder: known before a trace is read (the
    traces stream into it), and the same for the same files, unchanged, and options (a
    repeated import replaces its file rather than adding one)."""
    h = hashlib.sha256()
    for path in sources:
        try:
            st = path.stat()
            h.update(f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        except OSError:
            h.update(f"{path}\0".encode())
    h.update(f"{args.input_format}\0{args.window}\0{args.model}".encode())
    first = sources[0].name.split(".")[0] if len(sources) == 1 else f"{len(sources)}-files"
    return f"import-{first or 'import'}-{h.hexdigest()[:10]}.jsonl"


class _Import:
    """One ``ctxscope import``: the traces of every source as one stream, counted and
    described as they pass, so that none has to stay in memory (docs/design.md, "Capture,
    import, export, redaction"). A file that cannot be read is said and skipped; one that
    fails part-way keeps the traces read before the failure."""

    def __init__(self, sources: list[Path], args: argparse.Namespace) -> None:
        self.sources = sources
        self.format = args.input_format
        self.window: int | None = args.window
        self.model: str | None = args.model
        self.redact = settings.redact_on_ingest()
        #: a session's calls repeat its texts: each is redacted once (formats.redact_memo)
        self.redactor: Redactor | None = None
        self.count = 0
        self.warned = 0
        self.failed: list[str] = []
        #: (trace_id, session_id, turn) of the first traces, for the store's summary
        self.listed: list[tuple[str, str, int]] = []
        #: the first trace's lines, should it be the only one (then it is "source"), and
        #: should others follow
        self._alone: list[str] = []
        self._first: list[str] = []
        #: bad lines of the file being read, said or counted
        self._bad = 0
        #: each source file's counts against its traces (``_SourceTally``), said at the end
        self.summaries: list[str] = []

    def traces(self) -> Iterator[Trace]:
        for path in self.sources:
            stream = iter_traces(
                path, self.format, window=self.window, model=self.model, skipped=self._skipped
            )
            got = 0
            self._bad = 0
            tally = _SourceTally(path)
            while True:
                try:
                    trace = next(stream)
                except StopIteration:
                    self._more_bad(path)
                    self.summaries += tally.lines()
                    break
                except CtxscopeError as exc:
                    self._more_bad(path)
                    if len(self.sources) == 1 and got == 0:
                        raise
                    # one unreadable file among many, or a file cut part-way: said, and the
                    # rest (and what was read of it) still imported
                    self.failed.append(str(exc))
                    kept = f" ({got:,} trace(s) read before this are imported)" if got else ""
                    print(f"ctxscope import: error: {exc}{kept}", file=sys.stderr)
                    self.summaries += tally.lines()
                    break
                got += 1
                tally.add(trace)
                yield self._seen(trace)

    def _skipped(self, error: str) -> None:
        """A line of a JSONL file that could not be imported: said; the lines after it are.
        The first ``MAX_ERRORS_PER_FILE`` of a file are said, the rest counted (a file of
        two million bad lines is not two million lines of output, nor held)."""
        self._bad += 1
        if self._bad <= settings.MAX_ERRORS_PER_FILE:
            self.failed.append(error)
            print(f"ctxscope import: error: {error}", file=sys.stderr)

    def _more_bad(self, path: Path) -> None:
        more = self._bad - settings.MAX_ERRORS_PER_FILE
        if more > 0:
            self.failed.append(f"{path}: {more:,} more bad lines")
            print(
                f"ctxscope import: error: {path}: {more:,} more bad lines not listed (only "
                f"the first {settings.MAX_ERRORS_PER_FILE:,} of a file are)",
                file=sys.stderr,
            )
        self._bad = 0

    def _seen(self, trace: Trace) -> Trace:
        if self.redact:
            if self.redactor is None:
                from ctxcore.formats.redact_memo import Redactor

                self.redactor = Redactor()
            trace = self.redactor.trace(trace)[0]
        self.count += 1
        if trace.result is not None and trace.result.warnings:
            self.warned += 1
        if len(self.listed) < LISTED:
            self.listed.append((trace.trace_id, trace.session_id, trace.turn))
        if self.count == 1:
            self._alone = describe_trace(trace, several=False)
            self._first = describe_trace(trace, several=True)
        elif self.count <= DESCRIBED:
            if self.count == 2:
                self._print(self._first)
            self._print(describe_trace(trace, several=True))
        return trace

    @staticmethod
    def _print(lines: list[str]) -> None:
        for line in lines:
            print(line)

    def described(self) -> None:
        """The end of the per-trace lines (once the stream is read)."""
        if self.count == 1:
            self._print(self._alone)
        if self.count > DESCRIBED:
            print(f"  … and {self.count - DESCRIBED} more trace(s)")
        if self.count > 1:  # one trace's "source" line says it all
            self._print(self.summaries)

    @property
    def rc(self) -> int:
        return 1 if self.failed else 0


class _StoreSink:
    """Traces into the store in batches through its bulk writer (docs/design.md, "Store").

    Each trace's JSON is made already split into the store's shared form
    (``Splitter.split_trace``: the items a session's earlier call held are not serialized
    again). A trace already stored with the same content is skipped; with different
    content (or one whose rows cannot be built) the import stops with an error naming it
    and the open transaction is rolled back: an import under TX_BYTES stores nothing, as
    ``Store.add_traces`` would have it; a bigger one keeps the transactions committed
    before, and the error says how many traces they hold."""

    def __init__(self, store: Store, source: str, job: FindingsJob | None = None) -> None:
        self.store = store
        self.source = source
        #: the child that reads the sources again and computes the findings beside this
        #: process (``import_findings``); None: computed here, by ``prepare``
        self.job = job if store.diagnose else None
        self.findings: FindingsProcess | None = None
        self.added = 0
        self.stored = 0  # traces of committed transactions
        self.pending = 0  # traces added to the open transaction
        self.batch: list[tuple[Trace, bytes]] = []
        self.size = 0
        self.tx = 0
        from ctxcore.store.splitting import Splitter

        #: each trace's JSON made with its split, from the model: a session's earlier
        #: items are not written again (``Splitter.split_trace``)
        self.splitter = Splitter()

    def run(self, traces: Iterable[Trace]) -> int:
        """Add every trace; how many were new."""
        if self.job is None:
            return self._run(traces)
        from ctxcore.cli.import_findings import FindingsProcess

        self.findings = FindingsProcess(self.job)
        try:
            return self._run(traces)
        finally:
            if self.findings is not None:
                self.findings.close()

    def _run(self, traces: Iterable[Trace]) -> int:
        with self.store.bulk_writer() as writer:
            for trace in traces:
                if self.findings is not None:
                    self.findings.poll()
                try:
                    raw: bytes = self.splitter.split_trace(trace)
                except (ValueError, UnicodeError) as exc:  # a trace built without validation
                    raise self._error(
                        f"trace_id {trace.trace_id!r} cannot be written as JSON "
                        f"({str(exc).splitlines()[0]})"
                    ) from exc
                self.batch.append((trace, raw))
                self.size += len(raw)
                self.tx += len(raw)
                if len(self.batch) >= BATCH_TRACES or self.size >= BATCH_BYTES:
                    self._flush(writer)
                if self.tx >= TX_BYTES:
                    self._flush(writer)
                    writer.commit()
                    self.stored, self.pending, self.tx = self.stored + self.pending, 0, 0
            self._flush(writer)
        return self.added

    def _flush(self, writer: BulkWriter) -> None:
        from ctxcore.cli.import_findings import with_findings
        from ctxcore.store.rows import prepare

        batch = self.batch
        if not batch:
            return
        sources = [self.source] * len(batch)
        found = self._found(batch)
        if found is None:
            rows = prepare(batch, sources, self.store.diagnose)
        else:
            rows = with_findings(prepare(batch, sources, False), found)
        res = writer.add(rows)
        problems = [
            f"trace_id {tid!r} is already stored (from {src}) with different content"
            for _, tid, src in res.conflicts
        ] + [f"trace_id {batch[k][0].trace_id!r} {why}" for k, why in res.rejected]
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise self._error(f"{problems[0]}{more}", "give each trace its own trace_id")
        self.added += res.added
        self.pending += len(batch)
        self.batch, self.size = [], 0

    def _found(self, batch: list[tuple[Trace, bytes]]) -> list[Diagnosed] | None:
        """The child's findings of the batch's traces, in order; None where this process
        computes them: without a child, or once it stopped or read other traces than this
        process (said in a note; from this batch on, ``prepare`` diagnoses)."""
        from ctxcore.cli.import_findings import FindingsStopped

        if self.findings is None:
            return None
        try:
            return [self.findings.take(trace.trace_id) for trace, _ in batch]
        except FindingsStopped as exc:
            print(
                f"note: {self.source}: {exc}; the findings of trace_id "
                f"{batch[0][0].trace_id!r} and after are computed in this process",
                file=sys.stderr,
            )
            self.findings.close()
            self.findings = None
            return None

    def _error(self, what: str, hint: str = "") -> InputError:
        kept = (
            f"the first {self.stored:,} trace(s) of this import were stored, nothing after"
            if self.stored
            else "nothing was stored"
        )
        return InputError(f"{self.source}: {what}; {kept}" + (f": {hint}" if hint else ""))


def import_sources(specs: list[str]) -> list[Path]:
    """The files named: files as they are, every regular file below a folder (hidden ones
    skipped), and glob patterns the shell did not expand (``'logs/*.jsonl'``)."""
    out: list[Path] = []
    for spec in specs:
        path = Path(spec)
        if path.is_dir():
            found = sorted(
                p
                for p in path.rglob("*")
                if p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            if not found:
                raise InputError(f"{path}: the folder holds no files to import")
            out.extend(found)
        elif not path.exists() and any(ch in spec for ch in "*?["):
            matches = sorted(Path(p) for p in glob.glob(spec, recursive=True) if Path(p).is_file())
            if not matches:
                raise InputError(f"{spec}: no file matches this pattern")
            out.extend(matches)
        else:
            out.append(path)
    return list(dict.fromkeys(out))


def _first_trace(stream: Iterator[Trace], sources: list[Path]) -> Iterator[Trace]:
    """``stream`` with its first trace read before anything is opened: an import of nothing
    touches nothing (an error says so)."""
    first = next(stream, None)
    if first is None:
        raise InputError(f"nothing imported: all {len(sources)} file(s) failed (see above)")
    return chain([first], stream)


def cli_import(args: argparse.Namespace) -> int:
    """``ctxscope import PATH... [--from FORMAT] [--window N] [--model M] [--db PATH] [-o F]``."""
    if args.window is not None and args.window <= 0:
        raise InputError(f"--window {args.window}: a context window is a positive token count")
    # --db too: its process keeps a call's trace JSON and prompt the way -o does, and 32 MB
    # of freed heap kept saved 0.9 s of its 2.5 s of system time on the 40 MB log
    big_buffers_mapped(OUTPUT_MMAP_BYTES, OUTPUT_TRIM_BYTES)
    sources = import_sources(list(args.paths))
    run = _Import(sources, args)
    stream = run.traces()
    src = sources[0] if len(sources) == 1 else Path(f"{len(sources)} files")
    if args.output:
        with _few_collections():  # from the first trace: reading ahead makes objects too
            traces = _first_trace(stream, sources)
            if is_stdout(args.output):
                # the traces are the standard output: everything said about them goes to stderr
                real = sys.stdout
                with contextlib.redirect_stdout(sys.stderr):
                    write_output(
                        STDOUT,
                        jsonl_lines(traces, shared=not getattr(args, "whole", False)),
                        stdout=real,
                    )
                    run.described()
                    print(f"imported {run.count} trace(s) from {src} -> standard output")
                return run.rc
            out = Path(args.output)
            write_jsonl(traces, out, shared=not getattr(args, "whole", False))
        run.described()
        print(f"imported {run.count} trace(s) from {src} -> {out}")
        return run.rc
    traces = _first_trace(stream, sources)
    from ctxcore.cli.import_findings import findings_job
    from ctxcore.store.engines import open_store

    db = getattr(args, "db", None) or str(settings.db_path())
    try:
        store = open_store(db)
    except StoreLockedError as exc:
        from ctxcore.cli.app import app_folder

        # Only a running app's folder is a safe detour: it ingests what lands there.
        folder = app_folder(Path(db))
        if folder is None:
            raise InputError(
                f"{exc}; no ctxscope app is serving this store, so there is no watched folder "
                "to drop the traces into: stop that process, or write them with -o FILE"
            ) from exc
    else:
        with store:
            job = findings_job(sources, args, run.redact)
            added = _StoreSink(store, str(src), job).run(traces)
        run.described()
        n = run.count
        print(f"imported {n} trace(s) from {src} into {db}: {added} new, {n - added} already there")
        for tid, session, turn in run.listed:
            print(f"  {tid}  (session {session}, turn {turn})")
        if n > LISTED:
            print(f"  ... and {n - LISTED} more")
        if run.warned:
            print(f"{run.warned} trace(s) carry warnings; open them in the app to see why")
        return run.rc
    out = folder / _drop_name(sources, args)
    write_jsonl(traces, out, shared=True)
    run.described()
    print(
        f"the store is in use by the ctxscope app; wrote {run.count} trace(s) from {src} to "
        f"{out}, the folder that app watches: it ingests them from there",
        file=sys.stderr,
    )
    return run.rc


#: A session's traces are read from a store together (``_session_pages``), so that what
#: they share is read once, up to this many tokens of context (``used``) at a time: each
#: comes back whole, and a long session's trace holds its whole context.
EXPORT_TOKENS = 4_000_000


def _session_pages(
    store: Store, session: str, redactor: Redactor | None = None
) -> Iterator[list[tuple[Trace, dict[str, int]]]]:
    """A stored session's traces, in turn order, read a few at a time (``EXPORT_TOKENS``;
    at least one), each part they name made once (``store.objects.SharedTraces``: the
    items are the same objects from one trace to the next, as an importer's are); with a
    redactor, each redacted (and the secrets found), each part's secrets looked for once."""
    from ctxcore.store.objects import SharedTraces
    from ctxcore.store.records import TraceFilter

    objects = SharedTraces(redactor=redactor)

    offset = 0
    while True:
        page = store.list_traces(
            TraceFilter(session_id=session),
            sort="turn",
            descending=False,
            limit=200,
            offset=offset,
        )
        ids: list[str] = []
        tokens = 0
        for row in page.rows:
            if ids and tokens + max(row.used, 0) > EXPORT_TOKENS:
                yield _traces(store, ids, objects)
                ids, tokens = [], 0
            ids.append(row.trace_id)
            tokens += max(row.used, 0)
        if ids:
            yield _traces(store, ids, objects)
        offset += len(page.rows)
        if not page.rows or offset >= page.total:
            return


def _traces(
    store: Store, ids: list[str], objects: SharedTraces
) -> list[tuple[Trace, dict[str, int]]]:
    return [objects.read(p) for p in store.traces_packed(ids)]


def _note(why: str) -> None:
    print(f"note: {why}", file=sys.stderr)


def _from_store(db: str, trace_id: str | None, session: str | None) -> list[Trace]:
    from ctxcore.store.engines import read_store

    # a store another process writes (the app) is read from a copy (docs/design.md, "Store")
    with read_store(db, note=_note) as store:
        if trace_id:
            t = store.get_trace(trace_id)
            return [t] if t is not None else []
        assert session is not None
        return [t for page in _session_pages(store, session) for t, _ in page]


def _from_folder(folder: Path, trace_id: str | None, session: str | None) -> list[Trace]:
    """Look for the traces in the watched folder's files (when there is no store, or it is
    damaged)."""
    found: dict[str, Trace] = {}
    if not folder.is_dir():
        return []
    files = sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and p.name.endswith((".jsonl", ".json", ".jsonl.gz"))
    )
    for path in files:
        try:
            traces = load_file(path, "trace")
        except CtxscopeError:
            continue  # not a trace file, or a broken one: ingest reports those
        for t in traces:
            if (trace_id and t.trace_id == trace_id) or (session and t.session_id == session):
                found.setdefault(t.trace_id, t)
    return sorted(found.values(), key=lambda t: (t.session_id, t.turn, t.created_at, t.trace_id))


def find_traces(
    db: str, trace_id: str | None, session: str | None
) -> tuple[list[Trace], str, StoreError | None]:
    """The traces to export, where they came from (store, file or watched folder), and why
    the store could not be read, if it could not (a damaged or missing store)."""
    if trace_id and not session and Path(trace_id).is_file():
        return load_file(trace_id), trace_id, None
    folder = settings.traces_dir()
    try:
        stored = _from_store(db, trace_id, session)
    except StoreError as exc:
        found = _from_folder(folder, trace_id, session)
        if found:
            print(f"note: {exc}; read from {folder}/ instead", file=sys.stderr)
        return found, f"{folder}/", exc
    if stored:
        return stored, db, None
    # dropped into the watched folder and not ingested yet (e.g. by `import` while the app
    # holds the store)
    found = _from_folder(folder, trace_id, session)
    if found:
        print(f"note: not in {db} (yet); read from {folder}/", file=sys.stderr)
        return found, f"{folder}/", None
    return [], db, None


def cli_export(args: argparse.Namespace) -> int:
    """``ctxscope export (TRACE_ID | --session ID) [--format json|html|otlp] [-o FILE]``."""
    # here, not at the top: the report's diagnostics cost `ctxscope import` 0.6 s to load
    from ctxcore.formats.share import html_report, otlp_json, redact_all, snapshot_json

    if bool(args.trace_id) == bool(args.session):
        raise InputError("give exactly one of TRACE_ID or --session ID")
    db = getattr(args, "db", None) or str(settings.db_path())
    shared = getattr(args, "shared", False)
    if shared and args.format != "json":
        raise InputError(f"--shared writes JSON lines; it does not go with --format {args.format}")
    if shared and args.session:
        done = _export_session_shared(db, args)
        if done is not None:
            return done
    traces, where, unread = find_traces(db, args.trace_id, args.session)
    if not traces:
        what = f"trace {args.trace_id!r}" if args.trace_id else f"session {args.session!r}"
        if unread is not None:  # one line: why the store was not read, and where else
            raise InputError(f"{unread}; {what} is not in the files of {where} either")
        raise InputError(
            f"{what} not found in {where}; list what is there with the app's Traces page "
            "or `ctxscope ingest` the file first"
        )
    counts: dict[str, int] = {}
    if not args.no_redact:
        traces, counts = redact_all(traces)
    if shared:
        text = "".join(jsonl_lines(traces, shared=True))
    elif args.format == "json":
        text = snapshot_json(traces)
    elif args.format == "otlp":
        text = otlp_json(traces)
    else:
        text = html_report(traces, redactions=counts)
    if args.output and not is_stdout(args.output):
        write_output(args.output, [text])
        print(f"exported {len(traces)} trace(s) as {args.format} -> {args.output}", file=sys.stderr)
    else:
        write_output(STDOUT, [text])
    _said_redacted(args, counts)
    return 0


def _said_redacted(args: argparse.Namespace, counts: dict[str, int]) -> None:
    if counts:
        detail = ", ".join(f"{k}: {v}" for k, v in counts.items())
        print(
            f"redacted {sum(counts.values())} secret(s) ({detail}); --no-redact keeps them",
            file=sys.stderr,
        )
    elif args.no_redact:
        print(
            "warning: not redacted (--no-redact); check for secrets before sharing", file=sys.stderr
        )


def _export_session_shared(db: str, args: argparse.Namespace) -> int | None:
    """``export --session ID --shared`` from a store, streamed: the session's traces read
    ``EXPORT_PAGE`` at a time (what they share read once), redacted and written as shared
    lines as they come, so that neither the traces nor the output are held whole (a long
    session's export took minutes and gigabytes). None when the store cannot be read or
    does not hold the session: ``find_traces`` then looks elsewhere, and says so."""
    from ctxcore.formats.redact_memo import Redactor
    from ctxcore.sharing import ShareWriter
    from ctxcore.store.engines import read_store

    counts: dict[str, int] = {}
    written = 0
    try:
        with read_store(db, note=_note) as store:
            # a session's texts read by the rules once
            redactor = None if args.no_redact else Redactor()
            pages = _session_pages(store, args.session, redactor)
            first = next(pages, None)
            if not first:
                return None

            def lines() -> Iterator[bytes]:
                nonlocal written
                writer = ShareWriter()
                for page in chain([first], pages):
                    for trace, got in page:
                        for k, v in got.items():
                            counts[k] = counts.get(k, 0) + v
                        written += 1
                        yield writer.line_bytes(trace)

            to_file = bool(args.output) and not is_stdout(args.output)
            write_output(args.output if to_file else STDOUT, lines())
    except StoreError:
        if written:
            raise
        return None
    if to_file:
        print(f"exported {written} trace(s) as json -> {args.output}", file=sys.stderr)
    _said_redacted(args, dict(sorted(counts.items())))
    return 0
