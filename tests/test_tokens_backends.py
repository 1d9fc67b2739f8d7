"""The fast counting backend against tiktoken: zero mismatches, and never used unverified.

This is the verification ``TOKTOK_VERIFIED`` in ctxcore/tokens.py stands on: every corpus
file cut at awkward places, random Unicode and byte strings, special-token text, both
encodings, each count compared with tiktoken's ``encode_ordinary`` text by text.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import toktok

from ctxcore import tokens
from ctxcore.settings import ENCODINGS
from ctxcore.tokens import TiktokenBackend, TokenCounter, ToktokBackend

SPECIALS = (
    "<|endoftext|>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|endofprompt|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|im_sep|>",
    "<|start|>",
    "<|message|>",
)


def _fast(name: str) -> ToktokBackend:
    backend = tokens.get_backend(name)
    assert isinstance(backend, ToktokBackend), tokens.backend_label(name)
    return backend


def _reference(name: str, texts: list[str]) -> list[int]:
    enc = tokens.get_encoding(name)
    return [len(enc.encode_ordinary(t)) for t in texts]


def _mismatches(name: str, texts: list[str]) -> list[tuple[str, int, int]]:
    got = _fast(name).count(texts, tokens.COUNT_THREADS)
    want = _reference(name, texts)
    return [(t[:80], g, w) for t, g, w in zip(texts, got, want, strict=True) if g != w]


def _awkward_cuts(body: str, rng: random.Random) -> list[str]:
    """``body`` cut where BPE pre-tokenisers differ most: just before and after whitespace
    runs, newlines, digits, apostrophes and non-ASCII characters, and at random places."""
    edges = {0, len(body)}
    for i, ch in enumerate(body):
        if ch in " \n\t\r'0123456789" or ord(ch) > 127:
            if rng.random() < 0.08:
                edges.update((i, i + 1))
    edges.update(rng.randrange(len(body) + 1) for _ in range(len(body) // 300 + 1))
    cuts = sorted(edges)
    pieces = [body[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]
    # longer pieces too, across several edges, and whole-file prefixes ending at an edge
    pieces += [body[a:b] for a, b in zip(cuts, cuts[7:], strict=False)][::3]
    pieces += [body[: cuts[k]] for k in range(0, len(cuts), max(1, len(cuts) // 4))]
    return pieces


def _corpus_texts(corpus: Path) -> list[str]:
    rng = random.Random(17)
    texts: list[str] = []
    for path in sorted(p for p in corpus.rglob("*") if p.is_file()):
        raw = path.read_bytes()
        body = raw.decode("utf-8", errors="replace")
        texts.append(body)
        texts += _awkward_cuts(body, rng)
    return texts


def _random_unicode(rng: random.Random, n: int) -> list[str]:
    """Strings from code points all over Unicode (lone surrogates included), weighted to
    the ranges agent traces hold, joined with spaces, digits and punctuation."""
    ranges = [
        (0x20, 0x7E),
        (0x00, 0x20),
        (0x80, 0x2FF),
        (0x300, 0x36F),
        (0x370, 0x52F),
        (0x590, 0x6FF),
        (0x900, 0x97F),
        (0xE00, 0xE7F),
        (0x2000, 0x206F),
        (0x3000, 0x30FF),
        (0x4E00, 0x9FFF),
        (0xAC00, 0xD7A3),
        (0xD800, 0xDFFF),
        (0xE000, 0xF8FF),
        (0xFE00, 0xFFFF),
        (0x1F300, 0x1FAFF),
        (0x10000, 0x10FFFF),
    ]
    out = []
    for _ in range(n):
        k = rng.randint(0, 60)
        chars = []
        for _ in range(k):
            if rng.random() < 0.3:
                chars.append(rng.choice(" \n\t\r'-_.,:;0123456789\"!?()[]{}<>|/\\"))
            else:
                lo, hi = rng.choice(ranges)
                chars.append(chr(rng.randint(lo, hi)))
        out.append("".join(chars))
    return out


def _random_bytes(rng: random.Random, n: int) -> list[str]:
    """Random bytes read the three ways ctxscope's loaders read them."""
    out = []
    for i in range(n):
        raw = bytes(rng.randrange(256) for _ in range(rng.randint(0, 80)))
        how = ("replace", "surrogateescape", "latin-1")[i % 3]
        out.append(raw.decode("latin-1") if how == "latin-1" else raw.decode("utf-8", how))
    return out


