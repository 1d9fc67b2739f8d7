"""Exact token counting (tiktoken's counts, offline), plus the seeds' heuristics as estimators.

tiktoken is the counter of record. Its encodings are normally downloaded on first use;
this machine (and many CI runners) has no internet, so ctxcore ships ``cl100k_base`` and
``o200k_base`` rank files and seeds tiktoken's own cache with them. tiktoken still
verifies them against its pinned SHA-256, so the counts are tiktoken's, not ours.

Counts are made by a ``CountingBackend``: toktok-rs (a Rust counter that never builds the
ids, about ten times tiktoken's speed here) where it is installed at a version verified
against tiktoken for that encoding and passes a self-check when it loads; tiktoken
otherwise. Either way a count is the number ``tiktoken``'s ``encode_ordinary`` gives.

Counting goes through a ``TokenCounter`` that caches by (tokenizer, content): a re-run
of the same input after a slider move counts nothing new.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import math
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ctxcore.errors import TokenizerError
from ctxcore.settings import DEFAULT_ENCODING, ENCODINGS
from ctxcore.threads import helper_thread

_DATA = Path(__file__).parent / "data" / "encodings"
_BLOB = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
#: tiktoken's pinned hashes (tiktoken_ext/openai_public.py); checked again by tiktoken itself.
_EXPECTED_SHA256 = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
assert tuple(_EXPECTED_SHA256) == ENCODINGS

_CJK = re.compile(r"[\u4e00-\u9fff]")


def tiktoken_cache_dir() -> str:
    """The folder tiktoken reads its cache from (same rules as ``tiktoken.load``)."""
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        return os.environ["TIKTOKEN_CACHE_DIR"]
    if "DATA_GYM_CACHE_DIR" in os.environ:
        return os.environ["DATA_GYM_CACHE_DIR"]
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def seed_tiktoken_cache(directory: str | None = None) -> str:
    """Copy the bundled rank files into tiktoken's cache under the names it looks for.

    Returns the folder. Safe to call from several processes: each copy is written to a
    temporary name and renamed into place.
    """
    cache = directory if directory is not None else tiktoken_cache_dir()
    if cache == "":
        raise TokenizerError(
            "TIKTOKEN_CACHE_DIR is set to an empty string, which disables tiktoken's cache "
            "and makes it download encodings; unset it or point it at a writable folder"
        )
    os.makedirs(cache, exist_ok=True)
    for name in ENCODINGS:
        src = _DATA / f"{name}.tiktoken"
        key = hashlib.sha1(_BLOB.format(name=name).encode()).hexdigest()
        dest = os.path.join(cache, key)
        if os.path.exists(dest) and os.path.getsize(dest) == src.stat().st_size:
            continue
        if not src.exists():
            raise TokenizerError(
                f"the bundled encoding file {src} is missing; reinstall ctxscope "
                "(pip install -e .) so that ctxcore/data/encodings is present"
            )
        tmp = f"{dest}.{os.getpid()}.{threading.get_ident()}.tmp"
        shutil.copyfile(src, tmp)
        os.replace(tmp, dest)
    return cache


_encodings: dict[str, Any] = {}
_enc_lock = threading.Lock()


def get_encoding(name: str) -> Any:
    """A ``tiktoken.Encoding`` loaded offline; a clear error if it cannot be."""
    if name in _encodings:
        return _encodings[name]
    if name not in ENCODINGS:
        raise TokenizerError(
            f"unknown tiktoken encoding {name!r}; ctxscope ships {', '.join(ENCODINGS)}"
        )
    with _enc_lock:
        if name in _encodings:
            return _encodings[name]
        import tiktoken

        try:
            seed_tiktoken_cache()
        except OSError as exc:
            raise TokenizerError(
                f"cannot write tiktoken's cache folder {tiktoken_cache_dir()!r} ({exc}); "
                "set TIKTOKEN_CACHE_DIR to a writable folder"
            ) from exc
        try:
            enc = tiktoken.get_encoding(name)
        except Exception as exc:  # tiktoken raises requests/ValueError/OSError here
            raise TokenizerError(
                f"tiktoken could not load {name!r} offline ({type(exc).__name__}: {exc}); "
                f"check that {tiktoken_cache_dir()} holds the seeded file or set "
                "TIKTOKEN_CACHE_DIR to a writable folder (ctxscope seeds it from "
                "ctxcore/data/encodings)"
            ) from exc
        _encodings[name] = enc
        return enc


# --------------------------------------------------------------------------- estimators


def book_estimate(text: str) -> int:
    """hello-agents tutorial ch. 9: CJK chars (U+4E00–U+9FFF) + 1.3 × whitespace words."""
    return int(len(_CJK.findall(text)) + len(text.split()) * 1.3)


def len_div_3(text: str) -> int:
    return len(text) // 3


def len_div_4(text: str) -> int:
    return len(text) // 4


ESTIMATORS: dict[str, Callable[[str], int]] = {
    "book-heuristic": book_estimate,
    "len/3": len_div_3,
    "len/4": len_div_4,
}

TOKENIZERS: tuple[str, ...] = ENCODINGS + tuple(ESTIMATORS)


def is_exact(name: str) -> bool:
    return name in ENCODINGS


# --------------------------------------------------------------------------- counter


#: threads that count at once (tiktoken encodes without the GIL): one per CPU, at most 4.
COUNT_THREADS = max(1, min(4, os.cpu_count() or 1))
#: below this many characters a batch is counted on the calling thread
_PARALLEL_CHARS = 64_000


def _separator(enc: Any) -> tuple[str, int]:
    """A special token of ``enc`` (its text and id), to join texts with."""
    text = min(enc.special_tokens_set)
    return text, int(enc.encode_single_token(text))


def _count_joined(enc: Any, texts: Sequence[str], sep: str, sep_id: int) -> list[int]:
    """Counts of ``texts`` from ONE tiktoken call on the texts joined by a special token.

    With the separator allowed as a special token, tiktoken splits the text at each one and
    encodes every piece between them exactly as ``encode_ordinary`` encodes it alone (its
    regex never sees across a special token), so a text's count is the number of tokens
    between two separators. One call per batch instead of one per text: no Python per
    text, and the GIL is taken once (which is what lets other work run meanwhile). If a
    text holds the separator itself, there are more separators than texts, and the batch
    is counted again text by text."""
    if not texts:
        return []
    import numpy as np

    ids = enc.encode_to_numpy(sep.join(texts) + sep, allowed_special={sep}, disallowed_special=())
    ends = np.flatnonzero(ids == sep_id)
    if ends.size != len(texts):
        return [
            len(enc.encode_to_numpy(t, allowed_special=set(), disallowed_special=())) for t in texts
        ]
    counts: list[int] = (np.diff(ends, prepend=-1) - 1).tolist()
    return counts


#: the runs a batch is cut into, as shares of its characters: a large one per thread
#: first, then small ones that threads take as they finish (so that they finish together
#: however uneven the work per character is: CJK, long lines, other work on the CPUs)
def _shares(k: int) -> list[float]:
    return [0.6 / k] * k + [0.4 / (8 * k)] * (8 * k) if k > 1 else [1.0]


class PendingCounts:
    """Exact counts of a batch, being computed on background threads (see ``count_batch``).

    The batch is cut into runs of texts, each counted by one tiktoken call on one of the
    threads; ``result()`` waits and returns the counts in the batch's order (or raises
    what a thread raised). tiktoken holds no GIL while it encodes, so the caller's own
    Python runs meanwhile. A small batch is one run, counted by ``result()`` itself.

    The calling thread never takes a run while threads count the rest: with the calling
    thread and one fresh thread counting at once, every other batch ran at half speed here
    (tiktoken 0.14, 2 CPUs; two fresh threads, or one thread alone, never did).
    """

    def __init__(self, enc: Any, texts: Sequence[str], threads: int) -> None:
        self._enc = enc
        self._texts = texts
        self._sep = _separator(enc)
        self._counts: list[int] = [0] * len(texts)
        self._error: BaseException | None = None
        ends = list(itertools.accumulate(map(len, texts)))
        total = ends[-1] if ends else 0
        k = threads if total >= _PARALLEL_CHARS and len(texts) >= 2 else 1
        bounds = [0]
        edge = 0.0
        for share in _shares(k)[:-1]:
            edge += share * total
            bounds.append(min(max(bisect.bisect_left(ends, edge) + 1, bounds[-1]), len(texts)))
        bounds.append(len(texts))
        self._runs = [(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
        self._next = itertools.count()  # next() on it is atomic: threads take runs from it
        self._threads = [helper_thread(self._work, "ctxscope-count") for _ in range(k) if k > 1]
        for th in self._threads:
            th.start()
        self._done = False

    def _work(self) -> None:
        runs = self._runs
        sep, sep_id = self._sep
        try:
            while self._error is None:
                r = next(self._next)
                if r >= len(runs):
                    return
                lo, hi = runs[r]
                self._counts[lo:hi] = _count_joined(self._enc, self._texts[lo:hi], sep, sep_id)
        except BaseException as exc:  # handed to result()
            self._error = exc

    def result(self) -> list[int]:
        if not self._done:
            self._done = True
            for th in self._threads:
                th.join()
            if not self._threads:
                self._work()
        if self._error is not None:
            raise self._error
        return self._counts

    def ready(self) -> bool:
        return not any(th.is_alive() for th in self._threads)


def count_batch(enc: Any, texts: Sequence[str]) -> list[int]:
    """Exact token counts of many texts, as ``encode_ordinary`` counts each one.

    The texts are cut into runs counted by one thread per CPU (``COUNT_THREADS``), each run
    by a single tiktoken call (``_count_joined``); a small batch is one run, on the calling
    thread. Tests check every count against ``encode_ordinary``."""
    return PendingCounts(enc, texts, COUNT_THREADS).result()


# --------------------------------------------------------------------------- backends


class Pending(Protocol):
    """Counts being made for a batch; ``result()`` waits for them, in the batch's order."""

    def result(self) -> list[int]: ...

    def ready(self) -> bool:
        """Whether ``result()`` would return without waiting for other work (a batch too
        small for threads, counted by ``result()`` itself, is ready)."""
        ...


