"""The store's contract: every member of ``Store`` and ``BulkWriter`` (ctxcore/store/protocol.py)
checked on every engine, through the protocol only (docs/design.md, "Store").

``ENGINES`` lists a factory per engine (DuckDB on a file in tmp_path; PostgreSQL on a new
database of a throwaway server the session starts, tests/pg_cluster.py); a new engine adds
itself there and must pass the same tests. ``test_every_protocol_member_has_a_contract_test``
fails when a member of the protocols has no test here (each test names what it covers).
"""

from __future__ import annotations

import inspect
import json
import pickle
import socket
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers_store import T0, make_trace

from ctxcore import diagnostics
from ctxcore.errors import InputError, StoreError
from ctxcore.formats.load import trace_from_obj
from ctxcore.loading import parse_json
from ctxcore.models import Trace
from ctxcore.store.engines import ENGINES as ENGINE_TABLE
from ctxcore.store.engines import open_store, read_store
from ctxcore.store.protocol import BulkWriter, Store
from ctxcore.store.records import FileOffset, PackedTrace, TraceFilter
from ctxcore.store.rows import RowTables, prepare

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "ctxcore" / "data" / "demo"

#: (target, read_only, diagnose) -> a store; one per engine
Factory = Callable[[Path, bool, bool], Store]


def _duckdb(where: Path, read_only: bool, diagnose: bool) -> Store:
    return open_store(where / "contract.duckdb", read_only=read_only, diagnose=diagnose)


#: the database each test's PostgreSQL store lives in (a new one per test), by its tmp_path
_PG_DATABASES: dict[Path, str] = {}


def _postgresql(where: Path, read_only: bool, diagnose: bool) -> Store:
    return open_store(_PG_DATABASES[where], read_only=read_only, diagnose=diagnose)


#: every engine's factory: a new engine adds its own here
ENGINES: dict[str, Factory] = {"duckdb": _duckdb, "postgresql": _postgresql}

COVERED: set[str] = set()


def covers(*names: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Mark a test as checking these protocol members (``Store.x`` / ``BulkWriter.x``)."""
    COVERED.update(names)
    return lambda test: test


def members(proto: type) -> set[str]:
    """The members a protocol declares: its public methods and properties, and the context
    manager's two."""
    own = vars(proto)
    names = {n for n in own if not n.startswith("_")}
    names |= {n for n in ("__enter__", "__exit__") if n in own}
    return names


@pytest.fixture(params=sorted(ENGINES))
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Store]:
    factory = ENGINES[request.param]
    if request.param == "postgresql":  # a new database of the session's throwaway server
        _PG_DATABASES[tmp_path] = request.getfixturevalue("pg_server").new_database()

    def opened(*, read_only: bool = False, diagnose: bool = True) -> Store:
        return factory(tmp_path, read_only, diagnose)

    return opened


@pytest.fixture
def store(engine: Callable[..., Store]) -> Iterator[Store]:
    with engine() as s:
        yield s


def demo(name: str) -> list[Trace]:
    path = DEMO / name
    lines = path.read_text(encoding="utf-8").splitlines()
    return [trace_from_obj(parse_json(ln, str(path)), str(path)) for ln in lines if ln.strip()]


@pytest.fixture(scope="module")
def recorded() -> list[Trace]:
    """A real recorded session (the demo's tool chat, ctxscope preset) and the first turns of
    another (hello-agents): real packets, decisions, partitions and findings."""
    return demo("toolchat-ctxscope.jsonl")[:8] + demo("swe-pytest-7571-hello-agents.jsonl")[:4]


def rows_of(traces: list[Trace], source: str = "in.jsonl") -> RowTables:
    return prepare([(t, t.to_json().encode()) for t in traces], [source] * len(traces), False)


# --------------------------------------------------------------------------- the contract


