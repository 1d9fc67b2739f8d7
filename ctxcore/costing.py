"""What each call of a session cost, and where its tokens went (docs/design.md, "Cost and
prices", Per call).

``session_costs(traces, prices)`` runs the simulated prompt cache (``ctxcore.cache``) over
one session's calls in the order they were sent and prices each call (``ctxcore.cost``):

- the top-level token fields of a ``CallCost`` are the simulation's: the prompt's tokens
  (the recorded ``input_tokens`` where the trace has them, else our count of the prompt),
  the cache reads and writes the simulation predicts, and the output tokens (recorded, else
  our count of the reply's text, else unknown);
- ``recorded`` is the provider's usage as the trace carries it (``outcome.tokens``), or
  ``None``;
- ``cost_usd`` is priced from the recorded usage when the trace has one
  (``cost_source="recorded"``: what was billed), else from the simulation
  (``"simulated"``); ``None`` when it cannot be known (``ctxcore.cost.cost``);
- ``cache_break`` is the simulation's break attribution for the call (``CacheBreak``),
  priced by the same table.

``costs(traces, prices)`` does the same over a stream of traces of many sessions, one
session at a time: the traces of a session arrive together (a file, or the store session
by session; a side chain with its parent session, whose cache it shares), and each is
reduced to what the cache needs (``ctxcore.cache.PromptReader``) as it is read, so memory
holds one session's prompt digests, never its traces.

The waste side: ``ToolTally`` counts each tool definition's tokens against the calls that
used the tool (per MCP server for ``mcp__server__tool`` names), over a session or a whole
store; ``thinking_turns`` gives the reasoning tokens each call recorded and the thinking the
prompt carries.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from itertools import groupby
from pathlib import Path
from typing import Any, Literal

from ctxcore import fingerprints
from ctxcore.cache import (
    Block,
    CacheBreak,
    CallCache,
    Prompt,
    PromptReader,
    SessionCache,
    simulate,
)
from ctxcore.cost import PriceTable, cost
from ctxcore.models import TokenUsage, Trace
from ctxcore.tokens import get_counter

#: The modules a cost summary is made by (``summarize`` and ``encode_summary``) and what
#: they read (the trace's shape, the encodings). A stored summary is stamped with their
#: fingerprint (``summary_version``), so a change to other code (a page, a detector) leaves
#: the summaries a store holds valid; ``tests/test_cost_summary.py`` watches which ctxcore
#: code runs while summaries are made and fails on a module not listed here.
SUMMARY_MODULES = ("cache/prompts.py", "costing.py", "models.py", "settings.py", "tokens.py")

CostSource = Literal["recorded", "simulated"]
#: the token fields of a call, in the order ``ctxscope cost --json`` writes them
TOKEN_FIELDS = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")


@dataclass(frozen=True)
class CallCost:
    """One call's tokens (the simulation's), its recorded usage, its cost and its cache
    break (module docstring)."""

    session_id: str
    turn: int
    trace_id: str
    model: str
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int | None
    #: USD, ``None`` when unknown
    cost_usd: float | None
    recorded: TokenUsage | None
    cost_source: CostSource
    cache_break: CacheBreak | None

    @property
    def uncached_tokens(self) -> int:
        """The prompt's tokens neither read from nor written to the cache."""
        return self.input_tokens - self.cache_read_tokens - self.cache_write_tokens

    def as_json(self) -> dict[str, Any]:
        """The call as ``ctxscope cost --json`` writes it (issue 32's fields)."""
        rec = self.recorded
        brk = self.cache_break
        return {
            "session_id": self.session_id,
            "turn": self.turn,
            "trace_id": self.trace_id,
            "model": self.model,
            "input_tokens": self.input_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd,
            "cost_source": self.cost_source,
            "recorded": None
            if rec is None
            else {name: getattr(rec, name) for name in (*TOKEN_FIELDS, "reasoning_tokens")},
            "cache_break": None
            if brk is None
            else {
                "block": brk.block,
                "kind": brk.kind,
                "index": brk.index,
                "packet": brk.packet,
                "reason": brk.reason,
                "tokens": brk.tokens,
                "cost_usd": brk.cost_usd,
                "fix": brk.fix,
                "provider_reason": brk.provider_reason,
            },
        }


@dataclass(frozen=True)
class SessionCost:
    """A session's totals over its calls."""

    session_id: str
    calls: int
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    #: the cache reads the provider billed, over the calls that recorded them (None: none did)
    recorded_read: int | None
    #: the sum of the calls whose cost is known
    cost_usd: float
    #: calls whose cost is unknown (not in ``cost_usd``)
    unknown_cost: int
    breaks: int
    #: tokens re-written because of the breaks
    break_tokens: int


