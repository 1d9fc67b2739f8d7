"""What replay does faster gives the same answers (issue 16: 1,000 stored traces ≤ 20 s).

Each shortcut is checked against the computation it replaces, on the demo traces and on
random inputs: whitespace normalized by ``str.split`` rather than a regex, a prompt's
sections found from its line starts, the knapsack updated in place, the file names of error
lines remembered per line, the detectors' re-runs without the decisions' sentences, the
prepared-input cache telling same-shaped inputs apart without hashing them, and ``replay
--all`` listing each stored session once.
"""

from __future__ import annotations

import importlib
import math
import os
import random
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ctxcore.cli import main
from ctxcore.diagnostics import rebuild
from ctxcore.diagnostics.context import normalize_ws, ws_head
from ctxcore.diagnostics.counterfactual import rerun
from ctxcore.diagnostics.detectors_content import _positional, is_positional_id
from ctxcore.diagnostics.detectors_tokens import _HEADER, sections
from ctxcore.diagnostics.text import (
    _BANDS,
    _ROWS,
    _minhash_of,
    lowered_ws,
    near_duplicate_pairs,
    normalized_ws,
    shingles,
)
from ctxcore.loading import parse_json, trace_from_obj
from ctxcore.models import BuildResult, CapturedInput, Trace
from ctxcore.pipeline import gather, signals
from ctxcore.pipeline.fill import knapsack
from ctxcore.summarize import error_evidence
from ctxcore.tokens import get_counter

DEMO = Path(__file__).resolve().parent.parent / "ctxcore" / "data" / "demo"
WHITESPACE = "".join(chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace())


def demo(name: str) -> list[Trace]:
    path = DEMO / name
    lines = path.read_text(encoding="utf-8").splitlines()
    return [trace_from_obj(parse_json(ln, str(path)), str(path)) for ln in lines if ln.strip()]


@pytest.fixture(scope="module")
def traces() -> list[Trace]:
    return [t for f in sorted(DEMO.glob("*.jsonl")) for t in demo(f.name)]


def random_text(rng: random.Random, n: int) -> str:
    alphabet = ["a", "B", "7", ".", "[", "]", "é", "中", *WHITESPACE[:12], " ", "\n", "\u3000"]
    return "".join(rng.choice(alphabet) for _ in range(n))


def test_whitespace_is_normalized_as_the_regex_did(traces: list[Trace]) -> None:
    # every character Python calls whitespace, between words and at both ends
    texts = [f"{WHITESPACE}a{WHITESPACE}b {WHITESPACE}", WHITESPACE, ""]
    rng = random.Random(7)
    texts += [random_text(rng, rng.randint(0, 400)) for _ in range(400)]
    texts += [p.content for t in traces[:40] for p in t.input.packets]
    for text in texts:
        expected = re.sub(r"\s+", " ", text).strip()
        assert normalize_ws(text) == expected == normalized_ws(text)
        assert lowered_ws(text) == expected.lower()
        for n in (0, 1, 40, 120, 500):
            assert ws_head(text, n) == expected[:n]


def test_ws_head_cuts_long_texts_where_a_run_of_spaces_crosses_the_cut() -> None:
    # the prefix read first (4n + 64 characters) ends inside a run of whitespace, or inside
    # a word, or the text is mostly whitespace: the head is still that of the whole text
    for pad in range(60, 70):
        for n in (10, 120):
            cut = 4 * n + 64
            text = "x" * (cut - pad) + " \t\n " * pad + "tail " * 50
            assert ws_head(text, n) == normalize_ws(text)[:n]
            sparse = (" " * (cut + 3) + "w") * 30
            assert ws_head(sparse, n) == normalize_ws(sparse)[:n]


def reference_sections(prompt: str) -> dict[str, str]:
    marks = [(m.start(), f"[{m.group(1)}]") for m in _HEADER.finditer(prompt)]
    out: dict[str, str] = {}
    for k, (start, name) in enumerate(marks):
        end = marks[k + 1][0] if k + 1 < len(marks) else len(prompt)
        out.setdefault(name, prompt[start:end].rstrip("\n"))
    return out


