"""Bring prompts from other systems into ctxscope: detect the format, convert, store.

The formats are the table ``ctxcore.formats.registry.FORMATS`` (``ctxscope import --help``
lists them, each with its one line): ``--from NAME`` reads a file as that format, ``auto``
asks each format's detector in priority order. ``trace`` is ctxscope's own (a trace, a list
or JSONL of them, or a snapshot ``{"format": "ctxscope.snapshot/1", "traces": [...]}``
written by ``ctxscope export``); a JSONL session log (``claude-code``, ``codex``) is read
as a stream; a JSONL file of a request format marked ``one_per_line`` holds one call of a
conversation per line, numbered in file order; OTLP protobuf is read whole.

``ctxscope import FILE`` writes the traces into the store; if another process (the app)
holds the store, it drops them into the watched folder instead, where that process picks
them up. ``-o FILE`` writes JSONL and leaves the store alone. It reads with ``iter_traces``,
a stream: a session log's traces are written while the log is read (``load_file`` is the
same as a list).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from itertools import chain, islice
from pathlib import Path
from typing import Any, cast

from ctxcore.errors import CtxscopeError, ImportFormatError, InputError
from ctxcore.formats import registry
from ctxcore.formats.derive import with_window
from ctxcore.formats.sessions import sniff
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
from ctxcore.sharing import (
    PartTable,
    ShareWriter,
    starts_shared,
    whole_byte_lines,
    whole_lines,
)

#: A format's name, or ``auto`` (``registry.NAMES`` lists them).
Format = registry.FormatName
SNAPSHOT_FORMAT = "ctxscope.snapshot/1"


def _is_trace(t: Any) -> bool:
    return isinstance(t, dict) and str(t.get("schema", "")).startswith("ctxscope.trace")


def looks_like_trace(data: Any) -> bool:
    """Whether a JSON value is ctxscope's own: a snapshot, a trace, or a list of traces."""
    if isinstance(data, dict):
        fmt = data.get("format")
        if isinstance(fmt, str) and fmt.startswith("ctxscope.snapshot/"):
            return True
        return isinstance(data.get("schema"), str) and data["schema"].startswith("ctxscope.trace")
    return isinstance(data, list) and bool(data) and all(_is_trace(t) for t in data)


def detect_format(data: Any) -> str:
    """Which format a parsed JSON value is (``registry.detect``)."""
    return registry.detect(data).name


def _format(fmt: Format) -> registry.Format:
    """The registry entry of a format name, or an error listing the names."""
    try:
        return registry.get(fmt)
    except KeyError:
        raise ImportFormatError(
            f"unknown format {fmt!r}; ctxscope reads {', '.join(registry.NAMES)}"
        ) from None


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


def read_traces(
    data: Any, *, where: str, session_id: str, default_now: datetime | None
) -> list[Trace]:
    """The ``trace`` format's reader (``registry.Reader``): the traces keep their own ids,
    sessions and times."""
    return traces_from_snapshot_or_trace(data, where)


def traces_from_value(
    data: Any,
    fmt: Format = "auto",
    *,
    where: str = "",
    session_id: str = "import",
    default_now: datetime | None = None,
) -> list[Trace]:
    """Convert one parsed JSON value with the given (or detected) importer."""
    form = registry.detect(data) if fmt == registry.AUTO else _format(fmt)
    kind = form.name
    try:
        return form.read(data, where=where, session_id=session_id, default_now=default_now)
    except ImportFormatError as exc:
        if fmt != registry.AUTO or not form.fallback:
            raise
        # what detection falls back to: nothing recognised the file
        raise ImportFormatError(_matches_none(data, where, form, exc)) from exc
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


def _closest_words(found: tuple[registry.Format, list[str]] | None, what: str) -> str:
    """``closest: NAME, whose <what> …`` for the one-line refusals (docs/design.md,
    "Formats"): ``what`` names the format's ``keys`` as the file holds them."""
    if found is None:
        return f"closest: none (it holds none of their {what})"
    form, shared = found
    return f"closest: {form.name}, whose {what} {', '.join(repr(k) for k in shared)} it holds"


