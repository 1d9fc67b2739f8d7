"""Replay: re-run recorded builds with other settings and report what would change, turn by turn.

Tuning on one turn is half the job: a change that rescues turn 15 may starve turns 30–40.
``replay(traces, settings, against=None)`` rebuilds every trace's captured input with the
recorded config patched by ``settings`` (and, with ``against``, by a second patch instead of
the recorded config) and compares the two sides per turn: tokens used and budget, the
packets whose fate flipped, the findings added and cleared; then over all turns: tokens saved
or spent, the turns where a must-keep packet or error evidence was lost, the first turn each
item was lost on either side, findings by detector. ``ctxcore.testing.assert_no_new_losses``
and ``ctxscope replay --fail-on`` judge the report.

A variant is a new trace (its own id, ``source_trace_id`` = the recorded one, tagged
``replay``); recorded traces are never changed. This module sits with ``testing`` (core,
pipeline, diagnostics; docs/design.md, "Parts and allowed imports"): the caller reads the
store and passes traces in, and worker processes get traces, never the store (DuckDB lets one
process at a time write a file).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import operator
import threading
import time
import types
import typing
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from ctxcore.errors import CtxscopeError, InputError
from ctxcore.loading import config_from_obj, input_from_obj
from ctxcore.models import (
    SCHEMA,
    Builder,
    BuildResult,
    CapturedInput,
    Config,
    Decision,
    Finding,
    Report,
    Status,
    Trace,
    unvalidated,
)
from ctxcore.pipeline import build, build_trace, check_input_facts, ctxscope, resolve_config
from ctxcore.replay_pool import default_workers, worker_pool
from ctxcore.summarize import error_evidence
from ctxcore.tokens import get_counter

REPLAY_TAG = "replay"
#: what a "changed" turn is, in the words the CLI and the app print (``TurnReport.changed``)
CHANGED_MEANS = "a packet's status or the tokens used differ"
#: what "first lost" means, in the words the CLI and the app print (``FirstLoss``)
FIRST_LOST_MEANS = (
    "the first turn each item leaves the prompt, before → after, counted from the first "
    "turn it was in the prompt on either side; never: it does not leave the prompt in the "
    "turns replayed"
)
#: knobs of ``settings`` that are facts of the model call (the captured input), not of the
#: builder; ``ctxscope build --set`` reads them the same way
INPUT_FACTS = ("window", "output_reserve")
LOSS_SEVERITIES: tuple[str, ...] = ("info", "warning", "error")
_RANK = {"info": 0, "warning": 1, "error": 2}
#: how far into the prompt a status gets a packet (a lower rank after than before is a loss)
_REACH = {
    Status.KEPT: 3,
    Status.TRUNCATED: 2,
    Status.SUMMARIZED: 1,
    Status.DROPPED: 0,
    Status.FILTERED: 0,
    Status.NOT_RENDERED: 0,
}
#: below this many traces a process pool costs more than it saves
POOL_MIN_TRACES = 48

Settings = Mapping[str, Any]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Flip(_Model):
    """One packet whose fate differs between the two sides of a turn."""

    packet_id: str
    kind: str
    before: str  # a Status value, or "absent"
    after: str
    must_keep: bool = False
    #: its text shows an error (``ctxcore.summarize.error_evidence``: a failing test, a
    #: traceback, an exception, a compiler error)
    error_evidence: bool = False
    #: None for a gain or a sideways change (dropped ↔ filtered); else how bad the loss is:
    #: error = a must-keep packet or error evidence left the prompt (or was only summarized),
    #: warning = a packet in the prompt before is out after, info = squeezed (truncated,
    #: summarized)
    loss: str | None = None


class TurnReport(_Model):
    """One turn replayed: both sides' totals and what changed."""

    session_id: str
    turn: int
    trace_id: str  # the recorded trace
    before_id: str  # the trace of the "before" side (the recorded one unless ``against``)
    after_id: str
    used_before: int
    used_after: int
    budget_before: int
    budget_after: int
    flips: list[Flip] = Field(default_factory=list)
    findings_added: list[str] = Field(default_factory=list)  # "severity detector [ids]"
    findings_cleared: list[str] = Field(default_factory=list)

    @property
    def tokens_delta(self) -> int:
        return self.used_after - self.used_before

    @property
    def changed(self) -> bool:
        """The model would be sent another context: a packet's status or the tokens used
        differ (``CHANGED_MEANS``). Findings alone do not count: they are compared only when
        asked for, and a count that moved with that switch said 14 turns changed in the CLI
        and 9 in the app for the same replay."""
        return bool(self.flips) or self.used_before != self.used_after

    @property
    def findings_changed(self) -> bool:
        return bool(self.findings_added or self.findings_cleared)

    def losses(self, at: str = "info") -> list[Flip]:
        """The flips that lose something, at severity ``at`` or above."""
        floor = _severity_rank(at)
        return [f for f in self.flips if f.loss is not None and _RANK[f.loss] >= floor]


