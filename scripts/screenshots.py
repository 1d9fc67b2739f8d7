"""Photograph every page of the app on the demo traces (for the README and for review).

Starts ``streamlit run app.py`` against a fresh store filled from ``traces/demo`` (or the
browser tests' corpus session when the demo folder is empty), opens each page in Debian's
Chromium and writes full-page PNGs. Same harness as the browser tests (``tests/browser``).

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots] [--width 1440] [--height 900]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.browser import (  # noqa: E402
    browser_missing_reason,
    demo_trace_files,
    fill_store,
    goto,
    launch_browser,
    make_traces,
    new_page,
    slug,
    start_server,
    write_jsonl,
)
from tests.browser import screenshot as _shot  # noqa: E402

PAGES = ["", "inspect", "timeline", "playground", "compare", "sweep", "share"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "test-artifacts" / "screenshots" / "demo"))
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=900, help="the viewport before it grows")
    args = ap.parse_args(argv)
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
    server = start_server(work / "ctxscope.duckdb", work / "traces", work)
    try:
        with launch_browser() as browser:
            page = new_page(browser, width=args.width, height=args.height)
            for path in PAGES:
                goto(page, f"{server.url}/{path}")
                tmp = _shot(page, f"shot-{slug(path or 'traces')}")
                dest = out / f"{slug(path or 'traces')}.png"
                tmp.replace(dest)
                print(dest)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
