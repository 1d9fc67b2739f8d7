"""The automatic prefix caches of OpenAI and Gemini (docs/design.md, "Prompt cache").

OpenAI, https://developers.openai.com/api/docs/guides/prompt-caching (read 2026-12-03, as
the search index holds it) and OpenAI's cookbook "Prompt Caching 201"
(https://github.com/openai/openai-cookbook, examples/Prompt_Caching_201.ipynb): caching is
automatic for prompts of 1,024 tokens or more; a hit needs an exact prefix and is counted in
increments of 128 tokens; an in-memory entry is typically cleared after 5 to 10 minutes of
inactivity and always within one hour of its last use. We take 10 minutes (``LIFETIME``).

Gemini, https://ai.google.dev/gemini-api/docs/caching (implicit caching; read 2026-12-03 as
the search index holds it, in versions that differ: the one updated 2026-05-07 lists
1,024 tokens for Gemini 2.5 Flash and 3 Flash Preview and 4,096 for Gemini 2.5 Pro and
3 Pro Preview; the one updated 2026-10-13 lists 2,048 for 2.5 Flash and 2.5 Pro and 4,096
for 3.1 Pro Preview and the 3.x Flash models): implicit caching is on for Gemini 2.5 and
newer, hits need a common prefix sent "in a short amount of time" (no lifetime is stated);
the minimum is the request's input tokens. We take the later table (``GEMINI_MIN``) and
5 minutes.

Each call's whole prompt is cached, and with it the reply it generated (a recorded reply's
output tokens): the next call of a conversation re-sends that reply and reads it from the
cache too. A call reads the longest prefix it shares with a live entry; the tokens of a
prefix that is a whole earlier prompt are that call's recorded input (exact), of any other
prefix our fitted block counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from ctxcore.cache.anthropic import Chain, Step, chain
from ctxcore.cache.prompts import Prompt, Provider

#: how long an entry lives after its last use, per provider
LIFETIME: dict[str, timedelta] = {
    "openai": timedelta(minutes=10),
    "gemini": timedelta(minutes=5),
}
#: OpenAI: no caching below this prompt length; reads in steps of ``OPENAI_STEP`` tokens
OPENAI_MIN = 1024
OPENAI_STEP = 128
#: Gemini implicit caching's minimum input per model, by name part (longest part wins)
GEMINI_MIN: dict[str, int] = {
    "gemini-2.5-flash": 2048,
    "gemini-2.5-pro": 2048,
    "gemini-3": 4096,
    "gemini-3-pro": 4096,
    "gemini-3.1-pro": 4096,
}
DEFAULT_GEMINI_MIN = 4096
#: live entries kept per cache (the most recently used)
MAX_ENTRIES = 16


def minimum(provider: Provider, model: str) -> int:
    """The shortest prompt an automatic cache serves or keeps for ``model``."""
    if provider == "openai":
        return OPENAI_MIN
    name = model.lower().rsplit("/", 1)[-1]
    best = max((k for k in GEMINI_MIN if k in name), key=len, default=None)
    return GEMINI_MIN[best] if best is not None else DEFAULT_GEMINI_MIN


def _step_of(provider: Provider) -> int:
    return OPENAI_STEP if provider == "openai" else 1


@dataclass
class AutoEntry:
    """One cached prompt: its prefix keys and tokens, the tokens of the reply cached after
    it, when it expires, the call that wrote or last read it."""

    keys: list[str]
    pos: list[int]
    reply: int
    expires: datetime
    by: str


def _shared(a: list[str], b: list[str]) -> int:
    """How many leading blocks two prompts share (their chain keys agree up to there:
    a binary search)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[mid - 1] == b[mid - 1]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _best(
    entries: list[AutoEntry], keys: list[str], pos: list[int], at: datetime
) -> tuple[AutoEntry | None, int, int]:
    """The live entry sharing the longest prefix: (entry, blocks shared, tokens served)."""
    best: tuple[AutoEntry | None, int, int] = (None, 0, 0)
    for e in entries:
        if e.expires < at:
            continue
        n = _shared(e.keys, keys)
        if n == 0:
            continue
        if n == len(e.keys):
            served = e.pos[-1] + min(e.reply, max(0, pos[-1] - e.pos[-1]))
        else:
            served = pos[n - 1]
        if served > best[2]:
            best = (e, n, served)
    return best


def step(
    entries: list[AutoEntry], p: Prompt, provider: Provider, chained: Chain | None = None
) -> Step:
    """One call against an automatic cache: read the longest live shared prefix (whole
    steps, a prompt of at least the minimum), refresh that entry, cache the whole prompt
    (``chained``: ``chain``'s)."""
    keys, pos = chain(p.model, p.blocks, chained)
    total = pos[-1] if pos else 0
    if not keys or total < minimum(provider, p.model):
        return Step(-1, None, (), 0, 0, 0, -1)
    life = LIFETIME[provider]
    entry, n, served = _best(entries, keys, pos, p.at)
    size = _step_of(provider)
    read = min(served, total) // size * size
    read_from = None
    if entry is not None and read > 0:
        entry.expires = p.at + life
        read_from = entry.by
    entries.append(AutoEntry(keys, pos, p.output_tokens, p.at + life, p.trace_id))
    if len(entries) > MAX_ENTRIES:
        entries.sort(key=lambda e: e.expires)
        del entries[: len(entries) - MAX_ENTRIES]
    upto = n - 1 if read > 0 else -1
    last = len(keys) - 1
    return Step(upto, read_from, ((last, total),), read, total - read, total, last)
