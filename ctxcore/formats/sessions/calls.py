"""One trace per model call of a session log, built incrementally.

A session log records a conversation once, and every model call saw a prefix of it (plus the
call's own new messages). Building each call's trace from scratch, as a request importer does
(``derive.make_trace``), costs the whole context per call: quadratic in the session's length,
and a long session re-validates millions of messages. Here each source message is read and
normalised once into a ``Segment`` (its normalised messages go through
``captured_input_from_norm``, as a request's do), and each call's trace shares, by reference,
the messages, packets and decisions of the context it has in common with the previous call of
its session: only what is new is built, and every distinct text is counted once (the
``TokenCounter`` caches by content; new texts are counted in batches on the counting threads
while the log is being read).

The result is the one ``make_trace`` derives for the same captured input (same items, tokens,
partitions, totals and warnings; ``tests/test_import_sessions.py`` compares them), with two
differences a session needs: decisions are in prompt order, and a conversation message's
decision is named after the message (``msg-<line>``) rather than by its position, so that the
Timeline follows one message from call to call. The messages a compaction replaced appear
as ``summarized`` decisions (reason ``DEGRADED``) in the first call after it, and every later
call names the compaction in ``metadata.import.compaction`` (docs/design.md, "Capture,
import, export, redaction").

Memory holds each message once, whatever the number of calls; a trace's lists (history,
packets, decisions) are its own, their items shared. What stays per call is the rendered
prompt, a string as long as the context: bounded by the model's window in a real session,
whose agent compacts before it overflows.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from ctxcore import __version__ as _ctxcore_version
from ctxcore.errors import ImportFormatError
from ctxcore.formats.accounting import MAX_LISTED, TALLIED, source_counts
from ctxcore.formats.derive import (
    FORMAT_ID,
    FORMAT_TOKENS_PER_MESSAGE,
    FORMAT_TOKENS_REPLY,
    IMPORT_PARTITIONS,
    TASK_ID,
    TOOLS_ID,
    import_config,
    known_window,
    reported_prompt_tokens,
    stable_id,
    tokenizer_for_model,
    tools_text,
    usage_warning,
    window_warnings,
)
from ctxcore.formats.norm import NormMessage, captured_input_from_norm
from ctxcore.formats.usage import normalize as normalize_usage
from ctxcore.models import (
    INT32_MIN,
    SCHEMA,
    Builder,
    BuildResult,
    CapturedInput,
    Config,
    Decision,
    Message,
    Outcome,
    Packet,
    PartitionUsage,
    Reason,
    Report,
    Status,
    ToolDef,
    Totals,
    Trace,
    check_free_json,
    unvalidated,
)
from ctxcore.pipeline.common import INSTRUCTIONS_ID, ReportLists, Timer, finish, make_report
from ctxcore.pipeline.recorded import AFTER_QUERY, REPLACED
from ctxcore.settings import MAX_CONTENT_CHARS, MAX_INT32, MAX_TOKENS
from ctxcore.sharing import grew
from ctxcore.tokens import Pending, TokenCounter, get_counter, loading, preload

#: What an imported decision says (the same words as ``derive``'s).
KEPT_TEXT = "present in the imported prompt (imports keep everything they saw)"
#: Counted per item kind into the import partitions (``derive``'s mapping).
_PARTITION = {
    "instructions": "system",
    "policy": "system",
    "tools": "tool definitions",
    "tool_result": "tool results",
    "history": "history",
    "task": "current message",
    "format": "format overhead",
}
#: New texts are counted together once this many characters (or calls) are waiting.
BATCH_CHARS = 2_000_000
BATCH_CALLS = 256
#: Batches whose counts may be awaited at once: the log is read on while the counts of the
#: oldest are not back, up to this many (then its counts are waited for).
AHEAD = 32
#: Sessions whose last prompt is kept to render the next call's from (``CallTraces``).
PROMPTS_KEPT = 8
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _partition(kind: str) -> str:
    return _PARTITION.get(kind, "history")


@dataclass(eq=False, slots=True)
class _Entry:
    """One flat message of a segment and the item it is in a captured input."""

    flat: Message
    kind: str  # "system", "history", "tool_result" or "policy"
    item_id: str
    content: str
    packet: Packet | None
    history: Message | None
    user: bool
    notes: list[str]
    #: a tool result: the call id its source named (None: it named none)
    call_id: str | None = None
    #: an assistant message: the (id, name) of the tool calls it made
    calls: tuple[tuple[str, str], ...] = ()


@dataclass(eq=False)
class Segment:
    """Messages a log holds at one place (a line, one reply spread over several lines, the
    items between two calls), normalised once and shared by every call whose context holds
    them. ``counts`` is what the source holds there (``accounting.TALLIED``, without tools);
    ``unknown`` the parts kept only as JSON text; ``note`` goes on its decisions."""

    label: str
    norm: list[NormMessage]
    counts: dict[str, int]
    unknown: list[str] = field(default_factory=list)
    note: str | None = None
    _entries: list[_Entry] | None = None

    def entries(self) -> list[_Entry]:
        """Its flat messages and items, from ``captured_input_from_norm`` (computed once; an
        ``ImportFormatError`` here is the segment's, and names its messages)."""
        if self._entries is None:
            self._entries = _entries_of(self)
        return self._entries


def _entries_of(seg: Segment) -> list[_Entry]:
    # query="" keeps every user message in the history: which one is the call's query is
    # known only per call (the last user message of its context)
    inp, flat = captured_input_from_norm(seg.norm, tools=[], now=_EPOCH, query="")
    return _split(inp, flat, [seg])[0]


def _split(inp: CapturedInput, flat: list[Message], segs: list[Segment]) -> list[list[_Entry]]:
    """The entries of each segment, from one captured_input_from_norm over their messages:
    it writes one flat message per normalised message, in order, so the segments' shares
    follow from their message counts."""
    hist = iter(inp.history)
    next_hist = next(hist, None)
    packets = list(inp.packets)
    out: list[list[_Entry]] = []
    pos = 0
    for seg in segs:
        notes = [seg.note] if seg.note else []
        entries: list[_Entry] = []
        for nm in seg.norm:
            m = flat[pos]
            pos += 1
            if next_hist is not None and m is next_hist:
                e = _Entry(m, "history", m.id or "", m.content, None, m, m.role == "user", notes)
                e.calls = tuple(
                    (str(c["id"]), str(c["name"])) for c in m.metadata.get("tool_calls") or []
                )
                entries.append(e)
                next_hist = next(hist, None)
            elif m.role == "tool" or (
                packets and packets[0].id in (f"policy:{m.id}", f"compaction:{m.id}")
            ):
                p = packets.pop(0)
                e = _Entry(m, p.kind, p.id, p.content, p, None, False, notes)
                e.call_id = nm.tool_call_id
                entries.append(e)
            else:
                entries.append(_Entry(m, "system", m.id or "", m.content, None, None, False, notes))
        out.append(entries)
    return out


def _alike_alone(segs: list[Segment]) -> bool:
    """Whether one captured_input_from_norm over these segments gives each the entries it
    gets alone: no developer message (a late one is a policy packet), every tool call and
    result with its id (no made-up id, no oldest-pending match), no tool-call id twice (no
    ``#n``). A result answering an earlier segment's call then only gains the call's name,
    which ``_Context._place`` gives it anyway."""
    ids: set[str] = set()
    for seg in segs:
        for m in seg.norm:
            if m.role == "developer" or any(c.id is None for c in m.tool_calls):
                return False
            if m.role in ("tool", "function", "ipython"):
                if m.tool_call_id is None or m.tool_call_id in ids:
                    return False
                ids.add(m.tool_call_id)
    return True


def prepare(segs: list[Segment]) -> list[tuple[Segment, ImportFormatError]]:
    """Make the entries of new segments (a call's), together when that gives each the same
    entries as alone (one captured input instead of one per segment); returns the segments
    whose messages cannot be imported, with the error naming them."""
    todo = [seg for seg in segs if seg._entries is None]
    if len(todo) > 1 and _alike_alone(todo):
        try:
            inp, flat = captured_input_from_norm(
                [m for seg in todo for m in seg.norm], tools=[], now=_EPOCH, query=""
            )
        except ImportFormatError:
            pass  # each alone, below: the error then names its own segment
        else:
            for seg, entries in zip(todo, _split(inp, flat, todo), strict=True):
                seg._entries = entries
            return []
    failed: list[tuple[Segment, ImportFormatError]] = []
    for seg in todo:
        try:
            seg.entries()
        except ImportFormatError as exc:
            failed.append((seg, exc))
    return failed


@dataclass(eq=False)
class Compaction:
    """A place where the log replaced the context by a summary: ``replaced`` is the context
    it replaced (the calls after it show those messages as summarized), ``label`` names it
    in the decisions' reason."""

    label: str
    replaced: list[Segment]
    info: dict[str, Any] = field(default_factory=dict)
    _items: list[_Item] | None = None
    #: the decisions on what it replaced, and the (rank, budget, tokenizer) they were made
    #: for: every call after it until the next compaction shows the same ones
    _decided: tuple[tuple[int, int, str], list[Decision]] | None = None


@dataclass(eq=False)
class Call:
    """One model call a log records: its context, what it produced and what it cost.

    ``recorded``/``reconstructed`` say which parts of the input the log holds and which it
    does not (the trace lacks those); ``metadata`` is merged into the trace's."""

    session_id: str
    turn: int
    key: str
    context: list[Segment]
    created_at: datetime
    model: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    #: how ``usage`` reads as ``TokenUsage`` (``ctxcore.formats.usage.MAPPINGS``)
    usage_mapping: str | None = None
    output: str | None = None
    window: int | None = None
    window_source: str | None = None
    output_reserve: int | None = None
    tools: list[ToolDef] = field(default_factory=list)
    compaction: Compaction | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    recorded: list[str] = field(default_factory=list)
    reconstructed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: the log's records that could not be read (``file:line: why``) since the previous call
    skipped: list[str] = field(default_factory=list)


@dataclass(eq=False, slots=True)
class _Item:
    """An entry at its place in one session's context (a late developer message becomes a
    policy packet there, a repeated packet id gets a ``#n`` suffix), with its token count and
    the decision last made for it (reused while its rank and budget stay the same)."""

    entry: _Entry
    kind: str
    item_id: str
    packet: Packet | None
    flat: Message
    #: the (id, name) of the tool call this result answers
    answered: tuple[str, str] | None = None
    #: tokenizer name -> tokens; ``pending`` is the tokenizer it is being counted with
    tokens: dict[str, int] = field(default_factory=dict)
    pending: str = ""
    #: running sums up to it (``_sums``) and the tokenizer they were counted with
    sums: tuple[int, ...] = ()
    sums_tok: str = ""
    key: tuple[Any, ...] = ()
    decision: Decision | None = None
    task_key: tuple[Any, ...] = ()
    task: Decision | None = None
    #: its part marked as the first after the query (``_mark_parts``), made once: the calls
    #: of one turn share it, so the writer knows it by identity and does not write it again
    after_query: Packet | Message | None = None


class _Context:
    """One session's context as of its last call: segments, items, and prefix counts."""

    def __init__(self) -> None:
        self.segs: list[Segment] = []
        self.ends: list[int] = []  # items after each segment
        self.counts: list[tuple[int, ...]] = []  # source counts up to each segment
        self.items: list[_Item] = []
        self.ids: dict[str, int] = {}
        self.first_conv: int | None = None
        #: tool calls without a result yet, oldest first (id, name)
        self.pending: list[tuple[str, str]] = []
        #: the compaction whose lost messages a call has shown (the first call after it)
        self.compacted_by: Compaction | None = None

    def stitch(self, ctx: list[Segment]) -> None:
        """Make this the context ``ctx``: keep the longest common prefix, add the rest."""
        p = 0
        n = min(len(self.segs), len(ctx))
        while p < n and self.segs[p] is ctx[p]:
            p += 1
        if p < len(self.segs):
            keep = self.ends[p - 1] if p else 0
            for it in self.items[keep:]:
                self.ids.pop(it.item_id, None)
            del self.items[keep:], self.segs[p:], self.ends[p:], self.counts[p:]
            if self.first_conv is not None and self.first_conv >= keep:
                self.first_conv = None
            self.pending = []
            for it in self.items:  # the calls still unanswered at the new end
                if it.answered is not None:
                    self.pending.remove(it.answered)
                self.pending.extend(it.entry.calls)
        for seg in ctx[p:]:
            for e in seg.entries():
                self._place(e)
            prev = self.counts[-1] if self.counts else (0,) * len(TALLIED)
            got = seg.counts
            self.counts.append(
                tuple([a + got.get(k, 0) for a, k in zip(prev, TALLIED, strict=True)])
            )
            self.segs.append(seg)
            self.ends.append(len(self.items))

    def _place(self, e: _Entry) -> None:
        """Add an entry at the end, with what captured_input_from_norm decides from the
        messages before it: a developer message after the conversation started is a policy
        packet; a tool result answers the oldest pending call of its id (its name goes on
        the packet; with no id, the oldest pending call); a repeated id gets ``#n``."""
        kind, item_id, packet, flat = e.kind, e.item_id, e.packet, e.flat
        answered = None
        if kind == "system" and flat.role == "developer" and self.first_conv is not None:
            kind, item_id = "policy", f"policy:{e.item_id}"
            packet = Packet(id=item_id, kind="policy", content=e.content, must_keep=True)
        if kind == "tool_result" and packet is not None:
            if e.call_id is not None:
                answered = next((c for c in self.pending if c[0] == e.call_id), None)
            elif self.pending:
                answered = self.pending[0]
            if answered is not None:
                self.pending.remove(answered)
                if e.call_id is None:  # named after the call it answers
                    item_id = f"tool:{answered[0]}"
                    flat = flat.model_copy(
                        update={"metadata": {**flat.metadata, "tool_call_id": answered[0]}}
                    )
                    packet = packet.model_copy(
                        update={
                            "id": item_id,
                            "metadata": {**packet.metadata, "tool_call_id": answered[0]},
                        }
                    )
                if "name" not in packet.metadata:
                    meta = {**packet.metadata, "name": answered[1]}
                    packet = packet.model_copy(update={"metadata": meta})
        if item_id in self.ids:
            n = 2
            while f"{item_id}#{n}" in self.ids:
                n += 1
            item_id = f"{item_id}#{n}"
            if packet is not None:
                packet = packet.model_copy(update={"id": item_id})
        if kind != "system" and self.first_conv is None:
            self.first_conv = len(self.items)
        self.ids[item_id] = len(self.items)
        self.items.append(_Item(e, kind, item_id, packet, flat, answered))
        self.pending.extend(e.calls)


@dataclass(eq=False)
class _Prepared:
    """A call whose context is stitched (its items fixed), waiting for new texts' counts."""

    call: Call
    items: list[_Item]
    source: tuple[int, ...]
    unknown: list[str]
    unknown_total: int
    tok: str
    #: the first call after a compaction: its trace shows what the compaction replaced
    summarize: bool


class _Lists:
    """What a call's trace lists item by item (history, packets, flat messages, system
    texts, the conversation items and their places, their decisions while ``key`` holds),
    kept for the session's next call: a call whose items start with the previous call's
    (the same objects: an item never changes) adds its new items' only, where each call
    of a long session would walk its whole context again. The lists are handed out as
    copies: the previous call's trace keeps its own."""

    def __init__(self) -> None:
        self.items: list[_Item] = []
        self.history: list[Message] = []
        self.packets: list[Packet] = []
        self.flat: list[Message] = []
        self.system: list[str] = []
        #: positions in ``items`` of the conversation items, and those items
        self.conv_at: list[int] = []
        self.conv: list[_Item] = []
        #: position in ``items`` -> its place in ``history``, in ``packets`` (or -1)
        self.in_history: list[int] = []
        self.in_packets: list[int] = []
        #: the ids of the conversation's must-keep packets
        self.must: list[str] = []
        #: the conversation items' decisions made with ``key`` (``_decisions``), what they
        #: add to a report (``None`` once one is neither kept nor truncated: then the
        #: report is made whole) and how many reasons come before each
        self.key: tuple[Any, ...] | None = None
        self.decisions: list[Decision] = []
        self.decided = 0
        self.report: ReportLists | None = ReportLists()
        self.reasons_before: list[int] = []
        #: the last call's decisions: how many came before these, and which of these the
        #: task's decision replaced (``report``)
        self.head = 0
        self.task_at: int | None = None

    def continues(self, items: list[_Item]) -> bool:
        """Whether ``items`` start with the items these lists were made of (the same objects:
        an ``_Item`` equals itself only, and a list comparison tries identity first, in C)."""
        n = len(self.items)
        return bool(n) and len(items) >= n and items[:n] == self.items

    def update(self, items: list[_Item]) -> None:
        """Add the items after those these lists were made of (``continues``)."""
        for k in range(len(self.items), len(items)):
            it = items[k]
            hist = it.entry.history
            self.in_history.append(len(self.history) if hist is not None else -1)
            if hist is not None:
                self.history.append(hist)
            self.in_packets.append(len(self.packets) if it.packet is not None else -1)
            if it.packet is not None:
                self.packets.append(it.packet)
            self.flat.append(it.flat)
            if it.kind == "system":
                self.system.append(it.entry.content)
            else:
                self.conv_at.append(k)
                self.conv.append(it)
                if it.packet is not None and it.packet.must_keep:
                    self.must.append(it.item_id)
        self.items = items

    def conv_decisions(
        self, key: tuple[Any, ...], decide: Callable[[_Item], None]
    ) -> list[Decision]:
        """The conversation items' decisions with ``key``: ``decide(it)`` for an item
        without one made with it (all of them when the key changed)."""
        if self.key != key:
            self.key, self.decisions, self.decided = key, [], 0
            self.report, self.reasons_before = ReportLists(), []
        for it in self.conv[self.decided :]:
            if it.key != key:
                decide(it)
            if it.decision is not None:
                self.decisions.append(it.decision)
                if self.report is not None:
                    self.reasons_before.append(len(self.report.reasons))
                    self.report.add([it.decision])
                    if self.report.summarized or self.report.dropped:
                        self.report = None
        self.decided = len(self.conv)
        return self.decisions

    def report_of(
        self, decisions: list[Decision], budget: int, used: int, must: list[str]
    ) -> Report:
        """``make_report`` of the call's ``decisions``: the head's, then the conversation's
        kept from the calls before (the task's in place of the one it replaced), then the
        rest's."""
        h, m, t = self.head, len(self.decisions), self.task_at
        mid = self.report
        if mid is None or len(decisions) < h + m:
            return make_report(decisions, budget, used, must)
        out = ReportLists()
        out.add(decisions[:h])
        if t is None:
            out.included += mid.included
            out.reasons += mid.reasons
        else:
            k = self.reasons_before[t]
            end = self.reasons_before[t + 1] if t + 1 < m else len(mid.reasons)
            out.included += mid.included[:t]
            out.reasons += mid.reasons[:k]
            out.add(decisions[h + t : h + t + 1])
            out.included += mid.included[t + 1 :]
            out.reasons += mid.reasons[end:]
        out.add(decisions[h + m :])
        return out.report(budget, used, must)


@dataclass(eq=False)
class _Counting:
    """Texts of one tokenizer being counted; ``pending.result()`` gives their counts in
    order."""

    counter: TokenCounter
    items: list[_Item]
    pending: Pending


def _start_counting(todo: dict[str, list[_Item]]) -> list[_Counting]:
    """Start counting the new items' texts (``TokenCounter.count_many_pending``: the
    counting backend's threads or process, while the caller goes on reading the log)."""
    out = []
    for tok, items in todo.items():
        counter = get_counter(tok)
        pending = counter.count_many_pending([it.entry.content for it in items])
        out.append(_Counting(counter, items, pending))
    return out


@dataclass(eq=False)
class _Gathered:
    """A call's captured input and the token counts its totals start from."""

    inp: CapturedInput
    last: tuple[int, ...]
    query_at: int | None
    system: str
    instr: int
    tools_json: str
    tools_n: int
    overhead: int
    n_messages: int
    window: int | None
    source: str | None


def _gather(prep: _Prepared, counter: TokenCounter, lists: _Lists) -> _Gathered:
    """The call's input (the last user message as the query, the rest as history and
    packets) and its counts; a window the log does not give comes from the model table."""
    call, items = prep.call, prep.items
    last = _sums(items, prep.tok, counter)
    query_at = last[S_LAST_USER] if last[S_LAST_USER] >= 0 else None
    history = lists.history[:]
    query = ""
    if query_at is not None:
        query = history.pop(items[query_at].sums[S_HIST] - 1).content
    packets = lists.packets[:]
    _mark_parts(prep, query_at, history, packets, lists)
    system = "\n\n".join(lists.system)
    window, source = call.window, call.window_source
    if window is None and known_window(call.model) is not None:
        window = known_window(call.model)
        source = f"the context window of {call.model} (ctxscope's model table)"
    inp = _input(
        query, call.created_at, system, history, packets, call.tools, window, call.output_reserve
    )
    tools_json = tools_text(call.tools) if call.tools else ""
    n_messages = last[S_MESSAGES] + (1 if system else 0)
    return _Gathered(
        inp=inp,
        last=last,
        query_at=query_at,
        system=system,
        instr=counter.count(system) if system else 0,
        tools_json=tools_json,
        tools_n=counter.count(tools_json) if tools_json else 0,
        overhead=FORMAT_TOKENS_PER_MESSAGE * n_messages + FORMAT_TOKENS_REPLY,
        n_messages=n_messages,
        window=window,
        source=source,
    )


#: a part of a call's input that ``_mark_parts`` may mark (a packet or a history message)
_P = TypeVar("_P", Packet, Message)


def _mark_parts(
    prep: _Prepared,
    query_at: int | None,
    history: list[Message],
    packets: list[Packet],
    lists: _Lists,
) -> None:
    """Mark, in this call's input only (the parts are shared by the session's calls), what
    the recorded preset needs to rebuild the call (docs/design.md, "recorded"): the first
    part after the query (``AFTER_QUERY``) and, in the first call after a compaction, the
    ids it replaced (``REPLACED``, on the call's first conversation part)."""
    conv = lists.conv_at  # the conversation items' places, the query's among them
    marks: dict[int, dict[str, Any]] = {}
    if query_at is not None:
        after = bisect_right(conv, query_at)
        if after < len(conv):
            marks.setdefault(conv[after], {})[AFTER_QUERY] = True
    comp = prep.call.compaction
    first = next((k for k in conv[:2] if k != query_at), None)
    if prep.summarize and comp is not None and comp._items and first is not None:
        marks.setdefault(first, {})[REPLACED] = [it.item_id for it in comp._items]
    # the query left ``history``: the messages after it moved up one place
    popped = lists.in_history[query_at] if query_at is not None else len(history) + 1
    for k, extra in marks.items():
        it = prep.items[k]
        if it.packet is not None:
            packets[lists.in_packets[k]] = _marked(it, it.packet, extra)
        elif it.entry.history is not None:
            pos = lists.in_history[k]
            history[pos - (pos > popped)] = _marked(it, it.entry.history, extra)


def _marked(it: _Item, part: _P, extra: dict[str, Any]) -> _P:
    """``part`` (``it``'s packet or history message) with ``extra`` in its metadata. Marked
    only as the first after the query, it is made once per item (``_Item.after_query``)."""
    if extra.keys() == {AFTER_QUERY} and type(it.after_query) is type(part):
        return it.after_query
    copy = part.model_copy(update={"metadata": {**part.metadata, **extra}})
    if extra.keys() == {AFTER_QUERY}:
        it.after_query = copy
    return copy


def _call_warnings(call: Call, used: int, tokenizer: str) -> list[str]:
    """What the log says about the call (its own warnings, records that could not be
    read) and how its reported usage compares with the count."""
    warns = list(call.warnings)
    if call.skipped:
        warns.append(
            f"{len(call.skipped)} record(s) of the log could not be read (the first: "
            f"{call.skipped[0]}); this call and the later ones may miss what they held"
        )
    warn = usage_warning(call.usage, used, tokenizer)
    if warn is not None:
        warns.append(warn)
    return warns


class CallTraces:
    """Turns a log's calls into traces, one session context per session id.

    ``tokens_counted`` adds up each message's tokens once (when it is first counted),
    ``tokens_in_calls`` every call's whole prompt: their ratio is what sharing saves."""

    def __init__(self, *, fmt: str, builder: str) -> None:
        self.fmt = fmt
        self.builder = Builder(name=builder, version=_ctxcore_version)
        self._contexts: dict[str, _Context] = {}
        self._configs: dict[tuple[str, int | None, int | None], Config] = {}
        self._tokenizers: set[str] = set()
        #: session -> its last call's items, tools' JSON and prompt (the most recent
        #: PROMPTS_KEPT sessions)
        self._prompts: dict[str, tuple[list[_Item], str, str]] = {}
        #: session -> its last call's lists (the most recent PROMPTS_KEPT sessions)
        self._lists: dict[str, _Lists] = {}
        #: tokens counted (each message once) and tokens in all calls' prompts
        self.tokens_counted = 0
        self.tokens_in_calls = 0

    # ------------------------------------------------------------------ preparing

    def _prepare(self, call: Call) -> tuple[_Prepared, list[_Item]]:
        ctx = self._contexts.get(call.session_id)
        if ctx is None:
            ctx = self._contexts[call.session_id] = _Context()
        ctx.stitch(call.context)
        tok = tokenizer_for_model(call.model)
        if tok not in self._tokenizers:  # loaded beside the reading, by the time it counts
            self._tokenizers.add(tok)
            preload(tok)
        items = list(ctx.items)
        comp = call.compaction
        summarize = comp is not None and comp is not ctx.compacted_by
        replaced: list[_Item] = []
        if comp is not None and summarize:
            ctx.compacted_by = comp
            if comp._items is None:
                scratch = _Context()
                scratch.stitch(comp.replaced)
                comp._items = [it for it in scratch.items if it.kind != "system"]
            replaced = comp._items
        fresh = [it for it in (*items, *replaced) if tok not in it.tokens and it.pending != tok]
        for it in fresh:
            it.pending = tok
        unknown: list[str] = []
        total = 0
        for seg in ctx.segs:
            if seg.unknown:
                total += len(seg.unknown)
                unknown.extend(seg.unknown[: MAX_LISTED - len(unknown)])
        source = ctx.counts[-1] if ctx.counts else (0,) * len(TALLIED)
        prep = _Prepared(call, items, source, unknown, total, tok, summarize)
        return prep, fresh

    def traces(self, calls: Iterable[Call]) -> Iterator[Trace]:
        """The traces of ``calls`` (in order). New texts are counted in batches, on the
        counting threads or process, while the next batches of calls are read from the
        log: a batch's traces are made once its counts are back, or once ``AHEAD``
        batches wait; while a tokenizer is still loading in this process
        (``tokens.preload``) the log is read on, and the batch grows, rather than wait."""
        batch: list[_Prepared] = []
        todo: dict[str, list[_Item]] = {}
        chars = 0
        waiting: deque[tuple[list[_Prepared], list[_Counting]]] = deque()
        for call in calls:
            prep, fresh = self._prepare(call)
            batch.append(prep)
            if fresh:
                todo.setdefault(prep.tok, []).extend(fresh)
                chars += sum(len(it.entry.content) for it in fresh)
            if (chars >= BATCH_CHARS or len(batch) >= BATCH_CALLS) and not any(map(loading, todo)):
                waiting.append((batch, _start_counting(todo)))
                batch, todo, chars = [], {}, 0
                while len(waiting) > AHEAD or (
                    len(waiting) > 1 and all(c.pending.ready() for c in waiting[0][1])
                ):
                    yield from self._finish_batch(*waiting.popleft())
        waiting.append((batch, _start_counting(todo)))
        while waiting:
            yield from self._finish_batch(*waiting.popleft())

    def _finish_batch(self, batch: list[_Prepared], started: list[_Counting]) -> Iterator[Trace]:
        for c in started:
            for it, n in zip(c.items, c.pending.result(), strict=True):
                it.tokens[c.counter.name] = n
                self.tokens_counted += n
        for prep in batch:
            yield self._trace(prep)

    # ------------------------------------------------------------------ one trace

    def _config(self, inp: CapturedInput, tok: str) -> Config:
        key = (tok, inp.window, inp.output_reserve)
        cfg = self._configs.get(key)
        if cfg is None:
            cfg = self._configs[key] = import_config(inp, tok)
        return cfg

    def _trace(self, prep: _Prepared) -> Trace:
        call, items, tok = prep.call, prep.items, prep.tok
        timer = Timer()
        counter = get_counter(tok)
        lists = self._lists_of(call.session_id, items)
        with timer.stage("gather"):
            g = _gather(prep, counter, lists)
        used = g.instr + g.tools_n + g.last[S_CONV] + g.overhead
        reserve = g.inp.output_reserve or 0
        window, available, warns = window_warnings(g.window, used, reserve)
        with timer.stage("select"):
            decisions, partitions, must = self._decisions(
                prep,
                lists,
                g.last,
                g.query_at,
                bool(g.system),
                g.instr,
                g.tools_n,
                g.overhead,
                g.n_messages,
                available,
            )
        totals = Totals(
            window=window,
            output_reserve=reserve,
            safety_margin=0,
            available=available,
            used=used,
            tokenizer=counter.name,
        )
        warns.extend(_call_warnings(call, used, counter.name))
        result = finish(
            prompt=self._prompt(call.session_id, items, g.tools_json),
            messages=lists.flat[:],
            decisions=decisions,
            partitions=partitions,
            totals=totals,
            must_keep_ids=must,
            warnings=warns,
            timer=timer,
            report=lists.report_of(decisions, available, used, must),
        )
        self.tokens_in_calls += used
        return _trace(
            {
                "trace_id": stable_id(self.builder.name, call.session_id, call.key),
                "session_id": call.session_id,
                "turn": call.turn,
                "created_at": call.created_at,
                "builder": self.builder,
                "tags": ["imported"],
                "metadata": self._metadata(prep, window, g.source, used, counter.name),
                "input": g.inp,
                "config": self._config(g.inp, tok),
                "result": result,
                "outcome": _outcome(call),
            }
        )

    def _lists_of(self, session: str, items: list[_Item]) -> _Lists:
        """The session's ``_Lists``, made up to date with this call's ``items``."""
        lists = self._lists.pop(session, None)
        if lists is None or not lists.continues(items):
            lists = _Lists()
        lists.update(items)
        self._lists[session] = lists
        if len(self._lists) > PROMPTS_KEPT:
            del self._lists[next(iter(self._lists))]
        return lists

    def _prompt(self, session: str, items: list[_Item], tools_json: str) -> str:
        """The call's rendered prompt (``_prompt_pieces``). A call whose items are the session's
        previous call's and more (the same objects), with the same tools, renders as that
        call's prompt and the new items' blocks: one copy of it, not a join of every block
        again (a long session's prompt is megabytes, and a join re-encodes each block)."""
        last = self._prompts.pop(session, None)
        prompt: str | None = None
        if last is not None:
            prev, prev_tools, prev_prompt = last
            n = len(prev)
            if (
                n
                and len(items) >= n
                and prev_tools == tools_json
                and items[:n] == prev  # the same objects (``_Lists.continues``)
            ):
                if len(items) == n:
                    prompt = prev_prompt
                elif not (_in_run(prev[-1]) and _in_run(items[n])):  # no block runs across
                    pieces = _prompt_pieces(items[n:], "", "\n\n")
                    prompt = "".join((prev_prompt, *pieces))  # one copy
                    grew(prompt, prev_prompt, pieces)  # the writer need not compare them
        if prompt is None:
            pieces = _prompt_pieces(items, tools_json)
            prompt = "".join(pieces)
            grew(prompt, "", pieces)  # made whole: the writer names the items' texts in it
        self._prompts[session] = (items, tools_json, prompt)
        if len(self._prompts) > PROMPTS_KEPT:
            del self._prompts[next(iter(self._prompts))]
        return prompt

    def _decisions(
        self,
        prep: _Prepared,
        lists: _Lists,
        last: tuple[int, ...],
        query_at: int | None,
        has_system: bool,
        instr: int,
        tools_n: int,
        overhead: int,
        n_messages: int,
        available: int,
    ) -> tuple[list[Decision], list[PartitionUsage], list[str]]:
        """``derive_result``'s decisions, partitions and must-keep ids, decisions in prompt
        order. A conversation item's rank and budget follow from the items before it, so
        its decision is made once and reused while the head (instructions, tools, what a
        compaction replaced) stays the same; only the query's and the format's are new."""
        call, items, tok = prep.call, prep.items, prep.tok
        head: list[Decision] = []
        left = available
        if has_system:
            left -= instr
            head.append(_kept(INSTRUCTIONS_ID, "instructions", 0, instr, left))
        if call.tools:
            left -= tools_n
            note = [f"{len(call.tools)} tool definitions, counted as compact JSON"]
            head.append(_kept(TOOLS_ID, "tools", len(head), tools_n, left, note))
        if prep.summarize and call.compaction is not None:
            head.extend(_summarized(call.compaction, len(head), left, tok))
        rank0 = len(head)
        key = (rank0, left, tok)

        def decide(it: _Item) -> None:
            s, n = it.sums, it.tokens[tok]
            rank = rank0 + s[S_ITEMS] - 1
            it.decision = _kept(it.item_id, it.kind, rank, n, left - s[S_CONV], it.entry.notes)
            it.key = key

        out = head + lists.conv_decisions(key, decide)
        lists.head, lists.task_at = len(head), None
        must = [INSTRUCTIONS_ID] if has_system else []
        if last[S_SYS_N]:
            must += lists.must
        must.append(TASK_ID)
        q = 0
        if query_at is not None:
            it = items[query_at]
            q, s = it.tokens[tok], it.sums
            if it.task_key != key or it.task is None:
                rank = rank0 + s[S_ITEMS] - 1
                it.task = _kept(TASK_ID, "task", rank, q, left - s[S_CONV], it.entry.notes)
                it.task_key = key
            out[rank0 + s[S_ITEMS] - 1] = it.task
            lists.task_at = s[S_ITEMS] - 1
        else:  # no user message: an empty task, as derive has one
            out.append(_kept(TASK_ID, "task", len(out), 0, left - last[S_CONV]))
        note = [
            f"{FORMAT_TOKENS_PER_MESSAGE} tokens of chat format per message × "
            f"{n_messages} + {FORMAT_TOKENS_REPLY} to prime the reply"
        ]
        end = left - last[S_CONV] - overhead
        out.append(_kept(FORMAT_ID, "format", len(out), overhead, end, note))
        one = 1 if query_at is not None else 0
        usage = {
            "system": (instr + last[S_SYS], int(has_system) + last[S_SYS_N]),
            "tool definitions": (tools_n, 1 if call.tools else 0),
            "history": (last[S_HIST_USED] - q, last[S_HIST_N] - one),
            "tool results": (last[S_TOOL], last[S_TOOL_N]),
            "current message": (q, 1),
            "format overhead": (overhead, 1),
        }
        partitions = [
            _usage(name, *usage[name]) for name in IMPORT_PARTITIONS if usage.get(name, (0, 0))[1]
        ]
        return out, partitions, must

    def _metadata(
        self, prep: _Prepared, window: int, source: str | None, used: int, tok: str
    ) -> dict[str, Any]:
        call = prep.call
        counts = source_counts(dict(zip(TALLIED, prep.source, strict=True)))
        counts["tools"] = len(call.tools)
        imp: dict[str, Any] = {"format": self.fmt, "source": counts}
        if prep.unknown_total:
            imp["kept_as_text"] = prep.unknown
            imp["kept_as_text_total"] = prep.unknown_total
        if source is not None:
            imp["window_source"] = source
        elif call.window is None:
            imp["window_known"] = False
        reported = reported_prompt_tokens(call.usage)
        if reported is not None:
            imp["prompt_tokens"] = {
                "reported": reported,
                "counted": used,
                "difference": used - reported,
                "tokenizer": tok,
            }
        imp["recorded"] = list(call.recorded)
        imp["reconstructed"] = list(call.reconstructed)
        if call.skipped:
            imp["skipped"] = list(call.skipped)
        if call.compaction is not None:
            imp["compaction"] = {
                "at": call.compaction.label,
                "summarized": len(call.compaction._items or []),
                **call.compaction.info,
            }
        meta: dict[str, Any] = {"import": imp}
        if call.model:
            meta["model"] = call.model
        meta.update(call.metadata)
        return meta


#: The running sums an item keeps (``_Item.sums``, up to and including it), by position.
S_CONV, S_HIST_USED, S_TOOL, S_SYS, S_HIST_N, S_TOOL_N, S_SYS_N = 0, 1, 2, 3, 4, 5, 6
S_MESSAGES, S_ITEMS, S_HIST, S_LAST_USER = 7, 8, 9, 10
_NO_SUMS = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1)