class TurnError(_Model):
    """A turn that could not be compared: its trace could not be read, or a side's build
    failed (e.g. new settings too tight for what must be kept: the preset fails loudly rather
    than drop it). The other turns of the session are replayed without it. A build that fails
    only after the change is a loss of everything the turn kept (``ReplayReport.new_failures``,
    counted at ``error`` by ``--fail-on`` and ``assert_no_new_losses``)."""

    session_id: str
    turn: int
    trace_id: str
    side: str  # "read", "before", "after" or "both"
    message: str


class FirstLoss(_Model):
    """The first turn an item left the prompt on each side (None: never), counted from the
    first turn it was in the prompt on either side (a must-keep packet: from its first
    turn). An item the new settings drop from the turn it arrives, where the recording kept
    it, is lost at that turn after the change, not never."""

    session_id: str
    item: str  # a packet id, or the text of a user constraint
    kind: str  # packet | constraint
    before_turn: int | None
    after_turn: int | None


class ReplayReport(_Model):
    """What ``replay`` returns; ``ctxscope replay --format json`` prints it."""

    before: str  # "recorded" or the ``against`` settings as JSON
    after: str
    turns: list[TurnReport]
    first_lost: list[FirstLoss] = Field(default_factory=list)
    findings_before: dict[str, int] = Field(default_factory=dict)  # detector -> count
    findings_after: dict[str, int] = Field(default_factory=dict)
    findings_compared: bool = True
    #: turns that could not be compared, with why (one per turn; the rest are in ``turns``)
    errors: list[TurnError] = Field(default_factory=list)
    seconds: float = 0.0
    #: every rebuilt trace (the "after" side, and the "before" side with ``against``), only
    #: with ``keep_variants``; not in the JSON
    variants: list[Trace] = Field(default_factory=list, exclude=True, repr=False)

    @property
    def tokens_delta(self) -> int:
        """Tokens spent (positive) or saved (negative) over every turn."""
        return sum(t.tokens_delta for t in self.turns)

    @property
    def changed_turns(self) -> list[TurnReport]:
        """The turns whose context changed (``TurnReport.changed``, ``CHANGED_MEANS``): the
        one count the CLI and the app show."""
        return [t for t in self.turns if t.changed]

    @property
    def findings_only_turns(self) -> list[TurnReport]:
        """Turns built the same on both sides whose findings differ (only when compared)."""
        return [t for t in self.turns if not t.changed and t.findings_changed]

    def losses(self, at: str = "info") -> list[tuple[TurnReport, Flip]]:
        """Every loss at ``at`` or above, with its turn."""
        return [(t, f) for t in self.turns for f in t.losses(at)]

    @property
    def turns_losing_must_keep(self) -> list[TurnReport]:
        """Turns where a must-keep packet or error evidence was lost."""
        return [t for t in self.turns if t.losses("error")]

    def variant(self, trace_id: str) -> Trace | None:
        """A rebuilt trace kept on the report (``keep_variants``), by id."""
        return next((v for v in self.variants if v.trace_id == trace_id), None)

    @property
    def new_failures(self) -> list[TurnError]:
        """Turns whose build failed after the change only: everything they kept is lost."""
        return [e for e in self.errors if e.side == "after"]

    def worst_loss(self) -> str | None:
        found = [f.loss for _, f in self.losses() if f.loss is not None]
        if self.new_failures:
            found.append("error")
        return max(found, key=_RANK.__getitem__, default=None)


def _severity_rank(at: str) -> int:
    if at not in _RANK:
        raise InputError(f"unknown severity {at!r}; choose one of {', '.join(LOSS_SEVERITIES)}")
    return _RANK[at]


# --------------------------------------------------------------------------- variants


def settings_label(settings: Settings | None) -> str:
    return "recorded" if settings is None else json.dumps(dict(settings), sort_keys=True)


def variant_id(trace_id: str, settings: Settings) -> str:
    """A stable id per (recorded trace, settings): saving the same replay twice adds nothing.

    A session id goes through the same function, so the saved variants of one session form a
    session of their own (the Timeline shows it next to the recording, not mixed into it).
    """
    digest = hashlib.sha1(settings_label(settings).encode("utf-8")).hexdigest()[:10]
    return f"{trace_id}~{REPLAY_TAG}-{digest}"


def variant(trace: Trace, settings: Settings | None) -> Trace:
    """``trace`` rebuilt with its recorded config patched by ``settings`` (None: as recorded).

    As ``ctxscope build --set``: another preset starts from that preset's defaults, and
    ``window``/``output_reserve`` change the captured input (a new window drops the recorded
    ``max_tokens`` so the budget follows it).
    """
    return _variant(trace, settings, reasons=True)


