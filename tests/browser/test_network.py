"""The app makes no request off the machine: it must work air-gapped and leak nothing.

Every request and websocket of a fresh browser context is recorded while each page is
opened on a real trace, with each of its lazy tabs: anything whose host is not
127.0.0.1/localhost fails the test. (A ``:material/...:`` page icon, for one, is fetched
from Google's font CDN; Streamlit draws an emoji icon as a ``data:`` URL.)
"""

from __future__ import annotations

from urllib.parse import urlsplit

from . import goto, rerun_and_settle

LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}
#: schemes that never reach a network
LOCAL_SCHEMES = {"data", "blob", "about", "chrome-extension"}

PAGES = [
    "",  # Traces
    "inspect?trace=browser-t2",
    "timeline?session=browser-session",
    "playground?trace=browser-t2",
    "compare?a=browser-t0&b=browser-t2",
    "sweep?trace=browser-t2",
    "share?trace=browser-t2",
]


def _off_host(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme in LOCAL_SCHEMES:
        return False
    return (parts.hostname or "") not in LOCAL_HOSTS


def test_no_request_leaves_the_machine(tab) -> None:
    page = tab.page
    seen: list[str] = []
    page.context.on("request", lambda r: seen.append(r.url))
    page.on("websocket", lambda ws: seen.append(ws.url))
    for path in PAGES:
        goto(page, f"{tab.url}/{path}")
        tabs = page.get_by_role("tab")
        for i in range(tabs.count()):
            if tabs.nth(i).get_attribute("aria-selected") != "true":
                rerun_and_settle(page, tabs.nth(i).click)
        page.wait_for_timeout(500)  # a favicon or font is fetched after the run settles
    assert len(seen) > len(PAGES), "no request was recorded at all"
    off = sorted({u for u in seen if _off_host(u)})
    assert off == [], f"requests left 127.0.0.1: {off}"