class CountingBackend(Protocol):
    """What makes the exact counts of one encoding: each count is ``encode_ordinary``'s.

    tiktoken is the reference and the fallback; a faster backend stands in for it only
    where it was verified (docs/design.md, The pipeline)."""

    @property
    def label(self) -> str: ...

    def start(self, texts: Sequence[str], threads: int) -> Pending: ...

    def head(self, text: str, max_tokens: int) -> tuple[str, int] | None:
        """The text of the first ``max_tokens`` ids of ``text``'s encoding, decoded and cut
        at the last whole character, and how many ids the whole text has; None where this
        backend does not cut (``TokenCounter.truncate`` then decodes tiktoken's ids)."""
        ...


class TiktokenBackend:
    """Counts with tiktoken itself: joined runs on threads (``PendingCounts``)."""

    def __init__(self, enc: Any) -> None:
        import tiktoken

        self.enc = enc
        self.label = f"tiktoken {tiktoken.__version__}"

    def start(self, texts: Sequence[str], threads: int) -> Pending:
        if len(texts) == 1:
            return _Done([len(self.enc.encode_ordinary(texts[0]))])
        return PendingCounts(self.enc, texts, threads)

    def head(self, text: str, max_tokens: int) -> tuple[str, int] | None:
        return None


class _Done:
    def __init__(self, counts: list[int]) -> None:
        self._counts = counts

    def result(self) -> list[int]:
        return self._counts

    def ready(self) -> bool:
        return True


