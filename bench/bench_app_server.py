"""The server's share of the first render through AppTest: Inspect on the 2,000-packet trace,
and Traces on the 100,000 traces.

    .venv/bin/python bench/bench_app_server.py STORE_DIR

STORE_DIR is a folder made by ``bench/bench_app.py --keep STORE_DIR`` (it holds
``ctxscope.duckdb`` with the ``bench-2000`` trace). Each row runs in a fresh interpreter, so
"first" really is the first script run of the page in a process: once as the app's start-up
warm-up leaves it (``ui.state._warm_reads`` and ``_warm_figures`` finished), once with no
warm-up at all. Times are wall / CPU of the process (the script runs in one of its
threads). The browser's share (fetching and initialising plotly.js the first time a tab
draws a chart) is what ``bench_app.py``'s "first" column adds on top.
"""

from __future__ import annotations

import json
import os
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
    from ctxapp.ui.state import _warm_figures, _warm_reads
    t = time.perf_counter()
    _warm_reads(); _warm_figures()
    out["warm_up"] = time.perf_counter() - t
runs = []
for _ in range(4):
    at = AppTest.from_file({page!r}, default_timeout=120)
    for k, v in {params!r}.items():
        at.query_params[k] = v
    t, c = time.perf_counter(), time.process_time()
    at.run()
    runs.append((time.perf_counter() - t, time.process_time() - c))
    assert not at.exception, at.exception
out["runs"] = runs
print(json.dumps(out))
"""


#: the pages timed: (label, page script, query parameters)
PAGES = (
    ("Inspect, 2,000 packets", "inspect", {"trace": "bench-2000"}),
    ("Traces, 100,000 traces", "traces", {}),
)


def child(store: Path, warm: bool, page: str, params: dict[str, str]) -> dict[str, object]:
    code = CHILD.format(
        root=str(ROOT),
        db=str(store / "ctxscope.duckdb"),
        traces=str(store / "traces"),
        warm=warm,
        page=str(ROOT / "ctxapp" / "pages" / f"{page}.py"),
        params=params,
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def _wc(run: tuple[float, float]) -> str:
    return f"{run[0] * 1000:.0f} / {run[1] * 1000:.0f}ms"


def main() -> int:
    if len(sys.argv) != 2 or not (Path(sys.argv[1]) / "ctxscope.duckdb").is_file():
        print(__doc__)
        return 2
    store = Path(sys.argv[1])
    print(f"{'page script (AppTest, server only), wall / CPU':<50} {'warm-up':>8} "
          f"{'first':>15} {'median':>15}")  # fmt: skip
    for name, page, params in PAGES:
        for label, warm in (("after the start-up warm-up", True), ("no warm-up (cold)", False)):
            out = child(store, warm, page, params)
            runs = [(float(w), float(c)) for w, c in out["runs"]]  # type: ignore[union-attr]
            w = float(out.get("warm_up", 0.0))  # type: ignore[arg-type]
            wu = f"{w * 1000:.0f}ms" if w else "-"
            first, med = runs[0], sorted(runs[1:])[1]
            print(f"{name + ', ' + label:<50} {wu:>8} {_wc(first):>15} {_wc(med):>15}")
    print(f"load {os.getloadavg()[0]:.1f}; targets: Inspect 1.5 s, Traces 1.0 s for the whole "
          "render (server + browser; see bench_app.py)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
