"""CJK-aware terms, BM25 relevance, recency against ``now`` and priority normalisation."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from ctxcore.scoring import (
    QueryTerms,
    TermFrequencies,
    bm25_relevance,
    combine,
    priority_norm,
    recency,
    terms,
)
from ctxcore.tokens import get_counter


def test_terms_latin_lowercased_punctuation_stripped_cjk_unigrams_and_bigrams() -> None:
    assert terms("Fix fields.py, NOW!") == ["fix", "fields", "py", "now"]
    # one CJK run: its characters, then its adjacent pairs
    assert terms("兼容性") == ["兼", "容", "性", "兼容", "容性"]
    assert terms("修复 TimeDelta，保持兼容。") == [
        "修", "复", "修复", "timedelta", "保", "持", "兼", "容",
        "保持", "持兼", "兼容",
    ]  # fmt: skip


def test_query_terms_split_by_lookup_kind() -> None:
    q = QueryTerms.of("test 测试 test")
    assert q.latin == ("test",)
    assert q.cjk == ("测", "试", "测试")
    assert QueryTerms.of("  ,.;  ").empty
    assert QueryTerms.of("why did the test fail").latin == ("test", "fail")  # stop words out


def test_latin_terms_match_whole_words_only() -> None:
    tf = TermFrequencies()
    q = QueryTerms.of("test")
    assert tf.of(q, "testing tests test Test, attest") == (2,)


def test_cjk_bigrams_count_overlapping_occurrences() -> None:
    tf = TermFrequencies()
    q = QueryTerms.of("哈哈")
    # unigram 哈 ×3, bigram 哈哈 at positions 0 and 1
    assert tf.of(q, "哈哈哈") == (3, 2)


def test_chinese_query_matches_chinese_corpus_text(corpus: Path) -> None:
    zh = (corpus / "c01_zh_opencode_session_ses_4398.md").read_text(encoding="utf-8")
    en = (corpus / "d05_pip_install_editable_marshmallow.log").read_text(encoding="utf-8")
    texts = [zh[:4000], en]
    counter = get_counter("cl100k_base")
    rel = bm25_relevance("架构分析", texts, counter.count_many(texts))
    assert rel[0] > 0.0
    assert rel[1] == 0.0
    assert 0.0 <= rel.min() and rel.max() <= 1.0


def test_bm25_prefers_rare_terms_and_stays_in_unit_range(corpus: Path) -> None:
    log = (corpus / "d05_pip_install_editable_marshmallow.log").read_text(encoding="utf-8")
    docs = [log, "marshmallow is installed", "the serializer rounds the timedelta"]
    rel = bm25_relevance("timedelta marshmallow", docs, [len(d.split()) for d in docs])
    # "timedelta" occurs in one doc, "marshmallow" in two: the rare term weighs more
    assert rel[2] > rel[1] > 0
    assert np.all((rel >= 0) & (rel <= 1))
    assert np.all(bm25_relevance("", docs, [1, 1, 1]) == 0)


def test_recency_against_now_not_wall_clock() -> None:
    now = datetime(2020, 1, 1, tzinfo=UTC)
    stamps = [now, now - timedelta(hours=6), None, now + timedelta(hours=1)]
    rec, ages = recency(stamps, now, tau_hours=6.0)
    assert rec[0] == 1.0
    assert math.isclose(rec[1], math.exp(-1.0))
    assert rec[2] == 0.5 and math.isnan(ages[2])
    assert rec[3] == 1.0  # the future counts as age 0


def test_priority_norm_and_combine() -> None:
    p = priority_norm([0, 1, 2, -3])
    assert list(p) == [0.0, 0.5, 1 - 1 / 3, 0.0]
    s = combine(np.array([1.0]), np.array([0.5]), np.array([0.5]), 0.6, 0.3, 0.1)
    assert math.isclose(float(s[0]), 0.6 + 0.15 + 0.05)


def test_batch_term_frequencies_equal_the_per_document_ones(corpus: Path) -> None:
    """The joined-documents scan (used for 8+ new documents) counts exactly what the
    per-document path counts: whole Latin words, overlapping CJK n-grams, hits at the
    first and last character of a document, and text whose length changes when lowered."""
    import random

    from ctxcore.scoring import TermFrequencies

    rng = random.Random(7)
    text = "\n".join(
        (corpus / name).read_text(encoding="utf-8", errors="replace")
        for name in sorted(p.name for p in corpus.iterdir() if p.suffix in (".txt", ".md"))[:12]
    )
    docs = [text[i : i + rng.randint(0, 3000)] for i in rng.sample(range(len(text)), 300)]
    docs += [
        "py", "py.", "_py", "copy py", "fields.py,", "İstanbul py", "ÀPY py", "哈哈哈", "哈",
        "兼容性 兼容", "保持向后兼容", "", "API api Api", "test_timedelta_field!", "兼",
    ]  # fmt: skip
    for query in (
        "Fix the TimeDelta bug in fields.py; test_timedelta_field 保持向后兼容 API",
        "哈哈 兼容性 py",
        "pytest failure error assert",
    ):
        q = QueryTerms.of(query)
        tf = TermFrequencies()
        batch = tf.matrix(q, docs)  # all new: the batch path
        one = TermFrequencies()
        single = np.asarray([one.of(q, d) for d in docs], dtype=np.int64)
        assert batch.shape == (len(docs), len(q.all))
        assert (batch == single).all(), query
        assert batch[:, : len(q.latin)].sum() > 0  # both kinds of term were really found
        assert not q.cjk or batch[:, len(q.latin) :].sum() > 0
        # the documents lower-cased by the caller (gather does it once for BM25 and the
        # signals), all new or some already known, give the same matrix
        lows = [d.lower() for d in docs]
        assert (TermFrequencies().matrix(q, docs, lows) == single).all()
        part = TermFrequencies()
        part.matrix(q, docs[::3])
        assert (part.matrix(q, docs, lows) == single).all()
