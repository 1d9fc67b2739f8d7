"""Import OpenAI-style chat requests (``messages`` + ``tools``) as ctxscope traces.

Most agents end up sending a chat-completions request, so this is the widest door into
ctxscope: paste a request (or a trajectory that holds one) and see where its tokens went.
Roles map to the trace contract as follows:

- ``system``/``developer`` → ``input.system_instructions`` (several are joined by a blank
  line; ``developer`` messages after the first non-system message become ``policy``
  packets instead, since they were injected mid-conversation);
- the last ``user`` message → ``input.query`` (unless a query is given);
- other ``user``/``assistant`` messages → ``input.history`` (``id`` ``msg-<index>``);
  an assistant's tool calls are written into its content as compact ``name(args)`` lines
  and kept in full in ``metadata.tool_calls``;
- ``tool`` (and legacy ``function``) messages → packets ``tool:<tool_call_id>`` of kind
  ``tool_result``;
- ``tools`` (OpenAI ``{"type":"function","function":{...}}`` or flat) → ``input.tools``.

Content may be a string or a list of parts: OpenAI ``{"type":"text","text":..}``, the
``{"type":..,"value":..}`` parts of LLaMA-Factory data (``text``/``reasoning``/
``tool_call``), and the OpenTelemetry GenAI parts (``text``/``reasoning``/``tool_call``/
``tool_call_response``). Reasoning (a ``reasoning``/``thinking`` part, a message's
``reasoning_content`` as DeepSeek and Z.ai send it back, or a ``reasoning`` string) is kept
in message metadata with a ``thinking`` part each, not in the counted content, because
providers do not send it back as context.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, cast

from ctxcore.errors import ImportFormatError
from ctxcore.formats.accounting import Tally
from ctxcore.formats.norm import (
    NormMessage,
    ToolCall,
    captured_input_from_norm,
    reply_text,
    usage_from_obj,
)
from ctxcore.formats.registry import LiveConverter
from ctxcore.formats.request import Incremental, RequestFormat, call_line, first_user
from ctxcore.loading import TOO_DEEP
from ctxcore.models import CapturedInput, ToolDef, Trace

BUILDER_NAME = "import/openai"
FORMAT = "openai-chat"


def _args_text(args: Any) -> str:
    if isinstance(args, str):
        return args
    return json.dumps(args, ensure_ascii=False, separators=(",", ":"))


def text_of(value: Any) -> str:
    """Text of a content value; structured values become their JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _inner(obj: dict[str, Any]) -> dict[str, Any]:
    """The ``function`` object of OpenAI's nested form, or the object itself."""
    fn = obj.get("function")
    return fn if isinstance(fn, dict) else obj


def _call_from_obj(obj: Any, where: str) -> ToolCall:
    """A tool call in OpenAI form (``function: {name, arguments}``) or flat form."""
    if isinstance(obj, str):
        try:
            obj = json.loads(obj)
        except json.JSONDecodeError as exc:
            raise ImportFormatError(f"{where}: tool call is not JSON ({exc.msg})") from exc
        except RecursionError as exc:
            raise ImportFormatError(f"{where}: tool call: {TOO_DEEP}") from exc
    if not isinstance(obj, dict):
        raise ImportFormatError(f"{where}: a tool call must be an object")
    fn = _inner(obj)
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise ImportFormatError(f"{where}: tool call without a function name")
    cid = obj.get("id")
    return ToolCall(
        id=str(cid) if cid else None, name=name, arguments=_args_text(fn.get("arguments", {}))
    )


_MEDIA_PARTS = frozenset(
    {
        "image_url",
        "input_image",
        "image",
        "input_audio",
        "audio",
        "file",
        "input_file",
        "blob",
        "uri",
    }
)


