"""Import serialized LangChain / LangGraph messages as a ctxscope trace.

A LangGraph agent's state (``{"messages": [...]}``, what a checkpoint or a ``values``
stream chunk holds) is the context its next model call starts from. Three serialized
shapes of a message are read, alone or mixed:

- the ``lc`` constructor form of ``dumpd``/``dumps`` (``{"lc": 1, "type": "constructor",
  "id": [..., "HumanMessage"], "kwargs": {...}}``, ``*Chunk`` classes included);
- ``messages_to_dict`` output (``{"type": "human", "data": {...}}``);
- plain dicts with a ``type`` (``human``/``ai``/``system``/``tool``/``function``/``chat``),
  as the LangGraph API returns them.

They are mapped onto the same normalised messages as an OpenAI chat request
(``ctxcore.formats.openai``): ``human`` → user (the last one is the query), ``ai`` →
assistant with its ``tool_calls`` ``[{name, args, id}]``, ``tool``/``function`` → a
``tool:<tool_call_id>`` packet (``status: error`` kept), ``system`` → a system part (or a
developer one, as ``__openai_role__`` says). Content is a string or parts: text; images,
files, audio as placeholder lines recorded in ``metadata.media``; reasoning/thinking (and
``additional_kwargs.reasoning``) as the message's reasoning, kept in metadata, not counted;
provider-native copies of the message's own tool calls are not repeated; any other part →
its JSON kept as text and listed in ``metadata.import.kept_as_text``.

Each AI message's ``usage_metadata`` (or the provider usage in ``response_metadata``) and
model stay in its metadata and in ``metadata.model_calls``: a state spans several calls, so
there is no single outcome. The tool definitions are not part of the messages; where the
provider echoed them (``response_metadata.tools``) they are collected, once per name.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from ctxcore.errors import ImportFormatError
from ctxcore.formats.accounting import Tally
from ctxcore.formats.derive import make_trace, stable_id
from ctxcore.formats.norm import NormMessage, ToolCall, captured_input_from_norm, usage_from_obj
from ctxcore.formats.openai import text_of
from ctxcore.formats.responses import parse_tools, time_from_epoch
from ctxcore.formats.usage import normalize as normalize_usage
from ctxcore.models import Trace

BUILDER_NAME = "import/langchain"
FORMAT = "langchain"

#: Message ``type`` → the chat role it plays.
_ROLES = {
    "human": "user",
    "ai": "assistant",
    "system": "system",
    "tool": "tool",
    "function": "function",
    "chat": "user",  # a ChatMessage names its role; this is the fallback
}
#: ``lc`` class names (without ``Chunk``) → message type.
_CLASSES = {
    "HumanMessage": "human",
    "AIMessage": "ai",
    "SystemMessage": "system",
    "ToolMessage": "tool",
    "FunctionMessage": "function",
    "ChatMessage": "chat",
}
_MEDIA_PARTS = frozenset({"image_url", "image", "file", "audio", "video", "input_audio"})
_REASONING_PARTS = frozenset({"reasoning", "thinking", "redacted_thinking"})
#: Provider-native tool-call parts that repeat the message's ``tool_calls``.
_CALL_PARTS = {"tool_use": "id", "tool_call": "id", "function_call": "call_id"}
#: additional_kwargs keys that repeat what the message already holds.
_REPEATED_KWARGS = frozenset({"tool_calls", "reasoning", "reasoning_content", "__openai_role__"})


def _is_message(obj: Any) -> bool:
    if not isinstance(obj, dict):
        return False
    if obj.get("type") == "constructor" and "lc" in obj and isinstance(obj.get("id"), list):
        return True
    kind = obj.get("type")
    return (
        isinstance(kind, str)
        and kind in _ROLES
        and "role" not in obj
        and ("content" in obj or isinstance(obj.get("data"), dict))
    )


def _messages(data: Any) -> list[Any] | None:
    if isinstance(data, dict) and isinstance(data.get("messages"), list):
        msgs: list[Any] = data["messages"]
        return msgs
    return data if isinstance(data, list) else None


def looks_like(data: Any) -> bool:
    """Whether a JSON value holds serialized LangChain messages (a list or a state)."""
    msgs = _messages(data)
    if not msgs:
        return False
    head = msgs[:50]
    if any(isinstance(m, dict) and m.get("lc") is not None for m in head):
        return any(_is_message(m) for m in head)
    return all(_is_message(m) for m in head)


def _unpack(msg: Any, where: str) -> tuple[str, dict[str, Any]]:
    """A serialized message's type and its fields, whichever of the three shapes it has."""
    if not isinstance(msg, dict):
        raise ImportFormatError(f"{where}: a message must be an object")
    if "lc" in msg:
        if msg.get("type") != "constructor":
            raise ImportFormatError(
                f"{where}: an lc object of type {msg.get('type')!r} is no message "
                "(secrets and unserializable objects cannot be imported)"
            )
        path = msg.get("id")
        cls = path[-1] if isinstance(path, list) and path else None
        kind = _CLASSES.get(cls.removesuffix("Chunk")) if isinstance(cls, str) else None
        if kind is None:
            raise ImportFormatError(f"{where}: {cls!r} is not a LangChain message class")
        kwargs = msg.get("kwargs", {})
        if not isinstance(kwargs, dict):
            raise ImportFormatError(f"{where}.kwargs: expected an object")
        return kind, kwargs
    kind = msg.get("type")
    if not isinstance(kind, str) or kind not in _ROLES:
        raise ImportFormatError(
            f"{where}: unknown message type {kind!r} (expected human/ai/system/tool/function/chat)"
        )
    data = msg.get("data")
    return kind, data if isinstance(data, dict) else msg


