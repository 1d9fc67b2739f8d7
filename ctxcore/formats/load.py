"""Bring prompts from other systems into ctxscope: detect the format, convert, store.

Formats (``--format``, or ``auto`` to detect from the content):

- ``trace`` — ctxscope traces: one trace JSON, a JSONL file of traces, or a snapshot
  ``{"format": "ctxscope.snapshot/1", "traces": [...]}`` written by ``ctxscope export``;
- ``openai`` — an OpenAI-style chat request ``{"messages", "tools"}`` (and the shapes
  ``ctxcore.formats.openai.requests_from_obj`` accepts: a bare message list, a
  SWE-agent trajectory, ShareGPT records), as JSON or JSONL (one conversation per line);
- ``otlp`` — OpenTelemetry traces and logs of model calls: OTLP JSON (or JSONL of exports,
  traces and logs in one file), OTLP protobuf, a list of spans, or one span's attributes
  (GenAI, OpenInference and Vercel AI SDK conventions; ``ctxcore.formats.otlp``);
- ``anthropic``, ``openai-responses``, ``gemini``, ``bedrock-converse`` — a request to that
  API (or ``{"request": ..., "response": ...}``, or a list of either);
- ``langchain`` — serialized LangChain messages, or a LangGraph state holding them;
- ``claude-code``, ``codex`` (JSONL session logs, read as a stream), ``openhands``,
  ``swe-agent``, ``mini-swe-agent`` (trajectories) — one trace per model call, one session
  per log (``ctxcore.formats.sessions``).

``ctxscope import FILE`` writes the traces into the store; if another process (the app)
holds the store, it drops them into the watched folder instead, where that process picks
them up. ``-o FILE`` writes JSONL and leaves the store alone. It reads with ``iter_traces``,
a stream: a session log's traces are written while the log is read (``load_file`` is the
same as a list).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from itertools import chain
from pathlib import Path
from typing import Any, Literal

from ctxcore.errors import CtxscopeError, ImportFormatError, InputError
from ctxcore.formats import anthropic, bedrock, gemini, langchain, responses, sessions
from ctxcore.formats.derive import with_window
from ctxcore.formats.openai import traces_from_obj
from ctxcore.formats.otlp import looks_like as otlp_looks_like
from ctxcore.formats.otlp import traces_from_exports, traces_from_otlp, traces_from_protobuf
from ctxcore.formats.otlp_proto import SUFFIXES as PROTOBUF_SUFFIXES
from ctxcore.formats.otlp_proto import looks_binary, read_protobuf
from ctxcore.loading import (
    GZIP_ERRORS,
    decode_line,
    iter_lines,
    open_stream,
    parse_json,
    read_text,
    trace_from_obj,
)
from ctxcore.models import Trace
from ctxcore.output import write_output
from ctxcore.settings import IMPORT_FORMATS, ImportFormat

Format = ImportFormat
#: Request formats whose JSONL files hold one request of a conversation per line.
_ONE_PER_LINE = frozenset({"openai", "openai-responses", "gemini", "bedrock-converse"})
SNAPSHOT_FORMAT = "ctxscope.snapshot/1"


def _each_looks_like(looks_like: Callable[[Any], bool], data: Any) -> bool:
    """Whether a request, a ``{"request": ...}`` pair, or every item of a list, passes."""

    def one(x: Any) -> bool:
        return looks_like(x) or (isinstance(x, dict) and looks_like(x.get("request")))

    return bool(data) and all(one(x) for x in data) if isinstance(data, list) else one(data)


def detect_format(
    data: Any,
) -> Literal[
    "trace",
    "openai",
    "anthropic",
    "otlp",
    "openai-responses",
    "gemini",
    "bedrock-converse",
    "langchain",
    "claude-code",
    "codex",
    "openhands",
    "swe-agent",
    "mini-swe-agent",
]:
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
    session = sessions.detect(data)  # agent logs and trajectories: one trace per model call
    if session is not None:
        return session
    if otlp_looks_like(data):  # OTLP JSON (traces or logs), a span list, span attributes
        return "otlp"
    # most specific first: a LangGraph state has 'messages' as a chat request does, and a
    # Converse request a 'system' list as an Anthropic one does
    if langchain.looks_like(data):
        return "langchain"
    if _each_looks_like(bedrock.looks_like, data):
        return "bedrock-converse"
    if _each_looks_like(gemini.looks_like, data):
        return "gemini"
    if _each_looks_like(responses.looks_like, data):
        return "openai-responses"
    if anthropic.looks_like(data) or (
        isinstance(data, list) and data and all(anthropic.looks_like(x) for x in data)
    ):
        return "anthropic"
    # a bare message list with Anthropic blocks (tool_use, tool_result…): Cline's history
    if anthropic.is_message_list(data) and anthropic.looks_like({"messages": data}):
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
            return traces_from_otlp(
                data, where=where, session_id=session_id, default_now=default_now
            )
        if kind == "anthropic":
            return anthropic.traces_from_obj(data, default_now=default_now)
        if kind == "openai-responses":
            return responses.traces_from_obj(data, session_id=session_id, default_now=default_now)
        if kind == "gemini":
            return gemini.traces_from_obj(data, session_id=session_id, default_now=default_now)
        if kind == "bedrock-converse":
            return bedrock.traces_from_obj(data, session_id=session_id, default_now=default_now)
        if kind == "langchain":
            return langchain.traces_from_obj(data, session_id=session_id, default_now=default_now)
        if kind in sessions.FORMATS:
            return sessions.traces_from_value(
                data, kind, where=where, session_id=session_id, default_now=default_now
            )
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


def _maybe_protobuf(p: Path) -> bool:
    """Whether a file may be OTLP protobuf, by its name or its first bytes: only then is it
    read whole (as protobuf is); a text file is streamed by ``iter_values``."""
    if p.name.lower().removesuffix(".gz").endswith(PROTOBUF_SUFFIXES):
        return True
    try:
        with open_stream(p) as f:
            return looks_binary(f.read(4096))
    except GZIP_ERRORS:
        return False  # not readable as gzip: the streaming reader says why


class BadLine(str):
    """A JSONL line that could not be parsed, in place of its value: the line's error."""


