"""The Timeline of a 500-turn session with cost (issue 32, Speed: <= 1.5 s), in a real
Chromium against ``streamlit run``.

The session is 500 real builds of the pipeline over corpus text (``tests/app_support``'s
session: the packets grow turn by turn, a minute apart), each given the model and the usage
a Claude call of that prompt would record: the prompt's tokens plus a 3,000-token system
prompt, the previous call's prompt read from the cache, the rest written, 200 output tokens.
So the page draws everything it draws for a real session with cost: the packet chart, the
partition usage, the cost and cache per turn (``ctxcore.costing`` over the 500 calls, the
simulated cache included); the diagnostics of a session this long run when asked
(``timeline.AUTO_DIAGNOSE_TURNS``).

The page opens on its packets; the partition usage and the cost and cache are views drawn
when opened (docs/design.md, "The app"). Measured: the page opened by its URL with the
server's caches cold (the first open), then warm (``--repeat`` more opens), each until its
packet chart is drawn and until it settles (with the seconds the browser's main thread ran
tasks and script to then, Chromium's own count: its idle waits left out, though a loaded
machine still stretches a running task), then its "Cost and cache" view opened until the
cost chart is drawn (from the click, and from the navigation); the diagnostics asked
for (the button, until their chart is drawn); the page script alone through AppTest in a
fresh process (wall and CPU seconds, cold and warm, on the packets and on the cost view:
the server's share, which a loaded machine's browser figures blur); and, in this process,
the parts: loading the 500 traces from the store, ``session_costs`` and
``diagnose_session`` over them; and Streamlit's plotly chart code alone, the browser's
share of a cold open (an ``import()`` of its module in a fresh browser context, then again
in a new page of that context). Prints a table with the load beside it; exits 0 whatever
the numbers (the machine is shared; targets are for reading).

    .venv/bin/python bench/bench_timeline_cost.py [--turns 500] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import plotly.io as pio  # noqa: E402
from app_support import session  # noqa: E402

from ctxcore import figures  # noqa: E402
from ctxcore.cost import price_table  # noqa: E402
from ctxcore.costing import (  # noqa: E402
    CallCost,
    cost_calls,
    session_costs,
    stored_calls,
    summary_version,
)
from ctxcore.diagnostics import INGEST_OPTIONS, diagnose_session, fingerprint  # noqa: E402
from ctxcore.models import Outcome, TokenUsage, Trace  # noqa: E402
from ctxcore.store import TraceFilter, TraceStore  # noqa: E402
from tests.browser import (  # noqa: E402
    browser_missing_reason,
    exceptions_text,
    goto,
    launch_browser,
    new_page,
    runs,
    settle,
    start_server,
    wait_runs,
)

SESSION = "bench-cost-500"
MODEL = "claude-sonnet-4-20250514"
SYSTEM = 3000
#: how long a page may take (the session's diagnostics take minutes on 500 turns)
WAIT_MS = 900_000


def with_usage(traces: list[Trace]) -> list[Trace]:
    """Each build with the model and the usage its call would record (module docstring)."""
    out: list[Trace] = []
    previous = 0
    for t in traces:
        assert t.result is not None
        prompt = t.result.totals.used + SYSTEM
        read = min(previous, prompt)
        usage = TokenUsage(
            mapping="anthropic",
            input_tokens=prompt,
            cache_read_tokens=read,
            cache_write_tokens=prompt - read,
            cache_write_5m_tokens=prompt - read,
            cache_write_1h_tokens=0,
            output_tokens=200,
        )
        out.append(
            t.model_copy(
                update={
                    "metadata": {**t.metadata, "model": MODEL},
                    "outcome": Outcome(tokens=usage),
                }
            )
        )
        previous = prompt
    return out


def build(db: Path, turns: int) -> float:
    t0 = time.perf_counter()
    traces = with_usage(session(SESSION, turns, first=12, step=1, pool=60))
    with TraceStore(db) as store:
        store.add_traces(traces, source="bench")
    return time.perf_counter() - t0


def _summary_costs(store: TraceStore, ids: list[str]) -> list[CallCost]:
    """The session costed as the Timeline costs it: from the store's cost summaries."""

    def load(missing: list[str]) -> list[Trace]:
        raise AssertionError(f"{len(missing)} traces have no stored summary")

    calls = stored_calls(ids, store.cost_summaries(ids), summary_version(), load)
    return cost_calls(calls, price_table())


