"""The trace contract ``ctxscope.trace/1`` as pydantic v2 models.

One trace is one context build: the captured input, the config that reproduces it, and
what the builder decided about every candidate. Everything that is persisted, loaded from
a file or shown in the UI goes through these models (``extra="forbid"``, frozen), so a
typo in a field name is an error rather than silently ignored data. Loading helpers that
turn pydantic's errors into one sentence naming the packet and field live in
``ctxcore.loading``.

Validation means "the store can hold it": whatever these models accept, ingest stores and
every reader (Inspect, export, the app's charts) reads back. So integers are bounded by the
column that keeps them (``MAX_INT32`` for turns, ranks and item counts, ``MAX_TOKENS`` for
token counts and budgets, 64 bits for the rest), a timestamp must stay within the years
1-9999 once converted to UTC, and free JSON (metadata, tool parameters) may nest at most
``MAX_JSON_DEPTH`` levels and hold only what JSON can (finite numbers, whole UTF-16
pairs). The limits live in ``ctxcore.settings`` (docs/design.md, "The trace contract").
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar

from annotated_types import Ge, Le
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ctxcore import knobs, settings
from ctxcore.settings import MAX_INT32, MAX_JSON_DEPTH, MAX_TOKENS, PresetName

SCHEMA = "ctxscope.trace/1"
SCHEMA_MAJOR = "ctxscope.trace/1"

#: A packet larger than this is almost certainly a capture bug (a whole log file, a binary).
MAX_CONTENT_CHARS = settings.MAX_CONTENT_CHARS

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MIN = -MAX_INT32 - 1
#: The instants Python can convert to UTC (``utc_iso``, the store's columns): an offset can
#: push a time at either end of the calendar outside it.
UTC_MIN = datetime.min.replace(tzinfo=UTC)
UTC_MAX = datetime.max.replace(tzinfo=UTC)

# Bounds are checked natively by pydantic (and mirrored by ``ctxcore.store.fastdecode``):
# no Python validator runs per packet.
Int64 = Annotated[int, Ge(INT64_MIN), Le(INT64_MAX)]
Timestamp = Annotated[AwareDatetime, Ge(UTC_MIN), Le(UTC_MAX)]

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


_DEFAULTED: dict[type[BaseModel], frozenset[str]] = {}


def null_is_default(cls: type[BaseModel], data: Any) -> Any:
    """Drop the ``null``s given for fields that have a non-null default: callers write
    ``"system_instructions": null`` for "none" (hello-agents' own API takes ``None``), and
    that means the default. Fields whose default is ``None`` keep their ``null``."""
    if type(data) is not dict:
        return data
    for v in data.values():
        if v is None:
            break
    else:
        return data
    names = _DEFAULTED.get(cls)
    if names is None:
        names = frozenset(
            key
            for name, f in cls.model_fields.items()
            if not f.is_required() and f.default is not None
            for key in (name, f.alias)
            if key
        )
        _DEFAULTED[cls] = names
    return {k: v for k, v in data.items() if v is not None or k not in names}


class _NullIsDefault(_Model):
    """A model people write by hand or export from other tools: ``null`` for an optional
    field means its default (``null_is_default``)."""

    @model_validator(mode="before")
    @classmethod
    def _null_is_default(cls, data: Any) -> Any:
        return null_is_default(cls, data)


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


#: a UTF-16 surrogate without its pair: Python's parser lets one through, UTF-8 cannot hold it
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def check_free_json(value: dict[str, Any]) -> dict[str, Any]:
    """Refuse free JSON the store could not give back as it came: nested deeper than
    MAX_JSON_DEPTH levels (the object itself is one level; every dict or list inside adds
    one), a number too large for a 64-bit float (``1e400``: written back out it would be
    ``null``), or a lone UTF-16 surrogate in a string. Iterative: a deep value must not
    exhaust Python's stack while it is being refused."""
    if not value:
        return value
    todo: list[tuple[Any, int]] = [(value, 1)]
    while todo:
        node, depth = todo.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            if type(key) is str:
                if not key.isascii() and _LONE_SURROGATE.search(key):
                    raise _free_json_error(_SURROGATE_ERROR)
            elif type(key) is not int and _bad_text(key):
                raise _free_json_error(_SURROGATE_ERROR)
            kind = type(child)
            # the exact JSON types first (one type test each); subclasses and the rest below
            if kind is str:
                if not child.isascii() and _LONE_SURROGATE.search(child):
                    raise _free_json_error(_SURROGATE_ERROR)
            elif kind is int or kind is bool or child is None:
                continue
            elif isinstance(child, dict | list):
                if depth >= MAX_JSON_DEPTH:
                    raise _free_json_error(
                        f"nested more than {MAX_JSON_DEPTH} levels deep, the limit for "
                        "metadata and tool parameters; store a deeper structure as a JSON string"
                    )
                todo.append((child, depth + 1))
            elif isinstance(child, float) and not math.isfinite(child):
                raise _free_json_error(
                    f"holds the number {child!r}, which JSON cannot hold (too large for a "
                    "64-bit float, or not a number)"
                )
            elif isinstance(child, str) and _bad_text(child):
                raise _free_json_error(_SURROGATE_ERROR)
    return value


def _bad_text(value: object) -> bool:
    """A string holding a lone UTF-16 surrogate (anything else: False)."""
    return isinstance(value, str) and not value.isascii() and bool(_LONE_SURROGATE.search(value))


def _free_json_error(message: str) -> PydanticCustomError:
    # A custom error (a ValueError) rather than a plain ValueError: pydantic keeps no
    # exception object for it, whose traceback would keep the caller's frames alive.
    return PydanticCustomError("free_json", message)


_SURROGATE_ERROR = (
    "holds a lone UTF-16 surrogate (half of a broken pair, e.g. \\ud800), which UTF-8 cannot "
    "store; fix the text where it was cut"
)


#: Free JSON: any object JSON can hold, nested at most MAX_JSON_DEPTH levels.
JsonObject = Annotated[dict[str, Any], AfterValidator(check_free_json)]


def _finite(value: float | None, name: str) -> float | None:
    if value is not None and not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return value


def not_a_bool(value: Any) -> Any:
    """Refuse true/false where a number belongs: pydantic reads ``true`` as 1, so
    ``max_tokens: true`` (or ``--set max_tokens=true``) would quietly be a budget of one."""
    if isinstance(value, bool):
        raise ValueError(f"must be a number, not {str(value).lower()}")
    return value


# --------------------------------------------------------------------------- input


class Message(_NullIsDefault):
    """One message of the conversation history."""

    role: str
    content: str = Field(max_length=MAX_CONTENT_CHARS)
    timestamp: Timestamp | None = None
    id: str | None = None
    metadata: JsonObject = Field(default_factory=dict)


class Packet(_NullIsDefault):
    """A candidate item for the context window, with a stable source id."""

    id: str = Field(min_length=1)
    kind: str = Field(min_length=1)
    # Size and finiteness are checked natively (no Python validator per packet: ingest
    # validates millions of packets); ctxcore.loading words the errors.
    content: str = Field(max_length=MAX_CONTENT_CHARS)
    timestamp: Timestamp | None = None
    relevance: float | None = None
    priority: int = Field(default=0, ge=INT64_MIN, le=INT64_MAX)
    must_keep: bool = False
    tokens: int | None = Field(default=None, ge=0, le=MAX_TOKENS)
    metadata: JsonObject = Field(default_factory=dict)


class ToolDef(_NullIsDefault):
    """A tool definition offered to the model; its JSON costs tokens too."""

    name: str = Field(min_length=1)
    description: str = ""
    parameters: JsonObject = Field(default_factory=dict)


class CapturedInput(_NullIsDefault):
    """Everything a builder saw: enough to re-run the build exactly."""

    query: str = Field(max_length=MAX_CONTENT_CHARS)
    now: Timestamp
    system_instructions: str = Field(default="", max_length=MAX_CONTENT_CHARS)
    history: list[Message] = Field(default_factory=list)
    packets: list[Packet] = Field(default_factory=list)
    tools: list[ToolDef] = Field(default_factory=list)
    window: int | None = Field(default=None, gt=0, le=MAX_TOKENS)
    output_reserve: int | None = Field(default=None, ge=0, le=MAX_TOKENS)

    @field_validator("window", "output_reserve", mode="before")
    @classmethod
    def _numbers(cls, v: Any) -> Any:
        return not_a_bool(v)

    @model_validator(mode="after")
    def _unique_ids(self) -> CapturedInput:
        check_unique_ids([p.id for p in self.packets])
        return self


# --------------------------------------------------------------------------- config

FillMode = Literal["skip", "break", "optimal"]
#: LangChain's message types (``trim_messages``' start_on and end_on), and none
MessageType = Literal["none", "human", "ai", "system", "tool"]


class Config(_NullIsDefault):
    """A builder configuration: the preset and every knob that changes what it keeps.

    ``None`` means "the preset's default"; ``ctxcore.pipeline.resolve_config`` fills them in
    and a trace always stores the resolved values, so a build is reproducible from it alone.
    Knobs a preset does not have are left ``None`` by it.
    """

    # Each knob is declared in ``ctxcore.knobs`` (docs/design.md, "Knobs"): the fields below
    # take their bounds and validator lists from it, and keep their names, types and order
    # here, where the type checker and the stored JSON see them. ``tests/test_knobs.py``
    # fails when the two differ.

    preset: PresetName = "ctxscope"
    tokenizer: str | None = None
    max_tokens: int | None = knobs.config_field("max_tokens")
    reserve_ratio: float | None = knobs.config_field("reserve_ratio")
    output_reserve: int | None = knobs.config_field("output_reserve")
    safety_margin: int | None = knobs.config_field("safety_margin")
    min_relevance: float | None = knobs.config_field("min_relevance")
    relevance_weight: float | None = knobs.config_field("relevance_weight")
    recency_weight: float | None = knobs.config_field("recency_weight")
    priority_weight: float | None = knobs.config_field("priority_weight")
    recency_tau_hours: float | None = knobs.config_field("recency_tau_hours")
    enable_compression: bool | None = None
    fill: FillMode | None = None
    history_limit: int | None = knobs.config_field("history_limit")
    partition_budgets: dict[str, float] | None = None
    degrade: list[str] | None = None
    #: the ctxscope preset's signal weights (``ctxcore.pipeline.signals``)
    current_turn_weight: float | None = knobs.config_field("current_turn_weight")
    error_weight: float | None = knobs.config_field("error_weight")
    mention_weight: float | None = knobs.config_field("mention_weight")
    reference_weight: float | None = knobs.config_field("reference_weight")
    metadata_weight: float | None = knobs.config_field("metadata_weight")
    lexical_weight: float | None = knobs.config_field("lexical_weight")
    #: the LangChain policies' parameters (``ctxcore.pipeline.langchain_policies``)
    trigger: int | None = knobs.config_field("trigger")
    trigger_kind: Literal["tokens", "messages"] | None = None
    keep: int | None = knobs.config_field("keep")
    keep_kind: Literal["messages", "tokens"] | None = None
    clear_at_least: int | None = knobs.config_field("clear_at_least")
    clear_tool_inputs: bool | None = None
    exclude_tools: list[str] | None = None
    placeholder: str | None = None
    strategy: Literal["last", "first"] | None = None
    token_counter: Literal["tokenizer", "len"] | None = None
    include_system: bool | None = None
    start_on: MessageType | None = None
    end_on: MessageType | None = None
    allow_partial: bool | None = None
    #: the SWE-agent and OpenHands policies' parameters (``ctxcore.pipeline.agent_policies``)
    n: int | None = knobs.config_field("n")
    polling: int | None = knobs.config_field("polling")
    summarize_every_n_turns: int | None = knobs.config_field("summarize_every_n_turns")
    keep_last_m_turns: int | None = knobs.config_field("keep_last_m_turns")
    attention_window: int | None = knobs.config_field("attention_window")
    keep_first: int | None = knobs.config_field("keep_first")
    max_events: int | None = knobs.config_field("max_events")
    max_size: int | None = knobs.config_field("max_size")
    #: anthropic-context-editing's and auto-compact's own (docs/design.md, "Presets")
    thinking_keep: int | None = knobs.config_field("thinking_keep")
    threshold: float | None = knobs.config_field("threshold")
    agent: Literal["claude-code", "codex"] | None = None

    @field_validator(*knobs.names(numeric=True), mode="before")
    @classmethod
    def _numbers(cls, v: Any) -> Any:
        return not_a_bool(v)

    @field_validator(*knobs.names(finite=True))
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
    rank: int | None = Field(default=None, ge=INT32_MIN, le=MAX_INT32)
    tokens_before: int = Field(ge=-MAX_TOKENS, le=MAX_TOKENS)
    tokens_after: int = Field(ge=-MAX_TOKENS, le=MAX_TOKENS)
    budget_left: int | None = Field(default=None, ge=-MAX_TOKENS, le=MAX_TOKENS)
    #: quirks and side facts worth showing (e.g. "caller relevance 0.9 overwritten").
    notes: list[str] = Field(default_factory=list)


class PartitionUsage(_Model):
    name: str
    budget: int | None = Field(ge=-MAX_TOKENS, le=MAX_TOKENS)
    used: int = Field(ge=-MAX_TOKENS, le=MAX_TOKENS)
    items: int = Field(ge=INT32_MIN, le=MAX_INT32)


class Totals(_Model):
    window: int = Field(ge=-MAX_TOKENS, le=MAX_TOKENS)
    output_reserve: int = Field(ge=-MAX_TOKENS, le=MAX_TOKENS)
    safety_margin: int = Field(ge=-MAX_TOKENS, le=MAX_TOKENS)
    available: int = Field(ge=-MAX_TOKENS, le=MAX_TOKENS)
    used: int = Field(ge=-MAX_TOKENS, le=MAX_TOKENS)
    tokenizer: str


class Report(_Model):
    """The seed's debug report shape (budget/used/mustKeep/included/summarized/dropped)."""

    budget: int = Field(ge=-MAX_TOKENS, le=MAX_TOKENS)
    used: int = Field(ge=-MAX_TOKENS, le=MAX_TOKENS)
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


class TokenUsage(_Model):
    """A call's token counts with one meaning whatever the provider (docs/design.md, "The
    trace contract"): ``input_tokens`` is the whole prompt, cached or not; the cache reads
    and writes are parts of it (a write split into 5-minute and 1-hour parts where the
    source says); ``output_tokens`` is everything billed as output, ``reasoning_tokens``
    the part of it that was reasoning. ``None`` is a count the source does not give, never
    0. ``mapping`` names how the provider's own numbers (``Outcome.usage``) were read
    (``ctxcore.formats.usage``)."""

    mapping: str = Field(min_length=1)
    input_tokens: Int64 | None = None
    cache_read_tokens: Int64 | None = None
    cache_write_tokens: Int64 | None = None
    cache_write_5m_tokens: Int64 | None = None
    cache_write_1h_tokens: Int64 | None = None
    output_tokens: Int64 | None = None
    reasoning_tokens: Int64 | None = None


class Outcome(_NullIsDefault):
    verdict: Literal["good", "bad", "unknown"] = "unknown"
    note: str = ""
    output: str | None = None
    #: the provider's own counters as recorded, keys as it named them (nested ones joined
    #: with ``.``)
    usage: dict[str, Int64] = Field(default_factory=dict)
    #: the same counts normalized (``TokenUsage``); absent on traces that predate it
    tokens: TokenUsage | None = None


class Trace(_NullIsDefault):
    """One context build: ``schema`` ``ctxscope.trace/1``."""

    schema_: str = Field(default=SCHEMA, alias="schema")
    trace_id: str = Field(min_length=1)
    session_id: str = "default"
    turn: int = Field(default=0, ge=INT32_MIN, le=MAX_INT32)
    created_at: Timestamp
    builder: Builder
    tags: list[str] = Field(default_factory=list)
    metadata: JsonObject = Field(default_factory=dict)
    source_trace_id: str | None = None
    redactions: dict[str, Int64] = Field(default_factory=dict)
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

    def to_json_bytes(self) -> bytes:
        """``to_json()`` as UTF-8, straight from the serializer: ``model_dump_json`` makes
        these bytes and decodes them, and a writer would encode the text again (a long
        session's call is as long as its context: both copies cost as much as the
        serialization)."""
        return self.__pydantic_serializer__.to_json(self, by_alias=True, exclude_none=False)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


def utc_iso(dt: datetime) -> str:
    """The canonical string form of a timestamp in traces."""
    return dt.isoformat().replace("+00:00", "Z")


_MB = TypeVar("_MB", bound=BaseModel)
_set_attr = object.__setattr__


def unvalidated(model: type[_MB], values: dict[str, Any], given: set[str] | None = None) -> _MB:
    """``model`` holding ``values`` (every field in the model's order, each as validation
    would store it) without validating again: what ``model_construct`` does, without its
    ~10 µs a call. For values a builder made itself or a reader already checked; tests
    compare the results with validated models (tests/test_preset_ctxscope.py,
    tests/test_replay_speed.py, tests/test_import_sessions.py). ``given``: the fields set
    explicitly (``model_fields_set``; default: all)."""
    obj = object.__new__(model)
    _set_attr(obj, "__dict__", values)
    # model_copy adds to it
    _set_attr(obj, "__pydantic_fields_set__", set(values) if given is None else given)
    _set_attr(obj, "__pydantic_extra__", None)
    _set_attr(obj, "__pydantic_private__", None)
    return obj
