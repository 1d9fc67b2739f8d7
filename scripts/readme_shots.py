"""The README's pictures: the "why did this turn go wrong" walk-through on the demo store.

Opens turn 15 of the demo's pytest-7571 session under the hello-agents preset (the failing
test log was filtered) on Inspect: the window, the findings, and the verified change that
would have kept the log; then the session's Timeline. Writes docs/*.png.

    .venv/bin/python scripts/readme_shots.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.browser import (  # noqa: E402
    demo_trace_files,
    fill_store,
    goto,
    launch_browser,
    new_page,
    rerun_and_settle,
    screenshot,
    start_server,
)

TRACE = "9a87d7201bb251ca8897fbc21cc0562c"  # swe-pytest-7571 (hello-agents), turn 15
SESSION = "swe-pytest-7571-hello-agents"


def main() -> int:
    out = ROOT / "docs"
    out.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ctxscope-readme-"))
    (work / "traces").mkdir()
    fill_store(work / "ctxscope.duckdb", demo_trace_files())
    server = start_server(work / "ctxscope.duckdb", work / "traces", work)
    try:
        with launch_browser() as browser:
            page = new_page(browser, width=1400, height=1000)
            goto(page, f"{server.url}/inspect?trace={TRACE}")
            shutil.copy(screenshot(page, "readme-inspect", max_height=1500), out / "inspect.png")
            rerun_and_settle(page, lambda: page.get_by_role("tab", name="Findings").click())
            # the walk-through's steps, as tests/browser/test_walkthrough.py takes them
            box = page.locator('[data-testid="stSelectbox"]').filter(has_text="Packet that was")
            box.locator("input").click()
            box.locator("input").fill("tool:call_4")
            option = page.get_by_role("option").filter(has_text="tool:call_4").first
            option.wait_for()
            rerun_and_settle(page, option.click)
            rerun_and_settle(page, lambda: page.get_by_text("Search the smallest change").click())
            page.get_by_text("min_relevance ≤").first.scroll_into_view_if_needed()
            shutil.copy(screenshot(page, "readme-findings"), out / "findings.png")
            goto(page, f"{server.url}/timeline?session={SESSION}")
            shutil.copy(screenshot(page, "readme-timeline"), out / "timeline.png")
    finally:
        server.stop()
    for name in ("inspect", "findings", "timeline"):
        print(out / f"{name}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
