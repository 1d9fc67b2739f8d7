"""The app's pages: one file each, and the one list of them (``PAGES``).

``app.py`` builds its navigation from ``PAGES``; the tests (every page token-gated, every page
free of exceptions, every page's tables and screenshots) and ``scripts/screenshots.py`` read the
same list. Adding a page is its file here plus one entry (docs/design.md, "How to add a page").
This module imports nothing from Streamlit, so tests and scripts read it cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class PageSpec:
    """One page of the app: its file (beside this module), its title and icon in the
    navigation, and its URL path (``/<url_path>``)."""

    file: str
    title: str
    icon: str
    url_path: str
    #: what the page is for, one line
    purpose: str
    #: the query that opens the page on something, ``{t}`` a trace id and ``{s}`` a session id
    #: (``"trace={t}"``); empty for a page that needs none
    opens: str = ""

    @property
    def name(self) -> str:
        """The page's short name, its file's stem (``inspect``), as ``by_name`` takes it."""
        return self.file.removesuffix(".py")

    @property
    def script(self) -> str:
        """The page's path as ``st.Page`` and ``AppTest.switch_page`` take it: relative to
        ``app.py``'s folder."""
        return f"pages/{self.file}"

    def url(self, trace: str = "", session: str = "") -> str:
        """The page's URL path and query, opened on ``trace`` / ``session`` as ``opens`` says
        (``inspect?trace=t1``); the bare path when it opens on nothing."""
        query = self.opens.format(t=trace, s=session)
        return f"{self.url_path}?{query}" if query else self.url_path

    @property
    def path(self) -> Path:
        """The page's file on disk."""
        return HERE / self.file


#: Every page, in navigation order; the first is the default (served at ``/`` too).
PAGES: tuple[PageSpec, ...] = (
    PageSpec("traces.py", "Traces", ":material/list:", "traces", "every stored trace, filtered"),
    PageSpec(
        "inspect.py",
        "Inspect",
        ":material/search:",
        "inspect",
        "one trace's decisions",
        "trace={t}",
    ),
    PageSpec(
        "timeline.py",
        "Timeline",
        ":material/timeline:",
        "timeline",
        "a session across turns",
        "session={s}",
    ),
    PageSpec(
        "playground.py",
        "Playground",
        ":material/tune:",
        "playground",
        "re-run one trace with new knobs",
        "trace={t}",
    ),
    PageSpec(
        "compare.py",
        "Compare",
        ":material/compare_arrows:",
        "compare",
        "two traces side by side",
        "a={t}",
    ),
    PageSpec(
        "sweep.py", "Sweep", ":material/grid_on:", "sweep", "one knob over a range", "trace={t}"
    ),
    PageSpec(
        "replay.py",
        "Replay",
        ":material/replay:",
        "replay",
        "a session re-run with new settings",
        "session={s}",
    ),
    PageSpec(
        "share.py",
        "Share / Import",
        ":material/ios_share:",
        "share",
        "export, import and share traces",
        "trace={t}",
    ),
)

#: The page served at ``/``.
DEFAULT = PAGES[0]


def by_name(name: str) -> PageSpec:
    """The page whose file is ``<name>.py`` (``"inspect"`` → Inspect)."""
    for page in PAGES:
        if page.name == name:
            return page
    known = ", ".join(p.name for p in PAGES)
    raise KeyError(f"no page {name!r}; the pages are {known}")


__all__ = ["DEFAULT", "PAGES", "PageSpec", "by_name"]
