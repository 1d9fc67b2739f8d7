"""ctxscope — the Streamlit debugger (``ctxscope app`` runs this with ``streamlit run``).

Thin on purpose: it sets the page up, declares the pages (one file each under ``pages/``),
asks for the access token when the app was started with one (``ui.boot.unlocked``) and
shows our own errors (``CtxscopeError``) as a one-line message instead of a traceback
(``ui.boot.in_app``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:  # `pages` and `ui` import from the checkout
    sys.path.insert(0, str(ROOT))

from ui.boot import in_app, settle_heap, unlocked  # noqa: E402

# An emoji icon: Streamlit draws it as a data: URL. A :material/...: page icon would be
# fetched from Google's font CDN by every browser that opens the app.
st.set_page_config(page_title="ctxscope", page_icon="🔍", layout="wide")

PAGES = [
    # The default page is served at "/" whatever its url_path; the hidden twin makes
    # "/traces" (a link, a bookmark, the nav's own name) open the same page, not a
    # "Page not found" dialog. Page hashes derive from url_path, so the two must differ.
    st.Page(
        "pages/traces.py", title="Traces", icon=":material/list:", url_path="home", default=True
    ),
    st.Page(
        "pages/traces.py",
        title="Traces",
        icon=":material/list:",
        url_path="traces",
        visibility="hidden",
    ),
    st.Page("pages/inspect.py", title="Inspect", icon=":material/search:", url_path="inspect"),
    st.Page("pages/timeline.py", title="Timeline", icon=":material/timeline:", url_path="timeline"),
    st.Page(
        "pages/playground.py", title="Playground", icon=":material/tune:", url_path="playground"
    ),
    st.Page(
        "pages/compare.py", title="Compare", icon=":material/compare_arrows:", url_path="compare"
    ),
    st.Page("pages/sweep.py", title="Sweep", icon=":material/grid_on:", url_path="sweep"),
    st.Page("pages/replay.py", title="Replay", icon=":material/replay:", url_path="replay"),
    st.Page(
        "pages/share.py", title="Share / Import", icon=":material/ios_share:", url_path="share"
    ),
]

allowed = unlocked()  # before anything of a page is drawn
# Navigation runs either way (it decides how URLs map to pages), but shows no page names
# until the token has been given.
page = st.navigation(PAGES, position="sidebar" if allowed else "hidden")
if allowed:
    with st.sidebar:
        st.caption("ctxscope — where every token of the context window went, and why.")
    with in_app():  # our errors (CtxscopeError) become one short message
        page.run()
settle_heap()  # once per process, when the first run has imported what the pages need
