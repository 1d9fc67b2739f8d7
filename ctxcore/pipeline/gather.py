"""Gather and the config-independent half of scoring, for the ``ctxscope`` preset.

``prepare(input, tokenizer, counter)`` turns a captured input into a ``Prepared`` value:
one ``Item`` per candidate (instructions, tool definitions, each history message, each
caller packet), each with its rendered prompt segment, its exact token count, partition,
must-keep reason, BM25 relevance and age. Everything here depends only on the input and the
tokenizer, never on weights or budgets, so one ``Prepared`` serves every build and every
sweep cell over the same input: a warm re-run or a 400-cell sweep gathers once.

Token accounting is exact by construction: the prompt is a concatenation of segments that
each end in a newline and start with ``[`` (a partition header), ``## `` (an item's source-id
line) or the fixed output text, so cl100k/o200k never merge tokens across a segment boundary
and the prompt's count is the sum of its segments' counts (tests check this on the real
corpus, including text that starts with ``/``, which o200k would otherwise glue to a
preceding ``]\n``). Gather therefore counts each rendered segment once, in one batch.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ctxcore.errors import InputError
from ctxcore.models import PARTITIONS, CapturedInput, Packet
from ctxcore.pipeline.common import INSTRUCTIONS_ID, history_id
from ctxcore.pipeline.signals import Signals, Source, compute
from ctxcore.scoring import (
    QueryTerms,
    bm25_from_tf,
    lowered,
    priority_norm,
    term_frequencies,
)
from ctxcore.summarize import FILE_KINDS, REPO_MAP_KINDS, TOOL_KINDS
from ctxcore.tokens import TokenCounter

TOOLS_ID = "builder:tools"
HISTORY_SUMMARY_ID = "builder:history:summary"
QUERY_ID = "builder:query"

ROLE, TASK, STATE, EVIDENCE, CONTEXT, OUTPUT = PARTITIONS

OUTPUT_TEXT = (
    "Answer the task above using only this context. Cite the source ids (for example "
    "tool:call_12) behind each claim, say what is missing or uncertain, and end with the "
    "next concrete step.\n"
)

#: kind → partition (anything else goes to [Context])
KIND_PARTITION: dict[str, str] = {
    "instructions": ROLE,
    "system": ROLE,
    "system_instruction": ROLE,
    "policy": ROLE,
    "tools": ROLE,
    "task": TASK,
    "constraint": TASK,
    "goal": TASK,
    "state": STATE,
    "task_state": STATE,
    "plan": STATE,
    "evidence": EVIDENCE,
    "retrieval": EVIDENCE,
    "rag_result": EVIDENCE,
    "knowledge": EVIDENCE,
    "knowledge_base": EVIDENCE,
    "tool_result": EVIDENCE,
    "tool": EVIDENCE,
    "log": EVIDENCE,
    "file": EVIDENCE,
    "code": EVIDENCE,
    "repo_map": EVIDENCE,
}
PARTITION_INDEX = {name: i for i, name in enumerate(PARTITIONS)}

_LEADING_BLANK = re.compile(r"\s*[\r\n]")
_TOOL_KINDS = frozenset({"tool_result", "tool", "log", "observation", "tool_output"})
_STATE_KINDS = frozenset({"state", "task_state"})


def normalize(text: str) -> str:
    """Drop leading blank lines and trailing whitespace (keeps first-line indentation).

    This is what makes segments additive: no segment starts with a newline and every
    rendered segment ends with exactly its own newlines.
    """
    m = _LEADING_BLANK.match(text)
    if m is not None:
        text = text[m.end() :]
    return text.rstrip()


def segment(item_id: str, label: str, text: str) -> str:
    """The rendered form of one item: an id line, the text, a blank line."""
    head = f"## {item_id}" + (f" · {label}" if label else "")
    return f"{head}\n{text}\n\n" if text else f"{head}\n\n"


def header(partition: str) -> str:
    return f"{partition}\n"


@dataclass
class Item:
    """One candidate, prepared: what it renders to and what it costs."""

    id: str
    kind: str
    text: str  # normalized content
    segment: str  # rendered, exactly as it appears in the prompt
    tokens: int  # count of ``segment``
    raw_tokens: int | None  # the caller's own count, if given
    partition: str
    order: int
    must_keep: str | None  # why it is must-keep, or None
    builder_made: bool = False
    history_pos: int | None = None  # index among history messages (0 = oldest)
    role: str | None = None
    caller_relevance: float | None = None
    duplicate_of: str | None = None
    no_timestamp: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Prepared:
    """A gathered, counted, relevance-scored input (independent of weights and budgets)."""

    input: CapturedInput
    tokenizer: str
    items: list[Item]
    tokens: npt.NDArray[np.int64]
    relevance: npt.NDArray[np.float64]
    ages: npt.NDArray[np.float64]  # hours, NaN = no timestamp
    priority: npt.NDArray[np.float64]
    partition: npt.NDArray[np.int64]
    header_tokens: dict[str, int]
    task_segment: str
    task_tokens: int
    output_segment: str
    output_tokens: int
    query_terms: QueryTerms
    #: what each item is about beyond shared words (``signals``)
    signals: Signals
    #: the arrays that depend only on the items (``item_arrays``), made while counting
    arrays: dict[str, Any]
    #: memo of degraded versions: (item index, rung, summarizer id, extra) → (text, tokens)
    degraded: dict[tuple[Any, ...], tuple[str, int]] = field(default_factory=dict)
    recency_memo: dict[float, npt.NDArray[np.float64]] = field(default_factory=dict)
    rungs_memo: dict[tuple[str, ...], list[str | None]] = field(default_factory=dict)
    summarizers: dict[int, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # plain lists and masks the per-config plan reads (built once per input)
        self.tokens_list: list[int] = self.tokens.tolist()
        self.relevance_list: list[float] = self.relevance.tolist()
        self.partition_list: list[int] = self.partition.tolist()
        a = self.arrays
        self.index_of: dict[str, int] = a["index_of"]
        self.must_keep_idx: list[int] = a["must_keep_idx"]
        self.is_must_keep: npt.NDArray[np.bool_] = a["is_must_keep"]
        self.is_history: npt.NDArray[np.bool_] = a["is_history"]
        self.history_pos: npt.NDArray[np.int64] = a["history_pos"]
        self.n_history = int(a["n_history"])
        self.is_empty: npt.NDArray[np.bool_] = a["is_empty"]
        self.is_duplicate: npt.NDArray[np.bool_] = a["is_duplicate"]
        self.has_caller_relevance: npt.NDArray[np.bool_] = a["has_caller_relevance"]

    def rungs_for(self, ladder: tuple[str, ...]) -> list[str | None]:
        """The ladder rung that can shrink each item (None: it can only be dropped)."""
        hit = self.rungs_memo.get(ladder)
        if hit is None:
            kinds = (
                ("tool_results", TOOL_KINDS),
                ("files", FILE_KINDS),
                ("repo_map", REPO_MAP_KINDS),
            )
            hit = []
            for it in self.items:
                rung: str | None = None
                if it.history_pos is not None:
                    rung = "recent" if "recent" in ladder else None
                else:
                    for name, ks in kinds:
                        if it.kind in ks and name in ladder:
                            rung = name
                            break
                hit.append(rung)
            self.rungs_memo[ladder] = hit
        return hit

    def recency(self, tau_hours: float) -> npt.NDArray[np.float64]:
        rec = self.recency_memo.get(tau_hours)
        if rec is None:
            ages = self.ages
            rec = np.where(np.isnan(ages), 0.5, np.exp(-np.nan_to_num(ages) / tau_hours))
            self.recency_memo[tau_hours] = rec
        return rec


def item_arrays(items: list[Item]) -> dict[str, Any]:
    """What ``Prepared`` keeps about the items besides their counts and scores."""
    n = len(items)
    is_history = np.array([it.history_pos is not None for it in items], dtype=bool)
    return {
        "index_of": {it.id: i for i, it in enumerate(items)},
        "must_keep_idx": [i for i, it in enumerate(items) if it.must_keep],
        "is_must_keep": np.array([it.must_keep is not None for it in items], dtype=bool),
        "is_history": is_history,
        "history_pos": np.array(
            [it.history_pos if it.history_pos is not None else n for it in items],
            dtype=np.int64,
        ),
        "n_history": int(is_history.sum()),
        "is_empty": np.array([not it.text for it in items], dtype=bool),
        "is_duplicate": np.array([it.duplicate_of is not None for it in items], dtype=bool),
        "has_caller_relevance": np.array(
            [it.caller_relevance is not None for it in items], dtype=bool
        ),
        "partition": np.asarray([PARTITION_INDEX[it.partition] for it in items], dtype=np.int64),
        "caller": [
            (i, min(max(it.caller_relevance, 0.0), 1.0))
            for i, it in enumerate(items)
            if it.caller_relevance is not None
        ],
    }


def _tools_json(input: CapturedInput) -> str:
    return json.dumps(
        [t.model_dump(mode="json") for t in input.tools],
        ensure_ascii=False,
        sort_keys=True,
        separators=(",", ":"),
    )


def _is_failure(meta: dict[str, Any]) -> bool:
    """A tool result that failed: a non-zero exit/return code or an error flag."""
    code = meta.get("exit_code", meta.get("returncode"))
    if isinstance(code, int) and not isinstance(code, bool) and code != 0:
        return True
    return bool(
        meta.get("failed") is True
        or meta.get("error") is True
        or meta.get("is_error") is True
        or meta.get("status") == "error"
    )


@dataclass
class _Candidates:
    """The items gather has made so far, with what ``Prepared`` derives from them later."""

    items: list[Item] = field(default_factory=list)
    stamps: list[Any] = field(default_factory=list)  # datetime or None
    priorities: list[int] = field(default_factory=list)

    def add(self, item: Item, timestamp: Any, priority: int = 0) -> Item:
        self.items.append(item)
        self.stamps.append(timestamp)
        self.priorities.append(priority)
        return item

    def add_made(
        self,
        item_id: str,
        kind: str,
        label: str,
        text: str,
        partition: str,
        timestamp: Any,
        must_keep: str | None = None,
    ) -> Item:
        """Add an item the builder makes itself (instructions, tools, a message)."""
        seg = segment(item_id, label, text)
        order = len(self.items)
        item = Item(item_id, kind, text, seg, 0, None, partition, order, must_keep, True)
        return self.add(item, timestamp)


def gather(
    input: CapturedInput,
    counter: TokenCounter,
    meanwhile: Callable[[list[Item]], None] | None = None,
) -> Prepared:
    """Build every candidate, render its segment, count all segments in one batch.

    ``meanwhile(items)``, if given, runs on this thread while the counts are being made
    (the items' ``tokens`` are still 0): work a build will need that does not depend on
    token counts."""
    cands = _builder_items(input)
    _check_reserved_ids(input, cands.items)
    # the segments first: counting them starts as soon as they exist, and everything
    # else gather does (the packets' items, duplicates, relevance, ages) happens meanwhile
    p_texts = [normalize(p.content) for p in input.packets]
    p_segments = [segment(p.id, "", text) for p, text in zip(input.packets, p_texts, strict=True)]
    task_segment = segment(QUERY_ID, "", normalize(input.query)) if input.query.strip() else ""
    output_segment = OUTPUT_TEXT
    heads = [header(p) for p in PARTITIONS]
    texts = [it.segment for it in cands.items] + p_segments + heads + [task_segment, output_segment]
    # tiktoken holds no GIL while it encodes: count on background threads
    pending = counter.count_many_started(texts)

    _add_packets(input, p_texts, p_segments, cands)
    items, stamps = cands.items, cands.stamps
    _mark_duplicates(items)
    q = QueryTerms.of(input.query)
    texts = [it.text for it in items]
    lows = lowered(texts)  # read by BM25 and by the signals
    tf = term_frequencies(q, texts, lows)
    ages = _ages_hours(input, stamps)
    for it, ts in zip(items, stamps, strict=True):
        it.no_timestamp = ts is None
    if meanwhile is not None:
        meanwhile(items)
    arrays = item_arrays(items)
    priority = priority_norm(cands.priorities)
    # the signals read only texts and metadata: they too are worked out while tiktoken counts
    sig = compute(input, [_source(it, ts) for it, ts in zip(items, stamps, strict=True)], lows)

    counts = pending()
    n = len(items)
    for it, c in zip(items, counts[:n], strict=False):
        it.tokens = c
    header_tokens = dict(zip(PARTITIONS, counts[n : n + len(PARTITIONS)], strict=True))
    task_tokens, output_tokens = counts[-2], counts[-1]
    tokens = np.asarray(counts[:n], dtype=np.int64)
    rel = bm25_from_tf(tf, tokens)
    for i, value in arrays["caller"]:
        rel[i] = value  # a caller's relevance wins over BM25
    return Prepared(
        input=input,
        tokenizer=counter.name,
        items=items,
        tokens=tokens,
        relevance=rel,
        ages=ages,
        priority=priority,
        partition=arrays["partition"],
        header_tokens=header_tokens,
        task_segment=task_segment,
        task_tokens=task_tokens,
        output_segment=output_segment,
        output_tokens=output_tokens,
        query_terms=q,
        signals=sig,
        arrays=arrays,
    )


def _source(it: Item, timestamp: Any) -> Source:
    """What the signals read of an item (only caller packets carry metadata)."""
    is_packet = not it.builder_made
    return Source(it.id, it.kind, it.text, it.metadata, timestamp, is_packet, it.caller_relevance)


def _builder_items(input: CapturedInput) -> _Candidates:
    """The items the builder makes itself: instructions, tool definitions, each message."""
    cands = _Candidates()
    now = input.now
    if input.system_instructions.strip():
        text = normalize(input.system_instructions)
        cands.add_made(INSTRUCTIONS_ID, "instructions", "", text, ROLE, now, "system instructions")
    if input.tools:
        label = f"{len(input.tools)} tools"
        cands.add_made(TOOLS_ID, "tools", label, _tools_json(input), ROLE, now, "tool definitions")
    for k, msg in enumerate(input.history):
        text = normalize(msg.content)
        item = cands.add_made(history_id(k), "history", msg.role, text, CONTEXT, msg.timestamp)
        item.history_pos = k
        item.role = msg.role
    return cands


def _check_reserved_ids(input: CapturedInput, builder_items: list[Item]) -> None:
    made = {it.id for it in builder_items} | {HISTORY_SUMMARY_ID, QUERY_ID}
    for k, p in enumerate(input.packets):
        if p.id in made:
            raise InputError(
                f"packets[{k}].id {p.id!r} is the id of a packet the ctxscope builder makes "
                "itself; rename the packet (ids starting with 'builder:' are reserved)"
            )


def _add_packets(
    input: CapturedInput, texts: list[str], segments: list[str], cands: _Candidates
) -> None:
    """One item per caller packet; the latest failure becomes must-keep."""
    first = len(cands.items)
    for p, text, seg in zip(input.packets, texts, segments, strict=True):
        item = Item(
            p.id,
            p.kind,
            text,
            seg,
            0,
            p.tokens,
            KIND_PARTITION.get(p.kind, CONTEXT),
            len(cands.items),
            _must_keep_reason(p),
            caller_relevance=p.relevance,
            metadata=p.metadata,
        )
        cands.add(item, p.timestamp, p.priority)
    k = _latest_failure(input.packets)
    if k is not None and cands.items[first + k].must_keep is None:
        cands.items[first + k].must_keep = "latest failure"


def _must_keep_reason(p: Packet) -> str | None:
    kind = p.kind
    if p.must_keep:
        return "marked must_keep"
    if kind in ("task", "goal"):
        return "current task"
    if kind in ("constraint", "policy"):
        return "explicit constraint"
    if kind == "plan" or (kind in _STATE_KINDS and p.metadata.get("active")):
        return "active plan"
    return None


def _latest_failure(packets: list[Packet]) -> int | None:
    """The packet the caller flags as the latest failure, else the failed tool result with
    the latest timestamp (the first one when none has a timestamp)."""
    latest: int | None = None
    flagged: int | None = None
    for k, p in enumerate(packets):
        if p.metadata.get("latest_failure") is True:
            flagged = k
        if p.kind in _TOOL_KINDS and _is_failure(p.metadata):
            if latest is None:
                latest = k
                continue
            then = packets[latest].timestamp
            if p.timestamp is not None and (then is None or p.timestamp >= then):
                latest = k
    return flagged if flagged is not None else latest


def _mark_duplicates(items: list[Item]) -> None:
    """A caller packet with the same normalized content as an earlier one is a duplicate."""
    first: dict[str, str] = {}
    for it in items:
        if it.text and not it.builder_made:
            prev = first.setdefault(it.text, it.id)
            if prev != it.id:
                it.duplicate_of = prev


def _ages_hours(input: CapturedInput, stamps: list[Any]) -> npt.NDArray[np.float64]:
    """Each item's age in hours at ``input.now`` (NaN without a timestamp, 0 if later)."""
    now = input.now
    return np.array(
        [np.nan if ts is None else max((now - ts).total_seconds(), 0.0) / 3600.0 for ts in stamps],
        dtype=np.float64,
    )


#: the metadata keys gather reads (failure detection, active plan)
_META_KEYS = (
    "exit_code",
    "returncode",
    "failed",
    "error",
    "is_error",
    "status",
    "active",
    "latest_failure",
    # read by the signals
    "command",
    "current_turn",
    "search_hits",
    "modified_at",
    "linked_test",
    "path",
    "file",
    "filename",
)


def content_key(input: CapturedInput) -> tuple[Any, ...] | None:
    """Everything of ``input`` that gather reads, as a hashable value (None if it cannot be).

    Lets an equal input that is a different object (a Streamlit cache returns copies)
    reuse the prepared form: hashing it costs about a millisecond for 1,000 packets.
    """
    key = (
        input.query,
        input.now,
        input.system_instructions,
        tuple(
            (m.role, m.content, m.timestamp, json.dumps(m.metadata.get("tool_calls"), default=str))
            for m in input.history
        ),
        tuple(
            (
                p.id,
                p.kind,
                p.content,
                p.timestamp,
                p.relevance,
                p.priority,
                p.must_keep,
                p.tokens,
                json.dumps(list(map(p.metadata.get, _META_KEYS)), default=str),
            )
            for p in input.packets
        ),
        _tools_json(input) if input.tools else "",
    )
    try:
        hash(key)
    except TypeError:  # an unhashable metadata value (a list, a dict)
        return None
    return key


class _PreparedCache:
    """A small LRU of ``Prepared`` values, by input identity and then by content.

    Identity first (the entry keeps the object alive, so an id is never reused while
    cached): the sweep and a script re-running one input hit it for free. Then by content,
    for equal copies of an input (a Streamlit cache returns copies): only entries with the
    same query, time, sizes, packet-text length and tokenizer are compared, by
    ``content_key`` (about a millisecond for 1,000 packets, made only then, so a cold input
    never pays it; a replay of a store once paid it twice per trace for turns of other
    sessions with the same shape and time, which the text length tells apart). A miss
    gathers again; counting is still cached by text in the ``TokenCounter``.

    It holds up to 64 inputs (a replay of a 44-turn session re-runs every turn on each knob
    change: 8 entries made it gather every turn again each time), and at most
    ``max_packets`` packets and ``max_chars`` characters of text (packets and history) across
    them, so a few very large inputs cannot hold the memory of hundreds of small ones (the
    most recent entry always stays).
    """

    def __init__(
        self, size: int = 64, max_packets: int = 40_000, max_chars: int = 16_000_000
    ) -> None:
        # (the input object itself is kept beside its entry: a content hit is stored under the
        # new object's id, and that id must not be reused by another input while cached)
        self._data: OrderedDict[tuple[int, str], tuple[CapturedInput, Prepared]] = OrderedDict()
        self._recent: OrderedDict[int, tuple[tuple[Any, ...], Prepared]] = OrderedDict()
        self._size = size
        self._max_packets = max_packets
        self._max_chars = max_chars
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._recent.clear()

    def get(
        self,
        input: CapturedInput,
        counter: TokenCounter,
        meanwhile: Callable[[list[Item]], None] | None = None,
    ) -> Prepared:
        key = (id(input), counter.name)
        # the text's length too: inputs of the same shape and time (turn k of many
        # sessions) rarely share it, and a content_key is made only for those that do
        chars = _text_chars(input)
        fp = (input.query, input.now, len(input.history), len(input.packets), counter.name, chars)
        with self._lock:
            entry = self._data.get(key)
            if entry is not None and entry[0] is input:
                self._data.move_to_end(key)
                return entry[1]
            hit: Prepared | None = None
            same = [prep for f, prep in self._recent.values() if f == fp]
        if same:
            ckey = content_key(input)
            if ckey is not None:
                hit = next((prep for prep in same if _content_key_of(prep) == ckey), None)
        if hit is None:
            hit = gather(input, counter, meanwhile)
            hit.__dict__.setdefault("_chars", chars)
        with self._lock:
            self._data[key] = (input, hit)
            self._data.move_to_end(key)
            self._recent[id(hit)] = (fp, hit)
            self._recent.move_to_end(id(hit))
            packets = chars = 0
            for _, prep in self._recent.values():
                packets += len(prep.input.packets) + 1
                chars += _chars_of(prep)
            while len(self._recent) > 1 and (
                len(self._recent) > self._size
                or packets > self._max_packets
                or chars > self._max_chars
            ):
                _, (_, gone) = self._recent.popitem(last=False)
                packets -= len(gone.input.packets) + 1
                chars -= _chars_of(gone)
            while len(self._data) > self._size:
                self._data.popitem(last=False)
            kept = {id(prep) for _, prep in self._recent.values()}
            for k in [k for k, (_, prep) in self._data.items() if id(prep) not in kept]:
                del self._data[k]  # an input whose preparation was evicted goes with it
        return hit


def _text_chars(input: CapturedInput) -> int:
    """The characters of text an input holds: its packets and its history (an imported
    session log's turn is mostly history: a bound on packet text alone let 64 of them hold
    hundreds of MB)."""
    return sum(len(p.content) for p in input.packets) + sum(len(m.content) for m in input.history)


def _chars_of(prep: Prepared) -> int:
    """The characters of text ``prep``'s input holds (counted once)."""
    if "_chars" not in prep.__dict__:
        prep.__dict__["_chars"] = _text_chars(prep.input)
    n: int = prep.__dict__["_chars"]
    return n


def _content_key_of(prep: Prepared) -> tuple[Any, ...] | None:
    """``content_key`` of the input ``prep`` was gathered from (made once)."""
    if "_content_key" not in prep.__dict__:
        prep.__dict__["_content_key"] = content_key(prep.input)
    ckey: tuple[Any, ...] | None = prep.__dict__["_content_key"]
    return ckey


PREPARED = _PreparedCache()


def prepare(
    input: CapturedInput,
    counter: TokenCounter,
    meanwhile: Callable[[list[Item]], None] | None = None,
) -> Prepared:
    """The (cached) prepared form of ``input`` for ``counter``'s tokenizer (``meanwhile``:
    see ``gather``; it only runs when the input is gathered, not on a cache hit)."""
    return PREPARED.get(input, counter, meanwhile)
