"""``ctxscope import`` and ``ctxscope export``: files into the store or watched folder, and out."""

from __future__ import annotations

import argparse
import glob
import hashlib
import sys
from pathlib import Path

from ctxcore import settings
from ctxcore.cli.app import app_folder
from ctxcore.errors import CtxscopeError, InputError, StoreError, StoreLockedError
from ctxcore.formats.accounting import describe
from ctxcore.formats.derive import with_window
from ctxcore.formats.load import load_file, write_jsonl, write_text_atomic
from ctxcore.formats.share import html_report, otlp_json, redact_all, snapshot_json
from ctxcore.models import Trace


def _drop_name(source: Path, traces: list[Trace]) -> str:
    digest = hashlib.sha256("".join(t.trace_id for t in traces).encode()).hexdigest()[:10]
    stem = source.name.split(".")[0] or "import"
    return f"import-{stem}-{digest}.jsonl"


def _to_store(traces: list[Trace], db: str, source: str) -> int:
    from ctxcore.store import TraceStore

    with TraceStore(db) as store:
        return store.add_traces(traces, source=source)


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


def cli_import(args: argparse.Namespace) -> int:
    """``ctxscope import PATH... [--format ...] [--window N] [--model M] [--db PATH] [-o FILE]``."""
    from ctxcore.formats.redact import redact_trace

    sources = import_sources(list(args.paths))
    traces: list[Trace] = []
    failed: list[str] = []
    for path in sources:
        try:
            traces.extend(load_file(path, args.format))
        except CtxscopeError as exc:
            if len(sources) == 1:
                raise
            # one unreadable file among many: said, and the others still imported
            failed.append(str(exc))
            print(f"ctxscope import: error: {exc}", file=sys.stderr)
    if not traces:
        raise InputError(f"nothing imported: all {len(sources)} file(s) failed (see above)")
    if args.window is not None and args.window <= 0:
        raise InputError(f"--window {args.window}: a context window is a positive token count")
    if args.window is not None or args.model:
        traces = [with_window(t, window=args.window, model=args.model) for t in traces]
    src = sources[0] if len(sources) == 1 else Path(f"{len(sources)} files")
    if settings.redact_on_ingest():
        traces = [redact_trace(t)[0] for t in traces]
    warned = sum(1 for t in traces if t.result and t.result.warnings)
    summary = f"{len(traces)} trace(s) from {src}"
    for line in describe(traces[:20]):
        print(line)
    if len(traces) > 20:
        print(f"  … and {len(traces) - 20} more trace(s)")
    if args.output:
        out = Path(args.output)
        write_jsonl(traces, out)
        print(f"imported {summary} -> {out}")
        return 1 if failed else 0
    db = getattr(args, "db", None) or str(settings.db_path())
    try:
        added = _to_store(traces, db, str(src))
    except StoreLockedError as exc:
        # Only a running app's folder is a safe detour: it ingests what lands there.
        folder = app_folder(Path(db))
        if folder is None:
            raise InputError(
                f"{exc}; no ctxscope app is serving this store, so there is no watched folder "
                "to drop the traces into: stop that process, or write them with -o FILE"
            ) from exc
    else:
        print(f"imported {summary} into {db}: {added} new, {len(traces) - added} already there")
        for t in traces[:3]:
            print(f"  {t.trace_id}  (session {t.session_id}, turn {t.turn})")
        if len(traces) > 3:
            print(f"  ... and {len(traces) - 3} more")
        if warned:
            print(f"{warned} trace(s) carry warnings; open them in the app to see why")
        return 1 if failed else 0
    out = folder / _drop_name(src, traces)
    write_jsonl(traces, out)
    print(
        f"the store is in use by the ctxscope app; wrote {summary} to {out}, the folder "
        "that app watches: it ingests them from there",
        file=sys.stderr,
    )
    return 1 if failed else 0


def _from_store(db: str, trace_id: str | None, session: str | None) -> list[Trace]:
    from ctxcore.store import TraceFilter, TraceStore

    with TraceStore(db, read_only=True) as store:
        if trace_id:
            t = store.get_trace(trace_id)
            return [t] if t is not None else []
        out: list[Trace] = []
        offset = 0
        while True:
            page = store.list_traces(
                TraceFilter(session_id=session),
                sort="turn",
                descending=False,
                limit=200,
                offset=offset,
            )
            for row in page.rows:
                t = store.get_trace(row.trace_id)
                if t is not None:
                    out.append(t)
            offset += len(page.rows)
            if not page.rows or offset >= page.total:
                return out


def _from_folder(folder: Path, trace_id: str | None, session: str | None) -> list[Trace]:
    """Look for the traces in the watched folder's files (when the store is unavailable)."""
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


def find_traces(db: str, trace_id: str | None, session: str | None) -> tuple[list[Trace], str]:
    """The traces to export, and where they came from (store, file or watched folder)."""
    if trace_id and not session and Path(trace_id).is_file():
        return load_file(trace_id), trace_id
    try:
        return _from_store(db, trace_id, session), db
    except StoreError as exc:
        why = str(exc)
        folder = settings.traces_dir()
        print(f"note: {why}; looking in {folder}/ instead", file=sys.stderr)
        return _from_folder(folder, trace_id, session), str(folder)


def cli_export(args: argparse.Namespace) -> int:
    """``ctxscope export (TRACE_ID | --session ID) [--format json|html|otlp] [-o FILE]``."""
    if bool(args.trace_id) == bool(args.session):
        raise InputError("give exactly one of TRACE_ID or --session ID")
    db = getattr(args, "db", None) or str(settings.db_path())
    traces, where = find_traces(db, args.trace_id, args.session)
    if not traces:
        what = f"trace {args.trace_id!r}" if args.trace_id else f"session {args.session!r}"
        raise InputError(
            f"{what} not found in {where}; list what is there with the app's Traces page "
            "or `ctxscope ingest` the file first"
        )
    counts: dict[str, int] = {}
    if not args.no_redact:
        traces, counts = redact_all(traces)
    if args.format == "json":
        text = snapshot_json(traces)
    elif args.format == "otlp":
        text = otlp_json(traces)
    else:
        text = html_report(traces, redactions=counts)
    if args.output:
        out = Path(args.output)
        write_text_atomic(out, [text])
        print(f"exported {len(traces)} trace(s) as {args.format} -> {out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
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
    return 0