def _sums(items: list[_Item], tok: str, counter: TokenCounter) -> tuple[int, ...]:
    """The running sums of the last item (tokens per partition, items, messages, the last
    user message): an item's are made once, from the item before it, since the items before
    an item never change (a different context is new items)."""
    k = len(items)
    while k > 0 and items[k - 1].sums_tok != tok:
        k -= 1
    prev = items[k - 1].sums if k else _NO_SUMS
    for pos in range(k, len(items)):
        it = items[pos]
        n = it.tokens.get(tok)
        if n is None:  # counted for another call's tokenizer only
            n = it.tokens[tok] = counter.count(it.entry.content)
        c, hu, tu, su, hn, tn, sn, msgs, ni, nh, lu = prev
        if it.flat.role not in ("system", "developer"):
            msgs += 1
        if it.kind != "system":
            c += n
            ni += 1
            if it.kind == "tool_result":
                tu, tn = tu + n, tn + 1
            elif it.kind == "policy":
                su, sn = su + n, sn + 1
            else:
                hu, hn = hu + n, hn + 1
        if it.entry.history is not None:
            nh += 1
            if it.entry.user:
                lu = pos
        prev = it.sums = (c, hu, tu, su, hn, tn, sn, msgs, ni, nh, lu)
        it.sums_tok = tok
    return prev


