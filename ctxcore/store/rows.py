"""Trace -> Arrow rows: the per-column data the store bulk-inserts.

Kept apart from ``tracestore`` (the only module with SQL) because it is pure and picklable:
ingest turns batches of traces into ``RowTables`` in worker processes with ``prepare``, and
the owning process only assigns ``tseq`` and inserts them (``Store.bulk_writer``).
A trace is read through ``TraceLike``: a ``models.Trace``, or the struct
``ctxcore.store.fastdecode`` decodes.

One trace whose rows cannot be built (a value the models should have refused, a bug in a
detector) never costs the others: ``prepare`` then builds the batch trace by trace and
hands back the ones that failed, with why (``RowTables.rejected``), for the caller to
report on their lines.

No stored value is longer than ``PART_BYTES``: a trace's compressed JSON is cut into
``trace_parts`` rows, and each distinct packet text of a batch goes once into ``contents``
(in pieces), its decisions naming it by ``cid`` (docs/design.md, "Store"). A trace's JSON is
kept in the shared form (``splitting``): its body in ``trace_parts``, each item and piece
of text it names once per batch in ``parts``; the store packs the ones it lacks
(``new_parts``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import struct
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import chain
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctxcore.cache import PromptReader
from ctxcore.costing import encode_summary, summarize, summary_version
from ctxcore.errors import CtxscopeError
from ctxcore.models import Finding, Status, Trace
from ctxcore.store.codec import (
    is_shared,
    join_parts,
    pack_json,
    pack_shared,
    part_ids,
    unpack_json,
)
from ctxcore.store.splitting import SplitJSON, Splitter

log = logging.getLogger("ctxscope.store")

#: each thread's ``PromptReader`` for the cost summaries, kept from one batch to the next:
#: a reader keeps the previous call's blocks, so a batch's first trace reads only what it
#: adds to the call before it, which the batch before held (one per thread, as a reader
#: is one session's calls read in turn)
_READERS = threading.local()


def _prompt_reader() -> PromptReader:
    """This thread's ``PromptReader`` (``_READERS``)."""
    reader: PromptReader | None = getattr(_READERS, "reader", None)
    if reader is None:
        reader = _READERS.reader = PromptReader()
    return reader


_LOST = (Status.DROPPED, Status.FILTERED, Status.SUMMARIZED)
_SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


#: a trace's normalized usage (``outcome.tokens``) as columns of its row, beside ``model``
USAGE_COLUMNS = (
    "input_tokens", "cache_read_tokens", "cache_write_tokens", "cache_write_5m_tokens",
    "cache_write_1h_tokens", "output_tokens", "reasoning_tokens",
)  # fmt: skip
_TRACE_COLS = (
    "trace_id", "tseq", "session_id", "turn", "created_at", "preset", "builder",
    "builder_version", "budget", "used", "n_packets", "n_kept", "n_truncated", "n_summarized",
    "n_dropped", "n_filtered", "n_not_rendered", "n_warnings", "lost_must_keep", "verdict",
    "tags", "source_trace_id", "source_file", "content_hash", "ingested_at", "n_findings",
    "max_severity", "json_bytes", "diagnosed_with", "model", *USAGE_COLUMNS,
)  # fmt: skip
_DECISION_COLS = (
    "tseq", "trace_id", "ord", "packet_id", "kind", "tokens_before", "tokens_after",
    "relevance", "recency", "score", "rank", "status", "reason", "reason_text", "partition",
    "budget_left", "must_keep", "cid",
)  # fmt: skip
_PARTITION_COLS = ("tseq", "trace_id", "ord", "name", "budget", "used", "items")
_FINDING_COLS = (
    "tseq", "trace_id", "ord", "detector", "severity", "packet_ids", "message",
    "evidence_json", "fix_json",
)  # fmt: skip
_I64, _I32, _F64, _STR = pa.int64(), pa.int32(), pa.float64(), pa.string()
_TS = pa.timestamp("us")
_STRS = pa.list_(pa.string())
_BIN = pa.large_binary()
_SCHEMAS: dict[str, pa.Schema] = {
    "traces": pa.schema(
        [("trace_id", _STR), ("tseq", _I64), ("session_id", _STR), ("turn", _I32),
         ("created_at", _TS), ("preset", _STR), ("builder", _STR), ("builder_version", _STR),
         ("budget", _I64), ("used", _I64)]
        + [(c, _I32) for c in _TRACE_COLS[10:19]]
        + [("verdict", _STR), ("tags", _STRS), ("source_trace_id", _STR),
           ("source_file", _STR), ("content_hash", _STR), ("ingested_at", _TS),
           ("n_findings", _I32), ("max_severity", _STR), ("json_bytes", _I64),
           ("diagnosed_with", _STR), ("model", _STR)]
        + [(c, _I64) for c in USAGE_COLUMNS]
    ),
    # the trace's JSON, packed whole or shared (``codec``), in pieces of PART_BYTES, in order
    "trace_parts": pa.schema([("tseq", _I64), ("part", _I32), ("data", pa.large_binary())]),
    # each part the batch's shared traces name: its id and JSON (not stored as such:
    # ``new_parts`` packs the ones the store lacks)
    "parts": pa.schema([("pid", _STR), ("data", pa.large_binary())]),
    "decisions": pa.schema(
        [("tseq", _I64), ("trace_id", _STR), ("ord", _I32), ("packet_id", _STR),
         ("kind", _STR), ("tokens_before", _I64), ("tokens_after", _I64),
         ("relevance", _F64), ("recency", _F64), ("score", _F64), ("rank", _I32),
         ("status", _STR), ("reason", _STR), ("reason_text", _STR), ("partition", _STR),
         ("budget_left", _I64), ("must_keep", pa.bool_()), ("cid", _I64)]
    ),
    # a packet's text in pieces of at most PART_BYTES (``text_parts``); ``tail`` holds the
    # start of the next piece, for a search word across the two
    "contents": pa.schema([("cid", _I64), ("part", _I32), ("text", _STR), ("tail", _STR)]),
    "partitions": pa.schema(
        [("tseq", _I64), ("trace_id", _STR), ("ord", _I32), ("name", _STR),
         ("budget", _I64), ("used", _I64), ("items", _I32)]
    ),
    "findings": pa.schema(
        [("tseq", _I64), ("trace_id", _STR), ("ord", _I32), ("detector", _STR),
         ("severity", _STR), ("packet_ids", _STRS), ("message", _STR),
         ("evidence_json", _STR), ("fix_json", _STR)]
    ),
}  # fmt: skip

