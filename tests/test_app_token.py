"""The token gate: served beyond loopback, the app shows nothing until the URL has the token.

``ctxscope app --host 0.0.0.0 --token T`` hands T to the app as ``$CTXSCOPE_TOKEN``. Each
page is opened through the real ``app.py`` with AppTest: without a token configured it
renders as always; with one, a session sees only the lock message until a URL carries
``?token=T``, and from then on every page (the token itself leaves the URL).
"""

from __future__ import annotations

from pathlib import Path

import app_support as data
import pytest
from streamlit.testing.v1 import AppTest

from ctxapp.pages import DEFAULT, PAGES, PageSpec
from ctxapp.ui.boot import LOCKED_MESSAGE
from ctxcore import settings

APP = str(Path(__file__).resolve().parent.parent / "ctxapp" / "app.py")
TOKEN = "s3cret-Tøken"  # not ASCII: compared as bytes


@pytest.fixture(scope="module")
def traces() -> list:
    return data.session("sess-token", 2)


@pytest.fixture
def db(traces, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    path = tmp_path / "ctxscope.duckdb"  # the conftest points CTXSCOPE_DB here
    data.fill(path, traces)
    return path


run = data.rerun


def locked(at: AppTest) -> bool:
    """Only the lock message is drawn: no title, no widget, no table, nothing in the sidebar."""
    drawn = [e for e in (*at.main, *at.sidebar) if not hasattr(e, "children")]
    return [i.value for i in at.info] == [LOCKED_MESSAGE] and len(drawn) == 1


def opened(spec: PageSpec) -> dict[str, str]:
    """The query that opens ``spec`` on the session's second turn (or the session)."""
    return data.opening(spec, trace="sess-token-t1", session="sess-token")


#: every page of the registry (``ctxapp.pages.PAGES``), by its name
PAGE = pytest.mark.parametrize("spec", PAGES, ids=[p.name for p in PAGES])


@PAGE
def test_no_token_configured_pages_render(db: Path, monkeypatch, spec: PageSpec) -> None:
    monkeypatch.delenv(settings.ENV_TOKEN, raising=False)
    at = run(AppTest.from_file(APP, default_timeout=60))
    at = run(at, spec.name if spec != DEFAULT else None, **opened(spec))
    assert [t.value for t in at.title] == [spec.title]
    assert LOCKED_MESSAGE not in [i.value for i in at.info]


@PAGE
def test_token_configured_pages_stay_locked_without_it(
    db: Path, monkeypatch, spec: PageSpec
) -> None:
    monkeypatch.setenv(settings.ENV_TOKEN, TOKEN)
    at = run(AppTest.from_file(APP, default_timeout=60))
    assert locked(at)
    at = run(at, spec.name, **opened(spec))
    assert locked(at), [(e.type, getattr(e, "value", "")) for e in at.main]
    at = run(at, token=TOKEN[:-1] + "x")  # a wrong guess changes nothing
    assert locked(at)


def test_token_in_the_url_unlocks_the_session(db: Path, monkeypatch) -> None:
    monkeypatch.setenv(settings.ENV_TOKEN, TOKEN)
    at = run(AppTest.from_file(APP, default_timeout=60), token=TOKEN)
    assert at.title[0].value == "Traces"
    assert "token" not in at.query_params  # off the address bar
    # the session remembers: other pages (and their own parameters) open without it
    for spec in PAGES:
        if spec != DEFAULT:
            at = run(at, spec.name, **opened(spec))
            assert not locked(at) and [t.value for t in at.title] == [spec.title], spec.name
    at = run(at, "inspect", trace="sess-token-t0")
    assert at.title[0].value == "Inspect"
    assert at.query_params["trace"] == "sess-token-t0"


def test_a_new_session_needs_the_token_again(db: Path, monkeypatch) -> None:
    monkeypatch.setenv(settings.ENV_TOKEN, TOKEN)
    run(AppTest.from_file(APP, default_timeout=60), token=TOKEN)
    assert locked(run(AppTest.from_file(APP, default_timeout=60)))