def _media(part: dict[str, Any], ptype: str, path: str) -> tuple[str, dict[str, Any]]:
    """A placeholder line for an image, file or audio part, and what it was (no payload)."""
    info: dict[str, Any] = {"type": ptype, "path": path}
    nested = part.get("image_url", part.get("input_audio"))
    url = part.get("url")
    data = part.get("data", part.get("base64"))
    if isinstance(nested, dict):
        url = nested.get("url", url)
        data = nested.get("data", data)
    elif isinstance(nested, str):
        url = nested
    if isinstance(url, str) and url.startswith("data:"):
        info["media_type"] = url[5:].partition(";")[0]
        data, url = url.partition(",")[2], None
    if isinstance(url, str):
        info["url"] = url
    if isinstance(data, str):
        info["bytes"] = len(data) * 3 // 4
    for key in ("mime_type", "file_id", "filename"):
        if isinstance(part.get(key), str):
            info[key] = part[key]
    if part.get("source_type") == "id" and isinstance(part.get("id"), str):
        info["file_id"] = part["id"]
    desc = " ".join(
        str(x)
        for x in (
            info.get("media_type") or info.get("mime_type"),
            f"{info['bytes']:,} bytes" if "bytes" in info else None,
            info.get("url"),
            info.get("filename") or info.get("file_id"),
        )
        if x
    )
    return f"[{ptype}{': ' + desc if desc else ''}]", info


def _reasoning_text(value: Any) -> str:
    """Reasoning as LangChain carries it: a string, ``{"reasoning": ...}``, or an OpenAI
    reasoning item with a ``summary`` list."""
    if isinstance(value, str):
        return value
    if not isinstance(value, dict):
        return ""
    for key in ("reasoning", "thinking", "text"):
        if isinstance(value.get(key), str):
            return str(value[key])
    summary = value.get("summary")
    if isinstance(summary, list):
        return "\n".join(
            str(s.get("text", "")) for s in summary if isinstance(s, dict) and s.get("text")
        )
    return "[redacted thinking]" if value.get("type") == "redacted_thinking" else ""


def _call(obj: Any, where: str) -> ToolCall:
    if not isinstance(obj, dict):
        raise ImportFormatError(f"{where}: a tool call must be an object")
    nested = obj.get("function")
    fn: dict[str, Any] = nested if isinstance(nested, dict) else obj
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise ImportFormatError(f"{where}: a tool call needs a name")
    args = fn.get("args", fn.get("arguments", {}))
    cid = obj.get("id")
    return ToolCall(
        id=str(cid) if isinstance(cid, str | int) and cid != "" else None,
        name=name,
        arguments=args
        if isinstance(args, str)
        else json.dumps(args, ensure_ascii=False, separators=(",", ":")),
    )


