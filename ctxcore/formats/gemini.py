"""Import Gemini ``generateContent`` requests (Google AI and Vertex AI) as ctxscope traces.

What the google-genai SDKs, Vertex AI and ADK agents send. The REST body (camelCase), the
same body in snake_case (proto JSON, the Python SDK's dumps) and the Python SDK's call shape
(``{"model", "contents", "config": {...}}``) are all read, and mapped onto the same
normalised messages as an OpenAI chat request (``ctxcore.formats.openai``):

- ``systemInstruction`` (``system_instruction``, or ``config.system_instruction``) → the
  system instructions, one system part per part;
- ``contents[]`` → messages; role ``model`` is the assistant, ``user``/``function`` the user.
  Parts: ``text`` → text (``thought: true`` → the message's reasoning and a ``thought``
  part, kept in metadata, not counted; a ``thoughtSignature`` → a part with its encrypted
  size and no text); ``functionCall {name, args, id?}`` → a tool call of the model message;
  ``functionResponse {name, response, id?}`` → a ``tool:<call id>`` packet (a response
  without an id answers the oldest open call of the same name); ``inlineData``/``fileData``
  → a placeholder line naming the media type and size, recorded in ``metadata.media``;
  ``executableCode``/``codeExecutionResult`` (the built-in code tool) → kept as text in
  their message and counted in ``metadata.import.code_parts``; any other part → its JSON
  kept as text and listed in ``metadata.import.kept_as_text``;
- ``tools[].functionDeclarations`` → the tool definitions (built-in tools such as
  ``googleSearch`` or ``codeExecution`` by name); ``generationConfig.maxOutputTokens``
  → the output reserve.

Calls without an id get ``call_<content>_<part>`` (counted in
``metadata.import.synthesized_call_ids``): the packet ids stay stable across imports.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import cache
from typing import Any

from ctxcore.errors import ImportFormatError
from ctxcore.formats.accounting import Tally
from ctxcore.formats.norm import NormMessage, Parts, ToolCall, usage_from_obj
from ctxcore.formats.openai import text_of
from ctxcore.formats.request import RequestFormat
from ctxcore.models import ToolDef

BUILDER_NAME = "import/gemini"
FORMAT = "gemini"

_ROLES = {"model": "assistant", "user": "user", "function": "user", "tool": "user"}


@cache
def _snake(camel: str) -> str:
    """A camelCase field name in snake_case (made once per name: every part asks)."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)


def _get(obj: dict[str, Any], camel: str) -> Any:
    """A field under its camelCase (REST) or snake_case (proto, Python SDK) name."""
    if camel in obj:
        return obj[camel]
    return obj.get(_snake(camel))


def _config(request: dict[str, Any]) -> dict[str, Any]:
    """The generation settings: ``generationConfig`` (REST) or the SDK's ``config``."""
    for key in ("generationConfig", "generation_config", "config"):
        if isinstance(request.get(key), dict):
            cfg: dict[str, Any] = request[key]
            return cfg
    return {}


def looks_like(data: Any) -> bool:
    """Whether a JSON value is a Gemini ``generateContent`` request."""
    if not isinstance(data, dict) or "messages" in data:
        return False
    contents = data.get("contents")
    return isinstance(contents, list | str)


def _media(part: dict[str, Any], path: str) -> tuple[str, dict[str, Any]] | None:
    """A placeholder line for an ``inlineData``/``fileData`` part, and what it was."""
    inline, file = _get(part, "inlineData"), _get(part, "fileData")
    blob = inline if isinstance(inline, dict) else file if isinstance(file, dict) else None
    if blob is None:
        return None
    kind = "inlineData" if blob is inline else "fileData"
    info: dict[str, Any] = {"type": kind, "path": path}
    mime = _get(blob, "mimeType")
    if isinstance(mime, str):
        info["media_type"] = mime
    data, uri, name = blob.get("data"), _get(blob, "fileUri"), _get(blob, "displayName")
    if isinstance(data, str):
        info["bytes"] = len(data) * 3 // 4
    if isinstance(uri, str):
        info["url"] = uri
    if isinstance(name, str):
        info["name"] = name
    if isinstance(_get(part, "videoMetadata"), dict):
        info["video_metadata"] = _get(part, "videoMetadata")
    desc = " ".join(
        str(x)
        for x in (
            info.get("media_type"),
            f"{info['bytes']:,} bytes" if "bytes" in info else None,
            info.get("url"),
            info.get("name"),
        )
        if x
    )
    return f"[{kind}{': ' + desc if desc else ''}]", info


