"""How the store packs a trace's JSON: zstd, through Arrow's codec.

Apart from ``rows`` (which imports the detectors, numpy and the Arrow tables) so that a
process that only unpacks stored traces (a replay worker, ``records.PackedTrace.json``)
loads Arrow's codec and nothing else of the store. Every engine keeps the JSON packed so:
the rows it is given (``rows.prepare``) hold it packed (docs/design.md, "Store").
"""

from __future__ import annotations

from typing import cast

import pyarrow as pa

#: The trace JSON is stored zstd-compressed: DuckDB then writes a seventh of the bytes, and
#: compressing costs less than DuckDB spends storing the plain text (bench/bench_store.py).
CODEC = "zstd"


def pack_json(raw: bytes) -> bytes:
    """A trace's UTF-8 JSON, packed as the store keeps it."""
    return cast(bytes, pa.compress(raw, codec=CODEC, asbytes=True))


def unpack_json(blob: bytes, size: int) -> bytes:
    """The JSON ``pack_json`` packed, ``size`` bytes long."""
    return cast(bytes, pa.decompress(blob, decompressed_size=size, codec=CODEC, asbytes=True))


__all__ = ["CODEC", "pack_json", "unpack_json"]
