"""Every table on every page, at 1024 × 768 and 1440 × 900: the why is on screen and readable.

A table draws on a canvas, so the checks read what the grid drew (``table_cuts``): each table
is named, the columns that say which item, what happened and why (``TABLE_WHY``) are on
screen with their headers whole, a short cell (a status, a code, a turn) is never cut, and a
longer one (a reason, an id) runs past its column only where the table shows the selected row
whole; that it does is checked by selecting rows whose reason the grid cut.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from ctxapp.pages import PAGES as REGISTRY

from . import (
    TABLE_WHY,
    exceptions_text,
    goto,
    new_page,
    rerun_and_settle,
    screenshot,
    settle,
    table_cuts,
    tables,
)
from .test_walkthrough import SESSION, _walkthrough_trace

SIZES = [(1024, 768), (1440, 900)]
#: what a page's query adds to its registry ``opens``, so its tables have rows: Traces on the
#: session, the Playground with packets flipped
EXTRA_QUERY = {"traces": "?session={s}", "playground": "&min_relevance=0.2"}
#: every page of the registry opened on the walk-through's trace and session, and views of
#: two of them: (name, path, tab to open first)
PAGES = [
    (p.name, p.url(trace="{t}", session="{s}") + EXTRA_QUERY.get(p.name, ""), None)
    for p in REGISTRY
] + [
    ("traces-findings", "traces?view=findings", None),
    # the signals table: a build of the ctxscope preset (the browser session's)
    ("inspect-scores", "inspect?trace=browser-t2", "Scores"),
]
#: tables the walk must meet (the import errors' table needs a file ingest could not read;
#: the cost tables a session with recorded usage: test_cost.py walks those; the policy lab's
#: an evaluation of an imported session: test_policy_lab.py checks it at both widths)
MET = set(TABLE_WHY) - {"sh_errors", "in_cache", "tl_cost", "rp_lab_table"}


def _open(page, base: str, path: str, tab: str | None) -> None:  # type: ignore[no-untyped-def]
    goto(page, f"{base}/{path.format(t=quote(_walkthrough_trace()), s=quote(SESSION))}")
    if tab is not None:
        rerun_and_settle(page, page.get_by_role("tab", name=tab).click)
        settle(page)
    page.wait_for_timeout(300)  # the grid paints on the frame after it is laid out


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_every_table_shows_its_why(chromium, app_server, width: int, height: int) -> None:
    page = new_page(chromium, width=width, height=height)
    met: set[str] = set()
    problems: list[str] = []
    try:
        for name, path, tab in PAGES:
            _open(page, app_server.url, path, tab)
            assert exceptions_text(page) == [], name
            met |= {t["name"] for t in tables(page) if t["name"]}
            problems += [f"{name} {width}x{height}: {p}" for p in table_cuts(page)]
            screenshot(page, f"tables-{name}-{width}x{height}")
    finally:
        page.context.close()
    assert problems == [], "\n".join(problems)
    assert MET <= met, f"tables not met on the walk: {sorted(MET - met)}"


@pytest.mark.parametrize(
    ("name", "path", "table", "column", "fragment"),
    [
        ("inspect", "inspect?trace={t}", "in_decisions", "reason", False),
        # the flipped table is drawn by the Playground's summary fragment: it reruns alone
        ("playground", "playground?trace={t}&min_relevance=0.2", "pg_flipped", "reason now", True),
        ("timeline", "timeline?session={s}", "tl_lost", "item", False),
    ],
)
def test_a_cut_cell_is_read_whole_in_the_selected_row(
    chromium, app_server, name: str, path: str, table: str, column: str, fragment: bool
) -> None:
    """At 1024 px the grid cuts a long reason (or item): selecting its row shows it whole."""
    page = new_page(chromium, width=1024, height=768)
    try:
        _open(page, app_server.url, path, None)
        [t] = [t for t in tables(page) if t["name"] == table]
        cut = [(text, y) for label, text, y in t["cut"] if label == column]
        assert cut, f"{table}: no {column!r} is cut at 1024 px; nothing to check"
        full, row = cut[0]
        grid = page.locator(f".st-key-tbl_{table} [data-testid='data-grid-canvas']")
        box = grid.bounding_box()
        assert box is not None
        # the row's box at the left of the grid (the row markers' column)
        grid.scroll_into_view_if_needed()
        box = grid.bounding_box()
        assert box is not None
        click = lambda: page.mouse.click(box["x"] + 18, box["y"] + row)  # noqa: E731
        rerun_and_settle(page, click, fragment=fragment)
        settle(page)
        shown = page.locator(f".st-key-tbl_{table} [data-testid='stCode']").inner_text()
        assert full in " ".join(shown.split()), (full, shown)
        screenshot(page, f"tables-read-whole-{name}")
    finally:
        page.context.close()