class _Background:
    """``fn(texts, threads)`` run on one background thread when the batch is large enough
    to be worth threads (``fn`` spreads it over them itself), else ``fn(texts, 1)`` run by
    ``result()``: for a few short texts a pool costs more than it saves."""

    def __init__(
        self, fn: Callable[[list[str], int], list[int]], texts: Sequence[str], threads: int
    ) -> None:
        self._fn = fn
        self._texts = list(texts)
        self._threads = 1
        self._counts: list[int] | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if sum(map(len, self._texts)) >= _PARALLEL_CHARS:
            self._threads = threads
            self._thread = helper_thread(self._work, "ctxscope-count")
            self._thread.start()

    def _work(self) -> None:
        try:
            self._counts = self._fn(self._texts, self._threads)
        except BaseException as exc:  # handed to result()
            self._error = exc

    def result(self) -> list[int]:
        if self._thread is not None:
            self._thread.join()
        elif self._counts is None and self._error is None:
            self._work()
        if self._error is not None:
            raise self._error
        assert self._counts is not None
        return self._counts

    def ready(self) -> bool:
        return self._thread is None or not self._thread.is_alive()


def _as_tiktoken_reads(text: str) -> str:
    """``text`` as tiktoken encodes it: tiktoken turns a string that is not valid UTF-8
    (lone surrogates) into UTF-16 and back with replacement before encoding."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


#: code points toktok-rs 0.3.0 reads as letters, digits or marks and tiktoken 0.14 does not:
#: those Unicode 17 assigned (toktok's character tables are Unicode 17, tiktoken's regex
#: engine's are older), found by counting every code point in context with both
#: (tests/test_tokens_backends.py). A text holding one is counted by tiktoken.
TOKTOK_DIFFERS: tuple[tuple[int, int], ...] = (
    (0x088F, 0x088F),
    (0x0C5C, 0x0C5C),
    (0x0CDC, 0x0CDC),
    (0x1ACF, 0x1AEB),
    (0xA7CE, 0xA7CF),
    (0xA7D2, 0xA7D2),
    (0xA7D4, 0xA7D4),
    (0xA7F1, 0xA7F1),
    (0x10940, 0x10959),
    (0x10EC5, 0x10EC7),
    (0x10EFA, 0x10EFB),
    (0x11B60, 0x11B67),
    (0x11DB0, 0x11DDB),
    (0x11DE0, 0x11DE9),
    (0x16EA0, 0x16ED3),
    (0x16FF2, 0x16FF6),
    (0x187F8, 0x187FF),
    (0x18D09, 0x18D1E),
    (0x18D80, 0x18DF2),
    (0x1E6C0, 0x1E6FF),
    (0x2B73A, 0x2B73F),
    (0x2CEA2, 0x2CEAD),
    (0x323B0, 0x33479),
)
_DIFFERS_RE = re.compile("[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in TOKTOK_DIFFERS) + "]")


def _bmp_utf8_prefixes() -> tuple[bytes, ...]:
    """UTF-8 prefixes covering every BMP code point in ``TOKTOK_DIFFERS``: a range's first
    two bytes (its block of 64), a lone code point's three, less those a shorter one
    covers. A superset: a byte search is ~100x faster than a regex on text, and a hit
    only sends the batch to the exact check."""
    found = {
        chr(c).encode()[: 3 if a == b else 2]
        for a, b in TOKTOK_DIFFERS
        if b <= 0xFFFF
        for c in range(a, b + 1)
    }
    return tuple(sorted(p for p in found if not any(p != q and p.startswith(q) for q in found)))


_DIFFERS_BMP_UTF8 = _bmp_utf8_prefixes()
#: those prefixes by their first byte
_DIFFERS_BY_LEAD: tuple[tuple[bytes, tuple[bytes, ...]], ...] = tuple(
    (p0, tuple(p for p in _DIFFERS_BMP_UTF8 if p[:1] == p0))
    for p0 in sorted({p[:1] for p in _DIFFERS_BMP_UTF8})
)


def _may_differ(text: str) -> bool:
    """Whether ``text`` might hold a code point of ``TOKTOK_DIFFERS`` (never False if it does).

    Every astral one is U+10000-U+3FFFF outside the emoji plane U+1F000-U+1FFFF, so its
    UTF-8 starts with F0 not followed by 9F."""
    if text.isascii():
        return False
    raw = text.encode("utf-8", "surrogatepass")
    # a single byte is found with memchr (GB/s), a longer needle far more slowly: where a
    # needle's first byte is rare, the needle is checked only there
    at = _offsets(raw, b"\xf0")
    if at is None:
        if raw.count(b"\xf0") != raw.count(b"\xf0\x9f"):
            return True
    elif any(raw[i + 1 : i + 2] != b"\x9f" for i in at):
        return True
    for lead, prefixes in _DIFFERS_BY_LEAD:
        at = _offsets(raw, lead)
        if at is None:
            if any(p in raw for p in prefixes):
                return True
        elif any(raw.startswith(prefixes, i) for i in at):
            return True
    return False


#: past this many of a byte, the needles it starts are searched for whole
_FEW = 256


def _offsets(raw: bytes, byte: bytes) -> list[int] | None:
    """Where ``byte`` is in ``raw`` (found with memchr), or None past ``_FEW`` of them."""
    if raw.count(byte) > _FEW:
        return None
    out: list[int] = []
    i = raw.find(byte)
    while i >= 0:
        out.append(i)
        i = raw.find(byte, i + 1)
    return out


class ToktokBackend:
    """Counts with toktok-rs: a Rust BPE counter with tiktoken's ids that never builds
    them, releases the GIL and spreads a batch over ``threads`` CPUs.

    Only made by ``get_backend``, after ``self_check`` passed for this encoding; texts
    holding a code point it classes differently (``TOKTOK_DIFFERS``) go to tiktoken."""

    def __init__(self, tok: Any, enc: Any, version: str) -> None:
        self.tok = tok
        self.enc = enc
        self.label = f"toktok-rs {version}"

    def _toktok(self, texts: list[str], threads: int) -> list[int]:
        counts: list[int] = self.tok.count_batch(texts, threads, False)
        return counts

    def count(self, texts: list[str], threads: int) -> list[int]:
        try:
            if not _may_differ("".join(texts)):
                return self._toktok(texts, threads)
            odd = [i for i, t in enumerate(texts) if _DIFFERS_RE.search(t)]
            counts = self._toktok(texts, threads)
        except UnicodeEncodeError:
            # lone surrogates: count the text tiktoken reads, where a surrogate pair has
            # become the character it spells (which may be one of TOKTOK_DIFFERS)
            return self.count([_as_tiktoken_reads(t) for t in texts], threads)
        for i in odd:
            counts[i] = len(self.enc.encode_ordinary(texts[i]))
        return counts

    def start(self, texts: Sequence[str], threads: int) -> Pending:
        return _Background(self.count, texts, threads)

    def head(self, text: str, max_tokens: int) -> tuple[str, int] | None:
        """toktok's cut: it counts the text and cuts at the byte offset of id
        ``max_tokens`` in one pass, building no ids and decoding nothing (the cut is a
        character boundary: a character split between ids is left out, as tiktoken's
        decoded U+FFFD is). Not for text tiktoken reads differently (lone surrogates) or
        that holds a code point the two class differently (``TOKTOK_DIFFERS``)."""
        if _may_differ(text) and _DIFFERS_RE.search(text):
            return None
        try:
            cut, total = self.tok.truncate(text, max_tokens)
        except UnicodeEncodeError:
            return None
        return str(cut), int(total)


#: toktok-rs versions and the encodings each was verified on, text for text, against
#: tiktoken (tests/test_tokens_backends.py, in CI): any other version or encoding counts
#: with tiktoken. Adding a version here means running that test on it first.
TOKTOK_VERIFIED: dict[str, tuple[str, ...]] = {"0.3.0": ("cl100k_base", "o200k_base")}

#: texts the self-check counts with both backends: what BPE pre-tokenisers get wrong first
#: (contractions and case, digit runs, whitespace before and at the end of a text, CRLF,
#: scripts with combining marks, emoji sequences, special-token text, lone surrogates)
SELF_CHECK_SAMPLE: tuple[str, ...] = (
    "",
    " ",
    "hello world",
    "I'm sure they've said it's what we'd do; THEY'LL SAY IT'S 'OK'.",
    "HelloWorld camelCase ABCdef XMLHttpRequest snake_case_name __init__",
    "1 12 123 1234 12345 3.14159 1,000,000 0x1F 2026-11-30T23:59:59Z",
    "def f(x: int) -> list[int]:\n    return [i ** 2 for i in range(x)]  # squares\n",
    "line one\r\nline two\r\n\r\n\ttabbed\t\t\n   \n  trailing   ",
    "\n\n\n",
    "a" * 3000,
    " " * 513 + "x" + "\n" * 257,
    "结论：测试失败。日本語のテキスト、한국어 문장입니다.",
    "नमस्ते दुनिया — عربي مرحبا بالعالم — ελληνικά — кириллица",
    "e\u0301 n\u0303 \u00e9 \ufb01 \u2028 \u00a0nbsp \u200bzero-width",
    "👩‍👩‍👧‍👦 🏳️‍🌈 🧠🧠 \U0001f600",
    "<|endoftext|> a <|fim_prefix|><|fim_middle|><|fim_suffix|> <|endofprompt|><|im_start|>",
    "\x00\x01\x7f\x80\xff control bytes",
    "lone \ud800 surrogate \udfff",
    '{"role": "tool", "content": "ERROR: test_x.py::test_y FAILED (AssertionError)"}',
)


def self_check(tok: Any, enc: Any) -> str | None:
    """Why ``tok`` must not stand in for the tiktoken encoding ``enc``, or None if it may.

    Its vocabulary must be tiktoken's, byte for byte and rank for rank (tiktoken loaded it
    from the file ctxscope ships, checked against its pinned SHA-256), its special tokens
    the same, and its counts of ``SELF_CHECK_SAMPLE`` tiktoken's."""
    ranks: dict[bytes, int] = enc._mergeable_ranks
    values: list[bytes] = tok.token_byte_values()
    if len(values) != len(ranks) or any(ranks.get(b) != i for i, b in enumerate(values)):
        return "its vocabulary differs from the rank file ctxscope ships"
    if dict(tok.special_tokens()) != enc._special_tokens:
        return "its special tokens differ from tiktoken's"
    sample = [_as_tiktoken_reads(t) for t in SELF_CHECK_SAMPLE]
    want = [len(enc.encode_ordinary(t)) for t in SELF_CHECK_SAMPLE]
    if tok.count_batch(sample, 1, False) != want:
        return "its counts of the self-check sample differ from tiktoken's"
    return None


