"""``ctxscope import`` as a user runs it: windows that carry into builds, folders, bad files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxcore.diagnostics import diagnose
from ctxcore.formats.load import load_file
from ctxcore.models import Trace

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "imports"
TOOL_USE = FIXTURES / "anthropic-messages" / "openinference-tool-use-in-input.request.json"


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxcore", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=180,
    )


def _traces(path: Path) -> list[Trace]:
    return [Trace.model_validate_json(line) for line in path.read_text().splitlines() if line]


def test_a_known_models_window_reaches_the_config_that_builds_use() -> None:
    req = json.loads(TOOL_USE.read_text())
    assert "claude" in req["model"] and "window" not in req
    [trace] = load_file(TOOL_USE)
    assert trace.input.window == 200_000
    assert trace.config.max_tokens == 200_000
    assert "model table" in trace.metadata["import"]["window_source"]


def test_an_unknown_window_is_unknown_and_nothing_measures_against_it(tmp_path: Path) -> None:
    req: dict[str, Any] = json.loads(TOOL_USE.read_text())
    req["model"] = "some-private-model"
    big = "x " * 3000
    req["messages"][0]["content"] = big  # one message is nearly the whole prompt
    path = tmp_path / "req.json"
    path.write_text(json.dumps(req))
    [trace] = load_file(path)
    assert trace.input.window is None
    assert trace.metadata["import"]["window_known"] is False
    assert any("window is unknown" in w for w in trace.result.warnings)  # type: ignore[union-attr]
    assert [f for f in diagnose(trace) if f.detector == "budget_flooded"] == []


@pytest.mark.slow
def test_window_and_model_options_and_set_window_on_build(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    proc = _run("import", str(TOOL_USE), "--window", "50000", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    [t] = _traces(out)
    assert (t.input.window, t.config.max_tokens) == (50_000, 50_000)
    proc = _run("import", str(TOOL_USE), "--model", "gpt-4o", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    [t] = _traces(out)
    assert (t.input.window, t.config.max_tokens) == (128_000, 128_000)
    built = _run("build", str(out), "--set", "window=30000")
    assert built.returncode == 0, built.stderr
    rebuilt = Trace.model_validate_json(built.stdout)
    assert rebuilt.input.window == 30_000 and rebuilt.config.max_tokens == 30_000


def test_usage_reported_beside_counted(tmp_path: Path) -> None:
    req = json.loads(TOOL_USE.read_text())
    resp = json.loads(TOOL_USE.with_name(TOOL_USE.name.replace("request", "response")).read_text())
    path = tmp_path / "pair.json"
    path.write_text(json.dumps({"request": req, "response": resp}))
    [t] = load_file(path)
    tokens = t.metadata["import"]["prompt_tokens"]
    usage = resp["usage"]
    reported = (
        usage["input_tokens"]
        + (usage.get("cache_read_input_tokens") or 0)
        + (usage.get("cache_creation_input_tokens") or 0)
    )
    assert tokens["reported"] == reported
    assert tokens["counted"] == t.result.totals.used  # type: ignore[union-attr]
    assert tokens["difference"] == tokens["counted"] - reported


@pytest.mark.slow
def test_a_folder_imports_every_file_and_says_which_failed(tmp_path: Path) -> None:
    folder = FIXTURES / "anthropic-messages"
    requests = sorted(folder.glob("*.request.json"))
    responses = sorted(folder.glob("*.response.json"))
    out = tmp_path / "all.jsonl"
    proc = _run("import", str(folder), "-o", str(out))
    # a response alone is not a request: each such file is one error line, the rest imported
    assert proc.returncode == 1
    errors = [
        line for line in proc.stderr.splitlines() if line.startswith("ctxscope import: error")
    ]
    assert len(errors) == len(responses)
    assert all("tried" in line and ".response.json" in line for line in errors)
    assert len(_traces(out)) == len(requests)
    # a quoted glob is expanded by us
    proc = _run("import", str(folder / "*.request.json"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert len(_traces(out)) == len(requests)
