"""The README walk-through ("Why did this turn go wrong?"), step by step as written, on the
demo session in a real browser: every number and sentence the README quotes is on screen.

Also: every page opens at its own URL (``/traces`` used to open "Page not found").
"""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest

from ctxapp.pages import PAGES

from . import exceptions_text, goto, rerun_and_settle, screenshot, settle

SESSION = "swe-pytest-7571-hello-agents"
FLIPPED = re.compile(r"Flipped \((\d+)\)")


@pytest.mark.parametrize(
    ("path", "title"), [(p.url_path, p.title) for p in PAGES], ids=[p.name for p in PAGES]
)
def test_every_page_opens_at_its_url(tab, path: str, title: str) -> None:
    page = tab.page
    goto(page, f"{tab.url}/{path}")
    assert page.get_by_text("Page not found").count() == 0, f"/{path}: Page not found"
    heading = page.locator('[data-testid="stMainBlockContainer"] h1').first
    assert heading.inner_text().strip() == title
    assert exceptions_text(page) == []


def _pick(page, label: str, text: str) -> None:
    """Type into a searchable picker and take the first option that matches."""
    box = page.locator('[data-testid="stSelectbox"]').filter(has_text=label)
    combo = box.locator("input")
    combo.click()
    combo.fill(text)
    page.get_by_role("option").filter(has_text=text).first.wait_for()
    rerun_and_settle(page, page.get_by_role("option").filter(has_text=text).first.click)


def test_readme_walk_through(tab) -> None:
    page = tab.page
    # 1. Traces: Session and Finding filters (as the README says), then open turn 15.
    goto(page, f"{tab.url}/traces?session={quote(SESSION)}&finding=must_have_lost")
    assert exceptions_text(page) == []
    # "turn 15" finds turn 15 and nothing else (the picker's fuzzy search offered 12, 14, …)
    find = page.get_by_label("Find on this page", exact=True)
    find.fill("turn 15")
    rerun_and_settle(page, lambda: find.press("Enter"))
    picker = page.locator('[data-testid="stSelectbox"]').filter(has_text="Open trace")
    picker.locator("input").click()
    page.keyboard.press("ArrowDown")  # the list opens (there is nothing to type into)
    page.get_by_role("option").first.wait_for()
    offered = page.get_by_role("option").all_inner_texts()
    assert offered and all(" · turn 15 · " in o for o in offered), offered
    page.keyboard.press("Escape")
    rerun_and_settle(page, page.get_by_role("button", name="Open in Inspect").click)
    settle(page)
    assert "/inspect" in page.url, page.url

    # 2. Inspect: 3,715 of 5,100 tokens used; why tool:call_4 is missing.
    body = page.locator('[data-testid="stMainBlockContainer"]')
    text = body.inner_text()
    assert "turn 15" in text
    assert "3,715" in text and "5,100" in text, "the metrics do not show 3,715 of 5,100"
    rerun_and_settle(page, page.get_by_role("tab", name="Findings").click)
    text = body.inner_text()
    assert "charged 126 tokens" in text
    assert "DO NOT MODIFY" in text or "constraint" in text.lower()

    # 3. What would have kept it? tool:call_4 → min_relevance ≤ 0.25, verified.
    _pick(page, "Packet that was dropped", "tool:call_4")
    rerun_and_settle(page, page.get_by_text("Search the smallest change").click)
    settle(page)
    sentence = page.get_by_text(re.compile(r"min_relevance ≤ 0\.25 .*would have kept tool:call_4"))
    sentence.first.wait_for()
    assert "verified by re-running hello-agents" in sentence.first.inner_text()
    assert "history_limit" in body.inner_text()  # the searched knobs are named
    screenshot(page, "walkthrough-findings")
    # one button says it applies this change (the page's own opens the recording)
    opens = page.get_by_role("button", name="Open in Playground with this change", exact=True)
    assert opens.count() == 1
    rerun_and_settle(page, opens.click)
    settle(page)

    # 4. Playground: the change is live, with the packets that flipped listed.
    assert "/playground" in page.url and "min_relevance=0.25" in page.url, page.url
    heading = page.get_by_role("heading", name=FLIPPED).inner_text()
    m = FLIPPED.search(heading)
    assert m and int(m.group(1)) > 0, heading
    screenshot(page, "walkthrough-playground")


@pytest.mark.parametrize(("width", "height"), [(1024, 768), (1440, 900)])
def test_no_metric_is_cut_at_both_sizes(chromium, app_server, width, height) -> None:
    from . import cut_metrics, new_page

    page = new_page(chromium, width=width, height=height)
    try:
        goto(page, f"{app_server.url}/traces?session={quote(SESSION)}")
        rows = page.locator('[data-testid="stSelectbox"]').filter(has_text="Open trace")
        assert rows.count() == 1
        for spec in PAGES:  # every page as its links open it
            goto(page, f"{app_server.url}/{spec.url(trace='browser-t2', session=quote(SESSION))}")
            assert exceptions_text(page) == []
            assert cut_metrics(page) == [], f"{spec.name} at {width}x{height}: cut metrics"
            screenshot(page, f"layout-{spec.name}-{width}x{height}")
    finally:
        page.context.close()


