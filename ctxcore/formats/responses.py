"""Import OpenAI Responses API requests (``POST /v1/responses``) as ctxscope traces.

What the OpenAI Agents SDK and Codex send. A Responses request is not a list of chat
messages but a list of *items*, so it gets its own reader; the items are mapped onto the
same normalised messages as a chat request (``ctxcore.formats.openai``), so the context
looks the same whichever API carried it:

- ``instructions`` → the system instructions (one system part); ``message`` items (and bare
  ``{role, content}`` items) → messages: ``system``/``developer`` ones become system parts,
  the last ``user`` message the query, the rest history. Content is a string or parts:
  ``input_text``/``output_text``/``refusal`` → text, ``input_image``/``input_file``/
  ``input_audio`` → a placeholder line, recorded in ``metadata.media`` (no payload);
- ``function_call`` items ``{call_id, name, arguments}`` → tool calls of an assistant turn
  (consecutive calls make one turn, as parallel calls do in a chat request);
  ``function_call_output`` ``{call_id, output}`` → a ``tool:<call_id>`` packet;
- ``reasoning`` items → the reasoning of the assistant turn that follows (summary and
  reasoning text) and a ``reasoning`` part (its ``encrypted_content`` by its size only):
  kept in metadata, not counted;
- the calls OpenAI runs itself (``web_search_call``, ``file_search_call``,
  ``code_interpreter_call``, ``mcp_call``): each item records a call and its outcome, so it
  is a tool call of an assistant turn (marked ``server_tool``, ``mcp_server``) and a tool
  message answering it (the search's results, the code's outputs, the MCP tool's output or
  error; what the item does not hold is said, not made up);
- ``mcp_list_tools`` → the listed tools are tool definitions (the model saw them);
  ``compaction`` → a ``summary`` packet of the encrypted summary, by its size (what it
  replaced is not in the request; items kept beside it are the caller's choice);
- any other item (``computer_call``, ``custom_tool_call(_output)``, ``item_reference``, …)
  and any unknown part → its JSON kept as text and listed in ``metadata.import.kept_as_text``;
- ``tools`` (flat function tools; built-in tools by ``type``) → the tool definitions;
  ``max_output_tokens`` → the output reserve; ``previous_response_id`` and
  ``prompt_cache_key`` (the hint that requests belong to one conversation) →
  ``metadata.session_hint``, and ``prompt_cache_key`` names the session.

Source messages keep ids ``msg-<i>`` (``i`` = the item's position in ``input``); items
that are not messages (calls, outputs, reasoning) get ``item-<i>``, so the import's counts
agree with the source's (``ctxcore.formats.accounting``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from ctxcore.errors import ImportFormatError
from ctxcore.formats.accounting import Tally
from ctxcore.formats.norm import NormMessage, ToolCall
from ctxcore.formats.openai import normalize_parts_message, text_of, usage_summary
from ctxcore.formats.registry import LiveConverter
from ctxcore.formats.request import RequestFormat, call_line, first_user
from ctxcore.models import ToolDef

BUILDER_NAME = "import/openai-responses"
FORMAT = "openai-responses"

_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})
_MEDIA_PARTS = frozenset({"input_image", "input_file", "input_audio"})
#: Calls OpenAI runs itself: the tool name each is a call of (an MCP call names its own).
_BUILTIN_CALLS = {
    "web_search_call": "web_search",
    "file_search_call": "file_search",
    "code_interpreter_call": "code_interpreter",
    "mcp_call": "",
}
#: Item types only a Responses input holds: enough to tell a list of items from chat messages.
_ITEM_TYPES = frozenset(
    {
        "message",
        "function_call",
        "function_call_output",
        "reasoning",
        "item_reference",
        "compaction",
        "mcp_list_tools",
        *_BUILTIN_CALLS,
    }
)
#: Top-level fields only a Responses request has.
_REQUEST_KEYS = frozenset(
    {"instructions", "previous_response_id", "max_output_tokens", "prompt_cache_key", "store"}
)


def looks_like(data: Any) -> bool:
    """Whether a JSON value is a Responses API request (``input`` and no ``messages``)."""
    if not isinstance(data, dict) or "messages" in data or "contents" in data:
        return False
    items = data.get("input")
    if isinstance(items, str):
        return "model" in data or any(k in data for k in _REQUEST_KEYS)
    if not isinstance(items, list):
        return False
    if any(k in data for k in _REQUEST_KEYS):
        return True
    return bool(items) and all(
        isinstance(it, str)
        or (isinstance(it, dict) and (str(it.get("type")) in _ITEM_TYPES or "role" in it))
        for it in items[:50]
    )


def _media(part: dict[str, Any], ptype: str, path: str) -> tuple[str, dict[str, Any]]:
    """A placeholder line for an image, file or audio part, and what it was (no payload)."""
    info: dict[str, Any] = {"type": ptype, "path": path}
    for key in ("file_id", "filename", "detail"):
        if isinstance(part.get(key), str):
            info[key] = part[key]
    url = part.get("image_url", part.get("file_url"))
    data = part.get("file_data")
    audio = part.get("input_audio")
    if isinstance(audio, dict):
        data = audio.get("data")
        if isinstance(audio.get("format"), str):
            info["format"] = audio["format"]
    if isinstance(url, str) and url.startswith("data:"):
        data = url
    elif isinstance(url, str):
        info["url"] = url
    if isinstance(data, str):
        if data.startswith("data:"):
            info["media_type"] = data[5:].partition(";")[0]
            data = data.partition(",")[2]
        info["bytes"] = len(data) * 3 // 4
    desc = " ".join(
        str(x)
        for x in (
            info.get("media_type") or info.get("format"),
            f"{info['bytes']:,} bytes" if "bytes" in info else None,
            info.get("url"),
            info.get("filename") or info.get("file_id"),
        )
        if x
    )
    return f"[{ptype}{': ' + desc if desc else ''}]", info


def _content(content: Any, path: str, tally: Tally, into: NormMessage) -> str:
    """The text of a message's content (or a tool output): a string or a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ImportFormatError(
            f"{path}: expected a string or a list of content parts, got {type(content).__name__}"
        )
    texts: list[str] = []
    for j, part in enumerate(content):
        ppath = f"{path}[{j}]"
        if isinstance(part, str):
            texts.append(part)
            continue
        ptype = str(part.get("type")) if isinstance(part, dict) else None
        if isinstance(part, dict) and ptype in _TEXT_PARTS:
            texts.append(text_of(part.get("text")))
        elif isinstance(part, dict) and ptype == "refusal":
            texts.append(text_of(part.get("refusal")))
        elif isinstance(part, dict) and ptype in _MEDIA_PARTS:
            line, info = _media(part, str(ptype), ppath)
            texts.append(line)
            into.media.append(info)
            tally.add("media")
        else:
            texts.append(tally.keep_unknown(ppath, part))
    return "\n".join(texts)


