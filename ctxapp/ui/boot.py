"""Make every page file run through ``app.py``'s navigation, whatever URL opened the app.

Streamlit decides per server process whether an app uses the legacy ``pages/`` folder
mode: until ``st.navigation`` has run once, a ``pages/`` folder next to the main script
puts it in that mode, and a first visit straight to a page URL (a permalink!) would run
the page file alone — without ``app.py``'s navigation, page config or error handling.
A page file therefore renders only when ``app.py`` runs it; otherwise it switches the
process to the normal mode for good (as ``st.navigation`` would) and reruns, so that
``app.py`` runs and opens the same URL.

AppTest resets that mode before every run and then runs page files directly (after the
first run); a rerun there would swallow the button click that caused the run, so under
AppTest the page renders in place, with the same error handling (and token gate) as
``app.py``.

The token gate: ``ctxscope app`` off loopback must be started with a token, which it hands
to the app as ``$CTXSCOPE_TOKEN`` (docs/design.md, "The app"). With a token set, a browser
session sees nothing but one short message until a URL carries ``?token=<token>``; the
session then remembers that (so navigation and links work) and the token leaves the
address bar, so it is not handed on with a copied permalink.
"""

from __future__ import annotations

import contextvars
import gc
import hmac
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_IN_APP: contextvars.ContextVar[bool] = contextvars.ContextVar("ctxscope_in_app", default=False)
#: session-state key: this session gave the right token once
_TOKEN_OK = "_ctxscope_token_ok"
TOKEN_PARAM = "token"
#: session-state key: the team-store token this session gave (checked again on every run)
_TEAM_TOKEN = "_ctxscope_team_token"
#: the login box's key
_LOGIN_KEY = "login_token"
TEAM_LOCKED_MESSAGE = (
    "This ctxscope app shows a team store: give your token (`ctxscope token add NAME` made "
    "it; ask the store's owner)."
)
LOCKED_MESSAGE = (
    "This ctxscope app needs its access token: open it with `?token=` and the token it was "
    "started with (`ctxscope app --token`) at the end of the address."
)


_HEAP_SETTLED = threading.Event()
_HEAP_LOCK = threading.Lock()


def settle_heap() -> None:
    """Once per server process, after its first page run: collect, then move every object
    alive (the imported libraries, ~135,000 objects: Streamlit, pandas, pyarrow, plotly,
    DuckDB, ctxcore) out of the garbage collector's reach for good (``gc.freeze``). They
    live as long as the process, and a full collection walked them all, 70-110 ms, every
    few Playground knob moves (docs/design.md, "The app")."""
    if _HEAP_SETTLED.is_set():
        return
    from streamlit import config

    if config.get_option("global.appTest"):
        return  # AppTest runs the app inside the test process: its heap is not ours
    with _HEAP_LOCK:
        if _HEAP_SETTLED.is_set():
            return
        gc.collect()
        gc.freeze()
        _HEAP_SETTLED.set()


def unlocked() -> bool:
    """Whether this session may see the app; if not, the only thing drawn is a message.

    No token configured: always. Otherwise the session must have given it once, or give
    it now in the URL; the comparison takes the same time whatever the guess.
    """
    from ctxapp.ui import state
    from ctxcore import settings

    if state.team_store():
        return _team_unlocked()
    want = settings.app_token()
    if not want:
        return True
    given = state.qp_pop(TOKEN_PARAM)  # off the address bar, right or wrong
    if given is not None and hmac.compare_digest(given.encode(), want.encode()):
        state.ss_set(_TOKEN_OK, True)
    if state.ss_get(_TOKEN_OK) is True:
        return True
    import streamlit as st

    st.info(LOCKED_MESSAGE, icon=":material/lock:")
    return False


def _team_token() -> tuple[str | None, bool]:
    """The token this session gives on a team store, and whether it gave it before: from
    ``?token=`` (taken off the address bar), else the login box, else the one it gave before,
    else ``$CTXSCOPE_TOKEN`` (a script's, for every session of this app)."""
    from ctxapp.ui import state
    from ctxcore import settings

    for given in (state.qp_pop(TOKEN_PARAM), state.ss_get(_LOGIN_KEY)):
        if given and str(given).strip():
            return str(given).strip(), False
    remembered = state.ss_get(_TEAM_TOKEN)
    if remembered:
        return str(remembered), True
    return settings.app_token() or None, False


def _team_unlocked() -> bool:
    """The team store's gate: a live token of ``ctxscope_tokens`` (``ctxscope token add``),
    checked again at least every 5 s, so a revoked one locks its sessions out; else a login
    box (docs/design.md, "Store", access)."""
    import streamlit as st

    from ctxapp.ui import state
    from ctxapp.ui.views import md
    from ctxcore.errors import CtxscopeError

    token, remembered = _team_token()
    try:
        holder = state.token_holder(token) if token else None
    except CtxscopeError as exc:
        st.error(md(exc), icon=":material/error:")
        return False
    if holder is not None:
        state.ss_set(_TEAM_TOKEN, token)
        return True
    state.ss_set(_TEAM_TOKEN, None)
    st.info(TEAM_LOCKED_MESSAGE, icon=":material/lock:")
    if token:
        st.error(
            "That token was revoked." if remembered else "That token is not one of this store's.",
            icon=":material/key_off:",
        )
    with st.form("ctxscope_login"):
        st.text_input("Your token", type="password", key=_LOGIN_KEY)
        st.form_submit_button("Open")
    return False


@contextmanager
def in_app() -> Iterator[None]:
    """Mark the page runs of this script run as coming through ``app.py``; show our errors."""
    import streamlit as st

    from ctxcore.errors import CtxscopeError

    token = _IN_APP.set(True)
    try:
        yield
    except CtxscopeError as exc:
        from ctxapp.ui.views import md

        st.error(md(exc), icon=":material/error:")
    finally:
        _IN_APP.reset(token)


def _page(render: Callable[[], None]) -> None:
    """A page, under the line saying the store is a read-only copy when another process
    holds it (a second ``ctxscope app`` on the same store)."""
    import streamlit as st

    from ctxapp.ui import state
    from ctxapp.ui.views import md

    held = state.held()
    if held is not None:
        st.warning(md(held), icon=":material/lock:")
    render()


def run_page(render: Callable[[], None]) -> None:
    if _IN_APP.get():
        _page(render)
        return
    import streamlit as st
    from streamlit import config

    # AppTest patches the module attribute (st.get_option is bound to the original).
    if config.get_option("global.appTest"):
        with in_app():
            if unlocked():
                _page(render)
        return
    from streamlit.runtime.pages_manager import PagesManager

    # What st.navigation does first; calling it here would register other pages. Legacy
    # and st.Page hashes both derive from the url path ("traces"), so the rerun lands on
    # the same page, now through app.py.
    PagesManager.uses_pages_directory = False
    st.rerun()