#: each trace's cost summary (``costing.encode_summary``, packed) in pieces of PART_BYTES,
#: in order: a session is costed from them without reading its traces
#: (docs/design.md, "Store")
COST_PARTS = pa.schema([("tseq", _I64), ("part", _I32), ("data", pa.large_binary())])
_SIZE = struct.Struct("<I")


def pack_summary(raw: bytes) -> bytes:
    """A cost summary's JSON as ``cost_parts`` keeps it: its length, then packed."""
    return _SIZE.pack(len(raw)) + pack_json(raw)


def unpack_summary(blob: bytes) -> bytes:
    """The JSON ``pack_summary`` packed."""
    (size,) = _SIZE.unpack_from(blob)
    return unpack_json(blob[_SIZE.size :], size)


def utc_naive(dt: datetime) -> datetime:
    """The form timestamps are stored in: UTC without tzinfo (see ``migrations``)."""
    if dt.tzinfo is None:
        return dt
    return dt.astimezone(UTC).replace(tzinfo=None)


def content_hash(raw: bytes) -> str:
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


#: The longest value stored, in bytes. DuckDB keeps a string or blob under 4 KiB inside
#: its column segment, and a checkpoint after an append then writes the new rows only; a
#: longer one it keeps apart, and a checkpoint read those of the table's whole last row
#: group again: every trace of a store of up to 122,880, past its memory limit
#: (docs/design.md, "Store").
PART_BYTES = 4000
#: Characters of the next piece of a text kept beside a piece (``contents.tail``): a search
#: word up to this long is found across the cut (docs/design.md, "Store").
TAIL_CHARS = 256
#: How many stored packet texts (digest -> cid) a migration remembers, the most recently
#: used (a process: from this many to twice as many): a text one of them holds is not
#: stored again (docs/design.md, "Store").
TEXT_KEYS = 50_000


def text_parts(text: str) -> list[str]:
    """``text`` in pieces of at most PART_BYTES bytes of UTF-8, cut between characters (one
    piece, maybe empty, at least); every piece but the last holds 1,000 characters or more."""
    if text.isascii():
        return [text[i : i + PART_BYTES] for i in range(0, max(len(text), 1), PART_BYTES)]
    raw = text.encode("utf-8", "surrogatepass")
    out: list[str] = []
    i = 0
    while i < len(raw):
        j = min(i + PART_BYTES, len(raw))
        while j < len(raw) and raw[j] & 0xC0 == 0x80:  # not inside a character
            j -= 1
        out.append(raw[i:j].decode("utf-8", "surrogatepass"))
        i = j
    return out


