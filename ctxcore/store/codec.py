"""How the store packs a trace's JSON: zstd, whole or shared.

Apart from ``rows`` (which imports the detectors, numpy and the Arrow tables) so that a
process that only unpacks stored traces (a replay worker, ``records.PackedTrace.json``)
loads Arrow's codec and little else of the store. Every engine keeps the JSON packed so:
the rows it is given (``rows.prepare``) hold it packed (docs/design.md, "Store"). A frame is
packed by ``zstandard``'s compressor, made once a thread (Arrow's codec sets one up a call,
~22 us); any zstd reader unpacks it, Arrow's codec here.

A stored trace is in one of two forms (``trace_parts`` holds either):

- whole: ``pack_json`` of its JSON (a zstd frame; every trace stored before the shared
  form, and a trace whose bytes are not as ctxscope writes them);
- shared (``pack_shared``): the body of a ``ctxscope.share/1`` line (docs/design.md,
  "Shared traces": the trace with its items and long texts named by part), packed, after
  the ids of the parts it names; the body names the k-th of them ``"k"``. The parts live
  once in the store, packed together with the other parts the same insert added
  (``pack_parts``: a text sits in a history item, a packet and a prompt piece at once, and
  zstd packs them together five times tighter than one by one).

A reader of the store joins a shared trace with its parts (``with_parts``): the result is
self-contained, and ``unpack_json`` turns any of the three into the whole trace's JSON,
byte for byte the JSON that was stored.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import cast

import pyarrow as pa
import zstandard

from ctxcore.errors import StoreError

#: The trace JSON is stored zstd-compressed: DuckDB then writes a seventh of the bytes, and
#: compressing costs less than DuckDB spends storing the plain text (bench/bench_store.py).
CODEC = "zstd"
#: the first byte of a shared trace as stored, and of one joined with its parts (a zstd
#: frame starts with 0x28)
SHARED = b"\x00"
JOINED = b"\x01"
#: bytes of a part id as stored in a shared trace's header (a 16-byte digest; elsewhere it
#: is written as 32 hex digits)
ID_BYTES = 16
_U32 = struct.Struct("<I")
_ENVELOPE = b'{"share":"ctxscope.share/1","trace":'


#: zstd's level: Arrow's codec's default, which packed every store so far
LEVEL = 1
_LOCAL = threading.local()


def pack_json(raw: bytes) -> bytes:
    """A trace's UTF-8 JSON, packed as the store keeps it: one zstd frame (with its size),
    by this thread's compressor (a compressor is not shared between threads)."""
    try:
        compressor = _LOCAL.zstd
    except AttributeError:
        compressor = _LOCAL.zstd = zstandard.ZstdCompressor(level=LEVEL)
    return cast(bytes, compressor.compress(raw))


def _unpack(blob: bytes, size: int) -> bytes:
    return cast(bytes, pa.decompress(blob, decompressed_size=size, codec=CODEC, asbytes=True))


def pack_shared(body: bytes, ids: Sequence[str]) -> bytes:
    """A shared trace as stored: the ids (hex) of the parts it names, each once, then its
    packed body."""
    head = bytes.fromhex("".join(ids))  # one call, not one an id
    return SHARED + _U32.pack(len(ids)) + head + _U32.pack(len(body)) + pack_json(body)


def is_shared(blob: bytes) -> bool:
    """Whether a stored trace is in the shared form (it needs its parts to be read)."""
    return blob[:1] == SHARED


def part_ids(blob: bytes) -> list[str]:
    """The ids (hex) of the parts a shared trace names, in its header."""
    (n,) = _U32.unpack_from(blob, 1)
    head = blob[5 : 5 + n * ID_BYTES]
    return [head[i : i + ID_BYTES].hex() for i in range(0, len(head), ID_BYTES)]


def pack_parts(parts: Sequence[bytes]) -> tuple[bytes, list[int]]:
    """Parts' JSON packed together, and where each starts in the unpacked bytes (its end
    is the next one's start, the last one's the size, which ``unpack_parts`` is given)."""
    starts: list[int] = []
    at = 0
    for data in parts:
        starts.append(at)
        at += len(data)
    return pack_json(b"".join(parts)), starts


def read_parts(
    places: Iterable[tuple[str, str, int, int]], packs: Mapping[str, tuple[bytes, int]]
) -> dict[str, bytes]:
    """Parts' JSON by id, from where each is (id, pack, start, length) and the packs
    (``pack_parts``: id -> the packed bytes and their size unpacked). A part stored twice
    (two writers at once) is taken from either place."""
    raw = {pack: _unpack(blob, size) for pack, (blob, size) in packs.items()}
    return {pid: raw[pack][start : start + n] for pid, pack, start, n in places if pack in raw}


def with_parts(blob: bytes, parts: Mapping[str, bytes]) -> bytes:
    """A shared trace joined with its parts (their JSON by id): one self-contained blob
    ``unpack_json`` reads. A part it names that is not given is a ``KeyError`` naming
    it."""
    (n,) = _U32.unpack_from(blob, 1)
    end = 5 + n * ID_BYTES
    out = [JOINED, blob[1:end]]
    for i in part_ids(blob):
        data = parts[i]
        out += (_U32.pack(len(data)), data)
    out.append(blob[end:])
    return b"".join(out)


def join_parts(tseq: int, blob: bytes, parts: Mapping[str, bytes]) -> bytes:
    """``blob`` (of the trace stored as ``tseq``) joined with its parts when it is shared
    (``with_parts``), else as it is; a part it names that ``parts`` lacks is a
    ``StoreError`` (the store was damaged)."""
    if not is_shared(blob):
        return blob
    try:
        return with_parts(blob, parts)
    except KeyError as exc:
        raise StoreError(
            f"the trace stored as tseq {tseq} names the part {exc.args[0]} that the store "
            "lacks (shared_parts): the store is damaged; move it aside and ingest again"
        ) from exc


def _body_and_parts(blob: bytes) -> tuple[bytes, dict[str, bytes]]:
    """A joined shared trace's body and parts (each unpacked)."""
    ids = part_ids(blob)
    at = 5 + len(ids) * ID_BYTES
    parts: dict[str, bytes] = {}  # the body names the k-th part "k"
    for k in range(len(ids)):
        (size,) = _U32.unpack_from(blob, at)
        parts[str(k)] = blob[at + 4 : at + 4 + size]
        at += 4 + size
    (size,) = _U32.unpack_from(blob, at)
    return _unpack(blob[at + 4 :], size), parts


def unpack_json(blob: bytes, size: int) -> bytes:
    """The whole JSON (``size`` bytes long) of a trace packed whole (``pack_json``) or
    shared and joined with its parts (``with_parts``). A shared trace without its parts
    is a ``ValueError``."""
    if blob[:1] == JOINED:
        from ctxcore.sharing import PartTable  # only a shared trace needs it

        body, parts = _body_and_parts(blob)
        table = PartTable()
        table.parts.update(parts)
        out = table.expand(_ENVELOPE + body + b"}")
        if len(out) != size:
            raise ValueError(f"a shared trace expands to {len(out):,} bytes, not {size:,}")
        return out
    if blob[:1] == SHARED:
        raise ValueError("a shared trace read without its parts")
    return _unpack(blob, size)


__all__ = [
    "CODEC",
    "is_shared",
    "join_parts",
    "pack_json",
    "pack_parts",
    "pack_shared",
    "part_ids",
    "unpack_json",
    "read_parts",
    "with_parts",
]
