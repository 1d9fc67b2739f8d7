"""Redaction on ingest at the speed of one scan (docs/design.md, "Capture, import, export,
redaction"): ``may_hold_secret`` reads a trace's JSON once and says whether any rule can
match; ``redact_trace`` walks only when it can. Its result must be the walk's for every
input: each rule's needs hold in every text the rule matches (the redaction tests' secrets,
mutated), and ``redact_trace`` equals ``walk_trace`` over traces with those texts at every
depth, serialized with and without escapes."""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from test_redact import SECRETS
from test_redaction_table import NOT_SECRETS, TABLE

from ctxcore.formats import redact
from ctxcore.formats.redact import (
    RULES,
    may_hold_secret,
    redact_text,
    redact_trace,
    rule_needs,
    walk_trace,
)
from ctxcore.models import CapturedInput, Config, Message, Packet, Trace
from ctxcore.pipeline import build_trace
from ctxcore.store import fastdecode, workers
from ctxcore.store.codec import unpack_json
from ctxcore.store.rows import RowTables, batch_blob
from ctxcore.store.workers import SCAN_LINES, FileRun, _prepare_chunk, clean_lines

ROOT = Path(__file__).resolve().parent.parent
RNG = random.Random(35)
#: characters a mutation inserts: the rules' separators, quotes, JSON's escaped ones, and
#: the four non-ASCII letters that ``re``'s case folding takes for ASCII ones
INSERTS = "_-.:=/@\"'\\ \n\t[]{}" + "\u0130\u0131\u017f\u212a" + "é😀\x1b"


