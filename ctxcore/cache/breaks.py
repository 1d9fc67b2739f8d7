"""Break attribution (docs/design.md, "Prompt cache", Breaks): why a call read a shorter
cached prefix than the previous call's prompt would have served, and what that cost.

The previous call (the one sent just before, in the same cache) left a prefix of ``extent``
tokens cached; the call could have read it all (an automatic cache: in whole steps). When it
read less, the cause is, in this order: the model changed (a cache serves one model); the
prompt differs from the previous one inside that prefix (its first differing block: the tool
list reordered, added to, removed from or changed; the system prompt changed, with the first
differing line; a compaction; a context edit, a tool result cleared or rewritten in place; any
other edit of the history); the lifetime passed between the two calls; the prompt is below the
model's minimum; (Anthropic) the breakpoints moved more than the look-back window past the
cached one. ``tokens`` is what had to be written again; ``cost_usd`` what that cost beyond
reading them (write price, or input price where the provider charges no write, less the read
price; ``None`` when the price table has no row or no read price for the model).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from ctxcore.cache.calls import BreakBlock, CacheBreak
from ctxcore.cache.prompts import Block, Prompt, Provider
from ctxcore.cost import PER, PriceTable


@dataclass(frozen=True)
class Where:
    """What the previous call left cached and how the next call met it: the provider, the
    first block where the two prompts differ, the tokens the call could have read, what it
    read, the lifetime of the entry, the model's minimum and whether the call's prompt
    reached it."""

    provider: Provider
    differs_at: int
    could: int
    read: int
    lifetime: timedelta
    minimum: int
    big_enough: bool


@dataclass(frozen=True)
class _Found:
    block: BreakBlock
    kind: str
    index: int | None
    packet: str | None
    reason: str
    fix: str


def first_difference(a: tuple[Block, ...], b: tuple[Block, ...]) -> int:
    """The first block where two prompts differ (the shorter one's length when one is a
    prefix of the other)."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i].key != b[i].key:
            return i
    return n


def _tools(prev: Block, cur: Block) -> _Found:
    """How the tool list changed: reordered, tools added or removed, a definition changed."""
    old = [n for n, _ in prev.tools]
    new = [n for n, _ in cur.tools]
    added = [n for n in new if n not in old]
    removed = [n for n in old if n not in new]
    fix = "keep the tool list fixed for the whole session (same tools, same order, same text)"
    if added:
        at = new.index(added[0])
        why = f"tool{'s' if len(added) > 1 else ''} added: {', '.join(added[:5])}"
        return _Found("tools", "tools_added", at, None, why, fix)
    if removed:
        at = old.index(removed[0])
        why = f"tool{'s' if len(removed) > 1 else ''} removed: {', '.join(removed[:5])}"
        return _Found("tools", "tools_removed", at, None, why, fix)
    if old != new:
        at = next(i for i, (x, y) in enumerate(zip(old, new, strict=True)) if x != y)
        why = f"tool list reordered: {old[at]!r} was at {at}, now {new[at]!r}"
        return _Found("tools", "tools_reordered", at, None, why, fix)
    at = next((i for i, (x, y) in enumerate(zip(prev.tools, cur.tools, strict=False)) if x != y), 0)
    name = new[at] if new else "?"
    return _Found("tools", "tools_changed", at, None, f"tool {name!r} definition changed", fix)


def _cut(line: str) -> str:
    return line if len(line) <= 80 else line[:77] + "..."


def _system(prev: Block, cur: Block) -> _Found:
    """The system prompt's first differing line."""
    fix = "move what changes (a date, a time, an id) out of the system prompt, after the cache"
    if prev.text is None or cur.text is None:
        return _Found("system", "system_changed", None, None, "system prompt changed", fix)
    a, b = prev.text.splitlines(), cur.text.splitlines()
    n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    old = _cut(a[n]) if n < len(a) else "(end)"
    new = _cut(b[n]) if n < len(b) else "(end)"
    why = f"system prompt changed at line {n + 1}: {old!r} -> {new!r}"
    return _Found("system", "system_changed", None, None, why, fix)