def test_sections_are_those_the_header_pattern_finds(traces: list[Trace]) -> None:
    prompts = [t.result.prompt for t in traces if t.result is not None]
    assert any(sections(p) for p in prompts)
    rng = random.Random(3)
    parts = ["[Task]", "[Output]", "[State]", "[Evidence]", "[Role & Policies]", "[Context]"]
    parts += ["[Task", "[task]", " [Task]", "x[Output]", "[", "\n", "\n\n", "text ", "[[Task]"]
    prompts += ["".join(rng.choice(parts) for _ in range(rng.randint(0, 30))) for _ in range(500)]
    for p in prompts:
        assert sections(p) == reference_sections(p), p[:200]


def reference_knapsack(values: list[float], weights: list[int], capacity: int) -> list[int]:
    """The DP as it was written before it ran in place (np.where, arrays made per item)."""
    if capacity <= 0 or not values:
        return []
    g = max(1, math.ceil(capacity / 4000))
    cap = capacity // g
    w = [math.ceil(x / g) for x in weights]
    dp = np.zeros(cap + 1, dtype=np.float64)
    take = np.zeros((len(values), cap + 1), dtype=bool)
    for k, (v, wk) in enumerate(zip(values, w, strict=True)):
        if v <= 0 or wk > cap:
            continue
        cand = dp[: cap + 1 - wk] + v
        better = cand > dp[wk:]
        take[k, wk:] = better
        dp[wk:] = np.where(better, cand, dp[wk:])
    chosen: list[int] = []
    c = int(np.argmax(dp))
    for k in range(len(values) - 1, -1, -1):
        if take[k, c]:
            chosen.append(k)
            c -= w[k]
    return chosen[::-1]


def test_the_knapsack_in_place_chooses_what_it_chose_before() -> None:
    rng = random.Random(11)
    for _ in range(1500):
        n = rng.randint(0, 120)
        # ties on purpose: rounded scores, equal weights, zero and negative scores
        values = [
            rng.choice([0.0, -0.2, 0.5, round(rng.random(), 2), rng.random()]) for _ in range(n)
        ]
        weights = [rng.choice([0, 1, 50, rng.randint(1, 3000)]) for _ in range(n)]
        capacity = rng.choice([0, 1, 999, 4000, 4001, 7919, 12000, 250_000])
        assert knapsack(values, weights, capacity) == reference_knapsack(values, weights, capacity)


def reference_frame_names(lines: list[str]) -> set[str]:
    """``_frame_names`` as it read every line joined, with nothing remembered."""
    found: list[tuple[int, int, int, str]] = []
    for k, ln in enumerate(lines):
        found += [(k, 0, at, name) for at, name in signals._frame_files(ln)]
        for m in signals._DOTTED_RUN.finditer(ln):
            found += [(k, 1, m.start(), p) for p in signals._PATH.findall(m.group())]
    found.sort(key=lambda f: f[:3])
    names = dict.fromkeys(f[3] for f in found)
    return set({x: x.lower().lstrip("./") for x in names}.values())


def test_file_names_of_error_lines_are_remembered_per_line(traces: list[Trace]) -> None:
    groups = [g for t in traces for p in t.input.packets if (g := error_evidence(p.content))]
    lines = list(dict.fromkeys(ln for g in groups for ln in g))
    lines += [
        'File "a/b.py", line 3, in x',
        "at foo (src/x.ts:12:3) and ./lib/y.js:4",
        "x.py:1 y.py:2 a/b/c.rs(3)",
        'E   File "q.py", line 9: ../up/z.go:7',
    ]
    assert len(lines) > 20
    # read joined, each line's names are what the line alone gives (no match spans lines)
    joined = signals._names_by_line(lines)
    assert joined == {ln: signals._names_by_line([ln])[ln] for ln in lines}
    rng = random.Random(5)
    signals._LINE_NAMES.clear()
    for _ in range(300):
        pick = [rng.sample(lines, rng.randint(0, 4)) for _ in range(rng.randint(0, 5))]
        distinct = list(dict.fromkeys(ln for g in pick for ln in g))
        expected = reference_frame_names(distinct)
        got = signals._frame_names(pick)  # a miss, a hit or both
        assert got == expected and list(got) == list(expected)
    assert signals._LINE_NAMES  # remembered