def _special_texts(rng: random.Random) -> list[str]:
    out = list(SPECIALS) + ["".join(SPECIALS), " ".join(SPECIALS)]
    for _ in range(300):
        parts = [rng.choice(SPECIALS + ("a", " ", "\n", "x y", "<|", "|>", "<||>", "123"))]
        parts += [rng.choice(SPECIALS + (" ", "word", "\n\n", "<|endoftext", "|"))]
        out.append("".join(parts * rng.randint(1, 3)))
    return out


def test_fast_backend_counts_every_exact_encoding() -> None:
    assert tokens.TOKTOK_VERIFIED.get(toktok.__version__) == ENCODINGS
    for name in ENCODINGS:
        assert tokens.backend_label(name) == f"toktok-rs {toktok.__version__}"


@pytest.mark.parametrize("name", ENCODINGS)
@pytest.mark.slow
def test_zero_mismatches_on_the_corpus_cut_at_awkward_places(name: str, corpus: Path) -> None:
    texts = _corpus_texts(corpus)
    assert len(texts) > 5_000 and sum(map(len, texts)) > 5_000_000
    assert _mismatches(name, texts) == []


@pytest.mark.parametrize("name", ENCODINGS)
def test_zero_mismatches_on_random_unicode_bytes_and_special_text(name: str) -> None:
    rng = random.Random(name)
    texts = _random_unicode(rng, 4_000) + _random_bytes(rng, 2_000) + _special_texts(rng)
    texts += list(tokens.SELF_CHECK_SAMPLE)
    assert _mismatches(name, texts) == []
    # and one text at a time, on the calling thread
    fast = _fast(name)
    assert [fast.count([t], 1)[0] for t in texts[:500]] == _reference(name, texts[:500])


@pytest.mark.parametrize("name", ENCODINGS)
def test_counter_counts_through_the_fast_backend(name: str, corpus: Path) -> None:
    """``TokenCounter`` (what gather, importers, the Recorder and replay count with) uses
    the verified backend on its inline and background paths alike."""
    body = (corpus / "c01_zh_opencode_session_ses_4398.md").read_text(encoding="utf-8")
    texts = [body[i : i + 500 + i % 11] for i in range(0, len(body), 500)] * 5 + ["a\ud800", ""]
    assert sum(map(len, texts)) > tokens._PARALLEL_CHARS
    want = _reference(name, texts)
    assert TokenCounter(name).count_many_started(texts)() == want
    assert TokenCounter(name).count_many(texts[:5]) == want[:5]
    assert TokenCounter(name).count(texts[3]) == want[3]


class _WrongByOne:
    """A toktok tokenizer whose counts are off by one on texts with digits."""

    def __init__(self, tok: Any) -> None:
        self._tok = tok

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._tok, attr)

    def count_batch(self, texts: list[str], threads: int, special: bool) -> list[int]:
        counts: list[int] = self._tok.count_batch(texts, threads, special)
        return [c + any(ch.isdigit() for ch in t) for c, t in zip(counts, texts, strict=True)]


def _reload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "_backends", {})
    monkeypatch.setattr(tokens, "_fallback_reasons", {})


def test_a_backend_failing_its_self_check_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    real = toktok._encoding
    monkeypatch.setattr(toktok, "_encoding", lambda name: _WrongByOne(real(name)))
    _reload(monkeypatch)
    assert isinstance(tokens.get_backend("cl100k_base"), TiktokenBackend)
    assert "failed its self-check" in tokens.backend_label("cl100k_base")
    assert TokenCounter("cl100k_base").count("1 12 123 1234") == len(
        tokens.get_encoding("cl100k_base").encode_ordinary("1 12 123 1234")
    )


