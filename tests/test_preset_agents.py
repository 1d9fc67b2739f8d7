"""The SWE-agent and OpenHands policy presets (docs/design.md, "Agent policies"): hand-worked
decisions on small real requests, the sources' own test cases ported, and replays of corpus
SWE-agent trajectories, counted with the real tokenizer and summarized by the real
deterministic summarizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ctxcore.errors import InputError
from ctxcore.formats.load import load_file
from ctxcore.models import BuildResult, Config, Status, Trace
from ctxcore.pipeline import build, resolve_config
from ctxcore.pipeline.agent_policies import (
    ALREADY_ELIDED,
    MASKED,
    Summarizing,
    calls,
    llm_summarizing,
    observation_masking,
    recent_events,
)
from ctxcore.pipeline.gather import HISTORY_SUMMARY_ID
from ctxcore.pipeline.langchain_policies import STAND_IN_LABEL, ChatMsg
from ctxcore.pipeline.recorded import TASK_ID, conversation
from ctxcore.replay import replay
from ctxcore.summarize import default_summarizer
from ctxcore.tokens import get_counter

ROOT = Path(__file__).resolve().parent.parent
COUNT = get_counter("cl100k_base")
#: a real pydantic-ai request: the task, two tool calls and their results
FIXTURES = ROOT / "tests/fixtures/imports"
DEEPSEEK = FIXTURES / "openai-chat/pydantic-ai-deepseek-thinking-tools.request.json"
#: a real mini-swe-agent trajectory: the task, nine steps and their observations
MINI = ROOT / "corpus/a03_mini-swe-agent_github_issue.traj.json"
#: a SWE-agent run recorded with last_n_observations n=5 (its replay_config says so)
SWE_N5 = ROOT / "corpus/a01_sweagent_marshmallow-1867_function-calling.traj.json"
#: a SWE-agent run recorded without a history processor
SWE_RAW = ROOT / "corpus/b03_sweagent_pydicom-1458.traj.json"


def _last(path: Path) -> Trace:
    return load_file(path)[-1]


def _run(trace: Trace, **knobs: Any) -> BuildResult:
    return build(trace.input, Config.model_validate(knobs))


def _by_id(res: BuildResult) -> dict[str, Any]:
    return {d.packet_id: d for d in res.decisions}


def _ids(res: BuildResult) -> list[str]:
    """The ids of the messages sent after the system prompt (the task's message has none)."""
    return [m.id or TASK_ID for m in res.messages or [] if m.role != "system"]


def _sent(res: BuildResult) -> dict[str, str]:
    return {m.id or TASK_ID: m.content for m in res.messages or []}


# --------------------------------------------------------------------------- swe-agent-masking


def test_swe_agent_masking_elides_all_but_the_template_and_the_last_n() -> None:
    t = _last(DEEPSEEK)
    parts = conversation(t.input).parts
    tools = [p.id for p in parts if p.kind == "tool_result"]
    assert [p.id for p in parts][0] == TASK_ID and len(tools) == 2
    res = _run(t, preset="swe-agent-masking", n=1)
    d = _by_id(res)
    # observations: the task (instance template), tools[0], tools[1]; 3 - n=1 = 2 -> [1:2]
    assert d[tools[0]].status is Status.TRUNCATED
    assert "LastNObservations(n=1, polling=1)" in d[tools[0]].reason_text
    assert _sent(res)[tools[0]] == "Old environment output: (1 lines omitted)"
    assert d[tools[0]].tokens_after == COUNT.count("Old environment output: (1 lines omitted)")
    assert d[tools[1]].status is Status.KEPT and "last n=1" in d[tools[1]].reason_text
    assert d[TASK_ID].status is Status.KEPT and "instance template" in d[TASK_ID].reason_text
    recorded = _run(t, preset="recorded")
    saved = d[tools[0]].tokens_before - d[tools[0]].tokens_after
    assert res.totals.used == recorded.totals.used - saved


def test_swe_agent_masking_polling_waits_for_a_full_poll() -> None:
    t = _last(MINI)
    obs = [p.id for p in conversation(t.input).parts if p.kind == "tool_result"]
    assert len(obs) == 9  # with the task, 10 observations
    # n=2, polling=3: (10 // 3) * 3 - 2 = 7 -> observations [1:7], the first 6 tool results
    d = _by_id(_run(t, preset="swe-agent-masking", n=2, polling=3))
    assert [o for o in obs if d[o].status is Status.TRUNCATED] == obs[:6]
    # polling=1: 10 - 2 = 8 -> [1:8], the first 7
    d = _by_id(_run(t, preset="swe-agent-masking", n=2))
    assert [o for o in obs if d[o].status is Status.TRUNCATED] == obs[:7]


def test_swe_agent_masking_counts_the_lines_of_each_elided_output() -> None:
    t = _last(MINI)
    parts = {p.id: p.message.content for p in conversation(t.input).parts}
    res = _run(t, preset="swe-agent-masking", n=1)
    for pid, text in _sent(res).items():
        if pid.startswith("tool:") and text != parts[pid]:
            assert text == f"Old environment output: ({len(parts[pid].splitlines())} lines omitted)"


def test_swe_agent_source_test_last_n_observations() -> None:
    """SWE-agent's tests/test_history_processors.py::test_last_n_observations (at 3ea751c0):
    with n=3, total observations - 3 - 1 are elided (the instance template is kept)."""
    t = _last(SWE_RAW)
    parts = conversation(t.input).parts
    total = 1 + sum(1 for p in parts if p.kind == "tool_result")
    res = _run(t, preset="swe-agent-masking", n=3)
    elided = [d for d in res.decisions if d.status is Status.TRUNCATED]
    assert len(elided) == total - 3 - 1
    assert all(ALREADY_ELIDED.fullmatch(_sent(res)[d.packet_id]) for d in elided)


def test_swe_agent_masking_reproduces_a_run_recorded_with_last_n_observations() -> None:
    """a01 was recorded with SWE-agent's last_n_observations n=5 (its replay_config). A
    SWE-agent trajectory stores with each step the processed history after that step's
    observation came in, which the import leaves out of the request; so each recorded call
    shows n=5 applied to one observation more than it holds, which is n=4 on what it holds.
    At every call the preset with n=4 elides exactly the observations SWE-agent had elided,
    and sends the same tokens. (The trajectory reuses tool call ids from its 8th call on; the
    rebuild cannot put those results in the order sent, so those calls are left out.)"""
    checked = 0
    for t in load_file(SWE_N5):
        parts = conversation(t.input).parts
        if any("#" in p.id for p in parts):
            continue
        checked += 1
        recorded_elided = {p.id for p in parts if ALREADY_ELIDED.fullmatch(p.message.content)}
        res = _run(t, preset="swe-agent-masking", n=4)
        ours = {d.packet_id for d in res.decisions if d.status is Status.TRUNCATED}
        assert ours == recorded_elided, t.turn
        recorded = _run(t, preset="recorded")
        assert res.messages == recorded.messages
        assert res.totals.used == recorded.totals.used
    assert checked == 7  # the calls before the first reused id


def test_replay_swe_agent_masking_changes_the_turns_past_n_observations() -> None:
    traces = load_file(SWE_RAW)
    report = replay(traces, {"preset": "swe-agent-masking"}, findings=False, workers=1)
    assert report.errors == []
    observations = {
        t.turn: 1 + sum(1 for p in conversation(t.input).parts if p.kind == "tool_result")
        for t in traces
    }
    should = sorted(turn for turn, n_obs in observations.items() if n_obs - 10 > 1)
    assert should  # the session is long enough to show it
    assert [t.turn for t in report.turns if t.changed] == should
    assert all(t.used_after < t.used_before for t in report.turns if t.changed)
    unchanged = replay(traces, {"preset": "recorded"}, findings=False, workers=1)
    assert not [t for t in unchanged.turns if t.changed]


# --------------------------------------------------------------------------- OpenHands


def _events(*spec: str) -> list[ChatMsg]:
    """Events as the OpenHands tests make them: ``E`` an action, ``O`` an observation."""
    return [
        ChatMsg("assistant", f"Event {k + 1}", f"e{k}", source=k)
        if s == "E"
        else ChatMsg("tool", f"Observation {k + 1}", f"e{k}", source=k)
        for k, s in enumerate(spec)
    ]


def test_openhands_source_test_observation_masking_respects_attention_window() -> None:
    """OpenHands' tests/unit/memory/condenser/test_condenser.py (at 156d0686)
    ::test_observation_masking_condenser_respects_attention_window."""
    events = _events("E", "O", "E", "E", "O")
    out, fates = observation_masking(events, 3)
    assert len(out) == len(events)
    for i, (event, condensed) in enumerate(zip(events, out, strict=True)):
        if i < len(events) - 3 and event.role == "tool":
            assert condensed.content == MASKED and fates[i].action == "cleared"
        else:
            assert condensed == event and fates[i].action == "kept"


def test_openhands_source_test_recent_events() -> None:
    """OpenHands' test_condenser.py (at 156d0686)::test_recent_events_condenser."""
    events = _events("E", "E", "E", "E", "E")

    def kept(first: int, most: int) -> list[str]:
        return [e.content for e in recent_events(events, first, most)[0]]

    assert kept(1, 5) == [e.content for e in events]
    assert kept(1, 3) == ["Event 1", "Event 4", "Event 5"]
    assert kept(1, 2) == ["Event 1", "Event 5"]
    assert kept(2, 3) == ["Event 1", "Event 2", "Event 5"]
    # the source's slice would send Event 1 twice here: each event is sent once
    assert kept(1, 100) == [e.content for e in events]
    # no room left for a tail: the source's view[-0:] is the whole view, so all are kept
    assert kept(2, 2) == [e.content for e in events]


def test_openhands_source_test_summarizing_keeps_first_and_summary_events() -> None:
    """OpenHands' test_condenser.py (at 156d0686)
    ::test_llm_summarizing_condenser_keeps_first_and_summary_events, max_size 10 and
    keep_first 3 over 100 events, each a model call: the view never passes max_size, keeps
    its first events, and holds the summary right after them once condensed. Here a
    condensation is sent at the call that triggers it (the agent steps again at once), so
    the view falls to max_size // 2."""
    spec = Summarizing(max_size=10, keep_first=3)
    events = _events(*("E" * 100))
    write = default_summarizer()
    for i in range(1, len(events) + 1):
        assert calls(events[:i]) == [*range(i), i]
        view, fates = llm_summarizing(events[:i], spec, write)
        assert len(view) <= 10
        assert view[:3] == events[: min(3, i)]
        if i > 10:
            assert view[3].id == HISTORY_SUMMARY_ID and view[3].role == "user"
            assert view[-1] == events[i - 1]
            assert any(f.action == "summarized" for f in fates.values())
        else:
            assert view == events[:i]


def test_openhands_observation_masking_preset_masks_tool_results_outside_the_window() -> None:
    t = _last(MINI)
    parts = conversation(t.input).parts
    # events: the system prompt, then every part; attention_window=3 keeps the last 3
    events = ["system", *(p.id for p in parts)]
    res = _run(t, preset="openhands-observation-masking", attention_window=3)
    d = _by_id(res)
    edge = len(events) - 3
    for k, pid in enumerate(events[1:], start=1):
        masked = pid.startswith("tool:") and k < edge
        assert (d[pid].status is Status.TRUNCATED) == masked, pid
        if masked:
            assert _sent(res)[pid] == MASKED
            assert "ObservationMaskingCondenser(attention_window=3)" in d[pid].reason_text


def test_openhands_recent_events_preset_drops_the_middle() -> None:
    t = _last(MINI)
    ids = [p.id for p in conversation(t.input).parts]
    res = _run(t, preset="openhands-recent-events", keep_first=2, max_events=5)
    # events: system, ids...; keep the first 2 (system, task) and the last 3
    assert _ids(res) == [ids[0], *ids[-3:]]
    d = _by_id(res)
    assert all(d[i].status is Status.DROPPED for i in ids[1:-3])
    assert "max_events=5" in d[ids[1]].reason_text


def test_openhands_conversation_window_acts_only_over_max_tokens() -> None:
    t = _last(MINI)
    used = _run(t, preset="recorded").totals.used
    fits = _run(t, preset="openhands-conversation-window", max_tokens=used)
    assert fits.totals.used == used
    ids = [p.id for p in conversation(t.input).parts]
    res = _run(t, preset="openhands-conversation-window", max_tokens=used - 1)
    d = _by_id(res)
    # events: system and the first user message (the task) essential; of the others, the
    # later half kept, without the observations that would lead it
    rest = ids[1:]
    assert len(rest) == 18
    later = rest[-9:]
    while later and later[0].startswith("tool:"):
        later = later[1:]
    assert _ids(res) == [ids[0], *later]
    assert all(d[i].status is Status.DROPPED for i in rest if i not in later)
    assert "over max_tokens" in d[rest[0]].reason_text


def test_openhands_summarizing_preset_labels_the_stand_in() -> None:
    t = _last(SWE_RAW)
    res = _run(t, preset="openhands-summarizing", max_size=8, keep_first=1)
    d = _by_id(res)
    summarized = [x for x in res.decisions if x.status is Status.SUMMARIZED]
    assert summarized and all(STAND_IN_LABEL in x.reason_text for x in summarized)
    assert HISTORY_SUMMARY_ID in d
    assert len(res.messages or []) <= 8  # the events sent, the system prompt the first
    assert res.totals.used < _run(t, preset="recorded").totals.used


@pytest.mark.parametrize(
    ("knobs", "match"),
    [
        ({"preset": "openhands-summarizing", "max_size": 4, "keep_first": 2}, "keep_first"),
        ({"preset": "openhands-summarizing", "max_size": 4, "keep_first": 1}, "max_size"),
        ({"preset": "swe-agent-masking", "attention_window": 3}, "attention_window"),
        ({"preset": "openhands-recent-events", "n": 3}, "n"),
        ({"preset": "langchain-trim", "max_events": 3}, "max_events"),
    ],
)
def test_refusals(knobs: dict[str, Any], match: str) -> None:
    with pytest.raises(InputError, match=match):
        resolve_config(Config.model_validate(knobs), _last(MINI).input)


def test_knobs_resolve_to_their_sources_defaults() -> None:
    t = _last(MINI).input
    swe = resolve_config(Config(preset="swe-agent-masking"), t)
    assert (swe.n, swe.polling) == (10, 1)
    mask = resolve_config(Config(preset="openhands-observation-masking"), t)
    assert mask.attention_window == 100
    recent = resolve_config(Config(preset="openhands-recent-events"), t)
    assert (recent.keep_first, recent.max_events) == (1, 100)
    summ = resolve_config(Config(preset="openhands-summarizing"), t)
    assert (summ.max_size, summ.keep_first) == (100, 1)
    hyb = resolve_config(Config(preset="masking-summary-hybrid"), t)
    assert (hyb.summarize_every_n_turns, hyb.keep_last_m_turns, hyb.n) == (43, 10, 10)


# --------------------------------------------------------------------------- hybrid


def test_hybrid_checkpoints_old_turns_then_masks() -> None:
    t = _last(SWE_RAW)
    parts = conversation(t.input).parts
    res = _run(
        t, preset="masking-summary-hybrid", summarize_every_n_turns=3, keep_last_m_turns=2, n=2
    )
    d = _by_id(res)
    task_at = next(k for k, p in enumerate(parts) if p.id == TASK_ID)
    steps = [p.id for p in parts[task_at + 1 :]]
    # 11 (action, observation) turns: replayed call by call, a checkpoint each time 3 + 2
    # turns wait: after calls with 5, 8 and 11 turns, 9 turns are summarized, 2 kept
    summarized = [x.packet_id for x in res.decisions if x.status is Status.SUMMARIZED]
    assert summarized == steps[: 9 * 2]
    assert all(STAND_IN_LABEL in d[i].reason_text for i in summarized)
    # static checkpointing: the third checkpoint alone (the first two folded in), then the
    # last 2 turns
    third = f"{HISTORY_SUMMARY_ID}:3"
    assert _ids(res) == [p.id for p in parts[: task_at + 1]] + [third] + steps[-4:]
    assert _sent(res)[third].startswith("Checkpoint for the last 3 turns:\n")
    assert d[third].tokens_after == COUNT.count(_sent(res)[third])
    # then LastNObservations(n=2): observations are the task and the 2 kept results
    assert all(d[i].status is Status.KEPT for i in steps[-4:])


def test_hybrid_masks_alone_until_enough_turns() -> None:
    t = _last(SWE_RAW)
    hybrid = _run(t, preset="masking-summary-hybrid")
    masking = _run(t, preset="swe-agent-masking")
    assert hybrid.messages == masking.messages
    assert hybrid.totals.used == masking.totals.used
    assert any("fewer than 43 + 10 turns" in x.reason_text for x in hybrid.decisions)
