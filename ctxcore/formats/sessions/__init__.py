"""Agent session logs as traces: one trace per model call, one session per log, turns in order.

A request importer sees one prompt; a session log (Claude Code, OpenAI Codex CLI, Pi, OpenHands,
SWE-agent, mini-swe-agent) records a whole run, and each model call in it saw the conversation
up to that call. Each reader here turns its log into ``calls.Call``s (the context as
normalised messages, the usage the log reports for that call, what the log does not record),
and ``calls.CallTraces`` turns those into traces, sharing what consecutive calls have in
common so that a long session imports as a stream (docs/design.md, "Capture, import, export,
redaction").

- ``claude-code``, ``codex``, ``pi``: JSONL logs, read line by line (``iter_file``); a broken
  line is an error naming ``file:line`` and the rest of the log is imported;
- ``openhands``, ``swe-agent``, ``mini-swe-agent``: one JSON value (``traces_from_value``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from ctxcore.errors import CtxscopeError, ImportFormatError
from ctxcore.formats.sessions import claude_code, codex, openhands, pi, trajectories
from ctxcore.formats.sessions.calls import Call, CallTraces
from ctxcore.formats.sessions.lines import (
    LogLine,
    first_values,
    log_time,
    read_lines,
    values_at,
)
from ctxcore.models import Trace

#: Formats read line by line from a JSONL file.
LOG_FORMATS: tuple[str, ...] = (claude_code.FORMAT, codex.FORMAT, pi.FORMAT)
#: Formats held in one JSON value.
VALUE_FORMATS: tuple[str, ...] = (
    openhands.FORMAT,
    trajectories.SWE_AGENT,
    trajectories.MINI_SWE_AGENT,
)
FORMATS: tuple[str, ...] = LOG_FORMATS + VALUE_FORMATS
SessionFormat = Literal["claude-code", "codex", "pi", "openhands", "swe-agent", "mini-swe-agent"]


def detect_lines(values: list[Any]) -> SessionFormat | None:
    """The log format of a file's first parsed lines, if they are a session log's."""
    for v in values:
        if claude_code.looks_like(v):
            return "claude-code"
        if codex.looks_like(v):
            return "codex"
        if pi.looks_like(v):
            return "pi"
    return None


def sniff(path: str | Path) -> SessionFormat | None:
    """Which session-log format a JSONL file holds (None: not a session log)."""
    values, lines = first_values(Path(path))
    return detect_lines(values) if lines > 1 else None


def _log_lines(data: Any) -> SessionFormat | None:
    """The log format of a JSON list holding a log's events, if it is one."""
    if isinstance(data, list) and len(data) > 1 and isinstance(data[0], dict):
        return detect_lines(data[:5])
    return None


def looks_like_claude_code(data: Any) -> bool:
    """Whether a JSON value is a Claude Code log's events (the registry's detector)."""
    return _log_lines(data) == claude_code.FORMAT


def looks_like_codex(data: Any) -> bool:
    """Whether a JSON value is a Codex rollout's events (the registry's detector)."""
    return _log_lines(data) == codex.FORMAT


def looks_like_pi(data: Any) -> bool:
    """Whether a JSON value is a Pi session's entries (the registry's detector)."""
    return _log_lines(data) == pi.FORMAT


class SessionImport:
    """The traces of one log, as a stream; ``errors`` (``file:line: why``) and the counts
    grow while it is read. Iterate it once.

    ``window``/``model`` stand for what the log does not say (``ctxscope import --window N``
    or ``--model NAME``): a model without a window takes its window from the model table."""

    def __init__(
        self,
        fmt: str,
        calls: Callable[[], Iterable[Call]],
        reader: Any,
        *,
        window: int | None = None,
        model: str | None = None,
    ) -> None:
        self.format = fmt
        self._calls = calls
        self._reader = reader
        self.window = window
        self.model = model
        builder = {
            claude_code.FORMAT: claude_code.BUILDER_NAME,
            codex.FORMAT: codex.BUILDER_NAME,
            pi.FORMAT: pi.BUILDER_NAME,
        }.get(fmt, f"import/{fmt}")
        self.traces = CallTraces(fmt=fmt, builder=builder)

    def __iter__(self) -> Iterator[Trace]:
        """The traces, in order. A log that cannot be read to its end (a cut ``.gz``) gives
        the traces of the calls read before the damage (all but a reply the damage may have
        cut), then raises its error."""
        failed: list[CtxscopeError] = []

        def calls() -> Iterator[Call]:
            try:
                yield from self._calls()
            except CtxscopeError as exc:  # the calls read so far still become traces
                failed.append(exc)

        yield from self.traces.traces(self._overridden(calls()))
        if failed:
            raise failed[0]

    def _overridden(self, calls: Iterable[Call]) -> Iterator[Call]:
        for call in calls:
            if self.model:
                call.model, call.window, call.window_source = self.model, None, None
            if self.window is not None:
                call.window, call.window_source = self.window, "--window"
            yield call

    @property
    def errors(self) -> list[str]:
        """Every record of the log that could not be read (``file:line: why``)."""
        errors: list[str] = getattr(self._reader, "errors", [])
        return errors

    def stream(self) -> Iterator[Trace]:
        """The traces as they are made, one behind (one trace held): records that broke
        after the last call go on the last trace (``metadata.import.skipped``), as the
        earlier ones went on the next trace. A log that cannot be read to its end (a cut
        ``.gz``) yields the traces made before the damage, then raises its error."""
        held: Trace | None = None
        try:
            for t in self:
                if held is not None:
                    yield held
                held = t
        except CtxscopeError:
            if held is not None:
                yield self._with_late(held)
            raise
        if held is not None:
            yield self._with_late(held)

    def _with_late(self, last: Trace) -> Trace:
        late = self.errors[getattr(self._reader, "reported", len(self.errors)) :]
        if not late:
            return last
        meta = dict(last.metadata)
        imp = dict(meta.get("import") or {})
        imp["skipped"] = [*(imp.get("skipped") or []), *late]
        meta["import"] = imp
        return last.model_copy(update={"metadata": meta})

    def collect(self) -> list[Trace]:
        """All the traces, as a list (``stream``, whole)."""
        return list(self.stream())


