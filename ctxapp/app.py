"""ctxscope — the Streamlit debugger (``ctxscope app`` runs this with ``streamlit run``).

Thin on purpose: it sets the page up, declares the pages (the registry ``pages.PAGES``, one
file each under ``pages/``), asks for the access token when the app was started with one
(``ui.boot.unlocked``) and shows our own errors (``CtxscopeError``) as a one-line message
instead of a traceback (``ui.boot.in_app``).
"""

from __future__ import annotations

import streamlit as st

from ctxapp.pages import DEFAULT, PAGES
from ctxapp.ui.boot import in_app, settle_heap, unlocked

# An emoji icon: Streamlit draws it as a data: URL. A :material/...: page icon would be
# fetched from Google's font CDN by every browser that opens the app.
st.set_page_config(page_title="ctxscope", page_icon="🔍", layout="wide")

# The default page is served at "/" whatever its url_path; the hidden twin makes "/traces" (a
# link, a bookmark, the nav's own name) open the same page, not a "Page not found" dialog. Page
# hashes derive from url_path, so the two must differ.
NAV = [
    st.Page(DEFAULT.script, title=DEFAULT.title, icon=DEFAULT.icon, url_path="home", default=True),
    *(
        st.Page(
            p.script,
            title=p.title,
            icon=p.icon,
            url_path=p.url_path,
            visibility="hidden" if p is DEFAULT else "visible",
        )
        for p in PAGES
    ),
]

allowed = unlocked()  # before anything of a page is drawn
# Navigation runs either way (it decides how URLs map to pages), but shows no page names
# until the token has been given.
page = st.navigation(NAV, position="sidebar" if allowed else "hidden")
if allowed:
    with st.sidebar:
        st.caption("ctxscope — where every token of the context window went, and why.")
    with in_app():  # our errors (CtxscopeError) become one short message
        page.run()
settle_heap()  # once per process, when the first run has imported what the pages need