def test_rerun_leaves_out_only_the_sentences(traces: list[Trace]) -> None:
    ctxscope = [t for t in traces if t.config.preset == "ctxscope"][::7]
    others = [t for t in traces if t.config.preset != "ctxscope"][::9]
    assert ctxscope and others

    def without_sentences(r: BuildResult) -> BuildResult:
        plain = [d.model_copy(update={"reason_text": "", "notes": []}) for d in r.decisions]
        report = r.report.model_copy(update={"reasons": {}})
        return r.model_copy(update={"decisions": plain, "report": report, "timings": {}})

    for t in ctxscope:
        for patch in ({}, {"fill": "optimal"}, {"enable_compression": False}):
            full, plain = rebuild(t, patch), rerun(t, patch)
            assert full is not None and plain is not None
            assert without_sentences(plain) == without_sentences(full)
            assert all(d.reason_text == "" and d.notes == [] for d in plain.decisions)
    for t in others:  # the other presets build as rebuild does
        full, plain = rebuild(t), rerun(t)
        assert full is not None and plain is not None
        assert plain.model_copy(update={"timings": {}}) == full.model_copy(update={"timings": {}})
    assert rerun(ctxscope[0], {"max_tokens": -1}) is None  # an invalid what-if, as rebuild


def test_positional_ids_are_remembered_and_long_ones_are_not() -> None:
    ids = ["3", "chunk_12", "tool:call_9", "file:src/a.py", "evidence_result_7", "x" * 300]
    ids += [f"doc-{i:04x}" for i in range(50)] + ["ev" * 150 + "1"]
    for pid in ids:
        for kind in ("", "evidence", "tool_result", "doc"):
            assert is_positional_id(pid, kind) == _positional(pid, kind)
            assert is_positional_id(pid, kind) == _positional(pid, kind)  # cached the second time


def reference_pairs(sets: list[frozenset[int]], threshold: float) -> list[tuple[int, int, float]]:
    """MinHash-LSH with one dict of (band, key) buckets, as it was."""
    out: list[tuple[int, int, float]] = []
    first: dict[frozenset[int], int] = {}
    reps = []
    for i, s in enumerate(sets):
        if s and s in first:
            out.append((first[s], i, 1.0))
        elif s:
            first[s] = i
            reps.append(i)
    buckets: dict[tuple[int, bytes], list[int]] = {}
    step = 8 * _ROWS
    for i in reps:
        sig = _minhash_of(sets[i])
        for band in range(_BANDS):
            buckets.setdefault((band, sig[band * step : (band + 1) * step]), []).append(i)
    candidates = {
        (m[x], m[y]) for m in buckets.values() for x in range(len(m)) for y in range(x + 1, len(m))
    }
    for i, j in sorted(candidates):
        a, b = sets[i], sets[j]
        if min(len(a), len(b)) >= threshold * max(len(a), len(b)):
            sim = len(a & b) / len(a | b)
            if sim >= threshold:
                out.append((i, j, sim))
    return sorted(out)


def test_near_duplicates_are_the_pairs_they_were(traces: list[Trace]) -> None:
    texts = [p.content for t in traces[::5] for p in t.input.packets][:400]
    rng = random.Random(2)
    # near copies: a few words changed
    texts += [" ".join(w if rng.random() > 0.05 else "zz" for w in x.split()) for x in texts[:60]]
    sets = [shingles(x) for x in texts]
    for threshold in (0.5, 0.8, 0.95):
        got = near_duplicate_pairs(sets, threshold)
        assert got == reference_pairs(sets, threshold)
    assert any(s < 1.0 for _, _, s in near_duplicate_pairs(sets, 0.8))


def test_same_shaped_inputs_are_told_apart_without_a_content_key(
    traces: list[Trace], monkeypatch: pytest.MonkeyPatch
) -> None:
    base = next(t for t in traces if len(t.input.packets) > 5).input
    other = base.model_copy(
        update={
            "packets": [p.model_copy(update={"content": p.content + "!"}) for p in base.packets]
        }
    )
    made: list[int] = []
    real = gather.content_key

    def counted(inp: CapturedInput) -> tuple[object, ...] | None:
        made.append(1)
        return real(inp)

    monkeypatch.setattr(gather, "content_key", counted)
    counter = get_counter("cl100k_base")
    gather.PREPARED.clear()
    first = gather.PREPARED.get(base, counter)
    second = gather.PREPARED.get(other, counter)  # same query, time and sizes; other text
    assert second is not first and second.input is other and made == []
    copy = base.model_copy(deep=True)  # an equal copy is still found by its content
    assert gather.PREPARED.get(copy, counter) is first and made
    gather.PREPARED.clear()


