"""In Chromium, on real imported Claude Code sessions with the usage their provider
recorded: the Traces page's $ columns, Inspect's cost and cache panel with the cached
prefix outlined on the window bar, and the Timeline's cache and cost per turn with its
breaks, each page free of exceptions, of cut labels and tables, and photographed
(test-artifacts/screenshots/cost-*.png) for a person to look at.

A store of its own (the session's store holds no recorded usage): the fixtures' Claude Code
logs, loaded through the importer as ``ctxscope import`` loads them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from ctxcore import figures
from ctxcore.cost import cost
from ctxcore.formats.load import load_file
from ctxcore.models import Trace
from ctxcore.store import TraceStore

from . import (
    AppServer,
    exceptions_text,
    goto,
    label_clashes,
    rerun_and_settle,
    screenshot,
    start_server,
    table_cuts,
)

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "fixtures" / "imports" / "claude-code"
#: the logs with recorded usage and cache figures
FILES = ("ccviewer-task-sidechain-session.jsonl", "ccviewer-init-session.jsonl")


@pytest.fixture(scope="module")
def logged() -> list[Trace]:
    return [t for name in FILES for t in load_file(LOGS / name)]


@pytest.fixture(scope="module")
def cost_server(
    browser_available: None, logged: list[Trace], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AppServer]:
    work = tmp_path_factory.mktemp("browser-cost")
    (work / "traces").mkdir()
    db = work / "ctxscope.duckdb"
    with TraceStore(db) as store:
        store.add_traces(logged, source="claude-code fixtures")
    server = start_server(db, work / "traces", work, {"CTXSCOPE_NO_WATCH": "1"})
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def page(chromium: Any, cost_server: AppServer) -> Iterator[Any]:
    from . import new_page

    p = new_page(chromium)
    try:
        yield p
    finally:
        p.context.close()


def main_session(logged: list[Trace]) -> tuple[str, list[Trace]]:
    """The session with the most calls, and its calls."""
    by: dict[str, list[Trace]] = {}
    for t in logged:
        by.setdefault(t.session_id, []).append(t)
    sid = max(by, key=lambda s: len(by[s]))
    return sid, by[sid]


def _checked(page: Any, name: str, width: int, height: int) -> None:
    """No exception, no chart label cut or drawn over another, every table's why on
    screen; then the screenshot."""
    assert exceptions_text(page) == []
    problems = [f"{name} {width}x{height}: {p}" for p in label_clashes(page) + table_cuts(page)]
    screenshot(page, f"cost-{name}-{width}")
    assert problems == []


SIZES = pytest.mark.parametrize(("width", "height"), [(1024, 768), (1440, 900)])


@SIZES
def test_traces_shows_the_cost_of_each_call(page, cost_server, logged, width, height) -> None:
    sid, calls = main_session(logged)
    page.set_viewport_size({"width": width, "height": height})
    goto(page, f"{cost_server.url}/traces?session={quote(sid)}")
    total = sum(
        c.total_usd
        for t in calls
        if (c := cost(t.metadata.get("model"), t.outcome.tokens if t.outcome else None))
    )
    body = page.locator('[data-testid="stMainBlockContainer"]').inner_text()
    assert f"Session cost (recorded usage): {figures.usd(total)}" in body
    _checked(page, "traces", width, height)


@SIZES
def test_inspect_shows_the_cost_and_cache_panel(page, cost_server, logged, width, height) -> None:
    _, calls = main_session(logged)
    t = max(calls, key=lambda t: t.turn)
    page.set_viewport_size({"width": width, "height": height})
    goto(page, f"{cost_server.url}/inspect?trace={quote(t.trace_id)}")
    panel = page.locator(".st-key-in_cost")
    assert panel.count() == 1
    text = panel.inner_text()
    assert "Cost and prompt cache" in text and "Cost: $" in text
    # the dotted outline of the cached prefix is drawn on the window bar
    outline = page.locator(".st-key-in_window .shapelayer path")
    assert outline.count() >= 1
    _checked(page, "inspect", width, height)


@SIZES
def test_timeline_shows_cache_and_cost_per_turn(page, cost_server, logged, width, height) -> None:
    sid, calls = main_session(logged)
    page.set_viewport_size({"width": width, "height": height})
    goto(page, f"{cost_server.url}/timeline?session={quote(sid)}")
    # the Timeline opens on its packets: the cost chart is drawn when its view is opened
    assert page.locator(".st-key-tl_cost_chart").count() == 0
    rerun_and_settle(page, page.get_by_role("tab", name="Cost and cache").click)
    chart = page.locator(".st-key-tl_cost_chart")
    chart.scroll_into_view_if_needed()
    bars = chart.locator("g.barlayer g.trace")
    assert bars.count() == 3  # cached, written, uncached
    _checked(page, "timeline", width, height)
