"""A demo session as data: its turns, their verdicts, and the helpers that read real runs.

``ctxcore.demo.sessions`` describes each demo session with these; ``ctxcore.demo.build``
turns them into traces. See ``ctxcore.demo.build`` for what the demo is and why.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from ctxcore.formats.transcripts import Conversation
from ctxcore.models import CapturedInput, Config, Packet, Trace

#: the synthetic clock for sources without timestamps: a fixed start, one minute per turn.
SYNTHETIC_START = datetime(2026, 1, 12, 9, 0, tzinfo=UTC)
_NAMESPACE = uuid.UUID("6f1c3c0e-6a52-4f5e-9d0e-5c7a0b1d2e3f")

Verdict = Literal["good", "bad", "unknown"]


@dataclass(frozen=True)
class DemoTurn:
    """One model call of a session: the input to build and what the real agent did."""

    step: int
    input: CapturedInput
    config: Config
    output: str
    verdict: Verdict = "good"
    note: str = ""
    tags: tuple[str, ...] = ()
    enrichment: tuple[str, ...] = ()
    #: what the demo knows about the turn that the harness did not tell the builder
    #: (e.g. which tool result is the open failing test run); written to metadata.demo.
    facts: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Session:
    """A demo session: an id, where it comes from, and its turns."""

    id: str
    title: str
    source: str
    clock: str
    turns: list[DemoTurn] = field(default_factory=list)
    judge: Callable[[DemoTurn, Trace], tuple[Verdict, str]] | None = None


# --------------------------------------------------------------------------- helpers


def trace_id_for(session_id: str, turn: int) -> str:
    """A stable id: the same session and turn always get the same trace id."""
    return uuid.uuid5(_NAMESPACE, f"{session_id}#{turn}").hex


def _synthetic(turn: int) -> datetime:
    return SYNTHETIC_START + timedelta(minutes=turn)


def output_of(msg: dict[str, Any]) -> str:
    """The model's answer at a step: its text and its tool calls, as the agent sent them."""
    parts = [msg.get("content") or ""]
    for call in msg.get("tool_calls") or []:
        fn = call["function"]
        parts.append(f"{fn['name']}({fn['arguments']})")
    return "\n".join(p for p in parts if p).strip()


def commands_of(msg: dict[str, Any]) -> dict[str, str]:
    """call id → the command (or file path) of each tool call in an assistant message."""
    out: dict[str, str] = {}
    for call in msg.get("tool_calls") or []:
        try:
            args = json.loads(call["function"]["arguments"])
        except (json.JSONDecodeError, TypeError):
            args = {}
        what = ""
        if isinstance(args, dict):
            what = str(args.get("command") or args.get("filePath") or args.get("path") or "")
        out[call["id"]] = f"{call['function']['name']}: {what}".strip().rstrip(":")
    return out


def message_times(conv: Conversation) -> list[datetime]:
    """A time for every message: the source's own, else the synthetic clock of its step.

    Where the source has times, a message without one takes the previous message's time
    (or the first known time); where it has none, message i of step k gets ``_synthetic(k)``.
    """
    known = [t for t in conv.times if t is not None]
    out: list[datetime] = []
    step = 0
    for m, t in zip(conv.messages, conv.times or [None] * len(conv.messages), strict=True):
        if m.get("role") == "assistant":
            step += 1
        if known:
            out.append(t or (out[-1] if out else known[0]))
        else:
            out.append(_synthetic(step))
    return out


def stamped(inp: CapturedInput, times: list[datetime]) -> CapturedInput:
    """Give history messages and tool packets the time their message was written."""

    def at(mid: str | None) -> datetime | None:
        if mid and mid.startswith("msg-") and mid[4:].isdigit() and int(mid[4:]) < len(times):
            return times[int(mid[4:])]
        return None

    history = [
        m if m.timestamp or at(m.id) is None else m.model_copy(update={"timestamp": at(m.id)})
        for m in inp.history
    ]
    packets = []
    for p in inp.packets:
        idx = p.metadata.get("message_index")
        if p.timestamp is None and isinstance(idx, int) and idx < len(times):
            p = p.model_copy(update={"timestamp": times[idx]})
        packets.append(p)
    return inp.model_copy(update={"history": history, "packets": packets})