def session_totals(calls: Iterable[CallCost]) -> SessionCost:
    """The totals of one session's calls (``session_id`` of the first; empty: ``""``)."""
    items = list(calls)
    breaks = [c.cache_break for c in items if c.cache_break is not None]
    reads = [
        c.recorded.cache_read_tokens
        for c in items
        if c.recorded is not None and c.recorded.cache_read_tokens is not None
    ]
    return SessionCost(
        session_id=items[0].session_id if items else "",
        calls=len(items),
        input_tokens=sum(c.input_tokens for c in items),
        cache_read_tokens=sum(c.cache_read_tokens for c in items),
        cache_write_tokens=sum(c.cache_write_tokens for c in items),
        output_tokens=sum(c.output_tokens or 0 for c in items),
        recorded_read=sum(reads) if reads else None,
        cost_usd=sum(c.cost_usd for c in items if c.cost_usd is not None),
        unknown_cost=sum(1 for c in items if c.cost_usd is None),
        breaks=len(breaks),
        break_tokens=sum(b.tokens for b in breaks),
    )


# --------------------------------------------------------------------------- per call


@dataclass(frozen=True)
class CallSummary:
    """What costing keeps of a trace while its session is simulated: its place, the
    cache's view of its prompt and its output tokens. A function of the trace alone
    (``summarize``), so the store keeps it beside the trace (``encode_summary``) and a
    session is costed from its summaries without reading its traces (docs/design.md,
    "Cost and prices", Summaries)."""

    at: datetime
    turn: int
    session_id: str
    group: str
    prompt: Prompt
    output_tokens: int | None


def _output_tokens(trace: Trace) -> int | None:
    """The reply's tokens: recorded, else our count of its text, else unknown."""
    outcome = trace.outcome
    if outcome is None:
        return None
    if outcome.tokens is not None and outcome.tokens.output_tokens is not None:
        return outcome.tokens.output_tokens
    if outcome.output:
        return get_counter().count(outcome.output)
    return None


def cache_group(trace: Trace) -> str:
    """The session whose cache a call uses: a side chain's (a Claude Code Task agent,
    ``metadata.session_log.parent``) is its parent session's, whose calls it interleaves
    with; any other call's is its own session's."""
    log = trace.metadata.get("session_log")
    parent = log.get("parent") if isinstance(log, dict) else None
    root = parent.get("session") if isinstance(parent, dict) else None
    return root if isinstance(root, str) and root else trace.session_id


def summarize(trace: Trace, reader: PromptReader | None = None) -> CallSummary:
    """What costing keeps of ``trace``; ``reader`` is its session's (the calls before it
    read by the same reader are not hashed or counted again), else a fresh one: the
    summary is the same either way."""
    return CallSummary(
        at=trace.input.now,
        turn=trace.turn,
        session_id=trace.session_id,
        group=cache_group(trace),
        prompt=(reader or PromptReader()).read(trace),
        output_tokens=_output_tokens(trace),
    )


def _write_split(sim: CallCache) -> tuple[int, int]:
    """The simulated write's 5-minute and 1-hour parts, by the lifetime of each breakpoint
    written (each writes the prefix between the previous one and itself)."""
    five = hour = 0
    start = sim.cache_read
    for index, upto in sim.written:
        part = max(0, upto - start)
        if sim.blocks[index].breakpoint == "1h":
            hour += part
        else:
            five += part
        start = max(start, upto)
    return five, hour


def simulated_usage(sim: CallCache, output_tokens: int | None) -> TokenUsage:
    """The simulation's figures for a call as a ``TokenUsage`` (mapping ``simulated``)."""
    five, hour = _write_split(sim)
    return TokenUsage(
        mapping="simulated",
        input_tokens=sum(b.tokens for b in sim.blocks),
        cache_read_tokens=sim.cache_read,
        cache_write_tokens=sim.cache_write,
        cache_write_5m_tokens=five,
        cache_write_1h_tokens=hour,
        output_tokens=output_tokens,
    )


def _priced(model: str, usage: TokenUsage, prices: PriceTable) -> float | None:
    """The cost of ``usage``; a provider that charges nothing to write its cache (no write
    price in the row: OpenAI, Gemini's implicit cache) bills written tokens as input."""
    row = prices.price(model)
    if row is not None and row.cache_write_5m is None and row.cache_write_1h is None:
        usage = usage.model_copy(
            update={
                "cache_write_tokens": 0 if usage.cache_write_tokens is not None else None,
                "cache_write_5m_tokens": None,
                "cache_write_1h_tokens": None,
            }
        )
    found = cost(model, usage, prices)
    return None if found is None else found.total_usd


