"""A model call's prompt as the Vercel AI SDK records it (``experimental_telemetry``).

Each call to the provider is an ``ai.generateText.doGenerate`` / ``ai.streamText.doStream``
(…``doGenerate``/``doStream``) span; the outer ``ai.generateText`` span and ``ai.toolCall``
spans carry no prompt of their own. The call span holds:

- ``ai.prompt.messages``: JSON, the messages the provider was sent: ``system`` (a string),
  ``user`` (``text``, ``image``, ``file`` parts), ``assistant`` (``text``, ``reasoning``,
  ``tool-call`` ``{toolCallId, toolName, input}`` — ``args`` before AI SDK 5) and ``tool``
  (``tool-result`` ``{toolCallId, toolName, output: {type, value}}`` — ``result`` before 5);
  each tool result becomes a tool message of its own;
- ``ai.prompt.tools``: a list of JSON strings, one tool each (``inputSchema``, or
  ``parameters`` before 5); ``ai.prompt.toolChoice``;
- ``ai.usage.promptTokens`` / ``completionTokens`` (before 5) or ``inputTokens`` /
  ``outputTokens`` / ``totalTokens`` / ``reasoningTokens`` / ``cachedInputTokens``, besides
  ``gen_ai.usage.*``; ``ai.response.text`` (the answer); ``ai.model.id``;
  ``ai.settings.maxOutputTokens`` (``maxTokens`` before 5);
- ``ai.telemetry.metadata.*``: the app's own metadata (``sessionId`` names the session).
"""

from __future__ import annotations

import json
from typing import Any

from ctxcore.errors import ImportFormatError
from ctxcore.formats.accounting import Tally
from ctxcore.formats.norm import NormMessage, Parts, ToolCall
from ctxcore.formats.openai import text_of
from ctxcore.formats.otlp_records import Prompt, SpanRecord, structured
from ctxcore.models import ToolDef

FORMAT = "vercel-ai"
#: usage key -> the attributes that carry it, first found wins (AI SDK 5+, then 4, then
#: the GenAI conventions' names the SDK also writes).
USAGE_KEYS: dict[str, tuple[str, ...]] = {
    "input_tokens": ("ai.usage.inputTokens", "ai.usage.promptTokens", "gen_ai.usage.input_tokens"),
    "output_tokens": (
        "ai.usage.outputTokens",
        "ai.usage.completionTokens",
        "gen_ai.usage.output_tokens",
    ),
    "total_tokens": ("ai.usage.totalTokens",),
    "reasoning_tokens": ("ai.usage.reasoningTokens", "ai.usage.outputTokenDetails.reasoningTokens"),
    "cache_read_tokens": (
        "ai.usage.cachedInputTokens",
        "ai.usage.inputTokenDetails.cacheReadTokens",
    ),
}


def is_vercel(attrs: dict[str, Any]) -> bool:
    """Whether a span was recorded by the AI SDK."""
    op = attrs.get("ai.operationId")
    return "ai.prompt.messages" in attrs or (isinstance(op, str) and op.startswith("ai."))


def _media(part: dict[str, Any], path: str, tally: Tally) -> tuple[str, dict[str, Any]]:
    kind = str(part.get("type"))
    info: dict[str, Any] = {"type": kind, "path": path}
    media_type = part.get("mediaType", part.get("mimeType"))
    if isinstance(media_type, str):
        info["media_type"] = media_type
    data = part.get("image", part.get("data"))
    if isinstance(data, str):
        if data.startswith(("http://", "https://")):
            info["url"] = data
        else:
            info["bytes"] = (
                len(data.partition(",")[2] if data.startswith("data:") else data) * 3 // 4
            )
    if isinstance(part.get("filename"), str):
        info["filename"] = part["filename"]
    tally.add("media")
    desc = " ".join(
        str(x)
        for x in (
            info.get("media_type"),
            f"{info['bytes']:,} bytes" if "bytes" in info else None,
            info.get("url"),
            info.get("filename"),
        )
        if x
    )
    return f"[{kind}{': ' + desc if desc else ''}]", info


def _tool_output(part: dict[str, Any]) -> str:
    """A tool result's output: ``{type: text|json|error-text|error-json|content, value}``
    (AI SDK 5+) or the bare ``result`` (before)."""
    out = part.get("output", part.get("result"))
    if isinstance(out, dict) and "type" in out and "value" in out:
        value = out["value"]
        if out["type"] == "content" and isinstance(value, list):
            return "\n".join(
                text_of(v.get("text"))
                if isinstance(v, dict) and v.get("type") == "text"
                else text_of(v)
                for v in value
            )
        return text_of(value)
    return text_of(out)


