"""Simulated prompt caches, checked against the cache reads a provider billed, and why a
call's cached prefix broke (docs/design.md, "Prompt cache").

- ``prompts``: a call as a cache sees it (blocks in prefix order, their tokens, breakpoints);
- ``anthropic``: Anthropic's explicit ``cache_control`` cache;
- ``automatic``: OpenAI's and Gemini's automatic prefix caches;
- ``breaks``: break attribution; ``session``: the simulation through a session's calls;
- ``agreement``: simulated against recorded reads.
"""

from __future__ import annotations

from ctxcore.cache.agreement import Agreement, agreement
from ctxcore.cache.anthropic import (
    LIFETIME,
    LOOKBACK,
    MAX_BREAKPOINTS,
    MIN_CACHEABLE,
    min_cacheable,
)
from ctxcore.cache.calls import CALL_TOLERANCE, BreakBlock, CacheBreak, CallCache
from ctxcore.cache.prompts import (
    Block,
    BlockKind,
    Prompt,
    PromptReader,
    Provider,
    Ttl,
    prompt_of,
    provider_of,
)
from ctxcore.cache.session import SessionCache, iter_simulate, simulate, simulate_session

__all__ = [
    "CALL_TOLERANCE",
    "LIFETIME",
    "LOOKBACK",
    "MAX_BREAKPOINTS",
    "MIN_CACHEABLE",
    "Agreement",
    "Block",
    "BlockKind",
    "BreakBlock",
    "CacheBreak",
    "CallCache",
    "Prompt",
    "PromptReader",
    "Provider",
    "SessionCache",
    "Ttl",
    "agreement",
    "iter_simulate",
    "min_cacheable",
    "prompt_of",
    "provider_of",
    "simulate",
    "simulate_session",
]
