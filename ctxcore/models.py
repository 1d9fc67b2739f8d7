"""The trace contract ``ctxscope.trace/1`` as pydantic v2 models.

One trace is one context build: the captured input, the config that reproduces it, and
what the builder decided about every candidate. Everything that is persisted, loaded from
a file or shown in the UI goes through these models (``extra="forbid"``, frozen), so a
typo in a field name is an error rather than silently ignored data. Loading helpers that
turn pydantic's errors into one sentence naming the packet and field live in
``ctxcore.loading``.
"""

from __future__ import annotations

import math
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from ctxcore.settings import PresetName

SCHEMA = "ctxscope.trace/1"
SCHEMA_MAJOR = "ctxscope.trace/1"

#: A packet larger than this is almost certainly a capture bug (a whole log file, a binary).
MAX_CONTENT_CHARS = 10 * 1024 * 1024

PARTITIONS: tuple[str, ...] = (
    "[Role & Policies]",
    "[Task]",
    "[State]",
    "[Evidence]",
    "[Context]",
    "[Output]",
)


class _Model(BaseModel):
    # allow_inf_nan=False: NaN/Infinity are rejected natively for every float field.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# Validator bodies as plain functions: ``ctxcore.store.fastdecode`` (ingest's fast path) runs the
# very same checks on what it decodes.


def check_unique_ids(ids: list[str]) -> None:
    seen: dict[str, int] = {}
    for i, pid in enumerate(ids):
        if pid in seen:
            raise ValueError(
                f"duplicate packet id {pid!r} at packets[{seen[pid]}] and packets[{i}]; "
                "packet ids must be unique within one input"
            )
        seen[pid] = i


def check_partition_budgets(v: dict[str, float] | None) -> dict[str, float] | None:
    if v is None:
        return v
    for name, ratio in v.items():
        if name not in PARTITIONS:
            raise ValueError(f"unknown partition {name!r}; expected one of {', '.join(PARTITIONS)}")
        if not math.isfinite(ratio) or ratio < 0 or ratio > 1:
            raise ValueError(f"ratio of {name} must be between 0 and 1, got {ratio!r}")
    return v


def check_schema(v: str) -> str:
    if v != SCHEMA_MAJOR and not v.startswith(SCHEMA_MAJOR + "."):
        raise ValueError(
            f"unsupported schema {v!r}: this ctxscope reads {SCHEMA!r}; "
            "upgrade ctxscope or re-export the trace in that schema"
        )
    return v


def _finite(value: float | None, name: str) -> float | None:
    if value is not None and not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return value


# --------------------------------------------------------------------------- input


class Message(_Model):
    """One message of the conversation history."""

    role: str
    content: str = Field(max_length=MAX_CONTENT_CHARS)
    timestamp: AwareDatetime | None = None
    id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class Packet(_Model):
    """A candidate item for the context window, with a stable source id."""

    id: str = Field(min_length=1)
    kind: str = Field(min_length=1)
    # Size and finiteness are checked natively (no Python validator per packet: ingest
    # validates millions of packets); ctxcore.loading words the errors.
    content: str = Field(max_length=MAX_CONTENT_CHARS)
    timestamp: AwareDatetime | None = None
    relevance: float | None = None
    priority: int = 0
    must_keep: bool = False
    tokens: int | None = Field(default=None, ge=0)
    metadata: dict[str, Any] = Field(default_factory=dict)


class ToolDef(_Model):
    """A tool definition offered to the model; its JSON costs tokens too."""

    name: str = Field(min_length=1)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=dict)


class CapturedInput(_Model):
    """Everything a builder saw: enough to re-run the build exactly."""

    query: str = Field(max_length=MAX_CONTENT_CHARS)
    now: AwareDatetime
    system_instructions: str = Field(default="", max_length=MAX_CONTENT_CHARS)
    history: list[Message] = Field(default_factory=list)
    packets: list[Packet] = Field(default_factory=list)
    tools: list[ToolDef] = Field(default_factory=list)
    window: int | None = Field(default=None, gt=0)
    output_reserve: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _unique_ids(self) -> CapturedInput:
        check_unique_ids([p.id for p in self.packets])
        return self


# --------------------------------------------------------------------------- config

FillMode = Literal["skip", "break", "optimal"]