def normalize(messages: list[Any], tally: Tally, where: str) -> list[NormMessage]:
    """The AI SDK's prompt messages as normalised messages (tool results split out)."""
    out: list[NormMessage] = []
    for i, msg in enumerate(messages):
        mw = f"ai.prompt.messages[{i}]"
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise ImportFormatError(f"{where}: {mw}: a message needs a role")
        role = msg["role"]
        tally.add("messages")
        if role == "system":
            tally.add("system_parts")
        content = msg.get("content")
        if content is None or isinstance(content, str):
            out.append(NormMessage(index=i, role=role, text=content or ""))
            continue
        if not isinstance(content, list):
            raise ImportFormatError(
                f"{where}: {mw}.content: expected a string or a list of parts, got "
                f"{type(content).__name__}"
            )
        parts = Parts(NormMessage(index=i, role=role, text=""))
        for j, part in enumerate(content):
            path = f"{mw}.content[{j}]"
            if not isinstance(part, dict) or not _read_part(
                part, path, f"msg-{i}.{j}", parts, tally
            ):
                parts.texts.append(tally.keep_unknown(path, part))
        out.extend(parts.messages())
    return out


def _tool_call(part: dict[str, Any]) -> ToolCall:
    args = part.get("input", part.get("args", {}))
    return ToolCall(
        id=str(part["toolCallId"]) if part.get("toolCallId") else None,
        name=part["toolName"],
        arguments=args
        if isinstance(args, str)
        else json.dumps(args, ensure_ascii=False, separators=(",", ":")),
    )


def _read_part(part: dict[str, Any], path: str, mid: str, parts: Parts, tally: Tally) -> bool:
    """One content part into the message's parts; False for a part this reader does not
    know (kept as text by the caller)."""
    ptype = part.get("type")
    main = parts.main
    if ptype == "text":
        parts.texts.append(text_of(part.get("text")))
    elif ptype == "reasoning":
        parts.reasoning.append(text_of(part.get("text")))
    elif ptype in ("image", "file"):
        line, info = _media(part, path, tally)
        parts.texts.append(line)
        main.media.append(info)
    elif ptype == "tool-call" and isinstance(part.get("toolName"), str):
        main.tool_calls.append(_tool_call(part))
        tally.add("tool_calls")
    elif ptype == "tool-result":
        tcid = part.get("toolCallId")
        name = part.get("toolName")
        parts.results.append(
            NormMessage(
                index=main.index,
                role="tool",
                text=_tool_output(part),
                tool_call_id=str(tcid) if tcid else None,
                name=name if isinstance(name, str) else None,
                id=mid,
            )
        )
        tally.add("tool_results")
    else:
        return False
    return True


def _tools(value: Any, where: str) -> list[ToolDef]:
    """``ai.prompt.tools``: a list of JSON strings (one tool each), or one JSON list."""
    value = structured(value, "ai.prompt.tools", where)
    if not isinstance(value, list):
        raise ImportFormatError(f"{where}: ai.prompt.tools must be a list of tools")
    out: list[ToolDef] = []
    for k, item in enumerate(value):
        tool = structured(item, f"ai.prompt.tools[{k}]", where)
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise ImportFormatError(f"{where}: ai.prompt.tools[{k}]: a tool needs a name")
        schema = tool.get("inputSchema", tool.get("parameters"))
        if not isinstance(schema, dict):
            # a provider-defined tool (web search, code execution…): its settings describe it
            schema = {key: v for key, v in tool.items() if key not in ("name", "description")}
        out.append(
            ToolDef(
                name=tool["name"], description=str(tool.get("description") or ""), parameters=schema
            )
        )
    return out


def prompt_from_span(span: SpanRecord) -> Prompt | None:
    """The call span's prompt; ``None`` for the AI SDK's other spans."""
    attrs, where = span.attrs, span.where
    raw = attrs.get("ai.prompt.messages")
    if raw is None:
        return None
    messages = structured(raw, "ai.prompt.messages", where)
    if not isinstance(messages, list):
        raise ImportFormatError(f"{where}: ai.prompt.messages must be a list of messages")
    tally = Tally(FORMAT)
    norm = normalize(messages, tally, where)
    tools = _tools(attrs["ai.prompt.tools"], where) if "ai.prompt.tools" in attrs else []
    tally.add("tools", len(tools))
    usage: dict[str, int] = {}
    for key, names in USAGE_KEYS.items():
        for name in names:
            value = attrs.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                usage[key] = int(value)
                break
    model = attrs.get("ai.model.id") or attrs.get("gen_ai.request.model")
    reserve = attrs.get("ai.settings.maxOutputTokens", attrs.get("ai.settings.maxTokens"))
    text = attrs.get("ai.response.text")
    return Prompt(
        messages=norm,
        tally=tally,
        tools=tools,
        usage=usage,
        usage_mapping="vercel-ai",
        output=text if isinstance(text, str) and text else None,
        model=model if isinstance(model, str) else None,
        output_reserve=reserve if isinstance(reserve, int) and reserve >= 0 else None,
        notes={"messages_from": "ai.prompt.messages"},
    )


__all__ = ["FORMAT", "USAGE_KEYS", "is_vercel", "normalize", "prompt_from_span"]
