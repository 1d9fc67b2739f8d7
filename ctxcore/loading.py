"""Parse traces, captured inputs and configs from bytes, with errors a person can act on.

pydantic's errors are precise but long; an engineer wants one line: which file and line,
which packet (by id, not just by index) and which field, and what was wrong. Everything
that reads user-supplied JSON goes through here: the CLI, ingest, importers, the app.

Files are read with bounded memory whatever they hold (docs/design.md, "Ingest and the
watcher"): JSONL line by line, each line refused past ``MAX_LINE_BYTES`` while it is read;
a single JSON document refused past ``MAX_DOCUMENT_BYTES`` (unpacked, for a ``.gz``); and a
FIFO or a device is refused before it is opened for reading (it would block).

Two rules hold for every reader (docs/design.md, "Capture, import, export, redaction"): a
UTF-8 byte order mark that starts a file, or a line (files joined with ``cat`` keep
theirs), is skipped, as Windows tools write one; and JSON nested deeper than Python's
parsers can follow (their recursion limit, about a thousand levels) is refused in one line
(``TOO_DEEP``, ``too_deep``), a JSONL line costing that line only.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import stat
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, cast

from pydantic import ValidationError

from ctxcore import knobs
from ctxcore.errors import InputError
from ctxcore.models import CapturedInput, Config, Trace
from ctxcore.settings import MAX_DOCUMENT_BYTES, MAX_JSON_DEPTH, MAX_LINE_BYTES

#: bytes read per step when streaming a file's lines
_READ_BYTES = 1024 * 1024
#: The UTF-8 byte order mark Notepad and PowerShell put first in a file: not JSON, skipped.
UTF8_BOM = b"\xef\xbb\xbf"


def without_bom(raw: bytes) -> bytes:
    """``raw`` less a UTF-8 byte order mark it starts with."""
    return raw[3:] if raw[:3] == UTF8_BOM else raw


def _where(prefix: str) -> str:
    return f"{prefix}: " if prefix else ""


def decode_utf8(data: bytes, where: str = "") -> str:
    """Decode strictly (less a leading byte order mark); name the byte offset (and line) of
    the first invalid sequence."""
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(
            f"{_where(where)}invalid UTF-8 at byte {exc.start} (line {line}): "
            f"{data[exc.start : exc.start + 4]!r}; re-save the file as UTF-8"
        ) from exc


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON (NaN and Infinity are not numbers in JSON)")


def _finite_float(text: str) -> float:
    # ``1e400`` parses to inf, which JSON cannot hold: written back out it would become null.
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text} is too large for a 64-bit float (JSON cannot hold it)")
    return value


#: One decoder for every call: ``json.loads`` with hooks builds a new one each time, which
#: was a third of the cost of wording the error of a short bad line (a file of millions).
_JSON = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def parse_json(text: str, where: str = "") -> Any:
    """``json.loads`` that rejects NaN/Infinity (also ``1e400``) and reports line:column;
    a leading byte order mark is skipped, JSON nested too deeply refused (``too_deep``)."""
    try:
        return _JSON.decode(text.removeprefix("\ufeff"))
    except json.JSONDecodeError as exc:
        # one line (a JSONL line, whose number ``where`` holds): its column only
        at = f"line {exc.lineno} column {exc.colno}" if "\n" in text else f"column {exc.colno}"
        raise InputError(f"{_where(where)}malformed JSON at {at}: {exc.msg}") from exc
    except ValueError as exc:
        raise InputError(f"{_where(where)}{exc}") from exc
    except RecursionError as exc:
        raise too_deep(where) from exc


#: The error for JSON nested beyond what Python's parsers can read at all (json's and
#: msgspec's recurse once a level, up to the interpreter's recursion limit).
TOO_DEEP = (
    "JSON nested too deeply to read (hundreds of levels); metadata and tool parameters may "
    f"nest at most {MAX_JSON_DEPTH} levels: store a deeper structure as a JSON string"
)


def too_deep(where: str = "") -> InputError:
    """The one-line error of every JSON reader for a ``RecursionError`` of its parser: the
    guard that keeps a hostile nesting from ending in a traceback (or a 500)."""
    return InputError(f"{_where(where)}{TOO_DEEP}")


def _loc_to_text(loc: tuple[Any, ...], data: Any) -> str:
    """Render a pydantic error location, naming the packet or message by its id.

    ('input', 'packets', 3, 'timestamp') -> "packet 'tool:call_12' (input.packets[3]) field
    'timestamp'".
    """
    parts: list[str] = []
    node = data
    packet_label = ""
    field_parts: list[str] = []
    for i, key in enumerate(loc):
        if isinstance(key, int):
            parts[-1:] = [f"{parts[-1]}[{key}]"] if parts else [f"[{key}]"]
        else:
            parts.append(str(key))
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            node = None
        if (
            isinstance(key, int)
            and i > 0
            and loc[i - 1] in ("packets", "history")
            and isinstance(node, dict)
        ):
            ident = node.get("id")
            kind = "packet" if loc[i - 1] == "packets" else "message"
            packet_label = f"{kind} {ident!r} " if ident else f"{kind} "
            field_parts = []
            continue
        if packet_label and not isinstance(key, int):
            field_parts.append(str(key))
    path = ".".join(parts)
    if packet_label:
        fieldname = ".".join(field_parts) if field_parts else "(whole item)"
        return f"{packet_label}({path}) field {fieldname!r}"
    return f"field {path!r}" if path else "top level"


def error_message(err: Any) -> str:
    """One pydantic error (an ``exc.errors()`` item) as words a person can act on."""
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if err["type"] == "string_too_long":
        size = len(err["input"]) if isinstance(err.get("input"), str) else None
        limit = (err.get("ctx") or {}).get("max_length")
        msg = (
            f"is {size:,} characters; the limit is {limit:,}. "
            "Capture a slice or a summary of it instead of the whole thing"
            if size is not None and isinstance(limit, int)
            else msg
        )
    if err["type"] == "finite_number":
        msg = "must be a finite number (NaN and Infinity are not allowed)"
    if err["type"] == "timezone_aware":
        msg += " (add an offset such as +00:00 or Z)"
    bound = (err.get("ctx") or {}).get("ge" if err["type"] == "greater_than_equal" else "le")
    if err["type"] in ("greater_than_equal", "less_than_equal") and _is_time(bound):
        side = "before" if err["type"] == "greater_than_equal" else "after"
        msg = (
            f"is {side} {bound} once converted to UTC, outside the years 1 to 9999 that "
            "timestamps can hold"
        )
    if err["type"] == "extra_forbidden":
        msg = "unknown field (check the spelling against the ctxscope.trace/1 schema)"
    return msg + str(err.get("hint", ""))


def explain(exc: ValidationError, data: Any, where: str = "") -> InputError:
    """One InputError naming every problem (first three) with packet id and field."""
    return explain_errors(exc.errors(include_url=False), data, where)


def explain_errors(errors: list[Any], data: Any, where: str = "") -> InputError:
    """``explain`` of pydantic's error list (``ValidationError.errors()``)."""
    msgs = []
    for err in errors[:3]:
        msg = error_message(err)
        msgs.append(f"{_loc_to_text(tuple(err['loc']), data)}: {msg}")
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    return InputError(f"{_where(where)}" + "; ".join(msgs) + more)


