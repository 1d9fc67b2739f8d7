"""The PostgreSQL engine's inserts: which traces of a batch are new, their ``tseq`` and
``cid`` (from the database's sequences: several processes write at once), the rows sent with
``COPY``, and the rows of ingest's state, on the connection of the caller's transaction.

Shared by ``pgstore.PgStore.add_traces`` and its bulk writer. The conflict rule is the
DuckDB engine's (docs/design.md, "Store", idempotency): a trace id stored with the same
content is skipped, with other content it is a conflict, never overwritten. Two writers
racing on one id: the ``traces`` row goes in through ``INSERT … ON CONFLICT DO NOTHING``
from a staging table, so the second waits for the first's transaction, then finds the row
and skips or reports it; its other rows are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc

from ctxcore.store import pgcopy, pgparts
from ctxcore.store.codec import is_shared, join_parts, part_ids, read_parts, unpack_json
from ctxcore.store.pgconn import Texts
from ctxcore.store.records import FileOffset, IngestErrorRow, InsertResult
from ctxcore.store.rows import _I64, RowTables, batch_blob, new_parts, utc_naive
from ctxcore.store.sameness import same_trace

#: trace_id -> (content digest, source file) of traces stored or inserted
Known = dict[str, tuple[str, str | None]]

#: the order the child tables are copied in, after ``traces``
CHILD_TABLES = (
    "trace_parts",
    "shared_parts",
    "part_packs",
    "contents",
    "decisions",
    "partitions",
    "findings",
    "cost_parts",
)


def copy_table(con: psycopg.Connection, name: str, table: pa.Table) -> None:
    """Append Arrow rows to a table with one binary ``COPY`` (``pgcopy``: the server parses
    no text, the rows are built by Arrow's kernels)."""
    pgcopy.copy_binary(con, name, table)


def packed(con: psycopg.Connection, tseqs: Sequence[int]) -> dict[int, bytes]:
    """The packed JSON of the traces stored as these tseqs: whole, or shared and joined
    with its parts (``codec.join_parts``), either read by ``unpack_json``."""
    out: dict[int, bytes] = {}
    for i in range(0, len(tseqs), 1000):
        rows = con.execute(
            "SELECT tseq, string_agg(data, ''::bytea ORDER BY part) FROM trace_parts "
            "WHERE tseq = ANY(%s) GROUP BY tseq",
            [list(tseqs[i : i + 1000])],
        ).fetchall()
        out.update({int(t): bytes(d) for t, d in rows})
    ids = sorted({p for b in out.values() if is_shared(b) for p in part_ids(b)})
    if not ids:
        return out
    parts = _parts(con, ids)
    return {t: join_parts(t, b, parts) for t, b in out.items()}


def _parts(con: psycopg.Connection, ids: list[str]) -> dict[str, bytes]:
    """The JSON of the parts of shared traces with these ids, from their packs (a pack
    two writers stored at once is there twice: one of each piece is taken)."""
    places: list[tuple[str, str, int, int]] = []
    for i in range(0, len(ids), 10_000):
        places += con.execute(
            "SELECT pid, pack, start, size FROM shared_parts WHERE pid = ANY(%s)",
            [ids[i : i + 10_000]],
        ).fetchall()
    rows = con.execute(
        "SELECT pack, min(size), string_agg(data, ''::bytea ORDER BY part) FROM (SELECT "
        "DISTINCT ON (pack, part) pack, part, size, data FROM part_packs WHERE pack = ANY(%s)) "
        "p GROUP BY pack",
        [sorted({p[1] for p in places})],
    ).fetchall()
    return read_parts(places, {p: (bytes(d), int(n)) for p, n, d in rows})


def trace_json(con: psycopg.Connection, trace_id: str) -> bytes | None:
    """The stored JSON of a trace, as UTF-8 bytes."""
    row = con.execute(
        "SELECT tseq, json_bytes FROM traces WHERE trace_id = %s", [trace_id]
    ).fetchone()
    if row is None:
        return None
    return unpack_json(packed(con, [int(row[0])])[int(row[0])], int(row[1]))


def same_as_stored(con: psycopg.Connection, trace_id: str, raw: bytes) -> bool:
    """Is ``raw`` the trace stored as ``trace_id``, written differently or built again
    (``sameness.same_trace``, as the DuckDB engine asks)? False when none is stored."""
    stored = trace_json(con, trace_id)
    return stored is not None and same_trace(stored, raw)


def _stored(con: psycopg.Connection, ids: Sequence[str]) -> Known:
    """The digest and source of each of ``ids`` that is stored (one query per 2,000)."""
    known: Known = {}
    for i in range(0, len(ids), 2000):
        rows = con.execute(
            "SELECT trace_id, content_hash, source_file FROM traces WHERE trace_id = ANY(%s)",
            [list(dict.fromkeys(ids[i : i + 2000]))],
        ).fetchall()
        known.update({r[0]: (r[1], r[2]) for r in rows})
    return known


def _batch_raw(prep: RowTables, k: int) -> bytes:
    """Trace ``k`` of a prepared batch, its JSON unpacked."""
    blob = batch_blob(prep, k)
    return unpack_json(blob, prep.tables["traces"].column("json_bytes")[k].as_py())


def _sort_out(
    con: psycopg.Connection, prep: RowTables, known: Known, ks: Sequence[int]
) -> tuple[list[int], int, list[tuple[int, str, str]]]:
    """Traces ``ks`` of the batch: the new ones, how many are stored with the same content,
    and the conflicts (stored with other content, or twice in the batch with other content).
    ``known`` gets the new ones."""
    keep: list[int] = []
    skipped = 0
    conflicts: list[tuple[int, str, str]] = []
    given: dict[str, int] = {}  # trace id -> where the batch gave it first
    for k in ks:
        tid, digest = prep.ids[k], prep.digests[k]
        prev = known.get(tid)
        first = given.get(tid)
        if prev is None:
            keep.append(k)
            given[tid] = k
            known[tid] = (digest, prep.sources[k])
        elif prev[0] == digest or (
            same_trace(_batch_raw(prep, first), _batch_raw(prep, k))
            if first is not None
            else same_as_stored(con, tid, _batch_raw(prep, k))
        ):
            skipped += 1
        else:
            where = prep.positions[k] if prep.positions else k
            conflicts.append((where, tid, prev[1] or "an earlier insert"))
    return keep, skipped, conflicts


def _reserve(con: psycopg.Connection, sequence: str, n: int) -> np.ndarray:
    """``n`` new values of a sequence, ascending (not contiguous when others take some):
    one array in binary (a row a value cost the writer ~4x the CPU)."""
    row = (
        con.cursor(binary=True)
        .execute(f"SELECT array_agg(nextval('{sequence}')) FROM generate_series(1, %s)", [int(n)])
        .fetchone()
    )
    return np.sort(np.array(row[0] if row is not None and n else [], np.int64))


def _numbered(prep: RowTables, keep: list[int], tseqs: np.ndarray) -> dict[str, pa.Table]:
    """The rows of the kept traces of ``prep``, trace ``keep[i]`` as ``tseqs[i]`` (the
    others left out); ``contents`` is left to ``_assign_texts``."""
    mapping = np.full(len(prep.ids), -1, dtype=np.int64)
    mapping[np.asarray(keep, dtype=np.int64)] = tseqs
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


def _insert_traces(con: psycopg.Connection, table: pa.Table) -> set[str]:
    """Insert the ``traces`` rows, skipping ids another writer stored meanwhile (waiting
    for its transaction when it is still open); the ids that went in. The ids go into
    ``trace_ids`` first (two arrays, in id order), then the rows of those that went in
    with one ``COPY`` (staged in a temporary table and copied over, the server wrote each
    row twice: docs/design.md, "Store")."""
    ids = table.column("trace_id").to_pylist()
    # the ids are unique through trace_ids (traces is partitioned: pgparts)
    rows = con.execute(
        "INSERT INTO trace_ids (trace_id, tseq) SELECT i, s FROM unnest(%s::text[], "
        '%s::bigint[]) AS u (i, s) ORDER BY i COLLATE "C" ON CONFLICT (trace_id) DO NOTHING '
        "RETURNING trace_id",
        [ids, table.column("tseq").to_pylist()],
    ).fetchall()
    went_in = {r[0] for r in rows}
    if len(went_in) < len(ids):
        table = table.filter(pa.array([i in went_in for i in ids], pa.bool_()))
    copy_table(con, "traces", table)
    return went_in


def _may_hold_nul(texts: pa.ChunkedArray | pa.Array) -> bool:
    """Can a value of ``texts`` (a text column) hold a NUL? Not when no byte of its data
    buffers is 0 (a scan at numpy's speed: ``match_substring`` of every value cost more;
    a buffer's bytes outside the column only send it to that)."""
    chunks = texts.chunks if isinstance(texts, pa.ChunkedArray) else [texts]
    for chunk in chunks:
        data = chunk.buffers()[2]
        if data is not None and data.size and not np.frombuffer(data, np.uint8).all():
            return True
    return False


def _nul_rows(table: pa.Table, key: str) -> dict[int, str]:
    """The ``key`` values of ``table``'s rows with a NUL character in a text column (or a
    text of a list column), each with the first such column's name."""
    found: dict[int, str] = {}
    keys = table.column(key).to_numpy(zero_copy_only=False)
    for name in table.schema.names:
        col = table.column(name)
        typ = col.type
        if pa.types.is_list(typ) and pa.types.is_string(typ.value_type):
            flat = pc.list_flatten(col)
            if not _may_hold_nul(flat):
                continue
            hit = pc.fill_null(pc.match_substring(flat, "\x00"), False).to_numpy(
                zero_copy_only=False
            )
            rows = pc.list_parent_indices(col).to_numpy()[hit]
        elif pa.types.is_string(typ) or pa.types.is_large_string(typ):
            if not _may_hold_nul(col):
                continue
            hit = pc.fill_null(pc.match_substring(col, "\x00"), False).to_numpy(
                zero_copy_only=False
            )
            rows = np.flatnonzero(hit)
        else:
            continue
        for k in keys[rows].tolist():
            found.setdefault(int(k), name)
    return found


def refuse_nul(prep: RowTables) -> dict[int, str]:
    """The traces of ``prep`` (by index) that hold a NUL character (U+0000) in a text,
    which PostgreSQL's text type cannot store, and where: they are refused one by one, the
    rest of the batch goes in (docs/design.md, "Store")."""
    found: dict[int, str] = {}
    for name, table in prep.tables.items():
        if name in ("contents", "parts"):  # texts by cid; parts are bytes
            continue
        for k, col in _nul_rows(table, "tseq").items():
            found.setdefault(k, f"{name}.{col}")
    pieces, decisions = prep.tables.get("contents"), prep.tables.get("decisions")
    if pieces is not None and decisions is not None and pieces.num_rows:
        bad = _nul_rows(pieces, "cid")
        if bad:
            cids = pc.fill_null(decisions.column("cid"), -1).to_numpy()
            tseqs = decisions.column("tseq").to_numpy()
            for k in np.unique(tseqs[np.isin(cids, list(bad))]).tolist():
                found.setdefault(int(k), "a packet's content")
    return found


def _nul_reason(where: str) -> str:
    return (
        f"cannot be stored here: a NUL character (U+0000) in {where}, which PostgreSQL "
        "refuses; the other traces are stored: take the NUL out where the trace is written"
    )


def plan_insert(
    con: psycopg.Connection, memory: Texts, prep: RowTables, texts: dict[bytes, int]
) -> tuple[InsertResult, dict[str, pa.Table]]:
    """Settle which traces of ``prep`` are new and insert their ``traces`` rows in the
    caller's transaction (the ids are then theirs: ``_insert_traces``); which were new,
    skipped, conflicting or refused (a NUL character in a text: ``refuse_nul``), and the
    rows of the other tables, for ``copy_children``. ``texts`` (digest -> cid) gets the
    packet texts stored (and ``copy_children`` the parts), for the caller to
    ``Texts.remember`` once its transaction commits."""
    if not prep.ids:
        return InsertResult(0, 0, [], prep.rejected), {}
    nul = refuse_nul(prep)
    rejected = prep.rejected
    if nul:
        at = prep.positions or list(range(len(prep.ids)))
        refused = [(at[k], _nul_reason(where)) for k, where in nul.items()]
        rejected = sorted(rejected + refused)
    known = _stored(con, [t for k, t in enumerate(prep.ids) if k not in nul])
    ks = [k for k in range(len(prep.ids)) if k not in nul]
    keep, skipped, conflicts = _sort_out(con, prep, known, ks)
    if not keep:
        return InsertResult(0, skipped, conflicts, rejected), {}
    tseqs = _reserve(con, "trace_tseq", len(keep))
    tables = _numbered(prep, keep, tseqs)
    pgparts.place(con, tables)
    went_in = _insert_traces(con, tables.pop("traces"))
    lost = [i for i, k in enumerate(keep) if prep.ids[k] not in went_in]
    if lost:  # another writer stored these ids meanwhile: as if they had been stored
        gone = [keep[i] for i in lost]
        _, more, clash = _sort_out(con, prep, _stored(con, [prep.ids[k] for k in gone]), gone)
        skipped, conflicts = skipped + more, sorted(conflicts + clash)
        keep = [k for k in keep if prep.ids[k] in went_in]
        _drop(tables, tseqs[lost])
    _assign_texts(con, memory, prep, tables, texts)
    return InsertResult(len(keep), skipped, conflicts, rejected), tables


def copy_children(
    con: psycopg.Connection,
    memory: Texts,
    prep: RowTables,
    tables: dict[str, pa.Table],
    texts: dict[bytes, int],
) -> None:
    """Copy the rows ``plan_insert`` left for the tables other than ``traces``, and the
    packs of ``prep``'s parts that neither ``texts`` (which gets them) nor ``memory`` holds
    (``rows.new_parts``, packed here), in the caller's transaction, one ``COPY`` a table
    (``CHILD_TABLES``' order). The parts' places go in in the order of their ids: their
    index's inserts then walk its pages in order (a batch's ids are random digests; in
    their pack's order the server's CPU for them was ~1.6x)."""
    tables.update(new_parts(prep, texts, memory.get))
    if "shared_parts" in tables:
        tables["shared_parts"] = tables["shared_parts"].sort_by("pid")
    for name in CHILD_TABLES:
        if name in tables:
            copy_table(con, name, tables[name])


def _drop(tables: dict[str, pa.Table], tseqs: np.ndarray) -> None:
    """Leave out the rows of the traces stored as ``tseqs`` (their ids went in elsewhere)."""
    gone = pa.array(tseqs, _I64)
    for name, table in list(tables.items()):
        table = table.filter(pc.invert(pc.is_in(table.column("tseq"), value_set=gone)))
        if table.num_rows:
            tables[name] = table
        else:
            del tables[name]


def _assign_texts(
    con: psycopg.Connection,
    memory: Texts,
    prep: RowTables,
    out: dict[str, pa.Table],
    texts: dict[bytes, int],
) -> None:
    """The new decisions' ``cid``: a text ``texts`` (this transaction) or the process holds
    keeps its cid, any other gets a new one from the sequence and its pieces join ``out``."""
    decisions = out.get("decisions")
    pieces = prep.tables.get("contents")
    if decisions is None or pieces is None:
        out.pop("contents", None)
        return
    local = pc.fill_null(decisions.column("cid"), -1).to_numpy()
    digests = prep.text_digests
    cids = np.full(len(digests), -1, dtype=np.int64)
    wanted = np.unique(local[local >= 0])
    keys = [digests[ix] for ix in wanted.tolist()]
    # a text this transaction stored, else one the process did (in comprehensions: a loop
    # setting numpy elements one by one cost ~3x)
    known = [texts.get(key) for key in keys]
    known = [memory.get(key) if c is None else c for key, c in zip(keys, known, strict=True)]
    cids[wanted] = np.fromiter((-1 if c is None else c for c in known), np.int64, len(known))
    fresh = np.zeros(len(digests), dtype=bool)
    fresh[wanted[cids[wanted] < 0]] = True
    new = np.flatnonzero(fresh)
    if len(new):
        cids[new] = _reserve(con, "content_cid", len(new))
        texts.update(zip([digests[ix] for ix in new.tolist()], cids[new].tolist(), strict=True))
    named = np.where(local >= 0, cids[np.maximum(local, 0)], -1)
    col = decisions.schema.get_field_index("cid")
    out["decisions"] = decisions.set_column(col, "cid", pa.array(named, _I64, mask=named < 0))
    ix = pieces.column("cid").to_numpy()
    pieces = pieces.filter(pa.array(fresh[ix]))
    if pieces.num_rows:
        out["contents"] = pieces.set_column(
            0, "cid", pa.array(cids[pieces.column("cid").to_numpy()], _I64)
        )


def insert_errors(
    con: psycopg.Connection, errors: Sequence[tuple[str, int, str]]
) -> list[IngestErrorRow]:
    """Add errors not already recorded (same file, line and message) in the caller's
    transaction."""
    if not errors:
        return []
    now = utc_naive(datetime.now(UTC))
    con.cursor().executemany(
        'INSERT INTO ingest_errors (file, line, message, "at") VALUES (%s, %s, %s, %s) '
        "ON CONFLICT (md5(file), line, md5(message)) DO NOTHING",
        [(f, int(ln), m, now) for f, ln, m in errors],
    )
    return [IngestErrorRow(f, ln, m, now.replace(tzinfo=UTC)) for f, ln, m in errors]


_OFFSET_COLS = '"offset", line, size, mtime, updated_at, fingerprint, inode, head, failed'


def set_file_offsets(con: psycopg.Connection, offs: Sequence[FileOffset]) -> None:
    """Record how far files were read, in the caller's transaction (with their traces); a
    file given twice keeps its last offset."""
    latest = list({o.file: o for o in offs}.values())
    if not latest:
        return
    now = utc_naive(datetime.now(UTC))
    update = ", ".join(f"{c} = EXCLUDED.{c}" for c in _OFFSET_COLS.split(", "))
    rows: list[tuple[Any, ...]] = [
        (o.file, o.offset, o.line, o.size, o.mtime, now, o.fingerprint, o.inode, o.head, o.failed)
        for o in latest
    ]
    con.cursor().executemany(
        f"INSERT INTO file_offsets (file, {_OFFSET_COLS}) VALUES "
        "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
        f"ON CONFLICT (file) DO UPDATE SET {update}",
        rows,
    )


__all__ = [
    "CHILD_TABLES",
    "copy_children",
    "copy_table",
    "insert_errors",
    "packed",
    "plan_insert",
    "refuse_nul",
    "same_as_stored",
    "set_file_offsets",
    "trace_json",
]
