"""A simulated Anthropic prompt cache, checked against the cache reads a provider billed
(docs/design.md, "Prompt cache").

The rules are those of Anthropic's prompt-caching page,
https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching :

- the cached prefix is the whole prompt in the order ``tools`` -> ``system`` -> ``messages``
  up to and including a block marked with ``cache_control``; a write happens only at such a
  breakpoint, and only the last 4 breakpoints of a call are used;
- a read needs an identical prefix: from each breakpoint the system checks the block
  boundaries up to about 20 blocks back and uses the longest prefix an earlier call cached;
- a prefix shorter than the model's minimum cacheable length (1,024 / 2,048 / 4,096 tokens,
  ``MIN_CACHEABLE``) is not cached;
- an entry lives 5 minutes (or 1 hour with ``ttl: "1h"``) from its last use; every read
  refreshes it.

What the traces do not hold is Anthropic's token count of each block. A call's prompt is cut
into blocks (``Block``): the tool definitions, the system prompt, each message in order
(history, tool results and the query, placed by their message index). Each block is counted
with cl100k_base; when the trace records the prompt's total (``outcome.tokens.input_tokens``)
and the system prompt and tools were not recorded (a session log), the part nobody recorded is
one ``unrecorded`` block of ``input_tokens`` minus the counted messages; otherwise the counts
are scaled so that they sum to ``input_tokens``. A prefix's tokens are therefore the
provider's count of the whole prompt less our count of what follows it.

Breakpoints come from the marks the importer kept (``metadata.import.cache_control``: the
path of each marked block, without its ``ttl``, so every mark is taken as 5 minutes unless
the caller builds its own ``Prompt``). A Claude Code session log records no marks; Claude
Code's placement is assumed: the end of the (unrecorded) system prompt and the last message.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from ctxcore.models import TokenUsage, Trace
from ctxcore.tokens import get_counter

Ttl = Literal["5m", "1h"]
BlockKind = Literal["tools", "system", "unrecorded", "message"]
Provider = Literal["anthropic", "openai", "gemini"]
#: where a cached prefix broke: the first differing block's part, or the model / lifetime
BreakBlock = Literal["tools", "system", "messages", "model", "expired"]

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
#: a per-call difference of at most this share of the recorded read counts as alike
CALL_TOLERANCE = 0.05

_MSG_ID = re.compile(r"^msg-(\d+)")
_MARK = re.compile(r"^(tools|system|messages)\[(\d+)\]")


def min_cacheable(model: str) -> int:
    """The minimum cacheable prompt length of ``model`` (the longest matching name prefix)."""
    best = ""
    for prefix in MIN_CACHEABLE:
        if model.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return MIN_CACHEABLE[best] if best else DEFAULT_MIN_CACHEABLE


@dataclass(frozen=True)
class Block:
    """One block of a prompt: its kind, a label (``tools``, ``system``, ``msg-3``...), a key
    of its content, its tokens and, when marked, the lifetime of its breakpoint."""

    kind: BlockKind
    label: str
    key: str
    tokens: int
    breakpoint: Ttl | None = None


@dataclass(frozen=True)
class Prompt:
    """One call as the cache sees it: when it was sent, the model, its blocks in prefix
    order, and the usage the provider recorded (``None`` when not recorded)."""

    trace_id: str
    at: datetime
    model: str
    blocks: tuple[Block, ...]
    recorded: TokenUsage | None = None


def provider_of(model: str) -> Provider | None:
    """The provider whose cache serves ``model``, by its name (a provider path such as
    ``openai/`` or ``models/`` dropped); ``None`` for a model of none of them."""
    name = model.lower().rsplit("/", 1)[-1]
    if name.startswith("claude") or ".anthropic." in model or model.startswith("anthropic."):
        return "anthropic"
    if name.startswith("gemini"):
        return "gemini"
    if name.startswith(("gpt-", "o1", "o3", "o4", "chatgpt", "codex")):
        return "openai"
    return None


@dataclass(frozen=True)
class CacheBreak:
    """Why a call read a shorter cached prefix than it could have (docs/design.md, "Prompt
    cache", Breaks): where the prompt first differs from the previous call's, the kind of
    change, the tokens written again and what that cost beyond reading them."""

    #: where the prefix first differs (or the model changed / the entry expired)
    block: BreakBlock
    #: tools_reordered | tools_added | tools_removed | tools_changed | system_changed |
    #: history_edited | compaction | context_edit | expired | model_changed | below_minimum
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
    #: the breakpoints written: (block index, prefix tokens)
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


@dataclass
class _Entry:
    tokens: int
    expires: datetime
    ttl: Ttl
    by: str


# --------------------------------------------------------------------------- prompts


def _key(*parts: str) -> str:
    return hashlib.sha1("\x00".join(parts).encode()).hexdigest()


def _index(ident: str | None) -> int | None:
    m = _MSG_ID.match(ident or "")
    return int(m.group(1)) if m else None


def _messages(trace: Trace) -> list[tuple[int, str, str]]:
    """The trace's messages in request order as (message index, label, text): history and
    tool-result packets by their message index; the query (the last user message, whose
    index the trace does not keep) at the first free index after the history's last user
    message."""
    inp = trace.input
    items: list[tuple[int, str, str]] = []
    for pos, m in enumerate(inp.history):
        idx = _index(m.id)
        calls = json.dumps(m.metadata.get("tool_calls"), sort_keys=True, default=str)
        items.append(
            (
                pos if idx is None else idx,
                m.id or f"history-{pos}",
                f"{m.role}\n{m.content}\n{calls}",
            )
        )
    for p in inp.packets:
        idx = p.metadata.get("message_index")
        at = idx if isinstance(idx, int) else (max((i for i, _, _ in items), default=-1) + 1)
        items.append((at, p.id, f"packet\n{p.content}"))
    if inp.query:
        users = [_index(m.id) for m in inp.history if m.role == "user"]
        last_user = max((u for u in users if u is not None), default=-1)
        taken = {i for i, _, _ in items}
        q = last_user + 1
        while q in taken:
            q += 1
        items.append((q, "query", f"user\n{inp.query}"))
    items.sort(key=lambda it: it[0])
    return items


def _import_meta(trace: Trace) -> dict[str, object]:
    meta = trace.metadata.get("import")
    return meta if isinstance(meta, dict) else {}


def _scaled(counts: list[int], total: int | None, unrecorded: bool) -> tuple[list[int], int]:
    """Block tokens summing to the recorded total: the unrecorded part takes the rest, or the
    counts are scaled; (counts, unrecorded tokens)."""
    counted = sum(counts)
    if total is None:
        return counts, 0
    if unrecorded:
        return counts, max(0, total - counted)
    if counted == 0:
        return counts, 0
    scale = total / counted
    return [round(c * scale) for c in counts], 0


def prompt_of(trace: Trace) -> Prompt:
    """The call of ``trace`` as the cache sees it (module docstring: blocks, their tokens,
    the breakpoints)."""
    inp, meta = trace.input, _import_meta(trace)
    counter = get_counter()
    model = str(trace.metadata.get("model") or "")
    reconstructed = meta.get("reconstructed")
    unrecorded = isinstance(reconstructed, list) and "system prompt" in reconstructed
    raw: list[tuple[BlockKind, str, str, int | None]] = []
    if inp.tools:
        tools = json.dumps([t.model_dump() for t in inp.tools], sort_keys=True)
        raw.append(("tools", "tools", tools, None))
    if inp.system_instructions:
        raw.append(("system", "system", inp.system_instructions, None))
    raw.extend(("message", label, text, idx) for idx, label, text in _messages(trace))
    tokens = trace.outcome.tokens if trace.outcome is not None else None
    total = tokens.input_tokens if tokens is not None else None
    counts, hidden = _scaled([counter.count(text) for _, _, text, _ in raw], total, unrecorded)
    blocks: list[Block] = []
    indices: list[int | None] = []
    if unrecorded:
        agent = "sidechain" if "parent" in (trace.metadata.get("session_log") or {}) else "main"
        blocks.append(
            Block("unrecorded", "system and tools", _key("unrecorded", model, agent), hidden)
        )
        indices.append(None)
    for (kind, label, text, idx), n in zip(raw, counts, strict=True):
        blocks.append(Block(kind, label, _key(kind, text), n))
        indices.append(idx)
    marked = _breakpoints(meta, blocks, indices)
    final = tuple(
        Block(b.kind, b.label, b.key, b.tokens, "5m" if i in marked else None)
        for i, b in enumerate(blocks)
    )
    return Prompt(trace.trace_id, inp.now, model, final, tokens)


def _breakpoints(
    meta: dict[str, object], blocks: list[Block], indices: list[int | None]
) -> set[int]:
    """The block indices marked: the importer's ``cache_control`` paths, or for a Claude Code
    log (no marks recorded) Claude Code's assumed placement."""
    marks = meta.get("cache_control")
    out: set[int] = set()
    if meta.get("format") == "claude-code":
        for i, b in enumerate(blocks):
            if b.kind == "unrecorded":
                out.add(i)
        if blocks:
            out.add(len(blocks) - 1)
        return out
    if not isinstance(marks, list):
        return out
    for path in marks:
        m = _MARK.match(str(path))
        if m is None:
            continue
        kind, n = m.group(1), int(m.group(2))
        if kind in ("tools", "system"):
            out.update(i for i, b in enumerate(blocks) if b.kind == kind)
        else:
            hits = [i for i, idx in enumerate(indices) if idx == n]
            out.update(hits[-1:])
    return out


# --------------------------------------------------------------------------- simulation


def _chain(blocks: Sequence[Block]) -> tuple[list[str], list[int]]:
    """Each block boundary's prefix key and prefix tokens."""
    keys: list[str] = []
    pos: list[int] = []
    h, n = "", 0
    for b in blocks:
        h = _key(h, b.key)
        n += b.tokens
        keys.append(h)
        pos.append(n)
    return keys, pos


def _lookup(cache: dict[str, _Entry], keys: list[str], marks: list[int], at: datetime) -> int:
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


def _step(cache: dict[str, _Entry], p: Prompt) -> CallCache:
    """One call against the cache: read the longest live prefix, refresh it, write the
    breakpoints after it that reach the model's minimum."""
    keys, pos = _chain(p.blocks)
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
            cache[keys[b]] = _Entry(pos[b], p.at + LIFETIME[ttl], ttl, p.trace_id)
            written.append((b, pos[b]))
    read = pos[upto] if upto >= 0 else 0
    write = (written[-1][1] - read) if written else 0
    rec = p.recorded
    return CallCache(
        trace_id=p.trace_id,
        at=p.at,
        model=p.model,
        blocks=p.blocks,
        read_upto=upto,
        read_from=read_from,
        written=tuple(written),
        cache_read=read,
        cache_write=write,
        recorded_read=rec.cache_read_tokens if rec is not None else None,
        recorded_write=rec.cache_write_tokens if rec is not None else None,
    )


def simulate(prompts: Iterable[Prompt]) -> list[CallCache]:
    """The cache through ``prompts`` in the order given (one cache: a session's calls, side
    chains included, share it)."""
    cache: dict[str, _Entry] = {}
    return [_step(cache, p) for p in prompts]


def simulate_session(traces: Iterable[Trace]) -> list[CallCache]:
    """The cache through one session's calls, in the order they were sent (``input.now``,
    then turn)."""
    ordered = sorted(traces, key=lambda t: (t.input.now, t.turn))
    return simulate(prompt_of(t) for t in ordered)


# --------------------------------------------------------------------------- agreement


@dataclass(frozen=True)
class Agreement:
    """Simulated against recorded cache reads over the calls with recorded usage, the first
    call apart (it may read what an earlier session cached)."""

    calls: int
    simulated: int
    recorded: int
    alike: int
    #: the calls the provider billed differently from the simulation
    differing: tuple[CallCache, ...]
    first: CallCache | None = None
    #: recorded minus simulated reads of the first call, when positive
    cached_before: int = 0
    per_call: tuple[CallCache, ...] = field(default=(), repr=False)

    @property
    def difference_pct(self) -> float | None:
        """The simulated sum's difference from the recorded one, in % of the recorded."""
        if self.recorded == 0:
            return None if self.simulated else 0.0
        return 100.0 * (self.simulated - self.recorded) / self.recorded

    @property
    def alike_pct(self) -> float | None:
        return 100.0 * self.alike / self.calls if self.calls else None


def agreement(calls: Sequence[CallCache]) -> Agreement:
    """How the simulation agrees with what was billed, from the second call on."""
    first = calls[0] if calls and calls[0].recorded_read is not None else None
    rest = [c for c in calls[1:] if c.recorded_read is not None]
    before = 0
    if first is not None and first.recorded_read is not None:
        before = max(0, first.recorded_read - first.cache_read)
    return Agreement(
        calls=len(rest),
        simulated=sum(c.cache_read for c in rest),
        recorded=sum(c.recorded_read or 0 for c in rest),
        alike=sum(1 for c in rest if c.hit == c.recorded_hit),
        differing=tuple(c for c in rest if c.billed_differently),
        first=first,
        cached_before=before,
        per_call=tuple(rest),
    )
