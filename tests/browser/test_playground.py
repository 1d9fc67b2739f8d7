"""Playground in a real browser: a slider flips packets, and a permalink reproduces the view."""

from __future__ import annotations

import re
import time

from . import (
    exceptions_text,
    fragment_runs,
    goto,
    recording,
    rerun_and_settle,
    runs,
    screenshot,
    settle,
)

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
    # a knob reruns the result fragments, not the page
    rerun_and_settle(page, lambda: _click_track(page, label, where), fragment=True)
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
    rerun_and_settle(page, lambda: _click_track(page, label, 0.75), fragment=True)
    settle(page)
    value = int(float(slider.input_value()))
    assert value > hi // 2, f"max_tokens is {value} after moving it to ~75% of {hi}"
    assert f"max_tokens={value}" in page.url
    assert exceptions_text(page) == []


def _wait_until(page, done, timeout_s: float = 45.0) -> None:
    """Wait for ``done()``, letting Playwright deliver websocket events meanwhile."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "no script run finished"
        page.wait_for_timeout(10)


def _bar_text(page) -> str:
    chart = page.locator('[data-testid="stPlotlyChart"]').first
    return chart.text_content() or ""


_MARK_PLOT = "() => { document.querySelector('.js-plotly-plot').__ctxscopeMark = 1; }"
_PLOT_MARKED = "() => document.querySelector('.js-plotly-plot').__ctxscopeMark === 1"


def test_a_knob_move_reruns_only_the_result(tab, browser_data) -> None:
    """A slider move reruns the result fragments, not the page: the server reports fragment
    runs and no whole-script run. The window bar is not redrawn when the move leaves the
    window's usage as it was, and shows the new usage when the move changes it."""
    from ctxapp.ui import views
    from ctxcore import figures
    from ctxcore.models import Config
    from ctxcore.pipeline import build, resolve_config

    page = tab.page
    t = browser_data.traces[0]
    assert t.result is not None

    def variant(**changes):
        # as the Playground re-runs: reserve and safety margin derived again by the preset
        cfg = resolve_config(
            Config(
                **{
                    **t.config.model_dump(),
                    "output_reserve": None,
                    "safety_margin": None,
                    **changes,
                }
            ),
            t.input,
        )
        return t.model_copy(update={"config": cfg, "result": build(t.input, cfg)})

    _open(page, tab.url, t.trace_id)
    whole, parts = runs(page), fragment_runs(page)
    slider = page.get_by_role("slider", name="min_relevance")
    start = float(slider.input_value())
    step = round(start + 0.01, 2)
    # on this trace a little more filtering leaves the window's usage as it was
    assert (
        figures.window_bar(variant(min_relevance=step)).to_json() == figures.window_bar(t).to_json()
    ), "the fixture's usage moved with min_relevance: pick another step"
    page.evaluate(_MARK_PLOT)
    slider.press("ArrowRight")
    _wait_until(page, lambda: runs(page) > whole or fragment_runs(page) > parts)
    settle(page)
    assert float(slider.input_value()) == step
    assert runs(page) == whole, "a knob move reran the whole page"
    assert fragment_runs(page) > parts
    assert f"min_relevance={step}" in page.url  # the permalink follows the move
    assert page.evaluate(_PLOT_MARKED), "the window bar was redrawn though it did not change"
    assert exceptions_text(page) == []

    # More room changes the usage: the bar shows it, with the flip count under it.
    label = "max_tokens (window budget)"
    rerun_and_settle(page, lambda: _click_track(page, label, 0.4), fragment=True)
    assert runs(page) == whole
    budget = int(float(page.get_by_role("slider", name=label).input_value()))
    now = variant(min_relevance=step, max_tokens=budget)
    assert now.result is not None and now.result.totals.used != t.result.totals.used
    used = f"used {now.result.totals.used:,} "
    chart = page.locator('[data-testid="stPlotlyChart"]').first
    chart.filter(has_text=used).wait_for()  # plotly draws the new figure asynchronously
    assert used in _bar_text(page)
    flips = views.flipped(t.result, now.result, t.input.history)
    assert _flipped(page) == len(flips)
    # The flip count is a line under the bar, not part of its figure (a figure that changes
    # with every move would be redrawn with every move).
    summary = views.flip_summary(flips)
    assert summary and "flipped" not in _bar_text(page)
    # the ids are code spans: the page shows them without their backticks
    shown = re.sub(r"(`+) (.*?) \1", r"\2", summary)
    assert page.get_by_text(shown, exact=True).is_visible(), shown
    assert exceptions_text(page) == []