@covers("Store.close", "Store.__enter__", "Store.__exit__", "Store.read_only", "Store.diagnose")
def test_a_store_opens_closes_and_reopens_read_only(engine: Callable[..., Store]) -> None:
    traces = [make_trace(i) for i in range(3)]
    with engine(diagnose=False) as s:
        assert s.read_only is False and s.diagnose is False
        assert s.add_traces(traces) == 3
    with pytest.raises(StoreError):
        s.count()  # closed by the with block
    s = engine(read_only=True)
    try:
        assert s.read_only is True and s.diagnose is True and s.count() == 3
        with pytest.raises(StoreError, match="read-only"):
            s.add_traces([make_trace(9)])
        with pytest.raises(StoreError, match="read-only"):
            s.bulk_writer().begin()
    finally:
        s.close()
    s.close()  # closing twice is harmless


@covers("Store.add_traces", "Store.count")
def test_add_traces_is_idempotent_and_refuses_other_content(
    store: Store, recorded: list[Trace]
) -> None:
    assert store.count() == 0
    assert store.add_traces(recorded, source="demo") == len(recorded)
    assert store.add_traces(recorded, source="demo") == 0
    assert store.count() == len(recorded)
    other = recorded[0].model_copy(update={"turn": recorded[0].turn + 100})
    with pytest.raises(InputError, match=recorded[0].trace_id):
        store.add_traces([make_trace(50), other], source="again")
    assert store.count() == len(recorded)  # nothing of that call, not even the new one


def _timed_again(t: Trace) -> Trace:
    """``t`` built again: the same trace, its stage timings measured anew."""
    assert t.result is not None
    timings = {stage: ms + 1.5 for stage, ms in t.result.timings.items()} or {"gather": 2.5}
    return t.model_copy(update={"result": t.result.model_copy(update={"timings": timings})})


@covers("Store.add_traces", "BulkWriter.add")
def test_a_trace_given_twice_in_one_batch_is_stored_once_whatever_its_timings(
    store: Store, recorded: list[Trace]
) -> None:
    """A file holding a log's import twice (``import -o a.jsonl`` then ``>> a.jsonl``) gives
    each trace twice in one batch, its stage timings measured anew: the second is skipped
    as it would be were the first stored already; other content is still refused."""
    first, second = recorded[0], recorded[1]
    again = _timed_again(first)
    assert again.to_json() != first.to_json()
    assert store.add_traces([first, second, again], source="twice.jsonl") == 2
    assert store.get_trace(first.trace_id) == first
    with store.bulk_writer() as w:
        res = w.add(rows_of([recorded[2], _timed_again(recorded[2]), recorded[3]]))
        assert (res.added, res.skipped, res.conflicts) == (2, 1, [])
        other = recorded[4].model_copy(update={"turn": recorded[4].turn + 100})
        clash = w.add(rows_of([recorded[4], other]))
        assert (clash.added, clash.skipped) == (1, 0)
        assert [(i, tid) for i, tid, _ in clash.conflicts] == [(1, recorded[4].trace_id)]
    assert store.count() == 5


