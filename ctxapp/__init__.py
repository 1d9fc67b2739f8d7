"""The ctxscope app: the Streamlit debugger on top of ``ctxcore``.

``app.py`` is the entry ``ctxscope app`` runs with ``streamlit run``; ``pages`` holds one file
per page and the page registry (``pages.PAGES``); ``ui`` holds the state, the view data and the
widgets the pages share. It ships in the same package as ``ctxcore``; ctxcore never imports it
(docs/design.md, "The app").
"""
