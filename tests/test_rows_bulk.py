"""The rows of a batch as ``rows.prepare`` builds them and the parts ``rows.new_parts`` packs
(docs/design.md, "Store"): a batch mixing shared, whole, unbuilt and decision-less traces;
packet texts named once per batch and once per store across batches, on both engines;
parts packed from the batch's Arrow buffer, split into packs exactly where a pack of the
parts' bytes joined would pass PACK_BYTES."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pyarrow as pa
import pytest
from helpers_store import make_trace
from test_store_contract import _PG_DATABASES, engine  # noqa: F401 - the engines' fixture

from ctxcore.models import Status, Trace
from ctxcore.store import codec, rows
from ctxcore.store.protocol import Store
from ctxcore.store.splitting import part_id


def _raw(trace: Trace, *, spaced: bool = False) -> bytes:
    """A trace's JSON as ctxscope writes it (shareable), or with spaces (stored whole)."""
    if spaced:
        return json.dumps(json.loads(trace.to_json_bytes()), ensure_ascii=False).encode()
    return trace.to_json_bytes()


def _mixed() -> list[tuple[Trace, bytes]]:
    """A shareable trace, one stored whole, one without a result (captured input only), one
    with a result and no decisions, and one repeating the first one's packet texts."""
    shared = make_trace(1, 6, session_id="mix-a")
    whole = make_trace(2, 4, session_id="mix-b")
    unbuilt = make_trace(3, 3, session_id="mix-c", with_result=False)
    empty = make_trace(4, 3, session_id="mix-d")
    assert empty.result is not None
    empty = empty.model_copy(update={"result": empty.result.model_copy(update={"decisions": []})})
    again = make_trace(1, 6, session_id="mix-e", trace_id="again-1")
    return [
        (shared, _raw(shared)),
        (whole, _raw(whole, spaced=True)),
        (unbuilt, _raw(unbuilt)),
        (empty, _raw(empty)),
        (again, _raw(again)),
    ]


def test_a_batch_mixing_shared_whole_unbuilt_and_decisionless_traces() -> None:
    items = _mixed()
    prep = rows.prepare(items, ["mix.jsonl"] * len(items), diagnose=False)
    assert prep.rejected == []
    assert prep.ids == [t.trace_id for t, _ in items]
    texts = prep.tables["contents"].to_pydict()
    assert texts["part"] == [0] * len(texts["cid"])  # short texts: one piece each
    text_of = dict(zip(texts["cid"], texts["text"], strict=True))
    assert len(set(texts["text"])) == len(texts["text"])  # each text once in the batch
    decisions = prep.tables["decisions"].to_pylist()
    for k, (trace, raw) in enumerate(items):
        mine = [d for d in decisions if d["tseq"] == k]
        assert [d["ord"] for d in mine] == list(range(len(mine)))
        packets = {p.id: p for p in trace.input.packets}
        if trace.result is None:  # a row per packet, no status: its packets searchable
            assert [d["packet_id"] for d in mine] == list(packets)
            assert {d["status"] for d in mine} == {None}
        else:
            want = trace.result.decisions
            assert [d["packet_id"] for d in mine] == [x.packet_id for x in want]
            assert [d["status"] for d in mine] == [str(x.status) for x in want]
            assert [d["budget_left"] for d in mine] == [x.budget_left for x in want]
        for d in mine:
            assert text_of[d["cid"]] == packets[d["packet_id"]].content
        # the stored JSON, shared or whole, reads back as given
        blob = rows.batch_blob(prep, k)  # a shared one joined with the batch's parts
        assert (blob[:1] == codec.JOINED) == (k != 1)
        assert codec.unpack_json(blob, len(raw)) == raw
    # the fifth trace repeats the first one's texts: it names the same cids
    first = [d["cid"] for d in decisions if d["tseq"] == 0]
    assert [d["cid"] for d in decisions if d["tseq"] == 4] == first
    assert not [d for d in decisions if d["tseq"] == 3]  # no decisions, no rows
    traces = prep.tables["traces"].to_pylist()
    for row, (trace, _) in zip(traces, items, strict=True):
        built = trace.result.decisions if trace.result is not None else []
        assert row["n_packets"] == (len(built) if trace.result else len(trace.input.packets))
        assert row["n_kept"] == sum(x.status == Status.KEPT for x in built)
        assert row["n_dropped"] == sum(x.status == Status.DROPPED for x in built)