def parts(db: Path) -> dict[str, float]:
    """The page's parts in this process: the packet chart (statuses read, figure built, its
    JSON), the session costed from the store's summaries (the Timeline's way); loading the
    session's traces and costing and diagnosing them (what the page no longer does on
    open)."""
    with TraceStore(db, read_only=True) as store:
        t0 = time.perf_counter()
        rows = store.list_traces(TraceFilter(session_id=SESSION), sort="turn", limit=100_000)
        ids = [r.trace_id for r in rows.rows]
        from_summaries = _summary_costs(store, ids)
        summarized = time.perf_counter() - t0
        t0 = time.perf_counter()
        traces = [Trace.model_validate_json(raw) for _, raw in store.traces_json(ids)]
        loaded = time.perf_counter() - t0
        stored = store.stored_findings([t.trace_id for t in traces], fingerprint())
        t0 = time.perf_counter()
        statuses = store.session_statuses(SESSION)
        read_statuses = time.perf_counter() - t0
    t0 = time.perf_counter()
    grid = figures.timeline_heatmap(statuses, "packets", legend=False)
    drawn = time.perf_counter() - t0
    t0 = time.perf_counter()
    sent = pio.to_json(grid, validate=False)
    as_json = time.perf_counter() - t0
    print(f"the packet chart: {len(statuses):,} cells, {len(sent) / 1e6:.2f} MB of JSON")
    t0 = time.perf_counter()
    calls = session_costs(traces, price_table())
    costed = time.perf_counter() - t0
    assert calls == from_summaries and len(calls) == len(traces)
    t0 = time.perf_counter()
    diag = diagnose_session(traces, options=INGEST_OPTIONS)
    diagnosed = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = diagnose_session(traces, options=INGEST_OPTIONS, alone=stored)
    reused = time.perf_counter() - t0
    assert again == diag and len(stored) == len(traces)
    return {
        "the session's packet statuses read": read_statuses,
        "the packet chart built": drawn,
        "  its JSON written (what the browser receives)": as_json,
        "costs from the store's summaries (the page's way)": summarized,
        "load the session's traces": loaded,
        "session_costs over them": costed,
        "diagnose_session over them": diagnosed,
        "  with the store's findings (as the app)": reused,
    }


@dataclass(frozen=True)
class Open:
    """One open of the Timeline by URL, seconds: to its packet chart drawn, to the page
    settled; then its cost view clicked, to the cost chart drawn (from the click). And the
    browser's main thread over the open, to the page settled: the seconds it ran tasks
    (``busy``) and script among them (idle waits left out; not CPU time: a loaded machine
    still stretches a running task)."""

    packets: float
    settled: float
    cost: float
    busy: float
    script: float
    #: CPU seconds to the page settled: Chromium's processes together (its own count), and
    #: the server's (/proc): what a loaded machine's waits do not add to
    browser_cpu: float = 0.0
    server_cpu: float = 0.0

    @property
    def cost_from_url(self) -> float:
        return self.settled + self.cost


def main_thread(cdp: Any) -> tuple[float, float]:
    """The page's main thread since its document opened (Chromium's ``Performance``
    metrics, which a navigation starts afresh): seconds of tasks, and of script."""
    got = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return float(got["TaskDuration"]), float(got["ScriptDuration"])


def chromium_cpu(browser_cdp: Any) -> float:
    """CPU seconds Chromium's processes have run (``SystemInfo.getProcessInfo``)."""
    info = browser_cdp.send("SystemInfo.getProcessInfo")["processInfo"]
    return float(sum(p["cpuTime"] for p in info))


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has run, its threads included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_timeline(page: Any, cdp: Any, url: str, cpu: Callable[[], tuple[float, float]]) -> Open:
    """Open the Timeline by its URL (it opens on its packets), then its "Cost and cache"
    view; ``cpu`` reads (Chromium's, the server's) CPU seconds."""
    cpu0 = cpu()
    t0 = time.perf_counter()
    before = runs(page)
    page.goto(url, wait_until="domcontentloaded")
    page.locator(".st-key-tl_heatmap .main-svg").first.wait_for(timeout=WAIT_MS)
    drawn = time.perf_counter() - t0
    wait_runs(page, before, WAIT_MS)
    settle(page, WAIT_MS)
    settled = time.perf_counter() - t0
    cpu1 = cpu()
    busy, script = main_thread(cdp)
    t0 = time.perf_counter()
    page.get_by_role("tab", name="Cost and cache").click()
    page.locator(".st-key-tl_cost_chart .main-svg").first.wait_for(timeout=WAIT_MS)
    cost = time.perf_counter() - t0
    settle(page, WAIT_MS)
    return Open(drawn, settled, cost, busy, script, cpu1[0] - cpu0[0], cpu1[1] - cpu0[1])


