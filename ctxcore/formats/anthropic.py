"""Import Anthropic Messages API requests (``POST /v1/messages``) as ctxscope traces.

What Claude Code, the Anthropic SDKs and most Claude agents send. The request is mapped onto
the same normalised messages as an OpenAI chat request (``ctxcore.formats.openai``), so a
request becomes the same captured input whichever API carried it:

- ``system``, a string or a list of text blocks → the system instructions (one system part
  per block; a block's ``cache_control`` mark is kept in the trace's import metadata);
- ``text`` blocks → the message text; ``thinking`` → the message's reasoning and a
  ``thinking`` part, ``redacted_thinking`` → a part with the size of its encrypted ``data``
  and no text (kept in metadata, not counted as context: the API drops earlier turns'
  thinking);
- ``tool_use`` → a tool call of the assistant message (id, name, JSON input);
  ``server_tool_use`` (web search, web fetch, code execution…) and ``mcp_tool_use`` → tool
  calls too, marked ``server_tool`` (and ``mcp_server``); their results inside the assistant
  message (``web_search_tool_result``, ``web_fetch_tool_result``,
  ``*code_execution_tool_result``, ``mcp_tool_result``, any ``*_tool_result``) → tool
  messages after the text before them (``tool:<tool_use_id>`` packets): search results as
  title and URL lines (their encrypted page content by its size), a fetched document by its
  text, a command's stdout/stderr, an error by its code;
- ``compaction`` → the summary that replaces everything before it (the API drops the blocks
  before it: platform.claude.com/docs/en/build-with-claude/compaction): a ``summary`` packet,
  the messages before it summarized (``norm``);
- ``tool_result`` (content a string or a list of blocks, ``is_error`` kept) inside a user
  message → a tool message, i.e. a ``tool:<tool_use_id>`` packet; any text beside the results
  stays a user message after them;
- ``image`` / ``document`` → a placeholder line naming the media type and size (documents of
  source type ``text`` keep their text), recorded in the message's ``metadata.media``;
- any other block (``container_upload``, …) → its JSON kept as text in its message, and
  named in ``metadata.import.kept_as_text`` (the ``import_loss`` finding);
- ``tools`` (custom tools with ``input_schema``; server tools by ``type``) and
  ``mcp_servers`` (by name, its authorization token left out) → the tool definitions;
  ``max_tokens`` → the output reserve; ``metadata.user_id`` → the session.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any, cast

from ctxcore.errors import ImportFormatError
from ctxcore.formats.accounting import Tally
from ctxcore.formats.norm import NormMessage, Parts, ToolCall
from ctxcore.formats.registry import LiveConverter
from ctxcore.formats.request import RequestFormat, call_line, first_user
from ctxcore.models import ToolDef, Trace

BUILDER_NAME = "import/anthropic"
FORMAT = "anthropic-messages"

#: Block types that only Anthropic requests carry: enough to tell one from an OpenAI request.
_ANTHROPIC_BLOCKS = frozenset(
    {
        "tool_use",
        "tool_result",
        "thinking",
        "redacted_thinking",
        "server_tool_use",
        "mcp_tool_use",
        "compaction",
        "document",
    }
)
#: Calls the API runs itself, and the block type that marks them.
_SERVER_CALLS = frozenset({"server_tool_use", "mcp_tool_use"})
#: Fields of a server result that hold what only the provider can read.
_ENCRYPTED = frozenset({"encrypted_content", "encrypted_index", "encrypted_stdout"})


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
        tally.mark(path, block["cache_control"])


def normalize(request: dict[str, Any], tally: Tally) -> list[NormMessage]:
    """The request's system blocks and messages as normalised messages (tool results split
    out of user messages, in order)."""
    out = normalize_system(request, tally)
    for i, msg in enumerate(request["messages"]):
        out.extend(normalize_message(msg, i, tally))
    return out


def normalize_system(request: dict[str, Any], tally: Tally) -> list[NormMessage]:
    """The request's system field (a text, or a list of blocks) as system messages."""
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
    parts = Parts(NormMessage(index=i, role=role, text=""))
    for j, block in enumerate(content):
        path = f"{where}.content[{j}]"
        if isinstance(block, str):
            parts.texts.append(block)
        elif not isinstance(block, dict):
            parts.texts.append(tally.keep_unknown(path, block))
        else:
            _cache_mark(block, path, tally)
            _read_block(block, path, f"msg-{i}.{j}", parts, tally)
    return parts.messages()


