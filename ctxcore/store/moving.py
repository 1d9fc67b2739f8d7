"""Moving a store's traces into another, as ``ctxscope migrate --db URL --move FILE.duckdb``
does for a DuckDB file going into a team store (docs/design.md, "Store", a team store).

Through the store protocol only, so any engine to any: the source's trace ids in one query
(``session_listing``), their stored JSON read a batch at a time as stored (``traces_packed``)
and made into traces with each shared part made once (``store.objects.SharedTraces``: a
session's call repeats the calls before it), and written by the target's bulk writer as
ingest writes, at most ``MOVE_BYTES`` of JSON at once, a transaction per ``COMMIT_EVERY``
traces. The target's conflict rule holds: a trace it already has is skipped
(running the move again stores only what is missing: a move cut short goes on), one it holds
with other content is reported, never overwritten. The traces' source (``source_file``)
becomes the moved file. With ``redact`` (into a team store, by default) each trace's secrets
are masked before it is written, as ingest into it masks them: each part's secrets looked
for once, each trace as ``redact_trace`` gives it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import msgspec

from ctxcore.errors import InputError
from ctxcore.formats.redact_memo import Redactor
from ctxcore.models import Trace
from ctxcore.store.objects import SharedTraces
from ctxcore.store.protocol import BulkWriter, Store
from ctxcore.store.records import PackedTrace
from ctxcore.store.rows import prepare

#: traces read together
BATCH = 500
#: bytes of whole JSON prepared and written together at most (a long session's call holds
#: its whole context: 500 of them can be gigabytes)
MOVE_BYTES = 64 * 1024 * 1024
#: traces per transaction of the target
COMMIT_EVERY = 5_000


@dataclass
class Moved:
    """What a move did: traces stored, already there, and conflicting (id, where)."""

    added: int = 0
    skipped: int = 0
    conflicts: list[tuple[str, str]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)


def trace_ids(source: Store) -> list[str]:
    """Every trace id of ``source``, session by session in turn order."""
    return [tid for _, traces in source.session_listing() for tid, _ in traces]


def _by_bytes(packed: Sequence[PackedTrace]) -> Iterator[list[PackedTrace]]:
    """``packed`` in runs of at most MOVE_BYTES of whole JSON (at least one trace each)."""
    run: list[PackedTrace] = []
    size = 0
    for p in packed:
        if run and size + p.size > MOVE_BYTES:
            yield run
            run, size = [], 0
        run.append(p)
        size += p.size
    if run:
        yield run


def _batch(
    writer: BulkWriter,
    got: list[PackedTrace],
    origin: str,
    out: Moved,
    shared: SharedTraces,
) -> None:
    """Write stored traces into the open transaction of ``writer``, each made by
    ``shared`` (redacted, when it has a redactor, as ``redact_trace`` redacts)."""
    items: list[tuple[Trace, bytes]] = []
    for p in got:
        try:
            trace, found = shared.read(p)
        except (ValueError, msgspec.MsgspecError, KeyError, IndexError) as exc:
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise InputError(
                f"{origin}: trace_id {p.trace_id!r} is stored there in a form this version "
                f"cannot read ({why}); nothing of this batch was moved"
            ) from exc
        # what is stored is the redacted trace, or the bytes as they were stored
        items.append((trace, trace.to_json_bytes() if found else p.json()))
    res = writer.add(prepare(items, [origin] * len(items)))
    out.added += res.added
    out.skipped += res.skipped
    out.conflicts += [(tid, src) for _, tid, src in res.conflicts]
    out.refused += [(items[k][0].trace_id, why) for k, why in res.rejected]


def move_traces(
    source: Store,
    target: Store,
    *,
    origin: str,
    redact: bool,
    progress: Callable[[int, int], None] | None = None,
) -> Moved:
    """Copy every trace of ``source`` into ``target`` (see the module's docstring);
    ``origin`` names the source in the target's rows and in messages, ``redact`` masks each
    trace's secrets, ``progress`` is told (traces done, traces in all) after each batch."""
    ids = trace_ids(source)
    out = Moved()
    shared = SharedTraces(redactor=Redactor() if redact else None)
    with target.bulk_writer() as writer:
        for i in range(0, len(ids), BATCH):
            for run in _by_bytes(source.traces_packed(ids[i : i + BATCH])):
                _batch(writer, run, origin, out, shared)
            done = min(i + BATCH, len(ids))
            if done % COMMIT_EVERY == 0:
                writer.commit()
            if progress is not None:
                progress(done, len(ids))
    return out


__all__ = ["BATCH", "COMMIT_EVERY", "MOVE_BYTES", "Moved", "move_traces", "trace_ids"]
