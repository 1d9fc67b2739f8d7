"""Replay (issue 16): recorded settings reproduce every decision; a known change flips the
expected packets at the expected turns; ``assert_no_new_losses``; the parallel path gives the
same report as the serial one; variants never overwrite recorded traces.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import ctxcore
from ctxcore.loading import parse_json, trace_from_obj
from ctxcore.models import Trace
from ctxcore.pipeline import build_trace
from ctxcore.pipeline.recorded import RECORDED_BASED
from ctxcore.replay import REPLAY_TAG, ReplayReport, replay, variant, variant_id
from ctxcore.settings import PRESET_NAMES
from ctxcore.testing import assert_no_new_losses

DEMO = Path(__file__).resolve().parent.parent / "ctxcore" / "data" / "demo"
HELLO = "swe-pytest-7571-hello-agents.jsonl"


def record(t: Trace) -> Trace:
    """The demo turn as this checkout's builder records it.

    The bundled demo is regenerated after a preset changes (``ctxscope demo``); recording
    its inputs again keeps these tests about replay, not about whether the demo is current.
    """
    return build_trace(
        t.input,
        t.config,
        trace_id=t.trace_id,
        session_id=t.session_id,
        turn=t.turn,
        created_at=t.created_at,
        tags=list(t.tags),
    )


def load(name: str) -> list[Trace]:
    path = DEMO / name
    return [
        record(trace_from_obj(parse_json(line, str(path)), str(path)))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


TRACEBACK = (
    "\nTraceback (most recent call last):\n"
    '  File "src/_pytest/logging.py", line 357, in set_level\n'
    "AssertionError: the handler level was not restored\n"
)


def with_traceback(traces: list[Trace], packet_id: str) -> list[Trace]:
    """The session with a traceback in ``packet_id``'s text, recorded again: error evidence."""
    out = []
    for t in traces:
        packets = [
            p.model_copy(update={"content": p.content + TRACEBACK}) if p.id == packet_id else p
            for p in t.input.packets
        ]
        inp = t.input.model_copy(update={"packets": packets})
        out.append(record(t.model_copy(update={"input": inp})))
    return out


def demo_by_preset() -> dict[str, list[Trace]]:
    out: dict[str, list[Trace]] = {}
    for path in sorted(DEMO.glob("*.jsonl")):
        for t in load(path.name):
            out.setdefault(t.config.preset, []).append(t)
    # the demo records no other agent's requests: the presets that rebuild a recorded request
    # (docs/design.md, "recorded") take the ctxscope sessions' requests as recorded
    for name in RECORDED_BASED:
        out[name] = [variant(t, {"preset": name}) for t in out["ctxscope"]]
    return out


@pytest.fixture(scope="module")
def by_preset() -> dict[str, list[Trace]]:
    return demo_by_preset()


@pytest.mark.parametrize("preset", PRESET_NAMES)
def test_recorded_settings_reproduce_every_decision(
    by_preset: dict[str, list[Trace]], preset: str
) -> None:
    traces = by_preset[preset]
    assert traces, f"the demo has no {preset} session"
    # an empty patch rebuilds every turn with exactly its recorded config
    report = replay(traces, {}, findings=False, workers=1)
    assert len(report.turns) == len(traces)
    flips = [(t.session_id, t.turn, f.packet_id) for t in report.turns for f in t.flips]
    assert flips == []
    assert all(t.used_before == t.used_after for t in report.turns)
    assert all(t.budget_before == t.budget_after for t in report.turns)
    assert all(t.after_id == variant_id(t.trace_id, {}) for t in report.turns)
    assert report.tokens_delta == 0
    assert_no_new_losses(report, "info")


def test_recorded_settings_reproduce_the_findings_too() -> None:
    report = replay(load(HELLO), {}, workers=1)
    assert report.findings_compared
    assert report.findings_before == report.findings_after
    assert all(not t.findings_added and not t.findings_cleared for t in report.turns)
    assert all(x.before_turn == x.after_turn for x in report.first_lost)


def test_a_smaller_budget_flips_the_expected_packets_at_the_expected_turns() -> None:
    report = replay(load(HELLO), {"max_tokens": 2000}, findings=False, workers=1)
    turns = {t.turn: t for t in report.turns}
    assert turns[5].budget_before > turns[5].budget_after

    def lost(turn: int) -> dict[str, str | None]:
        return {
            f.packet_id: f.loss
            for f in turns[turn].flips
            if f.loss is not None and not f.packet_id.startswith("builder:history")
        }

    assert lost(10) == {}
    assert lost(11) == {"tool:call_7": "warning"}
    assert lost(12) == {"tool:call_7": "warning", "tool:call_8": "warning"}
    assert lost(37)["tool:call_36"] == "warning"
    assert report.turns_losing_must_keep == []  # no must-keep packet or error evidence lost
    # a packet out on both sides is a sideways change, not a loss
    sideways = [f for f in turns[5].flips if f.packet_id.startswith("task:")]
    assert [(f.before, f.after, f.loss) for f in sideways] == [("not_rendered", "dropped", None)]
    first = {x.item: (x.before_turn, x.after_turn) for x in report.first_lost}
    assert first["tool:call_7"] == (None, 11)
    assert first["tool:call_8"] == (None, 12)
    assert report.tokens_delta < 0
    assert_no_new_losses(report, "error")
    with pytest.raises(AssertionError, match=r"turn 11 .*tool:call_7 kept → dropped"):
        assert_no_new_losses(report)


