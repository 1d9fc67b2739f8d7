"""Detectors about what a session's calls cost: a broken prompt cache, a repeated tool call
(docs/design.md, "Diagnostics").

Both read the session: ``cache_break`` runs the simulated prompt cache over the earlier
turns and this one (``ctxcore.costing``) and reports this call's break, with its reason,
the tokens written again, what that cost beyond reading them and the fix; a call of a
model no provider's cache is modelled for (``ctxcore.cache.provider_of``) is not judged.
``repeated_tool_call`` finds the stuck loop: a tool call of this turn (the last reply's)
with the same tool, the same arguments and the same result as an earlier call of the
session. It reads the calls and their results from the captured input (the history's tool
calls, the results by call id), so a builder that dropped or merged the repeated results
does not hide it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from pathlib import Path

from ctxcore.cache import provider_of
from ctxcore.cost import PriceTable, price_table
from ctxcore.costing import CallCost, RunningCosts, session_costs
from ctxcore.diagnostics.context import TraceView, finding, fold_over, short
from ctxcore.diagnostics.text import Memo
from ctxcore.models import Finding, Trace
from ctxcore.settings import ENV_PRICES

#: (tool name, its arguments as canonical JSON, a digest of its result)
Call = tuple[str, str, str]


@lru_cache(maxsize=4)
def _prices(file: str | None, env: str) -> PriceTable:
    """The table in effect: the shipped one, the file ``$CTXSCOPE_PRICES`` names, then
    ``file`` (``DiagnosticsOptions.prices``)."""
    return price_table(Path(file) if file else None, env)


def _session(v: TraceView) -> list[Trace]:
    """This call's session up to it: the earlier turns, then this one."""
    t = v.trace
    earlier = [s for s in v.session_traces if s.turn < t.turn and s.trace_id != t.trace_id]
    return [*earlier, t]


@dataclass
class _Running:
    """The session's calls costed one after another (``SessionFolds``) while they come in
    the order they were sent."""

    costs: RunningCosts
    calls: list[CallCost] = field(default_factory=list)
    last_at: datetime | None = None
    in_order: bool = True

    def step(self, t: Trace) -> None:
        if self.last_at is not None and t.input.now < self.last_at:
            self.in_order = False
        if self.in_order:
            self.calls.append(self.costs.add(t))
            self.last_at = t.input.now


def _folded_cost(v: TraceView, prices: PriceTable, key: Hashable) -> CallCost | None:
    """This call's cost from the session's running costs, when that is exactly what
    ``session_costs(_session(v))`` gives it: no trace of its own turn before it, none of its
    id, and the calls up to it sent in turn order (so both put the same calls before it, in
    the same order); else None."""
    folds, t = v.folds, v.trace
    k = folds.earlier(t) if folds is not None else None
    if folds is None or k is None or len(v.session_traces) != k or folds.traces[k] is not t:
        return None
    run = folds.fold(
        ("cache_break", key), k + 1, lambda: _Running(RunningCosts(prices)), _Running.step
    )
    return run.calls[k] if run.in_order else None


def _call_cost(
    v: TraceView, session: list[Trace], prices: PriceTable, key: Hashable
) -> CallCost | None:
    """This call costed with the earlier turns of its session (``session``)."""
    mine = _folded_cost(v, prices, key)
    if mine is not None:
        return mine
    calls = session_costs(session, prices)
    return next((c for c in calls if c.trace_id == v.trace.trace_id), None)


def cache_break(v: TraceView) -> list[Finding]:
    """Warning: this call read less of the prompt cache than the previous call's prompt
    would have served; the reason, the tokens written again, their cost and the fix."""
    session = _session(v)  # read first: it is a session detector whatever the trace
    model = str(v.trace.metadata.get("model") or "")
    if provider_of(model) is None:
        return []
    key = (v.options.prices, os.environ.get(ENV_PRICES, ""))
    prices = _prices(*key)
    if len(session) == 1:
        # the first call the cache meets: no earlier prompt could have served it (bulk
        # work diagnoses each trace alone, and costing its whole prompt found nothing)
        return []
    mine = _call_cost(v, session, prices, key)
    brk = mine.cache_break if mine is not None else None
    if brk is None:
        return []
    where = brk.block if brk.index is None else f"{brk.block}[{brk.index}]"
    usd = "an unknown cost" if brk.cost_usd is None else f"${brk.cost_usd:.4f}"
    theirs = f"; the provider says: {brk.provider_reason}" if brk.provider_reason else ""
    return [
        finding(
            "cache_break",
            "warning",
            f"the prompt cache broke at {where} ({brk.kind}): {brk.reason}; "
            f"{brk.tokens:,} tokens written again, {usd} more than reading them{theirs}; "
            f"fix: {brk.fix}",
            [brk.packet] if brk.packet else [],
            {
                "block": brk.block,
                "kind": brk.kind,
                "index": brk.index,
                "packet": brk.packet,
                "reason": brk.reason,
                "tokens": brk.tokens,
                "cost_usd": brk.cost_usd,
                "advice": brk.fix,
                "provider_reason": brk.provider_reason,
            },
        )
    ]