def test_replay_all_lists_the_store_once_and_reads_batches_of_sessions_with_msgspec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--all`` lists the store in one query, reads the compressed JSON of whole sessions
    a batch at a time (never one query per session), largest session first, and each
    trace is unpacked and read by the fast path where it is replayed."""
    from ctxcore.cli import replay as cli_replay
    from ctxcore.store import TraceStore, fastdecode

    traces = demo("swe-pytest-7571-hello-agents.jsonl")[:6] + demo("toolchat-ctxscope.jsonl")[:5]
    db = tmp_path / "s.duckdb"
    with TraceStore(db, diagnose=False) as store:
        store.add_traces(traces, source="test")
        stored = dict(store.traces_json([t.trace_id for t in traces]))
    calls: list[str] = []
    for name in ("list_traces", "session_listing", "traces_packed", "traces_json"):
        real = getattr(TraceStore, name)

        def counted(self: TraceStore, *a: object, _real: Any = real, _n: str = name) -> object:
            calls.append(_n)
            return _real(self, *a)

        monkeypatch.setattr(TraceStore, name, counted)
    decoded: list[bytes] = []
    real_decode = fastdecode.decode

    def decode(raw: bytes) -> object:
        decoded.append(raw)
        return real_decode(raw)

    monkeypatch.setattr(fastdecode, "decode", decode)
    assert main(["replay", "--all", "--db", str(db), "--no-findings", "--format", "json"]) == 0
    assert calls == ["session_listing", "traces_packed"]  # 11 traces: one batch
    assert sorted(decoded) == sorted(stored.values())  # each stored trace, by the fast path
    # a batch holds whole sessions, the largest first
    monkeypatch.setattr(cli_replay, "_READ_BATCH", 6)
    calls.clear()
    with TraceStore(db, read_only=True) as store:
        sessions = list(cli_replay._sessions(store, None))
    assert [len(s) for s in sessions] == [6, 5]
    assert calls == ["session_listing", "traces_packed", "traces_packed"]
    assert [s[0].load().session_id for s in sessions] == [
        "swe-pytest-7571-hello-agents",
        "toolchat-ctxscope",
    ]


def test_a_store_wide_replay_starts_the_workers_server_before_anything_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``replay --all`` / ``--tag`` on more than one worker starts the fork server before
    the replay's imports and the reading of the store (which its imports overlap); one
    session, files or one worker never start it."""
    import subprocess

    from ctxcore.replay import pool as replay_pool
    from ctxcore.store import TraceStore

    traces = demo("toolchat-ctxscope.jsonl")
    db = tmp_path / "s.duckdb"
    with TraceStore(db, diagnose=False) as store:
        store.add_traces(traces, source="test")
    started: list[bool] = []
    monkeypatch.setattr(replay_pool, "start_workers", started.append)
    base = ["replay", "--db", str(db), "--no-findings", "--format", "json", "--workers"]
    assert main([*base, "1", "--all"]) == 0
    assert main([*base, "2", "--session", traces[0].session_id]) == 0
    assert started == []
    assert main([*base, "2", "--all"]) == 0
    assert main(["replay", "--db", str(db), "--format", "json", "--tag", "x", "--workers", "2"])
    assert started == [False, True]
    # and a ctxscope command imports nothing heavy before it knows what to do (its parser,
    # every sub-command's arguments, built)
    code = (
        "import sys, ctxcore.cli; ctxcore.cli.make_parser(); "
        "print(sorted(m for m in ('ctxcore.models', 'ctxcore.replay', 'duckdb', 'numpy') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_variant_the_report_does_not_keep_differs_only_in_its_sentences(
    traces: list[Trace],
) -> None:
    from ctxcore.replay import replay
    from ctxcore.replay.variants import _same_build, _variant

    session = demo("toolchat-ctxscope.jsonl")
    for settings in ({}, {"max_tokens": 2000}, {"window": 6000, "min_relevance": 0.2}):
        for rec in session[::6]:
            full = _variant(rec, settings, reasons=True)
            plain = _variant(rec, settings, reasons=False)
            assert full.result is not None and plain.result is not None
            assert all(d.reason_text == "" and d.notes == [] for d in plain.result.decisions)
            assert any(d.reason_text for d in full.result.decisions)
            # everything else is the full build's: ids, tags, metadata, config, input, result
            assert plain.model_copy(update={"result": None}) == full.model_copy(
                update={"result": None}
            )
            assert _same_build(full, plain) and _same_build(plain, full)
            blank = [
                d.model_copy(update={"reason_text": "", "notes": []}) for d in full.result.decisions
            ]
            assert plain.result.decisions == blank
            assert plain.result.prompt == full.result.prompt
            assert plain.result.totals == full.result.totals
    # the report is the same whether the variants are kept (with sentences) or not
    for settings in ({}, {"max_tokens": 2000}):
        kept = replay(session, settings, workers=1, keep_variants=True)
        plain_report = replay(session, settings, workers=1)
        assert kept.variants and all(
            any(d.reason_text for d in v.result.decisions) for v in kept.variants if v.result
        )
        a = kept.model_dump(exclude={"seconds"})
        b = plain_report.model_dump(exclude={"seconds"})
        assert a == b


