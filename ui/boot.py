"""Make every page file run through ``app.py``'s navigation, whatever URL opened the app.

Streamlit decides per server process whether an app uses the legacy ``pages/`` folder
mode: until ``st.navigation`` has run once, a ``pages/`` folder next to the main script
puts it in that mode, and a first visit straight to a page URL (a permalink!) would run
the page file alone — without ``app.py``'s navigation, page config or error handling.
A page file therefore renders only when ``app.py`` runs it; otherwise it switches the
process to the normal mode for good (as ``st.navigation`` would) and reruns, so that
``app.py`` runs and opens the same URL.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "app.py"
_IN_APP: contextvars.ContextVar[bool] = contextvars.ContextVar("ctxscope_in_app", default=False)


@contextmanager
def in_app() -> Iterator[None]:
    token = _IN_APP.set(True)
    try:
        yield
    finally:
        _IN_APP.reset(token)


def run_page(render: Callable[[], None]) -> None:
    if _IN_APP.get():
        render()
        return
    import streamlit as st
    from streamlit.runtime.pages_manager import PagesManager

    # What st.navigation does first; calling it here would register other pages. Legacy
    # and st.Page hashes both derive from the url path ("traces"), so the rerun lands on
    # the same page, now through app.py.
    PagesManager.uses_pages_directory = False
    st.rerun()
