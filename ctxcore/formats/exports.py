"""What the readers of observability exports share (docs/design.md, "Formats"): a file of
recorded model calls (Langfuse ``GENERATION`` observations, Agents SDK call spans) is one
trace per call, turns counted per session in start order, and a call that cannot be read is
that call's error, listed in the first trace's ``metadata.import.skipped``; the others are
imported. A file none of whose calls can be read is refused with the first error.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from ctxcore.errors import ImportFormatError
from ctxcore.models import Trace

#: One recorded call: what names it in an error, its session, and its trace at a turn.
RecordedCall = tuple[str, str, Callable[[int], Trace]]


def traces_per_call(calls: Iterable[RecordedCall]) -> list[Trace]:
    """The traces of the calls, in the order given (their start order)."""
    turns: Counter[str] = Counter()
    out: list[Trace] = []
    skipped: list[str] = []
    for label, session, make in calls:
        try:
            trace = make(turns[session])
        except ImportFormatError as exc:
            skipped.append(f"{label}: {exc}")
            continue
        turns[session] += 1
        out.append(trace)
    if not out:
        more = f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""
        raise ImportFormatError(skipped[0] + more)
    if skipped:
        meta = dict(out[0].metadata)
        meta["import"] = {**meta["import"], "skipped": skipped}
        out[0] = out[0].model_copy(update={"metadata": meta})
    return out


__all__ = ["RecordedCall", "traces_per_call"]
