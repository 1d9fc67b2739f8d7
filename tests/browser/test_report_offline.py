"""The HTML report of a trace, opened alone in Chromium: charts render with no network,
hostile packet text runs nothing, and the report stays small. (Uses the session's
browser: one Playwright per run.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_share import _xss_trace

from ctxcore.formats.share import html_report

pytestmark = pytest.mark.browser


def test_html_report_opens_offline_in_chromium(chromium: Any, tmp_path: Path) -> None:
    page_file = tmp_path / "report.html"
    page_file.write_text(html_report([_xss_trace()]), encoding="utf-8")
    page = chromium.new_page()
    try:
        dialogs: list[str] = []
        errors: list[str] = []
        requests: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("request", lambda r: requests.append(r.url))
        page.goto(page_file.as_uri())
        page.wait_for_selector(".fig svg", timeout=15000)
        page.wait_for_timeout(500)
        # the window bar and the partition bars are drawn (inline SVG, no script)
        assert page.locator(".fig svg").count() >= 2
        box = page.locator(".fig svg").first.bounding_box()
        assert box is not None and box["width"] > 300 and box["height"] > 10
        assert page.locator("text=Findings").count() >= 1
        assert "<script>alert(1)</script>" in page.inner_text("body")
        assert dialogs == [] and errors == []
        assert [u for u in requests if not u.startswith("file:")] == []
    finally:
        page.close()
