"""Text analysis the detectors share: noise, near-duplicates, CJK terms, identifiers.

These are pure functions over strings, deliberately simple and deterministic: a
detector's verdict must be explainable in one sentence, so each helper here computes
something a person can check by eye (a repeated line, a shingle overlap, a file path
that vanished). Hashing uses ``zlib.crc32`` rather than ``hash()`` so that results do not
change between processes.
"""

from __future__ import annotations

import itertools
import re
import threading
import zlib
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence, Sized
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from ctxcore.summarize import constraint_sentences as summarize_constraints

K = TypeVar("K", bound=Sized)
V = TypeVar("V")


class Memo(Generic[K, V]):
    """``fn(key)`` remembered by key: an LRU bounded by the total ``len`` of the keys held.

    The helpers here are pure functions of a string, and the same strings come back all the
    time: a session's packets sit in turn after turn, the cross-turn checks read every earlier
    turn again, and a replay diagnoses each turn twice (before and after). A hit costs a dict
    lookup (a ``str`` or ``frozenset`` caches its hash, and the keys are mostly the very
    objects of the traces). The values handed out are immutable (str, tuples, frozensets,
    frozen dataclasses), so a caller can never change what the next caller gets; a key longer
    than a quarter of ``max_size`` is computed and not kept. Thread-safe (the app diagnoses on
    several threads).
    """

    def __init__(self, fn: Callable[[K], V], max_size: int = 4_000_000) -> None:
        self._fn = fn
        self._max = max_size
        self._data: OrderedDict[K, V] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        _MEMOS.append(self)

    def __call__(self, key: K) -> V:
        # a hit takes no lock: each OrderedDict call is one step under the GIL, and a key
        # another thread evicts between the two only misses its move to the end
        try:
            value = self._data[key]
        except KeyError:
            pass
        else:
            try:
                self._data.move_to_end(key)
            except KeyError:
                pass
            return value
        value = self._fn(key)
        if len(key) > self._max // 4:
            return value  # one huge text would push everything else out
        with self._lock:
            if key not in self._data:
                self._data[key] = value
                self._size += len(key)
                while self._size > self._max:
                    old, _ = self._data.popitem(last=False)
                    self._size -= len(old)
        return value

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._size = 0


#: every ``Memo`` made (they are module globals: made once, at import)
_MEMOS: list[Memo[Any, Any] | Grown | SessionNearDuplicates] = []


def clear_memos() -> None:
    """Empty every ``Memo``: a replay worker does after each session (docs/design.md,
    "Diagnostics"), whose texts the next session's turns do not hold."""
    for memo in _MEMOS:
        memo.clear()


def _lowered_ws_whole(text: str) -> str:
    # str.split() splits on exactly what \s+ matches (str.isspace), at a third of the cost
    return " ".join(text.split()).lower()


#: how far back from a text's end ``Grown`` looks for its last whitespace character
_CUT_REACH = 4096