def _variant(trace: Trace, settings: Settings | None, *, reasons: bool) -> Trace:
    """``variant``; without ``reasons`` a ctxscope rebuild leaves its decisions' sentences
    out (``_build_trace``)."""
    if settings is None:
        if trace.result is not None:
            return trace
        cfg = resolve_config(trace.config, trace.input)
        return trace.model_copy(update={"config": cfg, "result": build(trace.input, cfg)})
    patch = dict(settings)
    facts = {k: patch.pop(k) for k in INPUT_FACTS if k in patch}
    base = trace.config.model_dump(exclude_none=True)
    if "preset" in patch and patch["preset"] != trace.config.preset:
        base = {}  # another preset's resolved knobs do not carry over
    inp = trace.input
    if facts:
        inp = input_from_obj({**inp.model_dump(mode="json"), **facts}, "replay settings")
        if "window" in facts and "max_tokens" not in patch:
            base.pop("max_tokens", None)
        if "output_reserve" in facts:
            base.pop("output_reserve", None)  # the recorded config's reserve would win over it
    base.update(patch)
    cfg = config_from_obj(base, "replay settings")
    check_input_facts(cfg.preset, facts, f"replay settings {', '.join(facts)}")
    return _build_trace(
        inp,
        cfg,
        reasons,
        trace_id=variant_id(trace.trace_id, settings),
        session_id=variant_id(trace.session_id, settings),
        turn=trace.turn,
        created_at=trace.created_at,
        tags=[*[t for t in trace.tags if t != REPLAY_TAG], REPLAY_TAG],
        metadata={"replay": dict(settings)},
        source_trace_id=trace.trace_id,
    )


def _build_trace(inp: CapturedInput, cfg: Config, reasons: bool, **fields: Any) -> Trace:
    """``pipeline.build_trace(inp, cfg, **fields)``; without ``reasons`` the ctxscope preset
    leaves every decision's sentence and notes out (``ctxscope.run(reasons=False)``, a third
    of a build). For a variant the report only compares and does not keep: what it reads of
    a build (statuses, totals, the findings' severity, detector and packet ids) never
    depends on the sentences (docs/design.md, "Diagnostics")."""
    if reasons:
        return build_trace(inp, cfg, **fields)
    resolved = resolve_config(cfg, inp)
    if resolved.preset != ctxscope.NAME or resolved.tokenizer is None:
        return build_trace(inp, cfg, **fields)
    counter = get_counter(resolved.tokenizer)
    return Trace(
        schema_=SCHEMA,
        builder=Builder(name=f"ctxcore/{ctxscope.NAME}", version=ctxscope.VERSION),
        input=inp,
        config=resolved,
        result=ctxscope.run(inp, resolved, counter, None, reasons=False),
        **fields,
    )


# --------------------------------------------------------------------------- comparing


def _flips(recorded: Trace, a: Trace, b: Trace, errors: dict[str, bool]) -> list[Flip]:
    """``errors`` caches, per packet id, whether its text is error evidence (ids are stable
    across the turns of a session, and the scan is the costly part of comparing)."""
    assert a.result is not None and b.result is not None
    before = {d.packet_id: d for d in a.result.decisions}
    after = {d.packet_id: d for d in b.result.decisions}
    packets = {p.id: p for p in recorded.input.packets}
    out: list[Flip] = []
    for pid in [*before, *(p for p in after if p not in before)]:
        da, db = before.get(pid), after.get(pid)
        sa = da.status if da is not None else None
        sb = db.status if db is not None else None
        if sa == sb:
            continue
        kind = da.kind if da is not None else db.kind if db is not None else "?"
        packet = packets.get(pid)
        must = packet.must_keep if packet is not None else False
        err = False
        if packet is not None:
            if pid not in errors:
                errors[pid] = bool(error_evidence(packet.content))
            err = errors[pid]
        ra = _REACH[sa] if sa is not None else 0
        rb = _REACH[sb] if sb is not None else 0
        loss: str | None = None
        if rb < ra:
            if (must or err) and rb <= _REACH[Status.SUMMARIZED]:
                loss = "error"
            elif rb == 0:
                loss = "warning"
            else:
                loss = "info"
        out.append(
            Flip(
                packet_id=pid,
                kind=kind,
                before=sa.value if sa is not None else "absent",
                after=sb.value if sb is not None else "absent",
                must_keep=must,
                error_evidence=err,
                loss=loss,
            )
        )
    return out


def _finding_key(f: Finding) -> str:
    ids = f" [{', '.join(f.packet_ids)}]" if f.packet_ids else ""
    return f"{f.severity} {f.detector}{ids}"


