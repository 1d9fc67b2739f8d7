"""The Timeline of a long session draws without diagnosing it: the detectors over every turn
run when asked (a button), and then show the findings of ``diagnose_session``
(docs/design.md, "The app"). AppTest on a real store of a real 61-turn session."""

from __future__ import annotations

import json
from pathlib import Path

import app_support as data
import pytest
from app_support import open_page, rerun

from ctxapp.pages import timeline
from ctxcore.diagnostics import INGEST_OPTIONS, diagnose_session
from ctxcore.models import Trace

TURNS = timeline.AUTO_DIAGNOSE_TURNS + 1


@pytest.fixture(scope="module")
def long_session() -> list[Trace]:
    return data.session("sess-long", TURNS, step=1)


@pytest.fixture
def db(long_session: list[Trace], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    path = tmp_path / "ctxscope.duckdb"
    data.fill(path, [*long_session, *data.session("sess-short", 3)])
    return path


def _heatmap_turns(at) -> list[str] | None:  # type: ignore[no-untyped-def]
    """The turns of the diagnostics chart, or None when the page has none."""
    spec = next(
        (
            json.loads(c.proto.spec)
            for c in at.get("plotly_chart")
            if "Diagnostics per turn" in c.proto.spec
        ),
        None,
    )
    return None if spec is None else list(spec["data"][0]["x"])


def test_a_long_session_is_diagnosed_when_asked(db: Path, long_session: list[Trace]) -> None:
    at = open_page("timeline", session="sess-long")
    assert _heatmap_turns(at) is None
    assert not [d for d in at.dataframe if "detector" in d.value.columns]
    button = at.button(key="tl_diagnose")
    assert button.label == f"Diagnose the {TURNS} turns"
    button.click()
    rerun(at)
    assert _heatmap_turns(at) == [str(t.turn) for t in long_session]
    want = diagnose_session(long_session, options=INGEST_OPTIONS)
    frame = next(d.value for d in at.dataframe if "detector" in d.value.columns)
    shown = list(zip(frame["turn"], frame["detector"], frame["message"], strict=True))
    assert shown == [
        (t.turn, f.detector, f.message) for t in reversed(want.turns) for f in t.findings
    ]
    # asked once: the page's later runs keep them, without the button
    rerun(at)
    assert _heatmap_turns(at) == [str(t.turn) for t in long_session]
    assert not [b for b in at.button if b.key == "tl_diagnose"]


def test_a_short_session_is_diagnosed_at_once(db: Path) -> None:
    at = open_page("timeline", session="sess-short")
    assert _heatmap_turns(at) == ["0", "1", "2"]
    assert not [b for b in at.button if b.key == "tl_diagnose"]