def text_digest(text: str) -> bytes:
    """What tells two packet texts apart in the store's ``contents`` (16 bytes)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def blob_parts(blobs: Sequence[bytes]) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """The blobs cut into pieces of PART_BYTES (one piece, maybe empty, at least): the
    pieces (one Arrow array over the joined bytes, nothing copied again), and for each
    piece the index of its blob and its number in it."""
    data = b"".join(blobs)
    lens = np.fromiter(map(len, blobs), np.int64, len(blobs))
    counts = np.maximum(1, -(-lens // PART_BYTES))
    ends = np.cumsum(counts)
    which = np.repeat(np.arange(len(blobs), dtype=np.int64), counts)
    number = np.arange(int(ends[-1]) if len(blobs) else 0, dtype=np.int64) - np.repeat(
        ends - counts, counts
    )
    starts = np.repeat(np.cumsum(lens) - lens, counts) + number * PART_BYTES
    offsets = np.append(starts, len(data)).astype(np.int64)
    arr = pa.Array.from_buffers(
        pa.large_binary(), len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    return arr, which, number


class PacketLike(Protocol):
    """A packet as ``RowBatch`` reads it (``models.Packet`` or its fastdecode struct)."""

    @property
    def id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def tokens(self) -> int | None: ...
    @property
    def relevance(self) -> float | None: ...
    @property
    def must_keep(self) -> bool: ...


class MessageLike(Protocol):
    """A history message as ``RowBatch`` reads it."""

    @property
    def content(self) -> str: ...


class InputLike(Protocol):
    """A captured input as ``RowBatch`` reads it."""

    @property
    def system_instructions(self) -> str: ...
    @property
    def history(self) -> Sequence[MessageLike]: ...
    @property
    def packets(self) -> Sequence[PacketLike]: ...


class DecisionLike(Protocol):
    """A decision as ``RowBatch`` reads it; ``status`` and ``reason`` are the StrEnums of
    ``models`` or, from fastdecode, their plain values (Arrow stores either as the string)."""

    @property
    def packet_id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def reason_text(self) -> str: ...
    @property
    def partition(self) -> str | None: ...
    @property
    def relevance(self) -> float | None: ...
    @property
    def recency(self) -> float | None: ...
    @property
    def score(self) -> float | None: ...
    @property
    def rank(self) -> int | None: ...
    @property
    def tokens_before(self) -> int: ...
    @property
    def tokens_after(self) -> int: ...
    @property
    def budget_left(self) -> int | None: ...


class PartitionLike(Protocol):
    """A partition's usage as ``RowBatch`` reads it."""

    @property
    def name(self) -> str: ...
    @property
    def budget(self) -> int | None: ...
    @property
    def used(self) -> int: ...
    @property
    def items(self) -> int: ...


class ReportLike(Protocol):
    """A build report as ``RowBatch`` reads it."""

    @property
    def budget(self) -> int: ...
    @property
    def used(self) -> int: ...


class ResultLike(Protocol):
    """A build result as ``RowBatch`` reads it."""

    @property
    def decisions(self) -> Sequence[DecisionLike]: ...
    @property
    def partitions(self) -> Sequence[PartitionLike]: ...
    @property
    def report(self) -> ReportLike: ...
    @property
    def warnings(self) -> Sequence[str]: ...


class ConfigLike(Protocol):
    """A trace's config as ``RowBatch`` reads it."""

    @property
    def preset(self) -> str: ...


class BuilderLike(Protocol):
    """A trace's builder as ``RowBatch`` reads it."""

    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...


class TokensLike(Protocol):
    """A call's normalized usage (``models.TokenUsage``) as ``RowBatch`` reads it."""

    @property
    def input_tokens(self) -> int | None: ...
    @property
    def cache_read_tokens(self) -> int | None: ...
    @property
    def cache_write_tokens(self) -> int | None: ...
    @property
    def cache_write_5m_tokens(self) -> int | None: ...
    @property
    def cache_write_1h_tokens(self) -> int | None: ...
    @property
    def output_tokens(self) -> int | None: ...
    @property
    def reasoning_tokens(self) -> int | None: ...


class OutcomeLike(Protocol):
    """A trace's outcome as ``RowBatch`` reads it."""

    @property
    def verdict(self) -> str: ...
    @property
    def tokens(self) -> TokensLike | None: ...


class TraceLike(Protocol):
    """A trace as ``RowBatch`` reads it: a ``models.Trace``, or the struct
    ``ctxcore.store.fastdecode`` decodes (same attribute names and value types; the fast
    path skips pydantic, see that module). Read-only members, so that the models' narrower
    types (a StrEnum for ``str``, a list for a ``Sequence``) satisfy them."""

    @property
    def trace_id(self) -> str: ...
    @property
    def session_id(self) -> str: ...
    @property
    def turn(self) -> int: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def builder(self) -> BuilderLike: ...
    @property
    def tags(self) -> Sequence[str]: ...
    @property
    def source_trace_id(self) -> str | None: ...
    @property
    def input(self) -> InputLike: ...
    @property
    def config(self) -> ConfigLike: ...
    @property
    def result(self) -> ResultLike | None: ...
    @property
    def outcome(self) -> OutcomeLike | None: ...
    @property
    def metadata(self) -> Mapping[str, Any]: ...


def _usage_values(trace: TraceLike) -> dict[str, Any]:
    """The ``model`` and ``USAGE_COLUMNS`` columns of a trace's row (None where it does not
    say)."""
    model = trace.metadata.get("model")
    tokens = trace.outcome.tokens if trace.outcome is not None else None
    out: dict[str, Any] = {"model": model if isinstance(model, str) else None}
    for name in USAGE_COLUMNS:
        out[name] = None if tokens is None else getattr(tokens, name)
    return out