@dataclass(frozen=True)
class TraceJson:
    """A trace as the JSON it is stored as (UTF-8), read into a ``Trace`` where it is replayed.

    ``ctxscope replay --all`` hands the worker processes the stored JSON rather than traces:
    a ``Trace`` of ~100 packets pickles to ~250 kB and costs more to pickle and unpickle than
    to validate from JSON, and the validation then runs in the workers, in parallel, instead
    of in the one process that reads the store.

    ``decode``, when given, reads the JSON faster than pydantic into a struct with the
    models' field names and values that the models would accept as they are, or returns
    None (``ctxscope replay`` passes ingest's msgspec reader, ``ctxcore.store.fastdecode``,
    which keeps that rule: about half the time of validating). What it cannot read, pydantic
    validates, and a trace neither reads is that turn's error, worded by pydantic.
    """

    trace_id: str
    raw: bytes
    decode: Callable[[bytes], Any] | None = None
    #: with ``unpack``, ``raw`` is the JSON as the store keeps it (compressed) and ``size``
    #: its length unpacked: ``unpack(raw, size)`` is the JSON (``ctxscope replay --all``
    #: leaves that to the workers too)
    size: int = 0
    unpack: Callable[[bytes, int], bytes] | None = None
    #: the trace's findings as the store computed them at insert, alone (no other turns)
    #: and by this very code (``diagnostics.fingerprint``): the recorded side takes the
    #: detectors that read one trace from them (``diagnose(..., alone=)``)
    findings: Sequence[Finding] | None = None

    def load(self) -> Trace:
        raw = self.raw
        if self.unpack is not None:
            try:
                raw = self.unpack(raw, self.size)
            except Exception as exc:  # noqa: BLE001 - one damaged blob is that turn's error
                why = f"{type(exc).__name__}: {exc}"
                raise InputError(f"trace_id {self.trace_id!r}: cannot be unpacked ({why})") from exc
        if self.decode is not None:
            try:
                fast = self.decode(raw)
                if fast is not None:
                    return _read_struct(Trace, fast)
            except Exception:  # noqa: BLE001 - pydantic reads it again and words what is wrong
                pass
        try:
            return Trace.model_validate_json(raw)
        except ValueError as exc:  # pydantic's ValidationError, or bad UTF-8
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise InputError(f"trace_id {self.trace_id!r}: cannot be read ({first})") from exc


_M = TypeVar("_M", bound=BaseModel)
_Reader = Callable[[Any], Any]
#: per (model, struct type): the function that makes the model from such a struct
_READERS: dict[tuple[type[BaseModel], type], _Reader] = {}


def _read_struct(model: type[_M], struct: Any) -> _M:
    """``model`` made from a struct that has its fields (same names, same order) holding
    values the model accepts as they are (``TraceJson.decode``): nested structs become their
    models and plain strings the enum members, the rest is taken as it is, nothing is
    validated again (the same internals a validated model has; tests/test_replay_speed.py
    compares them). What to convert is worked out once per model and struct type."""
    read = _READERS.get((model, type(struct)))
    if read is None:
        read = _READERS[(model, type(struct))] = _reader(model, type(struct))
    out: _M = read(struct)
    return out


def _reader(model: type[BaseModel], struct_type: type) -> _Reader:
    if tuple(getattr(struct_type, "__struct_fields__", ())) != tuple(model.model_fields):
        raise TypeError(f"a {struct_type.__name__} struct is not a {model.__name__}")
    # msgspec only here: ctxcore is imported where it is not installed (the hello-agents
    # adapter runs in the package's own environment), and only the store's reader makes structs
    from msgspec.structs import asdict

    hints = typing.get_type_hints(model, include_extras=True)
    convert = [(n, fn) for n in model.model_fields if (fn := _converter(hints[n])) is not None]

    def read(struct: Any) -> BaseModel:
        values: dict[str, Any] = asdict(struct)
        for name, fn in convert:
            values[name] = fn(values[name])
        return unvalidated(model, values)

    return read