def corpus_lines(n: int = 300) -> list[str]:
    out: list[str] = []
    for path in sorted((ROOT / "corpus").glob("*"))[:6]:
        text = path.read_text(encoding="utf-8", errors="replace")
        out += [ln for ln in text.splitlines() if len(ln.strip()) > 20][: n // 6]
    return out


def mutants(text: str, n: int) -> list[str]:
    """``text`` changed ``n`` ways: case flips, characters cut, inserted or replaced."""
    out = []
    for _ in range(n):
        chars = list(text)
        for _ in range(RNG.randint(1, 3)):
            i = RNG.randrange(len(chars) + 1)
            op = RNG.randrange(4)
            if op == 0 and i < len(chars):
                chars[i] = chars[i].swapcase()
            elif op == 1 and i < len(chars):
                del chars[i]
            elif op == 2:
                chars.insert(i, RNG.choice(INSERTS))
            elif i < len(chars):
                chars[i] = RNG.choice(INSERTS)
        out.append("".join(chars))
    return out


EXAMPLES = [t.format(s=s) for _, t, s in SECRETS + TABLE] + NOT_SECRETS
TEXTS = EXAMPLES + [m for t in EXAMPLES for m in mutants(t, 20)] + corpus_lines()
#: the four that ``may_hold_secret`` leaves to the walk (it never rules a text with one out)
FOLDED = "\u0130\u0131\u017f\u212a"


def test_each_rule_needs_what_every_match_of_it_holds() -> None:
    """Where a rule's regex matches a text, its needs are in the text (as written, or in the
    lowered text): ``may_hold_secret`` can never rule out a text a rule would change."""
    matched = 0
    for rule in RULES:
        as_written, alts = rule_needs(rule)
        assert any(rule.pattern.search(t) for t in EXAMPLES), f"no example of {rule.name}"
        for text in TEXTS:
            if rule.pattern.search(text) is None:
                continue
            if not as_written and any(c in text for c in FOLDED):
                assert may_hold_secret(json.dumps(text))
                continue
            matched += 1
            hay = text if as_written else text.lower()
            assert any(all(lit in hay for lit in alt) for alt in alts), (rule.name, text)
    assert matched > 800  # the examples and many of their mutants match their rule


def test_a_rule_that_needs_nothing_makes_every_text_walk() -> None:
    """A rule with neither needs nor a guard (one added without them) can match anywhere:
    the scan must then never rule a text out, rather than never run the rule."""
    bare = redact.Rule("bare", re.compile(r"zz\d{4}"))
    needs = redact.rule_needs(bare)
    assert needs == (False, ((),))
    scan = redact._Literals([needs, *(redact.rule_needs(r) for r in RULES)])
    assert scan.any_alternative("nothing to see", "nothing to see")
    assert not redact._LITERALS.any_alternative("nothing to see", "nothing to see")


def test_model_constants_hold_no_secret() -> None:
    """A validated trace's strings are its line's, or the model's own (field names, enum
    values, defaults): none of those can be redacted, so the line alone decides."""
    found: set[str] = set()

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "properties" and isinstance(v, dict):
                    found.update(v)
                if k in ("enum", "const", "default"):
                    for x in v if isinstance(v, list) else [v]:
                        if isinstance(x, str):
                            found.add(x)
                collect(v)
        elif isinstance(node, list):
            for x in node:
                collect(x)

    collect(Trace.model_json_schema(by_alias=True))
    collect(Trace.model_json_schema(by_alias=False))
    assert {"trace_id", "packets", "reason_text", "schema", "summarized", "FITS"} <= found
    assert [s for s in sorted(found) if redact_text(s)[1]] == []


_HOLE = "@@text@@"


def _base(place: int) -> str:
    """A real build's JSON with ``_HOLE`` in one place of several: a packet id (and so the
    decisions' ids), content, a metadata key, deep in metadata, the query, history, the
    trace id, a tag."""
    now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    text = _HOLE
    packets = [
        Packet(
            id=f"tool:{text}" if place == 0 else "tool:a",
            kind="tool_result",
            content=text if place == 1 else "the log says nothing",
            metadata={"deep": [{"x": {text: 1} if place == 2 else {"v": [[text]]}}]}
            if place in (2, 3)
            else {},
        ),
        Packet(id="tool:b", kind="tool_result", content="more text " * 5),
    ]
    inp = CapturedInput(
        query=text if place == 4 else "why?",
        now=now,
        history=[Message(role="user", content=text if place == 5 else "hello")],
        packets=packets,
    )
    return build_trace(
        inp,
        Config(preset="ctxscope", max_tokens=2000),
        trace_id=text if place == 6 else "t-1",
        session_id="s-1",
        tags=[text] if place == 7 else [],
    ).to_json()


BASES = [_base(place) for place in range(8)]


def _trace(text: str, where: int) -> Trace:
    """A trace with ``text`` in place ``where`` (mod 8) of ``_base``."""
    return Trace.model_validate_json(BASES[where % 8].replace(_HOLE, json.dumps(text)[1:-1]))


def _serializations(trace: Trace) -> list[str]:
    """The trace's JSON as ctxscope writes it, with every non-ASCII character escaped, and
    with ``/`` escaped (``\\/``): JSON writers differ in these."""
    data = trace.to_dict()
    return [
        trace.to_json(),
        json.dumps(data),
        json.dumps(data, ensure_ascii=False).replace("/", "\\/"),
    ]


def test_redact_trace_is_the_walk_for_every_input() -> None:
    texts = EXAMPLES + RNG.sample(TEXTS[len(EXAMPLES) :], 250)
    walked = passed = 0
    for i, text in enumerate(texts):
        try:
            trace = _trace(text, i)
        except ValueError:  # a mutant the models refuse in that place (e.g. as an id)
            continue
        want_trace, want = walk_trace(trace)
        for raw in _serializations(trace):
            got_trace, got = redact_trace(trace, raw)
            assert (got, got_trace.to_json()) == (want, want_trace.to_json()), (i, text)
        got_trace, got = redact_trace(trace)  # from the trace's own JSON
        assert (got, got_trace.to_json()) == (want, want_trace.to_json())
        walked += bool(want)
        passed += not may_hold_secret(trace.to_json())
    assert walked > 100 and passed > 50  # both kinds were compared


def test_a_clean_trace_is_never_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of the scan: a trace with nothing to redact costs one read of its JSON.
    (A few clean texts hold a rule's needs, e.g. ``SK`` in ``TASK``: those are walked.)"""
    traces = [_trace(line, i) for i, line in enumerate(corpus_lines(60))]
    clean = [t for t in traces if not walk_trace(t)[1]]
    assert len(clean) > 40

    def no_walk(node: Any, counts: dict[str, int]) -> Any:
        raise AssertionError("walked")

    monkeypatch.setattr(redact, "_walk", no_walk)
    walked = 0
    for t in clean:
        for raw in (None, t.to_json_bytes()):
            try:
                assert redact_trace(t, raw) == (t, {})
            except AssertionError:
                assert may_hold_secret(t.to_json())
                walked += 1
    assert walked <= len(clean) // 5


@pytest.mark.parametrize(
    ("text", "written", "as_written"),
    [
        ("client_\u017fecret: 'abcdefghijklmnopqrstuv' tokens", "", ""),  # ſ: (?i) reads s
        ("api_\u212aey = 'abcdefghijklmnopqrstuv'", "", ""),  # the Kelvin sign: k
        ("x sk-proj-" + "A" * 40, "sk-proj-", "\\u0073k-proj-"),  # a letter escaped
        ("see https://u:pw12345@host/x", "https://u", "https:\\/\\/u"),  # ``\/``
    ],
)
def test_unusual_spellings_still_walk(text: str, written: str, as_written: str) -> None:
    trace = _trace(text, 1)
    raw = json.dumps(trace.to_dict()).replace(written or "\0", as_written)
    assert json.loads(raw) == trace.to_dict() and (as_written in raw)
    assert may_hold_secret(raw)
    want = walk_trace(trace)
    assert want[1] and redact_trace(trace, raw)[1] == want[1]


def test_ingest_passes_clean_lines_through_and_redacts_the_others() -> None:
    """``FileRun`` with redaction on: a clean line takes the fast decoder and is stored as
    it was written; a line with a secret is validated, redacted and re-serialized."""
    secret = TABLE[0][2]
    clean_raw = _trace("nothing to see", 1).to_json().encode()
    dirty = _trace(f"ANTHROPIC_API_KEY={secret}", 1)
    run = FileRun("f.jsonl", fast=True, redact=True)
    run.line(1, clean_raw)
    run.line(2, dirty.to_json().encode())
    assert run.errors == []
    (view, raw1), (red, raw2) = run.items
    assert not isinstance(view, Trace) and fastdecode.decode(clean_raw) is not None
    assert raw1 == clean_raw
    assert isinstance(red, Trace) and red.to_json() == walk_trace(dirty)[0].to_json()
    assert set(red.redactions) == {"anthropic_key"}
    assert secret not in raw2.decode() and raw2 == red.to_json().encode()


def test_a_line_that_is_not_utf8_keeps_its_error() -> None:
    """The scan leaves a line it cannot read to the parser, whose error names the byte."""
    bad = _trace("caf\u00e9", 1).to_json().encode().replace("é".encode(), b"\xe9")
    assert may_hold_secret(bad)
    run = FileRun("f.jsonl", fast=True, redact=True)
    run.line(7, bad)
    assert run.items == [] and len(run.errors) == 1
    assert run.errors[0][1] == 7 and "invalid UTF-8 at byte" in run.errors[0][2]


def _escapes_read(line: str) -> str:
    """Every JSON escape of ``line`` read by one regex, one match at a time, left to right:
    what ``json_strings`` must give."""

    def read(m: re.Match[str]) -> str:
        g = m.group(1)
        plain = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
        return chr(int(g[1:], 16)) if len(g) == 5 else plain.get(g, g)

    return re.sub(r'\\(["\\/bfnrt]|u[0-9a-fA-F]{4})', read, line)


def test_json_strings_reads_every_escape_as_the_regex_does() -> None:
    """The scan's reading of escapes, split at the backslashes, against the regex that reads
    them one by one: escaped backslashes before escapes, a last backslash alone, ``\\u``
    with too few or wrong digits, escapes that are none; random texts and real JSON."""
    rng = random.Random(35)
    alphabet = ["\\", "\\", '"', "n", "t", "u", "0", "4", "a", "b", "f", "F", "r", "/", "x",
                "\0", "é", " ", "D", "8"]  # fmt: skip
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14)))
             for _ in range(20_000)]  # fmt: skip
    for value in ["a\\b", 'x\n\t"/\\\\n', "\\u00e9", "\u2028\\\\u", "😀 é \ud83d", "\\u12",
                  "\\u12g4", {"k\\": ["\\\\\\", "\b\f\r"]}]:  # fmt: skip
        texts += [json.dumps(value), json.dumps(value, ensure_ascii=False)]
    for text in texts:
        assert redact.json_strings(text) == _escapes_read(text), text
    assert redact.json_strings('{"a":"q\\\\\\"t\\u0041\\x"}') == '{"a":"q\\"tA\\x"}'


