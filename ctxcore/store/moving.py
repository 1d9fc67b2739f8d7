"""Moving a store's traces into another, as ``ctxscope migrate --db URL --move FILE.duckdb``
does for a DuckDB file going into a team store (docs/design.md, "Store", a team store).

Through the store protocol only, so any engine to any: the source's trace ids in one query
(``session_listing``), their stored JSON read a batch at a time (``traces_json``, the bytes
as stored), and written by the target's bulk writer as ingest writes, a transaction per
``COMMIT_EVERY`` traces. The target's conflict rule holds: a trace it already has is skipped
(running the move again stores only what is missing: a move cut short goes on), one it holds
with other content is reported, never overwritten. The traces' source (``source_file``)
becomes the moved file. With ``redact`` (into a team store, by default) each trace's secrets
are masked before it is written, as ingest into it masks them: a session's traces repeat
their texts, which the rules read once each (``Redactor``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ctxcore.errors import InputError
from ctxcore.formats.redact import may_hold_secret
from ctxcore.formats.redact_memo import Redactor
from ctxcore.models import Trace
from ctxcore.store.protocol import BulkWriter, Store
from ctxcore.store.rows import prepare

#: traces read and prepared together
BATCH = 500
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


def _batch(
    writer: BulkWriter,
    got: list[tuple[str, bytes]],
    origin: str,
    out: Moved,
    redactor: Redactor | None,
) -> None:
    """Write one batch of (trace id, JSON) into the open transaction of ``writer``, each
    trace's secrets masked first by ``redactor`` (as ``redact_trace`` masks them)."""
    items: list[tuple[Trace, bytes]] = []
    for tid, raw in got:
        try:
            trace = Trace.model_validate_json(raw)
        except ValueError as exc:
            raise InputError(
                f"{origin}: trace_id {tid!r} is stored there in a form this version cannot "
                f"read ({str(exc).splitlines()[0]}); nothing of this batch was moved"
            ) from exc
        if redactor is not None and may_hold_secret(raw):
            trace, found = redactor.trace(trace)
            if found:  # what is stored is the redacted trace, and nothing else
                raw = trace.to_json_bytes()
        items.append((trace, raw))
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
    redactor = Redactor() if redact else None
    with target.bulk_writer() as writer:
        for i in range(0, len(ids), BATCH):
            _batch(writer, source.traces_json(ids[i : i + BATCH]), origin, out, redactor)
            done = min(i + BATCH, len(ids))
            if done % COMMIT_EVERY == 0:
                writer.commit()
            if progress is not None:
                progress(done, len(ids))
    return out


__all__ = ["BATCH", "COMMIT_EVERY", "Moved", "move_traces", "trace_ids"]
