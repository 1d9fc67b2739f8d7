"""``ctxscope ingest`` and ``ctxscope watch``: ingest with progress, one line per error."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import IO

from ctxcore.store.engines import open_store, shown
from ctxcore.store.ingest import format_counts, format_error, ingest_paths
from ctxcore.store.records import IngestCounts
from ctxcore.store.watch import Watcher


class ProgressBar:
    """A one-line bar on stderr, drawn only once a run has taken more than a second and only
    on a terminal: a log file or a pipe gets no carriage-return frames, just the summary."""

    def __init__(self, stream: IO[str] | None = None, after_s: float = 1.0) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.start = time.monotonic()
        self.after_s = after_s
        self.drawn = False
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if not self.live or now - self.start < self.after_s or now - self.last < 0.1:
            return
        if total <= 0:
            return
        self.last = now
        frac = min(1.0, done / total)
        bar = "#" * int(frac * 30)
        mb = done / 1e6
        rate = mb / max(1e-6, now - self.start)
        self.stream.write(f"\r[{bar:<30}] {frac:6.1%} {mb:,.1f} MB ({rate:,.1f} MB/s)")
        self.stream.flush()
        self.drawn = True

    def finish(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()


def cli_ingest(args: argparse.Namespace) -> int:
    """``ctxscope ingest PATH... [--db PATH] [--defer-diagnostics]``: counts on stdout,
    errors as file:line."""
    bar = ProgressBar()
    defer = bool(getattr(args, "defer_diagnostics", False))
    with open_store(args.db, diagnose=not defer) as store:
        try:
            counts = ingest_paths(store, args.paths, bar, complete_tail=True, workers=None)
        finally:
            bar.finish()
        waiting = store.undiagnosed() if defer else 0
    print(f"ingested {format_counts(counts)}")
    if waiting:
        print(
            f"{waiting:,} traces wait for diagnostics: the app computes their findings when "
            "idle (run `ctxscope app` or `ctxscope watch` on this store)"
        )
    for e in counts.error_rows:
        print(format_error(e))
    for file, line in counts.pending:
        print(
            f"{file}:{line}: last line is not complete yet (no newline, not valid JSON); "
            "it will be read when the writer finishes it",
            file=sys.stderr,
        )
    return 1 if counts.errors else 0


def cli_watch(args: argparse.Namespace) -> int:
    """``ctxscope watch DIR [--db PATH]``: ingest as files arrive until Ctrl-C."""

    def report(c: IngestCounts) -> None:
        print(f"{time.strftime('%H:%M:%S')} ingested {format_counts(c)}", flush=True)
        for e in c.error_rows:
            print(format_error(e), flush=True)

    # Ctrl-C and a supervisor's SIGTERM stop it cleanly (the store closed, the totals said).
    # Handlers are installed, not inherited: a background job of a non-interactive shell
    # (`ctxscope watch &` in a script) starts with SIGINT ignored, and Python then keeps it so.
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, on_signal) for s in stops}
    try:
        with open_store(args.db) as store:
            watcher = Watcher(store, args.dir, on_ingest=report)
            watcher.start()
            print(
                f"watching {Path(args.dir).resolve()} into {shown(args.db)} (Ctrl-C to stop)",
                flush=True,
            )
            try:
                while watcher.running and not stop.wait(0.5):
                    pass
            finally:
                watcher.stop()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    print(f"stopped; {format_counts(watcher.totals)}", file=sys.stderr)
    return 0