# --------------------------------------------------------------------------- repeated calls


def _digest_of(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


#: a tool result's digest, remembered per text (a session's results come back every call)
_digest = Memo(_digest_of)


def _arguments(raw: object) -> str:
    """Arguments as canonical JSON (a JSON string parsed first), so key order and spacing
    do not make two calls differ."""
    if isinstance(raw, str):
        return _json_arguments(raw)
    return json.dumps(raw, sort_keys=True, default=str)


def _json_arguments_of(raw: str) -> str:
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return json.dumps(value, sort_keys=True, default=str)


#: arguments given as a JSON string, made canonical once per string (a session's calls come
#: back at every later call)
_json_arguments = Memo(_json_arguments_of)


def _results(t: Trace) -> dict[str, tuple[str, str]]:
    """Each tool call's result by call id: (packet or message id, text), from the
    tool-result packets and messages."""
    out: dict[str, tuple[str, str]] = {}
    for p in t.input.packets:
        cid = p.metadata.get("tool_call_id")
        if isinstance(cid, str):
            out[cid] = (p.id, p.content)
    for pos, m in enumerate(t.input.history):
        cid = m.metadata.get("tool_call_id")
        if isinstance(cid, str):
            out.setdefault(cid, (m.id or f"history:{pos}", m.content))
    return out


def _calls(t: Trace) -> Iterator[tuple[int, str, Call]]:
    """(history position, call id, call) of every answered tool call of ``t``'s input."""
    results = _results(t)
    for pos, m in enumerate(t.input.history):
        for c in m.metadata.get("tool_calls") or ():
            if not isinstance(c, dict):
                continue
            cid, name = c.get("id"), c.get("name")
            if isinstance(cid, str) and isinstance(name, str) and cid in results:
                digest = _digest(results[cid][1])
                yield pos, cid, (name, _arguments(c.get("arguments")), digest)


def _add_calls(seen: dict[str, Call], t: Trace) -> None:
    """The answered tool calls of ``t``'s input, by call id (a later one of an id wins)."""
    seen.update((cid, call) for _, cid, call in _calls(t))


def _earlier_calls(v: TraceView, earlier: list[Trace]) -> dict[str, Call]:
    """The tool calls of the earlier turns (``earlier``) by call id: carried over from the
    turn before when the whole session is diagnosed (``SessionFolds``)."""
    k = v.folds.earlier(v.trace) if v.folds is not None else None
    if v.folds is not None and k is not None:
        return v.folds.fold("tool_calls", k, dict, _add_calls)
    return fold_over(earlier, dict, _add_calls)


def repeated_tool_call(v: TraceView) -> list[Finding]:
    """Warning: a tool call of the last reply repeats an earlier call of the session: the
    same tool, the same arguments, the same result."""
    earlier = [s for s in v.session_traces if s.turn < v.trace.turn]
    mine = list(_calls(v.trace))
    if not mine:
        return []
    ids = {cid: rid for cid, (rid, _) in _results(v.trace).items()}
    last = max(pos for pos, _, _ in mine)
    seen = dict(_earlier_calls(v, earlier))  # a copy: the session's is shared
    seen.update((cid, call) for pos, cid, call in mine if pos < last)
    out: list[Finding] = []
    for _, cid, call in (c for c in mine if c[0] == last):
        before = [other for other, c in seen.items() if c == call and other != cid]
        if not before:
            continue
        name, args, _ = call
        out.append(
            finding(
                "repeated_tool_call",
                "warning",
                f"{name}({short(args, 80)}) was called {len(before) + 1} times with the same "
                "arguments and got the same result each time: the agent is going round in a "
                "loop; change the approach or tell it what the result means",
                [ids[cid]],
                {
                    "tool": name,
                    "arguments": args,
                    "times": len(before) + 1,
                    "calls": [*before, cid],
                },
            )
        )
    return out