def test_a_different_vocabulary_fails_the_self_check() -> None:
    """o200k's tokenizer offered for cl100k: caught before a single count is made."""
    problem = tokens.self_check(toktok._encoding("o200k_base"), tokens.get_encoding("cl100k_base"))
    assert problem == "its vocabulary differs from the rank file ctxscope ships"


def test_an_unverified_version_or_encoding_counts_with_tiktoken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(toktok, "__version__", "9.9.9")
    _reload(monkeypatch)
    assert isinstance(tokens.get_backend("o200k_base"), TiktokenBackend)
    assert "toktok-rs 9.9.9 was not verified on o200k_base" in tokens.backend_label("o200k_base")
    monkeypatch.undo()
    monkeypatch.setattr(tokens, "TOKTOK_VERIFIED", {toktok.__version__: ("o200k_base",)})
    _reload(monkeypatch)
    assert isinstance(tokens.get_backend("cl100k_base"), TiktokenBackend)
    assert isinstance(tokens.get_backend("o200k_base"), ToktokBackend)


def test_a_failing_background_count_raises_in_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _fast("cl100k_base")

    def boom(texts: list[str], threads: int) -> list[int]:
        raise MemoryError("out of memory in the count thread")

    monkeypatch.setattr(fast, "count", boom)
    pending = fast.start(["word " * 20_000, "more " * 20_000], 2)
    with pytest.raises(MemoryError, match="count thread"):
        pending.result()


@pytest.mark.slow
@pytest.mark.parametrize("name", ENCODINGS)
def test_zero_mismatches_on_every_code_point_in_context(name: str) -> None:
    """Every code point, where a pre-tokeniser's character classes show: after punctuation
    and before a letter, between upper and lower case, between digits, between whitespace.
    This is how ``TOKTOK_DIFFERS`` was found; through the backend (which sends those texts
    to tiktoken) nothing differs, and without it exactly those code points do."""
    fast = _fast(name)
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    texts = [f"!{c}i i{c}! A{c}a a{c}A {c}'s 1{c}1 .{c}{c}. \t{c}\n" for c in map(chr, cps)]
    want = tokens.count_batch(tokens.get_encoding(name), texts)
    assert fast.count(texts, tokens.COUNT_THREADS) == want
    raw = fast._toktok(texts, tokens.COUNT_THREADS)
    differs = {c for c, r, w in zip(cps, raw, want, strict=True) if r != w}
    listed = {c for a, b in tokens.TOKTOK_DIFFERS for c in range(a, b + 1)}
    assert differs <= listed
    # the list is what is needed, not a guess: o200k_base's classes show every one of them
    assert len(differs) > 4_600


def test_the_byte_prefilter_flags_every_differing_code_point() -> None:
    for a, b in tokens.TOKTOK_DIFFERS:
        for c in range(a, b + 1):
            assert tokens._may_differ(f"x {chr(c)} y"), hex(c)
    assert not tokens._may_differ("plain ASCII")
    assert not tokens._may_differ("结论：测试失败。日本語 한국어 é 🧠👩‍👩‍👧‍👦 \ud800")


def test_the_byte_prefilter_is_the_same_among_many_lead_bytes() -> None:
    # a needle's first byte is looked for first; past _FEW of them the needles are searched
    # for whole: both ways give the answer of the plain search
    def plain(text: str) -> bool:
        raw = text.encode("utf-8", "surrogatepass")
        if raw.count(b"\xf0") != raw.count(b"\xf0\x9f"):
            return True
        return any(p in raw for p in tokens._DIFFERS_BMP_UTF8)

    odd = [chr(a) for a, _ in tokens.TOKTOK_DIFFERS] + [chr(b) for _, b in tokens.TOKTOK_DIFFERS]
    # many E0, E1, EA and F0 lead bytes that start no differing code point
    fillers = ["\u0900", "\u1a00", "\uac00", "\U0001f9e0", "\u4e00", "é"]
    rng = random.Random(3)
    cases = 0
    for n in (3, tokens._FEW - 1, tokens._FEW + 1, 3 * tokens._FEW):
        for filler in fillers:
            base = filler * n
            assert tokens._may_differ(base) is plain(base) is False
            for c in rng.sample(odd, 8):
                at = rng.randint(0, n)
                text = base[:at] + c + base[at:]
                assert tokens._may_differ(text) is plain(text) is True, (hex(ord(c)), filler, n)
                cases += 1
    assert cases == 4 * len(fillers) * 8