#: what a knob move may draw: the summary (numbers, heading, flipped table or note, window
#: bar, its caption) and the rows of the decisions table with the line above them
MOVE_ELEMENTS = {"markdown", "heading", "dataframe", "plotly_chart", "empty"}


def _decision_pages(got) -> list:
    """The decisions tables (Arrow, decoded) among the recorded messages."""
    import pyarrow as pa

    out = []
    for _size, msg in got:
        if msg.WhichOneof("type") != "delta" or msg.delta.WhichOneof("type") != "new_element":
            continue
        el = msg.delta.new_element
        if el.WhichOneof("type") != "dataframe":
            continue
        table = pa.ipc.open_stream(el.dataframe.arrow_data.data).read_all()
        if "reason_text" in table.column_names:
            out.append(table)
    return out


def _drawn(got) -> set[str]:
    return {
        msg.delta.new_element.WhichOneof("type")
        for _size, msg in got
        if msg.WhichOneof("type") == "delta" and msg.delta.WhichOneof("type") == "new_element"
    }


def test_a_knob_move_sends_one_page_of_decisions_changed_first(tab, browser_data) -> None:
    """On a trace of more decisions than a page, a knob move sends one page of the table (not
    every row, not its controls), the packets that changed first with their status before;
    turning the page sends the next rows, and the pages hold every decision once."""
    from ctxapp.ui import views
    from ctxcore.formats.load import load_file

    page = tab.page
    demo = [t for f in browser_data.demo_files for t in load_file(f, "auto")]
    big = max(
        (t for t in demo if t.result and t.config.preset == "ctxscope"),
        key=lambda t: len(t.result.decisions),
    )
    assert big.result is not None and len(big.result.decisions) > views.PAGE_ROWS
    _open(page, tab.url, big.trace_id)
    with recording(page) as got:
        rerun_and_settle(page, lambda: _click_track(page, "min_relevance", 0.35), fragment=True)
    assert exceptions_text(page) == []
    (first,) = _decision_pages(got)
    assert first.num_rows == views.PAGE_ROWS
    assert _drawn(got) <= MOVE_ELEMENTS, "a move redrew more than the result (e.g. the controls)"
    flipped = _flipped(page)
    before = first.column("before").to_pylist()
    changed = sum(1 for b in before if b)
    assert 0 < changed <= flipped, (changed, flipped)
    assert all(before[:changed]) and not any(before[changed:]), "changed rows must lead"
    caption = page.get_by_text(re.compile(r"^[\d,]+ of [\d,]+ decisions · page 1 of 2")).first
    caption.wait_for()
    total = int(caption.inner_text().split(" of ")[1].split()[0].replace(",", ""))
    # the next page: its rows alone are sent, by the body fragment
    box = page.get_by_label("Page", exact=True)
    whole = runs(page)

    def turn() -> None:
        box.fill("2")
        box.press("Enter")

    with recording(page) as got:
        rerun_and_settle(page, turn, fragment=True)
    assert runs(page) == whole, "turning the page reran the whole page"
    (second,) = _decision_pages(got)
    assert _drawn(got) <= {"markdown", "dataframe"}
    ids = first.column("packet_id").to_pylist() + second.column("packet_id").to_pylist()
    assert len(ids) == len(set(ids)) == total
    screenshot(page, "playground-decisions-page-2")