def _group_lines() -> list[bytes]:
    """Lines as a file holds them: clean traces, and among them secrets and near-secrets
    (mutants), written every way ``_serializations`` writes, a BOM, spaces around a line,
    an empty line, one not UTF-8, one that is no JSON, one ending in a backslash."""
    rng = random.Random(44)
    texts = EXAMPLES + rng.sample(TEXTS[len(EXAMPLES) :], 150)
    lines: list[bytes] = []
    for i, text in enumerate(texts):
        try:
            trace = _trace(text, i)
        except ValueError:
            continue
        lines.append(rng.choice(_serializations(trace)).encode())
    clean = [_trace(line, i).to_json().encode() for i, line in enumerate(corpus_lines(60))]
    odd = [b"\xef\xbb\xbf" + clean[0], b"  " + clean[1] + b" \r", b"",
           clean[2].replace(b"the log", b"\xe9 log"), b"{not json", b'{"a": "x\\']  # fmt: skip
    out = clean * 4 + odd
    for line in lines:  # each among clean ones, at every place of a group
        out.insert(rng.randrange(len(out) + 1), line)
    return out


def test_a_group_of_lines_is_clean_only_where_each_line_is() -> None:
    """``clean_lines`` (the check read a group of lines at a time) gives each line's own
    answer, whatever the line and wherever it falls in its group."""
    lines = _group_lines()
    assert sum(not may_hold_secret(r) for r in lines) > 200  # most groups are read at once
    for size in (1, 2, 7, SCAN_LINES, 3 * SCAN_LINES + 1):
        for at in range(0, len(lines), size * 5):
            raws = lines[at : at + size * 5]
            assert clean_lines(raws) == [not may_hold_secret(r) for r in raws], (size, at)


