"""In Chromium: the Timeline's packet chart fills each cell's hover from the cell's values and
one template (``figures.CELL_HOVER``, issue 32 Speed): the hover Plotly draws is the text
``figures.cell_hover`` says, and a blank cell has none. A row's category is its hover's head
(label, whole id, kind), its tick the label alone."""

from __future__ import annotations

import html
import re
from typing import Any
from urllib.parse import quote

from ctxcore import figures

from . import exceptions_text, goto

SESSION = "swe-pytest-7571-hello-agents"

_GRID_JS = """
() => {
  const d = document.querySelector('.st-key-tl_heatmap .js-plotly-plot').data[0];
  const ticks = [...document.querySelectorAll('.st-key-tl_heatmap .ytick text')];
  return {x: d.x, y: d.y, customdata: d.customdata, hovertemplate: d.hovertemplate,
          ticks: ticks.map(t => t.textContent)};
}
"""
_HOVER_JS = """
() => [...document.querySelectorAll('.st-key-tl_heatmap .hoverlayer .hovertext')].map(
  g => [...g.querySelectorAll('text tspan.line')].map(t => t.textContent))
"""


def _lines(hover: str) -> list[str]:
    """A hover's lines as the browser shows them (tags dropped, entities read)."""
    return [html.unescape(re.sub(r"<[^>]+>", "", line)) for line in hover.split("<br>")]


def _hover_at(page: Any, box: dict[str, float], grid: dict[str, Any], i: int, j: int) -> Any:
    cols, rows = len(grid["x"]), len(grid["y"])
    page.mouse.move(
        box["x"] + (j + 0.5) * box["width"] / cols, box["y"] + (i + 0.5) * box["height"] / rows
    )
    page.wait_for_timeout(300)
    return page.evaluate(_HOVER_JS)


def test_a_cell_hover_is_its_values_in_the_template(tab) -> None:
    page = tab.page
    page.set_viewport_size({"width": 1440, "height": 900})
    goto(page, f"{tab.url}/timeline?session={quote(SESSION)}")
    assert exceptions_text(page) == []
    chart = page.locator(".st-key-tl_heatmap")
    chart.scroll_into_view_if_needed()
    grid = page.evaluate(_GRID_JS)
    assert grid["hovertemplate"] == figures.CELL_HOVER
    # each row's tick shows its label, not its hover's head (the y category)
    assert len(grid["ticks"]) == len(grid["y"])
    for i, tick in enumerate(grid["ticks"]):
        assert figures.timeline_row(grid, html.escape(tick)) == i
    box = page.locator(".st-key-tl_heatmap .nsewdrag").first.bounding_box()
    assert box is not None
    i = 0  # the top row, on screen however tall the chart
    filled = [j for j, c in enumerate(grid["customdata"][i]) if c is not None]
    blank = [j for j, c in enumerate(grid["customdata"][i]) if c is None]
    assert filled
    j = filled[len(filled) // 2]
    assert _hover_at(page, box, grid, i, j) == [_lines(figures.cell_hover(grid, i, j))]
    if blank:  # not a candidate there: no hover
        assert _hover_at(page, box, grid, i, blank[0]) == []