def _matches_none(data: Any, where: str, fallback: registry.Format, exc: Exception) -> str:
    """The one line for a JSON value no format claims: the formats, the closest (the one
    whose fields it shares most, ``registry.closest``) and ``--from``; the fallback's own
    complaint when it is the closest or ties with it (a chat request whose content breaks a
    limit shares as many fields with mini-swe-agent's trajectory as with chat; the reader's
    own words say what is wrong with it)."""
    found = registry.closest(data)
    own = sorted(registry.fields_of(data).intersection(fallback.keys))
    if found is not None and len(own) >= len(found[1]):
        found = (fallback, own)
    words = _closest_words(found, "fields")
    if found is not None and found[0] is fallback:
        words += f" (read as it: {str(exc).removeprefix(where + ': ')})"
    elif found is None:
        have = sorted(registry.fields_of(data))
        shape = f"its fields: {', '.join(have[:8])}" if have else f"a JSON {type(data).__name__}"
        words = words.removesuffix(")") + f"; {shape}" + ("…)" if len(have) > 8 else ")")
    names = ", ".join(f.name for f in registry.FORMATS)
    return (
        f"{where + ': ' if where else ''}matches no format ctxscope reads ({names}); {words}; "
        "if it is one of them, name it: --from NAME"
    )


def _maybe_protobuf(p: Path) -> bool:
    """Whether a file may be OTLP protobuf, by its name or its first bytes: only then is it
    read whole (as protobuf is); a text file is streamed by ``iter_values``."""
    from ctxcore.formats.otlp_proto import SUFFIXES as PROTOBUF_SUFFIXES
    from ctxcore.formats.otlp_proto import looks_binary

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
        text = read_text(p)
        if starts_shared(text):  # one shared trace
            text = PartTable().expand(text.encode("utf-8", "surrogatepass"), str(p)).decode()
        return False, iter([(str(p), parse_json(text, str(p)))])

    def values() -> Iterator[tuple[str, Any]]:
        table = PartTable()  # a shared line's parts (docs/design.md, "Shared traces")
        for n, raw in chain([first], [second] if second is not None else [], lines):
            where = f"{p}:{n}"
            try:
                yield where, parse_json(decode_line(table.expand(raw, where), where), where)
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
    if fmt != registry.AUTO:
        _format(fmt)
    try:
        st = p.stat()
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror or exc})") from exc
    # The clock an imported prompt saw is unknown; the file's time is the best stand-in
    # and keeps re-imports of the same file identical.
    mtime = datetime.fromtimestamp(st.st_mtime, tz=UTC).replace(microsecond=0)
    session = p.name.split(".")[0] or "import"
    log = _log_format(p, fmt)
    if log is not None:
        yield from _session_log(p, log, mtime, window, model)
        return
    # here, not at the top: a session log (the usual import) needs no OpenTelemetry reader
    from ctxcore.formats.otlp import traces_from_protobuf
    from ctxcore.formats.otlp_proto import read_protobuf

    raw = read_protobuf(p) if fmt in (registry.AUTO, "otlp") and _maybe_protobuf(p) else None
    if raw is not None:
        traces = traces_from_protobuf(raw, str(p), session_id=session, default_now=mtime)
        yield from _windowed(traces, window, model)
        return
    if fmt == registry.AUTO:
        _refuse_text(p)
    file = _File(p, fmt, session, mtime, skipped)
    yield from _windowed(file.traces(), window, model)


def _head(p: Path) -> bytes:
    """A file's first bytes (unpacked), for the sniffers (none if it cannot be read: the
    reader then says why)."""
    try:
        with open_stream(p) as f:
            return f.read(registry.SNIFF_BYTES)
    except (OSError, *GZIP_ERRORS):
        return b""


def _log_format(p: Path, fmt: Format) -> registry.Format | None:
    """The format a file is streamed as, if it is one: a JSONL session log, or a file that
    is not JSON (a text log, an archive) a format's sniffer claims."""
    if fmt == registry.AUTO:
        name = sniff(p)
        if name is not None:
            return registry.get(name)
        return registry.sniff_file(p.name, _head(p))
    form = registry.get(fmt)
    return form if form.stream is not None else None