def _decision(
    pid: str,
    kind: str,
    status: Status,
    reason: Reason,
    text: str,
    rank: int,
    before: int,
    after: int,
    left: int,
    notes: list[str],
) -> Decision:
    """A decision of an imported call. Every call of a session decides again on every
    message before it (a long session: hundreds of thousands of decisions), so the values,
    all computed here (the ids and kinds strings, the counts ints), are set without
    pydantic's validation (``models.unvalidated``) once the numbers are checked against the
    model's bounds; out of bounds, ``Decision`` validates them and words the error.
    ``tests/test_import_sessions.py`` compares them with validated decisions."""
    if (
        INT32_MIN <= rank <= MAX_INT32
        and -MAX_TOKENS <= before <= MAX_TOKENS
        and -MAX_TOKENS <= after <= MAX_TOKENS
        and -MAX_TOKENS <= left <= MAX_TOKENS
        and type(pid) is str
        and type(kind) is str
    ):
        return unvalidated(
            Decision,
            {
                "packet_id": pid,
                "kind": kind,
                "status": status,
                "reason": reason,
                "reason_text": text,
                "partition": _partition(kind),
                "relevance": None,
                "recency": None,
                "score": None,
                "rank": rank,
                "tokens_before": before,
                "tokens_after": after,
                "budget_left": left,
                "notes": notes,
            },
        )
    return Decision(
        packet_id=pid,
        kind=kind,
        status=status,
        reason=reason,
        reason_text=text,
        partition=_partition(kind),
        rank=rank,
        tokens_before=before,
        tokens_after=after,
        budget_left=left,
        notes=notes,
    )


