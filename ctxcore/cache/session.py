"""The simulated cache through a session's calls (docs/design.md, "Prompt cache"): each call
goes to its provider's cache (``provider_of`` its model: Anthropic's explicit breakpoints,
OpenAI's and Gemini's automatic prefix caches; a model of none of them is simulated as
Anthropic's), and a call that read less than the previous call left cached gets its break
(``breaks.attribute``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from ctxcore.cache import anthropic, automatic
from ctxcore.cache.breaks import Where, attribute, first_difference
from ctxcore.cache.calls import CallCache
from ctxcore.cache.prompts import Prompt, PromptReader, Provider, provider_of
from ctxcore.cost import PriceTable, price_table
from ctxcore.models import Trace


@dataclass
class SessionCache:
    """One cache (a session's calls, side chains included, share it), fed a call at a time
    in the order they were sent."""

    prices: PriceTable
    _explicit: dict[str, anthropic.Entry] = field(default_factory=dict)
    _auto: dict[str, list[automatic.AutoEntry]] = field(default_factory=dict)
    #: each session's last call (a side chain's break is found against its own calls)
    _prev: dict[str, tuple[Prompt, anthropic.Step]] = field(default_factory=dict)
    #: the last prompt chained, whose prefix keys the next call reuses
    _chain: anthropic.Chain = field(default_factory=anthropic.Chain)

    def _where(self, provider: Provider, p: Prompt, s: anthropic.Step) -> Where | None:
        """What the previous call left cached, as this call met it."""
        if p.session_id not in self._prev:
            return None
        prev, ps = self._prev[p.session_id]
        d = first_difference(prev.blocks, p.blocks)
        if provider == "anthropic":
            ttl = next((b.breakpoint for b in reversed(prev.blocks) if b.breakpoint), "5m")
            life = anthropic.LIFETIME[ttl or "5m"]
            least = anthropic.min_cacheable(p.model)
            could = ps.extent
            if 0 <= ps.extent_upto < d:  # intact: in this call's tokens
                could = sum(b.tokens for b in p.blocks[: ps.extent_upto + 1])
        else:
            life = automatic.LIFETIME[provider]
            least = automatic.minimum(provider, p.model)
            size = automatic.OPENAI_STEP if provider == "openai" else 1
            could = ps.extent // size * size
        return Where(provider, d, could, s.read, life, least, p.tokens >= least)

    def add(self, p: Prompt) -> CallCache:
        """One call against the cache, with its break when it read less than it could."""
        provider = provider_of(p.model) or "anthropic"
        if provider == "anthropic":
            s = anthropic.step(self._explicit, p, self._chain)
        else:
            s = automatic.step(self._auto.setdefault(p.model, []), p, provider, self._chain)
        where = self._where(provider, p, s)
        brk = None
        if where is not None:
            brk = attribute(self._prev[p.session_id][0], p, where, self.prices)
        self._prev[p.session_id] = (p, s)
        rec = p.recorded
        return CallCache(
            trace_id=p.trace_id,
            at=p.at,
            model=p.model,
            blocks=p.blocks,
            read_upto=s.upto,
            read_from=s.read_from,
            written=s.written,
            cache_read=s.read,
            cache_write=s.write,
            recorded_read=rec.cache_read_tokens if rec is not None else None,
            recorded_write=rec.cache_write_tokens if rec is not None else None,
            cache_break=brk,
        )


def iter_simulate(
    prompts: Iterable[Prompt], prices: PriceTable | None = None
) -> Iterator[CallCache]:
    """``simulate``, a call at a time."""
    cache = SessionCache(prices or price_table())
    for p in prompts:
        yield cache.add(p)


def simulate(prompts: Iterable[Prompt], prices: PriceTable | None = None) -> list[CallCache]:
    """The cache through ``prompts`` in the order given (one cache: a session's calls, side
    chains included, share it); breaks are priced by ``prices`` (the table in effect when
    not given)."""
    return list(iter_simulate(prompts, prices))


def simulate_session(traces: Iterable[Trace], prices: PriceTable | None = None) -> list[CallCache]:
    """The cache through one session's calls, in the order they were sent (``input.now``,
    then turn)."""
    ordered = sorted(traces, key=lambda t: (t.input.now, t.turn))
    reader = PromptReader()
    return simulate((reader.read(t) for t in ordered), prices)
