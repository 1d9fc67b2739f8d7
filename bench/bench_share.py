"""Shared traces benchmark: ``ctxscope import -o`` of a long Claude Code log, shared and whole.

    .venv/bin/python bench/bench_share.py [--events 4000] [--mb 40] [--compact-at 150000]
    .venv/bin/python bench/bench_share.py --log session.jsonl --ccl ~/venv/bin/claude-code-log

Builds the session log ``bench/bench_import.py`` builds (the default: 4,026 lines, 39.6 MB,
1,122 calls, 33 compactions; or ``--log`` takes one), then runs, each in a child process of
its own: ``ctxscope import LOG -o FILE`` (the shared form, docs/design.md "Shared traces"),
``ctxscope import LOG --whole -o FILE`` (each trace whole, what ``import -o`` wrote before the
shared form), reading each file back (``load_file``: every trace expanded and validated), and
``claude-code-log LOG -o FILE.html`` side by side when it is installed (``--ccl`` names it,
else ``.peer-ccl/bin/claude-code-log``, which ``make peers`` installs, else the PATH; without
it a note says so). Prints a table: wall time, CPU time (user + system, the
child's and the processes it waited for: ``import -o``'s counting process, docs/design.md
"Capture, import, export, redaction"), throughput on the log's size, the output's size
against the log's, peak memory (the biggest of those processes).
Targets (issue 34): the shared output at most twice the log's size, at least 30 MB/s end to
end.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

TARGET_RATIO = 2.0
TARGET_MBPS = 30.0

_READ_BACK = """
import sys
from ctxcore.formats.load import iter_traces
print(sum(1 for _ in iter_traces(sys.argv[1], "trace")))
"""


#: What no import of the log can go under, each part timed alone in a fresh process
#: (CPU seconds): the interpreter and the command's imports, loading the tokenizer, reading
#: and decoding every line (msgspec, the fastest JSON reader here), and counting every
#: text the importer counts (each message once) on one thread.
_FLOOR = """
import sys, time
c0 = time.process_time()
import ctxcore.cli, ctxcore.cli.exchange, ctxcore.formats.sessions, ctxcore.pipeline.ctxscope_config
c1 = time.process_time()
from ctxcore.formats.derive import tokenizer_for_model
from ctxcore.tokens import get_backend
backend = get_backend(tokenizer_for_model(sys.argv[2] or None))
c2 = time.process_time()
import msgspec
with open(sys.argv[1], "rb") as fh:
    n = sum(1 for line in fh if line.strip() and msgspec.json.decode(line) is not None)
c3 = time.process_time()
from ctxcore.formats import sessions
from ctxcore.formats.sessions import calls
texts = []
start = calls._start_counting
def grab(todo):
    for items in todo.values():
        texts.extend(it.entry.content for it in items)
    return start(todo)
calls._start_counting = grab
for _ in sessions.iter_file(sys.argv[1], "claude-code"):
    pass
c4 = time.process_time()
backend.count(texts, 1)
c5 = time.process_time()
print(c1 - c0, c2 - c1, c3 - c2, c5 - c4, sum(map(len, texts)))
"""


def floor(log: Path, model: str) -> list[tuple[str, dict[str, Any]]]:
    """The floor's parts (``_FLOOR``) as table rows (CPU time only)."""
    r = _child([sys.executable, "-c", "pass"])  # the bare interpreter
    bare = r["cpu"]
    got = _child([sys.executable, "-c", _FLOOR, str(log), model])
    imports, load, decode, count, chars = (float(x) for x in got["out"].split())
    rows = [
        ("floor: interpreter", bare),
        ("floor: + the command's imports", imports),
        ("floor: + loading the tokenizer", load),
        ("floor: + decoding every line (msgspec)", decode),
        (f"floor: + counting {chars / 1e6:.0f}M chars once (1 thread)", count),
    ]
    return [(label, {"wall": cpu, "cpu": cpu, "peak_mb": 0, "size": None}) for label, cpu in rows]


#: Runs its arguments as a child and reports that child's wall time (from its start to its
#: exit, as a shell's ``time`` would: not this wrapper's own start), CPU time and peak RSS
#: (``RUSAGE_CHILDREN`` of this wrapper holds that child's only).
_WRAP = """
import resource, subprocess, sys, time
t0 = time.perf_counter()
p = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.perf_counter() - t0
sys.stdout.write(p.stdout)
sys.stderr.write(p.stderr)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"@@usage {wall} {r.ru_utime + r.ru_stime} {r.ru_maxrss}", file=sys.stderr)
sys.exit(p.returncode)
"""


def _child(args: list[str]) -> dict[str, Any]:
    """Run ``args`` as a child: its wall time, CPU time, peak memory and standard output."""
    proc = subprocess.run(
        [sys.executable, "-c", _WRAP, *args], capture_output=True, text=True, cwd=ROOT
    )
    err, _, usage = proc.stderr.rpartition("@@usage ")
    if proc.returncode != 0:
        raise SystemExit(f"{args[:4]} failed ({proc.returncode}): {err[-2000:]}")
    wall, cpu, peak = usage.split()
    return {
        "wall": float(wall),
        "cpu": float(cpu),
        "peak_mb": int(peak) / 1024,
        "out": proc.stdout,
    }


#: Where ``make peers`` installs claude-code-log (scripts/setup_peer_ccl.sh).
PEER_CCL = ROOT / ".peer-ccl" / "bin" / "claude-code-log"


def _ccl(given: str | None) -> str | None:
    if given:
        return given
    if PEER_CCL.exists():
        return str(PEER_CCL)
    return shutil.which("claude-code-log")