def _reader(
    fmt: str,
    name: str,
    session: str,
    now: datetime,
    fetch: Callable[[Sequence[int]], dict[int, Any]] | None = None,
) -> Any:
    """``fetch`` reads the log's lines again (``lines.values_at``), for a reader that lets
    go of what it may need again (Claude Code's, docs/design.md, "Capture, import, export,
    redaction")."""
    if fmt == claude_code.FORMAT:
        return claude_code.Reader(name, session, now, fetch)
    if fmt == codex.FORMAT:
        return codex.Reader(name, session, now)
    if fmt == pi.FORMAT:
        return pi.Reader(name, session, now)
    raise ImportFormatError(f"{fmt!r} is not a session-log format ({', '.join(LOG_FORMATS)})")


def iter_file(
    path: str | Path,
    fmt: str,
    *,
    default_now: datetime | None = None,
    window: int | None = None,
    model: str | None = None,
) -> SessionImport:
    """The traces of a JSONL session log, read as a stream."""
    p = Path(path)
    now = log_time(p, default_now)
    session = p.name.split(".")[0] or "import"
    reader = _reader(fmt, str(p), session, now, lambda offsets: values_at(p, offsets))
    return SessionImport(
        fmt, lambda: reader.calls(read_lines(p)), reader, window=window, model=model
    )


def _value_lines(data: list[Any]) -> Iterator[LogLine]:
    for i, v in enumerate(data, start=1):
        yield LogLine(i, v)


def traces_from_value(
    data: Any,
    fmt: str,
    *,
    where: str = "",
    session_id: str = "import",
    default_now: datetime | None = None,
) -> list[Trace]:
    """The traces of a session held in one JSON value (a log's events as a JSON list, an
    OpenHands trajectory, a SWE-agent or mini-swe-agent trajectory)."""
    now = default_now or datetime.now(UTC)
    name = where or "input"
    if fmt in LOG_FORMATS:
        if not isinstance(data, list):
            raise ImportFormatError(f"{name}: a {fmt} log held in JSON is a list of its events")
        reader = _reader(fmt, name, session_id, now)
        imp = SessionImport(fmt, lambda: reader.calls(_value_lines(data)), reader)
    elif fmt == openhands.FORMAT:
        calls = openhands.calls(data, name, session_id, now)
        imp = SessionImport(fmt, lambda: calls, None)
    elif fmt in (trajectories.SWE_AGENT, trajectories.MINI_SWE_AGENT):
        calls = trajectories.calls(data, fmt, name, session_id, now)
        imp = SessionImport(fmt, lambda: calls, None)
    else:
        raise ImportFormatError(f"{fmt!r} is not a session format ({', '.join(FORMATS)})")
    traces = imp.collect()
    if not traces:
        why = imp.errors[0] if imp.errors else "it records none"
        raise ImportFormatError(f"{name}: a {fmt} log with no model call ctxscope can read ({why})")
    return traces


def _value_reader(fmt: str) -> Callable[..., list[Trace]]:
    """``traces_from_value`` for one format: that format's reader in the registry."""

    def read(
        data: Any, *, where: str, session_id: str, default_now: datetime | None
    ) -> list[Trace]:
        return traces_from_value(
            data, fmt, where=where, session_id=session_id, default_now=default_now
        )

    read.__doc__ = f"The {fmt} reader (``registry.Reader``)."
    return read


read_claude_code = _value_reader(claude_code.FORMAT)
read_codex = _value_reader(codex.FORMAT)
read_pi = _value_reader(pi.FORMAT)
read_openhands = _value_reader(openhands.FORMAT)
read_swe_agent = _value_reader(trajectories.SWE_AGENT)
read_mini_swe_agent = _value_reader(trajectories.MINI_SWE_AGENT)


__all__ = [
    "FORMATS",
    "LOG_FORMATS",
    "SessionFormat",
    "SessionImport",
    "VALUE_FORMATS",
    "detect_lines",
    "iter_file",
    "looks_like_claude_code",
    "looks_like_codex",
    "looks_like_pi",
    "read_claude_code",
    "read_codex",
    "read_mini_swe_agent",
    "read_openhands",
    "read_pi",
    "read_swe_agent",
    "sniff",
    "traces_from_value",
]