def _walkthrough_trace() -> str:
    """The id of the walk-through's turn 15, read from the demo file (the app holds the
    store)."""
    from pathlib import Path

    from ctxcore.loading import parse_json, trace_from_obj

    path = Path(__file__).resolve().parents[2] / "ctxcore" / "data" / "demo" / f"{SESSION}.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            t = trace_from_obj(parse_json(line, str(path)), str(path))
            if t.turn == 15:
                return t.trace_id
    raise AssertionError(f"{path}: no turn 15")


@pytest.mark.parametrize(("width", "height"), [(1024, 768), (1440, 900)])
def test_no_chart_label_is_cut_or_drawn_over_another_at_both_sizes(
    chromium, app_server, width, height
) -> None:
    """Every chart of every page, on the walk-through's trace and session: tick labels,
    legends, titles and notes are inside the chart and clear of each other, measured by
    their bounding boxes in the browser (the window bar's legend once covered its tick
    labels, the partition names ran together at 1024 px, a long title ran off the chart)."""
    from . import label_clashes, new_page

    trace = _walkthrough_trace()
    s = quote(SESSION)
    # every page of the registry as its links open it, and the Traces page's findings view
    pages = [p.url(trace=trace, session=s) for p in PAGES] + ["traces?view=findings"]
    page = new_page(chromium, width=width, height=height)
    found: list[str] = []
    try:
        for path in pages:
            goto(page, f"{app_server.url}/{path}")
            assert exceptions_text(page) == [], path
            if path.startswith("replay"):  # nothing changed draws nothing: the worked case does
                worked = page.get_by_role("button", name=re.compile("^Worked case"))
                rerun_and_settle(page, worked.click)
                assert exceptions_text(page) == [], path
            if path.startswith(("inspect", "timeline", "playground", "compare", "replay")):
                assert page.locator(".js-plotly-plot").count(), f"/{path}: no chart drawn"
            if path.startswith("sweep"):  # its charts come with a run
                run = page.get_by_role("button", name=re.compile(r"^Run \d+ builds$"))
                rerun_and_settle(page, run.click)
                assert page.locator(".js-plotly-plot").count() >= 2, "no sweep heatmaps"
            found += [f"/{path}: {c}" for c in label_clashes(page)]
            if path.startswith(("inspect", "playground")):  # the score scatter's tab
                rerun_and_settle(page, page.get_by_role("tab", name="Scores").click)
                page.get_by_text("Packet scores").first.wait_for()
                found += [f"/{path} Scores: {c}" for c in label_clashes(page)]
            if path.startswith("timeline"):  # the usage chart is a view of its own
                rerun_and_settle(page, page.get_by_role("tab", name="Partition usage").click)
                page.locator(".st-key-tl_usage .main-svg").first.wait_for()
                found += [f"/{path} Partition usage: {c}" for c in label_clashes(page)]
            if path.startswith("replay"):
                side = page.get_by_text("side by side", exact=True)
                rerun_and_settle(page, side.click)
                assert page.locator(".js-plotly-plot").count() == 2  # before, after
                found += [f"/{path} side by side: {c}" for c in label_clashes(page)]
    finally:
        page.context.close()
    assert found == [], "\n".join(found)


@pytest.mark.parametrize(("width", "height"), [(1024, 768), (1440, 900)])
def test_the_playground_result_shows_what_flipped_and_why_at_both_sizes(
    chromium, app_server, width, height
) -> None:
    """At 1024 px the settings go above the result, three knobs a row, and the result takes
    the page's width; at 1440 they stay beside it. Either way the flipped table shows the
    packet, its statuses before and now and the reason now on screen, without scrolling
    sideways, and any row whole beneath it when selected."""
    from . import new_page, table_cuts, tables

    page = new_page(chromium, width=width, height=height)
    try:
        goto(page, f"{app_server.url}/playground?trace={_walkthrough_trace()}&min_relevance=0.2")
        assert exceptions_text(page) == []
        settings = page.locator(".st-key-pg_settings").bounding_box()
        heading = page.get_by_role("heading", name=FLIPPED).bounding_box()
        assert settings and heading
        if width < 1200:
            assert settings["y"] + settings["height"] <= heading["y"], "settings beside result"
            boxes = [
                page.locator('[data-testid="stSelectbox"]').filter(has_text=n).bounding_box()
                for n in ("Preset", "Tokenizer")
            ]
            assert boxes[0] and boxes[1], boxes
            assert boxes[0]["y"] == boxes[1]["y"] and boxes[0]["x"] < boxes[1]["x"], boxes
        else:
            assert settings["x"] + settings["width"] <= heading["x"], "settings above result"
        # which packet flipped, from what to what, and why now are on screen whole (the
        # grid draws on a canvas: read what it drew); the rest is read in the selected row
        flipped = [t for t in tables(page) if t["name"] == "pg_flipped"]
        assert flipped, "no flipped table"
        assert [p for p in table_cuts(page) if p.startswith("pg_flipped")] == []
        screenshot(page, f"playground-flipped-{width}x{height}")
    finally:
        page.context.close()
