"""Exact, offline token counting and the named estimators."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import tiktoken
import tiktoken_ext.openai_public as openai_public
from tiktoken.load import load_tiktoken_bpe

from ctxcore import tokens
from ctxcore.errors import TokenizerError
from ctxcore.tokens import TokenCounter, book_estimate, get_counter, len_div_3, len_div_4

DATA = Path(tokens.__file__).parent / "data" / "encodings"


def _independent_encoding(name: str, monkeypatch: pytest.MonkeyPatch) -> tiktoken.Encoding:
    """Build the encoding through tiktoken_ext's own constructor, fed the bundled file
    directly (not through our cache seeding), with tiktoken's pinned hash check."""

    def local_load(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        return load_tiktoken_bpe(str(DATA / url.rsplit("/", 1)[1]), expected_hash=expected_hash)

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", local_load)
    return tiktoken.Encoding(**getattr(openai_public, name)())


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_encodings_load_offline_into_an_empty_cache(name: str) -> None:
    cache = Path(os.environ["TIKTOKEN_CACHE_DIR"])
    assert not cache.exists()
    tokens._encodings.pop(name, None)
    enc = tokens.get_encoding(name)
    assert enc.name == name
    # tiktoken looked the file up under its own cache key and found ours
    assert any(p.stat().st_size > 1_000_000 for p in cache.iterdir())


def test_known_token_ids() -> None:
    assert tokens.get_encoding("cl100k_base").encode("hello world") == [15339, 1917]
    assert tokens.get_encoding("o200k_base").encode("hello world") == [24912, 2375]


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_counts_equal_tiktoken_on_corpus(
    name: str, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = _independent_encoding(name, monkeypatch)
    texts = [
        (corpus / f).read_text(encoding="utf-8")
        for f in (
            "d05_pip_install_editable_marshmallow.log",
            "d06_jest_failure_zh_xresolver.log",
            "c01_zh_opencode_session_ses_4398.md",
            "d07_npm_run_verify_tsc_jest_pack.log",
        )
    ]
    # special-token text counts as ordinary text, as in encode_ordinary
    texts += ["a <|endoftext|> b", "<|fim_prefix|><|endofprompt|>", "<|im_start|>user"]
    counter = TokenCounter(name)
    assert counter.count_many(texts) == [len(reference.encode_ordinary(t)) for t in texts]
    assert counter.count(texts[2]) == len(reference.encode_ordinary(texts[2]))


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_batch_counts_equal_encode_ordinary_text_by_text(
    name: str, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The joined, threaded batch (one tiktoken call per run of texts, split at a special
    token) gives every text exactly its own ``encode_ordinary`` count: on thousands of
    corpus slices cut at awkward places (trailing spaces and newlines, which tiktoken's
    regex treats differently at the end of a text, CJK, empty strings), on texts holding the
    separator or other special-token text, and on both the threaded and the inline path."""
    reference = _independent_encoding(name, monkeypatch)
    enc = tokens.get_encoding(name)
    texts: list[str] = []
    for path in sorted(corpus.glob("*")):
        if path.suffix not in (".log", ".md", ".txt", ".json", ".jsonl"):
            continue
        body = path.read_text(encoding="utf-8", errors="replace")[:60_000]
        step = 97
        texts += [body[i : i + step + i % 13] for i in range(0, len(body), step)]
    texts += ["", " ", "\n\n", "x  ", "a\n \n", "  lead", "<|endoftext|>", "a<|endoftext|>b"]
    texts += ["<|fim_prefix|> x", "<|endofprompt|>", "哈哈哈  ", "\r\n\r\n  \t"]
    assert sum(map(len, texts)) > 4 * tokens._PARALLEL_CHARS  # the threaded path runs
    expected = [len(reference.encode_ordinary(t)) for t in texts]
    assert tokens.count_batch(enc, texts) == expected
    small = texts[:40] + texts[-12:]
    assert sum(map(len, small)) < tokens._PARALLEL_CHARS  # the inline path runs
    assert tokens.count_batch(enc, small) == expected[:40] + expected[-12:]
    # started in the background, then collected: same counts, cached for the next call;
    # first on an empty cache (texts given twice are fine), then with some texts cached
    counter = TokenCounter(name)
    assert counter.count_many_started(texts + texts[:5])() == expected + expected[:5]
    assert counter.misses == len(set(texts))
    assert counter.count_many_started(texts)() == expected
    assert counter.misses == len(set(texts))
    partly = TokenCounter(name)
    partly.count_many(texts[::3])
    assert partly.count_many_started(texts)() == expected
    assert partly.misses == len(set(texts))


def test_a_failing_count_thread_raises_in_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise MemoryError("out of memory in the count thread")

    enc = tokens.get_encoding("cl100k_base")
    monkeypatch.setattr(enc, "encode_to_numpy", boom)
    texts = ["word " * 20_000, "more " * 20_000]
    with pytest.raises(MemoryError, match="count thread"):
        tokens.count_batch(enc, texts)


def test_cache_counts_nothing_new_on_rerun(corpus: Path) -> None:
    counter = TokenCounter("cl100k_base")
    texts = [line for line in (corpus / "d04_grep_r_qualname_sphinx.txt").read_text().splitlines()]
    first = counter.count_many(texts)
    misses = counter.misses
    assert misses == len(set(texts))
    assert counter.count_many(list(texts)) == first
    assert counter.misses == misses


def test_unknown_tokenizer_names_the_choices() -> None:
    with pytest.raises(TokenizerError, match="choose one of cl100k_base, o200k_base"):
        TokenCounter("gpt2")


def test_unwritable_cache_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(tokens, "_encodings", {})
    with pytest.raises(TokenizerError, match="TIKTOKEN_CACHE_DIR"):
        tokens.get_encoding("cl100k_base")


def test_missing_bundled_file_is_an_error_not_a_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tokens, "_DATA", tmp_path / "nowhere")
    monkeypatch.setattr(tokens, "_encodings", {})
    with pytest.raises(TokenizerError, match="reinstall ctxscope"):
        tokens.get_encoding("o200k_base")


def test_book_estimator_counts_cjk_twice_inside_words() -> None:
    # 2 CJK chars + 1.3 × 2 words = 4.6 -> 4
    assert book_estimate("你好 world") == 4
    # "你好world" is one word with 2 CJK chars: 2 + 1.3 = 3.3 -> 3
    assert book_estimate("你好world") == 3
    # kana and hangul are not counted as characters
    assert book_estimate("こんにちは") == 1
    assert len_div_3("abcdefg") == 2
    assert len_div_4("abcdefg") == 1


def test_truncate_respects_the_limit() -> None:
    counter = get_counter("cl100k_base")
    text = "结论：测试失败。" * 50 + " the end"
    cut = counter.truncate(text, 17)
    assert text.startswith(cut)
    assert counter.count(cut) <= 17
    assert "\ufffd" not in cut
    est = get_counter("len/4")
    assert est.count(est.truncate("x" * 100, 10)) <= 10


def test_the_count_cache_is_bounded_and_counts_stay_exact() -> None:
    import random
    import threading

    from ctxcore.tokens import TokenCounter

    rng = random.Random(7)
    words = ["error", "Traceback", "数据", "def", " ", "\n", "assert", "🙂", "x" * 40]
    texts = ["".join(rng.choice(words) for _ in range(rng.randint(1, 60))) for _ in range(600)]
    reference = TokenCounter("cl100k_base")
    want = {t: n for t, n in zip(texts, reference.count_many(texts), strict=True)}
    small = TokenCounter("cl100k_base", max_chars=2_000)
    got = small.count_many(texts[:50]) + [small.count(t) for t in texts[50:100]]
    assert got == [want[t] for t in texts[:100]]
    assert 0 < small.cached_chars <= 2_000
    assert sum(map(len, small._cache)) == small.cached_chars
    # threads counting while the cache keeps starting over: every count exact, no error
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        r = random.Random(seed)
        try:
            for _ in range(40):
                batch = r.sample(texts, 25)
                if r.random() < 0.5:
                    counts = small.count_many(batch)
                else:
                    counts = small.count_many_started(batch)()
                assert counts == [want[t] for t in batch]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert small.cached_chars <= 2_000


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
def test_truncate_is_the_head_of_the_whole_encoding(
    name: str, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``truncate`` encodes only a prefix of a long text (up to a line break followed by a
    letter); its result is exactly the first ``n`` ids of the whole text decoded: on every
    corpus file at many lengths, on texts whose line breaks are followed by letters of many
    scripts, marks, digits, quotes and spaces, and on texts with no such place."""
    import random

    reference = _independent_encoding(name, monkeypatch)
    counter = TokenCounter(name)

    def expected(text: str, n: int) -> str:
        ids = reference.encode_ordinary(text)
        return text if len(ids) <= n else reference.decode(ids[:n]).rstrip("\ufffd")

    texts = [
        p.read_text(encoding="utf-8", errors="replace")[:40_000]
        for p in sorted(corpus.glob("*"))
        if p.suffix in (".log", ".md", ".txt", ".json", ".jsonl")
    ]
    rng = random.Random(7)
    pieces = ["\n", "\n\n", "\r\n", " \n", ".\n", "'s", "\n'", "\n ", "\n\t", "\n1", "\n١"]
    pieces += ["word", "Été", "日本語", "ß", "\u0301", "é", "Ωμέγα", "한국어", "x/y", "  ", "12345"]
    pieces += ["😀", "\U0001f468\u200d\U0001f469", "<|endoftext|>", "'ll", "\u00a0", "\u2028"]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(200, 3000))) for _ in range(40)]
    texts += ["a" * 5000, "\n" * 3000 + "x", "word " * 2000, "\n".join(["é" * 50] * 100)]
    checked = prefix_only = 0
    for text in texts:
        whole = reference.encode_ordinary(text)
        for n in (1, 7, 48, 133, 400, 2500):
            assert counter.truncate(text, n) == expected(text, n), (text[:60], n)
            head = counter._head_ids(text, n)
            assert head == whole[: len(head)]
            assert len(head) >= n or head == whole
            checked += 1
            prefix_only += len(head) < len(whole)
    assert checked > 400 and prefix_only > 200  # most cuts encoded a prefix only