@pytest.mark.parametrize("name", ENCODINGS)
def test_texts_with_a_differing_code_point_are_counted_by_tiktoken(name: str) -> None:
    odd = "\U000b34d8\U000323dci"  # toktok-rs 0.3.0 alone counts 8 on o200k, tiktoken 9
    # the same two code points spelled as surrogate pairs, after a lone surrogate: tiktoken
    # reads the pairs as the characters, so the check must look at the text it reads
    paired = "\ud800\uda8d\udcd8\ud888\udfdci"
    texts = ["plain", odd, paired, "!\u1acfi more", "🧠 \U0001d400 math", "x" * 70_000]
    assert _fast(name).count(texts, 2) == _reference(name, texts)
    assert TokenCounter(name).count_many_started(texts)() == _reference(name, texts)


def _head_mismatches(name: str, texts: list[str], sizes: tuple[int, ...]) -> list[Any]:
    """Where the fast backend's cut differs from tiktoken's first ``n`` ids decoded (less
    a character split at the cut), or its whole-text count from tiktoken's."""
    fast, enc = _fast(name), tokens.get_encoding(name)
    bad: list[Any] = []
    for text in texts:
        ids = enc.encode_ordinary(text)
        for n in sizes:
            got = fast.head(text, n)
            if got is None:
                continue
            want = enc.decode(ids[:n])
            if got[1] != len(ids) or (
                len(ids) > n and got[0].rstrip("\ufffd") != want.rstrip("\ufffd")
            ):
                bad.append((text[:60], n, got[1], len(ids)))
    return bad


@pytest.mark.parametrize("name", ENCODINGS)
@pytest.mark.slow
def test_zero_head_mismatches_on_the_corpus_cut_at_awkward_places(name: str, corpus: Path) -> None:
    """The cut ``TokenCounter.truncate`` takes from the fast backend is tiktoken's."""
    texts = [t for t in _corpus_texts(corpus) if len(t) < 200_000][::3]
    assert len(texts) > 1_500
    assert _head_mismatches(name, texts, (1, 2, 5, 31, 400, 2_500)) == []


@pytest.mark.parametrize("name", ENCODINGS)
def test_zero_head_mismatches_on_random_unicode_bytes_and_special_text(name: str) -> None:
    rng = random.Random(f"head-{name}")
    texts = _random_unicode(rng, 2_000) + _random_bytes(rng, 1_000) + _special_texts(rng)
    texts += list(tokens.SELF_CHECK_SAMPLE) + ["🧠" * 40, "é" * 300, "\ufffd" * 5 + "x" * 9]
    assert _head_mismatches(name, texts, (1, 2, 3, 7, 20)) == []


@pytest.mark.parametrize("name", ENCODINGS)
def test_the_fast_backend_leaves_to_tiktoken_the_texts_it_may_read_differently(name: str) -> None:
    fast = _fast(name)
    assert fast.head("lone \ud800 surrogate and more text", 2) is None
    assert fast.head("\U000b34d8\U000323dci and more", 1) is None
    assert fast.head("plain text here", 1) == ("plain", 3)
    # the counter still cuts those, through tiktoken's ids
    counter = TokenCounter(name)
    enc = tokens.get_encoding(name)
    for text in ("lone \ud800 surrogate and more text", "\U000b34d8\U000323dci and more"):
        want = enc.decode(enc.encode_ordinary(text)[:2]).rstrip("\ufffd")
        assert counter.truncate(text, 2) == want