def _json_start(start: bytes) -> bool:
    """Whether a file's first bytes may begin a JSON document: an object, a string, or a
    list whose first item may be a value (``[project]``, a TOML table, is text)."""
    if start[:1] in (b"{", b'"'):
        return True
    rest = start[1:].lstrip()
    return start[:1] == b"[" and (not rest or rest[:1] in b'{["]-0123456789tfn')


#: Control bytes a text file may hold (tab, line ends, form feed, escape); any other below
#: 0x20 is not text.
_TEXT_CONTROLS = frozenset(b"\t\n\v\f\r\x1b")


def not_text(head: bytes) -> tuple[int, str, bool] | None:
    """Where a file's first bytes stop being text, why, and whether they hold a control byte
    no text holds (a NUL, …: a binary file, not text in another encoding): the offset of the
    first such byte or of the first that does not decode as UTF-8 (a sequence the head cuts
    off at its end is not one), whichever comes first; None for UTF-8 text."""
    control = next((k for k, b in enumerate(head) if b < 0x20 and b not in _TEXT_CONTROLS), None)
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason != "unexpected end of data" and (control is None or exc.start < control):
            return exc.start, "not UTF-8", control is not None
    return None if control is None else (control, "a control byte", True)


def _refuse_binary(p: Path, head: bytes) -> None:
    """A file that is not text and that no format claims (not OTLP protobuf, not an Inspect
    ``.eval`` zip): one line saying so, where, and what ctxscope reads."""
    found = not_text(head)
    if found is None:
        return
    at, why, binary = found
    if head.startswith(b"PK\x03\x04"):
        kind = "a zip archive, not text"
    else:
        kind = "a binary file, not text" if binary else "text that is not UTF-8"
    raise ImportFormatError(
        f"{p}: matches no format ctxscope reads: {kind} (byte {at:,} is 0x{head[at]:02x}, "
        f"{why}); ctxscope reads JSON, JSONL, OTLP protobuf, aider's text logs and Inspect "
        "AI's .eval zip; if it is one of them, name it: --from NAME"
    )


def _refuse_text(p: Path) -> None:
    """A file that is not JSON and that no format claims: one line naming the formats that
    are not JSON and ``--format``, rather than a JSON parser's complaint about line 1; a
    file that is not even text says so, and where (``not_text``)."""
    if p.name.lower().removesuffix(".gz").endswith(".jsonl"):
        return  # JSONL: each bad line is that line's error
    head = _head(p)
    start = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    from ctxcore.formats.otlp_proto import looks_binary

    if not start or looks_binary(start):
        return
    _refuse_binary(p, head)
    if _json_start(start):
        return
    first = start.split(b"\n", 1)[0][:60].decode("utf-8", "replace").rstrip()
    texts = ", ".join(f"{f.name} ({f.summary.split(':')[0]})" for f in registry.sniffing())
    words = _closest_words(registry.closest_text(start), "line markers")
    raise ImportFormatError(
        f"{p}: matches no format ctxscope reads: a text file that is not JSON (it starts "
        f"{first!r}); the formats that are not JSON: {texts}; the others are JSON, JSONL or "
        f"OTLP protobuf; {words}; if it is one of them, name it: --from NAME"
    )


def _session_log(
    p: Path, log: registry.Format, mtime: datetime, window: int | None, model: str | None
) -> Iterator[Trace]:
    """A session log, read line by line: a broken line is that line's error (in the next
    trace's ``metadata.import.skipped``) and the rest is imported."""
    assert log.stream is not None
    reader = cast(registry.StreamReader, registry.resolve(log.stream))
    stream = reader(p, log.name, default_now=mtime, window=window, model=model)
    made = 0
    for t in stream.stream():
        made += 1
        yield t
    if not made:
        why = stream.errors[0] if stream.errors else "no model call in it"
        raise ImportFormatError(f"{p}: a {log.name} log with no call ctxscope can read ({why})")


