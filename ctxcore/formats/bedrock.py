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
  → the message's reasoning (metadata, not counted); ``{guardContent}`` → its text, the
  guardrail qualifiers kept in metadata; ``{citationsContent}`` → its text; any other block
  → its JSON kept as text and listed in ``metadata.import.kept_as_text``;
- ``toolConfig.tools[].toolSpec`` → the tool definitions (schema ``inputSchema.json``);
  ``inferenceConfig.maxTokens`` → the output reserve; ``modelId`` → the model.
"""

from __future__ import annotations

import base64
import binascii
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
            tally.cache_control.append(path)
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
        main = NormMessage(index=i, role=role, text="")
        texts: list[str] = []
        reasoning: list[str] = []
        results: list[NormMessage] = []
        guards: list[list[str]] = []
        for j, block in enumerate(content):
            path = f"{where}.content[{j}]"
            if not _is_block(block):
                texts.append(tally.keep_unknown(path, block))
                continue
            key = next(iter(block))
            body = block[key]
            guard = _guard_text(body) if key == "guardContent" else None
            if key == "text" and isinstance(body, str):
                texts.append(body)
            elif guard is not None:
                texts.append(guard[0])
                guards.append(guard[1])
            elif key == "cachePoint":
                tally.cache_control.append(path)
            elif key in _MEDIA:
                line, info = _media(key, body, path)
                texts.append(line)
                main.media.append(info)
                tally.add("media")
            elif key == "reasoningContent" and isinstance(body, dict):
                rt = body.get("reasoningText")
                if isinstance(rt, dict) and isinstance(rt.get("text"), str):
                    reasoning.append(rt["text"])
                elif "redactedContent" in body:
                    reasoning.append("[redacted reasoning]")
                else:
                    texts.append(tally.keep_unknown(path, block))
            elif key == "toolUse" and role == "assistant" and isinstance(body, dict):
                name = body.get("name")
                if not isinstance(name, str) or not name:
                    raise ImportFormatError(f"{path}.toolUse: a tool use needs a name")
                tid = body.get("toolUseId")
                main.tool_calls.append(
                    ToolCall(
                        id=str(tid) if isinstance(tid, str) and tid else None,
                        name=name,
                        arguments=json.dumps(
                            body.get("input", {}), ensure_ascii=False, separators=(",", ":")
                        ),
                    )
                )
                tally.add("tool_calls")
            elif key == "toolResult" and isinstance(body, dict):
                media: list[dict[str, Any]] = []
                text = _result_text(body.get("content"), f"{path}.toolResult", tally, media)
                tid = body.get("toolUseId")
                status = body.get("status")
                results.append(
                    NormMessage(
                        index=i,
                        role="tool",
                        text=text,
                        tool_call_id=str(tid) if isinstance(tid, str) and tid else None,
                        id=f"msg-{i}.{j}",
                        media=media,
                        extra={"is_error": True} if status == "error" else {},
                    )
                )
                tally.add("tool_results")
            elif key == "citationsContent" and isinstance(body, dict):
                parts = body.get("content")
                texts.append(
                    "\n".join(
                        str(p.get("text", ""))
                        for p in (parts if isinstance(parts, list) else [])
                        if isinstance(p, dict)
                    )
                )
            else:
                texts.append(tally.keep_unknown(path, block))
        main.text = "\n".join(texts)
        main.reasoning = "\n".join(r for r in reasoning if r)
        if guards:
            main.extra["guard_qualifiers"] = guards
        out.extend(results)
        if main.text or main.tool_calls or main.reasoning or main.media or not results:
            out.append(main)
    return out


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
            tally.cache_control.append(path)
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


def trace_from_request(
    request: dict[str, Any],
    *,
    session_id: str | None = None,
    turn: int = 0,
    now: datetime | None = None,
    default_now: datetime | None = None,
    response: dict[str, Any] | None = None,
) -> Trace:
    """One Converse request (and, if given, its response) → a trace."""
    if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
        raise ImportFormatError("a Bedrock Converse request is an object with a 'messages' list")
    tally = Tally(FORMAT)
    norm = normalize(request, tally)
    tools = parse_tools(request, tally)
    when = now or default_now or datetime.now(UTC)
    inference = request.get("inferenceConfig")
    reserve = inference.get("maxTokens") if isinstance(inference, dict) else None
    inp, flat = captured_input_from_norm(
        norm,
        tools=tools,
        now=when,
        output_reserve=reserve
        if isinstance(reserve, int) and not isinstance(reserve, bool) and reserve >= 0
        else None,
    )
    meta: dict[str, Any] = {"import": tally.to_metadata()}
    if isinstance(request.get("guardrailConfig"), dict):
        meta["guardrail"] = request["guardrailConfig"]
    response = response if isinstance(response, dict) else None
    usage: dict[str, int] = {}
    output = None
    if response is not None:
        usage = usage_from_obj(response.get("usage"))
        output = _output(response)
        if isinstance(response.get("stopReason"), str):
            meta["stop_reason"] = response["stopReason"]
    model = request.get("modelId")
    return make_trace(
        inp,
        flat,
        builder=BUILDER_NAME,
        model=model if isinstance(model, str) else None,
        trace_id=stable_id(
            BUILDER_NAME, request.get("system"), request["messages"], request.get("toolConfig")
        ),
        session_id=session_id or "import",
        turn=turn,
        created_at=when,
        usage=usage,
        output=output,
        metadata=meta,
    )


def traces_from_obj(
    data: Any, *, session_id: str | None = None, default_now: datetime | None = None
) -> list[Trace]:
    """A request, a ``{"request": ..., "response": ...}`` pair, or a list of either."""
    return each_request(data, trace_from_request, session_id=session_id, default_now=default_now)


__all__ = ["FORMAT", "looks_like", "normalize", "trace_from_request", "traces_from_obj"]
