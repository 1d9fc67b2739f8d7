"""``ctxscope import --db``: the findings computed in a second process, beside the import.

An import into the store is one stream of one session's calls, and its findings at insert
(``rows.diagnose_trace``) are about half of its work. So that both cores work on it, a
child process reads the same sources with the same importer (``_Import``: the same
traces, redacted the same way, in the same order, its messages unsaid) and diagnoses each
trace, while this process reads them again, splits them, builds their rows without
findings (``rows.prepare(..., diagnose=False)``) and writes the store; each batch's
findings are then set into its rows (``with_findings``), the rows they would have had
(docs/design.md, "Capture, import, export, redaction").

The child sends one message per trace down a pipe: (trace_id, findings, fingerprint,
error). This process drains the pipe as it reads (``FindingsProcess.poll``) and holds at
most ``AHEAD`` traces' findings; beyond that the child waits on the pipe, so memory stays
bounded whichever side is faster. A trace whose detectors raised carries that error and is
rejected as ``prepare`` rejects a trace it cannot build; what the detectors log (a trace
they skip) is sent with its trace and logged here, as one process would have. A child
that dies, or that reads other traces than this process (a log written to while it is
imported), ends the split: this process says so in a note and computes the remaining
findings itself, as an import of a small file does (``worth_a_child``: the child's start
costs more than it saves below ``CHILD_FROM_BYTES``, and a source that is not a regular
file cannot be read twice); never a hang (the pipe's other end closes with the child).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import multiprocessing
import os
import stat
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from ctxcore.models import Finding, Trace

if TYPE_CHECKING:
    from ctxcore.store.rows import RowTables

#: traces' findings received and not yet taken, at most (the child waits beyond)
AHEAD = 1000
#: seconds between looks at the child while its next trace's findings are awaited
POLL = 0.2
#: the sources' size from which the findings get a process of their own: below it, the
#: child's start (its interpreter and imports, ~0.5 s of CPU) costs more than it saves
CHILD_FROM_BYTES = 4 << 20

#: what the child sends per trace: trace_id, findings, the detectors' fingerprint (None:
#: not diagnosed), the error of a trace whose detectors raised (None: none), and what the
#: detectors logged about it (``ctxscope.store`` warnings, logged again by this process)
Diagnosed = tuple[str, list[Finding], str | None, str | None, list[str]]

#: the logger ``rows.diagnose_trace`` says a skipped trace on
_STORE_LOG = "ctxscope.store"


class FindingsStopped(Exception):
    """The child computing the findings ended, or read other traces than this process:
    the message says which (the import turns it into its error)."""


@dataclass(frozen=True)
class FindingsJob:
    """What the child reads: the import's sources and options, as ``_Import`` takes them."""

    sources: list[str]
    input_format: str
    window: int | None
    model: str | None
    redact: bool