def _converter(tp: Any) -> _Reader | None:
    """How a field's struct value becomes the model's (None: as it is)."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _converter(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        inner = [fn for a in typing.get_args(tp) if (fn := _converter(a)) is not None]
        if not inner:
            return None
        if len(inner) > 1 or type(None) not in typing.get_args(tp):
            raise TypeError(f"replay cannot read {tp!r} from a struct")
        one = inner[0]
        return lambda v: None if v is None else one(v)
    if origin is list:
        args = typing.get_args(tp)
        if isinstance(args[0], type) and issubclass(args[0], BaseModel):
            return functools.partial(_read_structs, args[0])
        item = _converter(args[0])
        return None if item is None else (lambda v: [item(x) for x in v])
    if origin is dict:
        if _converter(typing.get_args(tp)[1]) is not None:
            raise TypeError(f"replay cannot read {tp!r} from a struct")
        return None
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp._value2member_map_.__getitem__
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return functools.partial(_read_struct, tp)
    return None


def _read_structs(model: type[BaseModel], structs: list[Any]) -> list[Any]:
    """A list of structs made models (one reader looked up for a list of one struct type)."""
    if not structs:
        return []
    kind = type(structs[0])
    read = _READERS.get((model, kind)) or _READERS.setdefault((model, kind), _reader(model, kind))
    return [read(x) if type(x) is kind else _read_struct(model, x) for x in structs]


TraceLike = Trace | TraceJson


def _turn_order(
    traces: Iterable[TraceLike], stored: dict[str, Sequence[Finding]] | None = None
) -> tuple[list[Trace], list[TurnError]]:
    """The traces in turn order, and one error per stored trace that could not be read;
    ``stored`` gets the findings that came with a stored trace, by its id."""
    loaded: list[Trace] = []
    errors: list[TurnError] = []
    for t in traces:
        if not isinstance(t, TraceJson):
            loaded.append(t)
            continue
        try:
            loaded.append(t.load())
            if stored is not None and t.findings is not None:
                stored[loaded[-1].trace_id] = t.findings
        except CtxscopeError as exc:
            errors.append(
                TurnError(
                    session_id="", turn=-1, trace_id=t.trace_id, side="read", message=str(exc)
                )
            )
    return sorted(loaded, key=lambda t: (t.turn, t.created_at, t.trace_id)), errors


def _side(trace: Trace, settings: Settings | None, reasons: bool = True) -> Trace | str:
    """The variant of one side (``reasons``: with its decisions' sentences), or why it
    could not be built. Any exception of one turn's build is that turn's error, never the
    replay's (a settings patch the config refuses fails every turn alike, and a replay where
    no turn could be replayed is an error)."""
    try:
        return _variant(trace, settings, reasons=reasons)
    except CtxscopeError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - a bug in one build must not cost the others
        return f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class _Job:
    """One session's traces (any order; replayed in turn order) and the two sides."""

    traces: Sequence[TraceLike]
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    findings: bool
    keep_variants: bool
    #: keep the recorded side's findings for the next replay (in this process only: a
    #: worker's memory would be spent on sessions it is not asked about again)
    remember: bool = False


@dataclass(frozen=True)
class _JobResult:
    turns: list[TurnReport]
    errors: list[TurnError]
    first_lost: list[FirstLoss]
    findings_before: Counter[str]
    findings_after: Counter[str]
    variants: list[Trace]


def _same_input(a: Trace, b: Trace) -> bool:
    return a.input is b.input or a.input == b.input


def _rebuild_of(trace: Trace, built: Trace) -> bool:
    """Is ``built.result`` exactly what ``diagnostics.rebuild(trace)`` would return?

    ``built`` was built here by ``build_trace`` (or ``build``) from its input and resolved
    config; ``rebuild`` builds ``trace.input`` with ``trace.config`` validated again, resolved,
    and counted with ``trace.config.tokenizer`` (cl100k_base when unset). The two are the same
    call when the inputs are equal, the configs resolve alike and the counters agree.
    """
    from ctxcore.diagnostics import patched_config

    if built.result is None or not _same_input(trace, built):
        return False
    try:
        cfg = resolve_config(patched_config(trace.config, {}), trace.input)
    except CtxscopeError:
        return False
    counter = trace.config.tokenizer or "cl100k_base"
    return cfg == built.config and counter == built.config.tokenizer


#: what a decision and a report say besides their sentences (``_build_trace``)
_DECIDED = operator.attrgetter(
    *(f for f in Decision.model_fields if f not in ("reason_text", "notes"))
)
_REPORTED = operator.attrgetter(*(f for f in Report.model_fields if f != "reasons"))


def _same_build(a: Trace, b: Trace) -> bool:
    """Do the detectors see the same trace in ``a`` and ``b``, as far as the report reads
    their findings (severity, detector, packet ids)? They read the input, the config, the
    result (its timings are measurements, and the decisions' sentences only go into the
    findings' messages), the builder, the import metadata and the turn; ids, tags and the
    rest of the metadata only tell the traces apart."""
    if a.result is None or b.result is None:
        return False
    ra, rb = a.result, b.result
    meta_a = a.metadata.get("import") if isinstance(a.metadata, dict) else None
    meta_b = b.metadata.get("import") if isinstance(b.metadata, dict) else None
    return (
        a.turn == b.turn
        and a.builder == b.builder
        and meta_a == meta_b
        and a.config == b.config
        and ra.prompt == rb.prompt
        and ra.totals == rb.totals
        and _REPORTED(ra.report) == _REPORTED(rb.report)
        and _decided(ra) == _decided(rb)
        and ra.partitions == rb.partitions
        and ra.messages == rb.messages
        and ra.warnings == rb.warnings
        and _same_input(a, b)
    )