def test_ingest_reads_a_clean_group_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A group of clean lines costs one read of the check, not one a line."""
    calls: list[int] = []

    def counted(raw: bytes | str) -> bool:
        calls.append(len(raw))
        return may_hold_secret(raw)

    monkeypatch.setattr(workers, "may_hold_secret", counted)
    lines = [_trace(f"clean {i}", 1).to_json().encode() for i in range(2 * SCAN_LINES)]
    run = FileRun("f.jsonl", fast=True, redact=True)
    run.read_lines(0, lines)
    assert len(run.items) == 2 * SCAN_LINES and len(calls) == 2
    assert [raw for _, raw in run.items] == lines


def test_after_a_group_with_a_secret_the_next_is_read_line_by_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A group that may hold a secret is read again line by line, and so is the group
    after it; a group whose lines were all clean brings back the reads of a whole group
    (a log where a rule's word comes every few lines is not read twice)."""
    calls: list[int] = []

    def counted(raw: bytes | str) -> bool:
        calls.append(len(raw))
        return may_hold_secret(raw)

    monkeypatch.setattr(workers, "may_hold_secret", counted)
    clean = [_trace(f"clean {i}", 1).to_json().encode() for i in range(SCAN_LINES)]
    dirty = _trace(f"ANTHROPIC_API_KEY={TABLE[0][2]}", 1).to_json().encode()
    lines = [dirty, *clean[1:]] + [*clean[:-1], dirty] + clean + clean
    want = [not may_hold_secret(r) for r in lines]
    assert clean_lines(lines) == want
    n = SCAN_LINES
    # group 1 together then line by line; group 2 line by line (no secret-free group
    # came between); group 3 line by line (group 2 held one); group 4 together again
    assert len(calls) == 1 + n + n + n + 1
    assert calls[0] == sum(map(len, lines[:n])) + n - 1
    assert calls[-1] == sum(map(len, lines[3 * n :])) + n - 1