def _costed(call: CallSummary, sim: CallCache, prices: PriceTable) -> CallCost:
    usage = simulated_usage(sim, call.output_tokens)
    recorded = call.prompt.recorded
    model = call.prompt.model
    if recorded is not None:
        source: CostSource = "recorded"
        usd = _priced(model, recorded, prices)
    else:
        source = "simulated"
        usd = _priced(model, usage, prices)
    return CallCost(
        session_id=call.session_id,
        turn=call.turn,
        trace_id=call.prompt.trace_id,
        model=model,
        input_tokens=usage.input_tokens or 0,
        cache_read_tokens=sim.cache_read,
        cache_write_tokens=sim.cache_write,
        output_tokens=call.output_tokens,
        cost_usd=usd,
        recorded=recorded,
        cost_source=source,
        cache_break=sim.cache_break,
    )


def cost_calls(calls: Iterable[CallSummary], prices: PriceTable) -> list[CallCost]:
    """One session's calls (its side chains with it: one cache) costed from their
    summaries, in the order they were sent (``input.now``, then turn): ``session_costs``
    without the traces."""
    ordered = sorted(calls, key=lambda c: (c.at, c.turn))
    sims = simulate((c.prompt for c in ordered), prices)
    return [_costed(c, s, prices) for c, s in zip(ordered, sims, strict=True)]


class RunningCosts:
    """``session_costs`` a call at a time, for calls fed in the order they were sent: the
    session's diagnosis asks each turn's cost as it reaches the turn (``diagnostics``'
    ``cache_break``), and costing the session up to each turn anew was quadratic."""

    def __init__(self, prices: PriceTable) -> None:
        self.prices = prices
        self._cache = SessionCache(prices)
        self._reader = PromptReader()

    def add(self, trace: Trace) -> CallCost:
        """The next call, costed after every call fed before it."""
        call = summarize(trace, self._reader)
        return _costed(call, self._cache.add(call.prompt), self.prices)


def session_costs(traces: Iterable[Trace], prices: PriceTable) -> list[CallCost]:
    """The cost of each call of one session (its side chains with it: one cache), in the
    order they were sent."""
    reader = PromptReader()
    return cost_calls([summarize(t, reader) for t in traces], prices)


def session_groups(traces: Iterable[Trace], prices: PriceTable) -> Iterator[list[CallCost]]:
    """The costed calls of each session of ``traces`` (with its side chains: one cache,
    ``cache_group``), a session at a time, each in the order its calls were sent. A
    session's traces arrive together; each is reduced to its prompt's digest as it is
    read (``PromptReader``: a message the calls before it carried is not hashed or counted
    again)."""
    reader = PromptReader()
    return summary_groups((summarize(t, reader) for t in traces), prices)


def summary_groups(calls: Iterable[CallSummary], prices: PriceTable) -> Iterator[list[CallCost]]:
    """``session_groups`` of the calls' summaries (a session's together: ``cost_calls``
    per cache group), e.g. those a store keeps (``stored_calls``)."""
    for _, group in groupby(calls, key=lambda c: c.group):
        yield cost_calls(group, prices)


def costs(traces: Iterable[Trace], prices: PriceTable) -> Iterator[CallCost]:
    """The cost of each call of every session of ``traces`` (``session_groups``, one
    call after another)."""
    for group in session_groups(traces, prices):
        yield from group


# --------------------------------------------------------------------------- summaries

#: a ``Block``'s fields that, with its key, tell two alike blocks apart (the key is a
#: digest of the text; ``text`` and ``tools`` follow from it)
_BLOCK_ID = tuple(f.name for f in fields(Block) if f.name not in ("text", "tools"))
#: a ``Block``'s fields, in the order a stored summary lists them: those first
_BLOCK_ROW = (*_BLOCK_ID, "text", "tools")
_ID_LEN = len(_BLOCK_ID)


def summary_version() -> str:
    """The version a cost summary made by this code carries: the fingerprint of
    ``SUMMARY_MODULES`` with Python's and the counting libraries' versions
    (``fingerprints.source_fingerprint``)."""
    return fingerprints.source_fingerprint(Path(__file__).parent, SUMMARY_MODULES)


