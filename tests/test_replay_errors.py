"""One turn that cannot be replayed never costs the others.

The real case: the demo session ``zh-opencode-codesummary-ctxscope`` replayed with
``max_tokens=800``. On 9 of its 36 turns the must-keep items alone no longer fit and the
ctxscope preset fails loudly (it never drops a must-keep item silently); the other 27 turns
replay. Those 9 are reported as turns whose build fails only with the new settings, a loss
of everything they kept: ``--fail-on`` and ``assert_no_new_losses`` count them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ctxcore.cli import main
from ctxcore.errors import InputError
from ctxcore.models import Trace
from ctxcore.replay import TraceJson, replay, replay_sessions
from ctxcore.testing import assert_no_new_losses

DEMO = Path(__file__).resolve().parent.parent / "ctxcore" / "data" / "demo"
SESSION = DEMO / "zh-opencode-codesummary-ctxscope.jsonl"


@pytest.fixture(scope="module")
def traces() -> list[Trace]:
    return [Trace.model_validate_json(x) for x in SESSION.read_text().splitlines() if x.strip()]


def test_turns_that_fail_only_after_are_errors_and_the_rest_replays(traces: list[Trace]) -> None:
    report = replay(traces, {"max_tokens": 800}, findings=False, workers=1)
    failed = report.errors
    assert [e.side for e in failed] == ["after"] * len(failed)
    assert failed and report.turns
    assert all("must-keep items alone need" in e.message for e in failed)
    # every recorded turn is accounted for once: compared or failed
    seen = sorted([t.turn for t in report.turns] + [e.turn for e in failed])
    assert seen == sorted(t.turn for t in traces)
    assert report.new_failures == failed
    assert report.worst_loss() == "error"
    # the turns that did replay are exactly what a replay of them alone reports
    ok = {t.trace_id for t in report.turns}
    alone = replay([t for t in traces if t.trace_id in ok], {"max_tokens": 800}, findings=False)
    assert [t.model_dump() for t in alone.turns] == [t.model_dump() for t in report.turns]


def test_findings_are_compared_on_the_turns_that_built(traces: list[Trace]) -> None:
    report = replay(traces[:12], {"max_tokens": 800}, findings=True, workers=1)
    assert report.turns and report.findings_compared
    assert sum(report.findings_before.values()) > 0


def test_assert_no_new_losses_names_the_failed_builds(traces: list[Trace]) -> None:
    report = replay(traces, {"max_tokens": 800}, findings=False, workers=1)
    with pytest.raises(AssertionError, match="the build fails with the new settings"):
        assert_no_new_losses(report, "error")


def test_settings_every_turn_refuses_are_one_error(traces: list[Trace]) -> None:
    with pytest.raises(InputError, match="no turn could be replayed.*output_reserve"):
        replay(traces[:3], {"max_tokens": 300}, findings=False, workers=1)


def test_an_unreadable_stored_trace_is_an_error_of_its_own(traces: list[Trace]) -> None:
    good = [TraceJson(t.trace_id, t.to_json().encode()) for t in traces[:4]]
    bad = TraceJson("broken-1", b'{"trace_id": "broken-1", "turn": "x"')
    report = replay_sessions([[*good[:2], bad, *good[2:]]], {"max_tokens": 4000}, findings=False)
    assert [(e.trace_id, e.side) for e in report.errors] == [("broken-1", "read")]
    assert "cannot be read" in report.errors[0].message
    assert len(report.turns) == 4
    assert report.new_failures == []


def test_a_damaged_compressed_trace_is_an_error_of_its_own(traces: list[Trace]) -> None:
    from ctxcore.store.codec import pack_json, unpack_json

    packed = [(t.trace_id, pack_json(t.to_json().encode())) for t in traces[:4]]
    good = [
        TraceJson(tid, blob, size=len(traces[k].to_json().encode()), unpack=unpack_json)
        for k, (tid, blob) in enumerate(packed)
    ]
    assert [g.load() for g in good] == traces[:4]
    bad = TraceJson("damaged-1", packed[0][1][:-9], size=100, unpack=unpack_json)
    report = replay_sessions([[*good[:2], bad, *good[2:]]], {"max_tokens": 4000}, findings=False)
    assert [(e.trace_id, e.side) for e in report.errors] == [("damaged-1", "read")]
    assert "cannot be unpacked" in report.errors[0].message
    assert len(report.turns) == 4


def test_cli_prints_the_failed_turns_and_fails_on_them(
    tmp_path: Path, traces: list[Trace], capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text("".join(t.to_json() + "\n" for t in traces), encoding="utf-8")
    args = ["replay", str(path), "--set", "max_tokens=800", "--no-findings"]
    assert main([*args, "--fail-on", "error"]) == 1
    captured = capsys.readouterr()
    n = len(replay(traces, {"max_tokens": 800}, findings=False).errors)
    assert f"turns not compared ({n}):" in captured.out
    assert "after failed: must-keep items alone need" in captured.out
    assert f"{n} build(s) that fail only with the new settings" in captured.err
    assert main([*args, "--fail-on", "never"]) == 0


def test_a_broken_line_of_a_trace_file_is_its_own_error_and_the_rest_replays(
    tmp_path: Path, traces: list[Trace], capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [t.to_json() for t in traces[:6]]
    cut = lines[2][: len(lines[2]) // 2]  # a line cut short, as by a crash mid-write
    wrong = re.sub(r'"turn":\d+', '"turn":"four"', lines[4], count=1)  # a wrong type
    assert wrong != lines[4]
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join([*lines[:2], cut, lines[3], wrong, lines[5]]) + "\n")
    args = ["replay", str(path), "--set", "max_tokens=4000", "--no-findings", "--format", "json"]
    assert main([*args, "--fail-on", "never"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sorted(t["trace_id"] for t in out["turns"]) == sorted(
        traces[i].trace_id for i in (0, 1, 3, 5)
    )
    errors = [(e["side"], e["message"].split(": ")[0]) for e in out["errors"]]
    assert errors == [("read", f"{path}:3"), ("read", f"{path}:5")]
    assert "turn" in out["errors"][1]["message"]  # names the field that was wrong


def test_a_trace_file_with_no_readable_line_is_refused_with_the_first_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text('{"schema": \n[1]\n')
    assert main(["replay", str(path), "--no-findings"]) == 2
    err = capsys.readouterr().err
    assert f"no trace could be read; the first error: {path}:1: malformed JSON" in err