def _media_part(part: dict[str, Any], ptype: str, path: str) -> tuple[str, dict[str, Any]]:
    """A placeholder line for an image/audio/file part, and what it was (no payload)."""
    info: dict[str, Any] = {"type": ptype, "path": path}
    nested = part.get(ptype)
    inner: dict[str, Any] = nested if isinstance(nested, dict) else part
    for key in ("mime_type", "media_type", "format", "filename", "file_id", "detail"):
        if isinstance(inner.get(key), str):
            info[key] = inner[key]
    url = inner.get("url") if isinstance(inner.get("url"), str) else part.get("image_url")
    if isinstance(url, str):
        if url.startswith("data:"):
            info["bytes"] = len(url.partition(",")[2]) * 3 // 4
            info["media_type"] = url[5:].partition(";")[0]
        else:
            info["url"] = url
    data = inner.get("data") if isinstance(inner.get("data"), str) else inner.get("file_data")
    if isinstance(data, str):
        info["bytes"] = len(data) * 3 // 4
    desc = " ".join(
        str(x)
        for x in (
            info.get("media_type") or info.get("mime_type") or info.get("format"),
            f"{info['bytes']:,} bytes" if "bytes" in info else None,
            info.get("url"),
            info.get("filename"),
        )
        if x
    )
    return f"[{ptype}{': ' + desc if desc else ''}]", info


def normalize_message(
    msg: Any, index: int, tally: Tally | None = None, *, results_apart: bool = False
) -> NormMessage:
    """Reduce one message of any supported shape to a ``NormMessage``.

    ``tally`` (when given) counts what the message holds and records parts of unknown
    types, which are kept as their JSON text rather than dropped. ``results_apart``: its
    ``tool_call_response`` parts are left out (``normalize_parts_message`` makes them tool
    messages of their own)."""
    tally = tally if tally is not None else Tally("openai-chat")
    where = f"messages[{index}]"
    if not isinstance(msg, dict):
        raise ImportFormatError(f"{where}: a message must be an object, got {type(msg).__name__}")
    role = msg.get("role")
    if not isinstance(role, str) or not role:
        raise ImportFormatError(f"{where}: missing 'role' (expected system/user/assistant/tool)")
    out = NormMessage(index=index, role=role, text="")
    tally.add("messages")
    if role in ("system", "developer"):
        tally.add("system_parts")
    elif role in ("tool", "function", "ipython"):
        tally.add("tool_results")
    content = msg.get("content")
    if "parts" in msg and content is None:
        content = msg["parts"]
    texts: list[str] = []
    reasoning: list[str] = []
    if isinstance(content, list):
        for j, part in enumerate(content):
            pw = f"{where}.content[{j}]"
            if isinstance(part, str):
                texts.append(part)
            elif not isinstance(part, dict):
                raise ImportFormatError(f"{pw}: a content part must be an object or a string")
            elif not (results_apart and part.get("type") == "tool_call_response"):
                _read_part(part, pw, out, texts, reasoning, tally)
    elif content is not None:
        texts.append(text_of(content))
    _message_reasoning(msg, out, reasoning, tally)
    out.text = "\n".join(texts)
    out.reasoning = "\n".join(r for r in reasoning if r)
    out.tool_calls.extend(_message_calls(msg, where, tally))
    tcid = msg.get("tool_call_id")
    if tcid is None and isinstance(msg.get("tool_call_ids"), list) and msg["tool_call_ids"]:
        tcid = msg["tool_call_ids"][0]  # SWE-agent trajectories
    if tcid is not None:
        out.tool_call_id = str(tcid)
    if isinstance(msg.get("name"), str):
        out.name = msg["name"]
    return out


def _message_reasoning(
    msg: dict[str, Any], out: NormMessage, reasoning: list[str], tally: Tally
) -> None:
    """A message's own reasoning field (``reasoning_content`` as DeepSeek and Z.ai send it
    back, or a ``reasoning`` string): its text and a ``thinking`` part."""
    for key in ("reasoning_content", "reasoning"):
        if isinstance(msg.get(key), str) and msg[key]:
            reasoning.append(msg[key])
            out.thinking.append({"type": key, "chars": len(msg[key])})
            tally.add("thinking")


