"""The LangChain presets' decisions, knobs and refusals (docs/design.md, "LangChain
policies"). What they send is checked against the real package in
tests/test_oracle_langchain.py; here the expectations are worked out by hand from the
package's rules on a small recorded request, counted with the real tokenizer."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ctxcore.errors import InputError
from ctxcore.formats.load import load_file
from ctxcore.models import BuildResult, CapturedInput, Config, Message, Packet, Reason, Status
from ctxcore.pipeline import build, resolve_config
from ctxcore.pipeline.langchain_policies import STAND_IN_LABEL, MessageCounter, from_parts
from ctxcore.pipeline.recorded import conversation
from ctxcore.replay import replay
from ctxcore.tokens import get_counter

ROOT = Path(__file__).resolve().parent.parent
COUNT = get_counter("cl100k_base")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _assistant(mid: str, text: str, calls: list[tuple[str, str, dict[str, Any]]]) -> Message:
    raw = [{"id": c, "name": n, "arguments": json.dumps(a)} for c, n, a in calls]
    lines = "\n".join(f"{c['name']}({c['arguments']})" for c in raw)
    return Message(
        role="assistant",
        content=f"{text}\n{lines}" if text else lines,
        id=mid,
        metadata={"tool_calls": raw},
    )


def _result(cid: str, name: str, text: str) -> Packet:
    return Packet(
        id=f"tool:{cid}",
        kind="tool_result",
        content=text,
        metadata={"tool_call_id": cid, "name": name},
    )


#: a recorded agent loop: the task, then three turns of tool calls and their results
LOG = "\n".join(f"line {k}: collected test_{k} PASSED" for k in range(60))
INPUT = CapturedInput(
    query="Fix the failing login test; do not touch the database schema.",
    now=NOW,
    system_instructions="You are a coding agent.",
    history=[
        Message(
            role="user",
            content="Fix the failing login test; do not touch the database schema.",
            id="u0",
        ),
        _assistant("a1", "Run the tests.", [("c1", "bash", {"command": "pytest -q"})]),
        _assistant("a2", "Read the test.", [("c2", "read", {"path": "tests/test_login.py"})]),
        _assistant("a3", "", [("c3", "bash", {"command": "pytest -q -k login"})]),
    ],
    packets=[
        _result("c1", "bash", LOG),
        _result("c2", "read", "def test_login():\n    assert login('a', 'b')\n" * 20),
        _result("c3", "bash", "FAILED tests/test_login.py::test_login - AssertionError"),
    ],
    window=200_000,
)


def _run(**knobs: Any) -> BuildResult:
    return build(INPUT, Config.model_validate(knobs))


def _by_id(res: BuildResult) -> dict[str, Any]:
    return {d.packet_id: d for d in res.decisions}


def _total() -> int:
    conv = conversation(INPUT)
    return MessageCounter(COUNT)(from_parts(conv.parts))


def test_the_request_is_rebuilt_in_the_order_sent() -> None:
    ids = [p.id for p in conversation(INPUT).parts]
    assert ids == ["u0", "a1", "tool:c1", "a2", "tool:c2", "a3", "tool:c3", "builder:task"]


# --------------------------------------------------------------------------- context editing


def test_context_editing_clears_all_but_the_kept_results_past_the_trigger() -> None:
    res = _run(preset="langchain-context-editing", trigger=_total() - 1, keep=1)
    d = _by_id(res)
    for cid in ("c1", "c2"):
        assert d[f"tool:{cid}"].status == Status.TRUNCATED
        assert d[f"tool:{cid}"].reason == Reason.DEGRADED
        assert d[f"tool:{cid}"].tokens_after == COUNT.count("[cleared]")
        text = d[f"tool:{cid}"].reason_text
        assert "ClearToolUsesEdit" in text and "trigger=" in text and "keep=1" in text
    assert d["tool:c3"].status == Status.KEPT and "keep=1" in d["tool:c3"].reason_text
    assert "not a tool result" in d["a1"].reason_text
    sent = {m.id: m.content for m in res.messages or []}
    assert sent["tool:c1"] == sent["tool:c2"] == "[cleared]"
    assert sent["tool:c3"].startswith("FAILED")
    recorded = build(INPUT, Config(preset="recorded"))
    saved = sum(COUNT.count(p.content) - COUNT.count("[cleared]") for p in INPUT.packets[:2])
    assert res.totals.used == recorded.totals.used - saved


def test_context_editing_does_nothing_at_the_trigger() -> None:
    res = _run(preset="langchain-context-editing", trigger=_total(), keep=0)
    recorded = build(INPUT, Config(preset="recorded"))
    assert res.messages == recorded.messages
    assert res.totals.used == recorded.totals.used
    assert all(d.status == Status.KEPT for d in res.decisions)
    assert {d.packet_id for d in res.decisions} == {d.packet_id for d in recorded.decisions}
    d = _by_id(res)
    for pid in ("u0", "a1", "tool:c1", "builder:task"):
        assert f"not over trigger={_total():,}" in d[pid].reason_text, pid


def test_context_editing_spares_excluded_tools_and_clears_inputs() -> None:
    res = _run(
        preset="langchain-context-editing",
        trigger=0,
        keep=0,
        exclude_tools=["read"],
        clear_tool_inputs=True,
        placeholder="[gone]",
    )
    d = _by_id(res)
    assert d["tool:c2"].status == Status.KEPT and "exclude_tools" in d["tool:c2"].reason_text
    sent = {m.id: m for m in res.messages or []}
    assert sent["tool:c1"].content == sent["tool:c3"].content == "[gone]"
    # the cleared calls' arguments become {}, in the metadata and in the call line
    assert sent["a1"].content == "Run the tests.\nbash({})"
    assert sent["a1"].metadata["tool_calls"][0]["arguments"] == "{}"
    assert sent["a2"] == INPUT.history[2]  # its result was spared: its call is as recorded
    assert d["a1"].status == Status.TRUNCATED and "clear_tool_inputs" in d["a1"].reason_text


def test_clear_at_least_stops_once_enough_is_reclaimed() -> None:
    res = _run(preset="langchain-context-editing", trigger=0, keep=0, clear_at_least=1)
    d = _by_id(res)
    # the oldest result alone reclaims more than 1 token: clearing stops there
    assert d["tool:c1"].status == Status.TRUNCATED
    assert d["tool:c2"].status == d["tool:c3"].status == Status.KEPT
    assert "clear_at_least=1 tokens were reclaimed" in d["tool:c2"].reason_text


# --------------------------------------------------------------------------- summarization


def test_summarization_replaces_the_older_messages_with_the_stand_in_summary() -> None:
    res = _run(preset="langchain-summarization", trigger=_total(), keep=2)
    d = _by_id(res)
    # keep 2 cuts between a3's call and its result: the cutoff moves back to a3
    summarized = ["u0", "a1", "tool:c1", "a2", "tool:c2"]
    for pid in summarized:
        assert d[pid].status == Status.SUMMARIZED and d[pid].tokens_after == 0
        assert STAND_IN_LABEL in d[pid].reason_text and "trigger=('tokens'" in d[pid].reason_text
    for pid in ("a3", "tool:c3", "builder:task"):
        assert d[pid].status == Status.KEPT
        assert "after the cutoff keep=('messages', 2) sets" in d[pid].reason_text
    summary = (res.messages or [])[1]
    assert summary.role == "user" and summary.id == "builder:history:summary"
    assert summary.content.startswith("Here is a summary of the conversation to date:\n\n")
    # the stand-in keeps the user's constraint
    assert "do not touch the database schema" in summary.content
    assert d["builder:history:summary"].tokens_after == COUNT.count(summary.content)
    assert [m.id for m in res.messages or []][2:] == ["a3", "tool:c3", None]


def test_summarization_below_the_trigger_sends_the_recording() -> None:
    res = _run(preset="langchain-summarization", trigger=_total() + 1, keep=2)
    assert res.messages == build(INPUT, Config(preset="recorded")).messages
    assert all(
        "under trigger=('tokens'" in d.reason_text
        for d in res.decisions
        if d.packet_id.startswith(("u", "a", "tool:"))
    )


def test_summarization_by_messages() -> None:
    res = _run(preset="langchain-summarization", trigger=8, trigger_kind="messages", keep=1)
    d = _by_id(res)
    assert d["a3"].status == Status.SUMMARIZED and d["builder:task"].status == Status.KEPT
    assert "at or over trigger=('messages', 8)" in d["a3"].reason_text


@pytest.mark.parametrize("knob", ["trigger", "keep"])
def test_summarization_refuses_a_threshold_of_zero(knob: str) -> None:
    with pytest.raises(InputError, match=f"{knob} must be greater than 0"):
        resolve_config(Config.model_validate({"preset": "langchain-summarization", knob: 0}), INPUT)


# --------------------------------------------------------------------------- trim


def test_trim_keeps_the_newest_messages_that_fit() -> None:
    system = 3 + COUNT.count("You are a coding agent.")
    tail = MessageCounter(COUNT)(from_parts(conversation(INPUT).parts)[-2:])
    res = _run(preset="langchain-trim", max_tokens=system + tail, include_system=True)
    d = _by_id(res)
    assert d["builder:instructions"].status == Status.KEPT
    assert [m.id for m in res.messages or []] == [None, "tool:c3", None]
    assert d["a3"].status == Status.DROPPED and d["a3"].reason == Reason.NO_ROOM
    assert "max_tokens=" in d["a3"].reason_text and "strategy=last" in d["a3"].reason_text


def test_trim_start_on_drops_to_a_human_message() -> None:
    res = _run(preset="langchain-trim", max_tokens=_total() - 1, start_on="human")
    d = _by_id(res)
    # u0 does not fit; the run must start on a human message: only the task is one
    assert [m.content for m in res.messages or []] == [INPUT.query]
    assert "start_on='human'" in d["tool:c3"].reason_text
    assert d["builder:instructions"].status == Status.DROPPED


def test_trim_partial_cuts_by_lines() -> None:
    conv_tail = from_parts(conversation(INPUT).parts)
    budget = MessageCounter(COUNT)(conv_tail[2:]) - 30  # tool:c1 (the log) fits only in part
    res = _run(preset="langchain-trim", max_tokens=budget, allow_partial=True)
    d = _by_id(res)
    assert d["tool:c1"].status == Status.TRUNCATED
    cut = next(m for m in res.messages or [] if m.id == "tool:c1").content
    assert LOG.endswith(cut) and 0 < len(cut) < len(LOG) and cut.startswith("line ")


def test_trim_by_message_count() -> None:
    res = _run(preset="langchain-trim", max_tokens=3, token_counter="len")
    assert [m.id for m in res.messages or []] == ["a3", "tool:c3", None]


def test_trim_defaults_to_the_window_less_the_reserve() -> None:
    inp = INPUT.model_copy(update={"output_reserve": 1000})
    cfg = resolve_config(Config(preset="langchain-trim"), inp)
    assert cfg.max_tokens == 199_000 and cfg.strategy == "last" and cfg.start_on == "none"
    assert build(inp, cfg).messages == build(inp, Config(preset="recorded")).messages


@pytest.mark.parametrize("knob", [{"start_on": "human"}, {"include_system": True}])
def test_trim_refuses_what_strategy_first_refuses(knob: dict[str, Any]) -> None:
    cfg = Config.model_validate({"preset": "langchain-trim", "strategy": "first", **knob})
    with pytest.raises(InputError, match=f"{next(iter(knob))} is only valid with strategy last"):
        resolve_config(cfg, INPUT)


# --------------------------------------------------------------------------- knobs, replay


@pytest.mark.parametrize(
    ("preset", "knob"),
    [
        ("langchain-trim", {"trigger": 5}),
        ("langchain-context-editing", {"strategy": "first"}),
        ("langchain-summarization", {"placeholder": "x"}),
        ("ctxscope", {"keep": 2}),
    ],
)
def test_a_preset_refuses_another_policy_s_knob(preset: str, knob: dict[str, Any]) -> None:
    with pytest.raises(InputError, match=next(iter(knob))):
        resolve_config(Config.model_validate({"preset": preset, **knob}), INPUT)


def test_replay_switches_an_imported_session_to_each_policy() -> None:
    traces = load_file(ROOT / "corpus" / "a01_sweagent_marshmallow-1867_function-calling.traj.json")
    for settings in (
        {"preset": "langchain-context-editing", "trigger": 1000},
        {"preset": "langchain-summarization", "trigger": 2000, "keep": 4},
        {"preset": "langchain-trim", "max_tokens": 1500},
    ):
        report = replay(traces, settings, findings=False, workers=1)
        assert report.errors == []
        changed = [t for t in report.turns if t.changed]
        assert changed and all(t.used_after < t.used_before for t in changed), settings


def test_playground_draws_the_policy_s_knobs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import app_support as data

    from ctxcore.knobs import BY_NAME

    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    db = tmp_path / "ctxscope.duckdb"
    config = {"trigger": 0, "keep": 0}
    data.fill(db, data.session("sess-lc", 1, preset="langchain-context-editing", config=config))
    monkeypatch.setenv("CTXSCOPE_DB", str(db))
    at = data.open_page("playground", trace="sess-lc-t0")
    text = at.text_input(key="pg_placeholder")
    assert (text.label, text.help, text.value) == (
        "placeholder",
        BY_NAME["placeholder"].help,
        "[cleared]",
    )
    assert at.number_input(key="pg_trigger").value == 0
    assert at.toggle(key="pg_clear_tool_inputs").label == "clear_tool_inputs"
    assert "pg_max_tokens" not in [s.key for s in at.slider]
    text.set_value("[gone]").run()  # the result fragment runs again with the new text
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    assert any(s.value.startswith("Flipped (") for s in at.subheader)
