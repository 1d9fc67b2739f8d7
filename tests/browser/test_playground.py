"""Playground in a real browser: a slider flips packets, and a permalink reproduces the view."""

from __future__ import annotations

import re

from . import exceptions_text, goto, rerun_and_settle, screenshot, settle

FLIPPED = re.compile(r"Flipped \((\d+)\)")


def _flipped(page) -> int:
    text = page.get_by_role("heading", name=FLIPPED).inner_text()
    m = FLIPPED.search(text)
    assert m, f"no 'Flipped (N)' heading in {text!r}"
    return int(m.group(1))


def _click_track(page, label: str, fraction: float) -> None:
    """Click a slider's track at ``fraction`` of its width, as a user moving it would."""
    track = page.locator('[data-testid="stSlider"]').filter(has_text=label).get_by_role("group")
    box = track.bounding_box()
    assert box is not None, f"slider {label!r} is not visible"
    x = box["x"] + max(1.0, min(box["width"] - 1.0, box["width"] * fraction))
    page.mouse.click(x, box["y"] + box["height"] / 2)


def _open(page, base: str, trace_id: str) -> None:
    goto(page, f"{base}/playground?trace={trace_id}")
    errors = exceptions_text(page)
    assert errors == [], "\n".join(errors)


def test_slider_flips_packets_and_permalink_reproduces(tab, browser_data, chromium) -> None:
    from . import new_page

    page = tab.page
    trace = browser_data.traces[0]
    assert trace.result is not None
    reasons = {d.reason.value for d in trace.result.decisions}
    # Which knob frees what the recorded build left out depends on why it left it out.
    if "BELOW_MIN_RELEVANCE" in reasons:
        knob, label, where = "min_relevance", "min_relevance", 0.0  # 0: nothing is filtered
    else:
        assert reasons & {"NO_ROOM", "PARTITION_FULL"}, f"fixture left nothing out: {reasons}"
        knob, label, where = "max_tokens", "max_tokens (window budget)", 0.4  # more room
    _open(page, tab.url, trace.trace_id)
    assert _flipped(page) == 0, "the recorded settings must reproduce the recorded build"
    slider = page.get_by_role("slider", name=label)
    start = slider.input_value()
    rerun_and_settle(page, lambda: _click_track(page, label, where))
    now = slider.input_value()
    assert now != start, f"{knob} did not move ({start})"
    assert exceptions_text(page) == []
    flipped = _flipped(page)
    assert flipped > 0, f"moving {knob} from {start} to {now} flipped nothing"
    param = f"{knob}={now.removesuffix('.0')}"
    assert param in page.url, f"the URL does not carry {param}: {page.url}"
    # The prompt diff now shows lines the variant added.
    # The app's tabs are lazy (only the open one runs): a click starts a rerun.
    rerun_and_settle(page, page.get_by_role("tab", name="Prompt diff").click)
    diff = page.locator('[data-testid="stCode"]').filter(has_text="+++ variant").first
    assert diff.is_visible(), "the prompt diff does not show the variant"
    screenshot(page, "playground-after-slider")

    # The permalink shown on the page opens the same settings in a fresh browser tab.
    rerun_and_settle(page, page.get_by_role("tab", name="Permalink & save").click)
    code = page.locator('[data-testid="stCode"]').filter(has_text="/playground?").first
    link = code.inner_text().strip()
    assert param in link and f"trace={trace.trace_id}" in link, link
    other = new_page(chromium)
    try:
        goto(other, link)
        assert exceptions_text(other) == []
        assert other.get_by_role("slider", name=label).input_value() == now
        assert _flipped(other) == flipped
    finally:
        other.context.close()


def test_max_tokens_slider_keeps_a_large_value(tab, browser_data) -> None:
    """Moving max_tokens high (past half the slider) must leave it there, not snap to 100."""
    page = tab.page
    _open(page, tab.url, browser_data.traces[0].trace_id)
    label = "max_tokens (window budget)"
    slider = page.get_by_role("slider", name=label)
    hi = int(float(slider.get_attribute("max") or 0))
    rerun_and_settle(page, lambda: _click_track(page, label, 0.75))
    settle(page)
    value = int(float(slider.input_value()))
    assert value > hi // 2, f"max_tokens is {value} after moving it to ~75% of {hi}"
    assert f"max_tokens={value}" in page.url
    assert exceptions_text(page) == []
