"""Runs in shared traces (docs/design.md, "Shared traces" → runs): a ``ctxscope.share/2``
line writes a long list as a list part that names the previous call's list part and adds
what is new, so a session that is never compacted costs what it adds, not the square of
its length. Every reader sees the same whole traces, byte for byte; ``/1`` lines read as
before; a bad run is its line's error, naming the field."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxcore import sharing
from ctxcore.cli import main
from ctxcore.errors import InputError
from ctxcore.formats.load import iter_traces, load_file
from ctxcore.models import Trace
from ctxcore.sharing import (
    SHARE_SCHEMA,
    SHARE_SCHEMAS,
    PartTable,
    PartTables,
    ShareWriter,
    is_shared,
    may_hold_shared,
    names_schema,
)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "imports"
SIDECHAIN = FIXTURES / "claude-code" / "ccviewer-task-sidechain-session.jsonl"
ONE = SHARE_SCHEMAS[0]


@pytest.fixture(scope="module")
def uncompacted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Trace]]:
    """A Claude Code log of one session that is never compacted (``bench_import``'s
    generator over the corpus, the window never reached), and its traces."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_import import build

    log = tmp_path_factory.mktemp("runs") / "uncompacted.jsonl"
    build(log, 1200, 1.5, 10**9)
    traces = list(iter_traces(log))
    assert len(traces) > 300
    return log, traces


def _lines(traces: list[Trace], writer: ShareWriter | None = None) -> list[bytes]:
    w = writer or ShareWriter()
    return [w.line_bytes(t) for t in traces]


def _expand(lines: list[bytes], table: PartTable | None = None) -> list[bytes]:
    t = table or PartTable()
    return [t.expand(ln.rstrip(b"\n"), f"line {n}") for n, ln in enumerate(lines, 1)]


def _whole(traces: list[Trace]) -> list[bytes]:
    return [t.to_json_bytes() for t in traces]


def _env(line: bytes) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(line)
    return out


def _line(env: dict[str, Any]) -> bytes:
    return json.dumps(env, ensure_ascii=False).encode()


def test_an_uncompacted_session_is_linear_and_reads_back_byte_for_byte(
    uncompacted: tuple[Path, list[Trace]], tmp_path: Path
) -> None:
    """Each list of a call (history, packets, messages, decisions, the prompt's pieces, the
    report's packet ids) grows by what the call adds: written whole each call, the file
    would grow with the square of the session (the bench's 6 MB log wrote 101 MB, 93 MB
    of it id lists). With runs, the second half of the session writes about as much as
    the first, and ``import -o`` stays within 2.5x the log."""
    log, traces = uncompacted
    lines = _lines(traces)
    assert all(ln.startswith(b'{"share":"' + SHARE_SCHEMA.encode()) for ln in lines)
    assert _expand(lines) == _whole(traces)
    half = len(lines) // 2
    first, second = sum(map(len, lines[:half])), sum(map(len, lines[half:]))
    assert second < first * 1.6, (first, second)
    out = tmp_path / "out.jsonl"
    assert main(["import", str(log), "-o", str(out)]) == 0
    assert out.stat().st_size < 2.5 * log.stat().st_size
    # the same file with every list written whole (no runs) is far bigger
    whole_lists = ShareWriter()
    big = 0
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sharing, "MIN_RUN", 10**9)
        big = sum(map(len, _lines(traces, whole_lists)))
    assert big > 3 * sum(map(len, lines))


def test_every_kind_of_list_is_written_as_a_run(
    uncompacted: tuple[Path, list[Trace]],
) -> None:
    """The lists a run may stand for, each seen as a run in the file: items (history,
    packets, messages, decisions), a text's pieces (the prompt) and the report's packet
    ids; the trace names its list part, and that part names the previous one."""
    _, traces = uncompacted
    lines = _lines(traces)
    late = _env(lines[-1])
    inp, res = late["trace"]["input"], late["trace"]["result"]
    fields = {
        "input.history": inp["history"],
        "input.packets": inp["packets"],
        "result.messages": res["messages"],
        "result.decisions": res["decisions"],
        "result.prompt": res["prompt"],
        "result.report.included": res["report"]["included"],
    }
    table: dict[str, Any] = {}
    for ln in lines:
        table.update(_env(ln)["parts"])
    for name, value in fields.items():
        assert isinstance(value, list) and len(value) == 1 and isinstance(value[0], list), name
        part = table[value[0][0]]
        assert isinstance(part, list) and isinstance(part[0], list), name  # names the last
        assert part[0][0] in table, name