def iter_values(p: Path) -> tuple[bool, Iterator[tuple[str, Any]]]:
    """Whether a file is JSONL, and the JSON values it holds with where each is, as a stream.

    JSONL (a name ending in ``.jsonl``, or a first non-blank line that is a whole JSON
    object, and more lines) is streamed line by line, each line refused past MAX_LINE_BYTES
    while it is read; a line that does not parse comes as a ``BadLine`` (its error, naming
    ``file:line``) and the lines after it still come. Anything else is one document, read
    whole up to MAX_DOCUMENT_BYTES (``ctxcore.loading``): a huge file costs one error line,
    not all the memory."""
    lines = ((n, raw) for n, raw in iter_lines(p) if raw.strip())
    first = next(lines, None)
    if first is None:
        raise ImportFormatError(f"{p}: the file is empty")
    second = next(lines, None)
    if p.name.lower().removesuffix(".gz").endswith(".jsonl"):
        jsonl = True
    else:
        head = decode_line(first[1], f"{p}:{first[0]}").strip()
        jsonl = second is not None and head.startswith("{") and head.endswith("}")
        if jsonl:
            try:
                parse_json(head)
            except InputError:
                jsonl = False
    if not jsonl:
        lines.close()
        return False, iter([(str(p), parse_json(read_text(p), str(p)))])

    def values() -> Iterator[tuple[str, Any]]:
        for n, raw in chain([first], [second] if second is not None else [], lines):
            where = f"{p}:{n}"
            try:
                yield where, parse_json(decode_line(raw, where), where)
            except InputError as exc:
                yield where, BadLine(exc)

    return True, values()


def _windowed(traces: Iterable[Trace], window: int | None, model: str | None) -> Iterator[Trace]:
    """Each trace re-derived with the window (or model) the user gave, if any."""
    for t in traces:
        yield t if window is None and not model else with_window(t, window=window, model=model)