def _decided(r: BuildResult) -> list[tuple[Any, ...]]:
    return [_DECIDED(d) for d in r.decisions]


class _RecordedFindings:
    """The recorded side's findings per session, kept for the next replay of the session.

    Replaying against the recording diagnoses the recorded builds, and the next knob change
    (the app's Replay view, a script trying settings) would diagnose the very same builds
    again. A few sessions are kept; an entry is used only for the same traces in the same
    order (the same objects, or equal ones: a cache that returns copies still hits). At
    most ``sessions`` sessions and ``traces`` traces are kept (the traces are held alive).
    """

    def __init__(self, sessions: int = 4, traces: int = 500) -> None:
        self._data: OrderedDict[tuple[str, ...], tuple[list[Trace], list[list[Finding]]]] = (
            OrderedDict()
        )
        self._sessions = sessions
        self._traces = traces
        self._lock = threading.Lock()

    def get(self, traces: list[Trace]) -> list[list[Finding]] | None:
        key = tuple(t.trace_id for t in traces)
        with self._lock:
            entry = self._data.get(key)
            if entry is not None:
                self._data.move_to_end(key)
        if entry is None:
            return None
        kept, found = entry
        if all(x is y or x == y for x, y in zip(kept, traces, strict=True)):
            return found
        return None

    def put(self, traces: list[Trace], found: list[list[Finding]]) -> None:
        if len(traces) > self._traces:
            return
        key = tuple(t.trace_id for t in traces)
        with self._lock:
            self._data[key] = (list(traces), found)
            self._data.move_to_end(key)
            while len(self._data) > self._sessions or (
                sum(len(k) for k in self._data) > self._traces
            ):
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


RECORDED_FINDINGS = _RecordedFindings()


def _run_job(job: _Job) -> _JobResult:
    """Replay one session turn by turn: both sides of a turn are built and diagnosed one after
    the other, so every build of the turn reuses the one prepared form of its input (the
    pipeline keeps a few), and a turn the new settings build exactly as before (and every
    turn before it) has the same findings without diagnosing it again."""
    from ctxcore.diagnostics import INGEST_OPTIONS, diagnose
    from ctxcore.diagnostics.session import TurnFindings, lost_items

    stored: dict[str, Sequence[Finding]] = {}
    traces, errors = _turn_order(job.traces, stored)
    if not traces:
        return _JobResult([], errors, [], Counter(), Counter(), [])
    recorded = job.before is None
    cache = job.findings and recorded and job.remember
    known = RECORDED_FINDINGS.get(traces) if cache else None
    # per turn, each side's build (None where it failed: the turn is reported as an error and
    # left out of that side's history for the cross-turn detectors)
    side_a: list[Trace | None] = []
    side_b: list[Trace | None] = []
    fa: list[list[Finding]] = []
    fb: list[list[Finding]] = []
    same_so_far = True
    for i, rec in enumerate(traces):
        # a variant the report does not keep is built without its sentences (the report
        # reads none of them)
        ra = _side(rec, job.before, job.keep_variants)
        rb = _side(rec, job.after, job.keep_variants)
        a = ra if isinstance(ra, Trace) else None
        b = rb if isinstance(rb, Trace) else None
        side_a.append(a)
        side_b.append(b)
        if a is None or b is None:
            failed = "both" if a is None and b is None else "before" if a is None else "after"
            why = ra if isinstance(ra, str) else rb
            errors.append(
                TurnError(
                    session_id=rec.session_id,
                    turn=rec.turn,
                    trace_id=rec.trace_id,
                    side=failed,
                    message=str(why),
                )
            )
            same_so_far = same_so_far and a is None and b is None
        if not job.findings:
            fa.append([])
            fb.append([])
            continue
        fresh = [x for x in (b, a) if x is not None and x is not rec]  # built just now
        same_so_far = same_so_far and (a is None or b is None or _same_build(a, b))
        xa: list[Finding] = []
        if known is not None:
            xa = known[i]
        elif a is not None:
            built = next((x for x in fresh if _rebuild_of(a, x)), None)
            xa = diagnose(
                a,
                session_traces=[x for x in side_a[:i] if x is not None],
                options=INGEST_OPTIONS,
                rebuilt=built.result if built is not None else None,
                # the recording as stored: its findings alone are the store's
                alone=stored.get(rec.trace_id) if a is rec else None,
            )
        xb: list[Finding] = []
        if b is None:
            pass
        elif same_so_far:
            xb = xa  # this turn and every one before it are the same builds on both sides
        else:
            built = next((x for x in fresh if _rebuild_of(b, x)), None)
            xb = diagnose(
                b,
                session_traces=[x for x in side_b[:i] if x is not None],
                options=INGEST_OPTIONS,
                rebuilt=built.result if built is not None else None,
            )
        fa.append(xa)
        fb.append(xb)
    if cache and known is None and all(x is not None for x in side_a):
        RECORDED_FINDINGS.put(traces, fa)
    built_a = [(t, x) for t, x in zip(side_a, fa, strict=True) if t is not None]
    built_b = [(t, x) for t, x in zip(side_b, fb, strict=True) if t is not None]
    ta = [TurnFindings(trace_id=t.trace_id, turn=t.turn, findings=x) for t, x in built_a]
    tb = [TurnFindings(trace_id=t.trace_id, turn=t.turn, findings=x) for t, x in built_b]
    turns = []
    evidence: dict[str, bool] = {}
    for rec, a, b, xa, xb in zip(traces, side_a, side_b, fa, fb, strict=True):
        if a is None or b is None:
            continue
        assert a.result is not None and b.result is not None
        ka = {_finding_key(f) for f in xa}
        kb = {_finding_key(f) for f in xb}
        turns.append(
            TurnReport(
                session_id=rec.session_id,
                turn=rec.turn,
                trace_id=rec.trace_id,
                before_id=a.trace_id,
                after_id=b.trace_id,
                used_before=a.result.totals.used,
                used_after=b.result.totals.used,
                budget_before=a.result.report.budget,
                budget_after=b.result.report.budget,
                flips=_flips(rec, a, b, evidence),
                findings_added=sorted(kb - ka),
                findings_cleared=sorted(ka - kb),
            )
        )
    only_a = [t for t, _ in built_a]
    only_b = [t for t, _ in built_b]
    # an item in either side's prompt counts as had on both (``FirstLoss``)
    seen = _first_in_prompt([*only_a, *only_b])
    lost_a = {x.item: x for x in lost_items(only_a, ta if job.findings else [], seen=seen)}
    lost_b = {x.item: x for x in lost_items(only_b, tb if job.findings else [], seen=seen)}
    sid = traces[0].session_id
    first = [
        FirstLoss(
            session_id=sid,
            item=item,
            kind=(lost_a.get(item) or lost_b[item]).kind,
            before_turn=lost_a[item].lost_turn if item in lost_a else None,
            after_turn=lost_b[item].lost_turn if item in lost_b else None,
        )
        for item in sorted({*lost_a, *lost_b})
    ]
    return _JobResult(
        turns=turns,
        errors=errors,
        first_lost=first,
        findings_before=Counter(f.detector for _, x in built_a for f in x),
        findings_after=Counter(f.detector for _, x in built_b for f in x),
        variants=[*(only_a if job.before is not None else []), *only_b]
        if job.keep_variants
        else [],
    )