def _content(content: Any, where: str, msg: NormMessage, tally: Tally) -> None:
    """Fill a message's text, reasoning and media from its content (string or parts)."""
    if content is None or isinstance(content, str):
        msg.text = content or ""
        return
    if not isinstance(content, list):
        raise ImportFormatError(
            f"{where}.content: expected a string or a list of parts, got {type(content).__name__}"
        )
    call_ids = {c.id for c in msg.tool_calls}
    texts: list[str] = []
    reasoning: list[str] = []
    for j, part in enumerate(content):
        path = f"{where}.content[{j}]"
        if isinstance(part, str):
            texts.append(part)
            continue
        ptype = part.get("type", "text") if isinstance(part, dict) else None
        if not isinstance(part, dict) or not isinstance(ptype, str):
            texts.append(tally.keep_unknown(path, part))
        elif ptype == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif ptype in _MEDIA_PARTS:
            line, info = _media(part, ptype, path)
            texts.append(line)
            msg.media.append(info)
            tally.add("media")
        elif ptype in _REASONING_PARTS:
            reasoning.append(_reasoning_text(part))
        elif ptype in _CALL_PARTS and text_of(part.get(_CALL_PARTS[ptype])) in call_ids:
            continue  # the provider's copy of a call that tool_calls already holds
        else:
            texts.append(tally.keep_unknown(path, part))
    msg.text = "\n".join(texts)
    msg.reasoning = "\n".join(r for r in reasoning if r)


def normalize(
    messages: list[Any], tally: Tally
) -> tuple[list[NormMessage], list[dict[str, Any]], list[dict[str, Any]]]:
    """Normalised messages, the model calls the AI messages record, and the tool
    definitions their providers echoed (``response_metadata.tools``, in order)."""
    out: list[NormMessage] = []
    calls: list[dict[str, Any]] = []
    tools: list[dict[str, Any]] = []
    for i, raw in enumerate(messages):
        where = f"messages[{i}]"
        kind, fields = _unpack(raw, where)
        extra_kw = fields.get("additional_kwargs")
        akw: dict[str, Any] = extra_kw if isinstance(extra_kw, dict) else {}
        msg = NormMessage(index=i, role=_role(kind, fields, akw), text="")
        tally.add("messages")
        if msg.role in ("system", "developer"):
            tally.add("system_parts")
        if kind == "ai":
            _ai_calls(msg, fields, akw, where, tally)
        _content(fields.get("content"), where, msg, tally)
        extra_reasoning = _reasoning_text(akw.get("reasoning") or akw.get("reasoning_content"))
        if extra_reasoning:
            msg.reasoning = "\n".join(r for r in (extra_reasoning, msg.reasoning) if r)
        if msg.role in ("tool", "function"):
            _tool_result(msg, fields)
            tally.add("tool_results")
        _side_fields(msg, fields, akw)
        if kind == "ai":
            call = _model_call(fields, msg)
            if call:
                calls.append(call)
            meta = fields.get("response_metadata")
            echoed = meta.get("tools") if isinstance(meta, dict) else None
            if isinstance(echoed, list):
                tools.extend(t for t in echoed if isinstance(t, dict))
        out.append(msg)
    return out, calls, tools


def _role(kind: str, fields: dict[str, Any], akw: dict[str, Any]) -> str:
    """The chat role of a message of this kind (a ChatMessage's own role; a system message
    OpenAI sent as ``developer`` stays one)."""
    own = fields.get("role")
    if kind == "chat" and isinstance(own, str):
        return {"human": "user", "ai": "assistant"}.get(own, own)
    if kind == "system" and akw.get("__openai_role__") == "developer":
        return "developer"
    return _ROLES[kind]


def _ai_calls(
    msg: NormMessage, fields: dict[str, Any], akw: dict[str, Any], where: str, tally: Tally
) -> None:
    """An AI message's tool calls (older messages keep only OpenAI's raw calls, or one
    legacy ``function_call``), and the invalid ones kept aside."""
    listed = fields.get("tool_calls") or []
    if not isinstance(listed, list):
        raise ImportFormatError(f"{where}.tool_calls: expected a list")
    if not listed and isinstance(akw.get("tool_calls"), list):
        listed = akw["tool_calls"]
    msg.tool_calls = [_call(c, f"{where}.tool_calls[{k}]") for k, c in enumerate(listed)]
    if not msg.tool_calls and isinstance(akw.get("function_call"), dict):
        msg.tool_calls = [_call(akw["function_call"], f"{where}.function_call")]
    tally.add("tool_calls", len(msg.tool_calls))
    invalid = fields.get("invalid_tool_calls")
    if isinstance(invalid, list) and invalid:
        msg.extra["invalid_tool_calls"] = invalid


def _tool_result(msg: NormMessage, fields: dict[str, Any]) -> None:
    """A tool message's call id, error status and whether it had an artifact."""
    tcid = fields.get("tool_call_id")
    msg.tool_call_id = str(tcid) if isinstance(tcid, str | int) and tcid != "" else None
    if fields.get("status") == "error":
        msg.extra["is_error"] = True
    if fields.get("artifact") is not None:
        msg.extra["has_artifact"] = True  # kept by LangChain, never sent to the model