def diagnose_trace(trace: TraceLike, raw: bytes) -> tuple[list[Finding], str | None]:
    """Findings of ``ctxcore.diagnostics`` for one trace, with the bulk options (no
    counterfactual fix search; Inspect adds fixes on demand), and the fingerprint of the
    code that computed them (None when the detectors could not take the trace: it is
    stored without findings, and nobody takes that for its findings)."""
    # imported here: a store that defers diagnostics (a team writer, ingest's workers)
    # never loads the detectors (~0.2 s of every such process's start)
    from ctxcore import diagnostics

    full = trace if isinstance(trace, Trace) else Trace.model_validate_json(raw)
    try:
        found = diagnostics.diagnose(full, options=diagnostics.INGEST_OPTIONS)
    except CtxscopeError as exc:  # e.g. a captured input the preset cannot build
        log.warning("diagnostics skipped trace %s: %s", full.trace_id, exc)
        return [], None
    return found, diagnostics.fingerprint()


#: a tally's counts before its decisions (copied: ``dict.fromkeys`` over the enum is slower)
_NO_COUNTS: dict[str, int] = dict.fromkeys(Status, 0)


@dataclass
class _Tally:
    """What a trace's decisions add up to, for its ``traces`` row."""

    counts: dict[str, int]
    #: must_keep packets dropped, filtered or summarized
    lost: int = 0
    n_packets: int = 0


def _decision_texts(
    trace: TraceLike, decs: Sequence[DecisionLike], pkts: Sequence[PacketLike | None]
) -> list[str | None]:
    """The text each decision is about: its packet's, the builder's instructions or history
    for those two pseudo-packets, None for another packet the input does not hold."""
    out: list[str | None] = []
    for x, pk in zip(decs, pkts, strict=True):
        if pk is not None:
            out.append(pk.content)
        elif x.packet_id == "builder:instructions":
            out.append(trace.input.system_instructions)
        elif x.packet_id == "builder:history":
            out.append("\n".join(m.content for m in trace.input.history))
        else:
            out.append(None)
    return out


