"""Fixtures for the real-browser tests: one store, one ``streamlit run``, one Chromium per session.

Under ``CI=true`` a missing Chromium or Playwright is a failure, never a skip: the browser
tests are part of "done" for the app (issue 4). Outside CI they skip with the reason.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from . import (
    ARTIFACTS,
    SCREENSHOTS,
    AppServer,
    browser_missing_reason,
    demo_trace_files,
    fill_store,
    launch_browser,
    link_probe_trace,
    make_traces,
    new_page,
    slug,
    start_server,
    write_jsonl,
)

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).resolve().parent == HERE:
            item.add_marker(pytest.mark.browser)


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


@pytest.fixture(scope="session")
def browser_available() -> None:
    reason = browser_missing_reason()
    if reason is None:
        return
    if _in_ci():
        pytest.fail(f"CI=true but the browser tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@dataclass
class BrowserData:
    """What the session's store holds, so tests can ask for the traces they know exist."""

    db: Path
    traces_dir: Path
    workdir: Path
    traces: list[Any] = field(default_factory=list)
    demo_files: list[Path] = field(default_factory=list)


@pytest.fixture(scope="session")
def browser_data(browser_available: None, tmp_path_factory: pytest.TempPathFactory) -> BrowserData:
    work = tmp_path_factory.mktemp("browser-app")
    traces_dir = work / "traces"
    db = work / "ctxscope.duckdb"
    traces = make_traces()
    probe = link_probe_trace(traces[0].created_at)
    files = [
        write_jsonl(traces, traces_dir / "browser.jsonl"),
        write_jsonl([probe], traces_dir / "link-probe.jsonl"),
    ]
    traces.append(probe)
    demo = demo_trace_files()
    fill_store(db, files + demo)
    return BrowserData(db=db, traces_dir=traces_dir, workdir=work, traces=traces, demo_files=demo)


@pytest.fixture(scope="session")
def app_server(browser_data: BrowserData) -> Iterator[AppServer]:
    # This run's screenshots only: a stale picture of a page that now fails would mislead.
    shutil.rmtree(SCREENSHOTS, ignore_errors=True)
    shutil.rmtree(ARTIFACTS / "failures", ignore_errors=True)
    server = start_server(browser_data.db, browser_data.traces_dir, browser_data.workdir)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def chromium(browser_available: None) -> Iterator[Any]:
    with launch_browser() as browser:
        yield browser


@dataclass
class Tab:
    """A fresh browser page, with every JS dialog and page error it saw recorded."""

    page: Any
    url: str
    dialogs: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    rep = yield
    if rep.when == "call":
        item.stash[_FAILED] = rep.failed
    return rep


_FAILED = pytest.StashKey[bool]()


@pytest.fixture
def tab(request: pytest.FixtureRequest, chromium: Any, app_server: AppServer) -> Iterator[Tab]:
    page = new_page(chromium)
    t = Tab(page=page, url=app_server.url)

    def on_dialog(dialog: Any) -> None:
        t.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page.on("pageerror", lambda exc: t.page_errors.append(str(exc)))
    try:
        yield t
    finally:
        if request.node.stash.get(_FAILED, False):
            # What the page looked like when the test failed, next to the server's log.
            out = ARTIFACTS / "failures"
            out.mkdir(parents=True, exist_ok=True)
            name = slug(request.node.name)
            try:
                page.screenshot(path=str(out / f"{name}.png"), full_page=True)
            except Exception as exc:  # the page may be gone; the test's own error matters
                print(f"failure screenshot not taken: {exc}")
            (out / f"{name}.server.log").write_text(app_server.log_tail(200))
        page.context.close()