#: the Timeline's page script through AppTest in a fresh process: cold, then warm runs, on
#: the packets (as opened) and on the cost view; wall and CPU seconds of each run
SCRIPT = r"""
import json, logging, os, sys, time
sys.path.insert(0, {root!r})
os.environ.update(CTXSCOPE_DB={db!r}, CTXSCOPE_TRACES={traces!r}, CTXSCOPE_NO_WATCH="1")
logging.disable(logging.WARNING)
from streamlit.testing.v1 import AppTest
out = {{}}
for view in ("Packets", "Cost and cache"):
    runs = []
    for _ in range(4):
        at = AppTest.from_file({page!r}, default_timeout=600)
        at.query_params["session"] = {session!r}
        at.session_state["tl_view"] = view
        t, c = time.perf_counter(), time.process_time()
        at.run()
        runs.append((time.perf_counter() - t, time.process_time() - c))
        assert not at.exception, at.exception
    out[view] = runs
print(json.dumps(out))
"""


def script_times(db: Path, traces: Path) -> dict[str, list[tuple[float, float]]]:
    """The page script's runs (``SCRIPT``): per view, (wall, CPU) of the first then three
    warm runs; the first run of "Packets" is the process's first (cold caches)."""
    code = SCRIPT.format(
        root=str(ROOT), db=str(db), traces=str(traces), session=SESSION,
        page=str(ROOT / "ctxapp" / "pages" / "timeline.py"),
    )  # fmt: skip
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    got = json.loads(res.stdout.strip().splitlines()[-1])
    return {k: [(float(w), float(c)) for w, c in v] for k, v in got.items()}