def _reference(parts: list[tuple[str, bytes]]) -> dict[str, pa.Table]:
    """``new_parts``' rows made the plain way: greedy packs of the parts' bytes joined."""
    groups: list[list[tuple[str, bytes]]] = []
    size = rows.PACK_BYTES
    for pid, data in parts:
        if size + len(data) > rows.PACK_BYTES:
            groups.append([])
            size = 0
        groups[-1].append((pid, data))
        size += len(data)
    places: dict[str, list[object]] = {"pid": [], "pack": [], "start": [], "size": []}
    packs: dict[str, list[object]] = {"pack": [], "part": [], "size": [], "data": []}
    for group in groups:
        blob, starts = codec.pack_parts([d for _, d in group])
        name = rows.content_hash(blob)
        places["pid"] += [p for p, _ in group]
        places["pack"] += [name] * len(group)
        places["start"] += starts
        places["size"] += [len(d) for _, d in group]
        pieces = [blob[i : i + rows.PART_BYTES] for i in range(0, len(blob), rows.PART_BYTES)]
        packs["pack"] += [name] * len(pieces)
        packs["part"] += list(range(len(pieces)))
        packs["size"] += [sum(len(d) for _, d in group)] * len(pieces)
        packs["data"] += pieces
    return {
        "shared_parts": pa.table(places, schema=rows.PART_TABLES["shared_parts"]),
        "part_packs": pa.table(packs, schema=rows.PART_TABLES["part_packs"]),
    }


def test_new_parts_packs_what_the_store_lacks_in_packs_of_pack_bytes() -> None:
    # 70 traces of 12 packets of ~1.5 kB each: over 1 MiB of parts, several packs
    traces = []
    for i in range(70):
        t = make_trace(i, 12, session_id=f"s{i}")
        packets = [
            p.model_copy(update={"content": f"{i}-{p.id} " + "lorem ipsum " * (100 + i % 30)})
            for p in t.input.packets
        ]
        traces.append(
            t.model_copy(update={"input": t.input.model_copy(update={"packets": packets})})
        )
    items = [(t, t.to_json_bytes()) for t in traces]
    prep = rows.prepare(items, [None] * len(items), diagnose=False)
    table = prep.tables["parts"]
    pids = table.column("pid").to_pylist()
    datas = table.column("data").to_pylist()
    assert all(part_id(d) == p for p, d in zip(pids, datas, strict=True))
    # three parts the process stored, two the open transaction did: left out
    memory = {p.encode(): 7 for p in pids[3:6]}
    texts: dict[bytes, int] = {pids[10].encode(): 0, pids[-1].encode(): 0}
    got = rows.new_parts(prep, texts, memory.get)
    kept = [(p, d) for p, d in zip(pids, datas, strict=True) if p.encode() not in memory]
    kept = [(p, d) for p, d in kept if p not in (pids[10], pids[-1])]
    assert len(kept) == len(pids) - 5
    want = _reference(kept)
    assert sorted(got) == sorted(want)
    for name, table in want.items():
        assert got[name].equals(table), name
    assert len(set(got["shared_parts"].column("pack").to_pylist())) > 1  # several packs
    # every new part joins the transaction's texts; each reads back from its pack
    assert set(texts) == {p.encode() for p in pids} - set(memory)
    stored = got["part_packs"].to_pydict()
    packs: dict[str, tuple[bytes, int]] = {}
    for name, data, size in zip(stored["pack"], stored["data"], stored["size"], strict=True):
        blob, _ = packs.get(name, (b"", 0))
        packs[name] = (blob + data, size)
    places = got["shared_parts"].to_pydict()
    read = codec.read_parts(
        zip(places["pid"], places["pack"], places["start"], places["size"], strict=True), packs
    )
    assert read == dict(kept)
    # the migration's entry point packs a list the same way
    again = rows.packed_parts(kept)
    assert all(again[name].equals(table) for name, table in want.items())
    # nothing new: nothing to store
    assert rows.new_parts(prep, texts, memory.get) == {}


