"""Photograph every page of the app on the demo traces (for the README and for review).

Starts ``streamlit run ctxapp/app.py`` against a fresh store filled from ``traces/demo`` (or the
browser tests' corpus session when the demo folder is empty), opens each page in Debian's
Chromium at each size (1024×768 and 1440×900 by default) and writes full-page PNGs named
``<page>-<width>x<height>.png``; the pages open on the README walk-through's session. It
prints every metric whose value is cut (an ellipsis) as ``CUT <page> <size>: <label>``, and
every table that hides the why (``tests/browser``'s ``table_cuts``: a column it must show
off-screen, a status or code cut, a long cell cut with no way to read it whole) as ``CUT <page>
<size>: <table>: ...``, and exits 1 when there is one. Same harness as the browser tests
(``tests/browser``).

    .venv/bin/python scripts/screenshots.py [--out DIR] [--sizes 1024x768,1440x900]
        [--pages traces,timeline]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ctxapp.pages import PAGES as REGISTRY  # noqa: E402
from tests.browser import (  # noqa: E402
    browser_missing_reason,
    cut_metrics,
    demo_trace_files,
    fill_store,
    goto,
    launch_browser,
    make_traces,
    new_page,
    slug,
    start_server,
    table_cuts,
    write_jsonl,
)
from tests.browser import screenshot as _shot  # noqa: E402

SESSION = "swe-pytest-7571-hello-agents"
TURN = 15
#: page name -> path, with {t} the walk-through's trace and {s} its session: every page of the
#: registry (``ctxapp.pages.PAGES``) as its links open it, and the Traces page's findings view
PAGES = {p.name: p.url(trace="{t}", session="{s}") for p in REGISTRY} | {
    "traces-findings": "traces?view=findings"
}


def _walkthrough_trace(db: Path) -> tuple[str, str]:
    from ctxcore.store import TraceFilter
    from ctxcore.store.tracestore import TraceStore

    store = TraceStore(str(db))
    rows = store.list_traces(TraceFilter(session_id=SESSION), limit=500).rows
    if not rows:
        rows = store.list_traces(TraceFilter(), limit=1).rows
    row = next((r for r in rows if r.turn == TURN), rows[0])
    store.close()
    return row.trace_id, row.session_id


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "test-artifacts" / "screenshots" / "demo"))
    ap.add_argument("--sizes", default="1024x768,1440x900", help="viewports (WxH, comma-separated)")
    ap.add_argument(
        "--pages", default=",".join(PAGES), help=f"pages to photograph ({', '.join(PAGES)})"
    )
    args = ap.parse_args(argv)
    wanted = [n for n in args.pages.split(",") if n]
    unknown = [n for n in wanted if n not in PAGES]
    if unknown:
        ap.error(f"unknown page(s) {', '.join(unknown)}; choose from {', '.join(PAGES)}")
    reason = browser_missing_reason()
    if reason:
        print(f"screenshots: {reason}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ctxscope-shots-"))
    files = demo_trace_files() or [write_jsonl(make_traces(), work / "traces" / "corpus.jsonl")]
    (work / "traces").mkdir(exist_ok=True)
    fill_store(work / "ctxscope.duckdb", files)
    trace_id, session = _walkthrough_trace(work / "ctxscope.duckdb")
    sizes = [tuple(int(n) for n in s.split("x")) for s in args.sizes.split(",") if s]
    server = start_server(work / "ctxscope.duckdb", work / "traces", work)
    cut = 0
    try:
        with launch_browser() as browser:
            for width, height in sizes:
                page = new_page(browser, width=width, height=height)
                for name in wanted:
                    path = PAGES[name]
                    goto(page, f"{server.url}/{path.format(t=quote(trace_id), s=quote(session))}")
                    page.wait_for_timeout(300)  # a table's grid paints a frame after layout
                    for label in [*cut_metrics(page), *table_cuts(page)]:
                        cut += 1
                        print(f"CUT {name} {width}x{height}: {label}")
                    tmp = _shot(page, f"shot-{slug(name)}")
                    dest = out / f"{slug(name)}-{width}x{height}.png"
                    tmp.replace(dest)
                    print(dest)
                page.context.close()
    finally:
        server.stop()
    return 1 if cut else 0


if __name__ == "__main__":
    sys.exit(main())