def _script_rows(times: dict[str, list[tuple[float, float]]]) -> list[tuple[str, str]]:
    """The page script's rows: cold and warm median, wall / CPU."""
    out = []
    for view, each in times.items():
        warm = sorted(each[1:])[len(each[1:]) // 2]
        first = "cold" if view == "Packets" else "first"
        out.append((f"page script, {view} view, {first}", _wc(each[0])))
        out.append((f"page script, {view} view, warm (median)", _wc(warm)))
    return out


def _wc(run: tuple[float, float]) -> str:
    return f"{run[0] * 1000:.0f} / {run[1] * 1000:.0f}ms"


def ask_diagnostics(page: Any) -> float:
    """Click "Diagnose the N turns": seconds until the diagnostics' chart is drawn."""
    t0 = time.perf_counter()
    page.locator(".st-key-tl_diagnose button").click()
    page.locator(".st-key-tl_findings .main-svg").first.wait_for(timeout=WAIT_MS)
    return time.perf_counter() - t0


#: what the cold open covers, printed under the table
COLD = (
    "Cold: the Timeline's first open in a fresh server (`streamlit run`, started and healthy) "
    "and a fresh browser context (Playwright's new context: its HTTP and code caches empty, "
    "held in memory), right after the app's root page (Traces) was opened once in it: the "
    "app's main bundles are cached, Streamlit's plotly chart code is not (Traces draws no "
    "chart), so the open fetches, compiles and runs it (the two 'chart code' rows: that "
    "alone, in a fresh context and then again); the app's own imports, the store and the "
    "start-up warm-up (state._warm_up: the first reads of Traces and Inspect, the figures' "
    "imports and validators, the Timeline's modules) are under way or done; the open pays "
    "this session's first reads (its statuses, partitions, list and cost summaries), its "
    "packet chart built and sent, and whatever of the warm-up is still running. Warm: the "
    "same URL opened again (a new script run, its data and figure cached in the server, the "
    "page rebuilt by the browser, the chart code from the context's caches)."
)

#: the time an ``import()`` of a module takes in the page, milliseconds
_IMPORT_JS = (
    "async (u) => { const t = performance.now(); await import(u); return performance.now() - t; }"
)


def chart_code(browser: Any, url: str) -> tuple[float, float]:
    """Streamlit's plotly chart code alone: seconds to fetch, compile and run it (an
    ``import()`` of its module) in a fresh context after the app's root page, then again
    in a new document of that context (its caches warm)."""
    import streamlit

    static = Path(streamlit.__file__).parent / "static" / "static" / "js"
    (name,) = [p.name for p in static.glob("PlotlyChart.*.js")]
    page = new_page(browser)
    try:
        goto(page, url)
        fresh = float(page.evaluate(_IMPORT_JS, f"./static/js/{name}")) / 1000
        goto(page, url)
        again = float(page.evaluate(_IMPORT_JS, f"./static/js/{name}")) / 1000
    finally:
        page.context.close()
    return fresh, again


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--parts-only", action="store_true", help="the in-process parts alone")
    args = ap.parse_args(argv)
    reason = None if args.parts_only else browser_missing_reason()
    if reason:
        print(f"bench_timeline_cost: {reason}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="ctxscope-bench-tl-cost-"))
    (work / "traces").mkdir()
    db = work / "ctxscope.duckdb"
    built = build(db, args.turns)
    inproc = parts(db)
    if args.parts_only:
        for name, seconds in inproc.items():
            print(f"{name:<60} {seconds * 1000:>7.0f}ms")
        print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
        return 0
    script = script_times(db, work / "traces")
    script_load = os.getloadavg()[0]
    server = start_server(db, work / "traces", work, {"CTXSCOPE_NO_WATCH": "1"})
    opens: list[Open] = []
    asked = 0.0
    code = (0.0, 0.0)
    try:
        with launch_browser() as browser:
            page = new_page(browser)
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable")
            browser_cdp = browser.new_browser_cdp_session()

            def cpu() -> tuple[float, float]:
                return chromium_cpu(browser_cdp), process_cpu(server.proc.pid)

            goto(page, server.url)  # the JS bundles, once
            url = f"{server.url}/timeline?session={quote(SESSION)}"
            for _ in range(args.repeat + 1):
                opens.append(open_timeline(page, cdp, url, cpu))
                assert exceptions_text(page) == []
            asked = ask_diagnostics(page)
            settle(page, WAIT_MS)
            assert exceptions_text(page) == []
            code = chart_code(browser, server.url)
    finally:
        server.stop()
    print(f"\nstore: one session of {args.turns} turns with usage, built in {built:.1f} s")
    head = f"{'measure':<60} {'target':>7} {'time':>9}"
    print(head)
    print("-" * len(head))
    first, warm = opens[0], opens[1:]

    def med(f: Callable[[Open], float]) -> float:
        return statistics.median(f(o) for o in warm) if warm else float("nan")

    rows = [
        ("Timeline by URL, cold: the packet chart drawn", "1.5 s", first.packets),
        ("Timeline by URL, cold: the page settled", "", first.settled),
        ("  the browser's main thread busy, to settled", "", first.busy),
        ("  CPU to settled: Chromium's processes", "", first.browser_cpu),
        ("  CPU to settled: the server", "", first.server_cpu),
        ("  then Cost and cache clicked: the cost chart drawn", "1.5 s", first.cost),
        ("Timeline by URL, warm: the packet chart drawn (median)", "1.5 s",
         med(lambda o: o.packets)),
        ("Timeline by URL, warm: the page settled (median)", "", med(lambda o: o.settled)),
        ("  the browser's main thread busy, to settled (median)", "", med(lambda o: o.busy)),
        ("    of which script (median)", "", med(lambda o: o.script)),
        ("  CPU to settled: Chromium's processes (median)", "", med(lambda o: o.browser_cpu)),
        ("  CPU to settled: the server (median)", "", med(lambda o: o.server_cpu)),
        ("  then Cost and cache clicked: the cost chart drawn", "1.5 s", med(lambda o: o.cost)),
        ("  the cost chart drawn, from the URL (median)", "", med(lambda o: o.cost_from_url)),
        ("Diagnostics asked for: their chart drawn", "", asked),
        ("The chart code alone, a fresh context: fetched, compiled, run", "", code[0]),
        ("  again, a new page of that context (its caches warm)", "", code[1]),
    ]  # fmt: skip
    rows += [(f"  in process: {name}", "", seconds) for name, seconds in inproc.items()]
    for name, target, seconds in rows:
        print(f"{name:<60} {target:>7} {seconds * 1000:>7.0f}ms")
    each = " / ".join(f"{o.packets:.2f}" for o in warm)
    print(f"each warm open, the packet chart drawn (s, in order): {each}")
    print(f"{'the server alone (AppTest)':<60} {'wall / CPU':>17}")
    for name, figures_ in _script_rows(script):
        print(f"  {name:<58} {figures_:>17}")
    print(f"machine: {os.cpu_count()} CPUs, load {script_load:.1f} after the script runs, "
          f"{os.getloadavg()[0]:.1f} at the end")  # fmt: skip
    print(
        "\nTimed from the navigation to the packet chart drawn, and to the page settled "
        "(script finished, no stale elements); the cost chart from the click on its view; the "
        "diagnostics from the click on their button."
    )
    print(COLD)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