class _Said(logging.Handler):
    """What the detectors log while one trace is diagnosed (the child's output goes
    nowhere: ``FindingsProcess`` logs it again)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.said: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.said.append(record.getMessage())


def _diagnosed(trace: Trace) -> Diagnosed:
    """One trace's findings as ``prepare`` computes them, or the error its detectors
    raised (``rows.unexpected``: ``prepare`` rejects such a trace with it), with what they
    logged about it."""
    from ctxcore.store.rows import diagnose_trace, unexpected

    said = _Said()
    logger = logging.getLogger(_STORE_LOG)
    logger.addHandler(said)
    try:
        found, fingerprint = diagnose_trace(trace, b"")
    except Exception as exc:
        return trace.trace_id, [], None, unexpected(exc), said.said
    finally:
        logger.removeHandler(said)
    return trace.trace_id, found, fingerprint, None, said.said


def _child(job: FindingsJob, conn: Connection) -> None:
    """The child's work: every trace of the import diagnosed, in order, then None (the end);
    an error of the importer itself is sent as its text."""
    from ctxcore.cli.exchange import _Import

    # no ``big_buffers_mapped`` here: the child holds no trace's JSON, and mapping its
    # buffers cost it 1.4 s of system time on the 40 MB log for no memory saved
    args = argparse.Namespace(input_format=job.input_format, window=job.window, model=job.model)
    with (
        open(os.devnull, "w") as null,
        contextlib.redirect_stdout(null),
        contextlib.redirect_stderr(null),
    ):
        run = _Import([Path(p) for p in job.sources], args)
        run.redact = job.redact
        try:
            for trace in run.traces():
                conn.send(_diagnosed(trace))
        except BrokenPipeError:
            return  # the import ended without waiting for the rest
        except Exception as exc:  # said by the import, which read the same sources
            conn.send(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            return
        conn.send(None)
    conn.close()


class FindingsProcess:
    """The child process that diagnoses the import's traces, and its findings as they come
    (module docstring). ``close`` ends it, whatever it was doing."""

    def __init__(self, job: FindingsJob) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child_end = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(
            target=_child, args=(job, child_end), name="ctxscope-findings", daemon=True
        )
        self.proc.start()
        child_end.close()  # the child's death closes the pipe: a read sees the end
        self._ready: deque[Diagnosed] = deque()
        self.received = 0
        self._ended = False

    def poll(self) -> None:
        """Receive what the child has sent, without waiting (up to ``AHEAD`` held)."""
        while len(self._ready) < AHEAD and not self._ended and self._conn.poll(0):
            self._receive()

    def take(self, trace_id: str) -> Diagnosed:
        """The findings of the next trace, which must be ``trace_id``; waits for them."""
        while not self._ready:
            if self._ended:
                raise FindingsStopped(
                    f"the findings process read {self.received:,} trace(s), fewer than "
                    f"this import (trace_id {trace_id!r} is not among them)"
                )
            if self._conn.poll(POLL):
                self._receive()
            elif self.proc.exitcode is not None and not self._conn.poll(0):
                self._stopped()
        got = self._ready.popleft()
        if got[0] != trace_id:
            raise FindingsStopped(
                f"the findings process read trace_id {got[0]!r} where this import read {trace_id!r}"
            )
        for said in got[4]:
            logging.getLogger(_STORE_LOG).warning("%s", said)
        return got

    def _receive(self) -> None:
        try:
            item = self._conn.recv()
        except (EOFError, OSError):
            self._stopped()
        if item is None:
            self._ended = True
        elif isinstance(item, str):
            raise FindingsStopped(f"the findings process failed: {item}")
        else:
            self._ready.append(item)
            self.received += 1

    def _stopped(self) -> None:
        self.proc.join(1.0)
        code = self.proc.exitcode
        raise FindingsStopped(
            f"the findings process stopped (exit code {code}) after {self.received:,} trace(s)"
        )

    def close(self) -> None:
        """End the child (at once if it is still reading) and the pipe."""
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()
        self._conn.close()
        self.proc.close()


def with_findings(rows: RowTables, found: Sequence[Diagnosed]) -> RowTables:
    """``rows`` (made by ``prepare(..., diagnose=False)``) with the findings the child
    computed for the batch's traces (``found[k]``: the batch's trace ``k``): the
    ``findings`` rows and the ``n_findings``, ``max_severity`` and ``diagnosed_with``
    columns as ``prepare`` with ``diagnose`` makes them. A trace the detectors raised on is
    added to ``rows.rejected``, with the error ``prepare`` would have given it."""
    from ctxcore.store.rows import RowBatch

    batch = RowBatch(diagnose=False)
    counts: list[int] = []
    worst: list[str | None] = []
    made_by: list[str | None] = []
    for tseq, pos in enumerate(rows.positions):
        tid, findings, fingerprint, error, _ = found[pos]
        if error is not None:
            rows.rejected.append((pos, error))
        counts.append(len(findings))
        worst.append(batch.add_findings(tid, tseq, findings) if findings else None)
        made_by.append(fingerprint)
    rows.rejected.sort()
    traces = rows.tables.get("traces")
    if traces is not None:
        for name, values in (
            ("n_findings", counts),
            ("max_severity", worst),
            ("diagnosed_with", made_by),
        ):
            at = traces.schema.get_field_index(name)
            field = traces.schema.field(at)
            traces = traces.set_column(at, field, pa.array(values, field.type))
        rows.tables["traces"] = traces
    table = batch.tables().get("findings")
    if table is not None:
        rows.tables["findings"] = table
    return rows


def worth_a_child(sources: Sequence[Path]) -> bool:
    """Whether an import of ``sources`` computes its findings in a child: every source a
    regular file (read twice: a pipe or a device can be read once) and together at least
    ``CHILD_FROM_BYTES``."""
    total = 0
    for p in sources:
        try:
            st = p.stat()
        except OSError:
            return False
        if not stat.S_ISREG(st.st_mode):
            return False
        total += st.st_size
    return total >= CHILD_FROM_BYTES


def findings_job(
    sources: Sequence[Path], args: argparse.Namespace, redact: bool
) -> FindingsJob | None:
    """The child's job for an import of ``sources`` with ``args`` (``cli_import``'s), or
    None where the findings are better computed in the import's own process
    (``worth_a_child``)."""
    if not worth_a_child(sources):
        return None
    return FindingsJob(
        [str(p) for p in sources], args.input_format, args.window, args.model, redact
    )


__all__ = [
    "AHEAD",
    "CHILD_FROM_BYTES",
    "FindingsJob",
    "FindingsProcess",
    "FindingsStopped",
    "findings_job",
    "with_findings",
    "worth_a_child",
]
