"""The team store's partitions by time (docs/design.md, "Store", the PostgreSQL engine):
``traces`` and ``decisions`` range-partitioned by the month of the trace's time, a month's
partitions made by the writer that first needs them, the trace id still stored once
(``trace_ids``), and a store of migration 2 moved into the partitioned tables whole.

On the session's throwaway server (tests/pg_cluster.py); no mock.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from helpers_store import make_trace

from ctxcore.errors import InputError
from ctxcore.models import Trace
from ctxcore.store import pginserts, pgschema, rows
from ctxcore.store.engines import open_store
from ctxcore.store.rows import prepare

MONTHS = [(2025, 11), (2025, 12), (2026, 1)]


def _in_month(i: int, year: int, month: int, **kw: Any) -> Trace:
    trace = make_trace(i, **kw)
    at = datetime(year, month, 1 + i % 27, 10, i % 60, tzinfo=UTC)
    return trace.model_copy(update={"created_at": at})


def _where(url: str, table: str) -> dict[str, int]:
    """Rows of ``table`` per partition it is stored in."""
    with psycopg.connect(url) as con:
        rows = con.execute(
            f"SELECT tableoid::regclass::text, count(*) FROM {table} GROUP BY 1"
        ).fetchall()
    return {r[0]: r[1] for r in rows}


def test_each_month_goes_to_a_partition_the_writer_makes(pg_server: Any) -> None:
    url = pg_server.new_database()
    traces = [_in_month(i, *MONTHS[i % 3], session_id="s") for i in range(30)]
    with open_store(url) as store:
        assert store.add_traces(traces) == 30
        assert store.add_traces(traces[:5]) == 0  # the same again: skipped
        with pytest.raises(InputError, match="already stored"):
            store.add_traces([traces[0].model_copy(update={"turn": 99})])
        back = store.get_trace(traces[4].trace_id)
    assert back is not None and back.created_at == traces[4].created_at
    assert _where(url, "traces") == {
        "traces_2025_11": 10,
        "traces_2025_12": 10,
        "traces_2026_01": 10,
    }
    assert _where(url, "decisions") == {
        "decisions_2025_11": 50,
        "decisions_2025_12": 50,
        "decisions_2026_01": 50,
    }
    with psycopg.connect(url) as con:
        parted = con.execute(
            "SELECT c.relname FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid "
            "ORDER BY 1"
        ).fetchall()
        off = con.execute(
            "SELECT count(*) FROM decisions d JOIN traces t USING (tseq) "
            "WHERE d.created_at <> t.created_at"
        ).fetchone()
        ids = con.execute("SELECT count(*), count(DISTINCT trace_id) FROM trace_ids").fetchone()
    assert [r[0] for r in parted] == ["decisions", "traces"]
    assert off == (0,)
    assert ids == (30, 30)


def test_a_month_is_made_while_another_writer_holds_its_transaction(pg_server: Any) -> None:
    """A writer's transaction stays open on the tables while a second writer (and then the
    first itself) makes a new month's partitions: neither waits for the other."""
    url = pg_server.new_database()
    with open_store(url) as first, open_store(url) as second:
        writer = first.bulk_writer()
        try:
            batch = [_in_month(i, 2024, 5) for i in range(3)]
            writer.add(prepare([(t, t.to_json().encode()) for t in batch], [None] * 3))
            done = threading.Event()

            def other() -> None:
                second.add_traces([_in_month(100 + i, 2024, 6) for i in range(3)])
                done.set()

            thread = threading.Thread(target=other, daemon=True)
            thread.start()
            assert done.wait(30), "a second writer waited for the first's open transaction"
            more = [_in_month(200 + i, 2024, 7) for i in range(2)]
            writer.add(prepare([(t, t.to_json().encode()) for t in more], [None] * 2))
            writer.commit()
        finally:
            writer.close()
    assert _where(url, "traces") == {"traces_2024_05": 3, "traces_2024_06": 3, "traces_2024_07": 2}


def test_writers_racing_on_one_new_month_store_each_id_once(pg_server: Any) -> None:
    url = pg_server.new_database()
    open_store(url).close()
    shared = [_in_month(i, 2023, 2, session_id="shared") for i in range(20)]
    errors: list[BaseException] = []

    def write(w: int) -> None:
        try:
            own = [_in_month(1000 * (w + 1) + i, 2023, 2) for i in range(10)]
            with open_store(url) as store, store.bulk_writer() as writer:
                items = [(t, t.to_json().encode()) for t in own + shared]
                writer.add(prepare(items, [None] * len(items)))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert _where(url, "traces") == {"traces_2023_02": 60}
    with psycopg.connect(url) as con:
        row = con.execute("SELECT count(*), count(DISTINCT trace_id) FROM traces").fetchone()
    assert row == (60, 60)


#: the tables of migration 2's store that a batch's rows go into
V2_TABLES = ("traces", "trace_parts", "contents", "decisions", "partitions", "findings")


def test_a_store_of_migration_2_moves_into_partitions_whole(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = pg_server.new_database()
    traces = [_in_month(i, *MONTHS[i % 3], session_id=f"s{i % 4}") for i in range(12)]
    with monkeypatch.context() as m:  # each trace's JSON whole, as migration 2 kept it
        m.setattr(rows._SPLITTER, "split", lambda raw, session: None)
        prep = prepare([(t, t.to_json().encode()) for t in traces], [f"f{i}" for i in range(12)])
    with psycopg.connect(url, autocommit=True) as con:
        pgschema.apply(con, upto=2)
        with con.transaction():  # the rows as migration 2's tables held them
            for name, table in prep.tables.items():
                if name in V2_TABLES:  # a table a later migration adds is not there yet
                    pginserts.copy_table(con, name, table)
            con.execute("SELECT setval('trace_tseq', 100)")
            con.execute("SELECT setval('content_cid', 1000)")
        assert pgschema.apply(con)[0] == 3
    with open_store(url) as store:
        for t in traces:
            back = store.get_trace(t.trace_id)
            assert back is not None and back.to_json() == t.to_json()
            assert [d["packet_id"] for d in store.decisions(t.trace_id)] == [
                d.packet_id for d in (t.result.decisions if t.result else [])
            ]
        assert store.add_traces(traces) == 0  # still stored once
        assert store.add_traces([_in_month(50, 2026, 2)]) == 1
    assert _where(url, "traces") == {
        "traces_2025_11": 4,
        "traces_2025_12": 4,
        "traces_2026_01": 4,
        "traces_2026_02": 1,
    }
    assert sum(_where(url, "decisions").values()) == 13 * 5