_backends: dict[str, CountingBackend] = {}
#: why the fast backend is not counting an encoding (shown by ``backend_label``)
_fallback_reasons: dict[str, str] = {}
_backend_lock = threading.Lock()


def _load_toktok(name: str, enc: Any) -> ToktokBackend | str:
    """The toktok-rs backend for ``name``, or why it cannot be used."""
    try:
        import toktok
    except ImportError:
        return "toktok-rs is not installed"
    version = str(toktok.__version__)
    if name not in TOKTOK_VERIFIED.get(version, ()):
        return f"toktok-rs {version} was not verified on {name}"
    try:
        # the vocabulary is compiled into toktok's extension: nothing is read or downloaded
        tok = toktok._encoding(name)
        problem = self_check(tok, enc)
    except Exception as exc:  # a broken build must not stop counting: tiktoken counts
        return f"toktok-rs could not load or check {name} ({type(exc).__name__}: {exc})"
    if problem is not None:
        return f"toktok-rs {version} failed its self-check on {name}: {problem}"
    return ToktokBackend(tok, enc, version)


#: Where exact counts are made while not in this process (``count_elsewhere``): the
#: backend of each encoding name, from ``counting.CountingProcess.backend``.
_elsewhere: Callable[[str], CountingBackend] | None = None