def run(
    log: Path, work: Path, ccl: str | None, repeat: int = 1
) -> list[tuple[str, dict[str, Any]]]:
    """The table's rows. The shared import runs ``repeat`` times: its row is the run of the
    median wall time, with every run's wall time beside it (``walls``)."""
    py = sys.executable
    rows: list[tuple[str, dict[str, Any]]] = []
    for label, extra in (("import -o (shared)", []), ("import -o --whole (before)", ["--whole"])):
        out = work / ("shared.jsonl" if not extra else "whole.jsonl")
        argv = [py, "-m", "ctxcore", "import", str(log), *extra, "-o", str(out)]
        runs = [_child(argv) for _ in range(1 if extra else max(1, repeat))]
        runs.sort(key=lambda x: x["wall"])
        r = runs[(len(runs) - 1) // 2]
        r["walls"] = [x["wall"] for x in runs]
        r["size"] = out.stat().st_size
        r["traces"] = next(
            int(x.split()[1]) for x in r["out"].splitlines() if x.startswith("imported ")
        )
        rows.append((label, r))
        back = _child([py, "-c", _READ_BACK, str(out)])
        back["size"] = None
        back["traces"] = int(back["out"].strip())
        rows.append((f"  read back ({'shared' if not extra else 'whole'})", back))
        out.unlink()
    if ccl is not None:
        html = work / "ccl.html"
        r = _child([ccl, str(log), "-o", str(html)])
        r["size"] = html.stat().st_size if html.exists() else None
        r["traces"] = None
        rows.append(("claude-code-log (HTML)", r))
    first = log.open("rb").read(1 << 20).decode("utf-8", "replace")
    model = next(iter(re.findall(r'"model"\s*:\s*"([^"]+)"', first)), "")
    rows += floor(log, model)
    return rows


def table(log: Path, rows: list[tuple[str, dict[str, Any]]]) -> str:
    mb = log.stat().st_size / 1e6
    head = ("run", "wall s", "CPU s", "MB/s (wall)", "MB/s (CPU)", "output", "x log", "peak MB")
    lines = [head]
    for label, r in rows:
        size = r.get("size")
        lines.append(
            (
                label,
                f"{r['wall']:.2f}",
                f"{r['cpu']:.2f}",
                f"{mb / r['wall']:.1f}",
                f"{mb / max(r['cpu'], 1e-9):.1f}",
                f"{size / 1e6:,.1f} MB" if size is not None else "",
                f"{size / (mb * 1e6):.2f}" if size is not None else "",
                f"{r['peak_mb']:,.0f}",
            )
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    out = [f"log: {log} ({mb:,.1f} MB)"]
    for k, row in enumerate(lines):
        out.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    shared = dict(rows)["import -o (shared)"]
    walls = shared.get("walls", [shared["wall"]])
    out.append(
        f"import -o (shared): {len(walls)} run(s), the row is the median's; wall "
        + ", ".join(f"{w:.3f}" for w in walls)
        + " s (each from the command's start to its exit)"
    )
    peer = dict(rows).get("claude-code-log (HTML)")
    if peer is not None:
        out.append(
            f"peer: claude-code-log takes {peer['wall'] / shared['wall']:.2f}x our wall time and "
            f"{peer['cpu'] / max(shared['cpu'], 1e-9):.2f}x our CPU time on this log"
        )
    else:
        out.append(
            "peer: claude-code-log is not installed (make peers, or --ccl PATH): not compared"
        )
    ratio = shared["size"] / (mb * 1e6)
    rate = mb / shared["wall"]
    out.append(
        f"targets: output <= {TARGET_RATIO:.0f}x the log: {ratio:.2f}x "
        f"{'ok' if ratio <= TARGET_RATIO else 'MISSED'}; >= {TARGET_MBPS:.0f} MB/s end to end: "
        f"{rate:.1f} MB/s {'ok' if rate >= TARGET_MBPS else 'MISSED'}"
    )
    parts = [r["cpu"] for label, r in rows if label.startswith("floor:")]
    out.append(
        f"floor (the rows marked floor, CPU s, wall = CPU): {sum(parts):.2f} s = "
        f"{mb / sum(parts):.1f} MB/s at best on one CPU, before any trace is made or written"
    )
    # with the counting process, loading the tokenizer and counting run on the other CPU
    importer = parts[0] + parts[1] + parts[3]
    beside = parts[0] + parts[2] + parts[4]
    out.append(
        f"floor on two CPUs (the importer: interpreter, imports, decoding; beside it the "
        f"counting process: interpreter, tokenizer, counting): {max(importer, beside):.2f} s = "
        f"{mb / max(importer, beside):.1f} MB/s"
    )
    out.append(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at the end")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=4000)
    ap.add_argument("--mb", type=float, default=40.0)
    ap.add_argument("--compact-at", type=int, default=150_000)
    ap.add_argument("--log", type=Path, help="a Claude Code log to use instead of building one")
    ap.add_argument("--ccl", help="the claude-code-log command (default: on the PATH)")
    ap.add_argument(
        "--repeat",
        type=int,
        default=5,
        help="runs of the shared import; its row is the median's (default 5)",
    )
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ctxscope-bench-share-"))
    if args.log is not None:
        log = args.log
    else:
        from bench_import import build

        log = work / "session.jsonl"
        made = build(log, args.events, args.mb, args.compact_at)
        print(f"built {log}: {made['events']:,} lines, {made['compactions']} compactions")
    rows = run(log, work, _ccl(args.ccl), args.repeat)
    print(table(log, rows))
    if args.log is None:
        log.unlink()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