def test_the_chain_starts_afresh_at_the_writers_depth(
    uncompacted: tuple[Path, list[Trace]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No run goes through more than RUN_DEPTH list parts as the writer writes them (a
    reader follows up to MAX_RUN_DEPTH): at that depth a list is written whole again."""
    _, traces = uncompacted
    monkeypatch.setattr(sharing, "RUN_DEPTH", 5)
    lines = _lines(traces)
    assert _expand(lines) == _whole(traces)
    parts: dict[str, Any] = {}
    for ln in lines:
        parts.update(_env(ln)["parts"])

    def depth(pid: str) -> int:
        first = parts[pid][0]
        return 1 + depth(first[0]) if isinstance(first, list) else 1

    depths = [depth(pid) for pid, v in parts.items() if isinstance(v, list)]
    assert max(depths) == 5 and depths.count(1) > 10


def test_a_reader_with_a_small_run_cache_reads_the_same(
    uncompacted: tuple[Path, list[Trace]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The expanded list parts a table keeps are a cache: with room for one list the
    reader walks the chain again and reads the same bytes."""
    _, traces = uncompacted
    lines = _lines(traces)
    monkeypatch.setattr(sharing, "RUN_CACHE_ITEMS", 1)
    table = PartTable()
    assert _expand(lines, table) == _whole(traces)
    assert len(table.lists) == 1


def test_fixture_sessions_read_the_same_through_every_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``import -o`` of a real session log (claude-code-log's fixture with a sidechain;
    runs from 4 items, so that its lists are written as runs) reads back as the traces
    ``--whole`` wrote."""
    monkeypatch.setattr(sharing, "MIN_RUN", 4)
    shared, whole = tmp_path / "s.jsonl", tmp_path / "w.jsonl"
    assert main(["import", str(SIDECHAIN), "-o", str(shared)]) == 0
    assert main(["import", str(SIDECHAIN), "--whole", "-o", str(whole)]) == 0
    assert b"[[" in shared.read_bytes()  # it holds runs
    a = [t.model_copy(update={"result": None}) for t in load_file(shared)]
    b = [t.model_copy(update={"result": None}) for t in load_file(whole)]
    assert a == b
    table = PartTable()
    expanded = [table.expand(ln) for ln in shared.read_bytes().splitlines()]
    assert [json.loads(x)["trace_id"] for x in expanded] == [
        json.loads(x)["trace_id"] for x in whole.read_bytes().splitlines()
    ]


def test_a_one_line_without_runs_reads_as_before_and_a_run_in_it_is_an_error(
    uncompacted: tuple[Path, list[Trace]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ctxscope.share/1`` lines (every shared file before runs) read unchanged; a list
    item that is a list in a /1 line is not a run (that form did not have them): the
    whole trace it makes is refused by the trace's reader, never read as a run."""
    _, traces = uncompacted
    monkeypatch.setattr(sharing, "MIN_RUN", 10**9)
    monkeypatch.setattr(sharing, "MIN_SHARED_TEXT", 10**9)  # no made parts either
    old = [ln.replace(SHARE_SCHEMA.encode(), ONE.encode(), 1) for ln in _lines(traces[:40])]
    assert _expand(old) == _whole(traces[:40])
    table = PartTable()
    _expand(old[:5], table)
    env = _env(old[5])
    env["trace"]["result"]["prompt"] = [["x"]]
    with pytest.raises(InputError, match=r"line 6: field 'result.prompt\[0\]'.*not an array"):
        table.expand(_line(env), "line 6")


def _run_line(history: list[Any], parts: dict[str, Any] | None = None) -> bytes:
    return _line(
        {"share": SHARE_SCHEMA, "parts": parts or {}, "trace": {"input": {"history": history}}}
    )


PARTS = {
    "m": {"role": "user", "content": "hello"},
    "L": ["m", "m", "m"],
    "T": "a text",
    "O": {"not": "a list"},
}


@pytest.mark.parametrize(
    ("history", "field", "why"),
    [
        ([["L", 4]], "input.history[0]", "takes 4 items of the list part 'L', which holds 3"),
        ([["nope"]], "input.history[0]", "the part 'nope' is not defined"),
        ([["O"]], "input.history[0]", "the part 'O' is not a list, and a run names a list part"),
        ([[]], "input.history[0]", "a run, [list part id] or"),
        ([["L", -1]], "input.history[0]", 'not ["L", -1]'),
        ([["L", True]], "input.history[0]", "a run, [list part id]"),
        ([["L", 1.5]], "input.history[0]", "a run, [list part id]"),
        ([["L", 1, 2]], "input.history[0]", "a run, [list part id]"),
        ([[1]], "input.history[0]", "a run, [list part id]"),
        (["m", ["L"], "gone"], "input.history (item 4 with its runs read)", "'gone' is not"),
    ],
)
def test_a_bad_run_is_that_lines_error_naming_the_field(
    history: list[Any], field: str, why: str
) -> None:
    table = PartTable()
    table.expand(_run_line(["m"], PARTS), "f:1")
    with pytest.raises(InputError) as err:
        table.expand(_run_line(history), "f:2")
    assert str(err.value).startswith(f"f:2: field '{field}': ")
    assert why in str(err.value)
    # the next line is read
    assert json.loads(table.expand(_run_line([["L", 2]]), "f:3")) == {
        "input": {"history": [PARTS["m"], PARTS["m"]]}
    }


def test_runs_read_in_texts_and_report_lists_and_name_their_item() -> None:
    table = PartTable()
    parts = {"a": "x", "b": "y", "P": ["a", "b"], "R": ["p1", "p2"], "M": ["m"], "m": {}}
    line = _line(
        {
            "share": SHARE_SCHEMA,
            "parts": parts,
            "trace": {
                "input": {"query": [["P"], "a"], "system_instructions": [["P", 1]]},
                "result": {"prompt": [["P"]], "report": {"budget": 1, "included": [["R"], "p3"]}},
            },
        }
    )
    assert json.loads(table.expand(line)) == {
        "input": {"query": "xyx", "system_instructions": "x"},
        "result": {"prompt": "xy", "report": {"budget": 1, "included": ["p1", "p2", "p3"]}},
    }
    bad = _line({"share": SHARE_SCHEMA, "trace": {"result": {"prompt": [["M"]]}}})
    with pytest.raises(InputError, match=r"'result.prompt \(item 0 with its runs read\)'"):
        table.expand(bad, "f:9")


def test_runs_deeper_than_a_reader_follows_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sharing, "MAX_RUN_DEPTH", 8)
    parts: dict[str, Any] = {"m": {}, "L0": ["m"]}
    for k in range(1, 12):
        parts[f"L{k}"] = [[f"L{k - 1}"], "m"]
    table = PartTable()
    table.expand(_run_line(["m"], parts))
    assert len(json.loads(table.expand(_run_line([["L6"]])))["input"]["history"]) == 7
    fresh = PartTable()
    fresh.expand(_run_line(["m"], parts))
    with pytest.raises(InputError, match="more than 8 list parts"):
        fresh.expand(_run_line([["L11"]]), "f:2")


def test_a_list_that_runs_past_the_item_limit_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A few bytes of runs can name a great many items (each list part doubling the last):
    past MAX_LIST_ITEMS the line is refused before they are joined."""
    monkeypatch.setattr(sharing, "MAX_LIST_ITEMS", 1000)
    parts: dict[str, Any] = {"m": {}, "D0": ["m"]}
    for k in range(1, 12):
        parts[f"D{k}"] = [[f"D{k - 1}"], [f"D{k - 1}"]]
    table = PartTable()
    table.expand(_run_line(["m"], parts))
    assert len(json.loads(table.expand(_run_line([["D9"]])))["input"]["history"]) == 512
    with pytest.raises(InputError, match="more than 1,000 items"):
        table.expand(_run_line([["D11"]]), "f:3")
    with pytest.raises(InputError, match="more than 1,000 items"):
        table.expand(_run_line([["D9"], ["D9"]]), "f:4")


def test_the_schemas_name_is_found_in_either_version_and_nowhere_else(tmp_path: Path) -> None:
    for schema in SHARE_SCHEMAS:
        quoted = f'"{schema}"'.encode()
        assert names_schema(b'{"parts":{},"share":' + quoted + b',"trace":{}}')
        assert is_shared(b'{"parts":{},"share":' + quoted + b',"trace":{}}')
    assert not names_schema(b'{"x":"\\"ctxscope.share/2\\""}')  # inside another string
    assert not names_schema(b'{"x":"ctxscope.share/3"}')
    assert not names_schema(b'"ctxscope.share/')
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"a":"\\"ctxscope.share/1\\""}\n{"share":"ctxscope.share/2"}\n')
    assert may_hold_shared(str(path), False)
    assert not may_hold_shared(str(path), False, end=30)


@pytest.mark.parametrize(
    "line",
    [
        b'{"share":"ctxscope.share/3","trace":{}}',
        b'{"share":"ctxscope.share/3","trace":{},"links":{}}',  # a key a later form adds
    ],
)
def test_a_later_share_version_says_which_it_reads_whatever_its_keys(line: bytes) -> None:
    """A line of a form this ctxscope does not read says so (upgrade), not that a key it
    does not know is unknown (the error stop 45's reader gives a /2 line with made parts)."""
    with pytest.raises(InputError, match=r"^f:1: field 'share': 'ctxscope.share/3' is not "):
        PartTable().expand(line, "f:1")
    if b"links" in line:  # in a form this ctxscope reads, the key is what is wrong
        with pytest.raises(InputError, match=r"^f:1: field 'links': unknown"):
            PartTable().expand(line.replace(b"share/3", SHARE_SCHEMA[-7:].encode()), "f:1")


def test_a_resumed_read_learns_list_parts_and_reads_on(
    uncompacted: tuple[Path, list[Trace]], tmp_path: Path
) -> None:
    """Ingest resuming a file part-way learns the parts of the lines before (list parts
    are parts): the lines after read as from the start."""
    _, traces = uncompacted
    lines = _lines(traces)
    path = tmp_path / "f.jsonl"
    path.write_bytes(b"".join(lines))
    offset = sum(map(len, lines[:100]))
    table = PartTables().get(str(path), 1, offset, gz=False)
    assert _expand(lines[100:], table) == _whole(traces[100:])


def test_a_file_an_earlier_version_wrote_in_the_first_form_reads_the_same() -> None:
    """``ctxscope.share/1`` as stop 45's ctxscope wrote it (tests/fixtures/shared), from a
    public session log: every line reads, to the traces this version imports from that log
    (but for the time each build took), and a file this version writes of them is smaller
    (runs and made parts) and reads the same."""
    old = ROOT / "tests" / "fixtures" / "shared" / "sidechain.share1.jsonl"
    assert all(ln.startswith(f'{{"share":"{ONE}"'.encode()) for ln in old.read_bytes().splitlines())
    read = [_no_timings(t) for t in load_file(old)]
    assert read == [_no_timings(t) for t in iter_traces(SIDECHAIN)]
    again = b"".join(_lines(list(iter_traces(SIDECHAIN))))
    assert len(again) < old.stat().st_size
    assert [_no_timings(Trace.model_validate_json(x)) for x in _expand(again.splitlines())] == read


def _no_timings(t: Trace) -> Trace:
    """A trace less its timings and where its log was (the fixture was written from a
    checkout elsewhere: the log's path is in each trace's metadata)."""
    assert t.result is not None
    meta = dict(t.metadata)
    log = dict(meta["session_log"])
    log["file"] = Path(log["file"]).name
    meta["session_log"] = log
    result = t.result.model_copy(update={"timings": {}})
    return t.model_copy(update={"result": result, "metadata": meta})


def test_traces_read_back_run_on_as_the_importers_did(
    uncompacted: tuple[Path, list[Trace]],
) -> None:
    """Traces read back from a file or a store are each their own objects: the writer
    knows a list's items by their content then (a part id is its JSON's hash), and still
    writes each list as a run of the previous one. Without that, the export of a stored
    session wrote every list whole each call (66 MB for an 850-call session whose import
    wrote 10.8 MB)."""
    _, traces = uncompacted
    again = [Trace.model_validate_json(t.to_json()) for t in traces]
    assert again == traces and again[-1].input.history[0] is not again[-2].input.history[0]
    imported, read_back = _lines(traces), _lines(again)
    assert _expand(read_back) == _whole(traces)
    assert sum(map(len, read_back)) < 1.5 * sum(map(len, imported))
    late = _env(read_back[-1])["trace"]
    table: dict[str, Any] = {}
    for ln in read_back:
        table.update(_env(ln)["parts"])
    for value in (late["input"]["history"], late["result"]["messages"]):
        part = table[value[0][0]]
        assert isinstance(part[0], list) and part[0][0] in table  # a run of the last one
