"""The compaction ledger of a policy's own compactions (docs/design.md, "Compaction ledger"):
OpenHands' summarizing condenser and LangChain's SummarizationMiddleware on a corpus SWE-agent
run, Codex's auto-compaction on the real Codex compaction-turn rollout, auto-compact on the
real Claude Code compaction log, and what ``ctxscope ledger --preset`` and ``replay --json``
say. Each expectation is read from the replay's own rebuilds: the parts a policy marked
summarized (that the recording had not), the summary it sent, the prompt it sent, and the
recorded replies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxcore.cli import main
from ctxcore.formats.load import load_file
from ctxcore.ledger import Entry, ledger
from ctxcore.models import Status, Trace
from ctxcore.pipeline.recorded import conversation
from ctxcore.replay.compactions import ledger_of_policy
from ctxcore.replay.evaluate import label
from ctxcore.replay.run import replay

ROOT = Path(__file__).parent.parent
SWE = ROOT / "corpus" / "b03_sweagent_pydicom-1458.traj.json"
IMPORTS = Path(__file__).parent / "fixtures" / "imports"
CLAUDE = IMPORTS / "claude-code" / "claude-code-log-compact-after-rewind.jsonl"
CODEX = IMPORTS / "codex" / "localpush-rollout-compaction-turn.subset.jsonl"


def _low(text: str) -> str:
    return " ".join(text.split()).lower()


def _calls(path: Path) -> list[Trace]:
    return sorted((t for t in load_file(path) if t.result is not None), key=lambda t: t.turn)


def _replayed(calls: list[Trace], settings: dict[str, Any]) -> tuple[dict[str, Trace], str]:
    report = replay(calls, settings, findings=False, keep_variants=True)
    assert not report.errors, report.errors
    return {v.source_trace_id or "": v for v in report.variants}, label(settings)


def _summarized(t: Trace) -> set[str]:
    assert t.result is not None
    return {d.packet_id for d in t.result.decisions if d.status == Status.SUMMARIZED}


def _summary(t: Trace) -> str:
    assert t.result is not None
    msgs = t.result.messages or []
    return "\n".join(m.content for m in msgs if (m.id or "").startswith("builder:history:"))


def _check_against_the_rebuilds(
    calls: list[Trace], variants: dict[str, Trace], entries: list[Entry]
) -> None:
    """Every entry against the rebuilds: where the policy summarized with a new summary, each
    item from the parts it summarized, kept exactly when the prompt it sent holds it, a lost
    one next needed at the first call from it on whose recorded reply names it or whose
    rebuilt prompt holds it."""
    rebuilt = [variants[t.trace_id] for t in calls]
    new = [
        calls[k].turn
        for k, v in enumerate(rebuilt)
        if _summarized(v) - _summarized(calls[k])
        and (k == 0 or _summary(rebuilt[k - 1]) != _summary(v))
    ]
    assert [e.turn for e in entries] == new
    for e in entries:
        k = next(i for i, t in enumerate(calls) if t.turn == e.turn)
        parts = {p.id: p.message.content for p in conversation(calls[k].input).parts}
        gone = _low("\n".join(parts[i] for i in _summarized(rebuilt[k]) if i in parts))
        sent = rebuilt[k].result
        assert sent is not None
        for item in e.items:
            assert _low(item.text) in gone, item
            assert item.kept == (_low(item.text) in _low(sent.prompt)), item
        for item in e.lost:
            needed = [
                (t.turn, "reply" if _low(item.text) in _low(reply) else "prompt")
                for t, v in zip(calls[k:], rebuilt[k:], strict=True)
                if _low(item.text) in _low(reply := (t.outcome and t.outcome.output) or "")
                or (v.result is not None and _low(item.text) in _low(v.result.prompt))
            ]
            assert (item.needed_turn, item.needed_in) == (needed[0] if needed else (None, None))


def test_a_rolling_summary_on_a_corpus_session_is_one_compaction_that_loses_items() -> None:
    calls = _calls(SWE)
    variants, policy = _replayed(
        calls, {"preset": "openhands-summarizing", "max_size": 20, "keep_first": 1}
    )
    entries = ledger_of_policy(calls, variants, policy)
    _check_against_the_rebuilds(calls, variants, entries)
    # the condenser forgets once (at turn 9) and sends that summary at every call after
    e = entries[0]
    assert len(entries) == 1 and (e.turn, e.before_turn, e.policy) == (9, 8, policy)
    # the demonstration's `ls` listing is forgotten and the stand-in's summary does not name it
    lost = {(i.kind, i.text) for i in e.lost}
    assert ("path", "AUTHORS.rst") in lost
    assert e.kept and len(e.lost) > len(e.kept)


def test_a_stateless_summary_is_a_compaction_at_each_call_and_items_are_needed_again() -> None:
    calls = _calls(SWE)
    settings = {"preset": "langchain-summarization", "trigger": 2000, "keep": 4}
    variants, policy = _replayed(calls, settings)
    entries = ledger_of_policy(calls, variants, policy)
    _check_against_the_rebuilds(calls, variants, entries)
    assert len(entries) > 2
    needed = [i for e in entries for i in e.lost if i.needed_turn is not None]
    assert {i.needed_in for i in needed} == {"reply", "prompt"}
    # SWE-agent's instruction in an early observation, summarized away, shown again later
    said = [i for i in entries[0].lost if i.kind == "constraint"]
    assert any(i.text.startswith("DO NOT re-run the same failed edit") for i in said), said


def test_codex_auto_compaction_on_the_real_rollout_loses_the_tools_it_called() -> None:
    calls = _calls(CODEX)
    settings = {"preset": "auto-compact", "agent": "codex", "window": 3000, "threshold": 0.2}
    variants, policy = _replayed(calls, settings)
    entries = ledger_of_policy(calls, variants, policy)
    _check_against_the_rebuilds(calls, variants, entries)
    # codex keeps the user's messages: the function calls go, and the next reply calls them
    first: dict[str, Any] = {}
    for e in entries:
        for i in e.lost:
            first.setdefault(i.text, i)
    assert {"exec_command", "apply_patch"} <= set(first)
    assert all(first[n].needed_in == "reply" for n in ("exec_command", "apply_patch"))


def _claude_written(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The real log with items written into its first message ("Start") and the answer on
    the branch it kept ("Second answer"), the reply after its compaction naming one."""
    lines = [json.loads(x) for x in CLAUDE.read_text(encoding="utf-8").splitlines() if x]
    text = {o["uuid"]: o["message"]["content"][0] for o in lines if o.get("message")}
    items = {
        "path": "src/parser.py",
        "constraint": "Never touch tests/fixtures.",
        "identifier": "test_parse_header",
        "error": "ValueError: bad header in frame 3",
    }
    text["u1"]["text"] += f": fix {items['path']}. {items['constraint']}"
    text["b2a"]["text"] += f"\nTraceback (most recent call last):\n{items['error']}"
    text["b2a"]["text"] += f"\n{items['identifier']} fails."
    text["p1a"]["text"] += f": {items['identifier']} passes."
    path = tmp_path / CLAUDE.name
    path.write_text("".join(json.dumps(o) + "\n" for o in lines), encoding="utf-8")
    return path, items