@covers("Store.list_traces")
def test_list_traces_filters_sorts_and_pages_as_python_would(store: Store) -> None:
    traces = [
        make_trace(
            i,
            session_id=f"s{i % 3}",
            turn=i // 3,
            tags=["ci"] if i % 2 else [],
            verdict=["good", "bad", None][i % 3],
            must_keep_dropped=i % 4 == 0,
            warnings=["over budget"] if i % 5 == 0 else [],
        )
        for i in range(15)
    ]
    store.add_traces(traces)

    def listed(flt: TraceFilter | None = None, **kw: Any) -> list[str]:
        return [r.trace_id for r in store.list_traces(flt, limit=100, **kw).rows]

    newest_first = [t.trace_id for t in sorted(traces, key=lambda t: t.created_at, reverse=True)]
    assert listed() == newest_first
    assert listed(TraceFilter(session_id="s1")) == [t for t in newest_first if int(t[1:]) % 3 == 1]
    assert set(listed(TraceFilter(tags=("ci",)))) == {t.trace_id for t in traces if t.tags}
    assert set(listed(TraceFilter(verdict="unknown"))) == {
        t.trace_id for t in traces if t.outcome is None
    }
    assert set(listed(TraceFilter(lost_must_keep=True))) == {
        traces[i].trace_id for i in range(0, 15, 4)
    }
    assert set(listed(TraceFilter(has_warnings=True))) == {t.trace_id for t in traces[::5]}
    window = TraceFilter(since=T0 + timedelta(minutes=3), until=T0 + timedelta(minutes=6))
    assert set(listed(window)) == {traces[i].trace_id for i in range(3, 7)}
    word = traces[7].input.packets[2].content.split()[-1].upper()
    found = set(listed(TraceFilter(search=word)))
    assert traces[7].trace_id in found
    assert found == {t.trace_id for t in traces if any(
        word.lower() in p.content.lower() or word.lower() in p.id.lower()
        for p in t.input.packets)}  # fmt: skip
    by_used = sorted(traces, key=lambda t: (t.result.report.used, traces.index(t)))  # type: ignore[union-attr]
    assert listed(sort="used", descending=False) == [t.trace_id for t in by_used]
    page = store.list_traces(sort="turn", descending=False, limit=4, offset=8)
    assert page.total == 15 and (page.offset, page.limit) == (8, 4) and len(page.rows) == 4
    row = store.list_traces(TraceFilter(session_id="s2"), limit=1).rows[0]
    t = next(x for x in traces if x.trace_id == row.trace_id)
    assert (row.session_id, row.turn, row.created_at, row.tags) == (
        t.session_id, t.turn, t.created_at, tuple(t.tags))  # fmt: skip
    assert row.used == t.result.report.used and row.n_packets == len(t.input.packets)  # type: ignore[union-attr]
    with pytest.raises(StoreError, match="cannot sort"):
        store.list_traces(sort="nonsense")  # type: ignore[arg-type]


@covers("Store.get_trace", "Store.decisions", "Store.packet_content", "Store.findings")
def test_one_trace_reads_back_whole(store: Store, recorded: list[Trace]) -> None:
    store.add_traces(recorded)
    with_packets = [t for t in recorded if t.input.packets]
    for t in (recorded[0], with_packets[0], with_packets[-1]):
        assert store.get_trace(t.trace_id) == t
        assert t.result is not None
        rows = store.decisions(t.trace_id)
        assert [(r["packet_id"], r["status"], r["tokens_after"]) for r in rows] == [
            (d.packet_id, d.status.value, d.tokens_after) for d in t.result.decisions
        ]
        for pkt in t.input.packets[-2:]:
            assert store.packet_content(t.trace_id, pkt.id) == pkt.content
        want = diagnostics.diagnose(t, options=diagnostics.INGEST_OPTIONS)
        got = store.findings(t.trace_id)
        assert [(f["detector"], f["severity"], list(f["packet_ids"])) for f in got] == [
            (f.detector, f.severity, list(f.packet_ids)) for f in want
        ]
        assert [(f["message"], f["evidence"]) for f in got] == [
            (f.message, json.loads(json.dumps(f.evidence, default=str))) for f in want
        ]
    assert store.get_trace("missing") is None and store.decisions("missing") == []
    assert store.packet_content(recorded[0].trace_id, "no:such") is None
    assert store.findings("missing") == []


