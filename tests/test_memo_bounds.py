"""Memos keyed by texts are bounded by the characters they hold, not only by entries.

A long session log's import brings new texts call after call: memos bounded by entries alone
(200,000 documents, 20,000 histories) kept most of a 170 MB log alive. Each memo here must
start over once the texts its keys hold pass its character bound, and keep answering exactly.
"""

from __future__ import annotations

import pytest

from ctxcore import summarize
from ctxcore.scoring import QueryTerms, TermFrequencies
from ctxcore.summarize import ExtractiveSummarizer, error_evidence


def _doc(i: int, size: int) -> str:
    return f"doc {i} mentions parser and lexer " + "filler " * (size // 7)


def test_term_frequencies_are_bounded_by_characters() -> None:
    q = QueryTerms.of("parser lexer")
    tf = TermFrequencies(max_entries=1_000_000, max_chars=50_000)
    docs = [_doc(i, 10_000) for i in range(40)]
    fresh = TermFrequencies()
    for d in docs:  # one at a time (``of``) and in batches (``matrix``)
        assert tf.of(q, d) == fresh.of(q, d) == (1, 1)
        assert tf._chars <= 50_000 + len(d)
    assert sum(len(t) for _, t in tf._memo) <= 50_000
    m = tf.matrix(q, [_doc(i, 10_000) for i in range(100, 120)])
    assert m.tolist() == [[1, 1]] * 20
    assert sum(len(t) for _, t in tf._memo) <= 10_000 * 20 + 1_000
    # the memo still answers: a document just counted is a hit
    key = (q, docs[-1])
    tf.of(q, docs[-1])
    assert key in tf._memo


def test_term_frequency_patterns_are_bounded_by_queries() -> None:
    tf = TermFrequencies(max_queries=8)
    for i in range(30):
        q = QueryTerms.of(f"term{i} other{i}")
        assert tf.of(q, f"a term{i} and other{i} and term{i}") == (2, 1)
        assert len(tf._regex) <= 8


def test_the_summarizer_memo_is_bounded_by_characters() -> None:
    s = ExtractiveSummarizer(max_chars=30_000)
    logs = [f"run {i}\n" + "".join(f"line {k} ok\n" for k in range(1_000)) for i in range(10)]
    for log in logs:
        out = s("tool_result", log, 50)
        assert out == ExtractiveSummarizer()("tool_result", log, 50)
        assert sum(len(c) for _, c, _ in s._memo) <= 30_000
    assert s("tool_result", logs[-1], 50) == out  # still a memo: the last one is kept
    assert ("tool_result", logs[-1], 50) in s._memo


def test_the_error_line_memo_is_bounded_by_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summarize, "MEMO_MAX_CHARS", 40_000)
    monkeypatch.setattr(summarize, "_ERROR_MEMO", {})
    monkeypatch.setattr(summarize, "_ERROR_MEMO_CHARS", 0)
    texts = [
        f"case {i}\nFAILED tests/test_x.py::test_{i} - AssertionError\n" + "ok\n" * 5_000
        for i in range(12)
    ]
    for i, t in enumerate(texts):
        assert error_evidence(t) == [f"FAILED tests/test_x.py::test_{i} - AssertionError"]
        assert sum(map(len, summarize._ERROR_MEMO)) <= 40_000
    assert texts[-1] in summarize._ERROR_MEMO


def test_query_terms_of_a_recent_query_are_the_same_object_and_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ctxcore import scoring

    q = QueryTerms.of("why does test_dump fail in 结论 module?")
    again = QueryTerms.of("why does test_dump fail in 结论 module?")
    assert again is q and again == QueryTerms(latin=q.latin, cjk=q.cjk)
    monkeypatch.setattr(scoring, "_QUERIES_CHARS", 1_000)
    for k in range(100):
        QueryTerms.of(f"query number {k} " + "x" * 50)
    assert scoring._queries_chars <= 1_000
    assert sum(map(len, scoring._QUERIES)) == scoring._queries_chars
    monkeypatch.setattr(scoring, "_QUERIES_KEPT", 8)
    for k in range(30):
        QueryTerms.of(f"another {k}")
    assert len(scoring._QUERIES) <= 8
    # a query asked for again after a start-over gets equal terms
    assert QueryTerms.of("why does test_dump fail in 结论 module?") == q


def test_lowered_texts_are_each_texts_lower_case_and_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ctxcore import scoring

    texts = ["Hello World", "ÉTÉ İstanbul ß", "Hello World", "", "ΣΊΣΥΦΟΣ"]
    assert scoring.lowered(texts) == [t.lower() for t in texts]
    assert scoring.lowered(texts) == [t.lower() for t in texts]  # from the memo
    monkeypatch.setattr(scoring, "_LOWER_CHARS", 100)
    for k in range(50):
        assert scoring.lowered([f"Text Number {k}"]) == [f"text number {k}"]
    assert scoring._lower_chars <= 100
    assert sum(map(len, scoring._LOWER)) == scoring._lower_chars