def _first_in_prompt(traces: Iterable[Trace]) -> dict[str, int]:
    """Per packet id, the first turn any of ``traces`` had it in the prompt."""
    from ctxcore.diagnostics.context import IN_PROMPT

    out: dict[str, int] = {}
    for t in traces:
        assert t.result is not None
        for d in t.result.decisions:
            if d.status in IN_PROMPT and t.turn < out.get(d.packet_id, t.turn + 1):
                out[d.packet_id] = t.turn
    return out


#: the collector's thresholds in a replay worker (Python's defaults: 700, 10, 10)
_WORKER_GC = (50_000, 20, 100)


def _worker_start() -> None:
    """A worker process's setup. A session's replay makes some hundred thousand objects that
    live until it is done (traces, builds, findings, the detectors' memos) and almost no
    cycles: with Python's default thresholds the collector walked the whole heap some twenty
    times a run and took a sixth of the CPU (bench/bench_replay.py). It runs less often, and
    never over what the worker was forked with (the modules the server imported)."""
    import gc

    gc.freeze()
    gc.set_threshold(*_WORKER_GC)


def _run_in_worker(job: _Job) -> _JobResult:
    """``_run_job`` in a worker process, which then lets go of what only this session could
    use: the prepared inputs (the pipeline keeps 64, and no turn of another session is one
    of them) and the detectors' memos (keyed by this session's prompts and packets). Kept,
    a worker held ~50 MB more of them by its twentieth session, for no hit (bench_replay.py:
    the same CPU seconds either way)."""
    from ctxcore.diagnostics.text import clear_memos
    from ctxcore.pipeline.gather import PREPARED

    try:
        return _run_job(job)
    finally:
        PREPARED.clear()
        clear_memos()


def _jobs(traces: Iterable[Trace]) -> list[list[Trace]]:
    by_session: dict[str, list[Trace]] = {}
    for t in traces:
        by_session.setdefault(t.session_id, []).append(t)
    return list(by_session.values())


def _first_key(x: FirstLoss) -> tuple[str, int, str]:
    turns = [n for n in (x.before_turn, x.after_turn) if n is not None]
    return (x.session_id, min(turns, default=0), x.item)


