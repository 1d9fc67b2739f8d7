"""Import Anthropic Messages API requests (``POST /v1/messages``) as ctxscope traces.

What Claude Code, the Anthropic SDKs and most Claude agents send. The request is mapped onto
the same normalised messages as an OpenAI chat request (``ctxcore.formats.openai``), so a
request becomes the same captured input whichever API carried it:

- ``system``, a string or a list of text blocks → the system instructions (one system part
  per block; a block's ``cache_control`` mark is kept in the trace's import metadata);
- ``text`` blocks → the message text; ``thinking`` / ``redacted_thinking`` → the message's
  reasoning (kept in metadata, not counted as context: the API drops earlier turns' thinking);
- ``tool_use`` → a tool call of the assistant message (id, name, JSON input);
- ``tool_result`` (content a string or a list of blocks, ``is_error`` kept) inside a user
  message → a tool message, i.e. a ``tool:<tool_use_id>`` packet; any text beside the results
  stays a user message after them;
- ``image`` / ``document`` → a placeholder line naming the media type and size (documents of
  source type ``text`` keep their text), recorded in the message's ``metadata.media``;
- any other block (``server_tool_use``, ``web_search_tool_result``, ``mcp_tool_use``,
  ``container_upload``, …) → its JSON kept as text in its message, and named in
  ``metadata.import.kept_as_text`` (the ``import_loss`` finding);
- ``tools`` (custom tools with ``input_schema``; server tools by ``type``) → the tool
  definitions; ``max_tokens`` → the output reserve; ``metadata.user_id`` → the session.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from ctxcore.errors import ImportFormatError
from ctxcore.formats.accounting import Tally
from ctxcore.formats.derive import each_request, make_trace, stable_id
from ctxcore.formats.openai import (
    NormMessage,
    ToolCall,
    captured_input_from_norm,
    usage_from_obj,
)
from ctxcore.models import ToolDef, Trace

BUILDER_NAME = "import/anthropic"
FORMAT = "anthropic-messages"

#: Block types that only Anthropic requests carry: enough to tell one from an OpenAI request.
_ANTHROPIC_BLOCKS = frozenset(
    {"tool_use", "tool_result", "thinking", "redacted_thinking", "server_tool_use", "document"}
)


def looks_like(data: Any) -> bool:
    """Whether a JSON value is an Anthropic Messages request (not an OpenAI chat request)."""
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        return False
    if "anthropic_version" in data or isinstance(data.get("system"), list):
        return True
    model = data.get("model")
    if isinstance(model, str) and "claude" in model.lower():
        return True
    for msg in data["messages"][:50]:
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, list):
            for block in content:
                btype = block.get("type") if isinstance(block, dict) else None
                # Mistral's thinking chunk holds a list of text chunks, Anthropic's a string
                mistral = btype == "thinking" and isinstance(block.get("thinking"), list)
                if isinstance(btype, str) and btype in _ANTHROPIC_BLOCKS and not mistral:
                    return True
                if (
                    isinstance(block, dict)
                    and block.get("type") == "image"
                    and isinstance(block.get("source"), dict)
                ):
                    return True
    # a top-level system string with no system-role message is Anthropic's shape too
    return isinstance(data.get("system"), str) and not any(
        isinstance(m, dict) and m.get("role") == "system" for m in data["messages"]
    )


def _media(block: dict[str, Any], path: str, tally: Tally) -> tuple[str, dict[str, Any]]:
    """A placeholder line for an image or document, and what it was."""
    kind = str(block.get("type"))
    raw = block.get("source")
    source: dict[str, Any] = raw if isinstance(raw, dict) else {}
    stype = source.get("type")
    info: dict[str, Any] = {"type": kind, "path": path}
    if source.get("media_type"):
        info["media_type"] = source["media_type"]
    if stype == "base64" and isinstance(source.get("data"), str):
        info["bytes"] = len(source["data"]) * 3 // 4
    elif stype == "url" and isinstance(source.get("url"), str):
        info["url"] = source["url"]
    elif stype == "file" and source.get("file_id"):
        info["file_id"] = source["file_id"]
    if block.get("title"):
        info["title"] = block["title"]
    tally.add("media")
    if kind == "document" and stype == "text" and isinstance(source.get("data"), str):
        head = f"[document {block.get('title') or ''}]".replace(" ]", "]")
        return f"{head}\n{source['data']}", info
    desc = " ".join(
        str(x)
        for x in (
            info.get("media_type"),
            f"{info['bytes']:,} bytes" if "bytes" in info else None,
            info.get("url"),
            info.get("title"),
        )
        if x
    )
    return f"[{kind}{': ' + desc if desc else ''}]", info


def _result_text(content: Any, path: str, tally: Tally, media: list[dict[str, Any]]) -> str:
    """A tool_result's content: a string, or blocks (text, images, anything else kept)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return json.dumps(content, ensure_ascii=False)
    texts: list[str] = []
    for j, block in enumerate(content):
        bpath = f"{path}.content[{j}]"
        if isinstance(block, dict) and block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif isinstance(block, dict) and block.get("type") in ("image", "document"):
            line, info = _media(block, bpath, tally)
            texts.append(line)
            media.append(info)
        else:
            texts.append(tally.keep_unknown(bpath, block))
    return "\n".join(texts)