def _code_text(part: dict[str, Any]) -> str | None:
    """The built-in code tool's parts as the text the model sees: code, then its output."""
    code = _get(part, "executableCode")
    if isinstance(code, dict):
        lang = str(code.get("language") or "").lower()
        lang = "" if lang == "language_unspecified" else lang
        return f"```{lang}\n{text_of(code.get('code'))}\n```"
    result = _get(part, "codeExecutionResult")
    if isinstance(result, dict):
        return f"[code execution: {result.get('outcome', '')}]\n{text_of(result.get('output'))}"
    return None


class _Calls:
    """Open function calls, so that responses without ids find theirs by name, in order."""

    def __init__(self) -> None:
        self.open: list[ToolCall] = []
        self.synthesized = 0

    def add(self, call: ToolCall) -> None:
        self.open.append(call)

    def answer(self, name: str | None, cid: str | None) -> str | None:
        if cid is not None:
            self.open = [c for c in self.open if c.id != cid]
            return cid
        call = next((c for c in self.open if c.name == name), None)
        if call is None:
            return None
        self.open.remove(call)
        return call.id


def _system(request: dict[str, Any], tally: Tally) -> list[NormMessage]:
    raw = _get(request, "systemInstruction")
    if raw is None:
        raw = _get(_config(request), "systemInstruction")
    if raw is None:
        return []
    if isinstance(raw, str):
        parts: Any = [{"text": raw}]
    elif isinstance(raw, dict):
        parts = raw.get("parts")
    else:
        parts = raw
    if not isinstance(parts, list):
        raise ImportFormatError("systemInstruction: expected a content with a 'parts' list")
    out: list[NormMessage] = []
    for k, part in enumerate(parts):
        path = f"systemInstruction.parts[{k}]"
        if isinstance(part, str):
            text = part
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            text = part["text"]
        else:
            text = tally.keep_unknown(path, part)
        out.append(NormMessage(index=-1, role="system", text=text, id=f"system-{k}"))
        tally.add("system_parts")
    return out


def normalize(request: dict[str, Any], tally: Tally) -> tuple[list[NormMessage], dict[str, Any]]:
    """The request's system instruction and contents as normalised messages (function
    responses split out of their content, in order), and notes for the import metadata:
    the code-tool parts counted, and how many call ids were made up."""
    out = _system(request, tally)
    contents = request.get("contents")
    if isinstance(contents, str):
        contents = [{"role": "user", "parts": [{"text": contents}]}]
    if not isinstance(contents, list):
        raise ImportFormatError("contents: expected a list of contents")
    reader = _Contents(tally)
    for i, content in enumerate(contents):
        out.extend(reader.content(content, i))
    return out, reader.notes()