def count_elsewhere(backend_of: Callable[[str], CountingBackend] | None) -> None:
    """Have exact counts made by ``backend_of(name)`` (another process's backend: the same
    counts, docs/design.md "Capture, import, export, redaction") until called with None."""
    global _elsewhere
    _elsewhere = backend_of


def get_backend(name: str) -> CountingBackend:
    """The backend that counts the exact encoding ``name`` in this process (loaded once),
    or the one of ``count_elsewhere`` while it is set."""
    if _elsewhere is not None and name in ENCODINGS:
        return _elsewhere(name)
    backend = _backends.get(name)
    if backend is not None:
        return backend
    enc = get_encoding(name)
    with _backend_lock:
        backend = _backends.get(name)
        if backend is None:
            fast = _load_toktok(name, enc)
            if isinstance(fast, str):
                _fallback_reasons[name] = fast
                backend = TiktokenBackend(enc)
            else:
                backend = fast
            _backends[name] = backend
    return backend


_preloading: dict[str, threading.Thread] = {}
_preload_lock = threading.Lock()


def preload(name: str) -> None:
    """Start loading the backend of the encoding ``name`` on a thread, beside the caller's
    work (a session log's reader: docs/design.md, "Capture, import, export, redaction"):
    toktok's vocabulary first, whose build releases the GIL, then tiktoken's and the
    self-check. A counter asking for it meanwhile waits for the load (``get_backend``'s
    lock); a load that fails is tried again, and said, by the counter that asks."""
    if name not in ENCODINGS or name in _backends:
        return
    if _elsewhere is not None:  # the other process starts loading it
        _elsewhere(name)
        return
    with _preload_lock:  # not the backends' lock: the load holds that one
        if name in _preloading:
            return
        thread = _preloading[name] = helper_thread(
            lambda: _preload(name), f"load-{name}", daemon=True
        )
    thread.start()