def _tool_use(block: dict[str, Any], path: str) -> ToolCall:
    """A ``tool_use`` block, or a call the API runs (``server_tool_use``, ``mcp_tool_use``:
    marked in ``meta``)."""
    btype = str(block.get("type"))
    name = block.get("name")
    if not isinstance(name, str) or not name:
        raise ImportFormatError(f"{path}: {btype} without a name")
    meta: dict[str, Any] = {}
    if btype in _SERVER_CALLS:
        meta["server_tool"] = btype
        if isinstance(block.get("server_name"), str):
            meta["mcp_server"] = block["server_name"]
    return ToolCall(
        id=str(block["id"]) if block.get("id") else None,
        name=name,
        arguments=json.dumps(block.get("input", {}), ensure_ascii=False, separators=(",", ":")),
        meta=meta,
    )


def _sized(value: Any) -> Any:
    """A server result's JSON with what only the provider can read replaced by its size."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            secret = k in _ENCRYPTED and isinstance(v, str)
            out[k] = f"[encrypted: {len(v):,} chars]" if secret else _sized(v)
        return out
    if isinstance(value, list):
        return [_sized(v) for v in value]
    return value


def _server_item(item: Any, path: str, tally: Tally, media: list[dict[str, Any]]) -> str:
    """One part of a server tool's result as the text it stands for."""
    if isinstance(item, str):
        return item
    if not isinstance(item, dict):
        return json.dumps(item, ensure_ascii=False)
    kind = str(item.get("type", ""))
    if kind == "text":
        return str(item.get("text", ""))
    if kind in ("image", "document"):
        line, info = _media(item, path, tally)
        media.append(info)
        return line
    if kind == "web_search_result":
        size = len(str(item.get("encrypted_content") or ""))
        return f"{item.get('title') or ''}\n{item.get('url') or ''}" + (
            f"\n[page content, encrypted: {size:,} chars]" if size else ""
        )
    if kind == "web_fetch_result":
        inner = item.get("content")
        body = _server_item(inner, f"{path}.content", tally, media) if inner is not None else ""
        return f"[fetched {item.get('url') or ''}]\n{body}".rstrip("\n")
    if kind.endswith("_error") or "error_code" in item:
        message = item.get("error_message")
        return f"[error: {item.get('error_code')}]" + (f" {message}" if message else "")
    if "stdout" in item or "stderr" in item:
        lines = [str(item.get("stdout") or ""), str(item.get("stderr") or "")]
        lines.append(f"[return code {item.get('return_code')}]")
        return "\n".join(x for x in lines if x)
    if kind.endswith("view_result") and isinstance(item.get("content"), str):
        return str(item["content"])
    return json.dumps(_sized(item), ensure_ascii=False)


def _server_result(
    block: dict[str, Any], path: str, mid: str, index: int, tally: Tally
) -> NormMessage:
    """The result of a call the API ran (``web_search_tool_result``, ``mcp_tool_result``…),
    as a tool message answering it."""
    media: list[dict[str, Any]] = []
    content = block.get("content")
    items = content if isinstance(content, list) else [] if content is None else [content]
    text = "\n".join(
        _server_item(item, f"{path}.content[{k}]", tally, media) for k, item in enumerate(items)
    )
    extra: dict[str, Any] = {"server_tool": str(block.get("type"))}
    if block.get("is_error"):
        extra["is_error"] = True
    tid = block.get("tool_use_id")
    return NormMessage(
        index=index,
        role="tool",
        text=text,
        tool_call_id=str(tid) if tid else None,
        id=mid,
        media=media,
        extra=extra,
    )


def _compaction(block: dict[str, Any], path: str, mid: str, main: NormMessage) -> NormMessage:
    """A compaction block: the summary the API replaced the context before it with."""
    content = block.get("content")
    text = content if isinstance(content, str) else ""
    info = {"type": "compaction", "path": path, "replaces_earlier": True}
    return NormMessage(index=main.index, role=main.role, text=text, id=mid, compaction=info)