class _File:
    """The traces of a file that is not a session log or protobuf: one JSON document, or
    JSONL with one value per line (an OTLP file's lines read as one export)."""

    def __init__(
        self,
        p: Path,
        fmt: Format,
        session: str,
        mtime: datetime,
        skipped: Callable[[str], None] | None,
    ) -> None:
        self.p, self.fmt, self.session, self.mtime, self.skipped = p, fmt, session, mtime, skipped
        self.jsonl = False

    def bad(self, where: str, message: str) -> None:
        """A line's error: said to ``skipped``, or raised without it."""
        said = message if message.startswith(str(self.p)) else f"{where}: {message}"
        if self.skipped is None:
            raise ImportFormatError(said)
        self.skipped(said)

    def _good(self, read: Iterator[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
        for where, value in read:
            if isinstance(value, BadLine):
                self.bad(where, str(value))
            else:
                yield where, value

    def _kind(self, value: Any) -> str:
        return detect_format(value) if self.fmt == registry.AUTO else self.fmt

    def traces(self) -> Iterator[Trace]:
        """Every trace of the file, value by value."""
        self.jsonl, read = iter_values(self.p)
        values = self._good(read)
        head = list(islice(values, 2))
        if not head:
            return  # every line was bad, and each was said
        if len(head) == 2 and self._kind(head[0][1]) == "otlp":
            whole = [*head, *values]
            if self.fmt == "otlp" or all(detect_format(v) == "otlp" for _, v in whole):
                # An OpenTelemetry file exporter writes one export per line (traces and logs
                # may share the file): read them as one, so that log records join their
                # spans and turns are numbered across the whole file.
                from ctxcore.formats.otlp import traces_from_exports

                yield from traces_from_exports(
                    whole, where=str(self.p), session_id=self.session, default_now=self.mtime
                )
                return
            values = iter(whole)
        for n, (where, value) in enumerate(chain(head, values)):
            yield from self._value(n, where, value)

    def _value(self, n: int, where: str, value: Any) -> list[Trace]:
        """The traces of the file's ``n``-th value (a JSONL line's error is that line's)."""
        try:
            traces = traces_from_value(
                value, self.fmt, where=where, session_id=self.session, default_now=self.mtime
            )
        except CtxscopeError as exc:
            if self.jsonl:  # one line's error, not the file's
                self.bad(where, str(exc))
                return []
            if not isinstance(exc, ImportFormatError):
                raise
            msg = str(exc)
            raise ImportFormatError(
                msg if msg.startswith(str(self.p)) else f"{where}: {msg}"
            ) from exc
        if self.jsonl and registry.get(self._kind(value)).one_per_line and len(traces) == 1:
            # one conversation per line: number the turns in file order
            traces = [traces[0].model_copy(update={"turn": n})]
        return traces


def load_file(
    path: str | Path, fmt: Format = "auto", skipped: Callable[[str], None] | None = None
) -> list[Trace]:
    """Every trace a file holds (JSON, or JSONL with one value per line), as a list
    (``skipped``: as ``iter_traces``)."""
    return list(iter_traces(path, fmt, skipped=skipped))


# --------------------------------------------------------------------------- writing


def jsonl_lines(traces: Iterable[Trace], *, shared: bool = False) -> Iterator[str]:
    """Traces as JSONL lines: each whole, or ``shared`` (``ctxcore.sharing``: a line names
    the parts an earlier line of the file carried)."""
    if shared:
        return ShareWriter().lines(iter(traces))
    return whole_lines(iter(traces))


def write_jsonl(traces: Iterable[Trace], path: Path | str, *, shared: bool = False) -> None:
    """Write traces as JSONL to ``path`` (``ctxcore.output.write_output``: a file whole or
    not at all, so a watcher sees whole files; a device or FIFO in place; ``-`` is stdout),
    each trace whole or ``shared`` (docs/design.md, "Shared traces"); the lines are made as
    UTF-8 bytes, as the serializers make them."""
    lines = ShareWriter().byte_lines(iter(traces)) if shared else whole_byte_lines(iter(traces))
    write_output(path, lines)


__all__ = [
    "SNAPSHOT_FORMAT",
    "detect_format",
    "iter_traces",
    "BadLine",
    "iter_values",
    "jsonl_lines",
    "load_file",
    "traces_from_value",
    "write_jsonl",
]