def replay(
    traces: Iterable[Trace],
    settings: Settings | None,
    *,
    against: Settings | None = None,
    findings: bool = True,
    workers: int | None = None,
    keep_variants: bool = False,
) -> ReplayReport:
    """Replay ``traces`` with ``settings`` (a config patch) and compare with the recorded builds.

    ``against`` replaces the recorded side with a second patch ("32K vs 64K"). Traces are
    grouped by session (the cross-turn detectors need the earlier turns of the same side) and
    sessions are spread over ``workers`` processes (default: one per CPU; a small replay runs
    in this process). ``findings=False`` skips the diagnostics (about as costly as the builds:
    a turn rebuilt exactly as recorded, with every turn before it, keeps the recorded findings,
    and the recorded side of a session is diagnosed once per process). ``keep_variants`` keeps
    the rebuilt traces on the report (for ``--save``).
    """
    groups = _jobs(traces)
    if len(groups) == 1 or sum(len(g) for g in groups) < POOL_MIN_TRACES:
        workers = 1
    # largest sessions first, so one long session does not finish last on its own
    groups.sort(key=lambda g: -sum(len(t.input.packets) + 1 for t in g))
    return replay_sessions(
        groups,
        settings,
        against=against,
        findings=findings,
        workers=workers,
        keep_variants=keep_variants,
    )


def replay_sessions(
    sessions: Iterable[Sequence[TraceLike]],
    settings: Settings | None,
    *,
    against: Settings | None = None,
    findings: bool = True,
    workers: int | None = None,
    keep_variants: bool = False,
) -> ReplayReport:
    """``replay`` over sessions read one at a time (each the traces of one session, as
    ``Trace``s or as their stored JSON, ``TraceJson``).

    At most two sessions per worker are in flight, so a caller that reads sessions lazily
    (``ctxscope replay --all``) holds a few sessions in memory, never the whole store. Fewer
    than ``POOL_MIN_TRACES`` traces in all are replayed in this process: starting the
    workers would cost more than they save.
    """
    start = time.perf_counter()
    before = None if against is None else dict(against)
    after = None if settings is None else dict(settings)
    n = workers if workers is not None else default_workers()

    def jobs() -> Iterator[_Job]:
        for group in sessions:
            if group:
                yield _Job(group, before, after, findings, keep_variants)

    todo = jobs()
    first: list[_Job] = []
    if n > 1:
        # look ahead until the replay is big enough for a pool (or the sessions run out)
        for job in todo:
            first.append(job)
            if sum(len(j.traces) for j in first) >= POOL_MIN_TRACES:
                break
        else:
            n = 1
    results: list[_JobResult] = []
    if n <= 1:
        results = [
            _run_job(dataclasses.replace(j, remember=True)) for j in itertools.chain(first, todo)
        ]
    else:
        with worker_pool(n, findings, _worker_start) as pool:
            pending: set[Future[_JobResult]] = set()
            for job in itertools.chain(first, todo):
                pending.add(pool.submit(_run_in_worker, job))
                if len(pending) >= 2 * n:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    results.extend(f.result() for f in done)
            results.extend(f.result() for f in pending)
    if not results:
        raise InputError("replay: no traces were selected")
    if not any(r.turns for r in results) and any(r.errors for r in results):
        raise InputError(
            "replay: no turn could be replayed; the first error: "
            + next(f"{e.trace_id}: {e.message}" for r in results for e in r.errors)
        )
    turns = sorted(
        (t for r in results for t in r.turns), key=lambda t: (t.session_id, t.turn, t.trace_id)
    )
    fb: Counter[str] = Counter()
    fa: Counter[str] = Counter()
    for r in results:
        fb.update(r.findings_before)
        fa.update(r.findings_after)
    return ReplayReport(
        before=settings_label(against),
        after=settings_label(settings),
        turns=turns,
        first_lost=sorted((x for r in results for x in r.first_lost), key=_first_key),
        findings_before=dict(sorted(fb.items())),
        findings_after=dict(sorted(fa.items())),
        findings_compared=findings,
        errors=sorted(
            (e for r in results for e in r.errors), key=lambda e: (e.session_id, e.turn, e.trace_id)
        ),
        seconds=round(time.perf_counter() - start, 3),
        variants=[v for r in results for v in r.variants],
    )


__all__ = [
    "CHANGED_MEANS",
    "FIRST_LOST_MEANS",
    "INPUT_FACTS",
    "POOL_MIN_TRACES",
    "LOSS_SEVERITIES",
    "REPLAY_TAG",
    "FirstLoss",
    "Flip",
    "ReplayReport",
    "TraceJson",
    "TurnError",
    "TurnReport",
    "default_workers",
    "replay",
    "replay_sessions",
    "settings_label",
    "variant",
    "variant_id",
]
