"""OpenHands event trajectories (the JSON list of actions and observations), one trace per call.

Every agent action is the output of a model call: its ``tool_call_metadata.model_response`` is
the LLM's reply (its text, its tool calls, its usage, LiteLLM's ``prompt_tokens`` including
cached tokens). One reply with several tool calls gives several actions with the same
response id, and each observation repeats its action's metadata: a call is a distinct response
id (an agent message without metadata is a call of its own, with no usage recorded). The
call's context is the events before it: user messages, the agent's earlier replies and tool
calls, and the observations that answer them (by ``tool_call_id``). A ``system`` action
(newer OpenHands) carries the system prompt and the tools; older trajectories have neither,
and their traces say so.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ctxcore.errors import ImportFormatError
from ctxcore.formats.accounting import Tally
from ctxcore.formats.norm import NormMessage, ToolCall, usage_from_obj
from ctxcore.formats.openai import parse_tools
from ctxcore.formats.sessions.calls import Call, Segment
from ctxcore.formats.sessions.lines import parse_time, unexpected
from ctxcore.models import ToolDef

FORMAT = "openhands"
#: Events the agent controller records for itself; the model never sees them.
_NOT_SENT = frozenset({"agent_state_changed", "change_agent_state", "null", "recall"})


def looks_like(data: Any) -> bool:
    """Whether a JSON value is an OpenHands event list (or ``{"history": [events]}``)."""
    events = data.get("history") if isinstance(data, dict) else data
    if not isinstance(events, list) or not events:
        return False
    head = events[:20]
    dicts = [e for e in head if isinstance(e, dict)]
    # a broken event among them is that event's error, not another format
    return len(dicts) * 2 > len(head) and all(
        "source" in e and ("action" in e or "observation" in e) for e in dicts
    )


def _response(event: dict[str, Any]) -> dict[str, Any] | None:
    meta = event.get("tool_call_metadata")
    resp = meta.get("model_response") if isinstance(meta, dict) else None
    return resp if isinstance(resp, dict) else None


def _reply(resp: dict[str, Any]) -> dict[str, Any]:
    choices = resp.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    msg = first.get("message") if isinstance(first, dict) else None
    return msg if isinstance(msg, dict) else {}


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def calls(data: Any, name: str, session_id: str, now: datetime) -> list[Call]:
    """The model calls of a trajectory, in order."""
    events = data.get("history") if isinstance(data, dict) else data
    if not looks_like(data) or not isinstance(events, list):
        raise ImportFormatError(f"{name}: not an OpenHands trajectory (a list of events)")
    context: list[Segment] = []
    out: list[Call] = []
    tools: list[ToolDef] = []
    has_system = False
    seen: set[str] = set()  # response ids already in the context
    not_sent: dict[str, int] = {}
    errors: list[str] = []
    reported = 0
    for i, e in enumerate(events):
        where = f"events[{i}]"
        try:
            call, seg, tools_now = _event(e, i, seen, not_sent)
            if call is not None:
                out.append(
                    _call(e, i, call, context, tools, has_system, name, session_id, now, len(out))
                )
                out[-1].skipped = errors[reported:]
                reported = len(errors)
            if tools_now is not None:
                tools, has_system = tools_now, True
            if seg is not None:
                seg.entries()
                context.append(seg)
        except ImportFormatError as exc:
            errors.append(f"{name}: {where}: {exc}")
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            errors.append(f"{name}: {where}: {unexpected(exc)}")
    if out and errors[reported:]:
        out[-1].skipped = [*out[-1].skipped, *errors[reported:]]
    if not out and errors:
        raise ImportFormatError(f"{errors[0]} (no model call could be read)")
    if not_sent:
        for c in out:
            c.metadata["session_log"]["not_sent_to_the_model"] = dict(not_sent)
    return out


def _event(
    e: Any, i: int, seen: set[str], not_sent: dict[str, int]
) -> tuple[dict[str, Any] | None, Segment | None, list[ToolDef] | None]:
    """One event: the reply it starts a call with (``{}`` for an agent message without
    one), the messages it adds to the context, and the tools a system event declares."""
    if not isinstance(e, dict):
        raise ImportFormatError(f"an event is an object, got {type(e).__name__}")
    where = f"events[{i}]"
    source = e.get("source")
    action, obs = e.get("action"), e.get("observation")
    resp = _response(e)
    rid = resp.get("id") if resp is not None and isinstance(resp.get("id"), str) else None
    tally = Tally(FORMAT)
    norm: list[NormMessage] = []
    tools: list[ToolDef] | None = None
    is_call = (source == "agent" and isinstance(action, str) and action not in _NOT_SENT) and not (
        rid is not None and rid in seen
    )
    if isinstance(action, str) and action == "system":
        raw = e.get("args")
        args: dict[str, Any] = raw if isinstance(raw, dict) else {}
        text = _text(args.get("content") or e.get("message"))
        norm.append(NormMessage(index=i, role="system", text=text, id=f"item-{i}"))
        tally.add("system_parts")
        tools = parse_tools(args.get("tools"))
    elif (isinstance(action, str) and action in _NOT_SENT) or (
        isinstance(obs, str) and obs in _NOT_SENT
    ):
        kind = str(action or obs)
        not_sent[kind] = not_sent.get(kind, 0) + 1
    elif isinstance(action, str):
        norm.extend(_action_messages(e, i, resp, rid, seen, tally, where))
    elif isinstance(obs, str):
        norm.append(_observation(e, i, tally))
    seg = None
    if norm:
        seg = Segment(
            label=where, norm=norm, counts=dict(tally.counts), unknown=list(tally.unknown)
        )
    call = (resp if resp is not None else {}) if is_call else None
    return call, seg, tools


def _action_messages(
    e: dict[str, Any],
    i: int,
    resp: dict[str, Any] | None,
    rid: str | None,
    seen: set[str],
    tally: Tally,
    where: str,
) -> list[NormMessage]:
    raw_args = e.get("args")
    args: dict[str, Any] = raw_args if isinstance(raw_args, dict) else {}
    source = e.get("source")
    if e.get("action") == "message" and resp is None:
        # what the user (or the agent, without a tool call) said
        role = "user" if source == "user" else "assistant"
        msg = NormMessage(index=i, role=role, text=_text(args.get("content", e.get("message"))))
        for url in args.get("image_urls") or []:
            msg.media.append({"type": "image_url", "path": f"{where}.args.image_urls"})
            msg.text += f"\n[image_url: {url}]"
            tally.add("media")
        tally.add("messages")
        return [msg]
    if resp is None:
        # an agent action written without the model's reply (older trajectories)
        return [
            NormMessage(index=i, role="assistant", text=_text(e.get("message")), id=f"item-{i}")
        ]
    if rid is not None and rid in seen:
        return []  # one more tool call of a reply already in the context
    if rid is not None:
        seen.add(rid)
    reply = _reply(resp)
    msg = NormMessage(index=i, role="assistant", text=_text(reply.get("content")), id=f"item-{i}")
    for k, c in enumerate(reply.get("tool_calls") or []):
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ImportFormatError(f"{where}.tool_call_metadata: tool_calls[{k}] has no name")
        cid = c.get("id")
        msg.tool_calls.append(
            ToolCall(
                id=str(cid) if cid else None, name=fn["name"], arguments=_text(fn.get("arguments"))
            )
        )
    # one action per tool call, and the first one's reply lists them all (parallel calls)
    tally.add("tool_calls", len(msg.tool_calls))
    return [msg]


def _observation(e: dict[str, Any], i: int, tally: Tally) -> NormMessage:
    meta = e.get("tool_call_metadata")
    content = _text(e.get("content", e.get("message")))
    if isinstance(meta, dict) and meta.get("tool_call_id"):
        tally.add("tool_results")
        name = meta.get("function_name")
        return NormMessage(
            index=i,
            role="tool",
            text=content,
            tool_call_id=str(meta["tool_call_id"]),
            name=name if isinstance(name, str) else None,
            id=f"item-{i}",
        )
    # an observation no tool call asked for (an error, a user's rejection): the model gets
    # it as a user message
    return NormMessage(index=i, role="user", text=content, id=f"item-{i}")


def _call(
    e: dict[str, Any],
    i: int,
    reply_obj: dict[str, Any],
    context: list[Segment],
    tools: list[ToolDef],
    has_system: bool,
    name: str,
    session_id: str,
    now: datetime,
    turn: int,
) -> Call:
    resp = reply_obj or None
    reply = _reply(resp) if resp is not None else {}
    lines = [_text(reply.get("content"))] if reply.get("content") else []
    calls: list[dict[str, Any]] = []
    for c in reply.get("tool_calls") or []:
        fn = c.get("function") if isinstance(c, dict) else None
        if isinstance(fn, dict):
            lines.append(f"{fn.get('name')}({_text(fn.get('arguments'))})")
            calls.append({"id": c.get("id"), "name": fn.get("name")})
    if resp is None:
        args = e.get("args")
        content = args.get("content") if isinstance(args, dict) else None
        text = _text(content or e.get("message"))
        lines = [text] if text else []
    model = resp.get("model") if resp is not None else None
    log: dict[str, Any] = {"file": name, "event": i, "action": e.get("action")}
    if resp is not None and isinstance(resp.get("id"), str):
        log["response_id"] = resp["id"]
    if calls:
        log["tool_calls"] = calls
    usage = usage_from_obj(resp.get("usage")) if resp is not None else {}
    missing = ([] if has_system else ["system prompt", "tool definitions"]) + (
        [] if usage else ["usage of this call"]
    )
    return Call(
        session_id=session_id,
        turn=turn,
        key=f"event-{i}",
        context=list(context),
        created_at=parse_time(e.get("timestamp")) or now,
        model=model if isinstance(model, str) else None,
        usage=usage,
        usage_mapping="openai-chat",
        output="\n".join(lines) if lines else None,
        tools=list(tools),
        metadata={"session_log": log},
        recorded=["messages", "tool calls and results"]
        + (["system prompt", "tool definitions"] if has_system else [])
        + (["usage", "model"] if usage else []),
        reconstructed=missing,
        warnings=[
            "reconstructed from an OpenHands trajectory, which does not record "
            + " or ".join(missing)
            + ": this input lacks them"
        ]
        if missing
        else [],
    )


__all__ = ["FORMAT", "calls", "looks_like"]
