"""Pi coding agent sessions (badlogic/pi-mono) imported as one trace per model call.

The samples in ``tests/fixtures/imports/pi`` are pi-mono's own test sessions (``SOURCES.md``);
``EXPECTED.json`` holds their hand counts. The tree layout (version 2 and 3) is the same
entries with ``id``/``parentId``, written here from the samples as pi migrates a linear file
(``migrateV1ToV2`` in pi-mono): a branch and a compaction are then real entries re-linked.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_import_sessions import EXPECTED, FIXTURES, LOSS_ONLY, _check_sums, _lines

from ctxcore.cli import main
from ctxcore.diagnostics import diagnose
from ctxcore.formats import sessions
from ctxcore.formats.accounting import describe, imported_counts
from ctxcore.formats.load import load_file
from ctxcore.models import Status, Trace

PI = sorted(n for n in EXPECTED if n.startswith("pi/"))
#: Pi's usage names as the traces carry them (docs: ``sessions/pi.py``)
USAGE = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cache_read_tokens": "cache_read_input_tokens",
    "cache_creation_tokens": "cache_creation_input_tokens",
    "total_tokens": "total_tokens",
}


def _usage_sum(traces: list[Trace], key: str) -> int | None:
    got = [t.outcome.usage[key] for t in traces if t.outcome and key in t.outcome.usage]
    return sum(got) if got else None


@pytest.mark.parametrize("name", PI)
def test_one_trace_per_assistant_message_nothing_lost(name: str) -> None:
    exp = EXPECTED[name]
    path = FIXTURES / name
    assert sessions.sniff(path) == "pi"
    traces = load_file(path)
    assert len(traces) == exp["model_calls"]
    header = _lines(path)[0]
    assert {t.session_id for t in traces} == {header["id"]}
    assert [t.turn for t in traces] == list(range(len(traces)))
    for t in traces:
        meta = t.metadata["import"]
        assert meta["format"] == "pi"
        assert meta["source"] == imported_counts(t)
        assert "kept_as_text" not in meta and "skipped" not in meta
        assert set(meta["reconstructed"]) == {"system prompt", "tool definitions"}
        assert t.builder.name == "import/pi"
        _check_sums(t)
        assert not diagnose(t, options=LOSS_ONLY)
    # the last call saw every message before it: the source's counts
    last = traces[-1].metadata["import"]["source"]
    assert last["messages"] == exp["messages"]["total"] - 1  # all but its own reply
    assert last["tool_results"] == exp["tool_results"]
    assert last["system_parts"] == exp["system_parts"] == 0
    stops = Counter(t.metadata["session_log"]["stopReason"] for t in traces)
    assert stops == exp["stop_reasons"]


@pytest.mark.parametrize("name", PI)
def test_tool_calls_results_thinking_and_usage_match_the_hand_counts(name: str) -> None:
    exp = EXPECTED[name]
    traces = load_file(FIXTURES / name)
    calls = [c for t in traces for c in t.metadata["session_log"].get("tool_calls", [])]
    assert len(calls) == exp["tool_calls"]
    assert Counter(c["name"] for c in calls) == exp["tool_calls_by_name"]
    results = {p.id for t in traces for p in t.input.packets if p.kind == "tool_result"}
    assert len(results) == exp["tool_results"]
    assert results <= {f"tool:{c['id']}" for c in calls}
    # each result a structured tool result, answering its call by name
    names = {f"tool:{c['id']}": c["name"] for c in calls}
    for p in traces[-1].input.packets:
        assert p.kind == "tool_result" and p.metadata["name"] == names[p.id]
    # the calls an assistant message made are structured calls on its history message
    made = [c for m in traces[-1].input.history for c in m.metadata.get("tool_calls") or []]
    assert len(made) == exp["tool_calls"]
    thinking = [m for m in traces[-1].input.history if m.metadata.get("reasoning")]
    last_reply = _lines(FIXTURES / name)[traces[-1].metadata["session_log"]["line"] - 1]
    own = sum(1 for b in last_reply["message"]["content"] if b.get("type") == "thinking")
    assert len(thinking) + own == exp["thinking_blocks"]
    for key, got in USAGE.items():
        assert _usage_sum(traces, got) == exp["usage"].get(key), key


def test_each_call_holds_what_came_before_its_reply_and_its_own_model_and_time() -> None:
    name = "pi/pi-mono-large-session.subset.jsonl"
    path = FIXTURES / name
    rows = _lines(path)
    traces = load_file(path)
    replies = [(i, r) for i, r in enumerate(rows, start=1) if r.get("message", {}).get("role")]
    replies = [(i, r) for i, r in replies if r["message"]["role"] == "assistant"]
    assert [t.metadata["session_log"]["line"] for t in traces] == [i for i, _ in replies]
    for t, (_, row) in zip(traces, replies, strict=True):
        msg = row["message"]
        assert t.metadata["model"] == msg["model"]
        assert t.metadata["session_log"]["api"] == msg["api"]
        assert int(t.created_at.timestamp() * 1000) == msg["timestamp"]
    # the first call is the aborted /mode call: the prompt is its query, its reply empty
    first = traces[0]
    assert first.input.query == "/mode" and first.metadata["model"] == "gpt-5.1-codex"
    assert first.outcome is not None and first.outcome.output is None
    # the parallel calls of line 6 and their three results, in the next call's input
    third = traces[2]
    line6 = [b["id"] for b in rows[5]["message"]["content"] if b["type"] == "toolCall"]
    assert [p.id for p in third.input.packets] == [f"tool:{i}" for i in line6]
    # a reply's text and calls are its outcome, as name(args) lines after the text
    out = traces[1].outcome.output  # type: ignore[union-attr]
    calls = [b["name"] for b in rows[5]["message"]["content"] if b["type"] == "toolCall"]
    assert out is not None and out.startswith(rows[5]["message"]["content"][0]["text"])
    assert [x.split("(")[0] for x in out.splitlines()[-3:]] == calls


def test_cli_import_prints_the_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = "pi/pi-mono-before-compaction.subset.jsonl"
    out = tmp_path / "pi.jsonl"
    assert main(["import", str(FIXTURES / name), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"{EXPECTED[name]['model_calls']} trace(s)" in printed
    assert "turn 11 (pi): 24 messages, 7 tool calls, 7 tool results" in printed
    assert len(load_file(out)) == EXPECTED[name]["model_calls"]


def test_a_broken_line_is_its_error_and_the_rest_is_imported(tmp_path: Path) -> None:
    src = FIXTURES / "pi/pi-mono-large-session.subset.jsonl"
    lines = src.read_text(encoding="utf-8").splitlines()
    lines[8] = lines[8][: len(lines[8]) // 2]  # line 9, a tool result, cut in the middle
    rows = [json.loads(x) for x in lines[:8]]
    rows[5]["message"]["content"] = 7  # line 6's assistant content is no list
    rows[6]["message"]["role"] = "robot"  # line 7: not a Pi role
    lines[5:7] = [json.dumps(r) for r in rows[5:7]]
    path = tmp_path / "broken.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    traces = load_file(path)
    assert len(traces) == EXPECTED["pi/pi-mono-large-session.subset.jsonl"]["model_calls"] - 1
    skipped = [s for t in traces for s in t.metadata["import"].get("skipped", [])]
    assert [s.split(": ")[0] for s in skipped] == [f"{path}:6", f"{path}:7", f"{path}:9"]
    assert "not a Pi message role ('robot')" in skipped[1]
    assert "not a JSON line" in skipped[2]
    assert any(f"{path}:9" in line for line in describe(traces))


def _tree(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries in the tree layout, as pi migrates a linear file: an id each, the parent
    the entry before it."""
    out = [dict(rows[0], version=3)]
    prev = None
    for i, row in enumerate(rows[1:], start=2):
        out.append({**row, "id": f"e{i:04d}", "parentId": prev})
        prev = f"e{i:04d}"
    return out


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return path


