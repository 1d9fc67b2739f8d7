"""Ids, tags and metadata are untrusted text: no link, no bold, whatever they look like.

The link probe (``LINK_TRACE_ID``) has ``https://evil.example/x`` as its session id, and
that URL, a markdown link, ``**bold**`` and ``<b>x</b>`` as its tags, packet ids and
metadata values. Markdown renders the middle two and autolinks the first; plotly's
pseudo-HTML renders the last. Every page that shows the probe is opened, with every lazy
tab, and must hold no anchor pointing off-host and no bold element made from a payload;
Inspect must show the payloads literally (eaten markup would be a bug too).
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from ctxapp.pages import PAGES as REGISTRY

from . import (
    LINK_PAYLOADS,
    LINK_SESSION,
    LINK_TRACE_ID,
    exceptions_text,
    goto,
    rerun_and_settle,
    screenshot,
    settle,
)

# Off-host anchors and bold text made from a payload, in the page and its iframes; the
# app's own bold (e.g. "**3** matching traces") is numbers and fixed words, not these.
_RENDERED_JS = """
() => {
  const local = new Set(['127.0.0.1', 'localhost', '']);
  const baits = new Set(['bold', 'x', 'click']);
  const docs = [document];
  for (const f of document.querySelectorAll('iframe')) {
    try { if (f.contentDocument) docs.push(f.contentDocument); } catch (e) {}
  }
  const out = [];
  for (const d of docs) {
    for (const a of d.querySelectorAll('a[href]')) {
      let host = '';
      try { host = new URL(a.getAttribute('href'), d.baseURI).hostname; } catch (e) {}
      if (!local.has(host)) out.push('anchor ' + a.outerHTML.slice(0, 200));
    }
    for (const b of d.querySelectorAll('strong, b')) {
      if (baits.has((b.textContent || '').trim())) out.push('bold ' + b.outerHTML.slice(0, 200));
    }
    // plotly draws <b> in labels and titles as a bold tspan
    for (const t of d.querySelectorAll('tspan')) {
      const bold = /font-weight:\\s*(bold|[6-9]00)/.test(t.getAttribute('style') || '');
      if (bold && baits.has((t.textContent || '').trim())) out.push('svg bold ' + t.outerHTML);
    }
  }
  return out;
}
"""

_PROBE = quote(LINK_TRACE_ID, safe="")
_SESSION = quote(LINK_SESSION, safe="")
#: every page of the registry opened on the probe (its trace, its session), as ``opens`` says
PAGES = [(p.name, p.url(trace=_PROBE, session=_SESSION)) for p in REGISTRY] + [
    ("traces-session", f"?session={_SESSION}"),  # the default page at /, on the session
    # an unknown id from a link is echoed in a warning, a sentence of markdown
    ("missing", f"inspect?trace={_SESSION}"),
]


def _assert_text_only(tab, where: str) -> None:
    page = tab.page
    settle(page)
    rendered = page.evaluate(_RENDERED_JS)
    assert rendered == [], f"{where}: a payload rendered as a link or bold: {rendered}"
    assert exceptions_text(page) == [], f"{where}: exception box"


@pytest.mark.parametrize(("name", "path"), PAGES, ids=[p[0] for p in PAGES])
def test_payloads_render_as_text(tab, name: str, path: str) -> None:
    page = tab.page
    goto(page, f"{tab.url}/{path}")
    _assert_text_only(tab, name)
    tabs = page.get_by_role("tab")
    for i in range(tabs.count()):
        if tabs.nth(i).get_attribute("aria-selected") != "true":
            rerun_and_settle(page, tabs.nth(i).click)  # lazy tabs: a click reruns
        _assert_text_only(tab, f"{name}, tab {i}")
    screenshot(page, f"links-{name}")


def test_inspect_shows_the_payloads_literally(tab) -> None:
    page = tab.page
    goto(page, f"{tab.url}/inspect?trace={_PROBE}")
    main = page.locator('[data-testid="stMainBlockContainer"]').inner_text()
    missing = [p for p in LINK_PAYLOADS if p not in main]
    assert not missing, f"the trace caption does not show {missing} as typed"
