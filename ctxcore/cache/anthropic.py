"""Anthropic's prompt cache (docs/design.md, "Prompt cache"), by the rules of Anthropic's
prompt-caching page, https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching :

- the cached prefix is the whole prompt in the order ``tools`` -> ``system`` -> ``messages``
  up to and including a block marked with ``cache_control``; a write happens only at such a
  breakpoint, and only the last 4 breakpoints of a call are used;
- a read needs an identical prefix: from each breakpoint the system checks the block
  boundaries up to about 20 blocks back and uses the longest prefix an earlier call cached;
- a prefix shorter than the model's minimum cacheable length (1,024 / 2,048 / 4,096 tokens,
  ``MIN_CACHEABLE``) is not cached;
- an entry lives 5 minutes (or 1 hour with ``ttl: "1h"``) from its last use; every read
  refreshes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from ctxcore.cache.prompts import Block, Prompt, Ttl, key_of

#: each entry lives this long after its last use
LIFETIME: dict[str, timedelta] = {"5m": timedelta(minutes=5), "1h": timedelta(hours=1)}
#: block boundaries checked before each breakpoint ("approximately 20 blocks")
LOOKBACK = 20
#: breakpoints a call may use (only the last 4 count)
MAX_BREAKPOINTS = 4
#: the minimum cacheable prompt length per model, by name prefix (longest prefix wins)
MIN_CACHEABLE: dict[str, int] = {
    "claude-opus-4-5": 4096,
    "claude-haiku-4-5": 4096,
    "claude-opus-4": 1024,
    "claude-sonnet-4": 1024,
    "claude-3-7-sonnet": 1024,
    "claude-3-5-sonnet": 1024,
    "claude-3-opus": 1024,
    "claude-3-5-haiku": 2048,
    "claude-3-haiku": 2048,
}
#: a model the table does not name
DEFAULT_MIN_CACHEABLE = 1024


def min_cacheable(model: str) -> int:
    """The minimum cacheable prompt length of a Claude ``model`` (the longest matching name
    prefix; a provider path before the name is dropped)."""
    name = model.lower().rsplit("/", 1)[-1]
    best = ""
    for prefix in MIN_CACHEABLE:
        if prefix in name and len(prefix) > len(best):
            best = prefix
    return MIN_CACHEABLE[best] if best else DEFAULT_MIN_CACHEABLE


def chain(
    model: str, blocks: Sequence[Block], last: Chain | None = None
) -> tuple[list[str], list[int]]:
    """Each block boundary's prefix key (the model's cache: its name seeds the chain) and
    prefix tokens. With ``last`` (the session's ``Chain``), the keys of the blocks this
    prompt shares with the previous one it chained are taken from there, not hashed again."""
    keys: list[str] = []
    start = 0
    if last is not None:
        keys, start = last.shared(model, blocks)
    h = keys[-1] if keys else model
    for b in blocks[start:]:
        h = key_of(h, b.key)
        keys.append(h)
    pos: list[int] = []
    n = 0
    for b in blocks:
        n += b.tokens
        pos.append(n)
    if last is not None:
        last.keep(model, blocks, keys)
    return keys, pos


class Chain:
    """The last prompt a session's cache chained (its model, its blocks' keys, their prefix
    keys): consecutive calls share most of their prefix, whose keys need not be hashed
    again."""

    def __init__(self) -> None:
        self._model = ""
        self._blocks: list[str] = []
        self._keys: list[str] = []

    def shared(self, model: str, blocks: Sequence[Block]) -> tuple[list[str], int]:
        """The prefix keys of the leading blocks ``blocks`` shares with the last prompt
        (a copy) and how many there are."""
        if model != self._model:
            return [], 0
        n = 0
        for a, b in zip(self._blocks, blocks, strict=False):
            if a != b.key:
                break
            n += 1
        return self._keys[:n], n

    def keep(self, model: str, blocks: Sequence[Block], keys: list[str]) -> None:
        self._model = model
        self._blocks = [b.key for b in blocks]
        self._keys = keys


@dataclass
class Entry:
    """A cached prefix: its tokens, when it expires, its lifetime, the call that wrote or
    last refreshed it."""

    tokens: int
    expires: datetime
    ttl: Ttl
    by: str


@dataclass(frozen=True)
class Step:
    """One call against a cache: the last block read (-1: none), the call it was read from,
    the breakpoints written, the tokens read and written, and the prefix the call leaves
    cached (tokens, and its last block; -1: none): what the next call could read of it."""

    upto: int
    read_from: str | None
    written: tuple[tuple[int, int], ...]
    read: int
    write: int
    extent: int
    extent_upto: int


def _lookup(cache: dict[str, Entry], keys: list[str], marks: list[int], at: datetime) -> int:
    """The last block of the longest live prefix found from any breakpoint within the
    look-back window; -1 when none."""
    best = -1
    for b in marks:
        for j in range(b, max(-1, b - LOOKBACK - 1), -1):
            e = cache.get(keys[j])
            if e is not None and e.expires >= at:
                best = max(best, j)
                break
    return best


def step(cache: dict[str, Entry], p: Prompt, chained: Chain | None = None) -> Step:
    """One call against the cache: read the longest live prefix, refresh it, write the
    breakpoints after it that reach the model's minimum (``chained``: ``chain``'s)."""
    keys, pos = chain(p.model, p.blocks, chained)
    marks = [i for i, b in enumerate(p.blocks) if b.breakpoint is not None][-MAX_BREAKPOINTS:]
    upto = _lookup(cache, keys, marks, p.at)
    read_from = None
    if upto >= 0:
        e = cache[keys[upto]]
        read_from = e.by
        e.expires = p.at + LIFETIME[e.ttl]
    floor = min_cacheable(p.model)
    written: list[tuple[int, int]] = []
    for b in marks:
        ttl = p.blocks[b].breakpoint or "5m"
        if b > upto and pos[b] >= floor:
            cache[keys[b]] = Entry(pos[b], p.at + LIFETIME[ttl], ttl, p.trace_id)
            written.append((b, pos[b]))
    read = pos[upto] if upto >= 0 else 0
    write = (written[-1][1] - read) if written else 0
    last = written[-1][0] if written else upto
    return Step(upto, read_from, tuple(written), read, write, read + write, last)