def encode_summary(call: CallSummary, version: str) -> bytes:
    """``call`` as the store keeps it (UTF-8 JSON), marked with ``version``: the code that
    made it (``summary_version``; a summary of other code is made again from the
    trace, ``decode_summaries``)."""
    p = call.prompt
    data = {
        "v": version,
        "at": call.at.isoformat(),
        "turn": call.turn,
        "session": call.session_id,
        "group": call.group,
        "output": call.output_tokens,
        "trace_id": p.trace_id,
        "prompt_at": p.at.isoformat(),
        "model": p.model,
        "recorded": None if p.recorded is None else p.recorded.model_dump(mode="json"),
        "compaction": p.compaction,
        "provider_reason": p.provider_reason,
        "prompt_session": p.session_id,
        "blocks": [[getattr(b, n) for n in _BLOCK_ROW] for b in p.blocks],
    }
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


class _Blocks:
    """The blocks of the summaries read together: one ``Block`` per distinct block (a
    session's calls repeat their messages)."""

    def __init__(self) -> None:
        self._made: dict[tuple[Any, ...], Block] = {}

    def block(self, row: list[Any]) -> Block:
        ident = tuple(row[:_ID_LEN])
        made = self._made.get(ident)
        if made is None:
            values = dict(zip(_BLOCK_ROW, row, strict=True))
            values["tools"] = tuple(tuple(pair) for pair in values["tools"])
            made = self._made[ident] = Block(**values)
        return made


def _decoded(data: dict[str, Any], blocks: _Blocks) -> CallSummary:
    """A summary from its stored JSON (``encode_summary``)."""
    rec = data["recorded"]
    prompt = Prompt(
        trace_id=data["trace_id"],
        at=datetime.fromisoformat(data["prompt_at"]),
        model=data["model"],
        blocks=tuple(blocks.block(row) for row in data["blocks"]),
        recorded=None if rec is None else TokenUsage.model_validate(rec),
        compaction=data["compaction"],
        provider_reason=data["provider_reason"],
        session_id=data["prompt_session"],
    )
    return CallSummary(
        at=datetime.fromisoformat(data["at"]),
        turn=data["turn"],
        session_id=data["session"],
        group=data["group"],
        prompt=prompt,
        output_tokens=data["output"],
    )


def decode_summaries(raws: Iterable[bytes | None], version: str) -> list[CallSummary | None]:
    """The summaries the store kept (``encode_summary``), in order; ``None`` for one not
    kept or made by code other than ``version`` (its trace is to be summarized again)."""
    blocks = _Blocks()
    out: list[CallSummary | None] = []
    for raw in raws:
        data = json.loads(raw) if raw is not None else None
        if isinstance(data, dict) and data.get("v") == version:
            out.append(_decoded(data, blocks))
        else:
            out.append(None)
    return out


def stored_calls(
    trace_ids: Sequence[str],
    stored: Mapping[str, bytes],
    version: str,
    load: Callable[[list[str]], Iterable[Trace]],
) -> list[CallSummary]:
    """The summaries of ``trace_ids``, in their order: those ``stored`` by code of
    ``version`` as they are, the rest (stored before summaries were, or by other code)
    summarized from their traces, which ``load`` reads (by id, in the order given)."""
    decoded = decode_summaries([stored.get(t) for t in trace_ids], version)
    missing = [t for t, c in zip(trace_ids, decoded, strict=True) if c is None]
    if missing:
        reader = PromptReader()
        made = {t.trace_id: summarize(t, reader) for t in load(missing)}
        decoded = [
            c if c is not None else made.get(t) for t, c in zip(trace_ids, decoded, strict=True)
        ]
    return [c for c in decoded if c is not None]


# --------------------------------------------------------------------------- waste


def mcp_server(tool: str) -> str | None:
    """The MCP server of a tool named ``mcp__server__tool``, else ``None``."""
    parts = tool.split("__")
    return parts[1] if len(parts) >= 3 and parts[0] == "mcp" and parts[1] else None


@dataclass(frozen=True)
class ToolCost:
    """One tool definition against its use: its tokens (the last definition seen), the
    calls offered it and their tokens spent on it, and the times it was called."""

    name: str
    server: str | None
    tokens: int
    offered: int
    offered_tokens: int
    used: int

    @property
    def unused(self) -> bool:
        return self.used == 0


@dataclass(frozen=True)
class ServerCost:
    """The tools of one MCP server (``mcp__server__tool``) together."""

    server: str
    tools: int
    tools_used: int
    tokens: int
    offered_tokens: int
    used: int


def _called(trace: Trace) -> Iterator[str]:
    """The names of the tools the calls before this one called (the assistant messages'
    calls in its history; results alone are not counted, they answer those calls)."""
    for m in trace.input.history:
        for c in m.metadata.get("tool_calls") or ():
            if isinstance(c, dict) and isinstance(c.get("name"), str):
                yield c["name"]