def _reasoning(item: dict[str, Any], where: str) -> tuple[str, dict[str, Any]]:
    """A reasoning item's readable text (summary, then reasoning text) and what else it had."""
    texts: list[str] = []
    for key in ("summary", "content"):
        parts = item.get(key)
        if parts is None:
            continue
        if not isinstance(parts, list):
            raise ImportFormatError(f"{where}.{key}: expected a list of parts")
        for part in parts:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, str):
                texts.append(part)
    info: dict[str, Any] = {}
    if isinstance(item.get("id"), str):
        info["id"] = item["id"]
    encrypted = item.get("encrypted_content")
    if isinstance(encrypted, str) and encrypted:
        # opaque to everyone but the provider: its size says what the model gets back
        info["encrypted_chars"] = len(encrypted)
    return "\n".join(t for t in texts if t), info


def _builtin_args(item: dict[str, Any], itype: str) -> str:
    """What a built-in call was asked to do, as its arguments."""
    if itype == "mcp_call":
        args = item.get("arguments", "")
        return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    keys = {
        "web_search_call": ("action",),
        "file_search_call": ("queries",),
        "code_interpreter_call": ("code", "container_id"),
    }[itype]
    return json.dumps({k: item[k] for k in keys if k in item}, ensure_ascii=False)