def iter_traces(
    path: str | Path,
    fmt: Format = "auto",
    *,
    window: int | None = None,
    model: str | None = None,
    skipped: Callable[[str], None] | None = None,
) -> Iterator[Trace]:
    """Every trace a file holds, as a stream (docs/design.md, "Capture, import, export,
    redaction"): a session log's traces while it is read, and a JSONL file's line by line
    (but an OTLP one, whose lines are read as one). ``window``/``model`` stand for what the
    file does not say: a session log takes them as its calls are made (a compaction's
    decisions stay); a trace of another format is re-derived with them (``with_window``).

    A JSONL line that cannot be read or converted is that line's error: given to
    ``skipped`` (``file:line: why``), and the lines after it are read; without ``skipped``
    it is raised. Any other failure part-way has yielded the traces before it, then raises."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror or exc})") from exc
    # The clock an imported prompt saw is unknown; the file's time is the best stand-in
    # and keeps re-imports of the same file identical.
    mtime = datetime.fromtimestamp(st.st_mtime, tz=UTC).replace(microsecond=0)
    session = p.name.split(".")[0] or "import"
    if fmt in ("auto", "otlp") and _maybe_protobuf(p) and (raw := read_protobuf(p)) is not None:
        yield from _windowed(
            traces_from_protobuf(raw, str(p), session_id=session, default_now=mtime),
            window,
            model,
        )
        return
    log = fmt if fmt in sessions.LOG_FORMATS else sessions.sniff(p) if fmt == "auto" else None
    if log is not None:
        # a session log: read line by line; a broken line is that line's error (in the
        # next trace's metadata.import.skipped) and the rest is imported
        stream = sessions.iter_file(p, log, default_now=mtime, window=window, model=model)
        made = 0
        for t in stream.stream():
            made += 1
            yield t
        if not made:
            why = stream.errors[0] if stream.errors else "no model call in it"
            raise ImportFormatError(f"{p}: a {log} log with no call ctxscope can read ({why})")
        return
    jsonl, read = iter_values(p)

    def bad(where: str, message: str) -> None:
        said = message if message.startswith(str(p)) else f"{where}: {message}"
        if skipped is None:
            raise ImportFormatError(said)
        skipped(said)

    def good() -> Iterator[tuple[str, Any]]:
        for where, value in read:
            if isinstance(value, BadLine):
                bad(where, str(value))
            else:
                yield where, value

    values = good()
    first = next(values, None)
    if first is None:
        return  # every line was bad, and each was said
    second = next(values, None)
    head = [first] if second is None else [first, second]
    if second is not None and (detect_format(first[1]) if fmt == "auto" else fmt) == "otlp":
        whole = [*head, *values]
        if fmt == "otlp" or all(detect_format(v) == "otlp" for _, v in whole):
            # An OpenTelemetry file exporter writes one export per line (traces and logs may
            # share the file): read them as one, so that log records join their spans and
            # turns are numbered across the whole file.
            yield from _windowed(
                traces_from_exports(whole, where=str(p), session_id=session, default_now=mtime),
                window,
                model,
            )
            return
        values = iter(whole)
    else:
        values = chain(head, values)
    for n, (where, value) in enumerate(values):
        try:
            traces = traces_from_value(
                value, fmt, where=where, session_id=session, default_now=mtime
            )
        except CtxscopeError as exc:
            if jsonl:  # one line's error, not the file's
                bad(where, str(exc))
                continue
            if not isinstance(exc, ImportFormatError):
                raise
            msg = str(exc)
            raise ImportFormatError(msg if msg.startswith(str(p)) else f"{where}: {msg}") from exc
        kind = detect_format(value) if fmt == "auto" else fmt
        if jsonl and kind in _ONE_PER_LINE and len(traces) == 1:
            # one conversation per line: number the turns in file order
            traces = [traces[0].model_copy(update={"turn": n})]
        yield from _windowed(traces, window, model)


def load_file(
    path: str | Path, fmt: Format = "auto", skipped: Callable[[str], None] | None = None
) -> list[Trace]:
    """Every trace a file holds (JSON, or JSONL with one value per line), as a list
    (``skipped``: as ``iter_traces``)."""
    return list(iter_traces(path, fmt, skipped=skipped))


# --------------------------------------------------------------------------- writing


def write_jsonl(traces: Iterable[Trace], path: Path | str) -> None:
    """Write traces as JSONL to ``path`` (``ctxcore.output.write_output``: a file whole or
    not at all, so a watcher sees whole files; a device or FIFO in place; ``-`` is stdout)."""
    write_output(path, (t.to_json() + "\n" for t in traces))


__all__ = [
    "SNAPSHOT_FORMAT",
    "detect_format",
    "iter_traces",
    "BadLine",
    "iter_values",
    "load_file",
    "traces_from_value",
    "write_jsonl",
]