def test_the_tree_layout_gives_the_linear_files_calls(tmp_path: Path) -> None:
    src = FIXTURES / "pi/pi-mono-before-compaction.subset.jsonl"
    linear = load_file(src)
    tree = load_file(_write(tmp_path / "tree.jsonl", _tree(_lines(src))))
    assert [t.input.query for t in tree] == [t.input.query for t in linear]
    assert [[p.id for p in t.input.packets] for t in tree] == [
        [p.id for p in t.input.packets] for t in linear
    ]
    assert [t.metadata["import"]["source"] for t in tree] == [
        t.metadata["import"]["source"] for t in linear
    ]


def test_a_branch_sees_its_own_path_not_the_abandoned_one(tmp_path: Path) -> None:
    src = FIXTURES / "pi/pi-mono-before-compaction.subset.jsonl"
    rows = _tree(_lines(src))
    # the prompt of line 19 re-parented onto line 8: the user went back before line 13
    rows[18]["parentId"] = rows[7]["id"]
    traces = load_file(_write(tmp_path / "branch.jsonl", rows))
    by_line = {t.metadata["session_log"]["line"]: t for t in traces}
    before, after = by_line[18], by_line[20]
    assert before.input.query == rows[14]["message"]["content"][0]["text"]
    assert after.input.query == rows[18]["message"]["content"][0]["text"]
    ids = {m.id for m in after.input.history}
    assert not any(f"msg-{n}" in ids for n in range(13, 19))  # the abandoned branch
    assert {"msg-2", "msg-3", "msg-8"} <= ids
    # the calls after the branch go on from it
    assert by_line[22].input.query == rows[20]["message"]["content"][0]["text"]
    assert by_line[22].input.history[-1].id == "msg-20"


def test_a_compaction_keeps_its_summary_and_kept_entries(tmp_path: Path) -> None:
    src = FIXTURES / "pi/pi-mono-before-compaction.subset.jsonl"
    rows = _tree(_lines(src))
    # a compaction entry after line 18 keeping the entries from line 13 (pi's fields)
    comp = {
        "type": "compaction",
        "id": "c0001",
        "parentId": rows[17]["id"],
        "timestamp": rows[17]["timestamp"],
        "summary": "The user asked for a refactoring plan of main.ts and tui-renderer.ts.",
        "firstKeptEntryId": rows[12]["id"],
        "tokensBefore": 120000,
    }
    rows[18]["parentId"] = "c0001"
    rows.insert(18, comp)
    traces = load_file(_write(tmp_path / "compacted.jsonl", rows))
    first_after = next(t for t in traces if t.metadata["session_log"]["line"] > 19)
    history = first_after.input.history
    assert history[0].id == "msg-19" and "<summary>\nThe user asked" in history[0].content
    assert history[1].id == "msg-13"  # the first kept entry
    assert not any(m.id in ("msg-2", "msg-3", "msg-8") for m in history)
    summarized = {
        d.packet_id
        for d in first_after.result.decisions  # type: ignore[union-attr]
        if d.status == Status.SUMMARIZED
    }
    assert {"msg-2", "msg-3", "msg-8", "tool:toolu_012yuiPP1VAfh196GXaAmT8D"} <= summarized
    assert first_after.metadata["import"]["compaction"]
    assert traces[-1].metadata["import"]["compaction"]