def _builtin_output(item: dict[str, Any], itype: str) -> str:
    """What a built-in call returned, as far as the item holds it."""
    status = item.get("status")
    if itype == "mcp_call":
        if item.get("error"):
            return f"[error] {text_of(item['error'])}"
        out = item.get("output")
        return text_of(out) if out is not None else f"[{status or 'no output'}]"
    if itype == "file_search_call" and isinstance(item.get("results"), list):
        return "\n".join(
            f"{r.get('filename') or r.get('file_id') or ''}: {text_of(r.get('text'))}"
            for r in item["results"]
            if isinstance(r, dict)
        )
    if itype == "code_interpreter_call" and isinstance(item.get("outputs"), list):
        return "\n".join(
            text_of(o.get("logs")) if o.get("type") == "logs" else f"[{o.get('type')}]"
            for o in item["outputs"]
            if isinstance(o, dict)
        )
    action = item.get("action")
    sources = action.get("sources") if isinstance(action, dict) else None
    lines = [f"[{itype} {status or ''}: its results are not in the request]".replace(" :", ":")]
    if isinstance(sources, list):
        lines.extend(str(x.get("url")) for x in sources if isinstance(x, dict) and x.get("url"))
    return "\n".join(lines)


def _builtin(item: dict[str, Any], itype: str, where: str, i: int) -> tuple[ToolCall, NormMessage]:
    """A call OpenAI ran (web search, file search, code interpreter, an MCP server's tool):
    the call, and the tool message of its outcome answering it by the item's id."""
    name = _BUILTIN_CALLS[itype] or item.get("name")
    if not isinstance(name, str) or not name:
        raise ImportFormatError(f"{where}: {itype} without a name")
    cid = item.get("id", item.get("call_id"))
    cid = str(cid) if isinstance(cid, str | int) and cid != "" else f"{itype}_{i}"
    meta: dict[str, Any] = {"server_tool": itype}
    if isinstance(item.get("server_label"), str):
        meta["mcp_server"] = item["server_label"]
    call = ToolCall(id=cid, name=name, arguments=_builtin_args(item, itype), meta=meta)
    extra = dict(meta)
    if item.get("error") or item.get("status") in ("failed", "incomplete"):
        extra["is_error"] = True
    result = NormMessage(
        index=i,
        role="tool",
        text=_builtin_output(item, itype),
        tool_call_id=cid,
        name=name,
        id=f"item-{i}.result",
        extra=extra,
    )
    return call, result


def listed_tools(items: Any, tally: Tally) -> list[ToolDef]:
    """The tools ``mcp_list_tools`` items list: definitions the model saw."""
    out: list[ToolDef] = []
    for i, item in enumerate(items if isinstance(items, list) else []):
        if not isinstance(item, dict) or item.get("type") != "mcp_list_tools":
            continue
        tools = item.get("tools") or []
        if not isinstance(tools, list):
            raise ImportFormatError(f"input[{i}].tools: expected a list of tools")
        for k, tool in enumerate(tools):
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                raise ImportFormatError(f"input[{i}].tools[{k}]: a listed tool needs a name")
            schema = tool.get("input_schema")
            out.append(
                ToolDef(
                    name=tool["name"],
                    description=str(tool.get("description") or ""),
                    parameters=schema if isinstance(schema, dict) else {},
                )
            )
            tally.add("tools")
    return out


def _call(item: dict[str, Any], where: str) -> ToolCall:
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise ImportFormatError(f"{where}: function_call without a name")
    cid = item.get("call_id", item.get("id"))
    args = item.get("arguments", "")
    return ToolCall(
        id=str(cid) if isinstance(cid, str | int) and cid != "" else None,
        name=name,
        arguments=args if isinstance(args, str) else json.dumps(args, ensure_ascii=False),
    )


