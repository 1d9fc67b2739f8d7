"""Import Amazon Bedrock Converse requests (``Converse`` / ``ConverseStream``) as traces.

What boto3's ``bedrock-runtime`` ``converse`` calls, the Strands agents and LangChain's
``ChatBedrockConverse`` send, whatever model serves them. Content blocks carry no ``type``:
a block is an object with one key naming its kind. The request is mapped onto the same
normalised messages as an OpenAI chat request (``ctxcore.formats.openai``):

- ``system[]`` → the system instructions, one system part per ``{text}`` (or
  ``{guardContent}``) block; a ``{cachePoint}`` marks the cache, as Anthropic's
  ``cache_control`` does (``metadata.import.cache_control``);
- ``messages[].content[]``: ``{text}`` → text; ``{toolUse: {toolUseId, name, input}}`` → a
  tool call of the assistant message; ``{toolResult: {toolUseId, content, status}}`` → a
  ``tool:<toolUseId>`` packet (content blocks ``{text}``, ``{json}`` as its JSON text,
  ``{image}``/``{document}``/``{video}`` as placeholders; ``status: error`` kept); ``{image}``/
  ``{document}``/``{video}`` → a placeholder line naming format and size, recorded in
  ``metadata.media`` (documents with a text source, or text bytes — txt, md, csv, html —
  keep their text); ``{reasoningContent}``
  → the message's reasoning and a ``thinking`` part (redacted content by its size, no text;
  metadata, not counted); ``{guardContent}`` → its text, the
  guardrail qualifiers kept in metadata; ``{citationsContent}`` → its text; any other block
  → its JSON kept as text and listed in ``metadata.import.kept_as_text``;
- ``toolConfig.tools[].toolSpec`` → the tool definitions (schema ``inputSchema.json``);
  ``inferenceConfig.maxTokens`` → the output reserve; ``modelId`` → the model.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from ctxcore.errors import ImportFormatError
from ctxcore.formats.accounting import Tally
from ctxcore.formats.norm import NormMessage, Parts, ToolCall
from ctxcore.formats.request import RequestFormat
from ctxcore.models import ToolDef

BUILDER_NAME = "import/bedrock"
FORMAT = "bedrock-converse"

#: Every content block kind of the Converse API (one key per block, no ``type``).
_BLOCKS = frozenset(
    {
        "text",
        "image",
        "document",
        "video",
        "toolUse",
        "toolResult",
        "guardContent",
        "reasoningContent",
        "cachePoint",
        "citationsContent",
    }
)
#: Top-level fields only a Converse request has.
_REQUEST_KEYS = frozenset(
    {
        "modelId",
        "toolConfig",
        "inferenceConfig",
        "guardrailConfig",
        "additionalModelRequestFields",
        "additionalModelResponseFieldPaths",
        "promptVariables",
        "performanceConfig",
    }
)
_MEDIA = ("image", "document", "video")
#: Document formats that are text: their bytes are read as UTF-8 (the others are binary).
_TEXT_FORMATS = frozenset({"txt", "md", "csv", "html"})


def _is_block(block: Any) -> bool:
    return isinstance(block, dict) and len(block) == 1 and next(iter(block)) in _BLOCKS


def looks_like(data: Any) -> bool:
    """Whether a JSON value is a Converse request (typeless one-key content blocks), not an
    Anthropic or OpenAI request."""
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        return False
    if any(k in data for k in _REQUEST_KEYS):
        return True
    system = data.get("system")
    if isinstance(system, list) and system and all(_is_block(b) for b in system):
        return True
    msgs = [m for m in data["messages"][:50] if isinstance(m, dict)]
    blocks = [b for m in msgs if isinstance(m.get("content"), list) for b in m["content"]]
    return (
        bool(blocks)
        and all(m.get("role") in ("user", "assistant") for m in msgs)
        and all(_is_block(b) for b in blocks)
    )


def _decoded(data: Any) -> str | None:
    """A text document's base64 bytes as its text (None when they are not base64 of UTF-8:
    the block is then a placeholder, as a binary document is)."""
    if not isinstance(data, str):
        return None
    try:
        return base64.b64decode(data, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):  # UnicodeDecodeError is a ValueError
        return None


def _media(kind: str, body: Any, path: str) -> tuple[str, dict[str, Any]]:
    """A placeholder line for an image, document or video block, and what it was."""
    info: dict[str, Any] = {"type": kind, "path": path}
    spec: dict[str, Any] = body if isinstance(body, dict) else {}
    if isinstance(spec.get("format"), str):
        info["format"] = spec["format"]
    if isinstance(spec.get("name"), str):
        info["name"] = spec["name"]
    raw = spec.get("source")
    source: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if isinstance(source.get("bytes"), str):  # base64 in JSON
        info["bytes"] = len(source["bytes"]) * 3 // 4
    s3 = source.get("s3Location")
    if isinstance(s3, dict) and isinstance(s3.get("uri"), str):
        info["url"] = s3["uri"]
    text = source.get("text")
    if kind == "document" and not isinstance(text, str) and info.get("format") in _TEXT_FORMATS:
        text = _decoded(source.get("bytes"))
    if kind == "document" and isinstance(text, str):
        head = f"[document {info.get('name') or ''}]".replace(" ]", "]")
        return f"{head}\n{text}", info
    desc = " ".join(
        str(x)
        for x in (
            info.get("format"),
            f"{info['bytes']:,} bytes" if "bytes" in info else None,
            info.get("url"),
            info.get("name"),
        )
        if x
    )
    return f"[{kind}{': ' + desc if desc else ''}]", info


def _guard_text(body: Any) -> tuple[str, list[str]] | None:
    """A guardContent block's text and its qualifiers (``grounding_source``, ``query``…)."""
    inner = body.get("text") if isinstance(body, dict) else None
    if isinstance(inner, dict) and isinstance(inner.get("text"), str):
        quals = inner.get("qualifiers")
        return inner["text"], [str(q) for q in quals] if isinstance(quals, list) else []
    return None


