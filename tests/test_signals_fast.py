"""The signals' fast paths give exactly what their plain definitions give (issue 17).

``signals.compute`` looks for every entity and stem once in all the texts joined, reads the
file names of error output from their ends, run by run, and ``summarize.error_evidence``
tests a line with its regex taken apart. Each is checked here against the plain definition
it replaced: the per-packet loop (``_reference`` below, the compute of issue 13), the
regexes line by line, on the corpus and on random text built from the characters where the
fast paths could go wrong (case changes that change lengths, the Kelvin sign, camelCase,
run and line-number boundaries).
"""

from __future__ import annotations

import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ctxcore import summarize
from ctxcore.models import CapturedInput, Message, Packet
from ctxcore.pipeline import gather as gather_mod
from ctxcore.pipeline import signals as sig
from ctxcore.pipeline.signals import Signals, Source

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from corpus_input import corpus_input  # noqa: E402

NOW = datetime(2026, 1, 24, 14, 0, tzinfo=UTC)
#: pieces of text where the fast paths could part from the definitions
TRICKY = [
    "\u212aelvin test_\u212a",  # the Kelvin sign lower-cases to an ASCII k
    "İstanbul Iİ failİng",  # İ lower-cases to two characters
    "getUserName testLogin TimeDelta",
    "FAILED tests/test_api.py::test_login - AssertionError: expected 200, got 500",
    'Traceback (most recent call last):\n  File "src/app/x.py", line 12, in <module>',
    "ValueError: bad\nerror[E0308]: mismatched types\n --> src/main.rs:4:5",
    "src/a.ts(3,5): error TS2322: Type 'x'\nnpm ERR! code ELIFECYCLE",
    "  ✕ renders (5 ms)\nE       assert 1 == 2\n=== 3 failed, 2 passed in 0.1s ===",
    "thread 'main' panicked at 'boom', src/lib.rs:3:1",
    "a.py:12b.py:3 x:.py:12a.py:4 ./lib/x.py(7) c:\\src\\win.cs:9",
    '`quoted thing` and "double quoted" #1234 ABC-77 deadbeef12',
    "marshmallow/fields.py:1234 fields.py tests/test_fields.py test_x.py x.py",
    "Fixing fixed fixes FIX failing testing tests latest pytest",
    "CJK 测试失败 错误 异常 ΑΣ",
]


def _p(pid: str, kind: str, content: str, minutes: float | None, **kw: Any) -> Packet:
    ts = NOW - timedelta(minutes=minutes) if minutes is not None else None
    return Packet(id=pid, kind=kind, content=content, timestamp=ts, **kw)


def _sources(inp: CapturedInput) -> list[Source]:
    """What gather hands the signals: its candidates and their timestamps."""
    cands = gather_mod._builder_items(inp)
    texts = [gather_mod.normalize(p.content) for p in inp.packets]
    segments = [gather_mod.segment(p.id, "", t) for p, t in zip(inp.packets, texts, strict=True)]
    gather_mod._add_packets(inp, texts, segments, cands)
    return [gather_mod._source(it, ts) for it, ts in zip(cands.items, cands.stamps, strict=True)]


# --------------------------------------------------------------------------- the reference


