"""Arrow rows in PostgreSQL's binary ``COPY`` format, built column by column by Arrow's and
numpy's kernels, never a Python loop over rows (docs/design.md, "Store", the PostgreSQL
engine's inserts).

The binary format costs the server less than text: no field to find between delimiters and
quotes, no number, time or ``\\x`` hex to parse, bytes taken as they are. Each value goes in
as the column's own type: the target table's column types are read from the server once per
connection and table (``column_types``) and each Arrow column is cast to the type whose
binary form that column takes (a value the cast cannot hold is an error, never a wrong
value).

The format: a signature, then per row a 16-bit count of fields and per field its length (32
bits, -1 for NULL) and its bytes, big-endian; a 16-bit -1 ends it. A ``TEXT[]`` value is an
array: dimensions (0 when empty, else 1), a flag of NULL elements, the element type's oid,
the length and lower bound (1), then each element as a field.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc

#: the start of every binary COPY: its signature, no flags, no header extension
SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
#: the end of every binary COPY: a row of -1 fields
TRAILER = b"\xff\xff"
#: microseconds from the Unix epoch to PostgreSQL's (2000-01-01)
PG_EPOCH_US = 946_684_800_000_000
#: the oid of PostgreSQL's ``text`` (the element type of a ``TEXT[]``)
TEXT_OID = 25

_BLOB = pa.large_binary()
_NOTHING = pa.scalar(b"", _BLOB)

#: connection -> table -> column -> the server's type name (``pg_type.typname``)
_TYPES: weakref.WeakKeyDictionary[psycopg.Connection, dict[str, dict[str, str]]] = (
    weakref.WeakKeyDictionary()
)


def column_types(con: psycopg.Connection, table: str) -> dict[str, str]:
    """The type name of each column of ``table`` (as the connection's search path finds it),
    asked once per connection."""
    known = _TYPES.setdefault(con, {})
    if table not in known:
        rows = con.execute(
            "SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = "
            "a.atttypid WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped",
            [table],
        ).fetchall()
        known[table] = {str(name): str(typ) for name, typ in rows}
    return known[table]


def _fields(data: np.ndarray, width: int, valid: np.ndarray | None) -> pa.Array:
    """Fixed-width values as fields: each row's 4-byte length then its ``width`` bytes
    (``data``: n x width bytes), a NULL (``valid`` False) as the length -1 alone."""
    n = len(data)
    rows = np.empty((n, 4 + width), np.uint8)
    rows[:, 4:] = data
    lengths = np.full(n, width, ">i4")
    if valid is not None and not valid.all():
        lengths[~valid] = -1
        rows[:, :4] = lengths.view(np.uint8).reshape(n, 4)
        keep = np.ones((n, 4 + width), bool)
        keep[~valid, 4:] = False
        body = rows[keep]
        sizes = np.where(valid, 4 + width, 4)
    else:
        rows[:, :4] = lengths.view(np.uint8).reshape(n, 4)
        body = rows.reshape(-1)
        sizes = np.full(n, 4 + width)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return pa.LargeBinaryArray.from_buffers(
        _BLOB, n, [None, pa.py_buffer(offsets), pa.py_buffer(body)]
    )


def _valid(col: pa.Array) -> np.ndarray | None:
    """Which rows are not NULL (None when all are)."""
    if not col.null_count:
        return None
    return np.asarray(col.is_valid().to_numpy(zero_copy_only=False), bool)


def _numbers(col: pa.Array, arrow: pa.DataType, big_endian: str) -> pa.Array:
    """A numeric column cast to ``arrow``, as fields of its big-endian bytes."""
    cast = pc.cast(col, arrow)
    values = pc.fill_null(cast, 0).to_numpy(zero_copy_only=False).astype(big_endian)
    width = values.dtype.itemsize
    return _fields(values.view(np.uint8).reshape(-1, width), width, _valid(col))


def _bools(col: pa.Array) -> pa.Array:
    values = pc.fill_null(pc.cast(col, pa.bool_()), False).to_numpy(zero_copy_only=False)
    return _fields(values.astype(np.uint8).reshape(-1, 1), 1, _valid(col))


def _timestamps(col: pa.Array) -> pa.Array:
    """Microseconds since 2000-01-01, as PostgreSQL's ``timestamp``."""
    micros = pc.cast(pc.cast(col, pa.timestamp("us")), pa.int64())
    values = (pc.fill_null(micros, 0).to_numpy(zero_copy_only=False) - PG_EPOCH_US).astype(">i8")
    return _fields(values.view(np.uint8).reshape(-1, 8), 8, _valid(col))


def _lengths(lengths: np.ndarray) -> pa.Array:
    """4-byte big-endian lengths as binary values, to join in front of their data."""
    raw = np.ascontiguousarray(lengths.astype(">i4")).view(np.uint8).reshape(-1, 4)
    fixed = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(4), len(lengths), [None, pa.py_buffer(raw)]
    )
    return fixed.cast(_BLOB)