@dataclass
class ToolTally:
    """Tool definitions' tokens against their use, added a trace at a time over a session
    or a store. A tool counts as used when any call of its session called it (a session's
    later calls hold its earlier calls' tool calls in their history)."""

    _tokens: dict[str, int] = field(default_factory=dict)
    _offered: dict[str, int] = field(default_factory=dict)
    _offered_tokens: dict[str, int] = field(default_factory=dict)
    #: per session, the most times each tool was called as one of its calls saw it
    _used: dict[tuple[str, str], int] = field(default_factory=dict)
    _memo: dict[str, int] = field(default_factory=dict, repr=False)

    def _definition_tokens(self, text: str) -> int:
        n = self._memo.get(text)
        if n is None:
            n = self._memo[text] = get_counter().count(text)
        return n

    def add(self, trace: Trace) -> None:
        """One call: the tools it was offered and those its history shows called."""
        for tool in trace.input.tools:
            text = json.dumps(tool.model_dump(), sort_keys=True)
            n = self._definition_tokens(text)
            self._tokens[tool.name] = n
            self._offered[tool.name] = self._offered.get(tool.name, 0) + 1
            self._offered_tokens[tool.name] = self._offered_tokens.get(tool.name, 0) + n
        seen: dict[str, int] = {}
        for name in _called(trace):
            seen[name] = seen.get(name, 0) + 1
        for name, times in seen.items():
            key = (trace.session_id, name)
            self._used[key] = max(self._used.get(key, 0), times)

    def tools(self) -> list[ToolCost]:
        """Every tool offered, most tokens spent first."""
        used: dict[str, int] = {}
        for (_, name), times in self._used.items():
            used[name] = used.get(name, 0) + times
        out = [
            ToolCost(
                name=name,
                server=mcp_server(name),
                tokens=self._tokens[name],
                offered=self._offered[name],
                offered_tokens=self._offered_tokens[name],
                used=used.get(name, 0),
            )
            for name in self._tokens
        ]
        return sorted(out, key=lambda t: (-t.offered_tokens, t.name))

    def servers(self) -> list[ServerCost]:
        """The MCP servers' tools together, most tokens spent first."""
        by: dict[str, list[ToolCost]] = {}
        for t in self.tools():
            if t.server is not None:
                by.setdefault(t.server, []).append(t)
        out = [
            ServerCost(
                server=server,
                tools=len(ts),
                tools_used=sum(1 for t in ts if not t.unused),
                tokens=sum(t.tokens for t in ts),
                offered_tokens=sum(t.offered_tokens for t in ts),
                used=sum(t.used for t in ts),
            )
            for server, ts in by.items()
        ]
        return sorted(out, key=lambda s: (-s.offered_tokens, s.server))


def tool_costs(traces: Iterable[Trace]) -> ToolTally:
    """``ToolTally`` over ``traces`` (a session, or a store's traces)."""
    tally = ToolTally()
    for t in traces:
        tally.add(t)
    return tally


@dataclass(frozen=True)
class ThinkingTurn:
    """A call's thinking: the reasoning tokens its reply recorded (``None``: not recorded)
    and the thinking parts its prompt carries from earlier replies (their count and
    characters; an encrypted part by its size)."""

    session_id: str
    turn: int
    trace_id: str
    reasoning_tokens: int | None
    carried_parts: int
    carried_chars: int


def thinking_turn(trace: Trace) -> ThinkingTurn:
    """The thinking of one call (``ThinkingTurn``)."""
    parts = [
        p
        for m in trace.input.history
        for p in (m.metadata.get("thinking") or ())
        if isinstance(p, dict)
    ]
    chars = 0
    for p in parts:
        size = p.get("chars", p.get("encrypted_chars", 0))
        chars += size if isinstance(size, int) else 0
    tokens = trace.outcome.tokens if trace.outcome is not None else None
    return ThinkingTurn(
        session_id=trace.session_id,
        turn=trace.turn,
        trace_id=trace.trace_id,
        reasoning_tokens=tokens.reasoning_tokens if tokens is not None else None,
        carried_parts=len(parts),
        carried_chars=chars,
    )


__all__ = [
    "TOKEN_FIELDS",
    "CallCost",
    "CallSummary",
    "ServerCost",
    "SessionCost",
    "ThinkingTurn",
    "ToolCost",
    "ToolTally",
    "cache_group",
    "cost_calls",
    "costs",
    "decode_summaries",
    "encode_summary",
    "mcp_server",
    "session_costs",
    "session_groups",
    "session_totals",
    "simulated_usage",
    "stored_calls",
    "summarize",
    "summary_groups",
    "thinking_turn",
    "tool_costs",
]