def _result_text(content: Any, path: str, tally: Tally, media: list[dict[str, Any]]) -> str:
    """A toolResult's content blocks: text, JSON (as its text), media; the rest kept."""
    if content is None:
        return ""
    if not isinstance(content, list):
        raise ImportFormatError(f"{path}.content: expected a list of blocks")
    texts: list[str] = []
    for j, block in enumerate(content):
        bpath = f"{path}.content[{j}]"
        key = next(iter(block)) if isinstance(block, dict) and len(block) == 1 else None
        if key == "text" and isinstance(block["text"], str):
            texts.append(block["text"])
        elif key == "json":
            texts.append(json.dumps(block["json"], ensure_ascii=False))
        elif key in _MEDIA:
            line, info = _media(str(key), block[key], bpath)
            texts.append(line)
            media.append(info)
            tally.add("media")
        else:
            texts.append(tally.keep_unknown(bpath, block))
    return "\n".join(texts)


def _system(request: dict[str, Any], tally: Tally) -> list[NormMessage]:
    system = request.get("system")
    if system is None:
        return []
    if not isinstance(system, list):
        raise ImportFormatError(f"system: expected a list of blocks, got {type(system).__name__}")
    out: list[NormMessage] = []
    for k, block in enumerate(system):
        path = f"system[{k}]"
        if isinstance(block, dict) and set(block) == {"cachePoint"}:
            tally.mark(path, block["cachePoint"])
            continue
        guard = _guard_text(block.get("guardContent")) if isinstance(block, dict) else None
        if isinstance(block, dict) and set(block) == {"text"} and isinstance(block["text"], str):
            text = block["text"]
        elif guard is not None:
            text = guard[0]
        else:
            text = tally.keep_unknown(path, block)
        out.append(NormMessage(index=-1, role="system", text=text, id=f"system-{k}"))
        tally.add("system_parts")
    return out


def normalize(request: dict[str, Any], tally: Tally) -> list[NormMessage]:
    """The request's system blocks and messages as normalised messages (tool results split
    out of user messages, in order)."""
    out = _system(request, tally)
    for i, msg in enumerate(request["messages"]):
        out.extend(_message(msg, i, tally))
    return out