def _thought_text(part: dict[str, Any], value: Any) -> str:
    """A reasoning part's text (Mistral's thinking is a list of text chunks)."""
    thought = value if value is not None else part.get("thinking")
    if isinstance(thought, list):
        thought = "".join(
            str(c.get("text", "")) if isinstance(c, dict) else text_of(c) for c in thought
        )
    return text_of(thought)


#: The fields a part with no ``type`` holds its text in.
_TEXT_KEYS = frozenset({"text", "content", "value"})


def _read_part(
    part: dict[str, Any],
    pw: str,
    out: NormMessage,
    texts: list[str],
    reasoning: list[str],
    tally: Tally,
) -> None:
    """One content part of a message into its text, reasoning, calls or media (a part with
    no ``type`` is text if it holds one, else a part we do not know)."""
    ptype = part.get("type", "text" if _TEXT_KEYS.intersection(part) else None)
    if not isinstance(ptype, str):
        texts.append(tally.keep_unknown(pw, part))
        return
    value = part.get("text", part.get("content", part.get("value")))
    if ptype in ("text", "input_text", "output_text", "refusal"):
        texts.append(text_of(value if ptype != "refusal" else part.get("refusal", value)))
    elif ptype in ("reasoning", "thinking"):
        text = _thought_text(part, value)
        reasoning.append(text)
        out.thinking.append({"type": ptype, "chars": len(text)})
        tally.add("thinking")
    elif ptype == "tool_call":
        out.tool_calls.append(_call_from_obj(part.get("value", part), pw))
        tally.add("tool_calls")
    elif ptype == "tool_call_response":
        out.tool_call_id = str(part["id"]) if part.get("id") else out.tool_call_id
        texts.append(text_of(part.get("response", part.get("result", value))))
        if out.role not in ("tool", "function", "ipython"):
            tally.add("tool_results")
    elif ptype in _MEDIA_PARTS:
        line, info = _media_part(part, ptype, pw)
        texts.append(line)
        out.media.append(info)
        tally.add("media")
    else:  # a part we do not know: kept whole, as JSON text, and reported
        texts.append(tally.keep_unknown(pw, part))


def _message_calls(msg: dict[str, Any], where: str, tally: Tally) -> list[ToolCall]:
    """A message's ``tool_calls`` (and a legacy single ``function_call``)."""
    calls = msg.get("tool_calls") or []
    if not isinstance(calls, list):
        raise ImportFormatError(
            f"{where}.tool_calls: expected a list of tool calls, got {type(calls).__name__}"
        )
    out = [_call_from_obj(call, f"{where}.tool_calls[{j}]") for j, call in enumerate(calls)]
    if isinstance(msg.get("function_call"), dict):  # legacy single function call
        out.append(_call_from_obj(msg["function_call"], f"{where}.function_call"))
    tally.add("tool_calls", len(out))
    return out