def _is_time(bound: Any) -> bool:
    return isinstance(bound, str) and bound[:4].isdigit() and "T" in bound and ":" in bound


def _check_floats(node: Any, where: str) -> None:
    # json.loads already rejects NaN; this guards dicts built in Python.
    if isinstance(node, float) and not math.isfinite(node):
        raise InputError(f"{_where(where)}non-finite number {node!r}")


def trace_from_obj(data: Any, where: str = "") -> Trace:
    if not isinstance(data, dict):
        raise InputError(f"{_where(where)}a trace must be a JSON object, got {type(data).__name__}")
    try:
        return Trace.model_validate(data)
    except ValidationError as exc:
        raise explain(exc, data, where) from exc


def input_from_obj(data: Any, where: str = "") -> CapturedInput:
    if not isinstance(data, dict):
        raise InputError(
            f"{_where(where)}a captured input must be a JSON object, got {type(data).__name__}"
        )
    try:
        return CapturedInput.model_validate(data)
    except ValidationError as exc:
        raise explain(exc, data, where) from exc


def config_from_obj(data: Any, where: str = "") -> Config:
    if not isinstance(data, dict):
        raise InputError(
            f"{_where(where)}a config must be a JSON object, got {type(data).__name__}"
        )
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        errors = [_knob_hint(err) for err in exc.errors(include_url=False)]
        raise explain_errors(errors, data, where) from exc


def _knob_hint(err: Any) -> Any:
    """A config error about one field, with what ``ctxcore.knobs`` says of that knob: its
    kind and bounds, or, for a name that is no knob, the knobs (docs/design.md, "Knobs")."""
    loc = tuple(err["loc"])
    if len(loc) != 1 or not isinstance(loc[0], str):
        return err
    return {**err, "hint": knobs.hint(loc[0])}


def open_regular(path: str | Path) -> IO[bytes]:
    """A regular file opened for reading; a FIFO, socket or device is refused without
    blocking (opening a FIFO for reading waits for a writer). The caller closes it."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror or exc})") from exc
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InputError(f"{p}: is a folder; pass the trace files in it")
        if not stat.S_ISREG(mode):
            raise InputError(
                f"{p}: not a regular file (a FIFO, socket or device); ctxscope reads files only"
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def gzip_error(exc: BaseException) -> str:
    """What a failed read of a .gz means, in words (it is the file's fault, not a bug)."""
    if isinstance(exc, EOFError):
        return "the gzip stream ends early: the file is truncated (or still being written)"
    text = str(exc)
    if isinstance(exc, gzip.BadGzipFile) and text.startswith("Not a gzipped file"):
        return "not a gzip file (it ends in .gz but is not gzip data); rename or re-compress it"
    return f"the gzip data is corrupt ({text or type(exc).__name__}); re-compress the file"


#: What a .gz raises when its data is broken (the file's fault).
GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)