@covers(
    "Store.sessions", "Store.session_listing", "Store.session_statuses",
    "Store.session_partitions", "Store.facets",
)  # fmt: skip
def test_sessions_their_timelines_and_the_facets(store: Store, recorded: list[Trace]) -> None:
    store.add_traces(recorded)
    by_session: dict[str, list[Trace]] = {}
    for t in recorded:
        by_session.setdefault(t.session_id, []).append(t)
    sessions = store.sessions()
    assert {s.session_id: s.traces for s in sessions} == {k: len(v) for k, v in by_session.items()}
    last = {k: max(t.created_at for t in v) for k, v in by_session.items()}
    assert [s.session_id for s in sessions] == sorted(last, key=lambda k: last[k], reverse=True)
    for s in sessions:
        ts = by_session[s.session_id]
        assert (s.first_turn, s.last_turn) == (min(t.turn for t in ts), max(t.turn for t in ts))
    listing = store.session_listing()
    assert [sid for sid, _ in listing] == [s.session_id for s in sessions]
    for sid, items in listing:
        in_turns = sorted(by_session[sid], key=lambda t: t.turn)
        assert items == [(t.trace_id, tuple(t.tags)) for t in in_turns]
    sid, ts = next(iter(by_session.items()))
    statuses = store.session_statuses(sid)
    assert len(statuses) == sum(len(t.result.decisions) for t in ts)  # type: ignore[union-attr]
    assert {r["trace_id"] for r in statuses} == {t.trace_id for t in ts}
    parts = store.session_partitions(sid)
    assert [(r["trace_id"], r["partition"], r["used"]) for r in parts] == [
        (t.trace_id, p.name, p.used)
        for t in sorted(ts, key=lambda t: t.turn)
        for p in t.result.partitions  # type: ignore[union-attr]
    ]
    facets = store.facets()
    assert facets["session_id"] == sorted(by_session)
    assert facets["preset"] == sorted({t.config.preset for t in recorded})
    assert facets["tags"] == sorted({g for t in recorded for g in t.tags})
    found = {f.detector for t in recorded for f in diagnostics.diagnose(
        t, options=diagnostics.INGEST_OPTIONS)}  # fmt: skip
    assert facets["finding"] == sorted(found)


CLAUDE_CODE = ROOT / "tests" / "fixtures" / "imports" / "claude-code"
USAGE = (
    "input_tokens", "cache_read_tokens", "cache_write_tokens", "cache_write_5m_tokens",
    "cache_write_1h_tokens", "output_tokens", "reasoning_tokens",
)  # fmt: skip


def _usage_of(t: Trace) -> tuple[object, ...]:
    tokens = t.outcome.tokens if t.outcome is not None else None
    model = t.metadata.get("model")
    return (model, *(None if tokens is None else getattr(tokens, n) for n in USAGE))


@covers("Store.session_usage")
def test_each_calls_model_and_usage_are_listed_without_its_trace(store: Store) -> None:
    from ctxcore.formats.load import load_file

    # a real Claude Code log with recorded usage (its side chain a session of its own), and
    # demo traces that record none
    logged = list(load_file(CLAUDE_CODE / "ccviewer-task-sidechain-session.jsonl"))
    plain = demo("toolchat-ctxscope.jsonl")[:3]
    store.add_traces(logged + plain)
    sessions = sorted({t.session_id for t in logged})
    got = store.session_usage([*sessions, plain[0].session_id, "no-such-session"])
    want = sorted(logged + plain, key=lambda t: (t.session_id, t.turn))
    assert [(r.session_id, r.trace_id, r.turn) for r in got] == [
        (t.session_id, t.trace_id, t.turn) for t in want
    ]
    for r, t in zip(got, want, strict=True):
        assert (r.model, *(getattr(r, n) for n in USAGE)) == _usage_of(t)
    assert any(r.cache_read_tokens for r in got) and any(r.cache_write_tokens for r in got)
    assert {r.input_tokens for r in got if r.session_id == plain[0].session_id} == {None}
    assert store.session_usage([]) == []
    # the traces list carries the same columns
    page = store.list_traces(TraceFilter(session_id=sessions[0]), sort="turn", limit=500)
    by_id = {t.trace_id: t for t in logged}
    for row in page.rows:
        assert (row.model, *(getattr(row, n) for n in USAGE)) == _usage_of(by_id[row.trace_id])


@covers("Store.cost_summaries")
def test_each_calls_cost_summary_is_stored_with_it(store: Store) -> None:
    from ctxcore.costing import decode_summaries, summarize, summary_version
    from ctxcore.formats.load import load_file

    # a real Claude Code log with recorded usage and a side chain, through add_traces; demo
    # traces through the bulk writer (not diagnosed there: the summary is stored all the same)
    logged = list(load_file(CLAUDE_CODE / "ccviewer-task-sidechain-session.jsonl"))
    plain = demo("toolchat-ctxscope.jsonl")[:3]
    store.add_traces(logged)
    with store.bulk_writer() as w:
        w.add(rows_of(plain))
        w.commit()
    ids = [t.trace_id for t in logged + plain]
    got = store.cost_summaries([*ids, "no-such-trace"])
    assert sorted(got) == sorted(ids)
    decoded = decode_summaries([got[i] for i in ids], summary_version())
    assert decoded == [summarize(t) for t in logged + plain]
    assert store.cost_summaries([]) == {}


