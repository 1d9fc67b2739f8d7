"""The DuckDB engine's inserts: which traces of a batch are new, their ``tseq`` and ``cid``,
and the rows of ingest's state (errors, file offsets), on a cursor the caller holds.

Shared by ``TraceStore`` (``add_traces``, ``diagnose_pending``) and its bulk writer, each in
its own transaction: neither reaches into the other (docs/design.md, "Store", the bulk
writer). Every function takes the cursor of the caller's transaction (or a read cursor) and
the ``duck.Shared`` counters of the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctxcore.store import codec
from ctxcore.store.codec import unpack_json
from ctxcore.store.duck import STREAM_ROWS, Shared, first
from ctxcore.store.records import FileOffset, IngestErrorRow, InsertResult
from ctxcore.store.rows import _F64, _I64, _STR, _TS, RowTables, batch_blob, new_parts, utc_naive
from ctxcore.store.sameness import same_trace

#: trace_id -> (content digest, source file) of traces stored or inserted
Known = dict[str, tuple[str, str | None]]


def _pieces(res: duckdb.DuckDBPyConnection) -> dict[Any, bytes]:
    """(key, part, data) rows streamed out of DuckDB, each key's pieces joined in order (a
    piece given twice counts once). Sorted in SQL, every piece of a read was held inside
    DuckDB under its memory limit, and a read whose pieces passed the limit failed ("Out
    of Memory")."""
    pieces: dict[Any, dict[int, bytes]] = {}
    while rows := res.fetchmany(STREAM_ROWS):
        for key, part, data in rows:
            pieces.setdefault(key, {})[int(part)] = data
    return {
        k: b"".join(d for _, d in sorted(ps.items(), key=itemgetter(0))) for k, ps in pieces.items()
    }


def packed(cur: duckdb.DuckDBPyConnection, tseqs: Sequence[int]) -> dict[int, bytes]:
    """The packed JSON of the traces stored as these tseqs, from their pieces (one query
    per 1,000): whole (``codec.pack_json``), or shared and joined with its parts
    (``codec.join_parts``), either read by ``codec.unpack_json``."""
    out: dict[int, bytes] = {}
    for i in range(0, len(tseqs), 1000):
        chunk = list(tseqs[i : i + 1000])
        res = cur.execute(
            "SELECT tseq, part, data FROM trace_parts WHERE tseq IN (SELECT unnest(?::BIGINT[]))",
            [chunk],
        )
        out.update({int(t): b for t, b in _pieces(res).items()})
    ids = sorted({p for b in out.values() if codec.is_shared(b) for p in codec.part_ids(b)})
    if not ids:
        return out
    parts = _parts(cur, ids)
    return {t: codec.join_parts(t, b, parts) for t, b in out.items()}


def _parts(cur: duckdb.DuckDBPyConnection, ids: list[str]) -> dict[str, bytes]:
    """The JSON of the parts of shared traces with these ids, from their packs."""
    places: list[tuple[str, str, int, int]] = []
    for i in range(0, len(ids), 10_000):
        places += cur.execute(
            "SELECT pid, pack, start, size FROM shared_parts "
            "WHERE pid IN (SELECT unnest(?::VARCHAR[]))",
            [ids[i : i + 10_000]],
        ).fetchall()
    names = sorted({p[1] for p in places})
    sizes = dict(
        cur.execute(
            "SELECT DISTINCT pack, size FROM part_packs "
            "WHERE pack IN (SELECT unnest(?::VARCHAR[])) AND part = 0",
            [names],
        ).fetchall()
    )
    res = cur.execute(
        "SELECT pack, part, data FROM part_packs WHERE pack IN (SELECT unnest(?::VARCHAR[]))",
        [names],
    )
    packs = {p: (b, int(sizes[p])) for p, b in _pieces(res).items()}
    return codec.read_parts(places, packs)


def trace_json(cur: duckdb.DuckDBPyConnection, trace_id: str) -> bytes | None:
    """The stored JSON of a trace, as UTF-8 bytes."""
    row = first(
        cur.execute("SELECT tseq, json_bytes FROM traces WHERE trace_id = ?", [trace_id]).fetchall()
    )
    if row is None:
        return None
    return unpack_json(packed(cur, [int(row[0])])[int(row[0])], row[1])


def same_as_stored(cur: duckdb.DuckDBPyConnection, trace_id: str, raw: bytes) -> bool:
    """Is ``raw`` the trace stored as ``trace_id``, written differently or built again
    (``sameness.same_trace``)? False when ``cur`` sees none."""
    stored = trace_json(cur, trace_id)
    return stored is not None and same_trace(stored, raw)


def _stored(cur: duckdb.DuckDBPyConnection, ids: Sequence[str]) -> Known:
    """The digest and source of each of ``ids`` that is stored (one query per 2,000)."""
    known: Known = {}
    for chunk in range(0, len(ids), 2000):
        part = list(dict.fromkeys(ids[chunk : chunk + 2000]))
        rows = cur.execute(
            "SELECT trace_id, content_hash, source_file FROM traces "
            "WHERE trace_id IN (SELECT unnest(?::VARCHAR[]))",
            [part],
        ).fetchall()
        known.update({r[0]: (r[1], r[2]) for r in rows})
    return known


def _next_tseq(cur: duckdb.DuckDBPyConnection, shared: Shared) -> int:
    """The last tseq given (read once, then kept in memory: writes are serialised)."""
    if shared.tseq is None:
        row = first(cur.execute("SELECT coalesce(max(tseq), 0) FROM traces").fetchall())
        shared.tseq = int(row[0]) if row else 0
    return shared.tseq


def _numbered(prep: RowTables, keep: list[int], base: int) -> dict[str, pa.Table]:
    """The rows of the kept traces of ``prep``, row k of the batch as tseq base+1.. in
    order (the others left out); ``contents`` is left to ``_assign_texts``."""
    mapping = np.full(len(prep.ids), -1, dtype=np.int64)
    mapping[np.asarray(keep, dtype=np.int64)] = np.arange(
        base + 1, base + 1 + len(keep), dtype=np.int64
    )
    out: dict[str, pa.Table] = {}
    for name, table in prep.tables.items():
        if name in ("contents", "parts"):
            continue
        tseq = mapping[table.column("tseq").to_numpy()]
        if len(keep) < len(prep.ids):
            table = table.filter(pa.array(tseq >= 0))
            tseq = tseq[tseq >= 0]
        col = table.schema.get_field_index("tseq")
        table = table.set_column(col, "tseq", pa.array(tseq, _I64))
        if table.num_rows:
            out[name] = table
    return out


def plan_insert(
    cur: duckdb.DuckDBPyConnection,
    shared: Shared,
    prep: RowTables,
    pending: Known | None = None,
    texts: dict[bytes, int] | None = None,
) -> tuple[dict[str, pa.Table], InsertResult]:
    """Which traces of ``prep`` are new, and their rows with ``tseq`` and ``cid`` assigned
    (a packet text the open transaction or this process already stored is named, not stored
    again). The caller holds the write lock.

    ``cur`` looks up the stored traces; ``pending`` (trace_id -> (digest, source)) holds the
    ones inserted in the open transaction when ``cur`` cannot see them (a read cursor), and
    ``texts`` (digest -> cid) the texts it stored: both are updated with the new ones."""
    if not prep.ids:
        return {}, InsertResult(0, 0, [], prep.rejected)
    known = _stored(cur, prep.ids)
    if pending is not None:
        known.update({t: pending[t] for t in prep.ids if t in pending})
    base = _next_tseq(cur, shared)
    keep: list[int] = []
    skipped = 0
    conflicts: list[tuple[int, str, str]] = []
    sizes = prep.tables["traces"].column("json_bytes")

    def raw(k: int) -> bytes:
        return unpack_json(batch_blob(prep, k), sizes[k].as_py())

    given: dict[str, int] = {}  # trace id -> where the batch gave it first
    for k, (tid, digest) in enumerate(zip(prep.ids, prep.digests, strict=True)):
        prev = known.get(tid)
        if prev is not None:
            first = given.get(tid)
            if prev[0] == digest or (
                same_trace(raw(first), raw(k))
                if first is not None
                else same_as_stored(cur, tid, raw(k))
            ):
                skipped += 1
            else:
                where = prep.positions[k] if prep.positions else k
                conflicts.append((where, tid, prev[1] or "an earlier insert"))
            continue
        keep.append(k)
        given[tid] = k
        known[tid] = (digest, prep.sources[k])
        if pending is not None:
            pending[tid] = known[tid]
    shared.tseq = base + len(keep)  # a rolled-back insert leaves a gap: harmless
    out: dict[str, pa.Table] = {}
    if keep:
        out = _numbered(prep, keep, base)
        texts = texts if texts is not None else {}
        _assign_texts(cur, shared, prep, out, texts)
        out.update(new_parts(prep, texts, shared.text_cid))
    return out, InsertResult(len(keep), skipped, conflicts, prep.rejected)


def _assign_texts(
    cur: duckdb.DuckDBPyConnection,
    shared: Shared,
    prep: RowTables,
    out: dict[str, pa.Table],
    texts: dict[bytes, int],
) -> None:
    """The new decisions' ``cid``: a text ``texts`` (this transaction) or the process holds
    keeps its cid, any other gets the next one and its pieces join ``out``."""
    decisions = out.get("decisions")
    pieces = prep.tables.get("contents")
    if decisions is None or pieces is None:
        out.pop("contents", None)
        return
    if shared.cid is None:
        row = first(cur.execute("SELECT coalesce(max(cid), 0) FROM contents").fetchall())
        shared.cid = int(row[0]) if row else 0
    local = pc.fill_null(decisions.column("cid"), -1).to_numpy()
    cids = np.full(len(prep.text_digests), -1, dtype=np.int64)
    fresh = np.zeros(len(prep.text_digests), dtype=bool)
    for ix in np.unique(local[local >= 0]).tolist():
        key = prep.text_digests[ix]
        cid = texts.get(key)
        if cid is None:
            cid = shared.text_cid(key)
        if cid is None:
            shared.cid += 1
            cid = texts[key] = shared.cid
            fresh[ix] = True
        cids[ix] = cid
    named = np.where(local >= 0, cids[np.maximum(local, 0)], -1)
    col = decisions.schema.get_field_index("cid")
    out["decisions"] = decisions.set_column(col, "cid", pa.array(named, _I64, mask=named < 0))
    ix = pieces.column("cid").to_numpy()
    pieces = pieces.filter(pa.array(fresh[ix]))
    if pieces.num_rows:
        new = cids[pieces.column("cid").to_numpy()]
        out["contents"] = pieces.set_column(0, "cid", pa.array(new, _I64))


def insert_errors(
    cur: duckdb.DuckDBPyConnection, errors: Sequence[tuple[str, int, str]]
) -> list[IngestErrorRow]:
    """Add errors not already recorded (same file, line and message) in the caller's
    transaction; re-reading a changed .json file does not repeat its errors."""
    if not errors:
        return []
    now = utc_naive(datetime.now(UTC))
    table = pa.table(  # noqa: F841 - read by name by the SQL below
        {
            "file": [e[0] for e in errors],
            "line": [e[1] for e in errors],
            "message": [e[2] for e in errors],
            "at": pa.array([now] * len(errors), _TS),
        }
    )
    # ``table`` is scanned by name from this frame (see ``duck.insert_table``)
    cur.execute(
        'INSERT INTO ingest_errors (file, line, message, "at") '
        'SELECT DISTINCT e.file, e.line, e.message, e."at" FROM "table" e '
        "WHERE NOT EXISTS (SELECT 1 FROM ingest_errors x WHERE x.file = e.file "
        "AND x.line = e.line AND x.message = e.message)"
    )
    return [IngestErrorRow(f, ln, m, now.replace(tzinfo=UTC)) for f, ln, m in errors]


def set_file_offsets(cur: duckdb.DuckDBPyConnection, offs: Sequence[FileOffset]) -> None:
    """Record how far files were read, in the caller's transaction (with their traces); a
    file given twice keeps its last offset."""
    offs = list({o.file: o for o in offs}.values())
    if not offs:
        return
    now = utc_naive(datetime.now(UTC))
    table = pa.table(  # noqa: F841 - read by name by the SQL below
        {
            "file": [o.file for o in offs],
            "offset": pa.array([o.offset for o in offs], _I64),
            "line": pa.array([o.line for o in offs], _I64),
            "size": pa.array([o.size for o in offs], _I64),
            "mtime": pa.array([o.mtime for o in offs], _F64),
            "updated_at": pa.array([now] * len(offs), _TS),
            "fingerprint": pa.array([o.fingerprint for o in offs], _STR),
            "inode": pa.array([o.inode for o in offs], pa.uint64()),
            "head": pa.array([o.head for o in offs], _STR),
            "failed": pa.array([o.failed for o in offs], _STR),
        }
    )
    # ``table`` is scanned by name from this frame (see ``duck.insert_table``)
    cols = '"offset", line, size, mtime, updated_at, fingerprint, inode, head, failed'
    cur.execute(
        f'INSERT OR REPLACE INTO file_offsets (file, {cols}) SELECT file, {cols} FROM "table"'
    )


__all__ = [
    "Known",
    "insert_errors",
    "packed",
    "plan_insert",
    "same_as_stored",
    "set_file_offsets",
    "trace_json",
]