def file_views(
    messages: list[dict[str, Any]],
    times: list[datetime],
    path_args: dict[str, str],
    root: str,
) -> list[Packet]:
    """The harness's open-file view: the latest output of each file-reading tool call.

    ``path_args`` maps a tool name to its path argument (``{"read": "filePath"}``). Each file
    becomes one packet ``file:<path relative to root>`` that keeps its id across turns while
    its content follows the latest read; it points back at the call it came from.
    """
    calls: dict[str, tuple[str, str]] = {}  # call id -> (tool, path)
    latest: dict[str, tuple[int, str]] = {}  # path -> (message index, call id)
    for i, m in enumerate(messages):
        for call in m.get("tool_calls") or []:
            name = call["function"]["name"]
            if name not in path_args:
                continue
            try:
                args = json.loads(call["function"]["arguments"])
            except (json.JSONDecodeError, TypeError):
                continue
            path = args.get(path_args[name]) if isinstance(args, dict) else None
            if isinstance(path, str) and path:
                calls[call["id"]] = (name, path.removeprefix(root).lstrip("/"))
        cid = m.get("tool_call_id")
        if m.get("role") == "tool" and cid in calls and m.get("content") and not m.get("is_error"):
            latest[calls[cid][1]] = (i, cid)
    return [
        Packet(
            id=f"file:{path}",
            kind="file",
            content=messages[i]["content"],
            timestamp=times[i],
            metadata={"path": path, "source": f"tool:{cid}", "view": "latest read"},
        )
        for path, (i, cid) in sorted(latest.items(), key=lambda kv: kv[1][0])
    ]


def with_packets(
    inp: CapturedInput,
    extra: list[Packet],
    update: Callable[[Packet], Packet] | None = None,
) -> CapturedInput:
    packets = [update(p) if update else p for p in inp.packets]
    return inp.model_copy(update={"packets": [*extra, *packets]})


def prompt_of(trace: Trace) -> str:
    assert trace.result is not None
    return trace.result.prompt


def status_of(trace: Trace, packet_id: str) -> str:
    """What the build did with a packet or a history message, in a few words.

    Presets name history candidates differently: by message id, ``builder:history:K``
    (K its position in the input's history) or one ``builder:history`` packet for all.
    """
    ids = [packet_id]
    pos = next((k for k, m in enumerate(trace.input.history) if m.id == packet_id), None)
    if pos is not None:
        ids += [f"builder:history:{pos}", "builder:history"]
    for pid in ids:
        d = _decision(trace, pid)
        if d is not None:
            label = "" if pid == packet_id else f"as {pid}: "
            return f"{label}{d.status.value} ({d.reason.value})"
    return "not a candidate"


def crowded_out(turn: DemoTurn, trace: Trace, packet_id: str) -> str:
    """Why a packet lost its place: what was pinned instead, and what outranked it."""
    assert trace.result is not None
    lost = _decision(trace, packet_id)
    if lost is None:
        return ""
    packets = {p.id: p for p in turn.input.packets}
    out = ""
    pinned = [
        d
        for d in trace.result.decisions
        if d.reason.value == "MUST_KEEP" and d.kind == "tool_result" and d.packet_id != packet_id
    ]
    if pinned:
        p = packets.get(pinned[-1].packet_id)
        what = p.metadata.get("command", "") if p else ""
        out += (
            f" The preset pinned {pinned[-1].packet_id} ({what}, exit code "
            f"{p.metadata.get('returncode') if p else '?'}) as the latest failure instead."
        )
    if lost.score is not None and lost.reason.value in ("NO_ROOM", "AFTER_BREAK"):
        ahead = [
            d
            for d in trace.result.decisions
            if d.kind == "tool_result"
            and d.status.value in ("kept", "truncated")
            and d.score is not None
            and d.score > lost.score
        ]
        if ahead:
            big = max(ahead, key=lambda d: d.tokens_after)
            p = packets.get(big.packet_id)
            what = p.metadata.get("command", "") if p else ""
            out += (
                f" {big.packet_id} ({what}, {big.tokens_after:,} tokens, score "
                f"{big.score:.2f} vs {lost.score:.2f}) outranked it and took the room."
            )
    return out


def good_note(trace: Trace) -> str:
    assert trace.result is not None
    r = trace.result.report
    return (
        f"Nothing the step needed was missing: {len(r.included)} kept, "
        f"{len(r.summarized)} summarized, {len(r.dropped)} left out, "
        f"{r.used} of {r.budget} tokens."
    )


def _decision(trace: Trace, packet_id: str) -> Any:
    assert trace.result is not None
    return next((d for d in trace.result.decisions if d.packet_id == packet_id), None)