def _message(msg: Any, i: int, tally: Tally) -> list[NormMessage]:
    """One Converse message: the tool results it holds, then the message itself."""
    where = f"messages[{i}]"
    if not isinstance(msg, dict):
        raise ImportFormatError(f"{where}: a message must be an object")
    role = msg.get("role")
    if role not in ("user", "assistant"):
        raise ImportFormatError(f"{where}: role must be 'user' or 'assistant', got {role!r}")
    content = msg.get("content")
    if not isinstance(content, list):
        raise ImportFormatError(
            f"{where}.content: expected a list of blocks, got {type(content).__name__}"
        )
    tally.add("messages")
    parts = Parts(NormMessage(index=i, role=role, text=""))
    guards: list[list[str]] = []
    for j, block in enumerate(content):
        path = f"{where}.content[{j}]"
        if not _is_block(block):
            parts.texts.append(tally.keep_unknown(path, block))
            continue
        key = next(iter(block))
        guard = _guard_text(block[key]) if key == "guardContent" else None
        if guard is not None:
            parts.texts.append(guard[0])
            guards.append(guard[1])
        elif not _read_block(block, key, path, f"msg-{i}.{j}", parts, tally):
            parts.texts.append(tally.keep_unknown(path, block))
    if guards:
        parts.main.extra["guard_qualifiers"] = guards
    return parts.messages()


