"""Shared fixtures: every data path and cache points at tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxcore import settings

ROOT = Path(__file__).resolve().parent.parent
CORPUS = settings.corpus_dir(ROOT / "corpus")


@pytest.fixture(autouse=True)
def _isolated_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken-cache"))
    monkeypatch.setenv("CTXSCOPE_DB", str(tmp_path / "ctxscope.duckdb"))
    monkeypatch.setenv("CTXSCOPE_TRACES", str(tmp_path / "traces"))


@pytest.fixture
def corpus() -> Path:
    if not CORPUS.exists():
        pytest.skip(f"corpus not found at {CORPUS}")
    return CORPUS