def _messages(prev: Prompt, cur: Prompt, d: int) -> _Found:
    """A message differs: a compaction, a context edit (a tool result changed in place) or
    another edit of the history."""
    index = sum(1 for b in cur.blocks[:d] if b.kind == "message")
    new = cur.blocks[d] if d < len(cur.blocks) else None
    old = prev.blocks[d]
    packet = (new or old).packet or (new or old).label
    if cur.compaction is not None and cur.compaction != prev.compaction:
        why = f"the context was compacted ({cur.compaction}): the summary replaces the history"
        fix = "compact less often, or keep the start of the history and compact after it"
        return _Found("messages", "compaction", index, packet, why, fix)
    if new is not None and new.packet and new.packet.startswith("compaction:"):
        why = "a compaction summary replaces the history"
        fix = "compact less often, or keep the start of the history and compact after it"
        return _Found("messages", "compaction", index, packet, why, fix)
    if new is not None and old.role == new.role == "tool" and old.label == new.label:
        why = f"tool result {packet} was cleared or rewritten in place"
        fix = "clear old tool results in batches, rarely, rather than one at a time"
        return _Found("messages", "context_edit", index, packet, why, fix)
    if new is None:
        why = f"the prompt ends at message {index}, before the previous one did"
    else:
        why = f"message {index} ({new.label}) differs from the previous call's ({old.label})"
    fix = "append to the history; do not edit, reorder or drop earlier messages"
    return _Found("messages", "history_edited", index, packet, why, fix)


def _differs(prev: Prompt, cur: Prompt, d: int) -> _Found:
    old = prev.blocks[d]
    new = cur.blocks[d] if d < len(cur.blocks) else None
    if new is not None and old.kind == new.kind == "tools":
        return _tools(old, new)
    if new is not None and old.kind == new.kind == "system":
        return _system(old, new)
    if old.kind in ("tools", "system", "unrecorded") or (new and new.kind != "message"):
        part: BreakBlock = "tools" if "tools" in (old.kind, new and new.kind) else "system"
        why = f"the {old.label} block changed"
        fix = "keep the system prompt and the tool list fixed for the whole session"
        kind = "tools_changed" if part == "tools" else "system_changed"
        return _Found(part, kind, None, None, why, fix)
    return _messages(prev, cur, d)


def _other(prev: Prompt, cur: Prompt, w: Where) -> _Found | None:
    """A cause outside the prompt's content: the lifetime, the minimum, the look-back."""
    gap = cur.at - prev.at
    if gap > w.lifetime:
        minutes = gap.total_seconds() / 60
        life = w.lifetime.total_seconds() / 60
        why = f"{minutes:.1f} minutes since the previous call, over the {life:g}-minute lifetime"
        fix = (
            "send the next call within the lifetime, or mark the prefix with a 1-hour ttl"
            if w.provider == "anthropic"
            else "send the next call within the lifetime (or ask for a longer retention)"
        )
        return _Found("expired", "expired", None, None, why, fix)
    if not w.big_enough:
        why = f"the prompt is below the model's minimum of {w.minimum:,} cacheable tokens"
        return _Found("messages", "below_minimum", None, None, why, "none needed: too short")
    if w.provider == "anthropic":
        why = "the breakpoints moved more than 20 blocks past the cached one"
        fix = "add a cache_control breakpoint nearer the end of the part that repeats"
        return _Found("messages", "lookback", None, None, why, fix)
    return None


def _cost(model: str, tokens: int, ttl: str, prices: PriceTable) -> float | None:
    row = prices.price(model)
    if row is None or row.cache_read is None:
        return None
    write = row.cache_write_1h if ttl == "1h" else row.cache_write_5m
    if write is None:
        write = row.input  # no write price: the provider bills written tokens as input
    return tokens * (write - row.cache_read) / PER


def attribute(prev: Prompt, cur: Prompt, w: Where, prices: PriceTable) -> CacheBreak | None:
    """The break of ``cur`` against the call before it, ``None`` when it read all it could
    (module docstring)."""
    if w.could <= 0 or w.read >= w.could:
        return None
    found: _Found | None
    if prev.model != cur.model:
        why = f"the model changed from {prev.model} to {cur.model}: a cache serves one model"
        fix = "keep one model per conversation (a side task can use its own session)"
        found = _Found("model", "model_changed", None, None, why, fix)
    else:
        d = w.differs_at
        before = sum(b.tokens for b in cur.blocks[:d])
        if d < len(prev.blocks) and before < w.could:
            found = _differs(prev, cur, d)
        else:
            found = _other(prev, cur, w)
    if found is None:
        return None
    tokens = min(w.could, cur.tokens) - w.read
    if tokens <= 0:
        return None
    ttl = next((b.breakpoint for b in reversed(cur.blocks) if b.breakpoint), None) or "5m"
    return CacheBreak(
        block=found.block,
        kind=found.kind,
        index=found.index,
        packet=found.packet,
        reason=found.reason,
        tokens=tokens,
        cost_usd=_cost(cur.model, tokens, ttl, prices),
        fix=found.fix,
        provider_reason=cur.provider_reason,
    )
