"""The server's share of the first render: Inspect on the 2,000-packet trace through AppTest.

    .venv/bin/python bench/bench_app_server.py STORE_DIR

STORE_DIR is a folder made by ``bench/bench_app.py --keep STORE_DIR`` (it holds
``ctxscope.duckdb`` with the ``bench-2000`` trace). Each row runs in a fresh interpreter, so
"first" really is the first Inspect script run of a process: once as the app's start-up
warm-up leaves it (``ui.state._warm_figures`` finished), once with no warm-up at all. The
browser's share (fetching and initialising plotly.js the first time a tab draws a chart) is
what ``bench_app.py``'s "first" column adds on top.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, {root!r})
os.environ.update(CTXSCOPE_DB={db!r}, CTXSCOPE_TRACES={traces!r}, CTXSCOPE_NO_WATCH="1")
import logging
logging.disable(logging.WARNING)
from streamlit.testing.v1 import AppTest
out = {{}}
if {warm!r}:
    from ctxapp.ui.state import _warm_figures
    t = time.perf_counter(); _warm_figures(); out["warm_up"] = time.perf_counter() - t
runs = []
for _ in range(4):
    at = AppTest.from_file({page!r}, default_timeout=120)
    at.query_params["trace"] = "bench-2000"
    t = time.perf_counter(); at.run(); runs.append(time.perf_counter() - t)
    assert not at.exception, at.exception
out["runs"] = runs
print(json.dumps(out))
"""


def child(store: Path, warm: bool) -> dict[str, object]:
    code = CHILD.format(
        root=str(ROOT),
        db=str(store / "ctxscope.duckdb"),
        traces=str(store / "traces"),
        warm=warm,
        page=str(ROOT / "ctxapp" / "pages" / "inspect.py"),
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def main() -> int:
    if len(sys.argv) != 2 or not (Path(sys.argv[1]) / "ctxscope.duckdb").is_file():
        print(__doc__)
        return 2
    store = Path(sys.argv[1])
    rows = []
    for label, warm in (("after the start-up warm-up", True), ("no warm-up (cold process)", False)):
        out = child(store, warm)
        runs = [float(x) for x in out["runs"]]  # type: ignore[union-attr]
        warm_s = float(out.get("warm_up", 0.0))  # type: ignore[arg-type]
        rows.append((label, warm_s, runs[0], sorted(runs[1:])[1]))
    print(f"{'Inspect, 2,000 packets (AppTest, server only)':<48} {'warm-up':>8} {'first':>8} "
          f"{'median':>8}")  # fmt: skip
    for label, w, first, med in rows:
        wu = f"{w * 1000:.0f}ms" if w else "-"
        print(f"{label:<48} {wu:>8} {first * 1000:>6.0f}ms {med * 1000:>6.0f}ms")
    print("target: 1.5 s for the whole render (server + browser; see bench_app.py)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