def _is_tool_response(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "tool_call_response"


def normalize_parts_message(msg: Any, index: int, tally: Tally | None = None) -> list[NormMessage]:
    """``normalize_message``, with each ``tool_call_response`` part of a message that is not a
    tool's own (pydantic-ai returns tool results in a ``user`` message, beside the user's
    text) as a tool message of its own, ids ``msg-<index>.<j>``, before the rest: a tool
    result, not words of the user (as the Anthropic reader splits ``tool_result`` blocks).
    The message is counted once, its results once each."""
    tally = tally if tally is not None else Tally("openai-chat")
    parts = msg.get("parts") if isinstance(msg, dict) and msg.get("content") is None else None
    if (
        not isinstance(parts, list)
        or msg.get("role") in ("tool", "function", "ipython")
        or not any(_is_tool_response(p) for p in parts)
    ):
        return [normalize_message(msg, index, tally)]
    results: list[NormMessage] = []
    for j, part in enumerate(parts):
        if _is_tool_response(part):
            # counted below as the message's result (normalize_message counts a tool
            # message and its response part); this one only reads it
            result = normalize_message({"role": "tool", "parts": [part]}, index)
            result.id = f"msg-{index}.{j}"
            results.append(result)
    main = normalize_message(msg, index, tally, results_apart=True)
    tally.add("tool_results", len(results))
    if main.text or main.tool_calls or main.reasoning or main.thinking or main.media or not results:
        return [*results, main]
    return results


def tool_from_obj(obj: Any, index: int) -> ToolDef:
    """OpenAI ``{"type":"function","function":{...}}`` or flat ``{name, ...}`` → ToolDef."""
    where = f"tools[{index}]"
    if not isinstance(obj, dict):
        raise ImportFormatError(f"{where}: a tool definition must be an object")
    fn = _inner(obj)
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise ImportFormatError(f"{where}: tool definition without a name")
    params = fn.get("parameters", fn.get("input_schema", {}))
    return ToolDef(
        name=name,
        description=str(fn.get("description") or ""),
        parameters=params if isinstance(params, dict) else {},
    )


def parse_tools(tools: Any) -> list[ToolDef]:
    """Tool definitions given as a list or as a JSON string holding one."""
    if tools is None:
        return []
    if isinstance(tools, str):
        try:
            tools = json.loads(tools) if tools.strip() else []
        except json.JSONDecodeError as exc:
            raise ImportFormatError(f"tools: not valid JSON ({exc.msg})") from exc
        except RecursionError as exc:
            raise ImportFormatError(f"tools: {TOO_DEEP}") from exc
    if not isinstance(tools, list):
        raise ImportFormatError("tools: expected a list of tool definitions")
    return [tool_from_obj(t, i) for i, t in enumerate(tools)]


def _response_output(message: dict[str, Any]) -> str | None:
    """The reply of a Chat Completions response's first choice (text and tool calls)."""
    try:
        return reply_text(normalize_message({"role": "assistant", **message}, 0))
    except ImportFormatError:  # a reply we cannot read as a message: its content only
        return text_of(message.get("content")) or None


def captured_input_from_messages(
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    now: datetime,
    query: str | None = None,
    window: int | None = None,
) -> CapturedInput:
    """An OpenAI-style ``messages`` list (and ``tools``) as a ctxscope captured input."""
    norm = [normalize_message(m, i) for i, m in enumerate(messages)]
    inp, _ = captured_input_from_norm(
        norm, tools=parse_tools(tools), now=now, query=query, window=window
    )
    return inp


def _created(request: dict[str, Any]) -> datetime | None:
    for holder in (request, request.get("response")):
        if isinstance(holder, dict) and isinstance(holder.get("created"), int | float):
            return datetime.fromtimestamp(float(holder["created"]), tz=UTC)
    return None


class Chat(RequestFormat):
    """The Chat Completions mapping (``request.RequestFormat``): the reply rides in the
    request (``response``, or ``usage``/``choices`` beside the messages)."""

    builder = BUILDER_NAME
    source = FORMAT
    usage_mapping = "openai-chat"

    def looks_like(self, data: Any) -> bool:
        return looks_like(data)

    def accepts(self, request: Any) -> bool:
        return isinstance(request, dict) and isinstance(request.get("messages"), list)

    def shape_error(self, request: Any) -> str:
        got = f"keys {sorted(request)[:6]}" if isinstance(request, dict) else type(request).__name__
        return f"an OpenAI chat request is an object with a 'messages' list; got {got}"

    def normalize(
        self, request: dict[str, Any], tally: Tally
    ) -> tuple[list[NormMessage], dict[str, Any]]:
        return [normalize_message(m, i, tally) for i, m in enumerate(request["messages"])], {}

    def items(self, request: dict[str, Any]) -> list[Any] | None:
        return cast(list[Any], request["messages"])

    def normalize_item(self, item: Any, index: int, tally: Tally) -> list[NormMessage]:
        return [normalize_message(item, index, tally)]

    def tools(self, request: dict[str, Any], tally: Tally) -> list[ToolDef]:
        tools = parse_tools(request.get("tools"))
        tally.add("tools", len(tools))
        return tools

    def identity(self, request: dict[str, Any]) -> tuple[Any, ...]:
        return request["messages"], request.get("tools")

    def reserve(self, request: dict[str, Any]) -> Any:
        return request.get("max_completion_tokens", request.get("max_tokens"))

    def window(self, request: dict[str, Any]) -> int | None:
        window = request.get("window")
        return window if isinstance(window, int) else None

    def response_of(self, request: dict[str, Any], response: Any) -> dict[str, Any] | None:
        reply = request.get("response")
        return reply if isinstance(reply, dict) else {}

    def created(self, request: dict[str, Any], response: dict[str, Any] | None) -> datetime | None:
        return _created(request)

    def usage(self, request: dict[str, Any], response: dict[str, Any] | None) -> dict[str, int]:
        return usage_from_obj(request.get("usage") or (response or {}).get("usage"))

    def output(self, request: dict[str, Any], response: dict[str, Any] | None) -> str | None:
        choices = (response or {}).get("choices") or request.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            message = choices[0].get("message")
            if isinstance(message, dict):
                return _response_output(message)
        return None

    def model(self, request: dict[str, Any], response: dict[str, Any] | None) -> Any:
        return request.get("model") or (response or {}).get("model")


REQUESTS = Chat()


def trace_from_request(
    request: dict[str, Any],
    *,
    now: datetime | None = None,
    session_id: str = "import",
    turn: int = 0,
    trace_id: str | None = None,
    query: str | None = None,
    default_now: datetime | None = None,
) -> Trace:
    """An OpenAI chat request (optionally with its ``response``/``usage``) → a trace.

    Without ``trace_id`` the id is a hash of the request, so importing the same request
    twice is a no-op in the store. Without ``now`` the request's ``created`` time is used,
    else ``default_now`` (importers pass the file's modification time), else the clock.
    """
    return REQUESTS.trace(
        request,
        now=now,
        session_id=session_id,
        turn=turn,
        trace_id=trace_id,
        query=query,
        default_now=default_now,
    )


# --------------------------------------------------------------------------- other shapes


def messages_from_sharegpt(
    conversations: list[Any], system: str | None = None
) -> list[dict[str, Any]]:
    """ShareGPT turns (``human``/``gpt``/``function_call``/``observation``) → OpenAI messages.

    A ``function_call`` turn holds ``{"name":..., "arguments":...}`` as JSON text; it gets a
    synthetic call id that the following ``observation`` turn answers.
    """
    roles = {
        "human": "user",
        "user": "user",
        "gpt": "assistant",
        "assistant": "assistant",
        "system": "system",
        "observation": "tool",
        "tool": "tool",
    }
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    pending: list[str] = []
    for i, turn in enumerate(conversations):
        if not isinstance(turn, dict) or "from" not in turn:
            raise ImportFormatError(f"conversations[{i}]: expected {{'from': ..., 'value': ...}}")
        who, value = turn["from"], turn.get("value", "")
        if who == "function_call":
            cid = f"call_{i}"
            call = _call_from_obj(value, f"conversations[{i}]")
            pending.append(cid)
            out.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": cid,
                            "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments},
                        }
                    ],
                }
            )
        elif who in roles:
            msg: dict[str, Any] = {"role": roles[who], "content": value}
            if roles[who] == "tool" and pending:
                msg["tool_call_id"] = pending.pop(0)
            out.append(msg)
        else:
            raise ImportFormatError(f"conversations[{i}]: unknown speaker {who!r}")
    return out