def loading(name: str) -> bool:
    """Whether ``preload`` is loading ``name`` still (a counter asking now would wait; a
    counting process is asked at once, and loads before it answers)."""
    if _elsewhere is not None:
        return False
    thread = _preloading.get(name)
    return thread is not None and thread.is_alive()


def _preload(name: str) -> None:
    try:
        import toktok

        if name in TOKTOK_VERIFIED.get(str(toktok.__version__), ()):
            toktok._encoding(name)  # cached by toktok; ``_load_toktok`` finds it built
    except Exception:  # noqa: S110 - get_backend says why, when a counter asks
        pass
    try:
        get_backend(name)
    except TokenizerError:
        pass  # the counter that asks says why


def backend_label(name: str) -> str:
    """Which backend counts ``name`` and, if it is tiktoken, why the fast one does not."""
    label = get_backend(name).label
    reason = _fallback_reasons.get(name)
    return f"{label} ({reason})" if reason else label


#: The most characters of text a ``TokenCounter`` keeps counts for. Past it the cache starts
#: over (a long import or a store's diagnostics would otherwise keep every text ever counted
#: alive: 86 MB of keys after a 40 MB session log); ~32 M characters is far more than any one
#: build's texts, so a warm re-run still finds all of its own.
CACHE_MAX_CHARS = 32_000_000