class Grown:
    """``lowered_ws`` of long texts that grow: computed on the new end of a text that
    starts with one computed before, the rest taken from that one.

    An agent's call N sends the prompt of call N-1 plus a little, and each trace's prompt
    is a whole new string: the prompt read afresh at every call of a session is the
    session's length squared. The form of a text that starts with a text ``Grown``
    remembers needs only what follows that text's last whitespace character: a text split
    at a whitespace character, ``" ".join(text.split())`` is the halves' joined with one
    space, and ``str.lower`` maps each side alone the same (its one rule of context, the
    final sigma, never looks across a space), so the result is the same string, character
    for character (tests/test_diagnostics_grown.py). Remembers the ``keep`` most recent
    texts of at least ``min_len`` characters, up to ``max_chars`` characters in all (one
    text per session of a bulk import that interleaves a few); thread-safe.
    """

    def __init__(self, keep: int = 16, min_len: int = 16_384, max_chars: int = 8_000_000):
        self._keep = keep
        self._min = min_len
        self._max = max_chars
        #: (text, position of its last whitespace character, the text's result, how many
        #: characters of it are the result for the text before that position), most recent
        #: last: a list, as a dict would hash each long text (named as ``Memo``'s, which
        #: a replay worker's test counts)
        self._data: list[tuple[str, int, str, int]] = []
        self._size = 0
        self._lock = threading.Lock()
        _MEMOS.append(self)

    @property
    def min_len(self) -> int:
        """The shortest text remembered: a shorter one is computed whole."""
        return self._min

    def __call__(self, text: str) -> str:
        if len(text) < self._min:
            return _lowered_ws_whole(text)
        base = self._longest_start(text)
        if base is None:
            out = _lowered_ws_whole(text)
        else:
            old, cut, known, at = base
            if len(old) == len(text):
                return known  # the very text again (an earlier turn read once more)
            head = known[:at]  # the very string when nothing follows the cut
            rest = _lowered_ws_whole(text[cut:])
            out = f"{head} {rest}" if head and rest else head or rest
        self._remember(text, out)
        return out

    def _longest_start(self, text: str) -> tuple[str, int, str, int] | None:
        """The most recent remembered text ``text`` starts with (a session's latest prompt,
        the longest of its prompts), as kept: (text, cut, its result, length of the result
        before the cut)."""
        for known in reversed(list(self._data)):
            if len(known[0]) <= len(text) and text.startswith(known[0]):
                return known
        return None

    def _remember(self, text: str, out: str) -> None:
        """Keep ``text`` with the result for the text before its last whitespace character
        (``out`` less the lower-cased last word); a text with none near its end is not kept."""
        end = len(text)
        cut = next(
            (i for i in range(end - 1, max(end - _CUT_REACH, 0) - 1, -1) if text[i].isspace()),
            -1,
        )
        if cut < 0 or len(text) > self._max // 4:
            return
        last = len(text[cut + 1 :].lower())
        at = len(out) - last
        if last and at > 0:
            at -= 1  # the space before the last word
        with self._lock:
            self._data.append((text, cut, out, at))
            self._size += len(text) + len(out)
            while len(self._data) > self._keep or self._size > self._max:
                old, _, old_out, _ = self._data.pop(0)
                self._size -= len(old) + len(old_out)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._size = 0


_grown = Grown()
_lowered_ws_short = Memo(_lowered_ws_whole)


def lowered_ws(text: str) -> str:
    """``text`` with runs of whitespace made one space, stripped and lower-cased (the form
    the detectors compare prompts and sentences in), remembered per text; a long text (a
    prompt) by ``Grown``: computed on its new end when it grows a recent one (a session's
    prompts), not hashed for a memo (hashing a long prompt cost half of computing it)."""
    return _grown(text) if len(text) >= _grown.min_len else _lowered_ws_short(text)


#: ``text`` with runs of whitespace made one space and stripped (``context.normalize_ws``),
#: remembered per text: for whole packet texts, which come back turn after turn
normalized_ws: Memo[str, str] = Memo(lambda text: " ".join(text.split()))


# --------------------------------------------------------------------------- noise

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# Content is untrusted and may be megabytes on one line: every pattern that scans it is
# written so that it cannot backtrack quadratically (possessive runs, starts pinned by a
# lookbehind), and per-line patterns only look at lines of reasonable length.
_PATHLIKE = re.compile(r"(?<!\S)[^\s/\\]*+[/\\]\S*+")
_DIGITS = re.compile(r"\d+")
_SPINNER_LINE = re.compile(r"^\s*+[|/\\-]\s*$|^\s*+\[?[=#>.\-\s]{6,}+\]?\s*+\d{1,3}(?:\.\d+)?\s*%")
_MAX_LINE = 2000
#: a line must be this long (stripped) before its repetition counts as noise; "}" and
#: "pass" repeat in any source file.
MIN_REPEAT_LINE = 12
#: a line *shape* (paths and numbers blanked) repeated this often is noise after 2 copies.
TEMPLATE_REPEATS = 5


