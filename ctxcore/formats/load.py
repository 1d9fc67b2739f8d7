"""Bring prompts from other systems into ctxscope: detect the format, convert, store.

Formats (``--format``, or ``auto`` to detect from the content):

- ``trace`` — ctxscope traces: one trace JSON, a JSONL file of traces, or a snapshot
  ``{"format": "ctxscope.snapshot/1", "traces": [...]}`` written by ``ctxscope export``;
- ``openai`` — an OpenAI-style chat request ``{"messages", "tools"}`` (and the shapes
  ``ctxcore.formats.openai.requests_from_obj`` accepts: a bare message list, a
  SWE-agent trajectory, ShareGPT records), as JSON or JSONL (one conversation per line);
- ``otlp`` — an OTLP JSON export of OpenTelemetry GenAI spans (or JSONL of exports).

``ctxscope import FILE`` writes the traces into the store; if another process (the app)
holds the store, it drops them into the watched folder instead, where that process picks
them up. ``-o FILE`` writes JSONL and leaves the store alone.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from ctxcore.errors import CtxscopeError, ImportFormatError, InputError
from ctxcore.formats import anthropic
from ctxcore.formats.openai import traces_from_obj
from ctxcore.formats.otlp import traces_from_otlp
from ctxcore.loading import parse_json, read_text, trace_from_obj
from ctxcore.models import Trace
from ctxcore.settings import IMPORT_FORMATS, ImportFormat

Format = ImportFormat
SNAPSHOT_FORMAT = "ctxscope.snapshot/1"


def detect_format(data: Any) -> Literal["trace", "openai", "anthropic", "otlp"]:
    """Which importer a parsed JSON value belongs to."""
    if isinstance(data, dict):
        fmt = data.get("format")
        if isinstance(fmt, str) and fmt.startswith("ctxscope.snapshot/"):
            return "trace"
        if isinstance(data.get("schema"), str) and data["schema"].startswith("ctxscope.trace"):
            return "trace"
        if "resourceSpans" in data:
            return "otlp"
    if (
        isinstance(data, list)
        and data
        and all(
            isinstance(t, dict) and str(t.get("schema", "")).startswith("ctxscope.trace")
            for t in data
        )
    ):
        return "trace"
    if anthropic.looks_like(data) or (
        isinstance(data, list) and data and all(anthropic.looks_like(x) for x in data)
    ):
        return "anthropic"
    if isinstance(data, dict) and isinstance(data.get("request"), dict):
        if anthropic.looks_like(data["request"]):
            return "anthropic"
    return "openai"


def traces_from_snapshot_or_trace(data: Any, where: str) -> list[Trace]:
    """Traces from a trace object, a list of them, or a snapshot."""
    if isinstance(data, dict) and "format" in data and "schema" not in data:
        fmt = data.get("format")
        if not (isinstance(fmt, str) and fmt.startswith("ctxscope.snapshot/")):
            raise ImportFormatError(f"{where}: unknown format {fmt!r}")
        if fmt != SNAPSHOT_FORMAT:
            raise ImportFormatError(
                f"{where}: snapshot format {fmt!r} is newer than this ctxscope reads "
                f"({SNAPSHOT_FORMAT}); upgrade ctxscope"
            )
        items = data.get("traces")
        if not isinstance(items, list):
            raise ImportFormatError(f"{where}: a snapshot needs a 'traces' list")
        return [trace_from_obj(t, f"{where}: traces[{i}]") for i, t in enumerate(items)]
    if isinstance(data, list):
        return [trace_from_obj(t, f"{where}: [{i}]") for i, t in enumerate(data)]
    return [trace_from_obj(data, where)]


def traces_from_value(
    data: Any,
    fmt: Format = "auto",
    *,
    where: str = "",
    session_id: str = "import",
    default_now: datetime | None = None,
) -> list[Trace]:
    """Convert one parsed JSON value with the given (or detected) importer."""
    kind = detect_format(data) if fmt == "auto" else fmt
    try:
        if kind == "trace":
            return traces_from_snapshot_or_trace(data, where)
        if kind == "otlp":
            return traces_from_otlp(data)
        if kind == "anthropic":
            return anthropic.traces_from_obj(data, default_now=default_now)
        return traces_from_obj(data, session_id=session_id, default_now=default_now)
    except ImportFormatError as exc:
        if fmt != "auto" or kind != "openai":
            raise
        # OpenAI chat is what detection falls back to: nothing recognised the file
        tried = ", ".join(f for f in IMPORT_FORMATS if f != "auto")
        raise ImportFormatError(
            f"{where + ': ' if where else ''}not a format ctxscope reads (tried {tried}); "
            f"closest, an OpenAI chat request: {str(exc).removeprefix(where + ': ')}"
        ) from exc
    except CtxscopeError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError) as exc:
        # A shape the importer did not anticipate (a field of another type): the file's
        # error, in one line, rather than a traceback.
        raise ImportFormatError(
            f"{where or 'input'}: not a {kind} document this importer can read "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no detail'})"
        ) from exc
    except RecursionError as exc:
        raise ImportFormatError(f"{where or 'input'}: nested too deeply to import") from exc


def load_file(path: str | Path, fmt: Format = "auto") -> list[Trace]:
    """Every trace a file holds (JSON, or JSONL with one value per line)."""
    p = Path(path)
    text = read_text(p)
    # The clock an imported prompt saw is unknown; the file's time is the best stand-in
    # and keeps re-imports of the same file identical.
    mtime = datetime.fromtimestamp(p.stat().st_mtime, tz=UTC).replace(microsecond=0)
    session = p.name.split(".")[0] or "import"
    stripped = text.strip()
    if not stripped:
        raise ImportFormatError(f"{p}: the file is empty")
    lines = [ln for ln in stripped.splitlines() if ln.strip()]
    jsonl = len(lines) > 1 and lines[0].lstrip().startswith("{") and lines[0].rstrip().endswith("}")
    if jsonl:
        try:
            parse_json(lines[0])
        except InputError:
            jsonl = False
    values: list[tuple[str, Any]]
    if jsonl:
        values = [(f"{p}:{i + 1}", parse_json(ln, f"{p}:{i + 1}")) for i, ln in enumerate(lines)]
    else:
        values = [(str(p), parse_json(text, str(p)))]
    if len(values) > 1 and all(
        (detect_format(v) if fmt == "auto" else fmt) == "otlp" for _, v in values
    ):
        # An OpenTelemetry collector's file exporter writes one export per line: read them
        # as one export so that turns are numbered across the whole file.
        spans = [rs for _, v in values for rs in (v.get("resourceSpans") or [])]
        values = [(str(p), {"resourceSpans": spans})]
    out: list[Trace] = []
    for n, (where, value) in enumerate(values):
        try:
            traces = traces_from_value(
                value, fmt, where=where, session_id=session, default_now=mtime
            )
        except ImportFormatError as exc:
            msg = str(exc)
            raise ImportFormatError(msg if msg.startswith(str(p)) else f"{where}: {msg}") from exc
        kind = detect_format(value) if fmt == "auto" else fmt
        if jsonl and kind == "openai" and len(traces) == 1:
            # one conversation per line: number the turns in file order
            traces = [traces[0].model_copy(update={"turn": n})]
        out.extend(traces)
    return out


# --------------------------------------------------------------------------- writing


def write_text_atomic(path: Path, chunks: Iterable[str]) -> None:
    """Write ``chunks`` to ``path`` whole or not at all: a temp file beside it, flushed to
    disk, then renamed over it. A full disk or a read-only folder leaves no empty or
    half-written file behind (and a watcher never sees a partial one)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
            for chunk in chunks:
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        hint = "; free some space or write elsewhere" if exc.errno == errno.ENOSPC else ""
        raise InputError(
            f"{path}: cannot write ({exc.strerror}){hint}; nothing was written"
        ) from exc


def write_jsonl(traces: list[Trace], path: Path) -> None:
    """Write traces as JSONL atomically (temp file + rename: watchers see whole files)."""
    write_text_atomic(path, (t.to_json() + "\n" for t in traces))


__all__ = [
    "SNAPSHOT_FORMAT",
    "detect_format",
    "load_file",
    "traces_from_value",
    "write_jsonl",
    "write_text_atomic",
]
