"""Context recall (``ctxcore.demo.recall``, ``bench/bench_recall.py``) and ``ctxscope tune``."""

from __future__ import annotations

import json
from pathlib import Path

from ctxcore.cli import main
from ctxcore.demo.recall import recall_of, targets_of, turns_of
from ctxcore.models import Config
from ctxcore.pipeline import build

A02 = "a02_sweagent_function_calling_simple.traj.json"


def test_targets_are_paths_tests_and_quoted_errors() -> None:
    before = "FAILED tests/test_api.py::test_login - AssertionError: 500\nsrc/api.py is here"
    step = "Let me open src/api.py and rerun tests/test_api.py::test_login (AssertionError: 500)"
    assert set(targets_of(step, before)) == {
        "src/api.py",
        "tests/test_api.py",
        "tests/test_api.py::test_login",
    }
    quoted = "The log says: FAILED tests/test_api.py::test_login - AssertionError: 500"
    assert "failed tests/test_api.py::test_login - assertionerror: 500" in targets_of(
        quoted, before
    )


def test_recall_by_hand_on_a_short_session(corpus: Path) -> None:
    """a02: 5 assistant steps. By hand: step 1 uses ``missing_colon.py`` (named in the
    issue), step 2 ``missing_colon.py`` and ``tests/missing_colon.py`` (the path it opens,
    found by step 1's search), step 4 runs ``python tests/missing_colon.py``; steps 3 and 5
    name nothing that was in their input."""
    turns = turns_of(corpus / A02)
    assert [(t.step, set(t.targets)) for t in turns] == [
        (1, {"missing_colon.py"}),
        (2, {"missing_colon.py", "tests/missing_colon.py"}),
        (4, {"tests/missing_colon.py"}),
    ]
    for preset in ("ctxscope", "hello-agents"):
        cfg = Config(preset=preset, max_tokens=4000)
        prompts = [build(t.input, cfg).prompt.lower() for t in turns]
        # the hand count: the share of each turn's targets found in its prompt, averaged
        shares = [
            sum(x in p for x in t.targets) / len(t.targets)
            for t, p in zip(turns, prompts, strict=True)
        ]
        hand = sum(shares) / len(shares)
        assert recall_of(turns, cfg).recall == hand
    # hello-agents filters step 2's search result (no query word in it): half of step 2
    hello = recall_of(turns, Config(preset="hello-agents", max_tokens=4000))
    assert hello.recall == (1 + 0.5 + 1) / 3
    assert hello.missed == [(A02, 2, ["tests/missing_colon.py"])]
    assert recall_of(turns, Config(max_tokens=4000)).recall == 1.0


def test_tune_writes_a_config_build_reads(corpus: Path, tmp_path: Path, capsys: object) -> None:
    out = tmp_path / "tuned.json"
    rc = main(["tune", str(corpus / A02), "--budget", "4000", "--max-steps", "3", "-o", str(out)])
    assert rc == 0
    cfg = json.loads(out.read_text("utf-8"))
    assert cfg["preset"] == "ctxscope" and cfg["max_tokens"] == 4000
    assert {"error_weight", "current_turn_weight", "lexical_weight"} <= set(cfg)
    inp = tmp_path / "input.json"
    inp.write_text(turns_of(corpus / A02)[0].input.model_dump_json(), "utf-8")
    assert main(["build", str(inp), "--config", str(out)]) == 0