@dataclass(frozen=True)
class NoiseProfile:
    """What ``strip_noise`` removed from one text, by category."""

    clean: str
    ansi: int
    backspaces: int
    carriage_returns: int
    repeated_lines: int
    spinner_lines: int

    @property
    def any(self) -> bool:
        return bool(
            self.ansi
            or self.backspaces
            or self.carriage_returns
            or self.repeated_lines
            or self.spinner_lines
        )

    def describe(self) -> str:
        parts = []
        if self.repeated_lines:
            parts.append(f"{self.repeated_lines} repeated lines")
        if self.ansi:
            parts.append(f"{self.ansi} ANSI escapes")
        if self.carriage_returns:
            parts.append(f"{self.carriage_returns} carriage-return overwrites")
        if self.backspaces:
            parts.append(f"{self.backspaces} backspace spinner steps")
        if self.spinner_lines:
            parts.append(f"{self.spinner_lines} progress lines")
        return ", ".join(parts)


def _shape(line: str) -> str:
    """A line with paths and numbers blanked; "" when too little literal text is left
    (a plain list of paths is content, not a repeated message)."""
    shape = _DIGITS.sub("0", _PATHLIKE.sub("<p>", line))
    if shape == line:
        return ""
    literal = _NOT_LITERAL.sub("", shape)
    return shape if len(literal) >= 6 else ""


_NOT_LITERAL = re.compile(r"\W|<p>|0")
#: ``_shape`` remembered per line: a session's tool outputs repeat lines from one call to
#: the next (the same file read again, the same test run's report), three regular
#: expressions a line
_line_shape = Memo(_shape, max_size=2_000_000)


def _apply_backspaces(line: str) -> str:
    """What a terminal shows: each backspace erases the character before it."""
    out: list[str] = []
    for ch in line:
        if ch == "\x08":
            if out:
                out.pop()
        else:
            out.append(ch)
    return "".join(out)


def strip_noise(text: str) -> NoiseProfile:
    """Remove terminal noise the way a terminal (and a careful reader) would."""
    return _strip_noise(text)


def _strip_noise_of(text: str) -> NoiseProfile:
    ansi = len(_ANSI.findall(text))
    s = _ANSI.sub("", text)
    backspaces = s.count("\x08")
    if backspaces:
        s = "\n".join(_apply_backspaces(ln) if "\x08" in ln else ln for ln in s.split("\n"))
    s = s.replace("\r\n", "\n")
    carriage = 0
    lines_out: list[str] = []
    for line in s.split("\n"):
        if "\r" in line:
            parts = [p for p in line.split("\r") if p.strip()]
            carriage += max(len(parts) - 1, 0)
            line = parts[-1] if parts else ""
        lines_out.append(line)
    seen: set[str] = set()
    keys = [ln.strip() for ln in lines_out]  # each line stripped once
    long = [key for key in keys if len(key) >= MIN_REPEAT_LINE]
    shape_of = {key: _line_shape(key) for key in set(long)}
    shapes: Counter[str] = Counter(map(shape_of.__getitem__, long))
    kept_shapes: Counter[str] = Counter()
    repeated = 0
    spinners = 0
    final: list[str] = []
    for ln, key in zip(lines_out, keys, strict=True):
        # a spinner line is one character of |/\- stripped, or holds a "%": the pattern
        # is asked about those only
        if (len(key) == 1 or "%" in ln) and len(ln) <= _MAX_LINE and _SPINNER_LINE.search(ln):
            spinners += 1
            continue
        if len(key) >= MIN_REPEAT_LINE:
            shape = shape_of[key]
            if key in seen or (
                shape and shapes[shape] >= TEMPLATE_REPEATS and kept_shapes[shape] >= 2
            ):
                repeated += 1
                continue
            seen.add(key)
            kept_shapes[shape] += 1
        final.append(ln)
    return NoiseProfile(
        clean="\n".join(final),
        ansi=ansi,
        backspaces=backspaces,
        carriage_returns=carriage,
        repeated_lines=repeated,
        spinner_lines=spinners,
    )


_strip_noise = Memo(_strip_noise_of)


# --------------------------------------------------------------------------- CJK

CJK_CHAR = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")
_WORD = re.compile(r"[a-z0-9_]+")


