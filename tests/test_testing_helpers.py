"""``ctxcore.testing``: context regression assertions for a user's own pytest suite.

The helpers must pass when the claim holds, fail with a message that shows the decision
(status, reason code and sentence, rank, score, tokens) and the verified fix when it does
not, and accept a trace, a captured input, a dict or a path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ctxcore.errors import InputError
from ctxcore.models import CapturedInput, Config, Packet, Status, Trace
from ctxcore.pipeline import build_trace
from ctxcore.testing import assert_dropped, assert_kept, assert_no_findings, resolve_trace

ROOT = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 1, 16, 12, 0, tzinfo=UTC)
QUERY = "fix qualname autodoc failure"


def captured(corpus: Path) -> CapturedInput:
    grep = (
        QUERY
        + "\n"
        + (corpus / "d04_grep_r_qualname_sphinx.txt").read_text(encoding="utf-8")[:6000]
    )
    failure = (
        "fix qualname\n"
        + (corpus / "d01_pytest_reportingdemo_44_failures.rst").read_text(encoding="utf-8")[:3000]
    )
    return CapturedInput(
        query=QUERY,
        now=NOW,
        packets=[
            Packet(id="tool:grep", kind="tool_result", content=grep, timestamp=NOW),
            Packet(
                id="tool:pytest",
                kind="tool_result",
                content=failure,
                timestamp=NOW - timedelta(minutes=30),
                metadata={"command": "pytest"},
            ),
        ],
    )


SMALL = {"preset": "hello-agents", "max_tokens": 2500}
LARGE = {"preset": "hello-agents", "max_tokens": 20_000}


def test_assert_kept_passes_and_returns_the_decision(corpus: Path) -> None:
    d = assert_kept(captured(corpus), "tool:pytest", config=LARGE)
    assert d.packet_id == "tool:pytest" and d.status == Status.KEPT


def test_assert_kept_failure_shows_decision_reason_and_fix(corpus: Path) -> None:
    with pytest.raises(AssertionError) as exc:
        assert_kept(captured(corpus), "tool:pytest", config=SMALL)
    msg = str(exc.value)
    assert "expected 'tool:pytest' to be kept/truncated, but it was dropped (NO_ROOM:" in msg
    assert "rank 2" in msg and "score" in msg and "tokens" in msg
    assert "config: preset=hello-agents, max_tokens=2500" in msg
    assert "fix: max_tokens +" in msg and "verified by re-running hello-agents" in msg


def test_assert_dropped(corpus: Path) -> None:
    assert assert_dropped(captured(corpus), "tool:pytest", config=SMALL).status == Status.DROPPED
    with pytest.raises(
        AssertionError, match=r"to be dropped/filtered/not_rendered, but it was kept \(FITS"
    ):
        assert_dropped(captured(corpus), "tool:pytest", config=LARGE)


def test_unknown_packet_id_suggests_close_ones(corpus: Path) -> None:
    with pytest.raises(
        AssertionError, match=r"no decision for packet 'tool:pytets'; did you mean 'tool:pytest'"
    ):
        assert_kept(captured(corpus), "tool:pytets", config=LARGE)


def test_a_recorded_trace_is_judged_as_recorded_unless_config_is_given(corpus: Path) -> None:
    trace = build_trace(
        captured(corpus), Config(preset="hello-agents", max_tokens=2500), trace_id="rec"
    )
    assert_dropped(trace, "tool:pytest")  # as recorded
    # with a config patch, the captured input is re-built with the trace's config + patch
    d = assert_kept(trace, "tool:pytest", config={"max_tokens": 20_000})
    assert d.status == Status.KEPT
    rebuilt = resolve_trace(trace, {"max_tokens": 20_000})
    assert rebuilt.config.preset == "hello-agents" and rebuilt.source_trace_id == "rec"


def test_paths_and_dicts_are_accepted(corpus: Path, tmp_path: Path) -> None:
    trace = build_trace(
        captured(corpus), Config(preset="hello-agents", max_tokens=2500), trace_id="f"
    )
    tfile = tmp_path / "turn.json"
    tfile.write_text(trace.to_json(), encoding="utf-8")
    assert_dropped(str(tfile), "tool:pytest")
    assert_dropped(tfile, "tool:pytest")
    inp_file = tmp_path / "input.json"
    inp_file.write_text(captured(corpus).model_dump_json(), encoding="utf-8")
    assert_kept(inp_file, "tool:pytest", config=LARGE)
    assert_kept(json.loads(inp_file.read_text()), "tool:pytest", config=LARGE)
    assert_dropped(trace.to_dict(), "tool:pytest")


def test_bad_inputs_are_input_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(InputError, match="malformed JSON"):
        assert_kept(bad, "x")
    with pytest.raises(InputError, match="expected a Trace"):
        assert_kept(42, "x")  # type: ignore[arg-type]


def test_assert_no_findings(corpus: Path) -> None:
    # the clean case: the failure fits, nothing is wrong
    clean = captured(corpus).model_copy(update={"packets": captured(corpus).packets[1:]})
    assert assert_no_findings(clean, config=LARGE) == []
    # the flooded case: a must-keep failure log dropped by a grep dump
    inp = captured(corpus)
    must = inp.packets[1].model_copy(update={"must_keep": True})
    flooded = inp.model_copy(update={"packets": [inp.packets[0], must]})
    with pytest.raises(AssertionError) as exc:
        assert_no_findings(flooded, config=SMALL)
    msg = str(exc.value)
    assert "error must_have_lost: must-keep packet tool:pytest was dropped" in msg
    assert "[tool:pytest]" in msg and "fix: max_tokens +" in msg
    # ignoring those detectors (the dropped log is also lost error evidence) and raising
    # the bar lets it pass, and returns what is left
    lost = ("must_have_lost", "error_evidence_lost")
    rest = assert_no_findings(flooded, config=SMALL, min_severity="error", ignore=lost)
    assert all(f.severity != "error" or f.detector in lost for f in rest)
    with pytest.raises(InputError, match="unknown detector"):
        assert_no_findings(flooded, config=SMALL, ignore=("nope",))


def test_severity_threshold(corpus: Path) -> None:
    inp = captured(corpus)
    unlabelled = inp.packets[0].model_copy(update={"id": "0", "kind": "retrieval"})
    warn_only = inp.model_copy(update={"packets": [unlabelled]})
    trace: Trace = resolve_trace(warn_only, LARGE)
    assert_no_findings(trace, min_severity="error")
    with pytest.raises(AssertionError, match="unlabelled_evidence"):
        assert_no_findings(trace, min_severity="warning")


@pytest.mark.slow
def test_helpers_in_a_users_own_pytest_suite(corpus: Path, tmp_path: Path) -> None:
    inp = tmp_path / "turn14.json"
    inp.write_text(captured(corpus).model_dump_json(), encoding="utf-8")
    suite = tmp_path / "test_context.py"
    suite.write_text(
        "from ctxcore.testing import assert_kept\n"
        f"INPUT = {str(inp)!r}\n"
        "CFG = {'preset': 'hello-agents'}\n"
        "def test_failure_log_stays():\n"
        "    assert_kept(INPUT, 'tool:pytest', config={**CFG, 'max_tokens': 20000})\n"
        "def test_failure_log_stays_small_window():\n"
        "    assert_kept(INPUT, 'tool:pytest', config={**CFG, 'max_tokens': 2500})\n",
        encoding="utf-8",
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 failed, 1 passed" in proc.stdout
    assert "expected 'tool:pytest' to be kept/truncated, but it was dropped (NO_ROOM" in proc.stdout
    assert "fix: max_tokens +" in proc.stdout