def test_a_pack_holds_up_to_pack_bytes_exactly() -> None:
    half = rows.PACK_BYTES // 2
    parts = [("a", b"a" * half), ("b", b"b" * half), ("c", b"c"), ("d", b"d" * rows.PACK_BYTES)]
    got = rows.packed_parts(parts)
    places = got["shared_parts"].to_pydict()
    # a and b fill one pack to PACK_BYTES; c starts the next, d (alone over it) its own
    assert places["start"] == [0, half, 0, 0]
    assert len(set(places["pack"][:2])) == 1 and len(set(places["pack"])) == 3
    want = _reference(parts)
    assert all(got[name].equals(table) for name, table in want.items())


def _contents(kind: str, where: Path) -> list[tuple[object, ...]]:
    """(trace_id, ord, the decision's text) of every stored decision, read with the engine's
    own client."""
    sql = (
        "SELECT d.trace_id, d.ord, c.text FROM decisions d JOIN contents c ON c.cid = d.cid "
        "AND c.part = 0 ORDER BY d.trace_id, d.ord"
    )
    if kind == "duckdb":
        with duckdb.connect(str(where / "contract.duckdb"), read_only=True) as con:
            return con.execute(sql).fetchall()
    with psycopg.connect(_PG_DATABASES[where]) as pg:
        return pg.execute(sql).fetchall()


def _n_texts(kind: str, where: Path) -> int:
    sql = "SELECT count(*) FROM contents WHERE part = 0"
    if kind == "duckdb":
        with duckdb.connect(str(where / "contract.duckdb"), read_only=True) as con:
            return int(con.execute(sql).fetchall()[0][0])
    with psycopg.connect(_PG_DATABASES[where]) as pg:
        return int(pg.execute(sql).fetchall()[0][0])


def test_texts_seen_by_two_batches_are_stored_once(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    engine: Callable[..., Store],  # noqa: F811 - the fixture imported above
) -> None:
    kind = request.node.callspec.params["engine"]
    first = [make_trace(i, 5, session_id="two-a") for i in range(3)]
    # the same packets again (other trace ids), with two new ones, in a later batch
    second = [make_trace(i, 7, session_id="two-b", trace_id=f"later-{i}") for i in range(3)]
    with engine(diagnose=False) as store:
        with store.bulk_writer() as writer:
            writer.add(rows.prepare([(t, t.to_json_bytes()) for t in first], ["a"] * 3, False))
            writer.add(rows.prepare([(t, t.to_json_bytes()) for t in second], ["b"] * 3, False))
    got = _contents(kind, tmp_path)
    want = sorted(
        (t.trace_id, k, t.input.packets[k].content)
        for t in first + second
        for k in range(len(t.input.packets))
    )
    assert sorted(got) == want
    distinct = {p.content for t in first + second for p in t.input.packets}
    assert (
        _n_texts(kind, tmp_path)
        == len(distinct)
        < sum(len(t.input.packets) for t in first + second)
    )


def test_a_team_writer_that_defers_diagnostics_never_imports_the_detectors(
    tmp_path: Path, pg_server: Any
) -> None:
    """A team writer that defers diagnostics (and ingest's workers and fork server) builds
    and ingests its rows without loading ``ctxcore.diagnostics`` (~0.2 s of each such
    process's start); diagnosing a trace loads it there."""
    traces = [make_trace(i, n_packets=3, session_id="s") for i in range(4)]
    src = tmp_path / "t.jsonl"
    src.write_text("".join(t.to_json() + "\n" for t in traces), encoding="utf-8")
    script = (
        "import sys\n"
        "from ctxcore.store import rows, workers\n"
        "from ctxcore.store.engines import open_store\n"
        "from ctxcore.store.ingest import ingest_paths\n"
        f"with open_store({pg_server.new_database()!r}, diagnose=False) as store:\n"
        f"    counts = ingest_paths(store, [{str(src)!r}])\n"
        "print(counts.traces_added, 'ctxcore.diagnostics' in sys.modules)\n"
        "t = rows.Trace.model_validate_json(open(sys.argv[1], 'rb').readline())\n"
        "found, version = rows.diagnose_trace(t, t.to_json_bytes())\n"
        "print(version is not None, 'ctxcore.diagnostics' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(src)], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["4", "False", "True", "True"]