def cjk_share(text: str) -> float:
    """Share of non-space characters that are CJK (unspaced scripts)."""
    chars = sum(map(len, text.split()))
    if chars <= 0:
        return 0.0
    return len(CJK_CHAR.findall(text)) / chars


def cjk_terms(text: str) -> set[str]:
    """Lower-cased ASCII words plus CJK character bigrams (single characters for runs of 1)."""
    low = text.lower()
    terms = set(_WORD.findall(low))
    for run in _CJK_RUN.findall(low):
        if len(run) == 1:
            terms.add(run)
        else:
            terms.update(run[i : i + 2] for i in range(len(run) - 1))
    return terms


def cjk_relevance(query: str | set[str], content: str) -> float:
    """Share of the query's terms found in the content, CJK-aware (0 for an empty query).

    ``query`` may be given as its ``cjk_terms`` already, when scoring many contents.
    """
    q = cjk_terms(query) if isinstance(query, str) else query
    if not q:
        return 0.0
    low = content.lower()
    words = set(_WORD.findall(low)) if any(t.isascii() for t in q) else set()
    # a CJK bigram found as a substring lies inside one CJK run, so it is one of the
    # content's bigrams; ASCII terms must match whole words
    return sum(1 for t in q if (t in words if t.isascii() else t in low)) / len(q)


# --------------------------------------------------------------------------- near-duplicates

_SHINGLE_TOKEN = re.compile(
    r"[a-z0-9_]+|[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]"
)
SHINGLE = 5


def shingles(text: str, k: int = SHINGLE) -> frozenset[int]:
    """Hashed k-token shingles (words, or single CJK characters); punctuation ignored."""
    return _shingles(text) if k == SHINGLE else _shingles_of(text, k)


def _shingles_of(text: str, k: int = SHINGLE) -> frozenset[int]:
    toks = _SHINGLE_TOKEN.findall(text.lower())
    if not toks:
        return frozenset()
    if len(toks) <= k:
        return frozenset({zlib.crc32(" ".join(toks).encode())})
    # the k tokens from each position joined, encoded and hashed by ``map`` in C (a
    # generator stepping through each shingle in Python took a third longer); the token
    # lists shifted by 1..k-1 end the windows at the last whole one
    windows = zip(*(itertools.islice(toks, j, None) for j in range(k)), strict=False)
    return frozenset(map(zlib.crc32, map(str.encode, map(" ".join, windows))))


_shingles = Memo(_shingles_of)


def jaccard(a: frozenset[int], b: frozenset[int]) -> float:
    if not a and not b:
        return 1.0
    both = len(a & b)  # the union's size without building the union
    return both / (len(a) + len(b) - both)


_BANDS, _ROWS = 16, 4
_rng = np.random.default_rng(20240813)
_A = _rng.integers(1, 2**32 - 1, size=_BANDS * _ROWS, dtype=np.uint64) | np.uint64(1)
_B = _rng.integers(0, 2**32 - 1, size=_BANDS * _ROWS, dtype=np.uint64)


def _minhash_of(s: frozenset[int]) -> bytes:
    x = np.fromiter(s, dtype=np.uint64, count=len(s))
    # multiply-shift hashing on 32-bit inputs; the product fits in 64 bits.
    h = (x[None, :] * _A[:, None] + _B[:, None]) >> np.uint64(32)
    return np.asarray(h.min(axis=1), dtype=np.uint64).tobytes()


def _bands_of(s: frozenset[int]) -> tuple[bytes, ...]:
    sig = _minhash_of(s)
    step = 8 * _ROWS
    return tuple(sig[band * step : (band + 1) * step] for band in range(_BANDS))


#: the LSH band keys of a shingle set's signature, as bytes (band ``b``'s ``_ROWS`` 8-byte
#: hashes are the ``b``-th item; immutable)
_bands = Memo(_bands_of, max_size=1_000_000)


def _first_copies(
    sets: Sequence[frozenset[int]],
) -> tuple[list[tuple[int, int, float]], list[int]]:
    """Identical sets (the same log pasted five times) paired with their first copy directly
    (similarity 1.0), and the indexes of the first copies, in order; empty sets are none."""
    out: list[tuple[int, int, float]] = []
    first: dict[frozenset[int], int] = {}
    reps: list[int] = []
    for i, s in enumerate(sets):
        if not s:
            continue
        if s in first:
            out.append((first[s], i, 1.0))
        else:
            first[s] = i
            reps.append(i)
    return out, reps


