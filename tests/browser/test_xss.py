"""Packet content is untrusted: HTML and JS in a trace must show as text, never run.

The probe trace (``XSS_TRACE_ID``) carries ``<script>alert(1)</script>``, an ``<img onerror>``
and a ``javascript:`` markdown link in packet content, in a packet id and in the query. Every
page that shows that trace is opened in Chromium with a dialog listener: an ``alert`` firing,
an ``<img src=x>`` element or a ``javascript:`` anchor in the DOM would mean the payload was
rendered as HTML or markdown.
"""

from __future__ import annotations

import pytest

from ctxapp.pages import PAGES as REGISTRY

from . import (
    XSS_SCRIPT,
    XSS_TRACE_ID,
    exceptions_text,
    goto,
    rerun_and_settle,
    screenshot,
    settle,
)

# With ``scripts`` true, a <script> whose text mentions alert(1) counts too (the app has no
# reason to ship one; the HTML report legitimately carries the payload as JSON data).
_INJECTED_JS = """
(scripts) => {
  const docs = [document];
  for (const f of document.querySelectorAll('iframe')) {
    try { if (f.contentDocument) docs.push(f.contentDocument); } catch (e) {}
  }
  const out = [];
  for (const d of docs) {
    for (const img of d.querySelectorAll('img')) {
      const src = img.getAttribute('src') || '';
      if (src === 'x' || img.hasAttribute('onerror')) out.push('img ' + img.outerHTML);
    }
    for (const a of d.querySelectorAll('a[href]')) {
      const href = (a.getAttribute('href') || '').trim().toLowerCase();
      if (href.startsWith('javascript:')) out.push('anchor ' + a.outerHTML);
    }
    for (const s of (scripts ? d.querySelectorAll('script') : [])) {
      if ((s.textContent || '').includes('alert(1)')) out.push('script ' + s.outerHTML);
    }
  }
  return out;
}
"""


def _assert_inert(tab, where: str) -> None:
    page = tab.page
    settle(page)
    # Let any injected handler (img onerror fires asynchronously) have its chance.
    page.wait_for_timeout(300)
    assert tab.dialogs == [], f"{where}: a JavaScript dialog opened: {tab.dialogs}"
    injected = page.evaluate(_INJECTED_JS, True)
    assert injected == [], f"{where}: payload rendered as HTML: {injected}"
    assert exceptions_text(page) == [], f"{where}: exception box"


#: what a page's query adds to its registry ``opens``: the Playground lets every packet in
EXTRA_QUERY = {"playground": "&min_relevance=0"}
#: every page of the registry but Inspect (a test of its own) opened on the probe (its trace,
#: its session), and the Traces page searching for it
PAGES = [
    (p.name, p.url(trace=XSS_TRACE_ID, session="xss-session") + EXTRA_QUERY.get(p.name, ""))
    for p in REGISTRY
    if p.name != "inspect"
] + [("traces-search", "?search=alert")]  # the default page lives at /, not /traces


def test_inspect_shows_payloads_as_text(tab, browser_data) -> None:
    page = tab.page
    goto(page, f"{tab.url}/inspect?trace={XSS_TRACE_ID}")
    _assert_inert(tab, "inspect")
    body = page.locator("body").inner_text()
    assert XSS_SCRIPT in body, "the query's <script> payload is not shown as literal text"
    trace = next(t for t in browser_data.traces if t.trace_id == XSS_TRACE_ID)
    assert trace.result is not None
    if XSS_SCRIPT in trace.result.prompt:
        # The app's tabs are lazy (only the open one runs): a click starts a rerun.
        rerun_and_settle(page, page.get_by_role("tab", name="Prompt").click)
        prompt = page.locator('[data-testid="stCode"]').filter(has_text=XSS_SCRIPT).first
        assert prompt.is_visible(), "the kept <script> packet is not visible in the prompt"
    screenshot(page, "xss-inspect")
    _assert_inert(tab, "inspect, prompt tab")


@pytest.mark.parametrize(("name", "path"), PAGES, ids=[p[0] for p in PAGES])
def test_other_pages_keep_payloads_inert(tab, name: str, path: str) -> None:
    goto(tab.page, f"{tab.url}/{path}")
    _assert_inert(tab, name)
    # Open every tab of the page: hidden panels are rendered only when shown.
    tabs = tab.page.get_by_role("tab")
    for i in range(tabs.count()):
        if tabs.nth(i).get_attribute("aria-selected") == "true":
            _assert_inert(tab, f"{name}, tab {i}")
            continue
        rerun_and_settle(tab.page, tabs.nth(i).click)  # lazy tabs: a click reruns
        _assert_inert(tab, f"{name}, tab {i}")
