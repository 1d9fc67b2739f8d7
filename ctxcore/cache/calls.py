"""What the simulated cache says of one call (``CallCache``) and why it read less than it
could have (``CacheBreak``) (docs/design.md, "Prompt cache")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from ctxcore.cache.prompts import Block

#: where a cached prefix broke: the first differing block's part, or the model / lifetime
BreakBlock = Literal["tools", "system", "messages", "model", "expired"]
#: a per-call difference of at most this share of the recorded read counts as alike
CALL_TOLERANCE = 0.05


@dataclass(frozen=True)
class CacheBreak:
    """Why a call read a shorter cached prefix than it could have (docs/design.md, "Prompt
    cache", Breaks): where the prompt first differs from the previous call's, the kind of
    change, the tokens written again and what that cost beyond reading them."""

    #: where the prefix first differs (or the model changed / the entry expired)
    block: BreakBlock
    #: tools_reordered | tools_added | tools_removed | tools_changed | system_changed |
    #: history_edited | compaction | context_edit | expired | model_changed | below_minimum |
    #: lookback
    kind: str
    #: the message index (block ``messages``) or tool index, else None
    index: int | None
    #: the packet / message id of the first differing block, if known
    packet: str | None
    #: one sentence on what changed
    reason: str
    #: prompt tokens re-written that the previous prefix would have served
    tokens: int
    #: what re-writing them cost beyond reading them (None: unknown price)
    cost_usd: float | None
    #: the advice
    fix: str
    #: the provider's own miss reason, where a reply records one
    provider_reason: str | None = None


@dataclass(frozen=True)
class CallCache:
    """What the simulation says of one call, beside what was billed."""

    trace_id: str
    at: datetime
    model: str
    blocks: tuple[Block, ...]
    #: the last block of the prefix read (-1: nothing read)
    read_upto: int
    #: the trace id of the call that wrote (or last refreshed) the prefix read
    read_from: str | None
    #: the breakpoints written: (block index, prefix tokens); an automatic cache (OpenAI,
    #: Gemini) writes the whole prompt, at its last block
    written: tuple[tuple[int, int], ...]
    cache_read: int
    cache_write: int
    recorded_read: int | None
    recorded_write: int | None
    #: why the call read less than the previous call's prompt would have served (None: it
    #: read all it could, or it is the first call)
    cache_break: CacheBreak | None = None

    @property
    def hit(self) -> bool:
        return self.cache_read > 0

    @property
    def recorded_hit(self) -> bool | None:
        return None if self.recorded_read is None else self.recorded_read > 0

    @property
    def billed_differently(self) -> bool:
        """The provider billed a read the simulation does not predict (hit/miss differ, or
        the two figures differ by more than ``CALL_TOLERANCE`` of the recorded one)."""
        if self.recorded_read is None:
            return False
        diff = abs(self.cache_read - self.recorded_read)
        return self.hit != self.recorded_hit or diff > CALL_TOLERANCE * self.recorded_read
