"""The decisions table a page at a time (Inspect and the Playground) through AppTest.

A table sends the page shown, not all its rows: over the pages every decision is shown once,
in the order of a sort over all the matching rows; in the Playground the packets that changed
come first, each with the status it had, and a knob move or a page turn redraws the rows
alone, not the table's eight controls.
"""

from __future__ import annotations

from pathlib import Path

import app_support as data
import pandas as pd
import pytest
from app_support import open_page
from streamlit.testing.v1 import AppTest

from ctxapp.ui import views
from ctxcore.models import Config, Trace
from ctxcore.pipeline import build, resolve_config

APP = str(Path(__file__).resolve().parent.parent / "ctxapp" / "app.py")


@pytest.fixture(scope="module")
def big() -> Trace:
    (t,) = data.session("sess-big", 1, first=230, pool=240, config={"min_relevance": 0.1})
    assert t.result is not None and len(t.result.decisions) > 2 * views.PAGE_ROWS
    return t


@pytest.fixture
def db(big: Trace, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    path = tmp_path / "ctxscope.duckdb"
    data.fill(path, [big])
    return path


def rows(at: AppTest) -> pd.DataFrame:
    return next(d.value for d in at.dataframe if "reason_text" in d.value.columns)


def every_page(at: AppTest, prefix: str) -> list[str]:
    """The packet ids of every page, in order, turning the pages as a user would."""
    seen: list[str] = []
    page = 1
    while True:
        if not at.number_input:  # the last turn reran the rows alone (the Playground)
            at.run()
        at.number_input(key=f"{prefix}_page").set_value(page).run()
        assert not at.exception, [e.value for e in at.exception]
        shown = list(rows(at)["packet_id"])
        assert 0 < len(shown) <= views.PAGE_ROWS
        seen += shown
        if f"page {page:,} of {page:,}:" in " ".join(c.value for c in at.caption):
            return seen
        page += 1
        assert page < 50


def test_inspect_shows_every_decision_across_its_pages(db: Path, big: Trace) -> None:
    assert big.result is not None
    decisions = big.result.decisions
    at = open_page("inspect", trace=big.trace_id)
    first = rows(at)
    assert len(first) == views.PAGE_ROWS  # a page, not the 230 rows
    n = len(decisions)
    pages = views.page_count(n)
    assert (
        f"{n:,} of {n:,} decisions · page 1 of {pages}: 1–100" in [c.value for c in at.caption][-2]
    )
    assert every_page(at, "in") == [d.packet_id for d in decisions]
    # a sort runs over all the decisions, not over the page shown
    at.selectbox(key="in_sort").set_value("score").run()
    at.toggle(key="in_desc").set_value(True).run()

    def by_score(ds: list) -> list[str]:
        """Highest score first (ties in the builder's order), packets without one last."""
        scored = sorted((d for d in ds if d.score is not None), key=lambda d: -(d.score or 0.0))
        return [d.packet_id for d in scored] + [d.packet_id for d in ds if d.score is None]

    assert every_page(at, "in") == by_score(decisions)
    # more rows per page: all of them at once
    at.selectbox(key="in_page_size").set_value(1000).run()
    assert len(rows(at)) == n
    # a narrowing filter on a page past its end shows its last page
    at.selectbox(key="in_page_size").set_value(50).run()
    at.number_input(key="in_page").set_value(5).run()
    counts = views.status_counts(decisions)
    status = next(s for s in ("filtered", "dropped", "kept") if 50 < counts.get(s, 0) < 250)
    at.multiselect(key="in_f_status").set_value([status]).run()
    want = by_score([d for d in decisions if d.status.value == status])
    last = views.page_count(len(want), 50)
    assert last < 5
    assert list(rows(at)["packet_id"]) == want[(last - 1) * 50 :]


def test_playground_puts_what_changed_first_and_redraws_the_rows_alone(
    db: Path, big: Trace
) -> None:
    assert big.result is not None
    at = open_page("playground", trace=big.trace_id)
    assert len(rows(at)) == views.PAGE_ROWS
    assert at.selectbox(key="pg_sort").value == views.CHANGED_FIRST
    # a move that leaves more out: the rows that changed lead the first page
    at.slider(key="pg_min_relevance").set_value(0.15).run()
    assert not at.exception and not at.title, "the move reran the page"
    cfg = resolve_config(
        Config(
            **{
                **big.config.model_dump(),
                "output_reserve": None,
                "safety_margin": None,
                "min_relevance": 0.15,
            }
        ),
        big.input,
    )
    now = build(big.input, cfg)
    flips = views.flipped(big.result, now, big.input.history)
    changed = [p for p, s in zip(flips["packet_id"], flips["status_now"], strict=True) if s != "—"]
    assert 0 < len(changed) < views.PAGE_ROWS
    page = rows(at)
    assert len(page) == views.PAGE_ROWS  # still one page of the new build
    assert list(page["packet_id"])[: len(changed)] == changed
    before = dict(zip(flips["packet_id"], flips["status_before"], strict=True))
    assert list(page["before"])[: len(changed)] == [before[p] for p in changed]
    assert set(page["before"][len(changed) :]) == {""}
    # the table's controls were not redrawn by the move, only its rows
    assert not at.multiselect and not at.selectbox and not at.number_input
    # turning the page redraws the rows alone too
    at.run()
    at.number_input(key="pg_page").set_value(2).run()
    assert not at.exception and not at.title and not at.multiselect
    second = rows(at)
    assert (
        list(second["packet_id"])
        == (
            list(
                pd.Series([d.packet_id for d in now.decisions if d.packet_id not in set(changed)])
            )[views.PAGE_ROWS - len(changed) : 2 * views.PAGE_ROWS - len(changed)]
        )
    )
    # over all pages, every decision of the re-run once
    at.run()
    assert sorted(every_page(at, "pg")) == sorted(d.packet_id for d in now.decisions)