class RowBatch:
    """Column lists for one bulk insert, turned into Arrow tables at the end."""

    def __init__(self, diagnose: bool = True) -> None:
        self.diagnose = diagnose
        self.cols: dict[str, dict[str, list[Any]]] = {
            name: {c: [] for c in schema.names}
            for name, schema in _SCHEMAS.items()
            if name not in ("trace_parts", "parts", "contents")
        }
        #: each distinct packet text of the batch -> its index (the ``cid`` its decisions
        #: hold until the store assigns the real one); digested and cut at the end
        self._texts: dict[str, int] = {}
        self.text_digests: list[bytes] = []
        #: (tseq, packed JSON) of each trace, cut into ``trace_parts`` at the end
        self._blobs: list[tuple[int, bytes]] = []
        #: (tseq, packed cost summary) of each trace, cut into ``cost_parts`` at the end;
        #: the thread's reader, kept across batches (a session's calls share their messages)
        self._summaries: list[tuple[int, bytes]] = []
        self._reader = _prompt_reader()
        #: the parts the batch's shared traces name (JSON by id)
        self._parts: dict[str, bytes] = {}
        #: each built trace's decisions since the last ``_flush_decisions``
        self._decs: list[Sequence[DecisionLike]] = []

    def _cid(self, text: str | None) -> int | None:
        """The batch's index of a packet text."""
        if text is None:
            return None
        ix = self._texts.get(text)
        if ix is None:
            ix = self._texts[text] = len(self._texts)
        return ix

    def _cids(self, texts: Sequence[str | None]) -> list[int | None]:
        """The batch's index of each text (``_cid``), in one comprehension: a new text
        gets the next index (``setdefault`` is given it before it adds the text)."""
        known = self._texts
        return [None if t is None else known.setdefault(t, len(known)) for t in texts]

    def add_parts(self, parts: Mapping[str, bytes]) -> None:
        """The parts a shared trace names, each once per batch."""
        self._parts.update(parts)

    def add(
        self,
        trace: TraceLike,
        raw: bytes,
        blob: bytes,
        digest: str,
        tseq: int,
        source: str | None,
    ) -> None:
        """Queue one trace's rows; ``blob`` is ``pack_json(raw)``, ``digest`` its hash."""
        result = trace.result
        if result is not None:
            tally = self._decisions(trace, result, tseq)
            self._partitions(trace.trace_id, tseq, result.partitions)
        else:
            tally = self._packets(trace, tseq)
        full = trace if isinstance(trace, Trace) else None
        if self.diagnose and full is None:
            full = Trace.model_validate_json(raw)
        findings: list[Finding] | None = None
        diagnosed_with: str | None = None
        if self.diagnose and full is not None:
            findings, diagnosed_with = diagnose_trace(full, raw)
        if full is not None:
            self.add_summary(full, tseq)
        max_sev = self.add_findings(trace.trace_id, tseq, findings) if findings else None
        values = self._trace_values(trace, tseq, tally)
        values.update(
            source_file=source,
            content_hash=digest,
            ingested_at=utc_naive(datetime.now(UTC)),
            # NULL = not diagnosed yet (deferred, see Store.diagnose_pending).
            n_findings=None if findings is None else len(findings),
            max_severity=max_sev,
            json_bytes=len(raw),
            diagnosed_with=diagnosed_with,
        )
        t = self.cols["traces"]
        for c, v in values.items():
            t[c].append(v)
        self._blobs.append((tseq, blob))

    def add_summary(self, trace: Trace, tseq: int) -> None:
        """Queue a trace's cost summary (``costing.summarize``), marked with the code that
        made it. A trace decoded without pydantic and not diagnosed here has none until
        ``Store.diagnose_pending`` makes it; meanwhile its reader summarizes it from the
        trace (docs/design.md, "Cost and prices")."""
        call = summarize(trace, self._reader)
        raw = encode_summary(call, summary_version())
        self._summaries.append((tseq, pack_summary(raw)))

    def _decisions(self, trace: TraceLike, result: ResultLike, tseq: int) -> _Tally:
        """Queue a built trace's decision rows (each naming its packet's text); what they
        add up to."""
        decs = result.decisions
        n = len(decs)
        packets = {p.id: p for p in trace.input.packets}
        pkts = [packets.get(x.packet_id) for x in decs]
        must = [
            pk.must_keep if pk is not None else x.reason == "MUST_KEEP"
            for x, pk in zip(decs, pkts, strict=True)
        ]
        statuses = [x.status for x in decs]
        tally = _Tally(dict(_NO_COUNTS), n_packets=n)
        for st, k in Counter(statuses).items():
            tally.counts[st] += k
        tally.lost = sum(1 for m, st in zip(must, statuses, strict=True) if m and st in _LOST)
        d = self.cols["decisions"]
        # Column by column: list comprehensions cost far less than 18 appends per row.
        d["tseq"] += [tseq] * n
        d["trace_id"] += [trace.trace_id] * n
        d["ord"] += range(n)
        # Status/Reason are StrEnums (or their plain values, from fastdecode): Arrow
        # stores either as the string.
        d["status"] += statuses
        d["must_keep"] += must
        d["cid"] += self._cids(_decision_texts(trace, decs, pkts))
        self._decs.append(decs)  # the decisions' own fields: read a batch at a time
        return tally

    def _flush_decisions(self) -> None:
        """The decision rows' own fields, of the decisions queued since the last flush: a
        comprehension a column for the batch, not one a trace (kept in the rows' order)."""
        if not self._decs:
            return
        decs = list(chain.from_iterable(self._decs))
        self._decs = []
        d = self.cols["decisions"]
        d["packet_id"] += [x.packet_id for x in decs]
        d["kind"] += [x.kind for x in decs]
        d["tokens_before"] += [x.tokens_before for x in decs]
        d["tokens_after"] += [x.tokens_after for x in decs]
        d["relevance"] += [x.relevance for x in decs]
        d["recency"] += [x.recency for x in decs]
        d["score"] += [x.score for x in decs]
        d["rank"] += [x.rank for x in decs]
        d["reason"] += [x.reason for x in decs]
        d["reason_text"] += [x.reason_text for x in decs]
        d["partition"] += [x.partition for x in decs]
        d["budget_left"] += [x.budget_left for x in decs]

    def _partitions(self, tid: str, tseq: int, partitions: Sequence[PartitionLike]) -> None:
        """Queue a built trace's partition rows."""
        p = self.cols["partitions"]
        for i, part in enumerate(partitions):
            p["tseq"].append(tseq)
            p["trace_id"].append(tid)
            p["ord"].append(i)
            p["name"].append(part.name)
            p["budget"].append(part.budget)
            p["used"].append(part.used)
            p["items"].append(part.items)

    def _packets(self, trace: TraceLike, tseq: int) -> _Tally:
        """A captured input without a result: a decision row per packet (no status), so that
        its packets are still searchable."""
        self._flush_decisions()  # the rows before this trace's, in order
        d = self.cols["decisions"]
        for i, pkt in enumerate(trace.input.packets):
            for c in _DECISION_COLS:
                d[c].append(None)
            d["tseq"][-1], d["trace_id"][-1], d["ord"][-1] = tseq, trace.trace_id, i
            d["packet_id"][-1], d["kind"][-1] = pkt.id, pkt.kind
            d["tokens_before"][-1], d["relevance"][-1] = pkt.tokens, pkt.relevance
            d["must_keep"][-1], d["cid"][-1] = pkt.must_keep, self._cid(pkt.content)
        return _Tally(dict(_NO_COUNTS), n_packets=len(trace.input.packets))

    @staticmethod
    def _trace_values(trace: TraceLike, tseq: int, tally: _Tally) -> dict[str, Any]:
        """The columns of a trace's ``traces`` row that the trace itself gives."""
        result = trace.result
        counts = tally.counts
        return {
            "trace_id": trace.trace_id,
            "tseq": tseq,
            "session_id": trace.session_id,
            "turn": trace.turn,
            "created_at": utc_naive(trace.created_at),
            "preset": trace.config.preset,
            "builder": trace.builder.name,
            "builder_version": trace.builder.version,
            "budget": result.report.budget if result else 0,
            "used": result.report.used if result else 0,
            "n_packets": tally.n_packets,
            "n_kept": counts[Status.KEPT],
            "n_truncated": counts[Status.TRUNCATED],
            "n_summarized": counts[Status.SUMMARIZED],
            "n_dropped": counts[Status.DROPPED],
            "n_filtered": counts[Status.FILTERED],
            "n_not_rendered": counts[Status.NOT_RENDERED],
            "n_warnings": len(result.warnings) if result else 0,
            "lost_must_keep": tally.lost,
            "verdict": trace.outcome.verdict if trace.outcome else "unknown",
            "tags": list(trace.tags),
            "source_trace_id": trace.source_trace_id,
            **_usage_values(trace),
        }

    def add_findings(self, tid: str, tseq: int, findings: list[Finding]) -> str | None:
        """Queue finding rows; returns the highest severity."""
        f = self.cols["findings"]
        max_sev: str | None = None
        for i, fd in enumerate(findings):
            f["tseq"].append(tseq)
            f["trace_id"].append(tid)
            f["ord"].append(i)
            f["detector"].append(fd.detector)
            f["severity"].append(fd.severity)
            f["packet_ids"].append(list(fd.packet_ids))
            f["message"].append(fd.message)
            f["evidence_json"].append(json.dumps(fd.evidence, default=str))
            f["fix_json"].append(None if fd.fix is None else json.dumps(fd.fix, default=str))
            if max_sev is None or _SEVERITY_RANK[fd.severity] > _SEVERITY_RANK[max_sev]:
                max_sev = fd.severity
        return max_sev

    def _contents(self) -> pa.Table | None:
        """The batch's distinct packet texts in pieces (``text_parts``), each named by its
        index; ``text_digests`` gets their digests. Most texts are one piece: those go in
        one step, the longer ones are cut one by one."""
        texts = list(self._texts)
        if not texts:
            return None
        self.text_digests = [text_digest(t) for t in texts]
        c: dict[str, list[Any]] = {"cid": [], "part": [], "text": [], "tail": []}
        # a text of at most PART_BYTES // 4 characters is at most PART_BYTES bytes
        short = PART_BYTES // 4
        if all(len(t) <= short for t in texts):
            c["cid"], c["part"], c["text"] = list(range(len(texts))), [0] * len(texts), texts
            c["tail"] = [None] * len(texts)
        else:
            for ix, text in enumerate(texts):
                parts = [text] if len(text) <= short else text_parts(text)
                c["cid"] += [ix] * len(parts)
                c["part"] += range(len(parts))
                c["text"] += parts
                c["tail"] += [p[:TAIL_CHARS] for p in parts[1:]] + [None]
        schema = _SCHEMAS["contents"]
        return pa.Table.from_arrays(
            [
                pa.array(c["cid"], _I64),
                pa.array(c["part"], _I32),
                _bulk_array(list(c["text"]), _STR),
                pa.array(c["tail"], _STR),
            ],
            schema=schema,
        )

    def _parts_table(self) -> pa.Table | None:
        """The batch's parts of shared traces, one row each."""
        if not self._parts:
            return None
        return pa.Table.from_arrays(
            [pa.array(list(self._parts), _STR), _binaries(list(self._parts.values()))],
            schema=_SCHEMAS["parts"],
        )

    def tables(self) -> dict[str, pa.Table]:
        self._flush_decisions()
        out: dict[str, pa.Table] = {}
        for name, table in (("contents", self._contents()), ("parts", self._parts_table())):
            if table is not None:
                out[name] = table
        for name, cols in self.cols.items():
            schema = _SCHEMAS[name]
            if not cols[schema.names[0]]:
                continue
            arrays = [pa.array(cols[f.name], f.type) for f in schema]
            out[name] = pa.Table.from_arrays(arrays, schema=schema)
        if self._blobs:
            data, which, number = blob_parts([b for _, b in self._blobs])
            tseqs = np.fromiter((t for t, _ in self._blobs), np.int64, len(self._blobs))
            out["trace_parts"] = pa.Table.from_arrays(
                [pa.array(tseqs[which], _I64), pa.array(number, _I32), data],
                schema=_SCHEMAS["trace_parts"],
            )
        if self._summaries:
            data, which, number = blob_parts([b for _, b in self._summaries])
            tseqs = np.fromiter((t for t, _ in self._summaries), np.int64, len(self._summaries))
            out["cost_parts"] = pa.Table.from_arrays(
                [pa.array(tseqs[which], _I64), pa.array(number, _I32), data], schema=COST_PARTS
            )
        return out


