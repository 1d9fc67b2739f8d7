"""OTLP protobuf files, read with the ``opentelemetry-proto`` package.

Two shapes are written in practice: one bare ``ExportTraceServiceRequest`` or
``ExportLogsServiceRequest`` (the body an OTLP/HTTP exporter posts, saved as it was sent),
and the collector file exporter's ``format: proto`` stream, where each export request is
preceded by its length (4 bytes, big-endian) and traces and logs may share the file. Each
message is decoded with the generated classes and turned into the OTLP JSON shape
(``google.protobuf.json_format``, ids as hex as OTLP JSON writes them), so the JSON reader
does the rest.

Which of the two requests a message is cannot be told from its tag alone (both are a
repeated field 1), so it is parsed as both and the reading that leaves no bytes unknown
wins.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ctxcore.errors import ImportFormatError, InputError
from ctxcore.formats.otlp_records import hex_id
from ctxcore.formats.protodict import message_to_dict
from ctxcore.loading import open_stream
from ctxcore.settings import MAX_DOCUMENT_BYTES

#: File name endings that say "binary protobuf" whatever the content looks like.
SUFFIXES: tuple[str, ...] = (".pb", ".binpb", ".protobuf")
#: Bytes a JSON text may hold below 0x20: tab, newline, carriage return.
_JSON_CONTROL = frozenset({9, 10, 13})
_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})
#: Bytes of one protobuf file (unpacked, for a ``.gz``), which is decoded whole: the same
#: limit as a single JSON document's.
MAX_PROTOBUF_BYTES = MAX_DOCUMENT_BYTES
_READ_BYTES = 1024 * 1024


def read_protobuf(path: Path) -> bytes | None:
    """The file's bytes when it is OTLP protobuf (by its name or its first bytes), else
    ``None`` (a text file, read as JSON by the caller).

    A protobuf file is decoded whole, so its size is what bounds memory: past
    ``MAX_PROTOBUF_BYTES`` (unpacked, for a ``.gz``: a small one can unpack to gigabytes) it
    is refused while it is read, as a JSON document is past ``MAX_DOCUMENT_BYTES``
    (docs/design.md, "Capture, import, export, redaction")."""
    limit = MAX_PROTOBUF_BYTES
    name = path.name.lower()
    gz = path.suffix == ".gz"  # as ``open_stream`` unpacks
    parts: list[bytes] = []
    size = 0
    with open_stream(path) as f:
        while size <= limit:
            try:
                chunk = f.read(min(_READ_BYTES, limit + 1 - size))
            except (OSError, EOFError, zlib.error) as exc:
                why = f"not a valid gzip file ({exc})" if gz else f"cannot read ({exc})"
                raise InputError(f"{path}: {why}") from exc
            if not chunk:
                break
            parts.append(chunk)
            size += len(chunk)
    if size > limit:
        raise ImportFormatError(
            f"{path}: over {limit:,} bytes{' unpacked' if gz else ''}, the limit for an OTLP "
            "protobuf file (it is decoded whole); split the export into smaller files"
        )
    raw = b"".join(parts)
    if gz:
        name = name[: -len(".gz")]
    if name.endswith(SUFFIXES) or looks_binary(raw):
        return raw
    return None


def looks_binary(raw: bytes) -> bool:
    """Protobuf, not JSON: an OTLP request starts with field 1's tag (0x0a) or, framed, with
    a length's zero high byte, and holds control bytes no JSON text has (0x12 is the tag
    of every scope list)."""
    if not raw or raw[0] not in (0x00, 0x0A):
        return False
    return any(b < 0x20 and b not in _JSON_CONTROL for b in raw[:4096])


def _frames(raw: bytes) -> list[bytes] | None:
    """The messages of a length-prefixed stream, or ``None`` if ``raw`` is not one."""
    frames: list[bytes] = []
    pos = 0
    while pos < len(raw):
        if pos + 4 > len(raw):
            return None
        (size,) = struct.unpack(">I", raw[pos : pos + 4])
        if size == 0 or pos + 4 + size > len(raw):
            return None
        frames.append(raw[pos + 4 : pos + 4 + size])
        pos += 4 + size
    return frames or None


def _hex_ids(node: Any) -> Any:
    """protobuf's JSON mapping writes bytes as base64; OTLP JSON writes ids as hex."""
    if isinstance(node, dict):
        return {
            key: hex_id(value) if key in _ID_KEYS else _hex_ids(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids(x) for x in node]
    return node


def decode_message(raw: bytes, where: str) -> dict[str, Any]:
    """One export request as an OTLP JSON object (traces or logs, whichever it is)."""
    best: tuple[int, dict[str, Any]] | None = None
    kinds: tuple[tuple[type[ExportTraceServiceRequest | ExportLogsServiceRequest], str], ...] = (
        (ExportTraceServiceRequest, "resourceSpans"),
        (ExportLogsServiceRequest, "resourceLogs"),
    )
    for cls, key in kinds:
        msg = cls()
        try:
            msg.ParseFromString(raw)
        except DecodeError:
            continue
        msg.DiscardUnknownFields()
        size = msg.ByteSize()
        data = message_to_dict(msg)
        if key in data and (best is None or size > best[0]):
            best = (size, data)
    if best is None:
        raise ImportFormatError(
            f"{where}: not an OTLP protobuf export (neither an ExportTraceServiceRequest nor "
            "an ExportLogsServiceRequest)"
        )
    result: dict[str, Any] = _hex_ids(best[1])
    return result


def exports_from_bytes(raw: bytes, where: str) -> list[tuple[str, dict[str, Any]]]:
    """Every export request of a protobuf file, each with where it is."""
    frames = _frames(raw)
    if frames is None:
        return [(where, decode_message(raw, where))]
    return [
        (f"{where}: message {n + 1}", decode_message(m, f"{where}: message {n + 1}"))
        for n, m in enumerate(frames)
    ]


__all__ = [
    "MAX_PROTOBUF_BYTES",
    "SUFFIXES",
    "decode_message",
    "exports_from_bytes",
    "looks_binary",
    "read_protobuf",
]