@contextmanager
def open_stream(path: str | Path) -> Iterator[IO[bytes]]:
    """A file's bytes, unpacked on the fly when it ends in .gz (refused unless regular)."""
    p = Path(path)
    f = open_regular(p)
    try:
        if p.suffix == ".gz":
            with gzip.GzipFile(fileobj=f, mode="rb") as gz:
                yield cast(IO[bytes], gz)
        else:
            yield f
    finally:
        f.close()


def _read(f: IO[bytes], n: int, p: Path) -> bytes:
    try:
        return f.read(n)
    except GZIP_ERRORS as exc:
        raise InputError(f"{p}: {gzip_error(exc)}") from exc
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror or exc})") from exc


def read_text(path: str | Path, limit: int = MAX_DOCUMENT_BYTES) -> str:
    """A user's single-document file as text: strict UTF-8, gunzipped when it ends in .gz,
    one-line errors. Past ``limit`` bytes (unpacked) it is refused unread: the whole
    document is parsed at once, so its size is what bounds memory."""
    p = Path(path)
    with open_stream(p) as f:
        raw = _read(f, limit + 1, p)
    if len(raw) > limit:
        raise InputError(
            f"{p}: over {limit:,} bytes{' unpacked' if p.suffix == '.gz' else ''}, the limit "
            "for a single JSON document; write the traces as JSONL (one per line), which "
            "has no size limit"
        )
    return decode_utf8(raw, str(p))


def too_long(limit: int = MAX_LINE_BYTES) -> str:
    """The error of a line over the limit (the same words whether or not it has ended, so
    that a line reported while still being written is not reported again)."""
    return (
        f"the line is over {limit:,} bytes, the limit for one line; it was skipped unread: "
        "capture slices or summaries of big tool outputs"
    )


def iter_lines(path: str | Path, limit: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of every line of a file (gunzipped on the fly), streamed: memory
    holds one line at most. A line longer than ``limit`` is refused while it is read."""
    p = Path(path)
    with open_stream(p) as f:
        lineno = 0
        parts: list[bytes] = []
        size = 0
        while True:
            chunk = _read(f, _READ_BYTES, p)
            if not chunk:
                break
            start = 0
            while True:
                end = chunk.find(b"\n", start)
                if end < 0:
                    break
                lineno += 1
                if parts:
                    parts.append(chunk[start:end])
                    line, parts, size = b"".join(parts), [], 0
                else:
                    line = chunk[start:end]
                yield lineno, line
                start = end + 1
            if start < len(chunk):
                parts.append(chunk[start:])
                size += len(chunk) - start
                if size > limit:
                    raise InputError(
                        f"{p}:{lineno + 1}: the line is over {limit:,} bytes, the limit for "
                        "one line; capture slices or summaries of big tool outputs"
                    )
        if parts:
            yield lineno + 1, b"".join(parts)


def decode_line(raw: bytes, where: str) -> str:
    """One line as text (less a leading byte order mark); invalid UTF-8 is named by its byte
    in the line."""
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{where}: invalid UTF-8 at byte {exc.start} of the line "
            f"({raw[exc.start : exc.start + 4]!r}); re-save the file as UTF-8"
        ) from exc


def holds_shared(text: str) -> bool:
    """Whether a file holds shared trace lines (one of its lines starts one)."""
    from ctxcore.sharing import starts_shared

    return any(starts_shared(ln) for ln in text.splitlines() if ln.startswith("{"))


def shared_traces(text: str, p: Path) -> list[Trace]:
    """The traces of a file of trace lines, shared ones whole (docs/design.md, "Shared
    traces"); a line that cannot be read is an error naming ``file:line``."""
    from ctxcore.sharing import PartTable

    table = PartTable()
    out: list[Trace] = []
    for n, ln in enumerate(text.splitlines(), 1):
        if ln.strip():
            where = f"{p}:{n}"
            out.append(
                trace_from_obj(parse_json(table.expand(ln.encode(), where).decode(), where), where)
            )
    return out


def load_input_or_trace(path: str | Path) -> tuple[CapturedInput, Config | None, Trace | None]:
    """Read a file holding either a whole trace or a bare captured input."""
    p = Path(path)
    text = read_text(p)
    if holds_shared(text):
        traces = shared_traces(text, p)
        if len(traces) != 1:
            raise InputError(f"{p}: holds {len(traces)} traces; a build reads one (--trace ID)")
        return traces[0].input, traces[0].config, traces[0]
    data = parse_json(text, str(p))
    if isinstance(data, dict) and "schema" in data:
        trace = trace_from_obj(data, str(p))
        return trace.input, trace.config, trace
    return input_from_obj(data, str(p)), None, None


def load_config(path: str | Path) -> Config:
    p = Path(path)
    return config_from_obj(parse_json(read_text(p), str(p)), str(p))
