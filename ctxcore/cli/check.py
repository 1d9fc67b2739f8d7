"""``ctxscope check FILE... [--fail-on SEVERITY]``: the diagnostics as a CI gate.

Files hold traces (``.json``: one trace, a list of them or an exported snapshot;
``.jsonl``: one per line; either may be gzipped) or captured inputs, which are built with
the default preset first. Traces of the same session are diagnosed together, so the
cross-turn detectors see the earlier turns; they read them once for the whole session
(``SessionFolds``, as ``diagnose_session`` does) when the session's traces come in turn
order, so a long session costs its length, not its length squared. Every finding is printed
on one line, ``file:trace_id: severity detector: message (fix: …) [packet ids]``; the exit
code is 0 when no finding reaches ``--fail-on``, 1 when some do, and 2 on bad input. A
file that cannot be read at all (missing, a folder, a JSON document that does not parse or
is one trace that cannot be read) is one line on stderr, printed by ``ctxcore.cli``, before
anything is checked. A line or item that cannot be read is that line's error
(``cli.bad_lines``: said on stderr with its file and line), the others are checked and
reported in full, and the code is 2: the gate did not see everything. All files are read
before anything is printed. JSONL is streamed line by line and a JSON document is refused
past MAX_DOCUMENT_BYTES (``ctxcore.loading``), so a huge or hostile file costs one error
line, not the machine's memory.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from operator import is_
from pathlib import Path
from typing import Any, TextIO

from ctxcore.cli.bad_lines import BadLines
from ctxcore.diagnostics.context import SEVERITY_RANK, SessionFolds
from ctxcore.errors import InputError
from ctxcore.loading import (
    GZIP_ERRORS,
    decode_line,
    input_from_obj,
    iter_lines,
    open_stream,
    parse_json,
    read_text,
    trace_from_obj,
)
from ctxcore.models import Config, Trace
from ctxcore.sharing import PartTable, is_shared


@dataclass(frozen=True)
class Checked:
    """One trace to check and where it came from."""

    where: str  # the file name as given
    trace: Trace


def _to_trace(obj: Any, where: str, default_id: str) -> Trace:
    from ctxcore.pipeline import build_trace

    if isinstance(obj, dict) and "schema" in obj:
        return trace_from_obj(obj, where)
    inp = input_from_obj(obj, where)
    # a bare captured input: build it with the default preset, as `ctxscope build` would
    return build_trace(inp, Config(), trace_id=default_id, session_id=default_id)


def load_checked(
    paths: list[str], errors: Callable[[str, InputError], None] | None = None
) -> list[Checked]:
    """The traces of ``paths``, in order. A bad line or item raises, or, when ``errors`` is
    given, goes to it with its file's name as given (its message names the file and line)
    and the rest is read: ``ctxscope check`` says it and checks the others, ``ctxscope
    replay`` reports it as that turn's error and replays the others. A file that cannot be
    read at all (missing, a folder, too big, a document that is one bad trace) always
    raises."""
    out: list[Checked] = []

    def record(
        name: str, obj: Any, raw: bytes | None, where: str, default_id: str, alone: bool = False
    ) -> None:
        """One line's or item's trace; a file that is one document (``alone``) is read whole
        or not at all."""
        try:
            if isinstance(obj, InputError):
                raise obj
            if raw is not None:
                obj = parse_json(decode_line(raw, where), where)
            out.append(Checked(name, _to_trace(obj, where, default_id)))
        except InputError as exc:
            if errors is None or alone:
                raise
            errors(name, exc)

    for name in paths:
        path = Path(name)
        if path.is_dir():
            raise InputError(f"{path}: is a folder; pass the trace files (e.g. {path}/*.jsonl)")
        stem = path.name
        if path.name.removesuffix(".gz").endswith(".jsonl") or _starts_shared(path):
            # streamed: a huge file, or a huge line, costs one error, not all the memory;
            # a shared line is expanded with the parts of the lines before it (a file that
            # starts with one is JSON lines whatever its name: docs/design.md, "Shared traces")
            table = PartTable()
            for lineno, raw in iter_lines(path):
                if not raw.strip():
                    continue
                where = f"{path}:{lineno}"
                try:
                    whole = table.expand(raw, where)
                except InputError as exc:
                    record(name, exc, None, where, "")
                    continue
                record(name, None, whole, where, f"{stem}:{lineno}")
        else:
            data = parse_json(read_text(path), str(path))
            if isinstance(data, dict) and "format" in data and "schema" not in data:
                # a snapshot exported by `ctxscope export` (one or more traces)
                from ctxcore.formats.load import traces_from_snapshot_or_trace

                out.extend(Checked(name, t) for t in traces_from_snapshot_or_trace(data, str(path)))
                continue
            items = data if isinstance(data, list) else [data]
            if not items:
                raise InputError(f"{path}: the JSON list is empty; expected traces or inputs")
            for i, obj in enumerate(items):
                where = f"{path}[{i}]" if isinstance(data, list) else str(path)
                default_id = f"{stem}[{i}]" if isinstance(data, list) else stem
                record(name, obj, None, where, default_id, alone=not isinstance(data, list))
    return out


def _starts_shared(path: Path) -> bool:
    """Whether a file's first line (its first MiB) is a shared trace line, in either order
    of its keys: the file is read as JSON lines whatever its name (one that cannot be read
    is left to the reader to say why)."""
    try:
        with open_stream(path) as f:
            return is_shared(f.read(1024 * 1024).split(b"\n", 1)[0])
    except (OSError, InputError, *GZIP_ERRORS):
        return False


def format_finding(where: str, trace_id: str, f: Any) -> str:
    ids = f" [{', '.join(f.packet_ids)}]" if f.packet_ids else ""
    message = " ".join(str(f.message).split())  # one finding, one line
    label = f.evidence.get("fix_label") if f.fix else None
    fix = f" (fix: {label})" if label else ""
    return f"{where}:{trace_id}: {f.severity} {f.detector}: {message}{fix}{ids}"


def _folds(traces: list[Trace]) -> SessionFolds | None:
    """The session's folds (``diagnose_session``'s: the session detectors read the earlier
    turns once for the whole session, not again at every turn) when its traces come in the
    order it diagnoses them (by turn, then time of creation), as a session's lines do; else
    None, and each trace is diagnosed with its earlier turns read afresh."""
    ordered = sorted(traces, key=lambda t: (t.turn, t.created_at))
    return SessionFolds(ordered) if all(map(is_, ordered, traces)) else None


def _earlier(trace: Trace, session: list[Trace], folds: SessionFolds | None) -> list[Trace]:
    """The session's traces of the turns before ``trace``'s, but ``trace``: with ``folds``,
    the prefix of the session they keep (the same traces, in the same order)."""
    k = folds.earlier(trace) if folds is not None else None
    if folds is not None and k is not None:
        return folds.traces[:k]
    return [t for t in session if t.turn < trace.turn and t.trace_id != trace.trace_id]


def run_check(
    paths: list[str],
    fail_on: str = "error",
    out: TextIO | None = None,
    err: TextIO | None = None,
    prices: str | None = None,
) -> int:
    from ctxcore.cost import price_table
    from ctxcore.diagnostics import DiagnosticsOptions, diagnose, ensure_built

    out = out or sys.stdout
    err = err or sys.stderr
    if fail_on not in SEVERITY_RANK:
        raise InputError(f"--fail-on {fail_on!r}: choose one of info, warning, error")
    price_table(Path(prices) if prices else None)  # a bad price file: one line, before all
    options = DiagnosticsOptions(prices=prices)
    bad = BadLines("check", err)
    checked = [Checked(c.where, ensure_built(c.trace)) for c in load_checked(paths, bad.add)]
    bad.finish()
    by_session: dict[str, list[Trace]] = {}
    for c in checked:
        by_session.setdefault(c.trace.session_id, []).append(c.trace)
    folds = {s: _folds(ts) for s, ts in by_session.items()}
    counts = {"info": 0, "warning": 0, "error": 0}
    failing = 0
    for c in checked:
        session = folds[c.trace.session_id]
        earlier = _earlier(c.trace, by_session[c.trace.session_id], session)
        for f in diagnose(c.trace, session_traces=earlier, options=options, folds=session):
            counts[f.severity] += 1
            if SEVERITY_RANK[f.severity] >= SEVERITY_RANK[fail_on]:
                failing += 1
            print(format_finding(c.where, c.trace.trace_id, f), file=out)
    print(
        f"ctxscope check: {len(checked)} trace(s): {counts['error']} error(s), "
        f"{counts['warning']} warning(s), {counts['info']} info; "
        f"{failing} at or above {fail_on}{bad.summary()}",
        file=err,
    )
    return 2 if bad.total else 1 if failing else 0


def cli_check(args: argparse.Namespace) -> int:
    """``ctxscope check FILE... [--fail-on SEVERITY] [--prices FILE]``."""
    return run_check(list(args.files), args.fail_on, prices=args.prices)
