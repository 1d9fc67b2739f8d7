"""Session-log import benchmark: a long Claude Code session, imported as a stream.

    .venv/bin/python bench/bench_import.py [--events 20000] [--mb 170] [--compact-at 150000]
    .venv/bin/python bench/bench_import.py --events 2000 --mb 10 --compact-at 0   # no compaction
    .venv/bin/python bench/bench_import.py --events 4000 --mb 40 --cli store     # into a store

Builds a Claude Code session log from the real lines of the fixtures
(``tests/fixtures/imports/claude-code``: the main chain of the Task-sidechain session and of
the /init session), repeated with new ids (uuids, message ids, request ids, tool-use ids)
and chained one after the other, so every call's context grows with everything before it.
Tool outputs are the fixtures' own text followed by real tool output from the corpus
(``corpus/d*``: pytest, grep, tsc, npm logs), sized to reach the target file size; like
Claude Code, the log repeats a tool's output in ``toolUseResult`` (stdout, file content).
Every repetition's texts differ (a marker and a different corpus slice), so the tokenizer
counts real new text. When the context reaches ``--compact-at`` estimated tokens, the log
gets an auto-compaction (a ``compact_boundary`` line and an ``isCompactSummary`` message), as
Claude Code writes it when the window fills; ``--compact-at 0`` never compacts (each call then
holds the whole session: quadratic, only for small sizes).

The import runs in a child process (a clean peak-memory reading): ``sessions.iter_file``
streams the traces, which are dropped as they come (a store or a JSONL writer would take
them there). Then the same import again with every count cached (what it costs without the
tokenizer) and the tokenizer alone on the texts the import counted. Prints a table:
throughput (wall and CPU time: on a shared machine the wall clock measures the neighbours
too), peak memory, calls, tokens counted (each message once) against tokens in all calls'
prompts, and the JSON size a trace per call takes.

Then ``ctxscope import`` itself on the same log, in a child process of its own (``--cli``):
``jsonl`` (the default) writes ``-o FILE``, ``store`` writes a fresh DuckDB store (findings
are computed at insert, which is most of its time), ``none`` skips it. The command streams
the traces into the file or the store (docs/design.md, "Capture, import, export,
redaction"); its rows give its throughput, its peak memory and what it wrote.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FIXTURES = ROOT / "tests" / "fixtures" / "imports" / "claude-code"
TEMPLATES = ("ccviewer-task-sidechain-session.jsonl", "ccviewer-init-session.jsonl")
TARGET_MBPS = 20.0
TARGET_PEAK_MB = 1024.0
#: characters per token, to decide when the simulated context is full (the import counts
#: the real tokens)
CHARS_PER_TOKEN = 3.5


def template_lines() -> list[dict[str, Any]]:
    """The main-chain lines of the real sessions, in file order."""
    out: list[dict[str, Any]] = []
    for name in TEMPLATES:
        for line in (FIXTURES / name).read_text(encoding="utf-8").splitlines():
            obj = json.loads(line)
            if obj.get("uuid") and not obj.get("isSidechain"):
                out.append(obj)
    return out


def corpus_text() -> str:
    parts = []
    for p in sorted((ROOT / "corpus").glob("d*")):
        parts.append(p.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(parts)


class Generator:
    """Writes the session line by line (memory stays flat whatever the size)."""

    def __init__(self, extra_chars: int, compact_at: int) -> None:
        self.templates = template_lines()
        self.corpus = corpus_text()
        self.extra = extra_chars
        self.compact_at = compact_at
        self.session = "bench-0000-4000-8000-session000000"
        self.clock = datetime(2025, 9, 3, tzinfo=UTC)
        self.parent: str | None = None
        self.n = 0
        self.context_chars = 0
        self.compactions = 0
        self.offset = 0

    def _uuid(self) -> str:
        self.n += 1
        return f"00000000-0000-4000-8000-{self.n:012d}"

    def _slice(self) -> str:
        size = self.extra
        if size <= 0:
            return ""
        start = self.offset % max(len(self.corpus) - size, 1)
        self.offset += 7919  # a prime step: every slice differs
        return self.corpus[start : start + size]

    def _stamp(self, obj: dict[str, Any]) -> None:
        self.clock += timedelta(milliseconds=700)
        obj["uuid"] = self._uuid()
        obj["parentUuid"] = self.parent
        obj["sessionId"] = self.session
        obj["timestamp"] = self.clock.isoformat().replace("+00:00", "Z")
        self.parent = obj["uuid"]

    def cycle(self, k: int) -> list[str]:
        """One repetition of the template lines with new ids (and a compaction when due)."""
        out: list[str] = []
        ids: dict[str, str] = {}

        def new_id(old: str) -> str:
            if old not in ids:
                ids[old] = f"{old}_{k}"
            return ids[old]

        for tpl in self.templates:
            obj = copy.deepcopy(tpl)
            self._stamp(obj)
            if "requestId" in obj:
                obj["requestId"] = new_id(obj["requestId"])
            msg = obj["message"]
            if obj["type"] == "assistant":
                msg["id"] = new_id(msg["id"])
            content = msg.get("content")
            if isinstance(content, str):
                msg["content"] = f"[{k}] {content}"
                self.context_chars += len(content)
            for block in content if isinstance(content, list) else []:
                kind = block.get("type")
                if kind == "text":
                    block["text"] = f"[{k}] {block['text']}"
                    self.context_chars += len(block["text"])
                elif kind == "tool_use":
                    block["id"] = new_id(block["id"])
                    self.context_chars += len(json.dumps(block.get("input")))
                elif kind == "tool_result":
                    block["tool_use_id"] = new_id(block["tool_use_id"])
                    body = block.get("content")
                    text = body if isinstance(body, str) else json.dumps(body)
                    text = f"[{k}] {text}\n{self._slice()}"
                    block["content"] = text
                    self.context_chars += len(text)
                    _duplicate(obj, text)
            out.append(json.dumps(obj, ensure_ascii=False))
            if self.compact_at and self.context_chars / CHARS_PER_TOKEN > self.compact_at:
                if obj["type"] == "assistant" and msg.get("stop_reason") is not None:
                    out.extend(self._compaction(k))
        return out

    def _compaction(self, k: int) -> list[str]:
        """An auto-compaction as Claude Code writes it: a boundary, then the summary."""
        self.compactions += 1
        pre = int(self.context_chars / CHARS_PER_TOKEN)
        boundary: dict[str, Any] = {
            "type": "system",
            "subtype": "compact_boundary",
            "isSidechain": False,
            "userType": "external",
            "cwd": "/path/to/Demo",
            "version": "2.1.0",
            "content": "Conversation compacted",
            "level": "info",
            "compactMetadata": {"trigger": "auto", "preTokens": pre},
        }
        last = self.parent
        self._stamp(boundary)
        boundary["parentUuid"] = None
        boundary["logicalParentUuid"] = last
        summary: dict[str, Any] = {
            "type": "user",
            "isSidechain": False,
            "userType": "external",
            "cwd": "/path/to/Demo",
            "version": "2.1.0",
            "isCompactSummary": True,
            "message": {
                "role": "user",
                "content": [
                    {
                        "type": "text",
                        "text": "This session is being continued from a previous conversation "
                        f"that ran out of context (compaction {self.compactions}, cycle {k}). "
                        "Summary:\n" + self.corpus[k * 131 % 50_000 : k * 131 % 50_000 + 6_000],
                    }
                ],
            },
        }
        self._stamp(summary)
        self.context_chars = 6_000
        return [json.dumps(boundary), json.dumps(summary, ensure_ascii=False)]


def _duplicate(obj: dict[str, Any], text: str) -> None:
    """Claude Code repeats a tool's output in ``toolUseResult``: a Bash result's ``stdout``, a
    Read's ``file.content``. The corpus output added to a result is command output, so the
    line keeps it where a Bash line would (beside the fixture's own fields)."""
    res = obj.get("toolUseResult")
    if isinstance(res, dict) and isinstance(res.get("file"), dict):
        res["file"]["content"] = text
    elif isinstance(res, dict):
        res["stdout"] = text
    else:
        obj["toolUseResult"] = {"stdout": text, "stderr": "", "interrupted": False}


def build(path: Path, events: int, mb: float, compact_at: int) -> dict[str, Any]:
    """Write the session: the tool-output size is calibrated on one cycle for the target."""
    probe = Generator(0, 0)
    base = probe.cycle(0)
    base_bytes = sum(len(x.encode()) + 1 for x in base)
    per_line = mb * 1e6 / events
    tool_lines = sum(1 for x in base if '"tool_result"' in x)
    dup = sum(1 for x in base if '"stdout"' in x or '"file"' in x)
    extra = max(0, int((per_line * len(base) - base_bytes) / max(tool_lines + dup, 1) / 1.05))
    gen = Generator(extra, compact_at)
    written = 0
    lines = 0
    with open(path, "w", encoding="utf-8") as fh:
        k = 0
        while lines < events:
            for line in gen.cycle(k):
                fh.write(line + "\n")
                written += len(line.encode()) + 1
                lines += 1
            k += 1
    return {"events": lines, "bytes": written, "compactions": gen.compactions, "cycles": k}


def _stream(path: Path) -> tuple[Any, dict[str, Any]]:
    """Import ``path`` as a stream, dropping each trace after a look at it."""
    from ctxcore.formats import sessions

    imp = sessions.iter_file(path, "claude-code")
    seen: dict[str, Any] = {
        "traces": 0,
        "after_compaction": 0,
        "max_decisions": 0,
        "json": 0,
        "sampled": 0,
    }
    json_s = 0.0
    for t in imp:
        seen["traces"] += 1
        assert t.result is not None
        seen["max_decisions"] = max(seen["max_decisions"], len(t.result.decisions))
        if t.result.report.summarized:
            seen["after_compaction"] += 1
        if seen["traces"] % 97 == 0:  # what writing every trace out would weigh, sampled
            s0 = time.perf_counter()
            seen["json"] += len(t.to_json())
            seen["sampled"] += 1
            json_s += time.perf_counter() - s0
    seen["json_s"] = json_s
    return imp, seen


def _new_texts(path: Path) -> list[str]:
    """The distinct texts an import counts (each message once), read again from the log."""
    from ctxcore.formats.sessions import claude_code
    from ctxcore.formats.sessions.lines import read_lines

    reader = claude_code.Reader(str(path), "bench", datetime.now(UTC))
    texts: dict[str, None] = {}
    segs: set[int] = set()
    for call in reader.calls(read_lines(path)):
        for seg in call.context:
            if id(seg) not in segs:
                segs.add(id(seg))
                texts.update(dict.fromkeys(e.content for e in seg.entries()))
    return list(texts)


def measure(path: Path) -> dict[str, Any]:
    """Import ``path`` as a stream (in this process) and report what it took."""
    from ctxcore.formats.sessions.lines import read_lines
    from ctxcore.tokens import TokenCounter, backend_label, get_counter

    size = path.stat().st_size
    get_counter("cl100k_base").count("warm up")  # load the encoding outside the timing
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    n_lines = sum(1 for _ in read_lines(path))
    parse_s = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    imp, seen = _stream(path)
    total_s = time.perf_counter() - t0 - seen["json_s"]
    cpu_s = time.process_time() - c0 - seen["json_s"]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    counter = get_counter("cl100k_base")
    # the same import again, every text's count now cached: what the import costs without
    # the tokenizer
    t0, c0 = time.perf_counter(), time.process_time()
    _, again = _stream(path)
    warm_s = time.perf_counter() - t0 - again["json_s"]
    warm_cpu = time.process_time() - c0 - again["json_s"]
    # the tokenizer alone on the texts the import counted, the same way (a fresh cache)
    texts = _new_texts(path)
    t0, c0 = time.perf_counter(), time.process_time()
    TokenCounter("cl100k_base").count_many_started(texts)()
    tok_s = time.perf_counter() - t0
    tok_cpu = time.process_time() - c0
    return {
        "lines": n_lines,
        "bytes": size,
        "parse_s": parse_s,
        "import_s": total_s,
        "cpu_s": cpu_s,
        "warm_s": warm_s,
        "warm_cpu": warm_cpu,
        "tok_s": tok_s,
        "tok_cpu": tok_cpu,
        "tok_chars": sum(map(len, texts)),
        "traces": seen["traces"],
        "traces_after_compaction": seen["after_compaction"],
        "max_decisions": seen["max_decisions"],
        "peak_mb": peak,
        "base_mb": base_rss,
        "tokens_counted": imp.traces.tokens_counted,
        "tokens_in_calls": imp.traces.tokens_in_calls,
        "texts_tokenized": counter.misses,
        "json_per_trace": seen["json"] / max(seen["sampled"], 1),
        "errors": len(imp.errors),
        "backend": backend_label("cl100k_base"),
    }


#: Runs its arguments as a child and reports the child's peak RSS and CPU time
#: (``RUSAGE_CHILDREN`` of this wrapper holds that child's only, with the processes it
#: waited for: ``import --db``'s findings process; the peak is the largest one's).
_PEAK = """
import resource, subprocess, sys
p = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stdout.write(p.stdout)
sys.stderr.write(p.stderr)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"@@cpu {r.ru_utime} {r.ru_stime}", file=sys.stderr)
print(f"@@peak {r.ru_maxrss}", file=sys.stderr)
sys.exit(p.returncode)
"""


def run_cli(path: Path, how: str, work: Path) -> dict[str, Any]:
    """``ctxscope import`` of ``path`` into a JSONL file or a new store, in a child process:
    its wall time, peak memory, traces and what it wrote."""
    args = [sys.executable, "-m", "ctxcore", "import", str(path)]
    target = work / ("traces.jsonl" if how == "jsonl" else "bench.duckdb")
    args += ["-o", str(target)] if how == "jsonl" else ["--db", str(target)]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK, *args], capture_output=True, text=True, cwd=ROOT
    )
    wall = time.perf_counter() - t0
    err, _, peak = proc.stderr.rpartition("@@peak ")
    err, _, cpu = err.rpartition("@@cpu ")
    if proc.returncode != 0:
        raise SystemExit(f"ctxscope import failed ({proc.returncode}): {err[-2000:]}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("imported "))
    out = {
        "how": how,
        "wall_s": wall,
        "user_s": float(cpu.split()[0]),
        "sys_s": float(cpu.split()[1]),
        "load": (load, os.getloadavg()[0]),
        "peak_mb": int(peak) / 1024,
        "traces": int(line.split()[1]),
        "written": target.stat().st_size,
    }
    target.unlink()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--mb", type=float, default=170.0)
    ap.add_argument("--compact-at", type=int, default=150_000, help="tokens; 0: never")
    ap.add_argument("--keep", action="store_true", help="keep the generated log")
    ap.add_argument(
        "--cli",
        choices=["jsonl", "store", "none"],
        default="jsonl",
        help="also run `ctxscope import` on the log: into -o FILE, into a new store, or not",
    )
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure is not None:  # the child process
        print(json.dumps(measure(args.measure)))
        return
    work = Path(tempfile.mkdtemp(prefix="ctxscope-bench-import-"))
    path = work / "session.jsonl"
    t0 = time.perf_counter()
    made = build(path, args.events, args.mb, args.compact_at)
    gen_s = time.perf_counter() - t0
    child = subprocess.run(
        [sys.executable, __file__, "--measure", str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    m = json.loads(child.stdout.strip().splitlines()[-1])
    cli = run_cli(path, args.cli, work) if args.cli != "none" else None
    mb = m["bytes"] / 1e6
    rate = mb / m["import_s"]
    ratio = m["tokens_in_calls"] / max(m["tokens_counted"], 1)
    tok_mb = m["tok_chars"] / 1e6
    rows = [
        ("session log", f"{made['events']:,} events, {mb:,.1f} MB", ""),
        ("generated in", f"{gen_s:.1f} s ({made['cycles']} cycles of the fixtures)", ""),
        ("compactions in the log", f"{made['compactions']}", ""),
        ("JSON parse only", f"{m['parse_s']:.2f} s ({mb / m['parse_s']:.0f} MB/s)", ""),
        (
            "import (stream of traces)",
            f"{m['import_s']:.2f} s = {rate:.1f} MB/s",
            f">= {TARGET_MBPS:.0f} MB/s {'ok' if rate >= TARGET_MBPS else 'MISSED'}",
        ),
        (
            "  CPU time (all threads)",
            f"{m['cpu_s']:.1f} s = {mb / m['cpu_s']:.1f} MB per CPU-second",
            "",
        ),
        (
            "  again, counts cached",
            f"{m['warm_s']:.2f} s = {mb / m['warm_s']:.1f} MB/s, CPU {m['warm_cpu']:.1f} s "
            "(all but the tokenizer)",
            "",
        ),
        (
            "  tokenizer alone",
            f"{m['tok_s']:.2f} s for {tok_mb:,.1f} MB of new text ({tok_mb / m['tok_s']:.1f} "
            f"MB/s), CPU {m['tok_cpu']:.1f} s",
            "",
        ),
        (
            "peak memory (child)",
            f"{m['peak_mb']:,.0f} MB (before import {m['base_mb']:,.0f} MB)",
            f"<= {TARGET_PEAK_MB:,.0f} MB {'ok' if m['peak_mb'] <= TARGET_PEAK_MB else 'MISSED'}",
        ),
        ("traces (model calls)", f"{m['traces']:,}", ""),
        ("traces right after a compaction", f"{m['traces_after_compaction']:,}", ""),
        ("largest trace", f"{m['max_decisions']:,} decisions", ""),
        ("tokens counted (each message once)", f"{m['tokens_counted']:,}", ""),
        ("tokens in all calls' prompts", f"{m['tokens_in_calls']:,} ({ratio:,.1f}x)", ""),
        ("texts sent to the tokenizer", f"{m['texts_tokenized']:,}", ""),
        (
            "JSON per trace (sampled)",
            f"{m['json_per_trace'] / 1e3:,.0f} KB; all traces "
            f"~{m['json_per_trace'] * m['traces'] / 1e9:,.1f} GB as JSONL",
            "",
        ),
        ("unreadable lines", f"{m['errors']}", ""),
        *_cli_rows(cli, mb),
        ("token counter", m["backend"], ""),
        ("machine", f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at the end", ""),
    ]
    w0 = max(len(a) for a, _, _ in rows)
    w1 = max(len(b) for _, b, _ in rows)
    print(f"{'measure':<{w0}}  {'result':<{w1}}  target")
    print(f"{'-' * w0}  {'-' * w1}  ------")
    for a, b, c in rows:
        print(f"{a:<{w0}}  {b:<{w1}}  {c}")
    if args.keep:
        print(f"(log kept in {path})")
    else:
        path.unlink()
        work.rmdir()


def _cli_rows(cli: dict[str, Any] | None, mb: float) -> list[tuple[str, str, str]]:
    if cli is None:
        return []
    rate = mb / cli["wall_s"]
    what = "-o FILE" if cli["how"] == "jsonl" else "--db (new store)"
    ok = cli["peak_mb"] <= TARGET_PEAK_MB
    return [
        (
            f"ctxscope import {what}",
            f"{cli['wall_s']:.1f} s = {rate:.1f} MB/s, {cli['traces']:,} traces",
            "",
        ),
        (
            "  CPU (its processes), load",
            f"{cli['user_s']:.1f} s user + {cli['sys_s']:.1f} s sys, "
            f"load {cli['load'][0]:.1f} -> {cli['load'][1]:.1f}",
            "",
        ),
        (
            "  peak memory (its largest process)",
            f"{cli['peak_mb']:,.0f} MB",
            f"<= {TARGET_PEAK_MB:,.0f} MB {'ok' if ok else 'MISSED'}",
        ),
        ("  written", f"{cli['written'] / 1e9:,.2f} GB", ""),
    ]


if __name__ == "__main__":
    main()
