"""Relevance, recency and priority scores for the ``ctxscope`` preset.

Why a module of its own: the seeds score relevance by splitting on whitespace, which gives
Chinese text (no spaces) a relevance of zero and lets punctuation ("fields.py," vs
"fields.py") break matches. Here a query is cut into *terms* the way a search engine would:

- Latin/digit runs, lower-cased, punctuation stripped (``fields.py`` → ``fields``, ``py``),
  English stop words left out of queries;
- CJK characters as unigrams plus the bigrams of each CJK run (``兼容性`` → 兼 容 性 兼容 容性).

Relevance is Okapi BM25 of the query terms over the candidate set, with the document length
measured in tokens (the counter already has them), normalised by the sum of the query's IDFs
and clipped to [0, 1]: a document of average length containing every query term once scores
about 1; one with none of them scores 0. Only the query's terms are looked up in each document
(a batch of documents is joined into one array of code points and each term found with numpy,
its word boundaries checked on both sides; see ``_Group``), so scoring 1 MB of candidates
costs about 8 ms, and per-document term frequencies are memoised by (query terms, content)
so that re-runs score nothing new.
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

_LATIN = r"0-9a-z_\u00c0-\u024f"
_TERM = re.compile(rf"[{_LATIN}]+|[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")

#: English function words: near-zero IDF anyway, and skipping them lets the substring
#: pre-check rule out most documents before any regex runs.
STOPWORDS = frozenset(
    """a an and are as at be been but by can could did do does for from had has have he her
    his how i if in into is it its me my no not of on or our she so than that the their them
    then there these they this those to was we were what when where which who why will with
    would you your""".split()
)

#: BM25 parameters (the usual defaults).
K1 = 1.2
B = 0.75


def _is_cjk(term: str) -> bool:
    return bool(_CJK_RUN.match(term))


def terms(text: str) -> list[str]:
    """All terms of ``text`` in order (Latin words lower-cased; CJK unigrams then bigrams)."""
    out: list[str] = []
    for run in _TERM.findall(text.lower()):
        if _is_cjk(run):
            out.extend(run)
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
        else:
            out.append(run)
    return out


@dataclass(frozen=True)
class QueryTerms:
    """The distinct terms of a query, split by how they are looked up in documents."""

    latin: tuple[str, ...]
    cjk: tuple[str, ...]

    def __hash__(self) -> int:  # hashed once: it keys every memo lookup
        h: int | None = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.latin, self.cjk))
            object.__setattr__(self, "_hash", h)
        return h

    @property
    def all(self) -> tuple[str, ...]:
        return self.latin + self.cjk

    @property
    def empty(self) -> bool:
        return not self.latin and not self.cjk

    @classmethod
    def of(cls, query: str) -> QueryTerms:
        """The query's terms; the same query gives the very same object while it is among
        last queries asked for (``_QUERIES_KEPT``, at most ``_QUERIES_CHARS`` characters of
        them), so the memos it keys find it by identity (an equal object is compared field
        by field on every lookup)."""
        known = _QUERIES.get(query)
        if known is not None:
            return known
        seen = dict.fromkeys(t for t in terms(query) if t not in STOPWORDS)
        made = cls(
            latin=tuple(t for t in seen if not _is_cjk(t)),
            cjk=tuple(t for t in seen if _is_cjk(t)),
        )
        global _queries_chars
        with _QUERIES_LOCK:
            if len(_QUERIES) >= _QUERIES_KEPT or _queries_chars + len(query) > _QUERIES_CHARS:
                _QUERIES.clear()
                _queries_chars = 0
            if query not in _QUERIES:
                _QUERIES[query] = made
                _queries_chars += len(query)
            return _QUERIES[query]


#: the terms of recent queries, by query (``QueryTerms.of``); started over when full
_QUERIES: dict[str, QueryTerms] = {}
_QUERIES_KEPT = 1024
_QUERIES_CHARS = 1_000_000
_queries_chars = 0
_QUERIES_LOCK = threading.Lock()


#: texts lower-cased, by text (``lowered``): a session's packets come back turn after turn
#: (and a replay builds each turn again), and lower-casing costs eight times hashing; 2 M
#: characters hold a long session's packets (the texts and their lower case: up to 16 MB)
_LOWER: dict[str, str] = {}
_LOWER_CHARS = 2_000_000
_lower_chars = 0
_LOWER_LOCK = threading.Lock()


def lowered(texts: Sequence[str]) -> list[str]:
    """``[t.lower() for t in texts]``, each remembered by its text while the memo holds
    fewer than ``_LOWER_CHARS`` characters (then it starts over)."""
    global _lower_chars
    memo = _LOWER
    out: list[str] = []
    new: dict[str, str] = {}
    for t in texts:
        low = memo.get(t)
        if low is None:
            low = new.get(t)
            if low is None:
                low = new[t] = t.lower()
        out.append(low)
    if new:
        size = sum(map(len, new))
        with _LOWER_LOCK:
            if _lower_chars + size > _LOWER_CHARS:
                _LOWER.clear()
                _lower_chars = 0
            if size <= _LOWER_CHARS:
                _LOWER.update(new)
                _lower_chars += size
    return out


def _count_overlapping(text: str, sub: str) -> int:
    if len(sub) == 1 or sub[0] != sub[1]:
        return text.count(sub)
    # "哈哈" occurs twice in "哈哈哈": str.count does not see overlaps
    n, i = 0, text.find(sub)
    while i >= 0:
        n += 1
        i = text.find(sub, i + 1)
    return n


class TermFrequencies:
    """Per-document frequencies of a query's terms, memoised by (query terms, content).

    The memo's keys hold the documents themselves, so it is bounded by their characters
    (``max_chars``) as well as by entries; past either it starts over. A long session log's
    import runs every call's query over new history: bounded by entries alone it kept up to
    200,000 documents alive, most of the log's text. The compiled patterns (one per query)
    are bounded the same way."""

    def __init__(
        self, max_entries: int = 200_000, max_chars: int = 16_000_000, max_queries: int = 512
    ) -> None:
        #: a row per (query terms, document): a tuple, or a row of a batch's matrix
        self._memo: dict[tuple[QueryTerms, str], tuple[int, ...] | npt.NDArray[np.int64]] = {}
        self._regex: dict[QueryTerms, re.Pattern[str] | None] = {}
        self._max = max_entries
        self._max_chars = max_chars
        self._max_queries = max_queries
        self._chars = 0  # of the documents the memo's keys hold
        self._lock = threading.Lock()

    def _make_room(self, entries: int, chars: int) -> None:
        """Start the memo over if ``entries`` more keys of ``chars`` characters would not fit
        (with the lock held)."""
        if len(self._memo) + entries > self._max or self._chars + chars > self._max_chars:
            self._memo.clear()
            self._chars = 0
        self._chars += chars

    def _pattern(self, q: QueryTerms) -> re.Pattern[str] | None:
        if q not in self._regex:
            if len(self._regex) >= self._max_queries:
                self._regex.clear()
            if q.latin:
                alt = "|".join(re.escape(t) for t in sorted(q.latin, key=len, reverse=True))
                self._regex[q] = re.compile(rf"(?<![{_LATIN}])(?:{alt})(?![{_LATIN}])")
            else:
                self._regex[q] = None
        return self._regex[q]

    def of(self, q: QueryTerms, text: str) -> tuple[int, ...]:
        key = (q, text)
        hit = self._memo.get(key)
        if hit is not None:
            return tuple(hit.tolist()) if isinstance(hit, np.ndarray) else hit
        low = text.lower()
        counts: Counter[str] = Counter()
        pat = self._pattern(q)
        if pat is not None and any(t in low for t in q.latin):
            counts = Counter(pat.findall(low))  # counted in C, not in a Python loop
        cjk: list[int] = []
        if q.cjk and low.isascii():
            cjk = [0] * len(q.cjk)  # no CJK character at all: skip the per-term scans
        elif q.cjk:
            # unigrams first (one fast scan each); a bigram is only looked for when both of
            # its characters occur, which skips almost all the work on English text
            uni = {t: low.count(t) for t in q.cjk if len(t) == 1}
            for t in q.cjk:
                if len(t) == 1:
                    cjk.append(uni[t])
                elif uni.get(t[0], 0) and uni.get(t[1], 0):
                    cjk.append(_count_overlapping(low, t))
                else:
                    cjk.append(0)
        row = tuple(counts.get(t, 0) for t in q.latin) + tuple(cjk)
        with self._lock:
            if key not in self._memo:
                self._make_room(1, len(text))
            self._memo[key] = row
        return row

    def matrix(
        self, q: QueryTerms, texts: Sequence[str], lows: Sequence[str] | None = None
    ) -> npt.NDArray[np.int64]:
        """A (documents × query terms) matrix of term frequencies (read-only); ``lows``:
        the texts lower-cased, when the caller has them."""
        n_terms = len(q.all)
        if n_terms == 0:
            return np.zeros((len(texts), 0), dtype=np.int64)
        memo = self._memo
        missing = list(dict.fromkeys(t for t in texts if (q, t) not in memo))
        if len(missing) >= 8:
            if lows is None:
                missing_lows = None
            elif len(missing) == len(texts):
                missing_lows = list(lows)
            else:
                low_of = dict(zip(texts, lows, strict=True))
                missing_lows = [low_of[t] for t in missing]
            found = self._batch(q, missing, missing_lows)
            found.flags.writeable = False  # its rows are memoised as views
            with self._lock:
                self._make_room(len(missing), sum(map(len, missing)))
                memo.update(zip([(q, t) for t in missing], found, strict=True))
            if len(missing) == len(texts):  # every text new and distinct: this is the matrix
                return found
        rows = [memo[(q, t)] if (q, t) in memo else self.of(q, t) for t in texts]
        out = np.array(rows, dtype=np.int64).reshape(len(texts), n_terms)
        out.flags.writeable = False
        return out

    def _batch(
        self, q: QueryTerms, texts: Sequence[str], lows: list[str] | None = None
    ) -> npt.NDArray[np.int64]:
        """``of`` for many documents at once, as array scans (see ``_Group``). ASCII
        documents form their own group: one byte per character, and CJK terms need not
        look there at all."""
        if lows is None:
            lows = [t.lower() for t in texts]
        n = len(lows)
        ascii_idx = [i for i, x in enumerate(lows) if x.isascii()]
        other_idx = [i for i, x in enumerate(lows) if not x.isascii()]
        groups = [_Group(lows, idx) for idx in (ascii_idx, other_idx) if idx]
        out = np.zeros((n, len(q.all)), dtype=np.int64)
        for g in groups:
            for col, term in enumerate(q.latin):
                g.bin(out[:, col], g.latin_hits(term))
            if q.cjk and not g.ascii:
                for k, term in enumerate(q.cjk, start=len(q.latin)):
                    g.bin(out[:, k], g.cjk_hits(term))
        return out


def _latin_table() -> npt.NDArray[np.bool_]:
    """Which code points (up to U+024F) are word characters of a Latin term."""
    table = np.zeros(0x250, dtype=bool)
    for lo, hi in (("0", "9"), ("a", "z"), ("_", "_"), ("\u00c0", "\u024f")):
        table[ord(lo) : ord(hi) + 1] = True
    return table


_IS_LATIN = _latin_table()
#: code points from here up (CJK and the like) are few in any text: a group finds where
#: they all are once, then each CJK character among them
_WIDE = 0x2E80


class _Group:
    """Some lower-cased documents joined by newlines (which no term spans) into one array
    of code points (bytes when all are ASCII), and where each document starts.

    A term's hits are found with numpy instead of a regex per document: the positions of
    one of its characters (``_find`` picks which), narrowed by comparing the other
    characters at their offsets, then the word boundaries of ``_TERM`` checked on both
    sides (a Latin term is a whole run of word characters, so its hits cannot overlap);
    CJK terms need no boundary, and a bigram like 哈哈 is counted overlapping, as ``of``
    counts it. Each hit is binned to its document with one ``searchsorted``."""

    def __init__(self, lows: list[str], idx: list[int]) -> None:
        self.idx = np.asarray(idx, dtype=np.int64)
        parts = [lows[i] for i in idx]
        text = "\n".join(parts)
        self.ascii = text.isascii()
        if self.ascii:
            self.cp: npt.NDArray[Any] = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
        else:
            self.cp = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        lengths = np.fromiter((len(x) + 1 for x in parts), dtype=np.int64, count=len(parts))
        self.starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        self._first: dict[str, npt.NDArray[np.int64]] = {}
        self._wide: tuple[npt.NDArray[np.int64], npt.NDArray[Any]] | None = None

    def _where(self, ch: str) -> npt.NDArray[np.int64]:
        hit = self._first.get(ch)
        if hit is None:
            c = ord(ch)
            if self.ascii and c > 127:
                hit = np.zeros(0, dtype=np.int64)
            elif c >= _WIDE:  # CJK: looked up among the wide characters only
                if self._wide is None:
                    at = np.flatnonzero(self.cp >= _WIDE)
                    self._wide = (at, self.cp[at])
                at, values = self._wide
                hit = at[values == c]
            else:
                hit = np.flatnonzero(self.cp == c)
            self._first[ch] = hit
        return hit

    def _find(self, term: str) -> npt.NDArray[np.int64]:
        """Start positions of ``term`` (every occurrence, overlapping ones included)."""
        cp = self.cp
        n = cp.size
        # anchor on a character whose positions are already at hand, else on the term's
        # least common-looking letter (a short list of candidates to narrow)
        k0 = min(
            range(len(term)), key=lambda k: (term[k] not in self._first, _COMMON.get(term[k], 0))
        )
        pos = self._where(term[k0]) - k0
        pos = pos[(pos >= 0) & (pos <= n - len(term))]
        for k, ch in enumerate(term):
            if k != k0 and pos.size:
                pos = pos[cp[pos + k] == ord(ch)]
        return pos

    def _is_word(self, values: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
        v = values.astype(np.int64)
        return (v < _IS_LATIN.size) & _IS_LATIN[np.minimum(v, _IS_LATIN.size - 1)]

    def latin_hits(self, term: str) -> npt.NDArray[np.int64]:
        pos = self._find(term)
        if pos.size:
            cp = self.cp
            before = pos > 0
            before[before] = self._is_word(cp[pos[before] - 1])
            end = pos + len(term)
            after = end < cp.size
            after[after] = self._is_word(cp[end[after]])
            pos = pos[~before & ~after]
        return pos

    def cjk_hits(self, term: str) -> npt.NDArray[np.int64]:
        return self._find(term)

    def bin(self, column: npt.NDArray[np.int64], pos: npt.NDArray[np.int64]) -> None:
        if pos.size:
            doc = np.searchsorted(self.starts, pos, side="right") - 1
            column[self.idx] += np.bincount(doc, minlength=len(self.idx))


#: letters by how common they are in English and code (higher = more common); a term is
#: anchored on its least common one, which keeps the first candidate list short
_COMMON = {ch: i for i, ch in enumerate(reversed("etaoinsrlcdhupmfgybwvk_xjqz"))}


_TF = TermFrequencies()


def term_frequencies(
    q: QueryTerms, texts: Sequence[str], lows: Sequence[str] | None = None
) -> npt.NDArray[np.int64]:
    """The shared, memoised (documents × query terms) frequency matrix (``lows``: the texts
    lower-cased, when the caller has them)."""
    return _TF.matrix(q, texts, lows)


def bm25_relevance(
    query: str | QueryTerms,
    texts: Sequence[str],
    lengths: Sequence[int] | npt.NDArray[np.int64],
    tf: TermFrequencies | None = None,
) -> FloatArray:
    """BM25 of ``query`` against each text, normalised to [0, 1] (see module docstring).

    ``lengths`` are the documents' lengths (in tokens); they set BM25's length penalty.
    """
    q = query if isinstance(query, QueryTerms) else QueryTerms.of(query)
    if len(texts) == 0 or q.empty:
        return np.zeros(len(texts), dtype=np.float64)
    return bm25_from_tf((tf or _TF).matrix(q, texts), lengths)


def bm25_from_tf(
    tf_matrix: npt.NDArray[np.int64], lengths: Sequence[int] | npt.NDArray[np.int64]
) -> FloatArray:
    """``bm25_relevance`` from a precomputed (documents × terms) frequency matrix."""
    n = tf_matrix.shape[0]
    if n == 0 or tf_matrix.shape[1] == 0:
        return np.zeros(n, dtype=np.float64)
    freq = tf_matrix.astype(np.float64)
    dl = np.maximum(np.asarray(lengths, dtype=np.float64), 1.0)
    avgdl = float(dl.mean())
    df = (freq > 0).sum(axis=0)
    idf = np.log1p((n - df + 0.5) / (df + 0.5))
    norm = K1 * (1.0 - B + B * dl / avgdl)
    sat = freq * (K1 + 1.0) / (freq + norm[:, None])
    raw = sat @ idf
    out: FloatArray = np.clip(raw / float(idf.sum()), 0.0, 1.0)
    return out


def recency(
    timestamps: Sequence[datetime | None], now: datetime, tau_hours: float
) -> tuple[FloatArray, FloatArray]:
    """``exp(-age / tau)`` against ``now`` (never the wall clock), and the ages in hours.

    Items without a timestamp get recency 0.5 and age NaN (the decision notes say so);
    items from the future count as age 0.
    """
    ages = np.array(
        [
            math.nan if ts is None else max((now - ts).total_seconds(), 0.0) / 3600.0
            for ts in timestamps
        ],
        dtype=np.float64,
    )
    rec = np.where(np.isnan(ages), 0.5, np.exp(-np.nan_to_num(ages) / tau_hours))
    return rec, ages


def priority_norm(priorities: Sequence[int]) -> FloatArray:
    """Map integer priorities to [0, 1): 0 → 0, 1 → 0.5, 2 → 0.67, 5 → 0.83 (negative → 0)."""
    p = np.maximum(np.asarray(priorities, dtype=np.float64), 0.0)
    return 1.0 - 1.0 / (1.0 + p)


def combine(
    relevance: FloatArray,
    recency_: FloatArray,
    priority: FloatArray,
    relevance_weight: float,
    recency_weight: float,
    priority_weight: float,
) -> FloatArray:
    """The combined score: a weighted sum (weights need not sum to 1)."""
    return relevance_weight * relevance + recency_weight * recency_ + priority_weight * priority


__all__ = [
    "QueryTerms",
    "TermFrequencies",
    "bm25_from_tf",
    "bm25_relevance",
    "combine",
    "priority_norm",
    "recency",
    "term_frequencies",
    "terms",
]