class _Contents:
    """Reads a request's contents in order: the calls still open (``_Calls``) and the
    code-tool parts seen carry from one content to the next."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally
        self.calls = _Calls()
        self.code = {"executable_code": 0, "code_execution_result": 0}

    def notes(self) -> dict[str, Any]:
        notes: dict[str, Any] = {}
        if any(self.code.values()):
            notes["code_parts"] = {k: v for k, v in self.code.items() if v}
        if self.calls.synthesized:
            notes["synthesized_call_ids"] = self.calls.synthesized
        return notes

    def content(self, content: Any, i: int) -> list[NormMessage]:
        """One content: the function responses it holds, then the message itself."""
        where = f"contents[{i}]"
        if isinstance(content, str):
            content = {"role": "user", "parts": [{"text": content}]}
        if not isinstance(content, dict):
            raise ImportFormatError(f"{where}: a content must be an object")
        role = content.get("role", "user")
        if not isinstance(role, str):
            raise ImportFormatError(f"{where}.role: expected a string, got {type(role).__name__}")
        parts = content.get("parts")
        if not isinstance(parts, list):
            raise ImportFormatError(f"{where}: a content needs a 'parts' list")
        self.tally.add("messages")
        read = Parts(NormMessage(index=i, role=_ROLES.get(role, "user"), text=""))
        if role not in ("user", "model"):
            # a function-role content (older API) or an unknown role: read as the user's
            read.main.extra["source_role"] = role
        for j, part in enumerate(parts):
            path = f"{where}.parts[{j}]"
            if not isinstance(part, dict):
                read.texts.append(self.tally.keep_unknown(path, part))
            else:
                self.part(part, path, role, j, read)
        return read.messages()

    def part(self, part: dict[str, Any], path: str, role: str, j: int, read: Parts) -> None:
        """One part of a content into its parts (``j``: its place, for made-up ids). A part
        is one kind, so each is looked for only until one is found: a text first (most
        parts are), then a call, a response, media and the code tool's parts."""
        main, tally = read.main, self.tally
        signature = _get(part, "thoughtSignature")
        if signature is not None:
            # opaque to all but Gemini, which wants it back: counted, not kept
            main.extra["thought_signatures"] = main.extra.get("thought_signatures", 0) + 1
            size = len(signature) if isinstance(signature, str) else 0
            main.thinking.append({"type": "thoughtSignature", "encrypted_chars": size})
            tally.add("thinking")
        text = part.get("text")
        if isinstance(text, str):
            if part.get("thought") is True:
                read.reasoning.append(text)
                main.thinking.append({"type": "thought", "chars": len(text)})
                tally.add("thinking")
            else:
                read.texts.append(text)
            return
        fcall = _get(part, "functionCall")
        if isinstance(fcall, dict) and role == "model":
            main.tool_calls.append(self.call(fcall, path, main.index, j))
            tally.add("tool_calls")
            return
        fresp = _get(part, "functionResponse")
        if isinstance(fresp, dict):
            read.results.append(self.response(fresp, path, main.index, j))
            tally.add("tool_results")
            return
        self.other(part, path, read)

    def other(self, part: dict[str, Any], path: str, read: Parts) -> None:
        """A part that is neither text nor a function call or response: media, the code
        tool's parts, a bare signature (counted by ``part``), or one kept as JSON text."""
        media = _media(part, path)
        if media is not None:
            read.texts.append(media[0])
            read.main.media.append(media[1])
            self.tally.add("media")
            return
        code_text = _code_text(part)
        if code_text is not None:
            read.texts.append(code_text)
            executable = _get(part, "executableCode") is not None
            self.code["executable_code" if executable else "code_execution_result"] += 1
        elif not set(part) <= {"thoughtSignature", "thought_signature", "thought"}:
            read.texts.append(self.tally.keep_unknown(path, part))

    def call(self, fcall: dict[str, Any], path: str, i: int, j: int) -> ToolCall:
        """A ``functionCall``; one without an id gets ``call_<content>_<part>``."""
        name = fcall.get("name")
        if not isinstance(name, str) or not name:
            raise ImportFormatError(f"{path}.functionCall: a call needs a name")
        cid = fcall.get("id")
        if not isinstance(cid, str) or not cid:
            cid = f"call_{i}_{j}"
            self.calls.synthesized += 1
        call = ToolCall(
            id=cid,
            name=name,
            arguments=json.dumps(fcall.get("args", {}), ensure_ascii=False, separators=(",", ":")),
        )
        self.calls.add(call)
        return call

    def response(self, fresp: dict[str, Any], path: str, i: int, j: int) -> NormMessage:
        """A ``functionResponse`` as a tool message answering its call (by id, else the
        oldest open call of its name); the media parts of a multimodal one follow its
        text."""
        name = fresp.get("name")
        rid = fresp.get("id")
        result = NormMessage(
            index=i,
            role="tool",
            text=json.dumps(fresp.get("response"), ensure_ascii=False),
            tool_call_id=self.calls.answer(
                name if isinstance(name, str) else None,
                rid if isinstance(rid, str) and rid else None,
            ),
            name=name if isinstance(name, str) else None,
            id=f"msg-{i}.{j}",
        )
        inner = fresp.get("parts")
        if isinstance(inner, list):  # multimodal function responses
            lines = [result.text]
            for k, sub in enumerate(inner):
                sub_media = _media(sub, f"{path}.parts[{k}]") if isinstance(sub, dict) else None
                if sub_media is None:
                    lines.append(self.tally.keep_unknown(f"{path}.parts[{k}]", sub))
                    continue
                lines.append(sub_media[0])
                result.media.append(sub_media[1])
                self.tally.add("media")
            result.text = "\n".join(lines)
        return result