def _when(at: object) -> bool:
    """An aware datetime well inside the calendar (what ``models.Timestamp`` accepts)."""
    return (
        type(at) is datetime
        and at.utcoffset() is not None
        and 1 < at.year < 9999  # the first and last years can leave the calendar in UTC
    )


def _input(
    query: str,
    now: datetime,
    system: str,
    history: list[Message],
    packets: list[Packet],
    tools: list[ToolDef],
    window: int | None,
    reserve: int | None,
) -> CapturedInput:
    """A call's captured input. Its parts are validated models already (each message, packet
    and tool was made from the log once, and is shared by the calls that hold it), so the
    input of every call is set without pydantic walking them all again, once what it would
    check holds: the strings' lengths, the time, the bounds, that every part is its model,
    unique packet ids. Anything else is validated (and refused as pydantic words it)."""
    ids = [p.id for p in packets]
    if (
        type(query) is str
        and type(system) is str
        and len(query) <= MAX_CONTENT_CHARS
        and len(system) <= MAX_CONTENT_CHARS
        and _when(now)
        and all(type(m) is Message for m in history)
        and all(type(p) is Packet for p in packets)
        and all(type(t) is ToolDef for t in tools)
        and (window is None or (type(window) is int and 0 < window <= MAX_TOKENS))
        and (reserve is None or (type(reserve) is int and 0 <= reserve <= MAX_TOKENS))
        and len(set(ids)) == len(ids)
    ):
        return unvalidated(
            CapturedInput,
            {
                "query": query,
                "now": now,
                "system_instructions": system,
                "history": list(history),
                "packets": list(packets),
                "tools": list(tools),
                "window": window,
                "output_reserve": reserve,
            },
        )
    return CapturedInput(
        query=query,
        now=now,
        system_instructions=system,
        history=history,
        packets=packets,
        tools=tools,
        window=window,
        output_reserve=reserve,
    )