class Config(_Model):
    """A builder configuration: the preset and every knob that changes what it keeps.

    ``None`` means "the preset's default"; ``ctxcore.pipeline.resolve_config`` fills them in
    and a trace always stores the resolved values, so a build is reproducible from it alone.
    Knobs a preset does not have are left ``None`` by it.
    """

    preset: PresetName = "ctxscope"
    tokenizer: str | None = None
    max_tokens: int | None = Field(default=None, gt=0)
    reserve_ratio: float | None = Field(default=None, ge=0, lt=1)
    output_reserve: int | None = Field(default=None, ge=0)
    safety_margin: int | None = Field(default=None, ge=0)
    min_relevance: float | None = Field(default=None, ge=0, le=1)
    relevance_weight: float | None = Field(default=None, ge=0, le=1)
    recency_weight: float | None = Field(default=None, ge=0, le=1)
    priority_weight: float | None = Field(default=None, ge=0, le=1)
    recency_tau_hours: float | None = Field(default=None, gt=0)
    enable_compression: bool | None = None
    fill: FillMode | None = None
    history_limit: int | None = Field(default=None, ge=0)
    partition_budgets: dict[str, float] | None = None
    degrade: list[str] | None = None

    @field_validator(
        "reserve_ratio",
        "min_relevance",
        "relevance_weight",
        "recency_weight",
        "priority_weight",
        "recency_tau_hours",
    )
    @classmethod
    def _finite_knobs(cls, v: float | None) -> float | None:
        return _finite(v, "value")

    @field_validator("partition_budgets")
    @classmethod
    def _partition_ratios(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        return check_partition_budgets(v)


# --------------------------------------------------------------------------- result


class Status(StrEnum):
    KEPT = "kept"
    TRUNCATED = "truncated"
    SUMMARIZED = "summarized"
    DROPPED = "dropped"
    FILTERED = "filtered"
    NOT_RENDERED = "not_rendered"


class Reason(StrEnum):
    MUST_KEEP = "MUST_KEEP"
    FITS = "FITS"
    BELOW_MIN_RELEVANCE = "BELOW_MIN_RELEVANCE"
    NO_ROOM = "NO_ROOM"
    AFTER_BREAK = "AFTER_BREAK"
    PARTITION_FULL = "PARTITION_FULL"
    NOT_IN_OPTIMAL_SET = "NOT_IN_OPTIMAL_SET"
    HISTORY_LIMIT = "HISTORY_LIMIT"
    DEGRADED = "DEGRADED"
    NOISE = "NOISE"
    TRUNCATED_BY_COMPRESS = "TRUNCATED_BY_COMPRESS"
    REMOVED_BY_COMPRESS = "REMOVED_BY_COMPRESS"
    TYPE_NOT_RENDERED = "TYPE_NOT_RENDERED"
    DUPLICATE = "DUPLICATE"
    EMPTY = "EMPTY"
    BUDGET_EXHAUSTED_BY_SYSTEM = "BUDGET_EXHAUSTED_BY_SYSTEM"


class Decision(_Model):
    """What the builder did with one candidate, and why, in codes and in words."""

    packet_id: str
    kind: str
    status: Status
    reason: Reason
    reason_text: str
    partition: str | None = None
    relevance: float | None = None
    recency: float | None = None
    score: float | None = None
    rank: int | None = None
    tokens_before: int
    tokens_after: int
    budget_left: int | None = None
    #: quirks and side facts worth showing (e.g. "caller relevance 0.9 overwritten").
    notes: list[str] = Field(default_factory=list)


class PartitionUsage(_Model):
    name: str
    budget: int | None
    used: int
    items: int


class Totals(_Model):
    window: int
    output_reserve: int
    safety_margin: int
    available: int
    used: int
    tokenizer: str


class Report(_Model):
    """The seed's debug report shape (budget/used/mustKeep/included/summarized/dropped)."""

    budget: int
    used: int
    mustKeep: list[str] = Field(default_factory=list)  # noqa: N815 - the seed's key
    included: list[str] = Field(default_factory=list)
    summarized: list[str] = Field(default_factory=list)
    dropped: list[str] = Field(default_factory=list)
    reasons: dict[str, str] = Field(default_factory=dict)


class BuildResult(_Model):
    prompt: str
    messages: list[Message] | None = None
    decisions: list[Decision]
    partitions: list[PartitionUsage]
    totals: Totals
    report: Report
    warnings: list[str] = Field(default_factory=list)
    #: milliseconds per stage; measurements, so the one field exempt from determinism.
    timings: dict[str, float] = Field(default_factory=dict)


# --------------------------------------------------------------------------- diagnostics

Severity = Literal["info", "warning", "error"]


class Finding(_Model):
    """One diagnostics hit: a likely cause of a bad turn, with the packets it is about."""

    detector: str  # stable id, e.g. "must_have_lost", "budget_flooded"
    severity: Severity
    packet_ids: list[str] = Field(default_factory=list)
    message: str  # one sentence a person understands
    evidence: dict[str, Any] = Field(default_factory=dict)
    #: a verified smallest config change that would have fixed it, e.g. {"max_tokens": 8312}
    fix: dict[str, Any] | None = None


# --------------------------------------------------------------------------- trace


class Builder(_Model):
    name: str
    version: str


class Outcome(_Model):
    verdict: Literal["good", "bad", "unknown"] = "unknown"
    note: str = ""
    output: str | None = None
    usage: dict[str, int] = Field(default_factory=dict)


class Trace(_Model):
    """One context build: ``schema`` ``ctxscope.trace/1``."""

    schema_: str = Field(default=SCHEMA, alias="schema")
    trace_id: str = Field(min_length=1)
    session_id: str = "default"
    turn: int = 0
    created_at: AwareDatetime
    builder: Builder
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    source_trace_id: str | None = None
    redactions: dict[str, int] = Field(default_factory=dict)
    input: CapturedInput
    config: Config
    result: BuildResult | None = None
    outcome: Outcome | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("schema_")
    @classmethod
    def _schema(cls, v: str) -> str:
        return check_schema(v)

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=False)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


def utc_iso(dt: datetime) -> str:
    """The canonical string form of a timestamp in traces."""
    return dt.isoformat().replace("+00:00", "Z")