def parse_tools(tools: Any, tally: Tally) -> list[ToolDef]:
    """Function declarations, and built-in tools (``googleSearch``, ``codeExecution``…)
    named by their key."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ImportFormatError("tools: expected a list of tools")
    out: list[ToolDef] = []
    for k, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise ImportFormatError(f"tools[{k}]: a tool must be an object")
        for key, value in tool.items():
            if key in ("functionDeclarations", "function_declarations"):
                if not isinstance(value, list):
                    raise ImportFormatError(f"tools[{k}].{key}: expected a list")
                for n, decl in enumerate(value):
                    name = decl.get("name") if isinstance(decl, dict) else None
                    if not isinstance(decl, dict) or not isinstance(name, str) or not name:
                        raise ImportFormatError(
                            f"tools[{k}].{key}[{n}]: a declaration needs a name"
                        )
                    params = _get(decl, "parameters")
                    if params is None:
                        params = _get(decl, "parametersJsonSchema")
                    out.append(
                        ToolDef(
                            name=name,
                            description=str(decl.get("description") or ""),
                            parameters=params if isinstance(params, dict) else {},
                        )
                    )
                    tally.add("tools")
            else:
                out.append(
                    ToolDef(
                        name=key, parameters=value if isinstance(value, dict) else {"value": value}
                    )
                )
                tally.add("tools")
    return out


def _output(response: dict[str, Any]) -> str | None:
    """The first candidate's text (thoughts left out), and its calls as ``name(args)``."""
    candidates = response.get("candidates")
    if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
        return None
    content = candidates[0].get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list):
        return None
    lines: list[str] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        call = _get(part, "functionCall")
        if isinstance(part.get("text"), str) and part.get("thought") is not True:
            lines.append(part["text"])
        elif isinstance(call, dict) and isinstance(call.get("name"), str):
            lines.append(f"{call['name']}({json.dumps(call.get('args', {}), ensure_ascii=False)})")
    return "\n".join(lines) or None


def _created(response: dict[str, Any]) -> datetime | None:
    raw = _get(response, "createTime")
    if not isinstance(raw, str):
        return None
    try:
        when = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def is_contents_list(data: Any) -> bool:
    """Whether a JSON value is a bare list of contents (``[{"role", "parts"}, ...]``), as
    Gemini CLI's ``/chat save`` checkpoints keep a conversation: one request's contents."""
    return (
        isinstance(data, list)
        and bool(data)
        and all(
            isinstance(c, dict)
            and c.get("role") in _ROLES
            and isinstance(c.get("parts"), list)
            and "content" not in c
            for c in data
        )
    )


class GenerateContent(RequestFormat):
    """The Gemini ``generateContent`` mapping (``request.RequestFormat``)."""

    builder = BUILDER_NAME
    source = FORMAT
    usage_mapping = "gemini"
    shape = "a Gemini generateContent request is an object with 'contents'"

    def looks_like(self, data: Any) -> bool:
        return looks_like(data)

    def detects(self, data: Any) -> bool:
        # also a bare list of contents (a Gemini CLI checkpoint), one request holding them
        return super().detects(data) or is_contents_list(data)

    def requests(self, data: Any) -> Iterator[tuple[Any, Any]]:
        return super().requests({"contents": data} if is_contents_list(data) else data)

    def accepts(self, request: Any) -> bool:
        return isinstance(request, dict) and "contents" in request

    def normalize(
        self, request: dict[str, Any], tally: Tally
    ) -> tuple[list[NormMessage], dict[str, Any]]:
        return normalize(request, tally)

    def tools(self, request: dict[str, Any], tally: Tally) -> list[ToolDef]:
        raw = request.get("tools")
        return parse_tools(raw if raw is not None else _config(request).get("tools"), tally)

    def identity(self, request: dict[str, Any]) -> tuple[Any, ...]:
        return _get(request, "systemInstruction"), request["contents"], request.get("tools")

    def reserve(self, request: dict[str, Any]) -> Any:
        return _get(_config(request), "maxOutputTokens")

    def created(self, request: dict[str, Any], response: dict[str, Any] | None) -> datetime | None:
        return _created(response) if response is not None else None

    def request_meta(self, request: dict[str, Any]) -> dict[str, Any]:
        cached = _get(request, "cachedContent")
        # context cached at Google: it is part of the prompt but not of this request
        return {"cached_content": cached} if isinstance(cached, str) else {}

    def response_meta(self, response: dict[str, Any]) -> dict[str, Any]:
        rid = _get(response, "responseId")
        return {"response_id": rid} if isinstance(rid, str) else {}

    def usage(self, request: dict[str, Any], response: dict[str, Any] | None) -> dict[str, int]:
        return usage_from_obj(_get(response, "usageMetadata")) if response is not None else {}

    def output(self, request: dict[str, Any], response: dict[str, Any] | None) -> str | None:
        return _output(response) if response is not None else None

    def model(self, request: dict[str, Any], response: dict[str, Any] | None) -> Any:
        model = request.get("model")
        if not isinstance(model, str) and response is not None:
            return _get(response, "modelVersion")
        return model


REQUESTS = GenerateContent()
trace_from_request = REQUESTS.trace
traces_from_obj = REQUESTS.traces


__all__ = ["FORMAT", "REQUESTS", "looks_like", "normalize", "trace_from_request", "traces_from_obj"]
