"""What the store's methods take and return: filters, rows, counts and file offsets.

Plain frozen dataclasses, apart from the engines so that the modules around the store
(the protocol, ingest, its readers, the watcher, replay, the app) share them without an
engine's driver. ``ctxcore.store.tracestore`` re-exports every one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class TraceFilter:
    """Everything the Traces page can filter on; all optional (None = no filter)."""

    session_id: str | None = None
    preset: str | None = None
    tags: tuple[str, ...] = ()  # every tag must be present
    verdict: str | None = None  # good | bad | unknown
    since: datetime | None = None
    until: datetime | None = None
    has_warnings: bool | None = None
    lost_must_keep: bool | None = None  # a must_keep packet dropped/filtered/summarized
    search: str | None = None  # full-text over packet content
    finding: str | None = None  # a diagnostics detector id (issue 5)


@dataclass(frozen=True)
class TraceRow:
    """One row of the traces list (all real columns)."""

    trace_id: str
    session_id: str
    turn: int
    created_at: datetime
    preset: str
    builder: str
    budget: int
    used: int
    n_packets: int
    n_kept: int
    n_truncated: int
    n_summarized: int
    n_dropped: int
    n_filtered: int
    n_not_rendered: int
    n_warnings: int
    lost_must_keep: int
    verdict: str
    tags: tuple[str, ...] = ()
    source_trace_id: str | None = None
    n_findings: int = 0
    max_severity: str | None = None
    #: the call's model and normalized usage (``outcome.tokens``); None where not recorded
    model: str | None = None
    input_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    cache_write_5m_tokens: int | None = None
    cache_write_1h_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None


@dataclass(frozen=True)
class UsageRow:
    """One stored call's model and normalized usage (``Store.session_usage``): what its
    cost is computed from without reading the trace."""

    session_id: str
    trace_id: str
    turn: int
    model: str | None = None
    input_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    cache_write_5m_tokens: int | None = None
    cache_write_1h_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None


@dataclass(frozen=True)
class TracePage:
    rows: list[TraceRow]
    total: int  # rows matching the filter, across all pages
    offset: int
    limit: int


@dataclass(frozen=True)
class FindingRow:
    """One stored finding with the turn it belongs to (``Store.list_findings``)."""

    trace_id: str
    session_id: str
    turn: int
    created_at: datetime
    preset: str
    detector: str
    severity: str
    message: str
    packet_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class FindingPage:
    rows: list[FindingRow]
    total: int  # findings of the matching traces, across all pages
    offset: int
    limit: int


@dataclass(frozen=True)
class IngestErrorRow:
    file: str
    line: int
    message: str
    at: datetime


@dataclass(frozen=True)
class LiveCall:
    """One call captured live (a trace tagged ``live``): when, which session and turn, from
    which source (its ``source:`` tag, or ``otlp``)."""

    created_at: datetime
    session_id: str
    turn: int
    trace_id: str
    source: str


@dataclass(frozen=True)
class LiveCalls:
    """The live calls since a moment, newest first (at most a cap of them), how many there are
    in all, and the newest live call ever stored (None when nothing was captured live)."""

    recent: list[LiveCall]
    total: int
    last: LiveCall | None


@dataclass(frozen=True)
class SessionRow:
    session_id: str
    traces: int
    first_turn: int
    last_turn: int
    first_at: datetime
    last_at: datetime


@dataclass
class IngestCounts:
    files: int = 0
    traces_added: int = 0
    traces_skipped: int = 0  # already present (idempotent on trace_id)
    errors: int = 0
    error_rows: list[IngestErrorRow] = field(default_factory=list)
    #: (file, line) of last lines without their newline yet: read when the writer ends them.
    pending: list[tuple[str, int]] = field(default_factory=list)


@dataclass(frozen=True)
class FileOffset:
    """How far ingest has read one file (bytes and lines), and what the file looked like:
    its size, mtime and inode when it was read, and fingerprints of its first bytes
    (``head``) and of the bytes just before the offset, which must be unchanged for ingest
    to read on from the offset. ``failed``: why the file could not be read (it is tried
    again once its size, mtime or inode change)."""

    file: str
    offset: int
    line: int
    size: int
    mtime: float
    fingerprint: str | None = None
    inode: int | None = None
    head: str | None = None
    failed: str | None = None


@dataclass(frozen=True)
class FailingFile:
    """A file ingest could not read, and why: what the app shows in its banner."""

    file: str
    reason: str
    since: datetime


@dataclass(frozen=True)
class InsertResult:
    added: int
    skipped: int
    #: (index in the batch given to ``prepare``, trace_id, where the stored one came from)
    #: for ids already stored with different content: the caller reports them, nothing is
    #: overwritten.
    conflicts: list[tuple[int, str, str]]
    #: (index in that batch, why) of traces whose rows could not be built
    rejected: list[tuple[int, str]] = field(default_factory=list)


@dataclass(frozen=True)
class PackedTrace:
    """A stored trace's JSON as the store keeps it, packed (``codec.pack_json``), with the
    length of the JSON: ``json()`` unpacks it where it is read. ``ctxscope replay --all``
    hands these to its worker processes, which unpack them in parallel (loading Arrow's
    codec, never the store's engine)."""

    trace_id: str
    data: bytes
    size: int

    def json(self) -> bytes:
        """The trace's UTF-8 JSON."""
        return self.unpack(self.data, self.size)

    @staticmethod
    def unpack(data: bytes, size: int) -> bytes:
        """Packed JSON (``data``) unpacked, ``size`` bytes long: for a reader handed the bytes
        without the record (it pickles by name, and loads the codec where it runs)."""
        from ctxcore.store.codec import unpack_json

        return unpack_json(data, size)