def test_auto_compact_on_the_claude_code_log_is_not_charged_with_the_recorded_compaction(
    tmp_path: Path,
) -> None:
    path, items = _claude_written(tmp_path)
    calls = _calls(path)
    assert len(ledger(calls)) == 1
    # the request never reaches the threshold: the only compaction is the log's own, whose
    # replaced messages every rebuild (the recorded one too) shows summarized
    variants, policy = _replayed(calls, {"preset": "auto-compact", "threshold": 0.99})
    assert any(_summarized(v) for v in variants.values())
    assert ledger_of_policy(calls, variants, policy) == []
    # at 1 % of a 2,000-token window the policy compacts the conversation before the log
    # did: the exchange the items were written into is summarized by the stand-in
    settings = {"preset": "auto-compact", "threshold": 0.01, "window": 2000}
    variants, policy = _replayed(calls, settings)
    entries = ledger_of_policy(calls, variants, policy)
    _check_against_the_rebuilds(calls, variants, entries)
    got = {(i.kind, i.text): i for e in entries for i in e.items}
    assert set(items.items()) <= set(got), sorted(got)
    assert any(not i.kept for i in got.values())


def test_the_commands_carry_the_policy_ledger(capsys: pytest.CaptureFixture[str]) -> None:
    sets = ["--set", "max_size=20", "--set", "keep_first=1"]
    assert main(["ledger", str(SWE), "--preset", "openhands-summarizing", *sets, "--json"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    calls = _calls(SWE)
    settings = {"preset": "openhands-summarizing", "max_size": 20, "keep_first": 1}
    variants, policy = _replayed(calls, settings)
    want = [e.as_json() for e in ledger_of_policy(calls, variants, policy)]
    assert rows == [{"file": str(SWE), **e} for e in want]
    assert any(i["text"] == "AUTHORS.rst" and not i["kept"] for i in rows[0]["items"])
    main(["ledger", str(SWE), "--preset", "openhands-summarizing", *sets])
    assert "lost path: 'AUTHORS.rst', not needed again" in capsys.readouterr().out
    # replay's comparison: the recording's own ledger (none here) and the policy's
    assert main(["replay", str(SWE), "--preset", "openhands-summarizing", *sets, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["ledger"] for p in doc["policies"]] == [[], want]
    # knobs without the policy they belong to are refused
    assert main(["ledger", str(SWE), *sets]) == 2
    assert "give the policy, --preset P" in capsys.readouterr().err


def test_replay_json_carries_the_recorded_compaction(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(CODEX), "--preset", "recorded", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    recorded, same = doc["policies"]
    assert recorded["ledger"] == [e.as_json() for e in ledger(load_file(CODEX))]
    assert {i["text"] for i in recorded["ledger"][0]["items"] if not i["kept"]} >= {
        "exec_command",
        "apply_patch",
    }
    # the recorded preset sends what was sent: it compacts nothing of its own
    assert same["ledger"] == []