def near_duplicate_pairs(
    sets: Sequence[frozenset[int]], threshold: float
) -> list[tuple[int, int, float]]:
    """Index pairs whose Jaccard similarity is at least ``threshold`` (MinHash-LSH, verified).

    LSH with 16 bands of 4 rows finds a pair at Jaccard 0.8 with probability > 0.999;
    each candidate is then checked exactly, so no false positives are reported.
    """
    out, reps = _first_copies(sets)
    # one dict of buckets per band (a band's key is its slice of the signature)
    buckets: list[dict[bytes, list[int]]] = [{} for _ in range(_BANDS)]
    for i in reps:
        for band, key in zip(buckets, _bands(sets[i]), strict=True):
            band.setdefault(key, []).append(i)
    # near-identical texts share a bucket in most bands: each group of members once, its
    # pairs made in C (members are in index order, so each pair is (smaller, larger))
    groups = {tuple(m) for band in buckets for m in band.values() if len(m) > 1}
    candidates: set[tuple[int, int]] = set()
    for members in groups:
        candidates.update(itertools.combinations(members, 2))
    for i, j in sorted(candidates):
        a, b = sets[i], sets[j]
        if min(len(a), len(b)) < threshold * max(len(a), len(b)):
            continue
        sim = jaccard(a, b)
        if sim >= threshold:
            out.append((i, j, sim))
    return sorted(out)


class _SessionPairs:
    """What one session's calls have shown of their shingle sets: each distinct set's LSH
    bucket mates among the sets before it, and the pairs of them verified so far (each
    pair once, when a call first holds both)."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.pos: dict[frozenset[int], int] = {}
        self.sets: list[frozenset[int]] = []
        #: the shingles the sets held hold in all (what bounds the memory held)
        self.shingles = 0
        #: per set, the positions of the earlier sets sharing one of its buckets
        self.mates: list[set[int]] = []
        self.buckets: list[dict[bytes, list[int]]] = [{} for _ in range(_BANDS)]
        #: (earlier position, later position) -> Jaccard when at least the threshold, else
        #: None: the pairs verified
        self.verified: dict[tuple[int, int], float | None] = {}
        self.lock = threading.Lock()

    def position(self, s: frozenset[int]) -> int:
        """``s``'s place among the sets held (with its bucket mates, when new)."""
        p = self.pos.get(s)
        if p is not None:
            return p
        p = len(self.sets)
        self.pos[s] = p
        self.sets.append(s)
        self.shingles += len(s)
        mates: set[int] = set()
        for band, key in zip(self.buckets, _bands(s), strict=True):
            members = band.setdefault(key, [])
            mates.update(members)
            members.append(p)
        self.mates.append(mates)
        return p

    def _similar(self, q: int, p: int) -> float | None:
        """The Jaccard of the sets at ``q`` < ``p`` when at least the threshold (by the
        size filter and the exact check of ``near_duplicate_pairs``), remembered."""
        key = (q, p)
        try:
            return self.verified[key]
        except KeyError:
            pass
        a, b = self.sets[q], self.sets[p]
        sim: float | None = None
        if min(len(a), len(b)) >= self.threshold * max(len(a), len(b)):
            sim = jaccard(a, b)
            if sim < self.threshold:
                sim = None
        self.verified[key] = sim
        return sim

    def pairs(self, sets: Sequence[frozenset[int]]) -> list[tuple[int, int, float]]:
        """``near_duplicate_pairs(sets, threshold)``, from what the session showed."""
        out, reps = _first_copies(sets)
        # position held -> index in ``sets`` of its first copy
        at = {self.position(sets[i]): i for i in reps}
        held = set(at)  # a set: intersecting one walks the smaller side, a dict all of it
        for p, j in at.items():
            for q in self.mates[p].intersection(held):
                sim = self._similar(q, p)
                if sim is not None:
                    i = at[q]
                    out.append((i, j, sim) if i < j else (j, i, sim))
        return sorted(out)