def _cache_mark(block: dict[str, Any], path: str, tally: Tally) -> None:
    if isinstance(block.get("cache_control"), dict):
        tally.cache_control.append(path)


def normalize(request: dict[str, Any], tally: Tally) -> list[NormMessage]:
    """The request's system blocks and messages as normalised messages (tool results split
    out of user messages, in order)."""
    out: list[NormMessage] = []
    system = request.get("system")
    if isinstance(system, str):
        if system:
            out.append(NormMessage(index=-1, role="system", text=system, id="system-0"))
            tally.add("system_parts")
    elif isinstance(system, list):
        for k, block in enumerate(system):
            path = f"system[{k}]"
            if isinstance(block, dict) and block.get("type", "text") == "text":
                text = str(block.get("text", ""))
                _cache_mark(block, path, tally)
            elif isinstance(block, str):
                text = block
            else:
                text = tally.keep_unknown(path, block)
            out.append(NormMessage(index=-1, role="system", text=text, id=f"system-{k}"))
            tally.add("system_parts")
    elif system is not None:
        raise ImportFormatError(
            f"system: expected a string or a list of blocks, got {type(system).__name__}"
        )
    for i, msg in enumerate(request["messages"]):
        out.extend(normalize_message(msg, i, tally))
    return out


def normalize_message(
    msg: Any, index: int, tally: Tally, where: str | None = None
) -> list[NormMessage]:
    """One Messages API message as normalised messages: the tool results it holds first (one
    tool message each, ids ``msg-<index>.<j>``), then its text, reasoning and tool calls.

    ``where`` names the message in errors and kept-as-text paths (default
    ``messages[<index>]``); session logs pass the file line the message came from."""
    i = index
    where = where or f"messages[{i}]"
    if not isinstance(msg, dict):
        raise ImportFormatError(f"{where}: a message must be an object")
    role = msg.get("role")
    if role not in ("user", "assistant"):
        raise ImportFormatError(f"{where}: role must be 'user' or 'assistant', got {role!r}")
    tally.add("messages")
    content = msg.get("content")
    if isinstance(content, str):
        return [NormMessage(index=i, role=role, text=content)]
    if not isinstance(content, list):
        raise ImportFormatError(
            f"{where}.content: expected a string or a list of blocks, got {type(content).__name__}"
        )
    main = NormMessage(index=i, role=role, text="")
    texts: list[str] = []
    reasoning: list[str] = []
    results: list[NormMessage] = []
    for j, block in enumerate(content):
        path = f"{where}.content[{j}]"
        if isinstance(block, str):
            texts.append(block)
            continue
        if not isinstance(block, dict):
            texts.append(tally.keep_unknown(path, block))
            continue
        _cache_mark(block, path, tally)
        btype = block.get("type")
        if btype == "text":
            texts.append(str(block.get("text", "")))
        elif btype == "thinking":
            reasoning.append(str(block.get("thinking", "")))
        elif btype == "redacted_thinking":
            reasoning.append("[redacted thinking]")
        elif btype == "tool_use" and role == "assistant":
            name = block.get("name")
            if not isinstance(name, str) or not name:
                raise ImportFormatError(f"{path}: tool_use without a name")
            main.tool_calls.append(
                ToolCall(
                    id=str(block["id"]) if block.get("id") else None,
                    name=name,
                    arguments=json.dumps(
                        block.get("input", {}), ensure_ascii=False, separators=(",", ":")
                    ),
                )
            )
            tally.add("tool_calls")
        elif btype == "tool_result":
            media: list[dict[str, Any]] = []
            text = _result_text(block.get("content"), path, tally, media)
            extra = {"is_error": True} if block.get("is_error") else {}
            tid = block.get("tool_use_id")
            results.append(
                NormMessage(
                    index=i,
                    role="tool",
                    text=text,
                    tool_call_id=str(tid) if tid else None,
                    id=f"msg-{i}.{j}",
                    media=media,
                    extra=extra,
                )
            )
            tally.add("tool_results")
        elif btype in ("image", "document"):
            line, info = _media(block, path, tally)
            texts.append(line)
            main.media.append(info)
        else:
            texts.append(tally.keep_unknown(path, block))
    main.text = "\n".join(texts)
    main.reasoning = "\n".join(r for r in reasoning if r)
    if main.text or main.tool_calls or main.reasoning or main.media or not results:
        return [*results, main]
    return results


