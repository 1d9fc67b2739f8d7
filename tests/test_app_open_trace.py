"""Traces' Open trace: "turn 15" finds turn 15 and no other, a bare number that turn first.

The picker's own fuzzy search listed turns 12, 14, 11 and 7 for "turn 15" (in-order letters
anywhere in the label); the page's find box now decides what the picker offers. Real parts:
the real app through AppTest on a real DuckDB store of real builds.
"""

from __future__ import annotations

import re
from pathlib import Path

import app_support as data
import pytest
from app_support import open_page

from ctxapp.ui import views
from ctxcore.models import Trace

TURNS = 17  # turns 0..16: 1, 5, 11, 12, 14 and 15 are all there to be confused


@pytest.fixture(scope="module")
def built() -> list[Trace]:
    return data.session("long", TURNS, first=4, step=1)


@pytest.fixture
def db(built: list[Trace], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    path = tmp_path / "ctxscope.duckdb"
    data.fill(path, built)
    return path


def _turns(at, built: list[Trace]) -> list[int]:  # type: ignore[no-untyped-def]
    """The turns the picker offers, in its order (its options are the labels shown)."""
    labels = at.selectbox(key="tr_open_id").options
    return [int(re.search(r" · turn (\d+) · ", label)[1]) for label in labels]


def test_turn_15_offers_turn_15_only(db: Path, built: list[Trace]) -> None:
    at = open_page("traces")
    assert len(_turns(at, built)) == TURNS
    at.text_input(key="tr_open_find").input("turn 15").run()
    assert not at.exception
    assert _turns(at, built) == [15]
    assert at.selectbox(key="tr_open_id").value == "long-t15"
    at.button(key="tr_open").click().run()
    assert at.title[0].value == "Inspect" and at.query_params["trace"] == "long-t15"


def test_a_bare_number_lists_its_turn_first(db: Path, built: list[Trace]) -> None:
    at = open_page("traces")
    at.text_input(key="tr_open_find").input("1").run()
    turns = _turns(at, built)
    assert turns[0] == 1 and set(turns) >= {10, 11, 12, 13, 14, 15, 16}, turns
    at.text_input(key="tr_open_find").input("turn 99").run()
    assert not at.exception
    assert not [s for s in at.selectbox if s.key == "tr_open_id"]
    assert any("No trace on this page matches" in c.value for c in at.caption)


ROWS = [
    ("a-t1", 1, "a · turn 1 · ctxscope · ok · 0 findings · a-t1"),
    ("a-t7", 7, "a · turn 7 · ctxscope · ok · 1 finding (warning) · a-t7"),
    ("a-t12", 12, "a · turn 12 · ctxscope · ok · 0 findings · a-t12"),
    ("a-t15", 15, "a · turn 15 · hello-agents · over · 2 findings (error) · a-t15"),
    ("b-t150", 150, "b · turn 150 · ctxscope · ok · 15 findings (error) · b-t150"),
    ("b-t3", 3, "b · turn 3 · ctxscope · ok · 0 findings · id-15-x"),
]


@pytest.mark.parametrize(
    ("query", "want"),
    [
        ("turn 15", ["a-t15"]),
        ("Turn 15", ["a-t15"]),
        ("turn15", ["a-t15"]),
        ("15", ["a-t15", "b-t150", "b-t3"]),
        ("turn 15 hello", ["a-t15"]),
        ("turn 15 ctxscope", []),
        ("b error", ["b-t150"]),
        ("", [r[0] for r in ROWS]),
        ("   ", [r[0] for r in ROWS]),
    ],
)
def test_find_traces(query: str, want: list[str]) -> None:
    assert views.find_traces(ROWS, query) == want
