"""How fast the debugger feels, measured in a real Chromium against ``streamlit run``.

Issue 4's speed targets, each timed from the interaction (a navigation or a slider move) to
the page *settling*: the app connected, its script no longer running, no stale elements,
and the element that proves the page drew its content present.

- Inspect on a trace of 2,000 packets: <= 1.5 s to render;
- Traces with 100,000 traces in the store: <= 1 s to render a page (first page and paging);
- Playground: a slider move on a demo trace, and on the 2,000-packet trace, re-runs and
  re-renders in <= 300 ms. The "slider step" moves min_relevance (on these traces the
  window's usage stays, so the window bar is not redrawn); the "max_tokens step" changes
  the usage every time, so the bar is redrawn too. A knob reruns the page's result
  fragments, not the page: the wait is for those fragment runs.

The store is built fresh in a temporary folder: the 2,000-packet trace from the same corpus
input every engine bench uses (``bench/corpus_input.py``), a demo trace (``ctxcore/data/demo`` when
present, else a corpus session), and 100,000 small real builds inserted in bulk through
``TraceStore.add_traces``. Prints a table; exits 0 whatever the numbers (the machine is
shared, numbers are noisy; targets are for reading, not asserting).

    .venv/bin/python bench/bench_app.py [--traces 100000] [--repeat 5] [--only Playground]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tests.browser import (  # noqa: E402
    browser_missing_reason,
    default_preset,
    demo_trace_files,
    goto,
    launch_browser,
    make_traces,
    new_page,
    rerun_and_settle,
    start_server,
)

INSPECT_TRACE = "bench-2000"


def _log(msg: str) -> None:
    print(f"[bench_app] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- data


def inspect_input(n_packets: int) -> Any:
    """``corpus_input(n)`` topped up to exactly ``n`` packets.

    The corpus pool holds ~1,170 distinct pieces; past that, the largest packets are split
    at a line boundary into two (ids ``…#a``/``…#b``), so the text stays real and the total
    (~300k tokens) stays the same: more, smaller packets, as a chatty agent produces.
    """
    from corpus_input import corpus_input  # bench/corpus_input.py

    inp = corpus_input(n_packets)
    packets = list(inp.packets)
    while len(packets) < n_packets:
        i = max(range(len(packets)), key=lambda k: len(packets[k].content))
        p = packets[i]
        lines = p.content.splitlines(keepends=True)
        if len(lines) >= 2:
            cut = len("".join(lines[: len(lines) // 2]))
        else:  # one long line: cut at the space nearest the middle
            mid = len(p.content) // 2
            cut = p.content.rfind(" ", 0, mid) + 1 or mid
        if cut <= 0 or cut >= len(p.content):
            break
        a = p.model_copy(update={"id": p.id + "#a", "content": p.content[:cut]})
        b = p.model_copy(update={"id": p.id + "#b", "content": p.content[cut:]})
        packets[i : i + 1] = [a, b]
    return inp.model_copy(update={"packets": packets})


def build_store(db: Path, n_traces: int, n_packets: int) -> dict[str, Any]:
    """Fill ``db``; returns the ids the measurements need and how long building took."""
    from ctxcore.models import Config
    from ctxcore.pipeline import build_trace
    from ctxcore.store import TraceStore
    from ctxcore.store.ingest import ingest_paths

    info: dict[str, Any] = {}
    t0 = time.perf_counter()
    big = build_trace(
        inspect_input(n_packets),
        Config(preset=default_preset()),  # type: ignore[arg-type]
        trace_id=INSPECT_TRACE,
        session_id="bench-big",
        # The newest trace in the store, so Inspect opened from the sidebar shows it.
        created_at=datetime(2026, 2, 1, tzinfo=UTC),
        tags=["bench"],
    )
    info["big_build_s"] = time.perf_counter() - t0
    assert big.result is not None
    info["big_packets"] = len(big.input.packets)
    info["big_decisions"] = len(big.result.decisions)

    # One small real build, re-stamped 100k times: distinct ids, sessions, turns and times.
    session = make_traces()
    template = session[0]
    # Short packets keep the insert-time diagnostics (~ms per trace) from dominating the build.
    tiny_packets = [
        p.model_copy(update={"content": p.content[:300]}) for p in template.input.packets[:4]
    ]
    tiny = build_trace(
        template.input.model_copy(update={"packets": tiny_packets}),
        template.config,
        trace_id="tiny",
        session_id="bulk",
    )

    t0 = time.perf_counter()
    with TraceStore(db) as store:
        store.add_traces([big, *session], source="bench")
        demo = demo_trace_files()
        if demo:
            ingest_paths(store, [str(p) for p in demo])
        batch: list[Any] = []
        for i in range(n_traces):
            batch.append(
                tiny.model_copy(
                    update={
                        "trace_id": f"bulk-{i:06d}",
                        "session_id": f"bulk-session-{i // 20:05d}",
                        "turn": i % 20,
                        "created_at": tiny.created_at - timedelta(seconds=i),
                    }
                )
            )
            if len(batch) == 5000:
                store.add_traces(batch, source="bench-bulk")
                batch = []
                _log(f"inserted {i + 1:,} traces")
        if batch:
            store.add_traces(batch, source="bench-bulk")
        info["store_count"] = store.count()
        info["demo_trace"] = _first_trace_id(demo) or session[2].trace_id
    info["store_build_s"] = time.perf_counter() - t0
    return info


# --------------------------------------------------------------------------- timing


@dataclass
class Scenario:
    name: str
    target: str
    run: Callable[[], object]
    setup: Callable[[], object] | None = None
    before_each: Callable[[], object] | None = None  # untimed, before every run


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(sc: Scenario, repeat: int) -> tuple[float, list[float]]:
    """The first (cold: server caches empty for this view) run, then ``repeat`` warm ones."""
    if sc.setup is not None:
        sc.setup()
    out: list[float] = []
    for _ in range(repeat + 1):
        if sc.before_each is not None:
            sc.before_each()
        out.append(timed(sc.run))
    first, out = out[0], out[1:]
    _log(f"{sc.name}: first {first * 1000:.0f} ms; {', '.join(f'{x * 1000:.0f}' for x in out)}")
    return first, out


def page_url(base: str, path: str, **params: str) -> str:
    q = "&".join(f"{k}={quote(v, safe='')}" for k, v in params.items())
    return f"{base}/{path}" + (f"?{q}" if q else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", type=int, default=100_000)
    ap.add_argument("--packets", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--keep", help="build the store in this folder and keep it")
    ap.add_argument(
        "--only", help="run only the measures whose name contains this text (e.g. Playground)"
    )
    args = ap.parse_args(argv)

    reason = browser_missing_reason()
    if reason:
        print(f"bench_app: {reason}", file=sys.stderr)
        return 2
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ctxscope-bench-app-"))
    work.mkdir(parents=True, exist_ok=True)
    db = work / "ctxscope.duckdb"
    if db.exists():
        _log(f"reusing {db}")
        info = {"store_build_s": 0.0}
        info.update(_existing_info(db))
    else:
        _log(f"building the store in {work}")
        info = build_store(db, args.traces, args.packets)
    server = start_server(db, work / "traces", work)
    results: list[tuple[Scenario, float, list[float]]] = []
    try:
        with launch_browser() as browser:
            page = new_page(browser)
            goto(page, server.url)  # loads and caches the JS bundles once
            for sc in scenarios(page, server.url, info):
                if args.only and args.only.lower() not in sc.name.lower():
                    continue
                try:
                    first, xs = measure(sc, args.repeat)
                    results.append((sc, first, xs))
                except Exception as exc:  # one broken page must not hide the others
                    _log(f"{sc.name}: FAILED {type(exc).__name__}: {exc}")
                    results.append((sc, 0.0, []))
    finally:
        server.stop()

    print()
    print(
        f"store: {info.get('store_count', '?'):,} traces, built in "
        f"{info.get('store_build_s', 0):.1f} s; Inspect trace: "
        f"{info.get('big_packets', '?')} packets"
    )
    head = f"{'measure':<58} {'target':>6} {'first':>8} {'median':>8} {'min':>8} {'max':>8}"
    print(head)
    print("-" * len(head))
    for sc, first, xs in results:
        if not xs:
            print(f"{sc.name:<58} {sc.target:>6} {'failed':>8}")
            continue
        cells = [first, statistics.median(xs), min(xs), max(xs)]
        print(f"{sc.name:<58} {sc.target:>6} " + " ".join(f"{c * 1000:>6.0f}ms" for c in cells))
    print(
        "\nfirst = the first time this view is drawn by the server (its caches cold); "
        "median/min/max over the repeats. Timed from the navigation or key press to the "
        "page settled (script finished, no stale or skeleton elements, content present)."
    )
    return 0


def _first_trace_id(files: list[Path]) -> str | None:
    """The id of the first trace in the demo files (the Playground bench opens it)."""
    from ctxcore.formats.load import load_file

    for f in files:
        traces = load_file(f, "auto")
        if traces:
            return str(traces[0].trace_id)
    return None


def _existing_info(db: Path) -> dict[str, Any]:
    from ctxcore.store import TraceStore

    with TraceStore(db, read_only=True) as store:
        count = store.count()
        big = store.get_trace(INSPECT_TRACE)
    return {
        "store_count": count,
        "big_packets": len(big.input.packets) if big else "?",
        "demo_trace": _first_trace_id(demo_trace_files()) or "browser-t2",
    }


def scenarios(page: Any, base: str, info: dict[str, Any]) -> list[Scenario]:
    """Each measurement: open or act, then wait for the page to settle with its content."""
    charts = page.locator('[data-testid="stPlotlyChart"]')
    table = page.locator('[data-testid="stDataFrame"]')

    def inspect() -> None:
        goto(page, page_url(base, "inspect", trace=INSPECT_TRACE))
        charts.first.wait_for()
        table.first.wait_for()

    def nav(label: str) -> Callable[[], None]:
        def click() -> None:
            link = page.locator('[data-testid="stSidebarNavLink"]').filter(has_text=label)
            rerun_and_settle(page, link.first.click)

        return click

    def inspect_by_nav() -> None:
        # In-app navigation (no page reload): Inspect opens the newest trace, the big one.
        nav("Inspect")()
        charts.first.wait_for()
        table.first.wait_for()
        page.get_by_text("session bench-big").first.wait_for()

    def traces_by_nav() -> None:
        nav("Traces")()
        table.first.wait_for()

    def traces_open() -> None:
        goto(page, base + "/")
        table.first.wait_for()

    def traces_setup() -> None:
        traces_open()

    pages_seen = {"n": 1}

    def traces_next_page() -> None:
        # A new page number each time: nothing is served from the query cache.
        pages_seen["n"] += 1
        box = page.get_by_label(re.compile(r"^Page \(of"))

        def go() -> None:
            box.fill(str(pages_seen["n"]))
            box.press("Enter")

        rerun_and_settle(page, go)
        page.get_by_text(re.compile(rf"showing {(pages_seen['n'] - 1) * 50 + 1:,}")).wait_for()

    words = iter(["AssertionError", "TypeError", "warning", "npm ERR", "django", "jest", "tsc"] * 4)

    def traces_search() -> None:
        box = page.get_by_label("Search packet content")

        def go() -> None:
            box.fill(next(words))
            box.press("Enter")

        rerun_and_settle(page, go)
        page.get_by_text(re.compile(r"matching traces")).wait_for()

    def playground_setup() -> None:
        goto(page, page_url(base, "playground", trace=info["demo_trace"]))
        slider = page.get_by_role("slider", name="min_relevance")
        # Start low so every ArrowRight below is a value not built (nor cached) before.
        rerun_and_settle(page, lambda: slider.press("Home"), fragment=True)

    def playground_move() -> None:
        # A knob reruns the Playground's result fragment, not the page: wait for that run.
        slider = page.get_by_role("slider", name="min_relevance")
        rerun_and_settle(page, lambda: slider.press("ArrowRight"), fragment=True)
        page.get_by_role("heading", name=re.compile(r"Flipped \(\d+\)")).wait_for()

    def playground_big_setup() -> None:
        goto(page, page_url(base, "playground", trace=INSPECT_TRACE))
        slider = page.get_by_role("slider", name="min_relevance")
        rerun_and_settle(page, lambda: slider.press("Home"), fragment=True)

    budget = "max_tokens (window budget)"

    def playground_budget_setup() -> None:
        goto(page, page_url(base, "playground", trace=INSPECT_TRACE))

    def playground_budget_move() -> None:
        # 100 tokens more each time: the window's usage changes, so the bar is redrawn too
        slider = page.get_by_role("slider", name=budget)
        rerun_and_settle(page, lambda: slider.press("ArrowRight"), fragment=True)
        page.get_by_role("heading", name=re.compile(r"Flipped \(\d+\)")).wait_for()

    return [
        Scenario("Inspect, 2,000-packet trace: open URL -> settled", "1.5 s", inspect),
        Scenario(
            "Inspect, 2,000-packet trace: sidebar click -> settled",
            "1.5 s",
            inspect_by_nav,
            before_each=nav("Sweep"),
        ),
        Scenario("Traces, 100k in store: open URL -> settled", "1.0 s", traces_open),
        Scenario(
            "Traces, 100k in store: sidebar click -> settled",
            "1.0 s",
            traces_by_nav,
            before_each=nav("Sweep"),
        ),
        Scenario(
            "Traces, 100k in store: next page -> settled", "1.0 s", traces_next_page, traces_setup
        ),
        Scenario("Traces, 100k in store: full-text search -> settled", "-", traces_search),
        Scenario(
            "Playground, demo trace: slider step -> settled",
            "0.3 s",
            playground_move,
            playground_setup,
        ),
        Scenario(
            "Playground, 2,000-packet trace: slider step -> settled",
            "0.3 s",
            playground_move,
            playground_big_setup,
        ),
        Scenario(
            "Playground, 2,000-packet trace: max_tokens step -> settled",
            "0.3 s",
            playground_budget_move,
            playground_budget_setup,
        ),
    ]


if __name__ == "__main__":
    sys.exit(main())