@dataclass
class TokenCounter:
    """Counts tokens with one tokenizer, caching by content.

    The cache is a dict keyed by the text itself: Python hashes a string's content once
    and keeps the hash on the object, so a warm re-run over the same strings costs one
    dict lookup per text. ``misses`` counts texts actually sent to the tokenizer. It holds
    at most ``max_chars`` characters of text (``CACHE_MAX_CHARS``), then starts over;
    counts are always answered from what was just counted, so a cache emptied by another
    thread meanwhile never loses one.
    """

    name: str
    _fn: Callable[[str], int] | None = None
    _cache: dict[str, int] = field(default_factory=dict)
    misses: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    max_chars: int = CACHE_MAX_CHARS
    _chars: int = 0

    def __post_init__(self) -> None:
        if self.name in ESTIMATORS:
            self._fn = ESTIMATORS[self.name]
        elif self.name in ENCODINGS:
            get_backend(self.name)  # fail now, with the actionable message
        else:
            raise TokenizerError(
                f"unknown tokenizer {self.name!r}; choose one of {', '.join(TOKENIZERS)}"
            )

    @property
    def exact(self) -> bool:
        return self._fn is None

    @property
    def cached_chars(self) -> int:
        """Characters of text the cache holds counts for now."""
        return self._chars

    def _raw_many(self, texts: list[str]) -> list[int]:
        if self._fn is not None:
            return [self._fn(t) for t in texts]
        return get_backend(self.name).start(texts, COUNT_THREADS).result()

    def _keep(self, got: dict[str, int]) -> None:
        """Add fresh counts (under the lock), starting over when the cache is full."""
        size = sum(map(len, got))
        if self._chars + size > self.max_chars:
            self._cache = {}
            self._chars = 0
        if size <= self.max_chars:
            self._cache.update(got)
            self._chars += size

    @staticmethod
    def _answer(texts: Sequence[str], got: dict[str, int], cache: dict[str, int]) -> list[int]:
        """Each text's count: from what was just counted, else from ``cache``, the dict that
        was the cache when the call began and held every other text. A full cache is
        replaced, never emptied, so that dict still holds them whatever other threads did."""
        if not got:
            return [cache[t] for t in texts]
        return [n if (n := got.get(t)) is not None else cache[t] for t in texts]

    def count_many_started(self, texts: Sequence[str]) -> Callable[[], list[int]]:
        """``count_many`` started now on background threads; call the result to wait.

        For an exact tokenizer the uncached texts are counted on threads while the caller
        goes on (``CountingBackend.start``); estimators count when the result is asked."""
        return self.count_many_pending(texts).result

    def count_many_pending(self, texts: Sequence[str]) -> Pending:
        """``count_many_started`` as a ``Pending``: ``result()`` waits for the counts,
        ``ready()`` says whether it would (a reader goes on reading while it would)."""
        cache = self._cache
        if self._fn is not None:
            return _Later(self.count_many, texts)
        # with nothing cached there is nothing to look up: counting starts at once and the
        # texts are hashed meanwhile (a text given twice is then counted twice, alike)
        todo = list(texts) if not cache else [t for t in dict.fromkeys(texts) if t not in cache]
        if not todo:
            return _Later(self.count_many, texts)
        return _Cached(self, texts, todo, cache, get_backend(self.name).start(todo, COUNT_THREADS))

    def count(self, text: str) -> int:
        hit = self._cache.get(text)
        if hit is not None:
            return hit
        (n,) = self._raw_many([text])
        with self._lock:
            self._keep({text: n})
            self.misses += 1
        return n

    def count_many(self, texts: Sequence[str]) -> list[int]:
        cache = self._cache
        missing = [t for t in dict.fromkeys(texts) if t not in cache]
        got: dict[str, int] = {}
        if missing:
            got = dict(zip(missing, self._raw_many(missing), strict=True))
            with self._lock:
                self._keep(got)
                self.misses += len(missing)
        return self._answer(texts, got, cache)

    def encode(self, text: str) -> list[int]:
        if self._fn is not None:
            raise TokenizerError(f"{self.name} is an estimator and cannot encode text")
        return list(get_encoding(self.name).encode_ordinary(text))

    def decode(self, ids: Iterable[int]) -> str:
        if self._fn is not None:
            raise TokenizerError(f"{self.name} is an estimator and cannot decode tokens")
        return str(get_encoding(self.name).decode(list(ids)))

    def _head_ids(self, text: str, at_least: int) -> list[int]:
        """The first ids of ``text``'s encoding, at least ``at_least`` of them (or all).

        Encodes a prefix of the text that ends where a line break is followed by a letter:
        there the cl100k_base and o200k_base patterns always start a new piece (no piece
        reaches across a line break into a word), and the pieces before it are the same
        whether the text goes on or not, so the prefix's ids are the first ids of the whole
        text. Shortening a 10,000-token message to 400 tokens then encodes a few thousand
        characters, not the message (tests/test_tokens.py compares with the full encoding).
        """
        start = at_least * 6  # characters; a prefix with too few ids is doubled
        while start < len(text):
            cut = _line_start(text, start)
            if cut < 0:
                break
            ids = self.encode(text[:cut])
            if len(ids) >= at_least:
                return ids
            start = 2 * cut
        return self.encode(text)

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` with at most ``max_tokens`` tokens: the first
        ``max_tokens`` ids of its encoding, decoded, less a character split at the cut.

        Exact tokenizers cut a prefix of the text that ends where a line break is followed
        by a letter (``_head_ids``): its first ids are the whole text's. Where the counting
        backend cuts (toktok-rs, verified against tiktoken's decoded ids in
        tests/test_tokens_backends.py), no ids are built; else tiktoken's are decoded."""
        if max_tokens <= 0:
            return ""
        known = self._cache.get(text)
        if known is not None and known <= max_tokens:
            return text
        if self._fn is not None:
            return self._estimated_head(text, max_tokens)
        backend = get_backend(self.name)
        start = max_tokens * 6  # characters; a prefix with too few tokens is doubled
        while True:
            cut = _line_start(text, start) if start < len(text) else -1
            part = text if cut < 0 else text[:cut]
            got = backend.head(part, max_tokens)
            if got is None:
                return self._decoded_head(text, max_tokens)
            head, total = got
            if cut < 0:
                if known is None:
                    with self._lock:
                        self._keep({text: total})
                        self.misses += 1
                return text if total <= max_tokens else head.rstrip("\ufffd")
            if total >= max_tokens:
                return head.rstrip("\ufffd")
            start = 2 * cut

    def _decoded_head(self, text: str, max_tokens: int) -> str:
        if self.count(text) <= max_tokens:
            return text
        ids = self._head_ids(text, max_tokens)
        # A multi-byte character split at the cut decodes to U+FFFD; drop it.
        return self.decode(ids[:max_tokens]).rstrip("\ufffd")

    def _estimated_head(self, text: str, max_tokens: int) -> str:
        """Estimators: binary search on the character length."""
        if self.count(text) <= max_tokens:
            return text
        lo, hi = 0, len(text)
        assert self._fn is not None
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._fn(text[:mid]) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo]


class _Later:
    """Counts made when asked (``fn(texts)`` by ``result()``): ready at once."""

    def __init__(self, fn: Callable[[Sequence[str]], list[int]], texts: Sequence[str]) -> None:
        self._fn = fn
        self._texts = texts

    def result(self) -> list[int]:
        return self._fn(self._texts)

    def ready(self) -> bool:
        return True


class _Cached:
    """A ``TokenCounter``'s counts of ``texts`` while the backend counts ``todo`` (the ones
    not cached): kept in the cache when they come, each text answered from them or from
    ``cache`` (``TokenCounter._answer``)."""

    def __init__(
        self,
        counter: TokenCounter,
        texts: Sequence[str],
        todo: list[str],
        cache: dict[str, int],
        pending: Pending,
    ) -> None:
        self._counter = counter
        self._texts = texts
        self._todo = todo
        self._cache = cache
        self._pending = pending

    def result(self) -> list[int]:
        counter = self._counter
        got = dict(zip(self._todo, self._pending.result(), strict=True))
        with counter._lock:
            counter._keep(got)
            counter.misses += len(got)
        return counter._answer(self._texts, got, self._cache)

    def ready(self) -> bool:
        return self._pending.ready()


def _line_start(text: str, start: int) -> int:
    """The first index ≥ ``start`` that follows a line break and holds a letter, or -1."""
    i = text.find("\n", max(start - 1, 0))
    while i >= 0:
        if i + 1 < len(text) and text[i + 1].isalpha():
            return i + 1
        i = text.find("\n", i + 1)
    return -1


_counters: dict[str, TokenCounter] = {}
_counters_lock = threading.Lock()


def get_counter(name: str = DEFAULT_ENCODING) -> TokenCounter:
    """The process-wide cached counter for a tokenizer name."""
    counter = _counters.get(name)
    if counter is None:
        with _counters_lock:
            counter = _counters.get(name)
            if counter is None:
                counter = TokenCounter(name)
                _counters[name] = counter
    return counter


def drift(estimate: int, exact: int) -> float:
    """Relative error of an estimate against the exact count (0.0 when both are 0)."""
    if exact == 0:
        return 0.0 if estimate == 0 else math.inf
    return (estimate - exact) / exact