def _reasoning(body: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """A ``reasoningContent`` block's text and its part: readable reasoning (its signature
    by its size), or redacted content (its encrypted size, no text)."""
    rt = body.get("reasoningText")
    if isinstance(rt, dict) and isinstance(rt.get("text"), str):
        part: dict[str, Any] = {"type": "reasoningText", "chars": len(rt["text"])}
        if isinstance(rt.get("signature"), str):
            part["signature_chars"] = len(rt["signature"])
        return str(rt["text"]), part
    if "redactedContent" in body:
        data = body["redactedContent"]
        size = len(data) if isinstance(data, str | bytes) else 0
        return "", {"type": "redactedContent", "encrypted_chars": size}
    return None


def _tool_use(body: dict[str, Any], path: str) -> ToolCall:
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise ImportFormatError(f"{path}.toolUse: a tool use needs a name")
    tid = body.get("toolUseId")
    return ToolCall(
        id=str(tid) if isinstance(tid, str) and tid else None,
        name=name,
        arguments=json.dumps(body.get("input", {}), ensure_ascii=False, separators=(",", ":")),
    )


def _tool_result(
    body: dict[str, Any], path: str, mid: str, index: int, tally: Tally
) -> NormMessage:
    media: list[dict[str, Any]] = []
    text = _result_text(body.get("content"), f"{path}.toolResult", tally, media)
    tid = body.get("toolUseId")
    return NormMessage(
        index=index,
        role="tool",
        text=text,
        tool_call_id=str(tid) if isinstance(tid, str) and tid else None,
        id=mid,
        media=media,
        extra={"is_error": True} if body.get("status") == "error" else {},
    )


def _read_block(
    block: dict[str, Any], key: str, path: str, mid: str, parts: Parts, tally: Tally
) -> bool:
    """One content block (``{key: body}``) into the message's parts; False for a block
    this reader does not know (kept as text by the caller)."""
    body = block[key]
    main = parts.main
    if key == "text" and isinstance(body, str):
        parts.texts.append(body)
    elif key == "cachePoint":
        tally.mark(path, body)
    elif key in _MEDIA:
        line, info = _media(key, body, path)
        parts.texts.append(line)
        main.media.append(info)
        tally.add("media")
    elif key == "reasoningContent" and isinstance(body, dict):
        reasoning = _reasoning(body)
        if reasoning is None:
            return False
        parts.reasoning.append(reasoning[0])
        main.thinking.append(reasoning[1])
        tally.add("thinking")
    elif key == "toolUse" and main.role == "assistant" and isinstance(body, dict):
        main.tool_calls.append(_tool_use(body, path))
        tally.add("tool_calls")
    elif key == "toolResult" and isinstance(body, dict):
        parts.results.append(_tool_result(body, path, mid, main.index, tally))
        tally.add("tool_results")
    elif key == "citationsContent" and isinstance(body, dict):
        cited = body.get("content")
        parts.texts.append(
            "\n".join(
                str(c.get("text", ""))
                for c in (cited if isinstance(cited, list) else [])
                if isinstance(c, dict)
            )
        )
    else:
        return False
    return True


def parse_tools(request: dict[str, Any], tally: Tally) -> list[ToolDef]:
    """``toolConfig.tools[]``: ``toolSpec`` definitions and ``systemTool``s."""
    config = request.get("toolConfig")
    if config is None:
        return []
    if not isinstance(config, dict) or not isinstance(config.get("tools", []), list):
        raise ImportFormatError("toolConfig: expected an object with a 'tools' list")
    out: list[ToolDef] = []
    for k, tool in enumerate(config.get("tools", [])):
        path = f"toolConfig.tools[{k}]"
        if not isinstance(tool, dict) or len(tool) != 1:
            raise ImportFormatError(f"{path}: a tool is an object with one key (toolSpec…)")
        key, spec = next(iter(tool.items()))
        if key == "cachePoint":
            tally.mark(path, spec)
            continue
        name = spec.get("name") if isinstance(spec, dict) else None
        if not isinstance(spec, dict) or not isinstance(name, str) or not name:
            raise ImportFormatError(f"{path}.{key}: a tool needs a name")
        schema = spec.get("inputSchema")
        params = schema.get("json") if isinstance(schema, dict) else None
        if key != "toolSpec" or not isinstance(params, dict):
            # a system tool (or a spec without a schema): its settings are its schema
            params = {k2: v for k2, v in spec.items() if k2 not in ("name", "description")}
        out.append(
            ToolDef(name=name, description=str(spec.get("description") or ""), parameters=params)
        )
        tally.add("tools")
    return out


def _output(response: dict[str, Any]) -> str | None:
    """The reply's text, and its tool uses as ``name(input)`` lines."""
    output = response.get("output")
    message = output.get("message") if isinstance(output, dict) else None
    blocks = message.get("content") if isinstance(message, dict) else None
    if not isinstance(blocks, list):
        return None
    lines: list[str] = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        use = block.get("toolUse")
        if isinstance(block.get("text"), str):
            lines.append(block["text"])
        elif isinstance(use, dict) and isinstance(use.get("name"), str):
            lines.append(f"{use['name']}({json.dumps(use.get('input', {}), ensure_ascii=False)})")
    return "\n".join(lines) or None


class Converse(RequestFormat):
    """The Bedrock Converse mapping (``request.RequestFormat``)."""

    builder = BUILDER_NAME
    source = FORMAT
    usage_mapping = "bedrock"
    shape = "a Bedrock Converse request is an object with a 'messages' list"

    def looks_like(self, data: Any) -> bool:
        return looks_like(data)

    def accepts(self, request: Any) -> bool:
        return isinstance(request, dict) and isinstance(request.get("messages"), list)

    def normalize(
        self, request: dict[str, Any], tally: Tally
    ) -> tuple[list[NormMessage], dict[str, Any]]:
        return normalize(request, tally), {}

    def tools(self, request: dict[str, Any], tally: Tally) -> list[ToolDef]:
        return parse_tools(request, tally)

    def identity(self, request: dict[str, Any]) -> tuple[Any, ...]:
        return request.get("system"), request["messages"], request.get("toolConfig")

    def reserve(self, request: dict[str, Any]) -> Any:
        inference = request.get("inferenceConfig")
        return inference.get("maxTokens") if isinstance(inference, dict) else None

    def request_meta(self, request: dict[str, Any]) -> dict[str, Any]:
        guardrail = request.get("guardrailConfig")
        return {"guardrail": guardrail} if isinstance(guardrail, dict) else {}

    def response_meta(self, response: dict[str, Any]) -> dict[str, Any]:
        stop = response.get("stopReason")
        return {"stop_reason": stop} if isinstance(stop, str) else {}

    def output(self, request: dict[str, Any], response: dict[str, Any] | None) -> str | None:
        return _output(response) if response is not None else None

    def model(self, request: dict[str, Any], response: dict[str, Any] | None) -> Any:
        return request.get("modelId")


REQUESTS = Converse()
trace_from_request = REQUESTS.trace
traces_from_obj = REQUESTS.traces


__all__ = ["FORMAT", "REQUESTS", "looks_like", "normalize", "trace_from_request", "traces_from_obj"]