def parse_tools(tools: Any, tally: Tally) -> list[ToolDef]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ImportFormatError("tools: expected a list of tool definitions")
    out: list[ToolDef] = []
    for k, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise ImportFormatError(f"tools[{k}]: a tool needs a name")
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            # a server tool (web_search, bash, text_editor, computer…): its type is its schema
            schema = {k2: v for k2, v in tool.items() if k2 not in ("name", "description")}
        out.append(
            ToolDef(
                name=tool["name"], description=str(tool.get("description") or ""), parameters=schema
            )
        )
        _cache_mark(tool, f"tools[{k}]", tally)
        tally.add("tools")
    return out


def trace_from_request(
    request: dict[str, Any],
    *,
    session_id: str | None = None,
    turn: int = 0,
    now: datetime | None = None,
    default_now: datetime | None = None,
    response: dict[str, Any] | None = None,
) -> Trace:
    """One Anthropic Messages request (and, if given, its response) → a trace."""
    if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
        raise ImportFormatError("an Anthropic Messages request is an object with a 'messages' list")
    tally = Tally(FORMAT)
    norm = normalize(request, tally)
    tools = parse_tools(request.get("tools"), tally)
    when = now or default_now or datetime.now(UTC)
    reserve = request.get("max_tokens")
    inp, flat = captured_input_from_norm(
        norm,
        tools=tools,
        now=when,
        output_reserve=reserve if isinstance(reserve, int) and reserve >= 0 else None,
    )
    response = response if isinstance(response, dict) else request.get("response")
    usage: dict[str, int] = {}
    output = None
    if isinstance(response, dict):
        usage = usage_from_obj(response.get("usage"))
        blocks = response.get("content")
        if isinstance(blocks, list):
            output = (
                "\n".join(
                    str(b.get("text", ""))
                    for b in blocks
                    if isinstance(b, dict) and b.get("type") == "text"
                )
                or None
            )
    meta: dict[str, Any] = {"import": tally.to_metadata()}
    user = (
        request.get("metadata", {}).get("user_id")
        if isinstance(request.get("metadata"), dict)
        else None
    )
    model = request.get("model") if isinstance(request.get("model"), str) else None
    return make_trace(
        inp,
        flat,
        builder=BUILDER_NAME,
        model=model,
        trace_id=stable_id(
            BUILDER_NAME, request.get("system"), request["messages"], request.get("tools")
        ),
        session_id=session_id or (str(user) if user else "import"),
        turn=turn,
        created_at=when,
        usage=usage,
        output=output,
        metadata=meta,
    )


def is_message_list(data: Any) -> bool:
    """Whether a JSON value is a bare list of messages (``[{"role", "content"}, ...]``), as
    Cline's ``api_conversation_history.json`` keeps a conversation, not a list of requests."""
    return (
        isinstance(data, list)
        and bool(data)
        and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and "content" in m for m in data
        )
    )


def traces_from_obj(
    data: Any, *, session_id: str | None = None, default_now: datetime | None = None
) -> list[Trace]:
    """A request, a ``{"request": ..., "response": ...}`` pair, a list of either, or a bare
    list of messages (one request holding them)."""
    if is_message_list(data):
        data = {"messages": data}
    return each_request(data, trace_from_request, session_id=session_id, default_now=default_now)


__all__ = [
    "FORMAT",
    "is_message_list",
    "looks_like",
    "normalize",
    "normalize_message",
    "trace_from_request",
    "traces_from_obj",
]
