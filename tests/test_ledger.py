"""The compaction ledger (docs/design.md, "Compaction ledger") on real logs: the Claude Code
compact-after-rewind log and the Codex compaction-turn rollout, as recorded and with items
written into their texts. Every expectation is read from the log's own lines: an item of the
text before the compaction that the compaction's summary (or Codex's replacement history)
does not hold is lost, and is next needed where a later reply names it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ctxcore.cli import main
from ctxcore.formats.load import load_file
from ctxcore.ledger import Entry, ledger

FIXTURES = Path(__file__).parent / "fixtures" / "imports"
CLAUDE = FIXTURES / "claude-code" / "claude-code-log-compact-after-rewind.jsonl"
CODEX = FIXTURES / "codex" / "localpush-rollout-compaction-turn.subset.jsonl"


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in lines), encoding="utf-8")
    return path


def _text(o: dict[str, Any]) -> str:
    return "\n".join(c.get("text", "") for c in o["message"]["content"])


def _set_text(o: dict[str, Any], text: str) -> None:
    o["message"]["content"] = [{"type": "text", "text": text}]


def _only(entries: list[Entry]) -> Entry:
    assert len(entries) == 1, entries
    return entries[0]


# --------------------------------------------------------------------------- Claude Code


def _claude_parts(lines: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    """The compact boundary's index and the summary line after it."""
    boundary = next(k for k, o in enumerate(lines) if o.get("subtype") == "compact_boundary")
    summary = next(o for o in lines if o.get("isCompactSummary"))
    return boundary, summary


def test_the_claude_code_log_as_recorded_has_one_compaction_and_nothing_lost() -> None:
    lines = _lines(CLAUDE)
    boundary, summary = _claude_parts(lines)
    traces = sorted(load_file(CLAUDE), key=lambda t: t.turn)
    e = _only(ledger(traces))
    # the first call after the boundary, the last call before it
    after = next(t for t in traces if t.metadata.get("import", {}).get("compaction"))
    assert (e.turn, e.before_turn) == (after.turn, after.turn - 1)
    assert f"line {boundary + 1}" in e.label
    # the texts before it ("Start", "Keep going", ...) name no path, identifier, error or
    # constraint: nothing to keep or lose
    before = [_text(o) for o in lines[:boundary] if o.get("type") in ("user", "assistant")]
    marks = re.compile(r"[/_(]|\w\.\w|error|must|never|only|always|don't|do not", re.I)
    assert before and not any(marks.search(t) for t in before)
    assert e.items == []
    assert "plan" in _text(summary)