def requests_from_obj(data: Any) -> list[dict[str, Any]]:
    """Every chat request a JSON value holds.

    Accepted: a request ``{"messages": [...]}``; a bare list of messages; a SWE-agent
    trajectory ``{"history": [...]}``; a list of ShareGPT records ``{"conversations",
    "tools"}`` (one request each); a list of requests.
    """
    if isinstance(data, dict):
        if isinstance(data.get("messages"), list):
            return [data]
        if isinstance(data.get("history"), list):
            return [{"messages": data["history"], "tools": data.get("tools")}]
        if isinstance(data.get("conversations"), list):
            return [
                {
                    "messages": messages_from_sharegpt(data["conversations"], data.get("system")),
                    "tools": data.get("tools"),
                }
            ]
    if isinstance(data, list) and data:
        if all(isinstance(m, dict) and "role" in m for m in data):
            return [{"messages": data}]
        if all(
            isinstance(m, dict) and ("messages" in m or "conversations" in m or "history" in m)
            for m in data
        ):
            return [r for item in data for r in requests_from_obj(item)]
    raise ImportFormatError(
        "not an OpenAI-style chat request: expected {'messages': [...]}, a list of messages, "
        "a trajectory with 'history', or ShareGPT records with 'conversations'"
    )


def looks_like(data: Any) -> bool:
    """Whether a JSON value has a shape ``requests_from_obj`` reads: a request, a message
    list, a trajectory with ``history``, ShareGPT records, or a list of requests."""
    keys = ("messages", "conversations", "history")
    if isinstance(data, dict):
        return any(isinstance(data.get(k), list) for k in keys)
    return (
        isinstance(data, list)
        and bool(data)
        and (
            all(isinstance(m, dict) and "role" in m for m in data)
            or all(isinstance(m, dict) and any(k in m for k in keys) for m in data)
        )
    )


