"""Traces in a real browser: the full-text search narrows the list and the URL remembers it."""

from __future__ import annotations

import re

from . import XSS_TRACE_ID, exceptions_text, goto, rerun_and_settle

MATCHING = re.compile(r"([\d,]+)\s+matching traces")


def _matching(page) -> int:
    text = page.get_by_text(MATCHING).first.inner_text()
    m = MATCHING.search(text)
    assert m, text
    return int(m.group(1).replace(",", ""))


def test_search_narrows_the_list(tab, browser_data) -> None:
    page = tab.page
    goto(page, f"{tab.url}/")  # Traces is the default page: it lives at /
    assert exceptions_text(page) == []
    total = _matching(page)
    assert total >= len(browser_data.traces)
    # Which of our traces hold this text was decided when the fixtures were made: only the
    # XSS probe has an <img onerror> packet. Demo traces are real agent text without it.
    needle = "onerror=alert(1)"
    expected = [
        t.trace_id for t in browser_data.traces if any(needle in p.content for p in t.input.packets)
    ]
    assert expected == [XSS_TRACE_ID]
    box = page.get_by_label("Search packet content")

    def search() -> None:
        box.fill(needle)
        box.press("Enter")

    rerun_and_settle(page, search)
    assert exceptions_text(page) == []
    assert _matching(page) == 1, f"search {needle!r} should match only {XSS_TRACE_ID}"
    assert "search=onerror" in page.url
    # The one row shown is the probe: the "Open trace" picker offers exactly its id.
    picker = page.locator('[data-testid="stSelectbox"]').filter(has_text="Open trace")
    shown = picker.locator("input").input_value() or picker.inner_text()
    assert XSS_TRACE_ID in shown, shown


def test_a_trace_dropped_in_the_folder_appears_without_reload(tab, browser_data) -> None:
    from datetime import UTC, datetime

    from ctxcore.pipeline import build_trace

    from . import corpus_input, default_preset, write_jsonl

    page = tab.page
    goto(page, f"{tab.url}/")
    before = _matching(page)
    now = datetime(2026, 1, 25, 9, 0, tzinfo=UTC)
    live = build_trace(
        corpus_input(now, turn=3),
        browser_data.traces[0].config.model_copy(update={"preset": default_preset()}),
        trace_id="browser-live",
        session_id="browser-live-session",
    )
    loads = page.evaluate("() => performance.getEntriesByType('navigation').length")
    write_jsonl([live], browser_data.traces_dir / "live.jsonl")
    # The watcher ingests it and the page's live fragment reruns the page: no reload, no click.
    page.get_by_text(re.compile(rf"{before + 1:,}\s+matching traces")).wait_for(timeout=45_000)
    assert page.evaluate("() => performance.getEntriesByType('navigation').length") == loads
    assert exceptions_text(page) == []
