"""The team store's bulk writes (docs/design.md, "Store", the PostgreSQL engine): Arrow rows
sent by binary ``COPY`` (``store/pgcopy.py``) come back as they were, every column type and
NULL, an ingested batch's rows as ``rows.prepare`` made them; the bulk writer copies a
batch's rows on its own thread while the caller goes on, and a failure there is the
transaction's.

On the session's throwaway server (tests/pg_cluster.py); no mock.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from helpers_store import make_trace

from ctxcore.errors import StoreError
from ctxcore.store import pgcopy, pginserts
from ctxcore.store.engines import open_store
from ctxcore.store.pgconn import Texts
from ctxcore.store.rows import prepare

_ODD_TEXTS = ['a "quoted", {braced}', "back\\slash", "", "line\nbreak\ttab", "é 中 🙂", "NULL"]


def _every_type() -> pa.Table:
    """One column per type the store's tables hold, with NULLs, edges and texts that a text
    format has to quote."""
    return pa.table(
        {
            "big": pa.array([1, None, -(2**63), 2**63 - 1], pa.int64()),
            "num": pa.array([3, -(2**31), None, 2**31 - 1], pa.int32()),
            "real": pa.array([1.5, None, float("inf"), -0.0], pa.float64()),
            "flag": pa.array([True, None, False, True]),
            "at": pa.array(
                [
                    datetime(2026, 1, 2, 3, 4, 5, 6),
                    None,
                    datetime(1970, 1, 1),
                    datetime(1999, 12, 31, 23, 59, 59, 999_999),
                ],
                pa.timestamp("us"),
            ),  # fmt: skip
            "txt": pa.array([_ODD_TEXTS[0], None, _ODD_TEXTS[4], ""], pa.string()),
            "raw": pa.array([b"\x00\xff\\x00", None, b"", bytes(range(256))], pa.large_binary()),
            "tags": pa.array([_ODD_TEXTS, [], None, ["one", None, "two"]], pa.list_(pa.string())),
        }
    )


def test_every_column_type_comes_back_as_copied(pg_server: Any) -> None:
    url = pg_server.new_database()
    table = _every_type()
    with psycopg.connect(url, autocommit=True) as con:
        con.execute(
            'CREATE TABLE t (big BIGINT, num INTEGER, "real" DOUBLE PRECISION, flag BOOLEAN, '
            'at TIMESTAMP, txt TEXT COLLATE "C", raw BYTEA, tags TEXT[] COLLATE "C")'
        )
        pgcopy.copy_binary(con, "t", table)
        pgcopy.copy_binary(con, "t", table.slice(1, 2))  # a slice: its own offsets
        pgcopy.copy_binary(con, "t", pa.concat_tables([table.slice(3), table]))  # chunks
        got = con.execute("SELECT * FROM t").fetchall()
    rows = table.to_pylist()
    want = [tuple(r.values()) for r in rows + rows[1:3] + rows[3:] + rows]
    assert [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in got] == want


def test_a_value_the_column_cannot_hold_is_refused(pg_server: Any) -> None:
    url = pg_server.new_database()
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("CREATE TABLE t (n INTEGER, s TEXT)")
        con.execute("CREATE TABLE u (n NUMERIC)")
        pgcopy.copy_binary(con, "t", pa.table({"n": pa.array([7], pa.int64())}))
        assert con.execute("SELECT n FROM t").fetchall() == [(7,)]
        with pytest.raises(pa.ArrowInvalid):
            pgcopy.copy_binary(con, "t", pa.table({"n": pa.array([2**40], pa.int64())}))
        with pytest.raises(ValueError, match="column 'n'.*'numeric'"):
            pgcopy.copy_binary(con, "u", pa.table({"n": pa.array([1])}))
        assert con.execute("SELECT count(*) FROM t").fetchone() == (1,)


def _stored(con: psycopg.Connection, table: str, cols: list[str]) -> list[tuple[Any, ...]]:
    order = ", ".join(c for c in ("tseq", "cid", "ord", "part", "pid", "pack") if c in cols)
    got = con.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY {order}").fetchall()
    return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in got]


def test_an_ingested_batch_is_stored_as_its_arrow_rows(pg_server: Any) -> None:
    """Every table of a prepared batch of shared traces, row for row and column for column
    (the numbering is the store's: compared after ``plan_insert`` numbered them)."""
    url = pg_server.new_database()
    traces = [make_trace(i, n_packets=4, session_id=f"s{i % 3}", tags=["a,b", 'q"'])
              for i in range(12)]  # fmt: skip
    prep = prepare([(t, t.to_json().encode()) for t in traces], ["f.jsonl"] * 12, True)
    open_store(url).close()
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("BEGIN")
        memory, texts = Texts(), dict[bytes, int]()
        result, tables = pginserts.plan_insert(con, memory, prep, texts)
        pginserts.copy_children(con, memory, prep, tables, texts)
        con.execute("COMMIT")
        assert result.added == 12
        assert set(tables) >= {"decisions", "contents", "trace_parts", "shared_parts"}
        for name, table in tables.items():
            want = sorted(tuple(r.values()) for r in table.to_pylist())
            assert sorted(_stored(con, name, table.schema.names)) == want, name


def _blocking_contents(url: str) -> psycopg.Connection:
    """A session that holds ``contents`` locked (a COPY into it waits) until it commits."""
    con = psycopg.connect(url, autocommit=True)
    con.execute("BEGIN")
    con.execute("LOCK TABLE contents IN SHARE MODE")
    return con


def test_add_returns_while_its_rows_are_copied_and_commit_waits_for_them(
    pg_server: Any,
) -> None:
    url = pg_server.new_database()
    traces = [make_trace(i, session_id="s") for i in range(20)]
    prep = prepare([(t, t.to_json().encode()) for t in traces], [None] * 20, True)
    with open_store(url) as store:
        locker = _blocking_contents(url)
        writer = store.bulk_writer()
        try:
            start = time.monotonic()
            threading.Timer(4.0, locker.execute, ["COMMIT"]).start()
            assert writer.add(prep).added == 20  # while a COPY waits on the lock
            assert time.monotonic() - start < 3.0
            writer.commit()
            assert time.monotonic() - start >= 4.0  # the commit waited for the copy
        finally:
            writer.close()
            locker.close()
        assert store.count() == 20
        assert [p.trace_id for p in store.traces_packed([traces[3].trace_id])] == [
            traces[3].trace_id
        ]
        assert len(store.decisions(traces[3].trace_id)) == 5


def test_a_copy_that_fails_on_the_writers_thread_fails_the_transaction(
    pg_server: Any,
) -> None:
    url = pg_server.new_database()
    traces = [make_trace(i, session_id="s") for i in range(6)]
    with open_store(url) as store:
        with psycopg.connect(url, autocommit=True) as con:  # a row it refuses
            con.execute("ALTER TABLE partitions ADD CONSTRAINT no_task CHECK (name <> '[Task]')")
        prep = prepare([(t, t.to_json().encode()) for t in traces], [None] * 6, True)
        writer = store.bulk_writer()
        try:
            assert writer.add(prep).added == 6
            with pytest.raises(StoreError, match="no_task"):
                writer.commit()
            assert not writer.in_transaction and store.count() == 0
            with psycopg.connect(url, autocommit=True) as con:
                con.execute("ALTER TABLE partitions DROP CONSTRAINT no_task")
            again = prepare([(t, t.to_json().encode()) for t in traces], [None] * 6, True)
            assert writer.add(again).added == 6  # the writer goes on with a new one
            writer.commit()
        finally:
            writer.close()
        assert store.count() == 6 and len(store.decisions(traces[0].trace_id)) == 5


def test_a_sequences_values_are_reserved_new_distinct_and_ascending(pg_server: Any) -> None:
    """``_reserve`` takes one array of values: as many as asked, each new, ascending, also
    while another session takes some of the same sequence; none when none is asked."""
    url = pg_server.new_database()
    with psycopg.connect(url, autocommit=True) as con, psycopg.connect(url) as other:
        con.execute("CREATE SEQUENCE s")
        first = pginserts._reserve(con, "s", 5)
        assert first.dtype == "int64" and first.tolist() == [1, 2, 3, 4, 5]
        taken = other.execute("SELECT nextval('s')").fetchone()
        more = pginserts._reserve(con, "s", 3000)
        assert taken == (6,) and len(set(more.tolist())) == 3000
        assert more.tolist() == sorted(more.tolist()) and more.min() == 7
        assert pginserts._reserve(con, "s", 0).tolist() == []
        assert con.execute("SELECT nextval('s')").fetchone() == (3007,)


def test_a_batchs_part_places_go_in_in_the_order_of_their_ids(pg_server: Any) -> None:
    """``copy_children`` copies ``shared_parts`` sorted by ``pid`` (their index then takes
    them page after page), the rows themselves as ``new_parts`` made them."""
    url = pg_server.new_database()
    traces = [make_trace(i, n_packets=6, session_id=f"s{i % 4}") for i in range(16)]
    prep = prepare([(t, t.to_json().encode()) for t in traces], ["f.jsonl"] * 16, False)
    open_store(url).close()
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("BEGIN")
        memory, texts = Texts(), dict[bytes, int]()
        _, tables = pginserts.plan_insert(con, memory, prep, texts)
        pginserts.copy_children(con, memory, prep, tables, texts)
        con.execute("COMMIT")
        made = tables["shared_parts"].column("pid").to_pylist()
        assert len(made) > 50 and made == sorted(made)
        got = [r[0] for r in con.execute("SELECT pid FROM shared_parts ORDER BY ctid")]
        assert got == made
        cols = tables["shared_parts"].schema.names
        want = sorted(tuple(r.values()) for r in tables["shared_parts"].to_pylist())
        assert sorted(_stored(con, "shared_parts", cols)) == want


@pytest.mark.parametrize(
    ("values", "typ", "nul"),
    [
        (["a", "b c", None, ""], pa.string(), False),
        (["a", "b\x00c", None], pa.string(), True),
        (["x" * 10, "\x00"], pa.large_string(), True),
        ([["a", "b"], None, ["c\x00"]], pa.list_(pa.string()), True),
        ([["a", "b"], [], None], pa.list_(pa.string()), False),
    ],
)
def test_a_column_without_a_zero_byte_is_not_searched_for_nul(
    values: list[Any], typ: pa.DataType, nul: bool
) -> None:
    """``refuse_nul``'s first look: no 0 byte in a column's data, no NUL in any of its
    texts; a NUL anywhere, in a slice of it too, is seen."""
    col = pa.chunked_array([pa.array(values, typ)])
    texts = pc.list_flatten(col) if pa.types.is_list(typ) else col
    assert pginserts._may_hold_nul(texts) is nul
    assert pginserts._may_hold_nul(pa.chunked_array([texts.combine_chunks().slice(1)])) is nul


def test_an_id_another_writer_holds_is_waited_for_and_its_rows_left_out(
    pg_server: Any,
) -> None:
    """Two transactions insert one trace id: the second waits in ``plan_insert`` for the
    first, then skips that trace (same content) and copies only its other trace's rows;
    every stored ``traces`` row is its id's row of ``trace_ids``."""
    url = pg_server.new_database()
    open_store(url).close()
    t1, t2, t3 = (make_trace(i, n_packets=3, session_id="s") for i in range(3))
    first = prepare([(t, t.to_json().encode()) for t in (t1, t3)], ["a.jsonl"] * 2, False)
    second = prepare([(t, t.to_json().encode()) for t in (t2, t1)], ["b.jsonl"] * 2, False)
    got: list[Any] = []
    with psycopg.connect(url, autocommit=True) as a, psycopg.connect(url, autocommit=True) as b:
        a.execute("BEGIN")
        memory, texts = Texts(), dict[bytes, int]()
        pginserts.copy_children(a, memory, first, pginserts.plan_insert(a, memory, first, texts)[1],
                                texts)  # fmt: skip

        def other() -> None:
            b.execute("BEGIN")
            mem, txt = Texts(), dict[bytes, int]()
            result, tables = pginserts.plan_insert(b, mem, second, txt)
            pginserts.copy_children(b, mem, second, tables, txt)
            b.execute("COMMIT")
            got.append(result)

        thread = threading.Thread(target=other)
        thread.start()
        waiting = (0,)
        for _ in range(500):  # until the second transaction waits on the first's lock
            waiting = a.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            ).fetchone() or (0,)
            if waiting[0]:
                break
            time.sleep(0.01)
        a.execute("COMMIT")
        thread.join(timeout=60)
        assert waiting[0] == 1 and len(got) == 1
        assert (got[0].added, got[0].skipped, got[0].conflicts) == (1, 1, [])
        rows = a.execute(
            "SELECT t.trace_id, t.tseq = i.tseq, t.source_file, (SELECT count(*) FROM decisions "
            "d WHERE d.tseq = t.tseq) FROM traces t JOIN trace_ids i USING (trace_id) "
            "ORDER BY t.trace_id"
        ).fetchall()
        assert rows == [(t1.trace_id, True, "a.jsonl", 3), (t2.trace_id, True, "b.jsonl", 3),
                        (t3.trace_id, True, "a.jsonl", 3)]  # fmt: skip
        assert a.execute("SELECT count(*) FROM trace_ids").fetchone() == (3,)
