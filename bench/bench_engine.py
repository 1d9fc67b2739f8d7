"""Engine speed on the 1,000-packet corpus input (issue 2's targets); prints a table.

    .venv/bin/python bench/bench_engine.py [--repeat N]

- warm re-run of the ``ctxscope`` preset (same input object, caches warm): median ≤ 20 ms;
- a 20 × 20 sweep over relevance_weight × max_tokens (400 builds): ≤ 1 s in all;
- cold run (fresh token counter, cleared memo caches) against tiktoken alone counting the
  same texts, the fastest of four ways, each with one thread per CPU: tiktoken's own
  ``encode_ordinary_batch``; ``encode_to_numpy`` per text on a thread pool; one thread per
  CPU looping ``encode_to_numpy`` over its share; and ``tokens.count_batch`` (what ctxcore
  uses: runs of texts joined by a special token, one tiktoken call per run, taken by one
  thread per CPU as they finish). Ratio ≤ 0.35 (issue 17: the cold build counts with the
  verified fast backend, toktok-rs, so it can beat tiktoken alone; its own row is shown).
  Runs are interleaved (tiktoken, cold build, …) so machine noise hits every row; the
  ratio is also given per round (that round's cold build over its fastest tiktoken way),
  as a range, and in CPU time (all threads), which a busy machine disturbs less. "Cold"
  clears every memo a build keeps by text, the error lines of the signals included.

The hello-agents 0.2.8 package vs our ``hello-agents`` preset row is measured by
``bench/bench_hello_agents.py`` (it needs the oracle virtual environment).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpus_input import corpus_input  # noqa: E402

from ctxcore import scoring, summarize  # noqa: E402
from ctxcore.models import CapturedInput, Config  # noqa: E402
from ctxcore.pipeline import build, signals  # noqa: E402
from ctxcore.pipeline import gather as gather_mod  # noqa: E402
from ctxcore.pipeline.sweep import sweep  # noqa: E402
from ctxcore.tokens import (  # noqa: E402
    COUNT_THREADS,
    TokenCounter,
    ToktokBackend,
    backend_label,
    count_batch,
    get_backend,
    get_counter,
    get_encoding,
)


def _clear_memos() -> None:
    """Everything a build memoises by text: a cold build finds none of it."""
    gather_mod.PREPARED.clear()
    scoring._TF._memo.clear()
    scoring._LOWER.clear()  # the texts lower-cased
    scoring._QUERIES.clear()  # the query's terms
    summarize._shared.clear()
    summarize._ERROR_MEMO.clear()  # the error signal's lines, by text
    signals._LINE_NAMES.clear()  # the file names in those lines


def _pool_per_text(enc: Any, texts: list[str]) -> list[int]:
    def one(text: str) -> int:
        return len(enc.encode_to_numpy(text, allowed_special=set(), disallowed_special=()))

    with ThreadPoolExecutor(COUNT_THREADS) as pool:
        return list(pool.map(one, texts))


def _thread_loops(enc: Any, texts: list[str]) -> list[int]:
    out: list[list[int]] = [[] for _ in range(COUNT_THREADS)]

    def run(k: int) -> None:
        out[k] = [
            len(enc.encode_to_numpy(t, allowed_special=set(), disallowed_special=()))
            for t in texts[k::COUNT_THREADS]
        ]

    threads = [threading.Thread(target=run, args=(k,)) for k in range(COUNT_THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    counts = [0] * len(texts)
    for k in range(COUNT_THREADS):
        counts[k::COUNT_THREADS] = out[k]
    return counts


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--repeat", type=int, default=9, help="rounds of cold build + each tiktoken way (default 9)"
    )
    ap.add_argument("--warm", type=int, default=30, help="warm re-runs (default 30)")
    args = ap.parse_args()

    inp = corpus_input(1000)
    enc = get_encoding("cl100k_base")
    build(inp)  # imports, encodings, numpy warm-up; also fills caches for the warm rows
    prep = gather_mod.prepare(inp, get_counter("cl100k_base"))
    texts = list(
        dict.fromkeys(
            [it.segment for it in prep.items]
            + [gather_mod.header(p) for p in gather_mod.PARTITIONS]
            + [prep.task_segment, prep.output_segment]
        )
    )
    n_tokens = sum(len(x) for x in enc.encode_ordinary_batch(texts, num_threads=COUNT_THREADS))
    expected = [len(enc.encode_ordinary(t)) for t in texts]
    ways = {
        f"encode_ordinary_batch ({COUNT_THREADS} threads)": lambda: [
            len(x) for x in enc.encode_ordinary_batch(texts, num_threads=COUNT_THREADS)
        ],
        f"encode_to_numpy per text, pool of {COUNT_THREADS}": lambda: _pool_per_text(enc, texts),
        f"encode_to_numpy, a loop per thread ({COUNT_THREADS})": lambda: _thread_loops(enc, texts),
        f"count_batch (ctxcore): joined runs on {COUNT_THREADS} threads": lambda: count_batch(
            enc, texts
        ),
    }
    for name, way in ways.items():
        assert way() == expected, name
    backend = get_backend("cl100k_base")
    fast_row: dict[str, list[float]] = {}
    if isinstance(backend, ToktokBackend):
        fast_row[f"{backend.label} alone ({COUNT_THREADS} threads)"] = []
        assert backend.count(texts, COUNT_THREADS) == expected

    # warm
    warm: list[float] = []
    for _ in range(args.warm):
        t0 = time.perf_counter()
        build(inp)
        warm.append(time.perf_counter() - t0)

    # warm, but the input is an equal copy each time (as from a Streamlit cache_data)
    copies = [CapturedInput.model_validate_json(inp.model_dump_json()) for _ in range(10)]
    warm_copy: list[float] = []
    for c in copies:
        t0 = time.perf_counter()
        build(c)
        warm_copy.append(time.perf_counter() - t0)

    # sweep (prepared input warm, as in the app after the first build)
    xs = [round(0.05 * k, 2) for k in range(20)]
    ys = [4000 + 600 * k for k in range(20)]
    t0 = time.perf_counter()
    grid = sweep(
        inp, Config(), "relevance_weight", xs, "max_tokens", ys, watch_packet="tool:latest_failure"
    )
    sweep_s = time.perf_counter() - t0

    # cold vs tiktoken alone, interleaved; CPU time (every thread of the process) beside
    # the wall time: on a shared machine it says what each way costs whatever the load
    tk: dict[str, list[float]] = {name: [] for name in ways}
    cpu: dict[str, list[float]] = {name: [] for name in [*ways, *fast_row, "cold"]}
    cold: list[float] = []
    for _ in range(args.repeat):
        for name, way in ways.items():
            t0, c0 = time.perf_counter(), time.process_time()
            way()
            tk[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
        for name in fast_row:
            t0, c0 = time.perf_counter(), time.process_time()
            backend.start(texts, COUNT_THREADS).result()
            fast_row[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
        _clear_memos()
        counter = TokenCounter("cl100k_base")
        t0, c0 = time.perf_counter(), time.process_time()
        build(inp, counter=counter)
        cold.append(time.perf_counter() - t0)
        cpu["cold"].append(time.process_time() - c0)
    tk_best = min(statistics.median(v) for v in tk.values())
    ratio = statistics.median(cold) / tk_best
    per_round = [c / min(v[i] for v in tk.values()) for i, c in enumerate(cold)]
    cpu_ratio = statistics.median(cpu["cold"]) / min(statistics.median(cpu[n]) for n in ways)

    def wall_cpu(name: str, wall: list[float]) -> str:
        return f"{_ms(statistics.median(wall))} (CPU {_ms(statistics.median(cpu[name]))})"

    rows = [
        (
            "input",
            f"{len(inp.packets):,} packets + {len(inp.history)} messages, "
            f"{n_tokens:,} cl100k tokens",
            "",
        ),
        ("warm re-run (median)", _ms(statistics.median(warm)), "≤ 20 ms"),
        ("warm re-run (min / max)", f"{_ms(min(warm))} / {_ms(max(warm))}", ""),
        ("warm re-run, equal copy of the input", _ms(statistics.median(warm_copy)), ""),
        (
            f"sweep {len(xs)}×{len(ys)} ({len(xs) * len(ys)} builds)",
            _ms(sweep_s) + (" (vectorized)" if grid.vectorized else " (build per cell)"),
            "≤ 1 s",
        ),
        *((f"tiktoken alone, {name}", wall_cpu(name, v), "") for name, v in tk.items()),
        *((name, wall_cpu(name, v), "") for name, v in fast_row.items()),
        ("counting backend of the build", backend_label("cl100k_base"), ""),
        ("cold run (median)", wall_cpu("cold", cold), ""),
        ("cold / fastest tiktoken", f"{ratio:.3f}×", "≤ 0.35×"),
        ("cold / fastest tiktoken, per round", f"{min(per_round):.3f}–{max(per_round):.3f}×", ""),
        ("cold / least tiktoken, CPU time", f"{cpu_ratio:.3f}×", ""),
        ("hello-agents 0.2.8 vs our preset", "see bench/bench_hello_agents.py", ""),
    ]
    w1 = max(len(r[0]) for r in rows)
    w2 = max(len(r[1]) for r in rows)
    print(f"{'measure':<{w1}}  {'result':<{w2}}  target")
    print(f"{'-' * w1}  {'-' * w2}  ------")
    for a, b, c in rows:
        print(f"{a:<{w1}}  {b:<{w2}}  {c}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