@covers("Store.list_findings", "Store.stored_findings")
def test_findings_are_listed_and_read_back_by_fingerprint(
    store: Store, recorded: list[Trace]
) -> None:
    store.add_traces(recorded)
    want = {
        t.trace_id: diagnostics.diagnose(t, options=diagnostics.INGEST_OPTIONS) for t in recorded
    }
    n = sum(map(len, want.values()))
    assert n > 0, "the demo session has findings"
    page = store.list_findings(limit=1000)
    assert page.total == n == len(page.rows)
    assert sorted((r.trace_id, r.detector) for r in page.rows) == sorted(
        (tid, f.detector) for tid, fs in want.items() for f in fs
    )
    detector = page.rows[0].detector
    only = store.list_findings(TraceFilter(finding=detector), limit=2)
    assert only.total == sum(f.detector == detector for fs in want.values() for f in fs)
    assert all(r.detector == detector for r in only.rows) and len(only.rows) <= 2
    ids = [t.trace_id for t in recorded]
    stored = store.stored_findings([*ids, "missing"], diagnostics.fingerprint())
    assert set(stored) == set(ids)
    assert {k: [(f.detector, f.message) for f in v] for k, v in stored.items()} == {
        k: [(f.detector, f.message) for f in v] for k, v in want.items()
    }
    assert store.stored_findings(ids, "other code") == {}


@covers("Store.undiagnosed", "Store.diagnose_pending")
def test_deferred_diagnostics_are_filled_in_later(
    engine: Callable[..., Store], recorded: list[Trace]
) -> None:
    with engine(diagnose=False) as s:
        s.add_traces(recorded[:5])
        assert s.undiagnosed() == 5 and s.list_findings().total == 0
        assert s.stored_findings([recorded[0].trace_id], diagnostics.fingerprint()) == {}
        assert s.diagnose_pending(3) == 3 and s.undiagnosed() == 2
        assert s.diagnose_pending() == 2 and s.undiagnosed() == 0 and s.diagnose_pending() == 0
        got = s.stored_findings([t.trace_id for t in recorded[:5]], diagnostics.fingerprint())
    assert {k: [f.detector for f in v] for k, v in got.items()} == {
        t.trace_id: [f.detector for f in diagnostics.diagnose(
            t, options=diagnostics.INGEST_OPTIONS)] for t in recorded[:5]
    }  # fmt: skip
    with engine(read_only=True) as s:
        assert s.diagnose_pending() == 0


@covers("Store.traces_json", "Store.traces_packed")
def test_stored_json_comes_back_in_the_order_asked(store: Store, recorded: list[Trace]) -> None:
    store.add_traces(recorded)
    ids = [recorded[3].trace_id, "missing", recorded[0].trace_id, recorded[-1].trace_id]
    got = store.traces_json(ids)
    assert [tid for tid, _ in got] == [ids[0], ids[2], ids[3]]
    assert [Trace.model_validate_json(js) for _, js in got] == [
        recorded[3], recorded[0], recorded[-1]]  # fmt: skip
    packed = store.traces_packed(ids)
    assert [p.trace_id for p in packed] == [ids[0], ids[2], ids[3]]
    assert all(isinstance(p, PackedTrace) for p in packed)
    # each unpacks itself, also after a trip to another process (pickled)
    assert [pickle.loads(pickle.dumps(p)).json() for p in packed] == [js for _, js in got]
    assert [p.unpack(p.data, p.size) for p in packed] == [js for _, js in got]
    assert all(p.size == len(js) for p, (_, js) in zip(packed, got, strict=True))
    assert store.traces_json([]) == [] and store.traces_packed([]) == []


