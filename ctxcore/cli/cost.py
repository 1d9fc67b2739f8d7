"""``ctxscope cost (PATH... | --session ID | --all) [--db PATH] [--prices FILE] [--json]``:
what each call cost and where its prompt cache broke (docs/design.md, "Cost and prices",
Per call).

PATHs are trace files or any file ``ctxscope import`` reads (a session log, requests, OTLP),
streamed as ``ctxcore.formats.load.iter_traces`` reads them; ``--session`` and ``--all``
read the store (a copy while the app holds it): the calls' costs from the cost summaries it
keeps with each trace (``Store.cost_summaries``; a trace stored without one, or with one
made by other code, is read and summarized), the waste from the traces, read one at a time.
By default a table per session: one row per call (turn, model, the prompt's tokens, those
the simulated cache read, those the provider billed as read (``-``: no recorded usage),
written to it and neither, the output, the cost, the cache break's reason) and the
session's totals; then the waste: tool definitions against their use (per MCP server too)
and the thinking per turn.
``--json`` writes one JSON object per call instead (``CallCost.as_json``), nothing else.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ctxcore import settings
from ctxcore.cli.bad_lines import BadLines
from ctxcore.cost import PriceTable, price_table
from ctxcore.costing import (
    CallCost,
    CallSummary,
    ThinkingTurn,
    ToolTally,
    cache_group,
    session_groups,
    session_totals,
    stored_calls,
    summary_groups,
    summary_version,
    thinking_turn,
)
from ctxcore.errors import InputError
from ctxcore.models import Trace

if TYPE_CHECKING:
    from ctxcore.store.protocol import Store

#: the per-call table's columns: (heading, width)
COLUMNS = (
    ("turn", 5),
    ("model", 26),
    ("input", 9),
    ("cached", 9),
    ("billed", 9),
    ("written", 9),
    ("uncached", 9),
    ("output", 8),
    ("$", 9),
)


# --------------------------------------------------------------------------- reading


def _from_paths(paths: list[str], bad: BadLines) -> Iterator[Trace]:
    """The files' traces; a line that cannot be read goes to ``bad`` (its error names the
    file and line), and the lines after it are read."""
    from ctxcore.formats.load import iter_traces

    for name in paths:
        if Path(name).is_dir():
            raise InputError(f"{name}: is a folder; pass the files (e.g. {name}/*.jsonl)")
        yield from iter_traces(name, skipped=partial(bad.add, name))
    bad.finish()


def _root(session_id: str) -> str:
    return session_id.split("/", 1)[0]


#: a store's sessions as ``TraceStore.session_listing`` gives them
Listing = list[tuple[str, list[tuple[str, tuple[str, ...]]]]]


def _listing(store: Store, db: str, session: str | None) -> Listing:
    """The store's sessions, a side chain (``ID/...``) after its parent; with ``session``,
    that session and its side chains only."""
    listing = sorted(store.session_listing(), key=lambda s: (_root(s[0]), s[0]))
    if session is not None:
        listing = [s for s in listing if s[0] == session or s[0].startswith(f"{session}/")]
        if not listing:
            raise InputError(f"--session {session!r}: no such session in {db}")
    return listing


#: traces read from the store in one query (their parts' JSON held at once: a long
#: session's trace holds its whole context)
LOAD_BATCH = 50


def _loaded(store: Store, trace_ids: list[str]) -> Iterator[Trace]:
    """The stored traces of ``trace_ids`` that exist, in order, read ``LOAD_BATCH`` at a
    time (one query each: ``Store.traces_packed``), each part they name made once
    (``store.objects.SharedTraces``: a session's calls share their context's objects)."""
    from ctxcore.store.objects import SharedTraces

    objects = SharedTraces()
    for start in range(0, len(trace_ids), LOAD_BATCH):
        for packed in store.traces_packed(trace_ids[start : start + LOAD_BATCH]):
            yield objects.trace(packed)


def _from_store(store: Store, listing: Listing, session: str | None) -> Iterator[Trace]:
    """The traces of ``listing``, a batch at a time (with ``session``: those of its
    cache)."""
    for _, traces in listing:
        for t in _loaded(store, [trace_id for trace_id, _tags in traces]):
            if session is None or session in (t.session_id, cache_group(t)):
                yield t


def _summaries(store: Store, listing: Listing, session: str | None) -> Iterator[CallSummary]:
    """The cost summaries of ``listing``'s traces as the store keeps them, a session at a
    time (``stored_calls``: a trace without one of this code's is read and summarized)."""
    version = summary_version()

    def load(missing: list[str]) -> Iterator[Trace]:
        return _loaded(store, missing)

    for _, traces in listing:
        ids = [trace_id for trace_id, _tags in traces]
        for c in stored_calls(ids, store.cost_summaries(ids), version, load):
            if session is None or session in (c.session_id, c.group):
                yield c


def _check_given(args: argparse.Namespace) -> None:
    given = [bool(args.paths), args.session is not None, bool(args.all)]
    if sum(given) != 1:
        raise InputError("give PATH..., --session ID or --all (exactly one)")


# --------------------------------------------------------------------------- printing


def _n(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"


def _usd(value: float | None) -> str:
    return "?" if value is None else f"{value:.4f}"


def _row(cells: Iterable[str]) -> str:
    parts = [
        f"{c:<{w}}" if i == 1 else f"{c:>{w}}"
        for i, (c, (_, w)) in enumerate(zip(cells, COLUMNS, strict=True))
    ]
    return "  ".join(parts)


def _call_row(c: CallCost) -> str:
    brk = c.cache_break
    why = f"  {brk.kind}: {brk.reason}" if brk is not None else ""
    cells = (
        str(c.turn),
        c.model[:26] or "?",
        _n(c.input_tokens),
        _n(c.cache_read_tokens),
        "-" if c.recorded is None else _n(c.recorded.cache_read_tokens),
        _n(c.cache_write_tokens),
        _n(c.uncached_tokens),
        _n(c.output_tokens),
        _usd(c.cost_usd),
    )
    return _row(cells) + why


def print_session(calls: list[CallCost], out: TextIO) -> None:
    """One session's table: a row per call, then its totals."""
    total = session_totals(calls)
    recorded = sum(1 for c in calls if c.cost_source == "recorded")
    print(
        f"session {total.session_id}: {total.calls} call(s), {recorded} priced from recorded "
        f"usage, {total.calls - recorded} from the simulation",
        file=out,
    )
    print(_row(h for h, _ in COLUMNS) + "  cache break", file=out)
    for c in calls:
        print(_call_row(c), file=out)
    unknown = (
        f" ({total.unknown_cost} call(s) of unknown cost not in it)" if total.unknown_cost else ""
    )
    cells = (
        "total",
        "",
        _n(total.input_tokens),
        _n(total.cache_read_tokens),
        _n(total.recorded_read),
        _n(total.cache_write_tokens),
        _n(total.input_tokens - total.cache_read_tokens - total.cache_write_tokens),
        _n(total.output_tokens),
        _usd(total.cost_usd),
    )
    breaks = f"  {total.breaks} break(s), {total.break_tokens:,} tokens re-written"
    print(_row(cells) + breaks + unknown + "\n", file=out)


def print_tools(tally: ToolTally, out: TextIO) -> None:
    """Tool definitions against their use, per tool and per MCP server."""
    tools = tally.tools()
    if not tools:
        print("tool definitions: none recorded in these calls", file=out)
        return
    print(
        "tool definitions (tokens of a definition, calls offered it, tokens spent, calls):",
        file=out,
    )
    for t in tools:
        never = "  never used" if t.unused else ""
        print(
            f"  {t.name:<40} {t.tokens:>7,} {t.offered:>7,} {t.offered_tokens:>11,} "
            f"{t.used:>6,}{never}",
            file=out,
        )
    servers = tally.servers()
    if servers:
        print("MCP servers (tools used / offered, tokens spent, calls):", file=out)
        for s in servers:
            print(
                f"  {s.server:<40} {s.tools_used}/{s.tools}  {s.offered_tokens:>11,} {s.used:>6,}",
                file=out,
            )


def print_thinking(turns: list[ThinkingTurn], out: TextIO) -> None:
    """The thinking per turn: recorded reasoning tokens, thinking carried in the prompt."""
    shown = [t for t in turns if t.reasoning_tokens or t.carried_parts]
    if not shown:
        print("thinking: no call recorded reasoning tokens or carried thinking", file=out)
        return
    print("thinking per turn (reasoning tokens recorded; thinking parts carried, chars):", file=out)
    sessions: dict[str, list[ThinkingTurn]] = {}
    for t in shown:
        sessions.setdefault(t.session_id, []).append(t)
    for session, group in sessions.items():
        print(f"  session {session}", file=out)
        for t in sorted(group, key=lambda t: t.turn):
            print(
                f"    turn {t.turn:>5}  {_n(t.reasoning_tokens):>9}  "
                f"{t.carried_parts:>5} {t.carried_chars:>10,}",
                file=out,
            )


# --------------------------------------------------------------------------- the command


def by_session(calls: Iterable[CallCost]) -> dict[str, list[CallCost]]:
    """Calls by their own session (a side chain apart from its parent), in call order."""
    out: dict[str, list[CallCost]] = {}
    for c in calls:
        out.setdefault(c.session_id, []).append(c)
    return out


class _Waste:
    """The waste side, gathered from the traces as they stream past."""

    def __init__(self) -> None:
        self.tools = ToolTally()
        self.thinking: list[ThinkingTurn] = []

    def tap(self, traces: Iterable[Trace]) -> Iterator[Trace]:
        for t in traces:
            self.tools.add(t)
            self.thinking.append(thinking_turn(t))
            yield t


def _print_groups(groups: Iterable[list[CallCost]], as_json: bool, out: TextIO) -> int:
    """Each group's calls as JSON lines or a table per session; how many calls."""
    n = 0
    for group in groups:
        if as_json:
            for c in group:
                print(json.dumps(c.as_json()), file=out)
        else:
            for calls in by_session(group).values():
                print_session(calls, out)
        n += len(group)
    return n


def _finish(n: int, waste: _Waste | None, out: TextIO) -> int:
    if not n:
        raise InputError("no model call to cost in what was given")
    if waste is not None:
        print_tools(waste.tools, out)
        print_thinking(waste.thinking, out)
    return 0


def run_cost(
    traces: Iterable[Trace], prices: PriceTable, as_json: bool, out: TextIO | None = None
) -> int:
    """Print the calls' costs (a table per session and the waste, or JSON lines)."""
    out = out or sys.stdout
    waste = None if as_json else _Waste()
    stream = traces if waste is None else waste.tap(traces)
    return _finish(_print_groups(session_groups(stream, prices), as_json, out), waste, out)


def run_store_cost(
    db: str, session: str | None, prices: PriceTable, as_json: bool, out: TextIO | None = None
) -> int:
    """``run_cost`` over the store's sessions (``session`` and its side chains, or all),
    costed from their stored summaries; the waste read from their traces."""
    from ctxcore.store.engines import read_store

    out = out or sys.stdout
    with read_store(db, note=lambda why: print(f"note: {why}", file=sys.stderr)) as store:
        listing = _listing(store, db, session)
        groups = summary_groups(_summaries(store, listing, session), prices)
        n = _print_groups(groups, as_json, out)
        waste = None
        if n and not as_json:
            waste = _Waste()
            for _ in waste.tap(_from_store(store, listing, session)):
                pass
    return _finish(n, waste, out)


def cli_cost(args: argparse.Namespace) -> int:
    """``ctxscope cost (PATH... | --session ID | --all) [--db] [--prices FILE] [--json]``."""
    _check_given(args)
    prices = price_table(Path(args.prices) if args.prices else None)
    if args.paths:
        bad = BadLines("cost")
        rc = run_cost(_from_paths(list(args.paths), bad), prices, bool(args.json))
        return 1 if bad.total else rc
    db = args.db or str(settings.db_path())
    return run_store_cost(db, args.session, prices, bool(args.json))
