"""When is a trace given again the same trace (docs/design.md, "Store": a trace id stored
with the same content is skipped, with other content refused)? Both engines ask it of a
trace whose digest differs from the one stored or given earlier in the same batch: written
differently (spacing, key order, another codec) or built again (an import run twice, a
converter resuming from its spool), the stage timings are the only part that may differ."""

from __future__ import annotations

from ctxcore.models import Trace


def comparable(trace: Trace) -> str:
    """A trace's canonical JSON without its stage timings (measurements: building or
    importing the same input twice differs there). Compared as canonical JSON, as model
    equality would call ``1`` and ``1.0`` (or ``true``) in metadata the same."""
    if trace.result is not None and trace.result.timings:
        trace = trace.model_copy(update={"result": trace.result.model_copy(update={"timings": {}})})
    return trace.to_json()


def same_trace(first: bytes, then: bytes) -> bool:
    """Are two traces' JSON the same trace (``comparable``)? A JSON that is not a valid
    trace is the same as none."""
    if first == then:
        return True
    try:
        return comparable(Trace.model_validate_json(first)) == comparable(
            Trace.model_validate_json(then)
        )
    except ValueError:
        return False