@covers("Store.live_calls")
def test_live_calls_are_the_traces_tagged_live(store: Store) -> None:
    live = [make_trace(i, tags=["live", "source:proxy"], session_id="live") for i in range(4)]
    otlp = make_trace(9, tags=["live", "otlp"], session_id="otel")
    store.add_traces([*live, otlp, make_trace(20, tags=["ci"])])
    calls = store.live_calls(T0 + timedelta(minutes=2))
    assert [c.trace_id for c in calls.recent] == [otlp.trace_id, live[3].trace_id, live[2].trace_id]
    assert [c.source for c in calls.recent] == ["otlp", "proxy", "proxy"]
    assert calls.total == 5 and calls.last == calls.recent[0]
    later = store.live_calls(T0 + timedelta(days=1))
    assert later.recent == [] and later.total == 5 and later.last is not None
    assert later.last.trace_id == otlp.trace_id
    assert len(store.live_calls(T0, limit=2).recent) == 2


@covers("Store.latest_change", "Store.add_ingest_error", "Store.ingest_errors")
def test_latest_change_grows_with_traces_and_errors(store: Store) -> None:
    start = store.latest_change()
    store.add_traces([make_trace(1)])
    after_trace = store.latest_change()
    assert after_trace > start
    store.add_traces([make_trace(1)])  # already there: nothing changed
    assert store.latest_change() == after_trace
    store.add_ingest_error("a.jsonl", 3, "malformed JSON")
    store.add_ingest_error("a.jsonl", 3, "malformed JSON")  # recorded once
    assert store.latest_change() > after_trace
    store.add_ingest_error("b.jsonl", 1, "not a trace")
    errors = store.ingest_errors()
    assert sorted((e.file, e.line, e.message) for e in errors) == [
        ("a.jsonl", 3, "malformed JSON"), ("b.jsonl", 1, "not a trace")]  # fmt: skip
    assert all(e.at.tzinfo is not None for e in errors)
    assert len(store.ingest_errors(limit=1)) == 1


@covers(
    "Store.bulk_writer", "BulkWriter.begin", "BulkWriter.in_transaction", "BulkWriter.add",
    "BulkWriter.add_errors", "BulkWriter.add_offsets", "BulkWriter.commit",
    "Store.file_offset", "Store.file_offsets", "Store.failing_files",
)  # fmt: skip
def test_the_bulk_writer_commits_traces_errors_and_offsets_together(
    store: Store, recorded: list[Trace]
) -> None:
    w: BulkWriter = store.bulk_writer()
    assert not w.in_transaction and w.commit() == []
    w.begin()
    assert w.in_transaction
    res = w.add(rows_of(recorded[:6]))
    assert (res.added, res.skipped, res.conflicts, res.rejected) == (6, 0, [], [])
    again = w.add(rows_of([recorded[0], recorded[6]]))  # within the open transaction
    assert (again.added, again.skipped) == (1, 1)
    changed = recorded[1].model_copy(update={"turn": 99})
    clash = w.add(rows_of([changed], "other.jsonl"))
    assert clash.added == 0 and [(i, tid) for i, tid, _ in clash.conflicts] == [
        (0, changed.trace_id)
    ]
    w.add_errors([("in.jsonl", 7, "malformed JSON")])
    good = FileOffset("/in.jsonl", 100, 3, 100, 1.5, "fp", 42, "head")
    failed = FileOffset("/bad.jsonl", 0, 0, 10, 2.5, None, 43, None, "not a trace file")
    w.add_offsets([FileOffset("/in.jsonl", 5, 1, 5, 1.0), good, failed])
    errors = w.commit()
    assert not w.in_transaction
    assert [(e.file, e.line, e.message) for e in errors] == [("in.jsonl", 7, "malformed JSON")]
    w.close()
    assert store.count() == 7
    assert store.get_trace(recorded[6].trace_id) == recorded[6]
    assert store.file_offset("/in.jsonl") == good  # the last one given wins
    assert store.file_offset("/nowhere") is None
    assert store.file_offsets() == {"/in.jsonl": good, "/bad.jsonl": failed}
    [failing] = store.failing_files()
    assert (failing.file, failing.reason) == ("/bad.jsonl", "not a trace file")
    assert failing.since.tzinfo is not None
    assert [(e.file, e.line) for e in store.ingest_errors()] == [("in.jsonl", 7)]