def test_a_secret_in_one_line_of_a_group_is_redacted_and_the_rest_kept() -> None:
    """``FileRun.read_lines`` with redaction on (ingest's lines, a chunk at a time): the one
    line with a secret is redacted, its group's other lines are stored as they were
    written, and a bad line in the group is that line's error alone."""
    secret = TABLE[0][2]
    clean = [_trace(f"nothing here {i}", 1).to_json().encode() for i in range(SCAN_LINES)]
    dirty = _trace(f"ANTHROPIC_API_KEY={secret}", 1)
    lines = clean[:5] + [dirty.to_json().encode()] + clean[5:9] + [b'{"trace_id": 1'] + clean[9:]
    run = FileRun("f.jsonl", fast=True, redact=True)
    run.read_lines(10, lines)
    assert [(n, "JSON" in m or "json" in m) for _, n, m in run.errors] == [(21, True)]
    assert run.lines == [n for n in range(11, 11 + len(lines)) if n != 21]
    raws = [raw for _, raw in run.items]
    assert raws[:5] + raws[6:] == clean
    red, raw = run.items[5]
    assert isinstance(red, Trace) and red.to_json() == walk_trace(dirty)[0].to_json()
    assert secret not in raw.decode() and set(red.redactions) == {"anthropic_key"}
    for view, _ in run.items[:5] + run.items[6:]:
        assert not isinstance(view, Trace)  # the fast decoder's: no redaction walk


def test_a_worker_chunk_redacts_its_one_secret() -> None:
    """A worker's chunk (``_prepare_chunk``, lines given as bytes) reads its lines the same
    way: the rows hold the redacted trace and every other one as written."""
    secret = TABLE[0][2]
    clean = [_trace(f"plain {i}", 1).model_copy(update={"trace_id": f"t-{i}"})
             for i in range(SCAN_LINES + 3)]  # fmt: skip
    dirty = _trace(f"ANTHROPIC_API_KEY={secret}", 1).model_copy(update={"trace_id": "t-x"})
    traces = clean[:8] + [dirty] + clean[8:]
    payload = b"".join(t.to_json().encode() + b"\n" for t in traces) + b"\xff\n"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CTXSCOPE_REDACT_ON_INGEST", "1")
        chunk = _prepare_chunk("f.jsonl", payload, False, None)
    assert [n for _, n, _ in chunk.errors] == [len(traces) + 1] and chunk.lines == list(
        range(1, len(traces) + 1)
    )
    assert isinstance(chunk.rows, RowTables) and chunk.rows.ids == [t.trace_id for t in traces]
    sizes = chunk.rows.tables["traces"].column("json_bytes").to_pylist()
    stored = [unpack_json(batch_blob(chunk.rows, k), n) for k, n in enumerate(sizes)]
    assert stored[8] == walk_trace(dirty)[0].to_json().encode() and secret.encode() not in stored[8]
    assert stored[:8] + stored[9:] == [t.to_json().encode() for t in clean]


def _pieces_around(text: str, i: int) -> Trace:
    """A clean-looking trace whose packets hold ``text`` cut at ``i`` and at ``i + 7``:
    pieces of a secret in lines before it, so a check that read each piece only once
    without keeping what each literal of a rule's needs is would lose the secret."""
    cuts = [text[:i], text[i:], text[: i + 7], text[i + 7 :]]
    return _trace("".join("{" + c + "}" for c in cuts), i)


def test_a_secret_of_each_rule_is_found_in_any_line_of_a_group() -> None:
    """Every rule's secrets (the redaction tests'), in any line of a group whose other lines
    repeat the pieces around it and around its cuts: ``clean_lines`` says that line may hold
    a secret, and ``may_hold_secret`` answers what reading the whole text line by line
    (``_escapes_read`` and the needs) answers, on the group as on each line."""
    assert not any(redact._PIECE.decode() in lit.lower() for lit, _ in redact._LITERALS.keys)
    kinds: set[str] = set()
    for n, (name, template, secret) in enumerate(SECRETS + TABLE):
        text = template.format(s=secret)
        if not redact_text(text)[1]:
            continue
        kinds.add(name)
        dirty = [s.encode() for s in _serializations(_trace(text, n))]
        for at in (0, 5, SCAN_LINES - 1):
            others = [
                _pieces_around(text, (at * 13 + k * 5) % max(len(text) - 7, 1)).to_json().encode()
                for k in range(SCAN_LINES - 1)
            ]
            line = dirty[(n + at) % len(dirty)]
            group = others[:at] + [line] + others[at:]
            assert not clean_lines(group)[at], (name, at)
            joined = b"\n".join(group)
            text_read = _escapes_read(joined.decode())
            low = text_read.lower()
            assert may_hold_secret(joined) == redact._LITERALS.any_alternative(text_read, low)
            assert may_hold_secret(joined)
    assert kinds == {rule.name for rule in RULES}