def test_an_item_the_new_settings_drop_from_its_first_turn_is_lost_there_not_never() -> None:
    """tool:call_12 arrives at turn 13: the recording keeps it until turn 37, a 3,000 budget
    drops it from turn 13 on. It was never in that side's prompt, and it is lost at 13 all
    the same (it printed "37 → never", which read as a fix)."""
    report = replay(load(HELLO), {"max_tokens": 3000}, findings=False, workers=1)
    turns = {t.turn: t for t in report.turns}
    flips = {f.packet_id: (f.before, f.after) for f in turns[13].flips}
    assert flips["tool:call_12"] == ("kept", "dropped")
    first = {x.item: (x.before_turn, x.after_turn) for x in report.first_lost}
    assert first["tool:call_12"] == (37, 13)
    assert first["tool:call_36"] == (None, 37)  # was missing: never in the prompt after
    # every packet lost at a turn on either side has that turn or an earlier one as its first
    for t in report.turns:
        for f in t.losses("warning"):
            after = first[f.packet_id][1]
            assert after is not None and after <= t.turn, (t.turn, f.packet_id, after)


def test_a_changed_turn_is_one_whose_context_changed_with_or_without_findings() -> None:
    """One definition for the CLI and the app: the findings are compared only when asked
    for, so they do not make a turn "changed" (14 changed in the CLI, 9 in the app)."""
    traces = load(HELLO)
    plain = replay(traces, {"max_tokens": 3000}, findings=False, workers=1)
    full = replay(traces, {"max_tokens": 3000}, workers=1)
    assert [t.turn for t in full.changed_turns] == [t.turn for t in plain.changed_turns]
    assert {t.turn for t in plain.changed_turns} == {
        t.turn for t in plain.turns if t.flips or t.used_before != t.used_after
    }
    assert plain.findings_only_turns == []
    only = full.findings_only_turns
    assert only and all(not t.flips and t.used_before == t.used_after for t in only)
    assert all(t.findings_added or t.findings_cleared for t in only)


def test_error_evidence_dropped_is_an_error_level_loss() -> None:
    traces = with_traceback(load(HELLO), "tool:call_7")
    report = replay(traces, {"max_tokens": 2000}, findings=False, workers=1)
    errors = [(t.turn, f.packet_id) for t, f in report.losses("error")]
    assert errors == [(n, "tool:call_7") for n in (11, 12, 13, 14, 15, 16, 37, 38, 39)]
    assert all(f.error_evidence for _, f in report.losses("error"))
    with pytest.raises(AssertionError, match=r"turn 11 .*: error tool:call_7 kept → dropped"):
        assert_no_new_losses(report, "error")


def test_against_compares_two_settings_not_the_recording() -> None:
    report = replay(load(HELLO), {"max_tokens": 8000}, against={"max_tokens": 2000}, workers=1)
    assert report.before == '{"max_tokens": 2000}'
    assert all(t.before_id != t.trace_id for t in report.turns)
    assert report.tokens_delta > 0
    assert report.losses("warning") == []
    assert_no_new_losses(report)
    assert sum(report.findings_after.values()) < sum(report.findings_before.values())


def test_a_window_is_a_fact_of_the_input_and_the_budget_follows_it() -> None:
    t = load("zh-opencode-codesummary-ctxscope.jsonl")[-1]
    v = variant(t, {"window": 12000})
    assert v.input.window == 12000 and t.input.window != 12000
    assert v.result is not None and t.result is not None
    assert v.result.report.budget > t.result.report.budget
    assert v.source_trace_id == t.trace_id and REPLAY_TAG in v.tags
    assert v.trace_id == variant_id(t.trace_id, {"window": 12000}) != t.trace_id
    assert variant(t, None) is t  # the recorded side is the recording itself
    # the hello-agents presets never read the window: refused rather than ignored
    with pytest.raises(ctxcore.InputError, match="preset hello-agents does not read window"):
        variant(load(HELLO)[-1], {"window": 12000})


@pytest.mark.slow
def test_the_parallel_replay_gives_the_serial_report() -> None:
    traces = [*load(HELLO), *load("zh-opencode-codesummary-ctxscope.jsonl")]
    serial = replay(traces, {"max_tokens": 3000}, findings=False, workers=1)
    parallel = replay(traces, {"max_tokens": 3000}, findings=False, workers=2)
    assert parallel.turns == serial.turns
    assert parallel.first_lost == serial.first_lost


def test_the_report_is_the_public_typed_object() -> None:
    report = ctxcore.replay.replay(load(HELLO)[:2], {"max_tokens": 3000}, workers=1)
    assert isinstance(report, ctxcore.ReplayReport)
    again = ReplayReport.model_validate_json(report.model_dump_json())
    assert again.turns == report.turns
    assert again.variants == []


def test_a_bad_setting_is_an_input_error() -> None:
    with pytest.raises(ctxcore.InputError):
        replay(load(HELLO)[:1], {"max_tokens": -5}, workers=1)
    with pytest.raises(ctxcore.InputError):
        replay([], {}, workers=1)