@pytest.fixture()
def claude_written(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The real log with items written into the last exchange before the compaction, the
    summary keeping one of them and the reply after it naming another."""
    lines = _lines(CLAUDE)
    boundary, summary = _claude_parts(lines)
    user = next(o for o in reversed(lines[:boundary]) if o.get("type") == "user")
    reply = next(o for o in reversed(lines[:boundary]) if o.get("type") == "assistant")
    items = {
        "path": "src/parser.py",
        "identifier": "test_parse_header",
        "constraint": "Never touch tests/fixtures.",
        "error": "ValueError: bad header in frame 3",
    }
    _set_text(
        user,
        f"{_text(user)}: fix {items['path']} so {items['identifier']} passes. "
        f"{items['constraint']}",
    )
    _set_text(reply, f"{_text(reply)}\nTraceback (most recent call last):\n{items['error']}")
    _set_text(summary, f"{_text(summary)} They are fixing {items['path']}.")
    final = next(o for o in lines[boundary:] if o.get("type") == "assistant")
    _set_text(final, f"{_text(final)}: {items['identifier']} passes now.")
    return _write(tmp_path / CLAUDE.name, lines), items


def test_claude_code_what_the_summary_kept_and_lost(
    claude_written: tuple[Path, dict[str, str]],
) -> None:
    path, items = claude_written
    lines = _lines(path)
    boundary, summary = _claude_parts(lines)
    summary_text = _text(summary).lower()
    traces = sorted(load_file(path), key=lambda t: t.turn)
    e = _only(ledger(traces))
    got = {(i.kind, i.text): i for i in e.items}
    for kind, text in items.items():
        assert (kind, text) in got, (kind, text, sorted(got))
        assert got[(kind, text)].kept == (text.lower() in summary_text), (kind, text)
    # a lost item is next needed where a later reply names it, else never
    later = [o for o in lines[boundary:] if o.get("type") == "assistant"]
    after = [t for t in traces if t.turn >= e.turn]
    for i in e.lost:
        named = [t.turn for t, o in zip(after, later, strict=False) if i.text in _text(o)]
        assert i.needed_turn == (named[0] if named else None), i
        assert i.needed_in == ("reply" if named else None)
    assert got[("path", items["path"])].kept
    assert got[("identifier", items["identifier"])].needed_turn == e.turn


def test_the_command_prints_the_ledger(
    claude_written: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, items = claude_written
    assert main(["ledger", str(path), "--json"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert rows == [{"file": str(path), **e.as_json()} for e in ledger(load_file(path))]
    assert main(["ledger", str(path)]) == 0
    assert f"lost identifier: {items['identifier']!r}" in capsys.readouterr().out


def test_a_file_without_a_compaction_has_no_ledger() -> None:
    path = FIXTURES / "claude-code" / "ccviewer-init-session.jsonl"
    assert ledger(load_file(path)) == []
    assert main(["ledger", str(path)]) == 1


# --------------------------------------------------------------------------- Codex


def _codex_compacted(lines: list[dict[str, Any]]) -> int:
    return next(k for k, o in enumerate(lines) if o.get("type") == "compacted")


def test_the_codex_rollout_loses_the_tool_calls_its_replacement_history_drops() -> None:
    lines = _lines(CODEX)
    at = _codex_compacted(lines)
    kept_text = json.dumps(lines[at]["payload"]["replacement_history"]).lower()
    called = {
        o["payload"]["name"]
        for o in lines[:at]
        if o.get("type") == "response_item"
        and o["payload"].get("type") in ("function_call", "custom_tool_call")
    }
    traces = sorted(load_file(CODEX), key=lambda t: t.turn)
    e = _only(ledger(traces))
    assert f"line {at + 1}" in e.label
    for i in e.items:
        assert i.kept == (i.text.lower() in kept_text), i
    # the functions called before it: the replacement history keeps messages only
    assert called and called <= {i.text for i in e.lost if i.kind == "identifier"}
    after = [t for t in traces if t.turn >= e.turn]
    for name in called:
        item = next(i for i in e.lost if i.text == name)
        first = next(
            t.turn for t in after if f"{name}(" in ((t.outcome and t.outcome.output) or "")
        )
        assert (item.needed_turn, item.needed_in) == (first, "reply")


def test_codex_a_path_dropped_by_the_compaction_and_read_again(tmp_path: Path) -> None:
    lines = _lines(CODEX)
    at = _codex_compacted(lines)
    path_item = "crates/wire/src/frame.rs"
    said = next(
        o
        for o in reversed(lines[:at])
        if o.get("type") == "response_item" and o["payload"].get("role") == "assistant"
    )
    said["payload"]["content"] = [{"type": "output_text", "text": f"Editing {path_item} next."}]
    reply = next(
        k
        for k, o in enumerate(lines)
        if k > at and o.get("type") == "response_item" and o["payload"].get("role") == "assistant"
    )
    lines[reply]["payload"]["content"] = [
        {"type": "output_text", "text": f"Reopening {path_item} after the compaction."}
    ]
    path = _write(tmp_path / CODEX.name, lines)
    assert path_item not in json.dumps(lines[at]["payload"]["replacement_history"])
    traces = sorted(load_file(path), key=lambda t: t.turn)
    e = _only(ledger(traces))
    item = next(i for i in e.items if i.text == path_item)
    assert (item.kind, item.kept) == ("path", False)
    named = next(
        t.turn
        for t in traces
        if t.turn >= e.turn and path_item in ((t.outcome and t.outcome.output) or "")
    )
    assert (item.needed_turn, item.needed_in) == (named, "reply")
