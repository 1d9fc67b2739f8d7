"""Recorder: capture context builds from a running agent as JSONL in the watched folder.

The agent's job is to answer the user, not to feed a debugger, so recording must never
get in its way: every I/O failure is turned into a warning and the agent carries on.
Several agent processes may append to the same file at once; each line goes out in one
``os.write`` on an ``O_APPEND`` descriptor under an exclusive ``flock``, so lines never
interleave or tear, and the watcher (which reads only up to the last newline) never sees
half a trace.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import threading
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctxcore import settings
from ctxcore.errors import CtxscopeError, InputError
from ctxcore.loading import config_from_obj, input_from_obj
from ctxcore.models import SCHEMA, Builder, BuildResult, CapturedInput, Config, Message, Trace

log = logging.getLogger("ctxscope.capture")

Redactor = Callable[[Trace], Trace]


class RecorderWarning(RuntimeWarning):
    """A trace could not be recorded; the agent was not interrupted."""


def _as_input(value: CapturedInput | dict[str, Any]) -> CapturedInput:
    return value if isinstance(value, CapturedInput) else input_from_obj(value, "input")


def _as_config(value: Config | dict[str, Any] | None) -> Config | None:
    if value is None or isinstance(value, Config):
        return value
    return config_from_obj(value, "config")


def _default_redactor() -> Redactor:
    """``redact_trace`` through a memory of the recorder's texts: a session's calls repeat
    their history, which the rules then read once (``formats.redact_memo``)."""
    from ctxcore.formats.redact_memo import Redactor as Memory

    memory = Memory()
    lock = threading.Lock()  # the memory is not for two threads at once

    def redact(trace: Trace) -> Trace:
        with lock:
            return memory.trace(trace)[0]

    return redact


_UNSAFE = re.compile(r"[^A-Za-z0-9._@+=-]+")


def safe_file_stem(session_id: str) -> str:
    """A file name for a session id: path separators and other unsafe characters become
    ``_``, a leading dot is dropped (``../x`` must not leave the traces folder, ``.x`` must
    not hide), and long ids are cut and suffixed with a hash so that two stay apart."""
    stem = _UNSAFE.sub("_", session_id).lstrip(".") or "session"
    if len(stem) > 120 or stem != session_id:
        digest = hashlib.blake2b(session_id.encode("utf-8"), digest_size=4).hexdigest()
        stem = f"{stem[:120]}-{digest}"
    return stem


class Recorder:
    """Record every context build of one agent session into ``traces_dir``.

    ``build()`` runs the ctxcore pipeline and records the trace; ``record()`` records a
    build another builder did (a finished ``Trace``, or its input, config and prompt).
    Turns are numbered from 0 unless the caller passes ``turn=``.
    """

    def __init__(
        self,
        traces_dir: str | Path | None = None,
        session_id: str | None = None,
        file_name: str | None = None,
        *,
        redact: bool | Redactor = False,
        tags: list[str] | None = None,
    ) -> None:
        self.traces_dir = Path(traces_dir or settings.traces_dir())
        self.session_id = session_id or f"session-{uuid.uuid4().hex[:12]}"
        self.file_name = file_name or f"{safe_file_stem(self.session_id)}.jsonl"
        if Path(self.file_name).name != self.file_name or self.file_name in {".", ".."}:
            raise InputError(
                f"Recorder file_name {self.file_name!r} must be a plain file name: the recorder "
                f"writes only inside its traces folder ({self.traces_dir})"
            )
        self.path = self.traces_dir / self.file_name
        self.tags = list(tags or [])
        self._redact: Redactor | None = _default_redactor() if redact is True else (redact or None)
        self._lock = threading.Lock()
        self._turn = 0
        self.written = 0
        self.failures = 0
        self.last_trace: Trace | None = None

    def _next_turn(self, turn: int | None) -> int:
        with self._lock:
            if turn is None:
                turn = self._turn
            self._turn = turn + 1
            return turn

    def build(
        self,
        input: CapturedInput | dict[str, Any],
        config: Config | dict[str, Any] | None = None,
        **kw: Any,
    ) -> BuildResult:
        """Run ``ctxcore.pipeline.build_trace`` and record the trace; returns its result.

        Errors of the build itself (e.g. ``BudgetError``) are the caller's to handle, as
        they would be without a recorder; only recording failures are swallowed."""
        from ctxcore.pipeline import build_trace

        kw.setdefault("session_id", self.session_id)
        kw["turn"] = self._next_turn(kw.get("turn"))
        kw.setdefault("tags", list(self.tags))
        trace = build_trace(_as_input(input), _as_config(config), **kw)
        self.write(trace)
        assert trace.result is not None
        return trace.result

    def record(
        self,
        trace: Trace | None = None,
        *,
        input: CapturedInput | dict[str, Any] | None = None,
        config: Config | dict[str, Any] | None = None,
        prompt: str | None = None,
        messages: list[Message] | None = None,
        result: BuildResult | None = None,
        builder: Builder | None = None,
        turn: int | None = None,
        trace_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        tags: list[str] | None = None,
    ) -> Trace | None:
        """Record a build done elsewhere; returns the trace written (None if it failed).

        Give a finished ``trace``, or the ``input`` (and ``config``) the other builder
        saw with the ``prompt`` it produced. Without a ``result``, the configured preset is
        re-run on the input to reconstruct the decisions; the recorded prompt is the one
        given, and a warning in the trace says whether the reconstruction matched it."""
        if trace is None:
            if input is None:
                raise TypeError("record() needs a trace, or input= (and prompt=/result=)")
            trace = self._make_trace(
                _as_input(input),
                _as_config(config),
                prompt=prompt,
                messages=messages,
                result=result,
                builder=builder,
                turn=turn,
                trace_id=trace_id,
                metadata=metadata or {},
                tags=tags,
            )
        return self.last_trace if self.write(trace) else None

    def _make_trace(
        self,
        inp: CapturedInput,
        cfg: Config | None,
        *,
        prompt: str | None,
        messages: list[Message] | None,
        result: BuildResult | None,
        builder: Builder | None,
        turn: int | None,
        trace_id: str | None,
        metadata: dict[str, Any],
        tags: list[str] | None,
    ) -> Trace:
        cfg = cfg or Config()
        if result is None:
            try:
                from ctxcore.pipeline import build, resolve_config

                cfg = resolve_config(cfg, inp)
                rebuilt = build(inp, cfg)
            except CtxscopeError as exc:
                metadata = {**metadata, "reconstruction_error": str(exc)}
                rebuilt = None
            if rebuilt is not None and prompt is not None:
                same = rebuilt.prompt == prompt
                notes = list(rebuilt.warnings)
                if not same:
                    notes.append(
                        f"the {cfg.preset} preset's reconstruction differs from the prompt the "
                        "builder returned; decisions are the preset's, the prompt is the builder's"
                    )
                metadata = {**metadata, "reproduced": same}
                rebuilt = rebuilt.model_copy(
                    update={"prompt": prompt, "messages": messages, "warnings": notes}
                )
            result = rebuilt
            if result is None and prompt is not None:
                metadata = {**metadata, "prompt": prompt}
        return Trace(
            schema_=SCHEMA,
            trace_id=trace_id or uuid.uuid4().hex,
            session_id=self.session_id,
            turn=self._next_turn(turn),
            created_at=inp.now,
            builder=builder or Builder(name="external", version="unknown"),
            tags=list(tags if tags is not None else self.tags),
            metadata=metadata,
            input=inp,
            config=cfg,
            result=result,
        )

    # ------------------------------------------------------------------ writing

    def write(self, trace: Trace) -> bool:
        """Append one trace as one JSONL line; False (and a warning) if that failed."""
        try:
            if self._redact is not None:
                trace = self._redact(trace)
            data = (trace.to_json() + "\n").encode("utf-8")
            self.traces_dir.mkdir(parents=True, exist_ok=True)
            append_line(self.path, data)
        except (OSError, CtxscopeError, ValueError) as exc:
            self.failures += 1
            msg = (
                f"ctxscope could not record trace {trace.trace_id} to {self.path}: {exc}; "
                "the agent carries on without it"
            )
            log.warning(msg)
            warnings.warn(msg, RecorderWarning, stacklevel=3)
            return False
        self.written += 1
        self.last_trace = trace
        return True


def append_line(path: Path, data: bytes) -> None:
    """Append ``data`` (one line, ending in a newline) atomically with respect to other
    writers: O_APPEND puts each write at the end, one ``os.write`` keeps it contiguous, and
    ``flock`` keeps other ctxscope writers out for lines bigger than PIPE_BUF (whose
    writes the kernel may split) and out of the rare short write's retry.

    Nothing is renamed, so a device or a FIFO standing at ``path`` is written through and
    stays what it is (docs/design.md, "Capture, import, export, redaction", "Writing
    outputs"). A FIFO is opened without waiting: with no reader the open fails (ENXIO) and
    the caller reports it, instead of the agent hanging on its next call."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    try:
        # blocking again for the writes: a FIFO whose reader is slow is waited for
        os.set_blocking(fd, True)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