def _side_fields(msg: NormMessage, fields: dict[str, Any], akw: dict[str, Any]) -> None:
    """The message's name, its id, and the provider kwargs not read elsewhere."""
    if isinstance(fields.get("name"), str):
        msg.name = fields["name"]
    if isinstance(fields.get("id"), str):
        msg.extra["source_id"] = fields["id"]
    rest = {k: v for k, v in akw.items() if k not in _REPEATED_KWARGS}
    if rest:
        msg.extra["additional_kwargs"] = rest


def _model_call(fields: dict[str, Any], msg: NormMessage) -> dict[str, Any]:
    """What an AI message says about the call that produced it: model, usage, time."""
    raw = fields.get("response_metadata")
    meta: dict[str, Any] = raw if isinstance(raw, dict) else {}
    normalized = usage_from_obj(fields.get("usage_metadata"))
    usage = normalized or usage_from_obj(meta.get("usage"))
    call: dict[str, Any] = {}
    model = meta.get("model_name", meta.get("model"))
    if isinstance(model, str):
        call["model"] = model
    if usage:
        call["usage"] = usage
    # LangChain's own usage_metadata has one meaning; a provider's raw usage has its own
    tokens = normalize_usage("langchain", normalized) if normalized else None
    if tokens is not None:
        call["tokens"] = tokens.model_dump(exclude_none=True)
    for key in ("finish_reason", "stop_reason", "status"):
        if isinstance(meta.get(key), str):
            call[key] = meta[key]
            break
    created = time_from_epoch(meta.get("created_at"))
    if created is not None:
        call["created_at"] = created
    if call:
        msg.extra.update({k: v for k, v in call.items() if k != "created_at"})
        call = {"message": f"msg-{msg.index}", **call}
    return call


def _unique_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each tool once (every AI message echoes the same list), in first-seen order."""
    seen: dict[str, dict[str, Any]] = {}
    for tool in tools:
        nested = tool.get("function")
        fn: dict[str, Any] = nested if isinstance(nested, dict) else tool
        key = text_of(fn.get("name") or tool.get("type"))
        seen.setdefault(key, tool)
    return list(seen.values())


def trace_from_messages(
    data: Any,
    *,
    session_id: str | None = None,
    turn: int = 0,
    now: datetime | None = None,
    default_now: datetime | None = None,
) -> Trace:
    """A list of serialized messages, or a state holding one, → a trace."""
    messages = _messages(data)
    if messages is None:
        raise ImportFormatError(
            "LangChain messages come as a list or a state {'messages': [...]}; got "
            + type(data).__name__
        )
    tally = Tally(FORMAT)
    norm, calls, echoed = normalize(messages, tally)
    declared = data.get("tools") if isinstance(data, dict) else None
    tools = parse_tools(
        _unique_tools([*(declared if isinstance(declared, list) else []), *echoed]), tally
    )
    times = [c["created_at"] for c in calls if "created_at" in c]
    when = now or (max(times) if times else None) or default_now or datetime.now(UTC)
    inp, flat = captured_input_from_norm(norm, tools=tools, now=when)
    meta: dict[str, Any] = {"import": tally.to_metadata()}
    if calls:
        meta["model_calls"] = [{k: v for k, v in c.items() if k != "created_at"} for c in calls]
    if isinstance(data, dict):
        others = sorted(k for k in data if k not in ("messages", "tools"))
        if others:
            meta["state_keys"] = others  # the graph's other channels, not sent to the model
    models = [c["model"] for c in calls if isinstance(c.get("model"), str)]
    return make_trace(
        inp,
        flat,
        builder=BUILDER_NAME,
        model=models[-1] if models else None,
        trace_id=stable_id(BUILDER_NAME, messages),
        session_id=session_id or "import",
        turn=turn,
        created_at=when,
        metadata=meta,
    )


def traces_from_obj(
    data: Any, *, session_id: str | None = None, default_now: datetime | None = None
) -> list[Trace]:
    """One trace for a list of messages or a state."""
    return [trace_from_messages(data, session_id=session_id, default_now=default_now)]


def read(data: Any, *, where: str, session_id: str, default_now: datetime | None) -> list[Trace]:
    """The LangChain format's reader (``registry.Reader``)."""
    return traces_from_obj(data, session_id=session_id, default_now=default_now)


__all__ = ["FORMAT", "looks_like", "normalize", "read", "trace_from_messages", "traces_from_obj"]
