"""The variants of a recorded trace: rebuilt with a settings patch, with or without their
decisions' sentences, and the checks that tell when two builds are the same for the report."""

from __future__ import annotations

import hashlib
import json
import operator
from collections.abc import Mapping
from typing import Any

from ctxcore.errors import CtxscopeError
from ctxcore.loading import config_from_obj, input_from_obj
from ctxcore.models import (
    SCHEMA,
    Builder,
    BuildResult,
    CapturedInput,
    Config,
    Decision,
    Report,
    Trace,
)
from ctxcore.pipeline import build, build_trace, check_input_facts, ctxscope, resolve_config
from ctxcore.pipeline.recorded import carried_knobs
from ctxcore.tokens import get_counter

REPLAY_TAG = "replay"
#: knobs of ``settings`` that are facts of the model call (the captured input), not of the
#: builder; ``ctxscope build --set`` reads them the same way
INPUT_FACTS = ("window", "output_reserve")

Settings = Mapping[str, Any]


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
        # another preset's resolved knobs do not carry over; a preset that rebuilds the
        # recorded request counts with the recorded trace's tokenizer (docs/design.md,
        # "recorded")
        base = carried_knobs(trace.config, str(patch["preset"]))
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