def normalize(request: dict[str, Any], tally: Tally) -> list[NormMessage]:
    """The request's instructions and input items as normalised messages, in order."""
    out: list[NormMessage] = []
    instructions = request.get("instructions")
    if isinstance(instructions, str):
        if instructions:
            out.append(NormMessage(index=-1, role="system", text=instructions, id="instructions"))
            tally.add("system_parts")
    elif instructions is not None:
        raise ImportFormatError(
            f"instructions: expected a string, got {type(instructions).__name__}"
        )
    items = request.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise ImportFormatError(
            f"input: expected a string or a list of items, got {type(items).__name__}"
        )
    reader = _Items(out, tally)
    for i, item in enumerate(items):
        reader.item(item, i)
    reader.flush_reasoning(len(items))
    return out


def is_items(value: list[Any]) -> bool:
    """Whether a list is Responses input items (one holds a ``type`` and no ``role``)."""
    return any(isinstance(m, dict) and "type" in m and "role" not in m for m in value)


def normalize_recorded(
    value: list[Any], tally: Tally, *, where: str, items: bool | None = None
) -> list[NormMessage]:
    """A call's input as an observability tool recorded it (Langfuse, the Agents SDK): a
    list of Responses input items (``items``; by default when one item looks like one), or
    of chat and OpenTelemetry GenAI ``{role, parts}`` messages, read by the chat mapping.
    A message that cannot be read is an error naming ``where`` and its place."""
    if items if items is not None else is_items(value):
        return normalize({"input": value}, tally)
    out: list[NormMessage] = []
    for i, message in enumerate(value):
        try:
            out.extend(normalize_parts_message(message, i, tally))
        except ImportFormatError as exc:
            raise ImportFormatError(f"{where}: {exc}") from exc
    return out


