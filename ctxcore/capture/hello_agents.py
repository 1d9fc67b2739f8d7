"""Capture every ``build()`` of a real hello-agents 0.2.8 ``ContextBuilder`` as a ctxscope trace.

An agent keeps using its builder; ``wrap(builder, traces_dir)`` returns a stand-in whose
``build(...)`` calls the real one, converts its arguments into a captured input, re-runs
our ``hello-agents`` preset on it (which reconstructs the decisions the package never
reports) and records a trace. ``trace.metadata["reproduced"]`` says whether our prompt is
byte-identical to the one the package returned; when it is not, the real prompt is stored
in ``metadata["real_prompt"]`` so nothing is lost.

Capturing never breaks the agent: the real prompt is always returned, and a failure to
convert, re-run or write is reported with ``warnings.warn``. hello_agents is imported by
nobody here (its objects are read by attribute), so ctxcore imports without it.

Limits worth knowing: time is read once just before the call (the package reads its own
clock a little later; only exact score ties could order differently), and packets a memory
or RAG tool adds inside ``build`` are captured by briefly wrapping the builder's
``_gather`` on that instance; they are placed after the history packet in our input.
"""

from __future__ import annotations

import json
import uuid
import warnings
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ctxcore.capture.recorder import Recorder
from ctxcore.models import Builder, CapturedInput, Config, Message, Packet, Trace
from ctxcore.pipeline import build_trace

JSONL_NAME = "hello-agents.jsonl"
UNTYPED = "untyped"


def _sink(recorder_or_dir: Any, session_id: str) -> Any:
    if hasattr(recorder_or_dir, "record"):
        return recorder_or_dir
    return Recorder(recorder_or_dir, session_id=session_id, file_name=JSONL_NAME)


def _package_version() -> str:
    try:
        from importlib.metadata import version

        return version("hello-agents")
    except Exception:
        return "unknown"


def _aware(ts: Any, default: datetime) -> datetime:
    """The package's naive timestamps are local time (``datetime.now()``)."""
    if not isinstance(ts, datetime):
        return default
    return ts.astimezone()  # naive -> local zone; aware stays the same instant


def _json_safe(d: Any) -> dict[str, Any]:
    if not isinstance(d, dict):
        return {}
    out: dict[str, Any] = json.loads(json.dumps(d, default=str))
    return out


def convert_history(history: list[Any] | None, now: datetime) -> list[Message]:
    out = []
    for m in history or []:
        md = _json_safe(getattr(m, "metadata", None))
        mid = md.get("id")
        out.append(
            Message(
                role=str(m.role),
                content=str(m.content),
                timestamp=_aware(getattr(m, "timestamp", None), now),
                id=mid if isinstance(mid, str) and mid else None,
                metadata=md,
            )
        )
    return out


def convert_packets(packets: list[Any], now: datetime, prefix: str = "packet") -> list[Packet]:
    """hello-agents ``ContextPacket``s → ctxscope packets (kind = metadata["type"]).

    ``token_count`` is kept only when it is not what the package itself counts for the
    content (a caller-supplied count): that is what the preset's notes should flag.
    """
    from ctxcore.pipeline._hello_shared import PackageCounter
    from ctxcore.tokens import get_counter

    pc = PackageCounter.for_counter(get_counter("cl100k_base"))
    out: list[Packet] = []
    seen: set[str] = set()
    for i, p in enumerate(packets):
        md = _json_safe(getattr(p, "metadata", None))
        kind = md.get("type")
        if not isinstance(kind, str) or not kind:
            kind = UNTYPED
        pid = md.get("id") or md.get("source_id")
        if not isinstance(pid, str) or not pid or pid in seen:
            pid = f"{prefix}:{i}"
        seen.add(pid)
        rel = getattr(p, "relevance_score", 0.0)
        content = str(p.content)
        out.append(
            Packet(
                id=pid,
                kind=kind,
                content=content,
                timestamp=_aware(getattr(p, "timestamp", None), now),
                relevance=float(rel) if rel else None,
                tokens=None if int(p.token_count) == pc.count(content) else int(p.token_count),
                metadata=md,
            )
        )
    return out


def convert_config(cfg: Any) -> Config:
    return Config(
        preset="hello-agents",
        max_tokens=int(cfg.max_tokens),
        reserve_ratio=float(cfg.reserve_ratio),
        min_relevance=float(cfg.min_relevance),
        enable_compression=bool(cfg.enable_compression),
    )