def stored_lines() -> list[bytes]:
    return [ln for f in sorted(DEMO.glob("*.jsonl")) for ln in f.read_bytes().splitlines() if ln]


def test_stored_json_read_with_msgspec_is_the_validated_trace() -> None:
    from ctxcore.models import Decision, Status
    from ctxcore.replay.stored import TraceJson, _read_struct
    from ctxcore.store.fastdecode import decode

    lines = stored_lines()
    assert len(lines) > 100
    enums = 0
    for raw in lines:
        struct = decode(raw)
        assert struct is not None  # the fast path is taken, not the fallback
        fast = _read_struct(Trace, struct)
        assert TraceJson("t", raw, decode).load() == fast
        slow = Trace.model_validate_json(raw)
        assert fast == slow
        assert fast.to_json() == slow.to_json()
        assert fast.model_dump() == slow.model_dump()
        assert fast.result is not None
        for d in fast.result.decisions[:3]:
            assert type(d) is Decision and type(d.status) is Status and d.status.value
            enums += 1
        # the models work as validated ones do: copies, updates
        moved = fast.model_copy(update={"turn": fast.turn + 1})
        assert moved.turn == fast.turn + 1 and "turn" in moved.model_fields_set
    assert enums > 100


def test_what_msgspec_refuses_pydantic_reads_or_words(tmp_path: Path) -> None:
    import json

    from ctxcore.errors import InputError
    from ctxcore.replay import TraceJson, replay_sessions
    from ctxcore.store.fastdecode import decode

    raw = stored_lines()[0]
    obj = json.loads(raw)
    obj["turn"] = str(obj["turn"])  # lax: pydantic accepts "3", msgspec refuses it
    lax = json.dumps(obj).encode()
    assert decode(lax) is None
    assert TraceJson("t", lax, decode).load() == Trace.model_validate_json(lax)

    def broken(_: bytes) -> object:
        raise RuntimeError("a reader that fails")

    assert TraceJson("t", raw, broken).load() == Trace.model_validate_json(raw)
    obj["input"]["packets"][0]["tokens"] = -5  # refused by both: worded by pydantic
    bad = json.dumps(obj).encode()
    with pytest.raises(InputError, match="trace_id 'bad': cannot be read"):
        TraceJson("bad", bad, decode).load()
    # one bad stored trace is its turn's error; the others replay, in worker processes too
    session = [ln for ln in stored_lines() if b"toolchat-ctxscope" in ln][:6]
    items = [TraceJson(f"t{k}", ln, decode) for k, ln in enumerate(session)]
    items.append(TraceJson("bad", bad, decode))
    for workers in (1, 2):
        report = replay_sessions([items] * 3, {"max_tokens": 2000}, workers=workers)
        assert [e.trace_id for e in report.errors] == ["bad"] * 3
        assert len(report.turns) == 3 * len(session)


