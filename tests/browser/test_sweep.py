"""Sweep in a real browser: run a grid, pick a cell, and the Playground opens on its settings."""

from __future__ import annotations

import re

from . import exceptions_text, goto, rerun_and_settle, screenshot, settle

CELL = re.compile(r"(\w+) = ([\d.]+), (\w+) = ([\d.]+) →")
LABELS = {"max_tokens": "max_tokens (window budget)"}


def test_sweep_cell_opens_the_playground_with_its_settings(tab, browser_data) -> None:
    page = tab.page
    trace = browser_data.traces[2]
    goto(page, f"{tab.url}/sweep?trace={trace.trace_id}")
    assert exceptions_text(page) == []
    run = page.get_by_role("button", name=re.compile(r"^Run \d+ builds$"))
    rerun_and_settle(page, run.click)
    assert exceptions_text(page) == []
    assert page.locator('[data-testid="stPlotlyChart"]').count() >= 2, "no heatmaps drawn"
    screenshot(page, "sweep-grid")

    # Choose another cell than the first with the keyboard, then read back what is selected.
    cell_box = page.locator('[data-testid="stSelectbox"]').filter(has_text="Cell")
    combo = cell_box.locator("input")
    first = combo.input_value() or cell_box.inner_text()
    combo.click()
    for _ in range(8):
        combo.press("ArrowDown")
    rerun_and_settle(page, lambda: combo.press("Enter"))
    label = combo.input_value() or cell_box.inner_text()
    m = CELL.search(label)
    assert m, label
    x_name, x_val, y_name, y_val = m.group(1), float(m.group(2)), m.group(3), float(m.group(4))
    assert label != first, f"the keyboard pick did not change the cell ({first!r})"

    rerun_and_settle(page, page.get_by_role("button", name="Open cell in Playground").click)
    settle(page)
    assert "/playground" in page.url, page.url
    assert exceptions_text(page) == []
    assert f"trace={trace.trace_id}" in page.url
    for name, want in ((x_name, x_val), (y_name, y_val)):
        slider = page.get_by_role("slider", name=LABELS.get(name, name))
        got = float(slider.input_value())
        assert abs(got - want) < 1e-6, f"Playground shows {name}={got}, the cell was {want}"