class HelloAgentsCapture:
    """Stands in for a ``ContextBuilder``: same ``build()``, plus a trace per call."""

    def __init__(
        self,
        builder: Any,
        sink: Any,
        session_id: str,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.builder = builder
        self.sink = sink
        self.session_id = session_id
        self.turn = 0
        self._clock = clock or (lambda: datetime.now().astimezone())
        self.last_trace: Trace | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.builder, name)

    def build(
        self,
        user_query: str,
        conversation_history: list[Any] | None = None,
        system_instructions: str | None = None,
        additional_packets: list[Any] | None = None,
    ) -> str:
        now = self._clock()
        captured: dict[str, Any] = {}
        try:
            # Before the call: the package overwrites relevance_score on these objects.
            captured["history"] = convert_history(conversation_history, now)
            captured["packets"] = convert_packets(list(additional_packets or []), now)
            captured["config"] = convert_config(self.builder.config)
        except Exception as exc:  # never break the agent
            warnings.warn(f"ctxscope: could not capture the build input ({exc})", stacklevel=2)
            captured = {}
        tool_packets: list[Any] = []
        spy = bool(
            getattr(self.builder, "memory_tool", None) or getattr(self.builder, "rag_tool", None)
        )
        if spy:
            tool_packets = self._spy_gather(additional_packets or [])
        try:
            prompt: str = self.builder.build(
                user_query=user_query,
                conversation_history=conversation_history,
                system_instructions=system_instructions,
                additional_packets=additional_packets,
            )
        finally:
            if spy:
                self.builder.__dict__.pop("_gather", None)
        if captured:
            try:
                self._record(user_query, system_instructions, now, captured, tool_packets, prompt)
            except Exception as exc:  # never break the agent
                warnings.warn(f"ctxscope: could not record the build ({exc})", stacklevel=2)
        return prompt

    def _spy_gather(self, additional: list[Any]) -> list[Any]:
        """Collect packets the builder's memory/RAG tools add inside build()."""
        found: list[Any] = []
        orig = self.builder._gather
        mine = {id(p) for p in additional}

        def gather(*args: Any, **kwargs: Any) -> Any:
            out = orig(*args, **kwargs)
            try:
                for p in out:
                    t = (getattr(p, "metadata", None) or {}).get("type")
                    if id(p) not in mine and t not in ("instructions", "history"):
                        found.append(p)
            except Exception:  # pragma: no cover - defensive
                pass
            return out

        self.builder.__dict__["_gather"] = gather
        return found

    def _record(
        self,
        query: str,
        system_instructions: str | None,
        now: datetime,
        captured: dict[str, Any],
        tool_packets: list[Any],
        prompt: str,
    ) -> None:
        packets = convert_packets(tool_packets, now, prefix="tool") + captured["packets"]
        inp = CapturedInput(
            query=query,
            now=now,
            system_instructions=system_instructions or "",
            history=captured["history"],
            packets=packets,
        )
        trace = build_trace(
            inp,
            captured["config"],
            trace_id=uuid.uuid4().hex,
            session_id=self.session_id,
            turn=self.turn,
            created_at=now,
            tags=["hello-agents", "adapter"],
        )
        assert trace.result is not None
        reproduced = trace.result.prompt == prompt
        metadata: dict[str, Any] = {
            "adapter": "ctxcore.capture.hello_agents",
            "reconstructed_by": trace.builder.name,
            "reproduced": reproduced,
            "tool_packets": len(tool_packets),
        }
        update: dict[str, Any] = {
            "metadata": metadata,
            "builder": Builder(name="hello-agents", version=_package_version()),
        }
        if not reproduced:
            # Decisions and prompt stay our reconstruction (they agree with each other);
            # what the model really received is kept beside them.
            metadata["real_prompt"] = prompt
            update["result"] = trace.result.model_copy(
                update={
                    "warnings": [
                        *trace.result.warnings,
                        "the hello-agents preset did not reproduce the prompt the real "
                        "builder returned (customised builder?); the real prompt is in "
                        "metadata.real_prompt",
                    ]
                }
            )
        trace = trace.model_copy(update=update)
        self.turn += 1
        self.last_trace = trace
        self.sink.record(trace)


def wrap(
    builder: Any,
    recorder_or_dir: Any,
    session_id: str | None = None,
    *,
    clock: Callable[[], datetime] | None = None,
) -> HelloAgentsCapture:
    """Wrap a real ``hello_agents`` ``ContextBuilder`` so each build() writes a trace.

    ``recorder_or_dir`` is anything with ``record(trace)`` (a ``ctxcore.capture.recorder.Recorder``)
    or a folder, where traces are appended to ``hello-agents.jsonl`` (through
    ``ctxcore.capture.recorder.Recorder`` when it is available). ``session_id`` defaults to the
    recorder's, else ``"default"``.
    """
    if not callable(getattr(builder, "build", None)) or not hasattr(builder, "config"):
        from ctxcore.errors import InputError

        raise InputError(
            f"wrap() expects a hello_agents ContextBuilder, got {type(builder).__name__}; "
            "pass the builder instance your agent uses"
        )
    sid = session_id or getattr(recorder_or_dir, "session_id", None) or "default"
    return HelloAgentsCapture(builder, _sink(recorder_or_dir, sid), sid, clock)