def _reference(input: CapturedInput, sources: list[Source]) -> Signals:
    """``compute`` as issue 13 wrote it: packet by packet, text by text, line by line."""
    n = len(sources)
    strength = np.zeros((n, len(sig.SIGNALS)), dtype=np.float64)
    why: list[dict[str, str]] = [{} for _ in range(n)]
    col = {s: k for k, s in enumerate(sig.SIGNALS)}

    def fire(i: int, name: str, value: float, text: str) -> None:
        if value > strength[i, col[name]]:
            strength[i, col[name]] = value
            why[i][name] = text

    def hits(ents: set[str], low: str) -> list[str]:
        return sorted((e for e in ents if e in low), key=lambda e: (-len(e), e))

    last_user = sig._last(input.history, "user")
    last_asst = sig._last(input.history, "assistant")
    said = input.query + ("\n" + last_user.content if last_user is not None else "")
    mentioned = sig.entities(said)
    done = (last_asst.content if last_asst is not None else "") + "\n" + sig._calls_text(last_asst)
    referenced = sig.entities(done) - mentioned
    packets = [k for k, s in enumerate(sources) if s.is_packet]
    fresh = sig.current_turn(input, sources)
    for k, reason in fresh.items():
        fire(k, "current_turn", 1.0 if reason.startswith("result") else 0.7, reason)
        cmd = sources[k].metadata.get("command")
        if reason.startswith("result") and isinstance(cmd, str):
            referenced |= sig.entities(cmd) - mentioned
    errors: dict[int, list[str]] = {}
    for k in packets:
        lines = summarize.error_evidence(sources[k].text)
        if lines:
            errors[k] = lines
            fire(k, "error", 1.0, lines[0][:80])
    frames: set[str] = set()
    for lines in errors.values():
        for ln in lines:
            frames.update(m.group(1).lower().lstrip("./") for m in sig._FRAME.finditer(ln))
            frames.update(p.lower().lstrip("./") for p in sig._PATH.findall(ln))
    for k in packets:
        s = sources[k]
        low = s.text.lower()
        path = sig._path_of(s.metadata, s.id)
        if k not in errors and path:
            hit = next((f for f in sorted(frames) if path.endswith(f) or f.endswith(path)), None)
            if hit is not None:
                fire(k, "error", 0.5, f"named in error output ({hit})")
        named = low + "\n" + path + "\n" + s.id.lower()
        m = hits(mentioned, named)
        if m:
            fire(k, "mention", sig._strength(len(m)), ", ".join(m[:2]))
        r = hits(referenced, named)
        if r:
            fire(k, "reference", sig._strength(len(r)), ", ".join(r[:2]))
        hot = sorted(mentioned | referenced | frames)  # the first match in path order
        sig._metadata(s, path, lambda p, hot=hot: sig._linked(p, hot), input.now, fire, k)
    stems = sig.query_stems(input.query)
    lex = _lexical_reference(stems, [s.text for s in sources])
    for k, s in enumerate(sources):
        if s.caller_relevance is not None:
            lex[k] = 0.0
    for k in range(n):
        if lex[k] >= sig.LEXICAL_MIN:
            fire(k, "lexical", float(lex[k]), f"{lex[k]:.0%} of the query's words")
    exempt = np.zeros(n, dtype=bool)
    for k in packets:
        if sources[k].caller_relevance is None and any(
            strength[k, col[s]] > 0 for s in ("current_turn", "error", "mention", "reference")
        ):
            exempt[k] = True
    floor: list[int] = []
    errors = {k: v for k, v in errors.items() if sources[k].caller_relevance is None}
    if errors:
        stamped = [k for k in errors if sources[k].timestamp is not None]
        latest = max(stamped, key=lambda k: (sources[k].timestamp, k)) if stamped else max(errors)
        floor.append(latest)
    last_result = next((k for k, r in fresh.items() if r.startswith("result")), None)
    if (
        last_result is not None
        and last_result not in floor
        and sources[last_result].caller_relevance is None
    ):
        floor.append(last_result)
    return Signals(strength, why, exempt, tuple(floor), lex)


def _lexical_reference(stems: tuple[str, ...], texts: list[str]) -> Any:
    out = np.zeros(len(texts), dtype=np.float64)
    if not stems:
        return out
    for k, text in enumerate(texts):
        low = sig.lexical_lower(text)
        out[k] = sum(1 for s in stems if s in low and sig._starts_a_part(text, low, s)) / len(stems)
    return out


def _same(a: Signals, b: Signals) -> None:
    assert a.strength.tobytes() == b.strength.tobytes()
    assert a.strength.shape == b.strength.shape and b.strength.flags["C_CONTIGUOUS"]
    assert a.why == b.why
    assert a.exempt.tobytes() == b.exempt.tobytes()
    assert a.floor == b.floor
    assert a.lexical.tobytes() == b.lexical.tobytes()


# --------------------------------------------------------------------------- inputs


def _tricky_input(seed: int, corpus: Path) -> CapturedInput:
    rng = random.Random(seed)
    lines = [
        ln
        for f in sorted(corpus.iterdir())
        if f.suffix in (".txt", ".log", ".rst", ".md")
        for ln in f.read_text(encoding="utf-8", errors="replace").splitlines()[:800]
        if ln.strip()
    ]

    def text(m: int) -> str:
        parts = [rng.choice(lines)[: rng.choice([40, 200, 2000])] for _ in range(m)]
        for _ in range(rng.randint(0, 3)):
            parts.insert(rng.randint(0, len(parts)), rng.choice(TRICKY))
        return "\n".join(parts)

    history = [
        Message(role="user", content="Fix `fields.py` so test_login passes", timestamp=NOW),
        Message(
            role="assistant",
            content=text(1),
            timestamp=NOW,
            metadata={"tool_calls": [{"name": "bash", "arguments": "pytest tests/test_x.py"}]},
        ),
    ]
    paths = ["src/app/x.py", "tests/test_x.py", "x.py", "marshmallow/fields.py", "lib.rs", ""]
    packets: list[Packet] = []
    for j in range(40):
        meta: dict[str, Any] = {}
        if rng.random() < 0.3:
            meta["path"] = rng.choice(paths)
        if rng.random() < 0.1:
            meta["command"] = rng.choice(["pytest -x tests/test_api.py", "cat src/app/x.py"])
        if rng.random() < 0.1:
            meta["search_hits"] = rng.choice([3, [1, 2], True])
        if rng.random() < 0.1:
            meta["modified_at"] = rng.choice(["2026-01-24T13:30:00Z", "garbage"])
        content = text(rng.randint(1, 8))
        if j and rng.random() < 0.1:
            content = packets[-1].content  # a duplicate
        packets.append(
            _p(
                f"{rng.choice(['tool', 'file', 'doc'])}:{j}",
                rng.choice(["tool_result", "file", "log", "retrieval", "note"]),
                content,
                rng.choice([None, 5.0, 50.0, 500.0]),
                relevance=0.7 if rng.random() < 0.1 else None,
                metadata=meta,
            )
        )
    query = rng.choice(TRICKY) + " " + text(1)
    return CapturedInput(query=query, now=NOW, history=history, packets=packets)