class _Items:
    """Reads input items in order into ``out``: reasoning items wait for the assistant
    output they belong to, and consecutive function calls join one assistant turn."""

    def __init__(self, out: list[NormMessage], tally: Tally) -> None:
        self.out = out
        self.tally = tally
        self.reasoning: list[str] = []
        self.reasoning_items: list[dict[str, Any]] = []
        self.thinking: list[dict[str, Any]] = []
        self.calls: NormMessage | None = None  # the assistant turn consecutive calls join

    def attach_reasoning(self, msg: NormMessage) -> None:
        """The reasoning read since the last output, onto this assistant message."""
        if self.reasoning:
            before = self.reasoning
            msg.reasoning = "\n".join([*before, msg.reasoning] if msg.reasoning else before)
        if self.reasoning_items:
            msg.extra["reasoning_items"] = list(self.reasoning_items)
        msg.thinking.extend(self.thinking)
        self.reasoning = []
        self.reasoning_items = []
        self.thinking = []

    def flush_reasoning(self, index: int) -> None:
        """Reasoning with no assistant output after it still belongs to the context."""
        if self.reasoning or self.reasoning_items or self.thinking:
            msg = NormMessage(index=index, role="assistant", text="", id=f"item-{index}")
            self.attach_reasoning(msg)
            self.out.append(msg)

    def item(self, item: Any, i: int) -> None:
        """One input item, by its type."""
        where = f"input[{i}]"
        if isinstance(item, str):
            item = {"role": "user", "content": item}
        if not isinstance(item, dict):
            raise ImportFormatError(f"{where}: an input item must be an object")
        itype = item.get("type", "message" if "role" in item else None)
        if itype == "function_call":
            self.function_call(item, where, i)
            return
        if itype in _BUILTIN_CALLS:
            self.builtin_call(item, str(itype), where, i)
            return
        self.calls = None
        if itype == "reasoning":
            text, info = _reasoning(item, where)
            if text:
                self.reasoning.append(text)
            if info:
                self.reasoning_items.append(info)
            part: dict[str, Any] = {"type": "reasoning", "chars": len(text)}
            if "encrypted_chars" in info:
                part["encrypted_chars"] = info["encrypted_chars"]
            self.thinking.append(part)
            self.tally.add("thinking")
        elif itype == "message":
            self.message(item, where, i)
        elif itype == "mcp_list_tools":
            pass  # its tools are the request's tool definitions (``listed_tools``)
        elif itype == "compaction":
            self.flush_reasoning(i)
            self.out.append(self.compaction(item, where, i))
        else:
            self.flush_reasoning(i)
            self.out.append(self.other(item, itype, where, i))

    def _turn(self, i: int) -> NormMessage:
        """The assistant turn a call joins (a new one after anything but a call)."""
        if self.calls is None:
            self.calls = NormMessage(index=i, role="assistant", text="", id=f"item-{i}")
            self.attach_reasoning(self.calls)
            self.out.append(self.calls)
        return self.calls

    def function_call(self, item: dict[str, Any], where: str, i: int) -> None:
        self._turn(i).tool_calls.append(_call(item, where))
        self.tally.add("tool_calls")

    def builtin_call(self, item: dict[str, Any], itype: str, where: str, i: int) -> None:
        """A call OpenAI ran: its call joins the turn, its outcome follows it and ends it."""
        call, result = _builtin(item, itype, where, i)
        self._turn(i).tool_calls.append(call)
        self.out.append(result)
        self.calls = None
        self.tally.add("tool_calls")
        self.tally.add("tool_results")

    def compaction(self, item: dict[str, Any], where: str, i: int) -> NormMessage:
        """A compaction item: the summary (encrypted) standing for the context before it."""
        encrypted = item.get("encrypted_content")
        info: dict[str, Any] = {"type": "compaction", "path": where}
        if isinstance(item.get("id"), str):
            info["id"] = item["id"]
        info["encrypted_chars"] = len(encrypted) if isinstance(encrypted, str) else 0
        info["replaced"] = "not in the request"
        self.tally.add("compactions")
        return NormMessage(index=i, role="assistant", text="", id=f"item-{i}", compaction=info)

    def message(self, item: dict[str, Any], where: str, i: int) -> None:
        role = item.get("role")
        if not isinstance(role, str) or not role:
            raise ImportFormatError(f"{where}: a message item needs a 'role'")
        msg = NormMessage(index=i, role=role, text="")
        msg.text = _content(item.get("content"), f"{where}.content", self.tally, msg)
        if isinstance(item.get("id"), str):
            msg.extra["item_id"] = item["id"]
        self.tally.add("messages")
        if role in ("system", "developer"):
            self.tally.add("system_parts")
        if role == "assistant":
            self.attach_reasoning(msg)
        else:
            self.flush_reasoning(i)
        self.out.append(msg)

    def other(self, item: dict[str, Any], itype: Any, where: str, i: int) -> NormMessage:
        """A function call's output as a tool message; anything else (a built-in tool's
        call or output, an MCP item, a reference to a stored item…) kept whole as the
        assistant's, in place."""
        if itype != "function_call_output":
            text = self.tally.keep_unknown(where, item)
            return NormMessage(index=i, role="assistant", text=text, id=f"item-{i}")
        cid = item.get("call_id")
        msg = NormMessage(
            index=i,
            role="tool",
            text="",
            tool_call_id=str(cid) if isinstance(cid, str | int) and cid != "" else None,
            id=f"item-{i}",
        )
        msg.text = _content(item.get("output"), f"{where}.output", self.tally, msg)
        self.tally.add("tool_results")
        return msg


def parse_tools(tools: Any, tally: Tally) -> list[ToolDef]:
    """Function tools (flat, or chat-style nested) and built-in tools, named by their type."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ImportFormatError("tools: expected a list of tool definitions")
    out: list[ToolDef] = []
    for k, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise ImportFormatError(f"tools[{k}]: a tool definition must be an object")
        nested = tool.get("function")
        fn: dict[str, Any] = nested if isinstance(nested, dict) else tool
        name = fn.get("name") or tool.get("server_label") or tool.get("type")
        if not isinstance(name, str) or not name:
            raise ImportFormatError(f"tools[{k}]: a tool needs a name or a type")
        params = fn.get("parameters")
        if not isinstance(params, dict):
            # a built-in tool (web_search, file_search, mcp, custom…): its settings are its schema
            params = {key: v for key, v in tool.items() if key not in ("name", "description")}
        out.append(
            ToolDef(name=name, description=str(fn.get("description") or ""), parameters=params)
        )
        tally.add("tools")
    return out


def time_from_epoch(value: Any) -> datetime | None:
    """A Unix time in seconds as a UTC datetime; None for anything else or out of range."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        return datetime.fromtimestamp(float(value), tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _output(response: dict[str, Any]) -> str | None:
    """The reply's text, and its function calls as ``name(args)`` lines."""
    items = response.get("output")
    if not isinstance(items, list):
        return None
    lines: list[str] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message" and isinstance(item.get("content"), list):
            for part in item["content"]:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    lines.append(part["text"])
        elif item.get("type") == "function_call" and isinstance(item.get("name"), str):
            lines.append(f"{item['name']}({text_of(item.get('arguments'))})")
    return "\n".join(lines) or None