class SessionNearDuplicates:
    """``near_duplicate_pairs`` for the calls of a session, each paying for its new sets
    only (docs/design.md, "Diagnostics"): call N of a session holds the packets of call
    N-1 and one or two more, so each session's sets are kept with their LSH bucket mates
    and the pairs verified (``_SessionPairs``): a call looks its sets up, buckets only the
    new ones and verifies only pairs no earlier call held. The pairs are the very ones
    ``near_duplicate_pairs`` gives: a pair of sets is checked, as there, when they share an
    LSH bucket, by the same size filter and Jaccard.
    Keeps the ``keep`` sessions used last; a session whose sets hold more than
    ``max_shingles`` shingles in all (~120 bytes each) starts over (the answers stay the
    same, only the work done before is lost). Thread-safe."""

    def __init__(self, keep: int = 4, max_shingles: int = 300_000) -> None:
        self._keep = keep
        self._max_shingles = max_shingles
        self._data: OrderedDict[tuple[str, float], _SessionPairs] = OrderedDict()
        self._lock = threading.Lock()
        _MEMOS.append(self)

    def __call__(
        self, session: str, sets: Sequence[frozenset[int]], threshold: float
    ) -> list[tuple[int, int, float]]:
        key = (session, threshold)
        with self._lock:
            held = self._data.get(key)
            if held is None or held.shingles > self._max_shingles:
                held = self._data[key] = _SessionPairs(threshold)
            self._data.move_to_end(key)
            while len(self._data) > self._keep:
                self._data.popitem(last=False)
        with held.lock:
            return held.pairs(sets)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


#: the near-duplicate pairs of each recent session's calls (``SessionNearDuplicates``)
session_near_duplicates = SessionNearDuplicates()


# --------------------------------------------------------------------------- identifiers

_IDENT_PATTERNS = (
    re.compile(r"(?<![\w.@/:-])(?:[A-Za-z]:)?/?(?:[\w.@-]++/)++[\w.@-]*+"),  # paths
    re.compile(
        r"(?<![\w-])[\w-]++\.(?:py|pyi|ts|tsx|js|jsx|mjs|json|md|rs|go|java|kt|c|h|cc|cpp|hpp|rb|php|"
        r"toml|yaml|yml|txt|log|sh|cfg|ini|html|css|sql|lock)\b"
    ),  # file names
    re.compile(r"\b[A-Za-z_][A-Za-z0-9]*_[A-Za-z0-9_]*[A-Za-z0-9]\b"),  # snake_case
    re.compile(r"\b[a-z]+[A-Z][A-Za-z0-9]*\b"),  # camelCase
    re.compile(r"\b[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*\b"),  # PascalCase
    re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\b"),  # dotted.names
    re.compile(r"\b[A-Z]{1,4}\d{2,}\b"),  # error codes (E403, TS2345)
    re.compile(r"(?<![\w.])\d{2,}(?:\.\d+)*(?![\w.])"),  # numbers with 2+ digits, versions
    re.compile(r"\b[0-9a-f]{7,40}\b"),  # hashes
)


_SEPARATOR = re.compile(r"[/\\.:\-]")


def identifiers(text: str) -> list[str]:
    """Identifiers, file paths and numbers a summary should keep, in order of appearance."""
    return list(_identifiers(text))


def _identifiers_of(text: str) -> tuple[str, ...]:
    found: dict[str, int] = {}
    for pat in _IDENT_PATTERNS:
        for m in pat.finditer(text):
            tok = m.group(0).strip(".-/")
            if len(tok) >= 2 and tok not in found:
                found[tok] = m.start()
    # "args.py" inside "aider/args.py" is the same mention: keep the longest form only
    # (but "12" inside "8123" is not: parts must end at separators)
    parts: set[str] = set()
    for tok in found:
        cuts = [m.start() for m in _SEPARATOR.finditer(tok)]
        starts = [0, *(c + 1 for c in cuts)]
        ends = [*cuts, len(tok)]
        parts.update(tok[a:b] for a in starts for b in ends if a < b and (a, b) != (0, len(tok)))
    return tuple(sorted((t for t in found if t not in parts), key=lambda t: (found[t], t)))


