"""Every page of the app opens in a real Chromium without an exception, and is photographed.

The screenshots (test-artifacts/screenshots/<page>.png) are for people: open them after a
run and look for overflowing tables, unreadable figures and empty states that say nothing.
"""

from __future__ import annotations

import pytest

from . import exceptions_text, goto, nav_links, screenshot, slug

#: The pages issue 4 asks for; a nav label must contain each word (case-insensitive).
EXPECTED_PAGES = ("traces", "inspect", "timeline", "playground", "compare", "sweep", "share")


def test_home_opens_and_lists_every_page(tab) -> None:
    page = tab.page
    goto(page, tab.url)
    assert exceptions_text(page) == []
    links = nav_links(page)
    labels = [label.lower() for label, _ in links]
    missing = [p for p in EXPECTED_PAGES if not any(p in label for label in labels)]
    assert not missing, f"navigation lacks {missing}; it shows {labels}"
    screenshot(page, "home")


@pytest.mark.parametrize("wanted", EXPECTED_PAGES)
def test_page_renders_without_exception(tab, wanted: str) -> None:
    page = tab.page
    goto(page, tab.url)
    matches = [(label, href) for label, href in nav_links(page) if wanted in label.lower()]
    assert matches, f"no navigation link for {wanted!r}"
    label, href = matches[0]
    goto(page, href)
    errors = exceptions_text(page)
    assert errors == [], f"{label}: Streamlit exception box:\n" + "\n---\n".join(errors)
    assert tab.page_errors == [], f"{label}: JavaScript errors: {tab.page_errors}"
    # Something besides the navigation rendered: the page has a heading or a widget.
    body = page.locator('[data-testid="stMainBlockContainer"]')
    assert body.inner_text().strip(), f"{label}: the page is blank"
    screenshot(page, slug(label))
