"""The policy lab in a real browser, as a new user tries it (issue 33, "done when"): a real
Claude Code session imported on the Share page, three policies compared on the Replay page,
two knobs of one swept, the winner opened in the Playground; at 1024 and 1440 px, tables
and charts whole."""

from __future__ import annotations

import re
from pathlib import Path

from . import (
    exceptions_text,
    goto,
    label_clashes,
    rerun_and_settle,
    screenshot,
    settle,
    table_cuts,
)

LOG = (
    Path(__file__).resolve().parent.parent
    / "fixtures"
    / "imports"
    / "claude-code"
    / "ccviewer-task-sidechain-session.jsonl"
)
MAIN = "5c0375b4-57a5-4f26-b12d-d022ee4e51b7"  # its main session: 10 calls


def _import(page, url: str) -> None:
    goto(page, f"{url}/share")
    page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(str(LOG))
    page.get_by_role("button", name=f"Remove {LOG.name}").wait_for()
    settle(page)
    rerun_and_settle(page, lambda: page.get_by_role("button", name="Import", exact=True).click())
    page.locator('[data-testid="stAlert"]').filter(has_text="Imported 20 trace(s)").wait_for()
    assert exceptions_text(page) == []


def test_import_compare_three_policies_and_open_the_winner(tab) -> None:
    page = tab.page
    _import(page, tab.url)
    goto(page, f"{tab.url}/replay?session={MAIN}&view=lab")
    assert exceptions_text(page) == []
    charts = page.locator('[data-testid="stPlotlyChart"]')
    assert charts.count() == 0, "evaluated before the button"
    run = page.get_by_role("button", name="Evaluate 3 policies on 10 turns")
    rerun_and_settle(page, run.click)
    assert exceptions_text(page) == []
    assert charts.count() == 1, "no cost-against-recall chart"
    grid = page.get_by_role("button", name=re.compile(r"^Evaluate the \d+ cells$"))
    rerun_and_settle(page, grid.click)
    assert exceptions_text(page) == []
    assert charts.count() == 2, "no heatmap"
    for width, height in ((1024, 768), (1440, 900)):
        page.set_viewport_size({"width": width, "height": height})
        settle(page)
        assert table_cuts(page) == [], (width, table_cuts(page))
        assert label_clashes(page) == [], width
        screenshot(page, f"replay-policy-lab-{width}")
    opens = page.get_by_role("button", name="Open in Playground")
    assert opens.count() == 2  # a policy of the table, a cell of the grid
    rerun_and_settle(page, opens.first.click)
    settle(page)
    assert "/playground" in page.url and "preset=" in page.url, page.url
    assert exceptions_text(page) == []
    assert page.get_by_text(re.compile(r"^Flipped \(\d+\)$")).count() == 1
    screenshot(page, "replay-policy-lab-winner-in-playground")