#: the fields ``_trace`` is given (the others keep their defaults)
_TRACE_GIVEN = (
    "trace_id",
    "session_id",
    "turn",
    "created_at",
    "builder",
    "tags",
    "metadata",
    "input",
    "config",
    "result",
    "outcome",
)


def _outcome(call: Call) -> Outcome | None:
    """The call's outcome: its output, its usage as recorded and, read by the call's
    mapping, as ``TokenUsage``; ``None`` when the log records neither output nor usage."""
    tokens = normalize_usage(call.usage_mapping, call.usage) if call.usage_mapping else None
    if not call.usage and tokens is None and call.output is None:
        return None
    return Outcome(output=call.output, usage=call.usage, tokens=tokens)


def _trace(given: dict[str, Any]) -> Trace:
    """A call's trace, set without validation as ``_input`` is once every field holds what
    pydantic would accept as it is (the metadata checked by ``check_free_json``, as the
    model checks it); otherwise validated."""
    meta = given["metadata"]
    if (
        given.keys() == set(_TRACE_GIVEN)
        and type(given["trace_id"]) is str
        and given["trace_id"]
        and type(given["session_id"]) is str
        and type(given["turn"]) is int
        and INT32_MIN <= given["turn"] <= MAX_INT32
        and _when(given["created_at"])
        and type(given["builder"]) is Builder
        and type(given["tags"]) is list
        and all(type(t) is str for t in given["tags"])
        and type(meta) is dict
        and all(type(k) is str for k in meta)
        and type(given["input"]) is CapturedInput
        and type(given["config"]) is Config
        and type(given["result"]) in (BuildResult, type(None))
        and type(given["outcome"]) in (Outcome, type(None))
    ):
        try:
            check_free_json(meta)
        except ValueError:
            return Trace(**given)
        values = {
            "schema_": SCHEMA,
            **{k: given[k] for k in _TRACE_GIVEN[:6]},
            "metadata": meta,
            "source_trace_id": None,
            "redactions": {},
            **{k: given[k] for k in _TRACE_GIVEN[7:]},
        }
        return unvalidated(Trace, values, given=set(_TRACE_GIVEN))
    return Trace(**given)