def _bytes(col: pa.Array) -> list[pa.Array]:
    """A text or bytes column as [lengths, data] to join: the bytes as they are (text is
    UTF-8), a NULL as the length -1 and nothing."""
    blobs = pc.cast(col, _BLOB)
    sizes = pc.fill_null(pc.binary_length(blobs), -1).to_numpy(zero_copy_only=False)
    return [_lengths(sizes), pc.fill_null(blobs, _NOTHING)]


def _text_arrays(col: pa.Array) -> list[pa.Array]:
    """A list-of-text column as ``TEXT[]`` values: [lengths, array headers, elements]."""
    lists = pc.cast(col, pa.large_list(pa.string()))
    n = len(lists)
    counts = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(lists)
    elements = pc.binary_join_element_wise(*_bytes(flat), _NOTHING)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    joined = pc.binary_join(
        pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), elements), _NOTHING
    )
    has_null = np.zeros(n, np.int32)
    if flat.null_count:
        parents = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)
        missing = ~np.asarray(flat.is_valid().to_numpy(zero_copy_only=False), bool)
        has_null = (np.bincount(parents[missing], minlength=n) > 0).astype(np.int32)
    head = np.empty((n, 5), ">i4")
    head[:, 0] = counts > 0
    head[:, 1] = has_null
    head[:, 2] = TEXT_OID
    head[:, 3] = counts
    head[:, 4] = 1
    raw = head.view(np.uint8).reshape(n, 20)
    keep = np.ones((n, 20), bool)
    keep[counts == 0, 12:] = False  # an empty array has no dimension
    sizes = np.where(counts > 0, 20, 12)
    head_offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=head_offsets[1:])
    headers = pa.LargeBinaryArray.from_buffers(
        _BLOB, n, [None, pa.py_buffer(head_offsets), pa.py_buffer(raw[keep])]
    )
    total = sizes + pc.binary_length(joined).to_numpy(zero_copy_only=False)
    valid = _valid(lists)
    if valid is not None:
        total = np.where(valid, total, -1)
        headers = pc.if_else(pa.array(valid), headers, _NOTHING)
        joined = pc.if_else(pa.array(valid), joined, _NOTHING)
    return [_lengths(total), headers, joined]


_ENCODERS: dict[str, Callable[[pa.Array], list[pa.Array]]] = {
    "int8": lambda c: [_numbers(c, pa.int64(), ">i8")],
    "int4": lambda c: [_numbers(c, pa.int32(), ">i4")],
    "int2": lambda c: [_numbers(c, pa.int16(), ">i2")],
    "float8": lambda c: [_numbers(c, pa.float64(), ">f8")],
    "float4": lambda c: [_numbers(c, pa.float32(), ">f4")],
    "bool": lambda c: [_bools(c)],
    "timestamp": lambda c: [_timestamps(c)],
    "text": _bytes,
    "varchar": _bytes,
    "bytea": _bytes,
    "_text": _text_arrays,
}


def encode(table: pa.Table, types: dict[str, str]) -> tuple[pa.Buffer, int, int]:
    """The rows of ``table`` in binary COPY format (without the signature and trailer),
    each column as ``types`` names its target column's type: a buffer and the slice of it
    that holds them (start, end)."""
    table = table.combine_chunks()
    n = table.num_rows
    count = np.full(n, table.num_columns, ">i2").view(np.uint8).reshape(n, 2)
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(2), n, [None, pa.py_buffer(count)])
    pieces = [fixed.cast(_BLOB)]  # the field count in front of each row
    for name in table.schema.names:
        typ = types.get(name)
        encoder = _ENCODERS.get(typ or "")
        if encoder is None:
            raise ValueError(f"column {name!r}: no binary COPY of a column of type {typ!r}")
        col = table.column(name)
        pieces += encoder(col.chunk(0) if col.num_chunks else pa.array([], col.type))
    rows = pc.binary_join_element_wise(*pieces, _NOTHING)
    offsets = np.frombuffer(rows.buffers()[1], np.int64, n + 1, rows.offset * 8)
    return rows.buffers()[2], int(offsets[0]), int(offsets[-1])


def copy_binary(con: psycopg.Connection, name: str, table: pa.Table) -> None:
    """Append Arrow rows to a table with one binary ``COPY``."""
    if not table.num_rows:
        return
    body, start, end = encode(table, column_types(con, name))
    cols = ", ".join(f'"{c}"' for c in table.schema.names)
    with con.cursor().copy(f"COPY {name} ({cols}) FROM STDIN (FORMAT binary)") as cp:
        cp.write(SIGNATURE)
        cp.write(memoryview(body)[start:end])
        cp.write(TRAILER)


__all__ = ["PG_EPOCH_US", "SIGNATURE", "TRAILER", "column_types", "copy_binary", "encode"]
