"""The token gate in a real browser: nothing but a message until the URL has the token.

A second server runs with ``CTXSCOPE_TOKEN`` set (as ``ctxscope app --host 0.0.0.0 --token``
starts it) on a store of its own (DuckDB lets one process hold a store). Without the token
no page, navigation or trace shows; with it, the session opens every page, and the token
is gone from the address bar so a copied link does not hand it on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ctxapp.pages import PAGES

from . import (
    AppServer,
    fill_store,
    goto,
    make_traces,
    nav_links,
    new_page,
    rerun_and_settle,
    screenshot,
    start_server,
)
from . import write_jsonl as _write

TOKEN = "browser-s3cret"
LOCKED = "needs its access token"


@pytest.fixture(scope="module")
def token_server(
    browser_available: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AppServer]:
    work = tmp_path_factory.mktemp("token-app")
    fill_store(work / "ctxscope.duckdb", [_write(make_traces(), work / "in" / "t.jsonl")])
    server = start_server(
        work / "ctxscope.duckdb", work / "traces", work, extra_env={"CTXSCOPE_TOKEN": TOKEN}
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fresh(chromium, token_server: AppServer) -> Iterator[Any]:
    page = new_page(chromium)
    try:
        yield page
    finally:
        page.context.close()


def _main_text(page: Any) -> str:
    text: str = page.locator('[data-testid="stMain"]').inner_text()
    return text


def _assert_locked(page: Any, where: str) -> None:
    text = _main_text(page)
    assert LOCKED in text, f"{where}: no lock message, the page shows {text[:300]!r}"
    assert "browser-t" not in text and nav_links(page) == [], f"{where}: content leaked"
    assert page.locator('[data-testid="stSelectbox"], [data-testid="stDataFrame"]').count() == 0


def test_without_the_token_nothing_shows(fresh, token_server: AppServer) -> None:
    # the root, and every page of the registry as its links open it
    urls = [p.url(trace="browser-t1", session="browser-session") for p in PAGES]
    for path in ("", *urls):
        goto(fresh, f"{token_server.url}/{path}")
        _assert_locked(fresh, path or "/")
    goto(fresh, f"{token_server.url}/inspect?trace=browser-t1&token={TOKEN}x")
    _assert_locked(fresh, "a wrong token")
    assert "token=" not in fresh.url, "a wrong token stays in the address bar"
    screenshot(fresh, "token-locked")


def test_the_token_opens_the_session_and_leaves_the_url(fresh, token_server) -> None:
    goto(fresh, f"{token_server.url}/inspect?trace=browser-t1&token={TOKEN}")
    assert LOCKED not in _main_text(fresh)
    assert fresh.get_by_role("heading", name="Inspect").count() == 1
    assert "token=" not in fresh.url and "trace=browser-t1" in fresh.url, fresh.url
    # The session remembers: its navigation works without the token in any URL. (A reload
    # is a new session, which needs the token again.)
    link = fresh.locator('[data-testid="stSidebarNavLink"]').filter(has_text="Timeline")
    assert "token" not in (link.get_attribute("href") or "")
    rerun_and_settle(fresh, link.click)
    assert fresh.get_by_role("heading", name="Timeline").count() == 1
    assert LOCKED not in _main_text(fresh)