def _usage(name: str, used: int, items: int) -> PartitionUsage:
    """A partition's usage in an imported call, set without validation as ``_decision``
    is (the name one of IMPORT_PARTITIONS, the numbers checked against the bounds)."""
    if -MAX_TOKENS <= used <= MAX_TOKENS and INT32_MIN <= items <= MAX_INT32:
        return unvalidated(
            PartitionUsage, {"name": name, "budget": None, "used": used, "items": items}
        )
    return PartitionUsage(name=name, budget=None, used=used, items=items)


def _kept(
    pid: str, kind: str, rank: int, n: int, left: int, notes: list[str] | None = None
) -> Decision:
    # what the source builder thought is unknown: it simply fit
    return _decision(
        pid, kind, Status.KEPT, Reason.FITS, KEPT_TEXT, rank, n, n, left, list(notes or [])
    )


def _in_run(it: _Item) -> bool:
    """Whether an item's message joins its neighbours' in one block (``_prompt_pieces``)."""
    return it.flat.role in ("system", "developer")


def _prompt_pieces(items: list[_Item], tools_json: str, sep: str = "") -> list[str]:
    """The pieces of the items' rendered prompt (``derive.render_prompt`` of their flat
    messages: blocks ``[role]`` and text, a blank line between, a run of system/developer
    messages one block), ``sep`` before the first: each item's text is a piece of its own
    (the item's own string, which the shared writer knows as its part), the lines around
    them the pieces between."""
    out: list[str] = [f"{sep}[tools]\n{tools_json}"] if tools_json else []
    sep = "\n\n" if out else sep
    k = 0
    while k < len(items):
        if not _in_run(items[k]):
            flat = items[k].flat
            out += (f"{sep}[{flat.role}]\n", flat.content)
            k += 1
        else:  # a run of system/developer messages: one block
            j = k + 1
            while j < len(items) and _in_run(items[j]):
                j += 1
            run = [x.flat for x in items[k:j]]
            label = "/".join(dict.fromkeys(m.role for m in run))
            out.append(f"{sep}[{label}]\n" + "\n\n".join(m.content for m in run))
            k = j
        sep = "\n\n"
    return out


def _summarized(comp: Compaction, rank: int, left: int, tok: str) -> list[Decision]:
    """The messages a compaction replaced: summarized, with no tokens left in the prompt."""
    if comp._decided is not None and comp._decided[0] == (rank, left, tok):
        return comp._decided[1]
    counter = get_counter(tok)
    text = f"replaced by the summary of {comp.label}: the model saw the summary, not this message"
    out: list[Decision] = []
    for it in comp._items or []:
        if tok not in it.tokens:
            it.tokens[tok] = counter.count(it.entry.content)
        out.append(
            _decision(
                it.item_id,
                it.kind,
                Status.SUMMARIZED,
                Reason.DEGRADED,
                text,
                rank + len(out),
                it.tokens[tok],
                0,
                left,
                [],
            )
        )
    comp._decided = ((rank, left, tok), out)
    return out


__all__ = [
    "BATCH_CHARS",
    "Call",
    "CallTraces",
    "Compaction",
    "KEPT_TEXT",
    "Segment",
    "prepare",
]