def test_replay_workers_collect_garbage_rarely_and_never_over_the_servers_modules(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gc
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from ctxcore.replay import pool as replay_pool
    from ctxcore.replay import replay_sessions
    from ctxcore.replay.jobs import _WORKER_GC, _worker_start

    assert _WORKER_GC[0] > gc.get_threshold()[0]
    with ProcessPoolExecutor(
        1, mp_context=get_context("forkserver"), initializer=_worker_start
    ) as pool:
        assert pool.submit(gc.get_threshold).result() == _WORKER_GC
        assert pool.submit(gc.get_freeze_count).result() > 0
    # replay's own pool starts its workers so
    seen: list[object] = []

    class Recording(ProcessPoolExecutor):
        def __init__(self, *args: Any, **kw: Any) -> None:
            seen.append(kw.get("initargs"))
            super().__init__(*args, **kw)

    monkeypatch.setattr(replay_pool, "ProcessPoolExecutor", Recording)
    session = demo("swe-pytest-7571-hello-agents.jsonl")
    copies = -(-48 // len(session))  # enough traces for a pool
    report = replay_sessions([session] * copies, {"max_tokens": 3000}, findings=False, workers=2)
    # (each worker first ties its life to this process: ctxcore.processes.die_with)
    assert seen == [(os.getpid(), _worker_start)] and len(report.turns) == copies * len(session)


def test_the_fork_server_loads_the_default_tables_for_every_worker(
    traces: list[Trace], monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    replay_mod = importlib.import_module("ctxcore.replay")
    # importing the preload module loads cl100k_base's backend, nothing else is needed
    code = (
        "import ctxcore.tokens as t; assert not t._backends; "
        "import ctxcore.replay.preload; print(sorted(t._backends))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "['cl100k_base']"
    # and a replay big enough for the pool asks its fork server to import it
    asked: list[list[str]] = []
    from ctxcore import processes

    real = processes.get_context

    def get_context(method: str) -> Any:
        ctx = real(method)
        monkeypatch.setattr(ctx, "set_forkserver_preload", asked.append, raising=False)
        return ctx

    monkeypatch.setattr(processes, "get_context", get_context)
    sessions = [t for t in traces if t.config.preset == "ctxscope"][:60]
    assert len(sessions) >= replay_mod.POOL_MIN_TRACES
    report = replay_mod.replay_sessions([sessions], {"max_tokens": 3000}, workers=2)
    assert report.turns and asked and "ctxcore.replay.preload" in asked[0]


def test_a_struct_whose_fields_differ_from_the_models_is_refused() -> None:
    """The reader made once per struct type checks the fields (names and order: the model's
    ``__dict__`` keeps that order) before it is used; a struct that differs is refused, and
    ``TraceJson.load`` then lets pydantic read the JSON."""
    import msgspec

    from ctxcore.models import Totals
    from ctxcore.replay.stored import _read_struct

    names = list(Totals.model_fields)
    swapped = msgspec.defstruct("Totals", [(n, object) for n in [names[1], names[0], *names[2:]]])
    fewer = msgspec.defstruct("Totals", [(n, object) for n in names[:-1]])
    for kind in (swapped, fewer):
        with pytest.raises(TypeError, match="is not a Totals"):
            _read_struct(Totals, kind(*range(len(kind.__struct_fields__))))
    same = msgspec.defstruct("Totals", [(n, object) for n in names])
    values = Totals.model_validate({**dict.fromkeys(names, 1), "tokenizer": "x"}).model_dump()
    made = _read_struct(Totals, same(**values))
    assert made == Totals.model_validate(values) and list(made.__dict__) == names


def test_a_replay_worker_lets_go_of_a_sessions_prepared_inputs_and_memos() -> None:
    """After each session a worker empties the pipeline's prepared inputs and the detectors'
    memos (nothing of another session hits them; kept, they held ~50 MB per worker); the
    report is the one ``_run_job`` gives."""
    from ctxcore.diagnostics import text
    from ctxcore.pipeline.gather import PREPARED

    replay_mod = importlib.import_module("ctxcore.replay.jobs")
    session = demo("swe-pytest-7571.jsonl")[:6]
    job = replay_mod._Job(session, None, {"min_relevance": 0.3}, True, False)

    def held() -> tuple[int, int]:
        return len(PREPARED._data), sum(len(m._data) for m in text._MEMOS)

    kept = replay_mod._run_job(job)
    prepared, memos = held()
    assert prepared > 0 and memos > 0  # what a worker would carry into its next session
    assert len(text._MEMOS) >= 10  # every memo of the detectors is registered
    assert replay_mod._run_in_worker(job) == kept
    assert held() == (0, 0)
