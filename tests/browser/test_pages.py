"""Every page of the app opens in a real Chromium without an exception, and is photographed.

The screenshots (test-artifacts/screenshots/<page>.png) are for people: open them after a
run and look for overflowing tables, unreadable figures and empty states that say nothing.
"""

from __future__ import annotations

import pytest

from ctxapp.pages import PAGES, PageSpec

from . import exceptions_text, goto, nav_links, screenshot

#: every page of the registry (``ctxapp.pages.PAGES``), by its name
PAGE = pytest.mark.parametrize("spec", PAGES, ids=[p.name for p in PAGES])


def test_home_opens_and_lists_every_page(tab) -> None:
    page = tab.page
    goto(page, tab.url)
    assert exceptions_text(page) == []
    links = nav_links(page)
    labels = [label for label, _ in links]  # an icon's name may come before the title
    missing = [p.title for p in PAGES if not any(p.title in label for label in labels)]
    assert not missing and len(labels) == len(PAGES), f"navigation lacks {missing}: {labels}"
    screenshot(page, "home")


@PAGE
def test_page_renders_without_exception(tab, spec: PageSpec) -> None:
    page = tab.page
    goto(page, tab.url)
    matches = [(label, href) for label, href in nav_links(page) if spec.title in label]
    assert matches, f"no navigation link for {spec.title!r}"
    label, href = matches[0]
    goto(page, href)
    errors = exceptions_text(page)
    assert errors == [], f"{label}: Streamlit exception box:\n" + "\n---\n".join(errors)
    assert tab.page_errors == [], f"{label}: JavaScript errors: {tab.page_errors}"
    # Something besides the navigation rendered: the page has a heading or a widget.
    body = page.locator('[data-testid="stMainBlockContainer"]')
    assert body.inner_text().strip(), f"{label}: the page is blank"
    screenshot(page, spec.name)


#: Each page that opens on something, on the corpus session rather than on whatever trace is
#: newest (the XSS probe), as the registry's ``opens`` says; and Compare on two traces.
DEEP_LINKS = [
    (p.name, p.url(trace="browser-t2", session="browser-session")) for p in PAGES if p.opens
] + [("compare-both", "compare?a=browser-t0&b=browser-t2")]


@pytest.mark.parametrize(("name", "path"), DEEP_LINKS, ids=[d[0] for d in DEEP_LINKS])
def test_deep_link_opens_that_trace(tab, name: str, path: str) -> None:
    page = tab.page
    goto(page, f"{tab.url}/{path}")
    errors = exceptions_text(page)
    assert errors == [], f"{path}: Streamlit exception box:\n" + "\n---\n".join(errors)
    assert tab.page_errors == [], f"{path}: JavaScript errors: {tab.page_errors}"
    # The trace or session the link names is the one selected (shown in a picker's input).
    wanted = path.split("=")[-1]
    pickers = page.locator('[data-testid="stSelectbox"] input')
    values = [pickers.nth(i).input_value() for i in range(pickers.count())]
    shown = " ".join(values) + page.locator('[data-testid="stMainBlockContainer"]').inner_text()
    assert wanted in shown, f"{path}: {wanted!r} is not what the page shows"
    screenshot(page, f"{name}-deep-link")
