"""The Playground loads a config file (what ``ctxscope tune -o`` writes, what ``ctxscope build
--config`` reads); Inspect's counterfactual offers one clear button that applies the change;
"turn 15" in Traces' Open trace finds turn 15 and no other.

Real parts: the real app through AppTest on a real DuckDB store, a config written by a real
``ctxscope tune`` process, and ``ctxscope build --config`` on the same file for comparison.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import app_support as data
import pytest
from app_support import ROOT, open_page

from ctxcore.models import Trace

TUNE_BUDGET = 4000


@pytest.fixture(scope="module")
def built() -> list[Trace]:
    return data.session("sess-a", 2, preset="ctxscope")


@pytest.fixture
def db(built: list[Trace], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    path = tmp_path / "ctxscope.duckdb"
    data.fill(path, built)
    return path


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A config file exactly as a user gets it: ``ctxscope tune -o FILE``."""
    out = tmp_path_factory.mktemp("tune") / "tuned.json"
    done = subprocess.run(
        [sys.executable, "-m", "ctxcore", "tune", "--budget", str(TUNE_BUDGET)]
        + ["--rounds", "1", "--max-steps", "3", "-o", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return out


def _errors(at) -> list[str]:  # type: ignore[no-untyped-def]
    return [e.value for e in at.error]


def test_a_tuned_config_file_loads_into_the_knobs(
    db: Path, built: list[Trace], tuned: Path
) -> None:
    t = built[1]
    at = open_page("playground", trace=t.trace_id)
    assert at.slider(key="pg_max_tokens").value == t.config.max_tokens != TUNE_BUDGET
    at.file_uploader(key="pg_config_file").set_value(
        (tuned.name, tuned.read_bytes(), "application/json")
    ).run()
    assert not at.exception and not _errors(at), _errors(at)
    want = json.loads(tuned.read_text())
    assert at.slider(key="pg_max_tokens").value == want["max_tokens"] == TUNE_BUDGET
    for knob in ("relevance_weight", "recency_weight", "min_relevance"):
        assert at.slider(key=f"pg_{knob}").value == pytest.approx(want[knob])
    assert any(tuned.name in c.value.replace("\\", "") for c in at.caption)
    # the re-run is what `ctxscope build --config` makes of the same trace and file
    src = db.parent / "trace.json"
    src.write_text(t.to_json())
    done = subprocess.run(
        [sys.executable, "-m", "ctxcore", "build", str(src), "--config", str(tuned)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    cli = Trace.model_validate_json(done.stdout)
    assert cli.result is not None
    assert at.query_params["max_tokens"] == str(cli.config.max_tokens)
    shown = " ".join(m.value for m in at.markdown)
    assert f"used **{cli.result.totals.used:,}**" in shown


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"max_tokens": "lots"}', ["bad.json", "max_tokens"]),
        (b'{"max_tokens": 4000,', ["bad.json", "malformed JSON at column"]),
        (b"[1, 2]", ["bad.json", "JSON object"]),
        (b'{"preset": "ctxscope", "min_relevance": 7}', ["bad.json", "min_relevance"]),
        (b"\xff\xfe not utf-8", ["bad.json", "UTF-8"]),
    ],
)
def test_a_bad_config_file_is_one_line_and_the_knobs_stay(
    db: Path, built: list[Trace], body: bytes, words: list[str]
) -> None:
    t = built[1]
    at = open_page("playground", trace=t.trace_id)
    at.file_uploader(key="pg_config_file").set_value(("bad.json", body, "application/json")).run()
    assert not at.exception
    [error] = _errors(at)
    assert "\n" not in error.strip(), error
    assert all(w in error.replace("\\", "") for w in words), error
    assert at.slider(key="pg_max_tokens").value == t.config.max_tokens