def traces_from_obj(
    data: Any,
    *,
    session_id: str = "import",
    now: datetime | None = None,
    default_now: datetime | None = None,
) -> list[Trace]:
    """One trace per request found in ``data`` (turn = its position)."""
    return [
        REQUESTS.trace(req, now=now, session_id=session_id, turn=i, default_now=default_now)
        for i, req in enumerate(requests_from_obj(data))
    ]


def read(data: Any, *, where: str, session_id: str, default_now: datetime | None) -> list[Trace]:
    """The chat format's reader (``registry.Reader``)."""
    return traces_from_obj(data, session_id=session_id, default_now=default_now)


# --------------------------------------------------------------------------- live calls


def _reply_lines(response: dict[str, Any]) -> list[str]:
    """A live reply's first choice: its text, and each tool call as a ``name(args)`` line."""
    choices = response.get("choices")
    if not (isinstance(choices, list) and choices and isinstance(choices[0], dict)):
        return []
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return []
    text = text_of(message.get("content"))
    lines = [text] if text else []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            lines.append(call_line(fn.get("name"), fn.get("arguments")))
    return lines


def usage_summary(usage: dict[str, int]) -> dict[str, int]:
    """``input`` (the whole prompt, cached tokens included), ``output`` and ``cached`` from
    a flattened Chat Completions or Responses usage."""
    pairs = (
        ("input", ("prompt_tokens", "input_tokens")),
        ("output", ("completion_tokens", "output_tokens")),
        ("cached", ("prompt_tokens_details.cached_tokens", "input_tokens_details.cached_tokens")),
    )
    out: dict[str, int] = {}
    for name, keys in pairs:
        key = next((k for k in keys if k in usage), None)
        if key is not None:
            out[name] = usage[key]
    return out


def _conversation(request: dict[str, Any]) -> list[Any]:
    raw = request.get("messages")
    messages: list[Any] = raw if isinstance(raw, list) else []
    system = [
        m.get("content")
        for m in messages
        if isinstance(m, dict) and m.get("role") in ("system", "developer")
    ][:1]
    return [system, first_user(messages)]


def _live_trace(
    request: dict[str, Any],
    response: dict[str, Any] | None,
    session: str,
    now: datetime,
    incremental: Incremental | None = None,
) -> Trace:
    merged = {**request, "response": response} if response else request
    return REQUESTS.trace(merged, session_id=session, now=now, incremental=incremental)


LIVE = LiveConverter(
    trace=_live_trace, reply=_reply_lines, usage=usage_summary, conversation=_conversation
)