def _thinking(block: dict[str, Any], parts: Parts, tally: Tally) -> None:
    """A thinking block (its text and a part), or a redacted one (a part with its size)."""
    tally.add("thinking")
    if block.get("type") == "redacted_thinking":
        data = block.get("data")
        size = len(data) if isinstance(data, str) else 0
        parts.main.thinking.append({"type": "redacted_thinking", "encrypted_chars": size})
        return
    text = str(block.get("thinking", ""))
    parts.reasoning.append(text)
    part: dict[str, Any] = {"type": "thinking", "chars": len(text)}
    if isinstance(block.get("signature"), str):
        part["signature_chars"] = len(block["signature"])
    parts.main.thinking.append(part)


def _tool_result(
    block: dict[str, Any], path: str, mid: str, index: int, tally: Tally
) -> NormMessage:
    media: list[dict[str, Any]] = []
    text = _result_text(block.get("content"), path, tally, media)
    tid = block.get("tool_use_id")
    return NormMessage(
        index=index,
        role="tool",
        text=text,
        tool_call_id=str(tid) if tid else None,
        id=mid,
        media=media,
        extra={"is_error": True} if block.get("is_error") else {},
    )


def _read_block(block: dict[str, Any], path: str, mid: str, parts: Parts, tally: Tally) -> None:
    """One content block into the message's parts (``mid``: a tool result's message id)."""
    btype = block.get("type")
    main = parts.main
    if btype == "text":
        parts.texts.append(str(block.get("text", "")))
    elif btype in ("thinking", "redacted_thinking"):
        _thinking(block, parts, tally)
    elif (btype == "tool_use" or btype in _SERVER_CALLS) and main.role == "assistant":
        main.tool_calls.append(_tool_use(block, path))
        tally.add("tool_calls")
    elif btype == "tool_result":
        parts.results.append(_tool_result(block, path, mid, main.index, tally))
        tally.add("tool_results")
    elif isinstance(btype, str) and btype.endswith("_tool_result") and "tool_use_id" in block:
        result = _server_result(block, path, mid, main.index, tally)
        if main.role == "assistant":
            parts.after.append((len(parts.texts), result))
        else:
            parts.results.append(result)
        tally.add("tool_results")
    elif btype == "compaction":
        parts.lead.append(_compaction(block, path, mid, main))
        tally.add("compactions")
    elif btype in ("image", "document"):
        line, info = _media(block, path, tally)
        parts.texts.append(line)
        main.media.append(info)
    else:
        parts.texts.append(tally.keep_unknown(path, block))


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


def mcp_servers(servers: Any, tally: Tally) -> list[ToolDef]:
    """The MCP servers a request lets the API call (the MCP connector): one tool definition
    each, named by the server, its settings the schema (the authorization token left out)."""
    if servers is None:
        return []
    if not isinstance(servers, list):
        raise ImportFormatError("mcp_servers: expected a list of MCP servers")
    out: list[ToolDef] = []
    for k, server in enumerate(servers):
        if not isinstance(server, dict) or not isinstance(server.get("name"), str):
            raise ImportFormatError(f"mcp_servers[{k}]: an MCP server needs a name")
        params = {key: v for key, v in server.items() if key not in ("name", "authorization_token")}
        out.append(ToolDef(name=server["name"], description="MCP server", parameters=params))
        tally.add("tools")
    return out


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


def _output(response: dict[str, Any]) -> str | None:
    """The reply's text blocks (what an imported pair's outcome shows)."""
    blocks = response.get("content")
    if not isinstance(blocks, list):
        return None
    texts = (
        str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "text"
    )
    return "\n".join(texts) or None


def _user_id(request: dict[str, Any]) -> Any:
    meta = request.get("metadata")
    return meta.get("user_id") if isinstance(meta, dict) else None