@covers("BulkWriter.abort", "BulkWriter.close", "BulkWriter.__enter__", "BulkWriter.__exit__")
def test_the_bulk_writer_aborts_and_commits_as_a_context_manager(
    store: Store, recorded: list[Trace]
) -> None:
    w = store.bulk_writer()
    w.add(rows_of(recorded[:3]))
    w.add_errors([("x.jsonl", 1, "bad")])
    w.add_offsets([FileOffset("/x.jsonl", 1, 1, 1, 0.0)])
    w.abort()
    assert not w.in_transaction
    w.close()
    assert (store.count(), store.ingest_errors(), store.file_offsets()) == (0, [], {})
    with pytest.raises(RuntimeError, match="boom"), store.bulk_writer() as w:
        w.add(rows_of(recorded[:3]))
        raise RuntimeError("boom")
    assert store.count() == 0  # aborted, and the store takes writes again:
    with store.bulk_writer(workers=2) as w2:
        assert w2.add(rows_of(recorded[:3])).added == 3
    assert store.count() == 3
    w3 = store.bulk_writer()
    w3.add(rows_of(recorded[3:5]))
    w3.close()  # close aborts what is not committed
    assert store.count() == 3 and store.add_traces(recorded[:5]) == 2


@covers("Store.reopen_if_invalidated")
def test_a_healthy_store_is_not_reopened(store: Store) -> None:
    store.add_traces([make_trace(1)])
    assert store.reopen_if_invalidated() is False
    assert store.count() == 1 and store.add_traces([make_trace(2)]) == 1
    store.close()
    assert store.reopen_if_invalidated() is False


# --------------------------------------------------------------------------- the suite itself


def test_every_protocol_member_has_a_contract_test() -> None:
    declared = {f"Store.{n}" for n in members(Store)} | {
        f"BulkWriter.{n}" for n in members(BulkWriter)
    }
    assert declared - COVERED == set(), "protocol members without a contract test"
    assert COVERED - declared == set(), "contract tests of members the protocols lack"


@pytest.mark.parametrize("proto", [Store, BulkWriter], ids=["Store", "BulkWriter"])
def test_each_engine_takes_the_protocols_parameters(
    engine: Callable[..., Store], proto: type
) -> None:
    """An engine's method takes the protocol's parameters, by the same names and kinds."""
    with engine() as s:
        obj: Any = s if proto is Store else s.bulk_writer()
        for name in members(proto):
            declared = inspect.getattr_static(proto, name)
            if isinstance(declared, property):
                assert not callable(getattr(obj, name)), name
                continue
            want = inspect.signature(declared)
            got = inspect.signature(getattr(type(obj), name))
            assert [(p.name, p.kind) for p in got.parameters.values()] == [
                (p.name, p.kind) for p in want.parameters.values()
            ], name
        if proto is BulkWriter:
            obj.close()


def test_the_engine_table_opens_a_path_and_names_the_engines_for_anything_else(
    tmp_path: Path,
) -> None:
    assert [e.name for e in ENGINE_TABLE] == sorted(ENGINES)
    with open_store(tmp_path / "a.duckdb") as s:
        s.add_traces([make_trace(1)])
    with read_store(str(tmp_path / "a.duckdb")) as s:
        assert s.read_only and s.count() == 1
    with pytest.raises(StoreError) as err:
        open_store("mysql://ann:s3cret@db.example/traces")
    said = str(err.value)
    assert "no store engine" in said and "mysql://" in said and "duckdb" in said
    assert "postgresql://" in said  # the engines there are, and what each takes
    assert "s3cret" not in said  # a URL's password is never printed
    with pytest.raises(StoreError, match="no store engine"), read_store("mysql://h/d"):
        pass
    # a postgresql:// URL is PostgreSQL's: a server not there is one line, without the password
    with pytest.raises(StoreError) as err:
        open_store(f"postgresql://ann:s3cret@127.0.0.1:{_closed_port()}/traces")
    said = str(err.value)
    assert "not reachable" in said and "ann@127.0.0.1" in said and "s3cret" not in said
    assert "\n" not in said


def _closed_port() -> int:
    """A port nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