def _bulk_array(values: list[Any], typ: pa.DataType) -> pa.Array:
    """A big text column from one joined buffer (``pa.array`` converts one object at a
    time: about three times slower on packet texts)."""
    if None in values:
        return pa.array(values, typ)
    text = "".join(values)
    if not text.isascii():  # byte lengths differ from str lengths: convert one by one
        return pa.array(values, typ)
    data = text.encode("ascii")
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, values), np.int64, len(values)), out=offsets[1:])
    if len(data) >= 2**31:  # beyond 32-bit offsets
        return pa.array(values, typ)
    return pa.Array.from_buffers(
        typ, len(values), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


@dataclass
class RowTables:
    """The rows of a batch of traces, ready to insert; ``tseq`` holds the index in ``ids``
    and ``cid`` the index in ``text_digests`` until the store assigns the real ones.
    Picklable, so ingest can make them in worker processes."""

    ids: list[str]
    digests: list[str]
    sources: list[str | None]
    tables: dict[str, pa.Table]
    #: where each trace was in the batch given to ``prepare`` (``ids[k]`` was item
    #: ``positions[k]``): the same unless some were rejected
    positions: list[int] = field(default_factory=list)
    #: (position in that batch, why) of the traces whose rows could not be built
    rejected: list[tuple[int, str]] = field(default_factory=list)
    #: the digest (``text_digest``) of each distinct packet text of the batch, by index
    text_digests: list[bytes] = field(default_factory=list)


def unexpected(exc: BaseException) -> str:
    """An unexpected exception while one trace was processed, as that trace's error."""
    detail = str(exc).strip().splitlines()
    text = detail[0][:300] if detail else "no detail"
    return (
        f"could not be stored ({type(exc).__name__}: {text}); the rest of the file was "
        "read. This is a bug in ctxscope: please report it with this line"
    )


#: the splitter of this process (``prepare`` runs in ingest's workers, one batch after
#: another: a session's next trace names the parts its last one split off)
_SPLITTER = Splitter()


def _packed(batch: RowBatch, trace: TraceLike, raw: bytes) -> bytes:
    """A trace's JSON as stored: shared when it can be (its parts queued in ``batch``),
    else whole. Bytes that carry their split (``SplitJSON``) are not split again."""
    if isinstance(raw, SplitJSON):
        split = raw.shared
    else:
        split = _SPLITTER.split(raw, trace.session_id)
    if split is None:
        return pack_json(raw)
    batch.add_parts(split.parts)
    return pack_shared(split.body, list(split.parts))


def _prepare(
    items: Sequence[tuple[TraceLike, bytes]],
    sources: Sequence[str | None],
    diagnose: bool,
    positions: list[int],
) -> RowTables:
    batch = RowBatch(diagnose)
    ids: list[str] = []
    digests: list[str] = []
    for k, ((trace, raw), src) in enumerate(zip(items, sources, strict=True)):
        blob = _packed(batch, trace, raw)
        # The digest of the packed bytes (a body naming its parts by their digests, or
        # the compressed JSON: a fraction of the text to hash). The same trace split
        # another way, or stored by another codec version, only costs a full comparison
        # (``inserts.same_as_stored``).
        digest = content_hash(blob)
        batch.add(trace, raw, blob, digest, k, src)
        ids.append(trace.trace_id)
        digests.append(digest)
    tables = batch.tables()
    return RowTables(ids, digests, list(sources), tables, positions, [], batch.text_digests)


def prepare(
    items: Sequence[tuple[TraceLike, bytes]], sources: Sequence[str | None], diagnose: bool = True
) -> RowTables:
    """Turn (trace, its UTF-8 JSON) pairs into Arrow tables (and findings, when ``diagnose``).

    Any exception while the batch is built sends it trace by trace: the traces that fail
    alone are left out and listed in ``rejected``, the rest are built as one batch."""
    try:
        return _prepare(items, sources, diagnose, list(range(len(items))))
    except Exception:  # one trace (or more) is at fault: find which below
        log.debug("a batch of %d traces failed; building them one by one", len(items))
    good: list[int] = []
    rejected: list[tuple[int, str]] = []
    for k, item in enumerate(items):
        try:
            _prepare([item], [sources[k]], diagnose, [k])
        except Exception as exc:
            rejected.append((k, unexpected(exc)))
        else:
            good.append(k)
    rows = _prepare([items[k] for k in good], [sources[k] for k in good], diagnose, good)
    rows.rejected = rejected
    return rows


def batch_blob(prep: RowTables, k: int) -> bytes:
    """Trace ``k`` of a prepared batch, packed (its ``trace_parts`` pieces joined; a shared
    one joined with the batch's parts), for ``codec.unpack_json``."""
    pieces = prep.tables["trace_parts"]
    rows = pieces.filter(pc.equal(pieces.column("tseq"), k))
    blob = b"".join(rows.column("data").to_pylist())
    if not is_shared(blob):
        return blob
    table = prep.tables["parts"]
    table = table.filter(pc.is_in(table.column("pid"), pa.array(part_ids(blob))))
    pids, datas = table.column("pid").to_pylist(), table.column("data").to_pylist()
    parts = dict(zip(pids, datas, strict=True))
    return join_parts(k, blob, parts)


#: bytes of parts packed together (unpacked), at most: a trace read unpacks every pack
#: that holds one of its parts, and the rest of each pack with it
PACK_BYTES = 1 << 20
#: the tables ``new_parts`` fills: where each part is (``start`` and ``size`` in its pack
#: unpacked), and the packs in pieces of PART_BYTES (``size``: the pack unpacked)
PART_TABLES: dict[str, pa.Schema] = {
    "shared_parts": pa.schema([("pid", _STR), ("pack", _STR), ("start", _I64), ("size", _I64)]),
    "part_packs": pa.schema(
        [("pack", _STR), ("part", _I32), ("size", _I64), ("data", pa.large_binary())]
    ),
}


def new_parts(
    prep: RowTables, texts: dict[bytes, int], memory: Callable[[bytes], int | None]
) -> dict[str, pa.Table]:
    """The rows that store ``prep``'s parts of shared traces that neither the open
    transaction (``texts``) nor the process (``memory``) stored: packed together in packs
    of up to PACK_BYTES (``PART_TABLES``). Those parts join ``texts`` (under the id's
    bytes, apart from the 16-byte text digests), to be remembered when the transaction
    commits. Shared by both engines. Only the ids become Python objects: the parts' JSON
    goes from the batch's Arrow buffer into the packs."""
    table = prep.tables.get("parts")
    if table is None:
        return {}
    keys: list[bytes] = table.column("pid").cast(pa.binary()).to_pylist()
    new = [k for k, key in enumerate(keys) if key not in texts and memory(key) is None]
    texts.update(dict.fromkeys([keys[k] for k in new], 0))
    return _packs(table.take(new)) if new else {}


def packed_parts(new: Sequence[tuple[str, bytes]]) -> dict[str, pa.Table]:
    """The rows of ``PART_TABLES`` that store parts (id, JSON), packed together in order,
    up to PACK_BYTES a pack."""
    if not new:
        return {}
    pids = pa.array([p for p, _ in new], _STR)
    return _packs(pa.Table.from_arrays([pids, _binaries([d for _, d in new])], ["pid", "data"]))


def _binaries(datas: Sequence[bytes]) -> pa.Array:
    """A large_binary array over one joined buffer (``pa.array`` copies bytes objects one
    by one, slowly)."""
    offsets = np.zeros(len(datas) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, datas), np.int64, len(datas)), out=offsets[1:])
    return pa.Array.from_buffers(
        _BIN, len(datas), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(datas))]
    )


