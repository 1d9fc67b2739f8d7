"""Playground in a real browser: a slider flips packets, and a permalink reproduces the view."""

from __future__ import annotations

import re

from . import exceptions_text, goto, rerun_and_settle, screenshot

FLIPPED = re.compile(r"Flipped \((\d+)\)")


def _flipped(page) -> int:
    text = page.get_by_role("heading", name=FLIPPED).inner_text()
    m = FLIPPED.search(text)
    assert m, f"no 'Flipped (N)' heading in {text!r}"
    return int(m.group(1))


def _open(page, base: str, trace_id: str) -> None:
    goto(page, f"{base}/playground?trace={trace_id}")
    errors = exceptions_text(page)
    assert errors == [], "\n".join(errors)


def test_slider_flips_packets_and_permalink_reproduces(tab, browser_data, chromium) -> None:
    from . import new_page

    page = tab.page
    trace = browser_data.traces[0]
    _open(page, tab.url, trace.trace_id)
    assert _flipped(page) == 0, "the recorded settings must reproduce the recorded build"
    slider = page.get_by_role("slider", name="min_relevance")
    start = float(slider.input_value())
    assert start > 0, f"the fixture's preset should filter on relevance (got {start})"

    # The recorded build filtered packets below min_relevance; dropping it to 0 lets them in.
    assert trace.result is not None
    filtered = [d.packet_id for d in trace.result.decisions if d.status.value == "filtered"]
    assert filtered, "fixture: the recorded build filtered nothing"
    rerun_and_settle(page, lambda: slider.press("Home"))
    assert float(slider.input_value()) == 0.0
    assert exceptions_text(page) == []
    flipped = _flipped(page)
    assert flipped > 0, "moving min_relevance to 0 flipped nothing"
    assert "min_relevance=0" in page.url, f"the URL does not carry the new setting: {page.url}"
    # The prompt diff now shows lines the variant added.
    page.get_by_role("tab", name="Prompt diff").click()
    diff = page.locator('[data-testid="stCode"]').filter(has_text="+++ variant").first
    assert diff.is_visible(), "the prompt diff does not show the variant"
    screenshot(page, "playground-after-slider")

    # The permalink shown on the page opens the same settings in a fresh browser tab.
    page.get_by_role("tab", name="Permalink & save").click()
    code = page.locator('[data-testid="stCode"]').filter(has_text="/playground?").first
    link = code.inner_text().strip()
    assert "min_relevance=0" in link and f"trace={trace.trace_id}" in link, link
    other = new_page(chromium)
    try:
        goto(other, link)
        assert exceptions_text(other) == []
        assert float(other.get_by_role("slider", name="min_relevance").input_value()) == 0.0
        assert _flipped(other) == flipped
    finally:
        other.context.close()
