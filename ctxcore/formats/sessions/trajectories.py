"""SWE-agent and mini-swe-agent trajectories, one trace per model call (turn = step).

The messages come from ``ctxcore.formats.transcripts`` (the parsers the demo sessions use):
every assistant message is one model call, and the call's context is what came before it.

- SWE-agent ``.traj``: when its ``trajectory`` steps keep the messages the model saw
  (``query``, or ``messages``, which SWE-agent writes after the step, its own reply last),
  those are each call's context: recorded, with the history processors' work in them (old
  outputs elided). Otherwise the context is the ``history`` before the call: reconstructed,
  without what the processors removed.
- mini-swe-agent (``messages``, or a bare message list): the bash block in an assistant
  message is its tool call, the next user message its result; ``extra.response`` keeps each
  call's usage, model and time.

Neither records the tool definitions; SWE-agent records no usage per call (``info.
model_stats`` has the run's totals, kept in the metadata).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from ctxcore.formats.accounting import Tally
from ctxcore.formats.norm import usage_from_obj
from ctxcore.formats.openai import normalize_message
from ctxcore.formats.sessions.calls import Call, Segment
from ctxcore.formats.transcripts import (
    Conversation,
    OpenAIMessage,
    mini_swe_conversation,
    sweagent_conversation,
    sweagent_messages,
)

SWE_AGENT = "swe-agent"
MINI_SWE_AGENT = "mini-swe-agent"


def _messages_like(items: Any) -> bool:
    return (
        isinstance(items, list)
        and bool(items)
        and all(isinstance(m, dict) and "role" in m for m in items[:50])
    )


def detect(data: Any) -> Literal["swe-agent", "mini-swe-agent"] | None:
    """Which trajectory format a parsed JSON value is, if any."""
    if isinstance(data, dict):
        fmt = data.get("trajectory_format")
        if isinstance(fmt, str) and fmt.startswith("mini-swe-agent"):
            return "mini-swe-agent"
        if _messages_like(data.get("history")) and "messages" not in data:
            return "swe-agent"
        info = data.get("info")
        if _messages_like(data.get("messages")) and isinstance(info, dict):
            if "mini_version" in info:
                return "mini-swe-agent"
    if _messages_like(data):
        # mini-swe-agent saves a bare list: observations come back as <returncode> messages
        for m in data[:50]:
            content = m.get("content")
            if m.get("role") == "user" and isinstance(content, str):
                if content.lstrip().startswith("<returncode>"):
                    return "mini-swe-agent"
            if m.get("role") == "assistant" and isinstance(content, str):
                if "```mswea_bash_command" in content:
                    return "mini-swe-agent"
    return None


def is_swe_agent(data: Any) -> bool:
    """Whether a JSON value is a SWE-agent trajectory (the registry's detector)."""
    return detect(data) == SWE_AGENT


def is_mini_swe_agent(data: Any) -> bool:
    """Whether a JSON value is a mini-swe-agent trajectory (the registry's detector)."""
    return detect(data) == MINI_SWE_AGENT


class _Segments:
    """One segment per message; a message equal to the one at the same place in the
    previous context is the same segment (so calls share it)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.prev: list[tuple[OpenAIMessage, Segment]] = []

    def of(self, messages: list[OpenAIMessage]) -> list[Segment]:
        out: list[tuple[OpenAIMessage, Segment]] = []
        for i, m in enumerate(messages):
            if i < len(self.prev) and self.prev[i][0] == m:
                out.append(self.prev[i])
                continue
            tally = Tally("")
            norm = normalize_message(m, i, tally)
            if isinstance(m.get("is_error"), bool) and m["is_error"]:
                norm.extra["is_error"] = True
            seg = Segment(
                label=f"{self.name} message {i}",
                norm=[norm],
                counts=dict(tally.counts),
                unknown=list(tally.unknown),
            )
            seg.entries()
            out.append((m, seg))
        self.prev = out
        return [seg for _, seg in out]


def _time(value: Any) -> datetime | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(float(value), tz=UTC)
        except (OverflowError, OSError, ValueError):
            return None
    return None


def _calls(msg: OpenAIMessage | None) -> list[dict[str, Any]]:
    """The tool calls of a reply, for ``metadata.session_log.tool_calls``."""
    out = []
    for c in (msg or {}).get("tool_calls") or []:
        fn = c.get("function") if isinstance(c, dict) else None
        if isinstance(fn, dict):
            out.append({"id": c.get("id"), "name": fn.get("name")})
    return out


def _output(msg: OpenAIMessage) -> str | None:
    lines = [str(msg.get("content") or "")] if msg.get("content") else []
    for c in msg.get("tool_calls") or []:
        fn = c.get("function") if isinstance(c, dict) else None
        if isinstance(fn, dict):
            lines.append(f"{fn.get('name')}({fn.get('arguments')})")
    return "\n".join(lines) or None


def _trailing(conv_messages: list[OpenAIMessage], last_call: int) -> dict[str, int]:
    after = conv_messages[last_call + 1 :]
    return {
        "messages": len(after),
        "tool_results": sum(1 for m in after if m.get("role") == "tool"),
    }


def calls(data: Any, fmt: str, name: str, session_id: str, now: datetime) -> list[Call]:
    """The model calls of a trajectory, in order."""
    if fmt == MINI_SWE_AGENT:
        return _mini(data, name, session_id, now)
    return _swe(data, name, session_id, now)


def _recorded_steps(data: Any) -> list[dict[str, Any]] | None:
    """The trajectory's steps, when every one records the messages its call saw."""
    steps = data.get("trajectory") if isinstance(data, dict) else None
    if not isinstance(steps, list) or not steps:
        return None
    if all(
        isinstance(st, dict)
        and (_messages_like(st.get("query")) or _messages_like(st.get("messages")))
        for st in steps
    ):
        return steps
    return None


def _step_call(
    st: dict[str, Any],
    k: int,
    name: str,
    session_id: str,
    now: datetime,
    segs: _Segments,
    base_meta: dict[str, Any],
) -> Call:
    """One recorded step as a call: its ``query`` is what the model saw; ``messages``,
    written after the step, hold its own reply and what followed, which are not input."""
    queried = _messages_like(st.get("query"))
    raw: list[Any] = st["query"] if queried else st["messages"]  # ``_recorded_steps`` checked
    msgs, _ = sweagent_messages(raw, name, f"trajectory[{k}].messages")
    reply = None
    if not queried:
        last = max((i for i, m in enumerate(msgs) if m["role"] == "assistant"), default=None)
        reply = msgs[last] if last is not None else None
        msgs = msgs[:last] if last is not None else msgs
    resp = st.get("response")
    output = resp if isinstance(resp, str) and resp else (_output(reply) if reply else None)
    return Call(
        session_id=session_id,
        turn=k,
        key=f"step-{k}",
        context=segs.of(msgs),
        created_at=now,
        output=output,
        metadata={"session_log": {**base_meta, "step": k, "tool_calls": _calls(reply)}},
        recorded=["system prompt", "messages as the model saw them (trajectory)"],
        reconstructed=["tool definitions", "usage per call"],
        warnings=[
            "reconstructed from a SWE-agent trajectory, which does not record the "
            "tool definitions or each call's usage: this input lacks them"
        ],
    )


def _history_calls(
    conv: Conversation, session_id: str, now: datetime, segs: _Segments, base_meta: dict[str, Any]
) -> list[Call]:
    """Calls read from the history alone: each assistant message is a call whose context
    is the history before it."""
    msgs = conv.messages
    texted = bool(conv.meta.get("synthetic_call_ids"))
    out: list[Call] = []
    for k, a in enumerate(conv.assistant_indices()):
        out.append(
            Call(
                session_id=session_id,
                turn=k,
                key=f"message-{a}",
                context=segs.of(msgs[:a]),
                created_at=now,
                output=_output(msgs[a]),
                metadata={
                    "session_log": {**base_meta, "message": a, "tool_calls": _calls(msgs[a])}
                },
                recorded=["system prompt", "messages"],
                reconstructed=[
                    "tool definitions",
                    "usage per call",
                    "context per call (the history before it)",
                ]
                + (["tool calls (the action written in the reply)"] if texted else []),
                warnings=[
                    "reconstructed from a SWE-agent history: each call's context is the history "
                    "before it (what SWE-agent's history processors elided is back in), and the "
                    "tool definitions and each call's usage are not recorded"
                ],
            )
        )
    return out


def _swe(data: Any, name: str, session_id: str, now: datetime) -> list[Call]:
    """A SWE-agent trajectory's calls: from its recorded steps when every step has the
    messages its call saw, else from its history."""
    conv = sweagent_conversation(data, name, name)
    stats = data.get("info", {}).get("model_stats") if isinstance(data.get("info"), dict) else None
    base_meta: dict[str, Any] = {"file": name}
    if isinstance(stats, dict):
        base_meta["model_stats"] = stats
    segs = _Segments(name)
    steps = _recorded_steps(data)
    if steps is not None:
        out = [
            _step_call(st, k, name, session_id, now, segs, base_meta) for k, st in enumerate(steps)
        ]
    else:
        out = _history_calls(conv, session_id, now, segs, base_meta)
    _mark_trailing(out, conv.messages, conv.assistant_indices())
    return out


def _mini(data: Any, name: str, session_id: str, now: datetime) -> list[Call]:
    conv: Conversation = mini_swe_conversation(data, name, name)
    raw = data.get("messages") if isinstance(data, dict) else data
    instance = data.get("instance_id") if isinstance(data, dict) else None
    info = data.get("info") if isinstance(data, dict) else None
    model_name = None
    if isinstance(info, dict):
        cfg = info.get("config")
        model_cfg = cfg.get("model") if isinstance(cfg, dict) else None
        if isinstance(model_cfg, dict) and isinstance(model_cfg.get("model_name"), str):
            model_name = model_cfg["model_name"]
    sid = instance if isinstance(instance, str) and instance else session_id
    msgs = conv.messages
    segs = _Segments(name)
    out: list[Call] = []
    steps_at = conv.assistant_indices()
    for k, a in enumerate(steps_at):
        extra = raw[a].get("extra") if isinstance(raw, list) and a < len(raw) else None
        response = extra.get("response") if isinstance(extra, dict) else None
        response = response if isinstance(response, dict) else {}
        model = response.get("model") if isinstance(response.get("model"), str) else model_name
        usage = usage_from_obj(response.get("usage"))
        log: dict[str, Any] = {"file": name, "message": a, "tool_calls": _calls(msgs[a])}
        if isinstance(response.get("id"), str):
            log["response_id"] = response["id"]
        out.append(
            Call(
                session_id=sid,
                turn=k,
                key=f"message-{a}",
                context=segs.of(msgs[:a]),
                created_at=_time(response.get("created")) or now,
                model=model,
                usage=usage,
                usage_mapping="openai-chat",
                output=_output(msgs[a]),
                metadata={"session_log": log},
                recorded=["system prompt", "messages"] + (["usage"] if usage else []),
                reconstructed=["tool calls (the bash block written in the reply)"]
                + ([] if usage else ["usage per call"]),
                warnings=[
                    "reconstructed from a mini-swe-agent trajectory: each reply's bash block "
                    "is shown as a tool call and the next message as its result"
                ],
            )
        )
    _mark_trailing(out, msgs, steps_at)
    return out


def _mark_trailing(out: list[Call], msgs: list[OpenAIMessage], steps_at: list[int]) -> None:
    """What the log holds after its last call (seen by no call) goes in that call's metadata."""
    if out and steps_at:
        tail = _trailing(msgs, steps_at[-1])
        if tail["messages"]:
            out[-1].metadata["session_log"]["after_last_call"] = tail


__all__ = ["MINI_SWE_AGENT", "SWE_AGENT", "calls", "detect"]
