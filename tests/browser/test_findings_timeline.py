"""In Chromium: a finding is one click from its turn, and the Timeline's status legend stays in
view while the last rows of a long session's chart are read.

The demo session ``zh-opencode-codesummary-ctxscope`` has 35 stored turns and 188 packet rows:
its chart is ~4,300 px tall, so a legend drawn on the chart would scroll away with it.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from . import exceptions_text, goto, settle

LONG_SESSION = "zh-opencode-codesummary-ctxscope"
WALK_SESSION = "swe-pytest-7571-hello-agents"

#: the packet chart's row labels: (count, text of the lowest one on screen, its top, height)
_LOWEST_ROW_JS = """
() => {
  const ticks = [...document.querySelectorAll('.st-key-tl_heatmap g.ytick text')];
  const boxes = ticks.map(t => t.getBoundingClientRect());
  let k = 0;
  boxes.forEach((b, i) => { if (b.y > boxes[k].y) k = i; });
  return [ticks.length, ticks[k].textContent, boxes[k].y, boxes[k].height];
}
"""

_ROWS_JS = """
(key) => [...document.querySelectorAll(`.st-key-${key} table tr`)].map(
  r => [...r.querySelectorAll('th, td')].map(c => c.textContent))
"""


def _inside(box: dict[str, float] | None, width: int, height: int) -> bool:
    return (
        box is not None
        and box["x"] >= 0
        and box["y"] >= 0
        and box["x"] + box["width"] <= width
        and box["y"] + box["height"] <= height
    )


@pytest.mark.parametrize(("width", "height"), [(1024, 768), (1440, 900)])
def test_timeline_legend_stays_in_view_at_the_last_rows(tab, width: int, height: int) -> None:
    page = tab.page
    page.set_viewport_size({"width": width, "height": height})
    goto(page, f"{tab.url}/timeline?session={quote(LONG_SESSION)}")
    assert exceptions_text(page) == []
    n_rows, first_lowest, _, _ = page.evaluate(_LOWEST_ROW_JS)
    assert n_rows > 150, f"the long demo session should have ~190 rows, not {n_rows}"
    chart = page.locator(".st-key-tl_heatmap")
    chart.scroll_into_view_if_needed()
    # read down the chart the way a user does: the mouse wheel over it, until its last
    # row is on screen
    box = chart.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] / 2, max(box["y"], 0) + 200)
    for _ in range(200):
        _, label, top, h = page.evaluate(_LOWEST_ROW_JS)
        if 0 <= top and top + h <= height:
            break
        page.mouse.wheel(0, 250)
        page.wait_for_timeout(40)
    _, label, top, h = page.evaluate(_LOWEST_ROW_JS)
    assert 0 <= top and top + h <= height, f"the last row ({label}) never came into view"
    assert label == first_lowest  # the same chart, scrolled: not another one
    items = page.locator(".st-key-tl_legend .status-name")
    names = items.all_text_contents()
    assert {"kept", "dropped", "summarized"} <= set(names), names
    for i in range(items.count()):
        item = items.nth(i)
        assert _inside(item.bounding_box(), width, height), (
            f"legend entry {names[i]!r} is out of view ({item.bounding_box()}) while the "
            f"last row {label!r} is read at y={top:.0f} of {height}"
        )


def test_a_finding_on_traces_opens_its_turn_in_inspect(tab) -> None:
    page = tab.page
    page.set_viewport_size({"width": 1024, "height": 768})
    goto(page, f"{tab.url}/?view=findings&session={quote(WALK_SESSION)}")
    assert exceptions_text(page) == []
    grid = page.locator(".st-key-tr_findings [data-testid='stDataFrame']")
    grid.scroll_into_view_if_needed()
    # the grid draws on a canvas; its accessible table holds the text of the rows shown
    page.locator(".st-key-tr_findings table tr td").first.wait_for(state="attached")
    rows = page.evaluate(_ROWS_JS, "tr_findings")
    header, body = rows[0], rows[1:]
    # one session chosen: no session column, the message right after what was found
    assert header[:4] == ["turn", "severity", "detector", "message"], header
    assert body
    # newest first: turns never go up down the list
    turns = [int(r[0]) for r in body]
    assert turns == sorted(turns, reverse=True)
    pick = next(i for i, r in enumerate(body) if int(r[0]) < turns[0])  # not the first turn
    assert pick < 12, "the row must be on screen in the table"
    turn, _, detector = body[pick][:3]
    box = grid.bounding_box()
    assert box is not None
    # the row's selection box, left of its first cell (35 px rows under a 35 px header)
    page.mouse.click(box["x"] + 14, box["y"] + 35 * (pick + 1) + 17)
    page.wait_for_url("**/inspect?**")
    settle(page)
    assert exceptions_text(page) == []
    caption = page.locator('[data-testid="stCaptionContainer"]').filter(has_text="· turn ")
    assert f"session {WALK_SESSION} · turn {turn} ·" in " ".join(caption.first.inner_text().split())
    assert page.locator('[role="tab"][aria-selected="true"]').all_inner_texts() == ["Findings"]
    alerts = " ".join(page.locator('[data-testid="stAlert"]').all_inner_texts())
    assert detector in alerts, alerts