def _session_hint(request: dict[str, Any]) -> dict[str, str]:
    return {
        key: request[key]
        for key in ("previous_response_id", "prompt_cache_key")
        if isinstance(request.get(key), str) and request[key]
    }


class Responses(RequestFormat):
    """The Responses API mapping (``request.RequestFormat``)."""

    builder = BUILDER_NAME
    source = FORMAT
    usage_mapping = "openai-responses"
    shape = "an OpenAI Responses request is an object with an 'input'"

    def looks_like(self, data: Any) -> bool:
        return looks_like(data)

    def accepts(self, request: Any) -> bool:
        return isinstance(request, dict) and "input" in request

    def normalize(
        self, request: dict[str, Any], tally: Tally
    ) -> tuple[list[NormMessage], dict[str, Any]]:
        return normalize(request, tally), {}

    def tools(self, request: dict[str, Any], tally: Tally) -> list[ToolDef]:
        return parse_tools(request.get("tools"), tally) + listed_tools(request.get("input"), tally)

    def identity(self, request: dict[str, Any]) -> tuple[Any, ...]:
        return request.get("instructions"), request["input"], request.get("tools")

    def reserve(self, request: dict[str, Any]) -> Any:
        return request.get("max_output_tokens")

    def created(self, request: dict[str, Any], response: dict[str, Any] | None) -> datetime | None:
        return time_from_epoch(response.get("created_at")) if response is not None else None

    def request_meta(self, request: dict[str, Any]) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        hint = _session_hint(request)
        if hint:
            meta["session_hint"] = hint
        if isinstance(request.get("prompt"), dict):
            # a stored prompt template: its text lives at OpenAI, only the reference is here
            meta["prompt_template"] = request["prompt"]
        return meta

    def response_meta(self, response: dict[str, Any]) -> dict[str, Any]:
        rid = response.get("id")
        return {"response_id": rid} if isinstance(rid, str) else {}

    def output(self, request: dict[str, Any], response: dict[str, Any] | None) -> str | None:
        return _output(response) if response is not None else None

    def model(self, request: dict[str, Any], response: dict[str, Any] | None) -> Any:
        model = request.get("model")
        if not isinstance(model, str) and response is not None:
            return response.get("model")
        return model

    def session(self, request: dict[str, Any], session_id: str | None) -> str:
        return _session_hint(request).get("prompt_cache_key") or session_id or "import"


REQUESTS = Responses()
trace_from_request = REQUESTS.trace
traces_from_obj = REQUESTS.traces


# --------------------------------------------------------------------------- live calls


def _reply_lines(response: dict[str, Any]) -> list[str]:
    """A live reply's message texts, and each function call as a ``name(args)`` line."""
    lines: list[str] = []
    for item in response.get("output") or []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            for part in item.get("content") or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    lines.append(part["text"])
        elif item.get("type") == "function_call":
            lines.append(call_line(item.get("name"), item.get("arguments")))
    return lines


def _conversation(request: dict[str, Any]) -> list[Any]:
    items = request.get("input")
    return [request.get("instructions"), items if isinstance(items, str) else first_user(items)]


LIVE = LiveConverter(
    trace=lambda request, response, session, now, incremental: REQUESTS.trace(
        request, session_id=session, now=now, response=response, incremental=incremental
    ),
    reply=_reply_lines,
    usage=usage_summary,
    conversation=_conversation,
    continues=True,
)


__all__ = [
    "FORMAT",
    "LIVE",
    "REQUESTS",
    "is_items",
    "looks_like",
    "normalize",
    "normalize_recorded",
    "listed_tools",
    "parse_tools",
    "time_from_epoch",
    "trace_from_request",
    "traces_from_obj",
]