def _pack_bounds(sizes: Sequence[int]) -> list[int]:
    """Where each pack starts among parts of these sizes, taken in order: a part that
    would take a pack past PACK_BYTES starts the next one."""
    bounds: list[int] = []
    size = PACK_BYTES
    for k, n in enumerate(sizes):
        if size + n > PACK_BYTES:
            bounds.append(k)
            size = 0
        size += n
    return bounds


def _packs(table: pa.Table) -> dict[str, pa.Table]:
    """``PART_TABLES``' rows for parts (a table of ``pid`` and ``data``, at least one
    row), packed together in order, up to PACK_BYTES a pack: each pack is the parts'
    stretch of the data buffer, compressed (``codec.pack_json``)."""
    data = table.column("data").combine_chunks().cast(_BIN)
    offsets = np.frombuffer(data.buffers()[1], np.int64)[data.offset : data.offset + len(data) + 1]
    values = data.buffers()[2]
    sizes = np.diff(offsets)
    bounds = _pack_bounds(sizes.tolist())
    ends = [*bounds[1:], len(sizes)]
    blobs = [
        pack_json(values[offsets[a] : offsets[b]].to_pybytes())
        for a, b in zip(bounds, ends, strict=True)
    ]
    names = pa.array([content_hash(b) for b in blobs], _STR)
    counts = np.diff(np.append(bounds, len(sizes)))
    group = np.repeat(np.arange(len(bounds), dtype=np.int64), counts)
    first = offsets[:-1][np.asarray(bounds, np.int64)]
    pack_sizes = pa.array(offsets[ends] - first, _I64)
    pieces, which, number = blob_parts(blobs)
    return {
        "shared_parts": pa.Table.from_arrays(
            [
                table.column("pid").combine_chunks().cast(_STR),
                names.take(pa.array(group)),
                pa.array(offsets[:-1] - np.repeat(first, counts), _I64),
                pa.array(sizes, _I64),
            ],
            schema=PART_TABLES["shared_parts"],
        ),
        "part_packs": pa.Table.from_arrays(
            [
                names.take(pa.array(which)),
                pa.array(number, _I32),
                pack_sizes.take(pa.array(which)),
                pieces,
            ],
            schema=PART_TABLES["part_packs"],
        ),
    }
