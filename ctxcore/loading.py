"""Parse traces, captured inputs and configs from bytes, with errors a person can act on.

pydantic's errors are precise but long; an engineer wants one line: which file and line,
which packet (by id, not just by index) and which field, and what was wrong. Everything
that reads user-supplied JSON goes through here: the CLI, ingest, importers, the app.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ctxcore.errors import InputError
from ctxcore.models import CapturedInput, Config, Trace


def _where(prefix: str) -> str:
    return f"{prefix}: " if prefix else ""


def decode_utf8(data: bytes, where: str = "") -> str:
    """Decode strictly; name the byte offset (and line) of the first invalid sequence."""
    try:
        return data.decode("utf-8")
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


def parse_json(text: str, where: str = "") -> Any:
    """``json.loads`` that rejects NaN/Infinity (also ``1e400``) and reports line:column."""
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{_where(where)}malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc
    except ValueError as exc:
        raise InputError(f"{_where(where)}{exc}") from exc


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
    if err["type"] == "extra_forbidden":
        msg = "unknown field (check the spelling against the ctxscope.trace/1 schema)"
    return msg


def explain(exc: ValidationError, data: Any, where: str = "") -> InputError:
    """One InputError naming every problem (first three) with packet id and field."""
    msgs = []
    errors = exc.errors(include_url=False)
    for err in errors[:3]:
        msg = error_message(err)
        msgs.append(f"{_loc_to_text(tuple(err['loc']), data)}: {msg}")
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    return InputError(f"{_where(where)}" + "; ".join(msgs) + more)


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
        raise explain(exc, data, where) from exc


def read_text(path: str | Path) -> str:
    """A user's file as text: strict UTF-8, gunzipped when it ends in .gz, one-line errors."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror or exc})") from exc
    if p.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise InputError(f"{p}: not a valid gzip file ({exc})") from exc
    return decode_utf8(raw, str(p))


def load_input_or_trace(path: str | Path) -> tuple[CapturedInput, Config | None, Trace | None]:
    """Read a file holding either a whole trace or a bare captured input."""
    p = Path(path)
    data = parse_json(read_text(p), str(p))
    if isinstance(data, dict) and "schema" in data:
        trace = trace_from_obj(data, str(p))
        return trace.input, trace.config, trace
    return input_from_obj(data, str(p)), None, None


def load_config(path: str | Path) -> Config:
    p = Path(path)
    return config_from_obj(parse_json(read_text(p), str(p)), str(p))