class Messages(RequestFormat):
    """The Anthropic Messages mapping (``request.RequestFormat``)."""

    builder = BUILDER_NAME
    source = FORMAT
    usage_mapping = "anthropic"
    shape = "an Anthropic Messages request is an object with a 'messages' list"
    #: a request names its session (``metadata.user_id``), else it is ``import``
    file_session = False

    def looks_like(self, data: Any) -> bool:
        return looks_like(data)

    def detects(self, data: Any) -> bool:
        # also a bare message list with Anthropic blocks (tool_use, tool_result…): Cline's
        return super().detects(data) or (is_message_list(data) and looks_like({"messages": data}))

    def accepts(self, request: Any) -> bool:
        return isinstance(request, dict) and isinstance(request.get("messages"), list)

    def normalize(
        self, request: dict[str, Any], tally: Tally
    ) -> tuple[list[NormMessage], dict[str, Any]]:
        return normalize(request, tally), {}

    def items(self, request: dict[str, Any]) -> list[Any] | None:
        return cast(list[Any], request["messages"])

    def head(self, request: dict[str, Any]) -> Any:
        return request.get("system")

    def normalize_head(self, request: dict[str, Any], tally: Tally) -> list[NormMessage]:
        return normalize_system(request, tally)

    def normalize_item(self, item: Any, index: int, tally: Tally) -> list[NormMessage]:
        return normalize_message(item, index, tally)

    def tools(self, request: dict[str, Any], tally: Tally) -> list[ToolDef]:
        return parse_tools(request.get("tools"), tally) + mcp_servers(
            request.get("mcp_servers"), tally
        )

    def identity(self, request: dict[str, Any]) -> tuple[Any, ...]:
        return request.get("system"), request["messages"], request.get("tools")

    def reserve(self, request: dict[str, Any]) -> Any:
        return request.get("max_tokens")

    def response_of(self, request: dict[str, Any], response: Any) -> dict[str, Any] | None:
        reply = response if isinstance(response, dict) else request.get("response")
        return reply if isinstance(reply, dict) else None

    def output(self, request: dict[str, Any], response: dict[str, Any] | None) -> str | None:
        return _output(response) if response is not None else None

    def model(self, request: dict[str, Any], response: dict[str, Any] | None) -> Any:
        return request.get("model")

    def session(self, request: dict[str, Any], session_id: str | None) -> str:
        user = _user_id(request)
        return session_id or (str(user) if user else "import")

    def requests(self, data: Any) -> Iterator[tuple[Any, Any]]:
        # a bare list of messages is one request holding them
        return super().requests({"messages": data} if is_message_list(data) else data)


REQUESTS = Messages()
trace_from_request = REQUESTS.trace


def traces_from_obj(
    data: Any, *, session_id: str | None = None, default_now: datetime | None = None
) -> list[Trace]:
    """A request, a ``{"request": ..., "response": ...}`` pair, a list of either, or a bare
    list of messages (one request holding them)."""
    return REQUESTS.traces(data, session_id=session_id, default_now=default_now)


# --------------------------------------------------------------------------- live calls


def _reply_lines(response: dict[str, Any]) -> list[str]:
    """A live reply's text blocks, and each tool use as a ``name(input)`` line."""
    lines: list[str] = []
    for block in response.get("content") or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            lines.append(block["text"])
        elif block.get("type") in ("tool_use", "server_tool_use"):
            lines.append(call_line(block.get("name"), block.get("input")))
    return lines


def _usage_summary(usage: dict[str, int]) -> dict[str, int]:
    """``input`` is the whole prompt: ``input_tokens`` leaves out what was read from or
    written to the cache, so those are added back."""
    out: dict[str, int] = {}
    read = usage.get("cache_read_input_tokens", 0)
    made = usage.get("cache_creation_input_tokens", 0)
    if "input_tokens" in usage:
        out["input"] = usage["input_tokens"] + read + made
    if "output_tokens" in usage:
        out["output"] = usage["output_tokens"]
    if "cache_read_input_tokens" in usage:
        out["cached"] = read
    if "cache_creation_input_tokens" in usage:
        out["cache_creation"] = made
    return out


def _named_session(request: dict[str, Any]) -> tuple[str, str] | None:
    user = _user_id(request)
    return (user, "metadata.user_id") if isinstance(user, str) and user else None


LIVE = LiveConverter(
    trace=lambda request, response, session, now, incremental: REQUESTS.trace(
        request, session_id=session, now=now, response=response, incremental=incremental
    ),
    reply=_reply_lines,
    usage=_usage_summary,
    conversation=lambda request: [request.get("system"), first_user(request.get("messages"))],
    session=_named_session,
)


__all__ = [
    "FORMAT",
    "LIVE",
    "REQUESTS",
    "is_message_list",
    "looks_like",
    "normalize",
    "normalize_message",
    "trace_from_request",
    "traces_from_obj",
]