def test_compute_gives_what_the_per_packet_loop_gives(corpus: Path) -> None:
    inputs = [corpus_input(300, seed=1)] + [_tricky_input(s, corpus) for s in range(12)]
    fired = np.zeros(len(sig.SIGNALS))
    for inp in inputs:
        sources = _sources(inp)
        summarize._ERROR_MEMO.clear()
        fast = sig.compute(inp, sources)
        summarize._ERROR_MEMO.clear()
        _same(_reference(inp, sources), fast)
        fired += (fast.strength > 0).sum(axis=0)
    assert (fired > 0).all(), fired  # every signal fired somewhere: every path was compared


# --------------------------------------------------------------------------- the helpers


ALPHABET = [
    *"ab1/.\\-_:(\"), lineé٣XK\u212aİ",
    ".py", ".rs", ".c", ".cc", ".h", "pyi", ".tsx", ":12", "(3", '", line 4', "..", "x.",
    "file", "py", "/a", "::", "0", "test", "Test", "tEst", "fail", "FAIL", "xtest",
]  # fmt: skip


def _random_text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, n)))


def test_frame_names_are_the_regexes_line_by_line(corpus: Path) -> None:
    rng = random.Random(17)

    def reference(errors: list[list[str]]) -> set[str]:
        frames: set[str] = set()
        for lines in errors:
            for ln in lines:
                frames.update(m.group(1).lower().lstrip("./") for m in sig._FRAME.finditer(ln))
                frames.update(p.lower().lstrip("./") for p in sig._PATH.findall(ln))
        return frames

    groups = [[_random_text(rng, 14) for _ in range(rng.randint(0, 4))] for _ in range(6000)]
    for f in sorted(corpus.iterdir()):
        groups.append(f.read_text(encoding="utf-8", errors="replace").split("\n"))
    for errors in (groups[k : k + 3] for k in range(0, len(groups), 3)):
        want, got = reference(errors), sig._frame_names(errors)
        assert want == got and list(want) == list(got)  # and in the same order
    for lines in groups:
        for ln in lines:
            want_f = [(m.start(), m.group(1)) for m in sig._FRAME.finditer(ln)]
            assert sig._frame_files(ln) == want_f, ln


def test_lexical_overlap_and_named_entities_are_the_per_text_tests() -> None:
    rng = random.Random(13)
    for _ in range(3000):
        texts = [_random_text(rng, 8) for _ in range(rng.randint(0, 5))]
        stems = tuple(rng.sample(["test", "fail", "tes", "k", "i", "st", "py"], rng.randint(0, 3)))
        got = sig.lexical_overlap(stems, texts)
        assert got.tobytes() == _lexical_reference(stems, texts).tobytes(), (texts, stems)
        lows = [t.lower() for t in texts]
        packets = [k for k in range(len(texts)) if rng.random() < 0.7]
        paths = [rng.choice(["", "a.py", "x/c.h", "b"]) for _ in packets]
        ids = [rng.choice(["file:a.py", "p1", "c.h"]) for _ in packets]
        ents = set(rng.sample(["a.py", "test", "b\nx", "c.h", "file:a", "h\np1", "py"], 4))
        found = sig._Named(packets, lows, paths, ids, sig._Joined(lows)).holding(ents)
        for j, k in enumerate(packets):
            named = f"{lows[k]}\n{paths[j]}\n{ids[j]}"
            assert sorted(found[j]) == sorted(e for e in ents if e in named)


def test_error_lines_are_the_error_regex(corpus: Path) -> None:
    rng = random.Random(5)
    pieces = [
        "FAILED", "ERROR", " ", "  ", "\t", "::", "x", "✕", "✗", "×", "●", "FAIL", "___",
        "ERROR at setup of ", "Traceback (most recent call last)", 'File "', '"', ", line ",
        "3", "a.b.", "Value", "Error", "Exception", "Failure", ":", "E", "error", "[E0308]",
        " TS2322", "npm ERR!", " failed", " errors", "=", "==", "AssertionError",
        "panicked at", "_", "é", "\u2028", "\x0b", "\r", "\u00a0",
    ]  # fmt: skip
    lines = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 8))) for _ in range(60000)]
    for f in sorted(corpus.iterdir()):
        lines += f.read_text(encoding="utf-8", errors="replace").split("\n")
    evidence = 0
    for ln in lines:
        want = bool(summarize._ERROR_EVIDENCE.search(ln))
        assert summarize._is_evidence(ln) == want, ln
        evidence += want
    assert evidence > 5000  # both answers were compared many times


@pytest.mark.parametrize("n", [0, 1, 2])
def test_compute_takes_no_candidates_or_a_few(n: int) -> None:
    inp = CapturedInput(
        query="fix test_x",
        now=NOW,
        packets=[_p(f"tool:{k}", "tool_result", "FAILED a.py::test_x", 1.0) for k in range(n)],
    )
    sources = _sources(inp)
    _same(_reference(inp, sources), sig.compute(inp, sources))