_identifiers = Memo(_identifiers_of)


# --------------------------------------------------------------------------- constraints


def constraint_sentences(text: str) -> list[str]:
    """Sentences of a user message that read as constraints ("never touch tests/"):
    ``ctxcore.summarize.constraint_sentences``, memoised."""
    return list(_constraint_sentences(text))


def _constraint_sentences_of(text: str) -> tuple[str, ...]:
    return tuple(summarize_constraints(text))


_constraint_sentences = Memo(_constraint_sentences_of)


# --------------------------------------------------------------------------- injection

#: (what it looks like, pattern, substrings of the lower-cased text one of which it needs)
INJECTION_PATTERNS: tuple[tuple[str, re.Pattern[str], tuple[str, ...]], ...] = (
    (
        "override instruction",
        re.compile(
            r"\b(?:ignore|disregard|forget|override|bypass)\b[^.\n]{0,40}?"
            r"\b(?:previous|prior|above|earlier|preceding|all|any|the|your|system)\b[^.\n]{0,30}?"
            r"\b(?:instructions?|prompts?|rules|directions|directives|guidelines|context)\b",
            re.IGNORECASE,
        ),
        ("ignore", "disregard", "forget", "override", "bypass"),
    ),
    (
        "override instruction",
        re.compile(
            r"(?:忽略|无视|忘记|忘掉)(?:之前|以上|前面|上述|先前|所有)[^。\n]{0,10}?"
            r"(?:指令|指示|说明|提示|规则|要求)"
        ),
        ("忽略", "无视", "忘记", "忘掉"),
    ),
    (
        "chat-template token",
        re.compile(
            r"<\|(?:im_start|im_end|system|user|assistant|endoftext|start_header_id|"
            r"end_header_id|eot_id)\|>|\[/?INST\]|<<\s*/?SYS\s*>>",
            re.IGNORECASE,
        ),
        ("<|", "inst]", "sys"),
    ),
    (
        "poses as a system/developer message",
        re.compile(
            r"^[ \t>]*(?:#{1,6}[ \t]*)?\[?(?:system|developer)(?:[ \t]+(?:message|prompt|"
            r"instructions?|override))?\]?[ \t]*:",
            re.IGNORECASE | re.MULTILINE,
        ),
        ("system", "developer"),
    ),
    (
        "poses as a system/developer message",
        re.compile(r"</?(?:system|developer)(?:[_-](?:message|prompt))?>", re.IGNORECASE),
        ("<system", "</system", "<developer", "</developer"),
    ),
    (
        "new-role instruction",
        re.compile(
            r"\byou are now\b[^.\n]{0,40}|\bnew (?:system )?instructions?\s*:"
            r"|\b(?:reveal|print|show|repeat)\b[^.\n]{0,20}\b(?:system prompt|your instructions)\b",
            re.IGNORECASE,
        ),
        ("you are now", "instruction", "system prompt"),
    ),
)


def injection_hits(text: str, limit: int = 5) -> list[tuple[str, str]]:
    """(what it looks like, the matching snippet) for each injection-like span, in order."""
    return list(_injection_hits(text) if limit == 5 else _injection_hits_of(text, limit))


def _injection_hits_of(text: str, limit: int = 5) -> tuple[tuple[str, str], ...]:
    hits: list[tuple[int, str, str]] = []
    low = text.lower()
    for label, pat, needs in INJECTION_PATTERNS:
        if not any(n in low for n in needs):
            continue  # a substring test is far cheaper than the regex on a big tool log
        for m in pat.finditer(text):
            hits.append((m.start(), label, m.group(0).strip()[:80]))
    hits.sort()
    out: list[tuple[str, str]] = []
    for _, label, snippet in hits:
        if (label, snippet) not in out:
            out.append((label, snippet))
        if len(out) >= limit:
            break
    return tuple(out)


_injection_hits = Memo(_injection_hits_of)
