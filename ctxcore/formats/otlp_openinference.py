"""A model call's prompt under the OpenInference conventions (Arize Phoenix, Arize AX).

OpenInference flattens each message into attributes:
``llm.input_messages.<i>.message.role``, ``.content`` (or
``.contents.<k>.message_content.type`` / ``.text`` / ``.image.image.url``),
``.tool_calls.<j>.tool_call.id`` / ``.function.name`` / ``.function.arguments``,
``.tool_call_id`` and ``.name``. Beside them: ``llm.tools.<i>.tool.json_schema`` (the tool
definitions as JSON), ``llm.model_name``, ``llm.invocation_parameters`` (JSON; its
``max_tokens`` is the output reserve), ``llm.token_count.prompt`` / ``.completion`` /
``.total`` (and ``.prompt_details.cache_read`` / ``.cache_write``,
``.completion_details.reasoning``), ``llm.output_messages.*`` for the answer, and
``session.id``. Some instrumentations leave the messages out and put the whole request in
``input.value`` (JSON); it is read when no ``llm.input_messages`` are there.
"""

from __future__ import annotations

import json
from typing import Any

from ctxcore.errors import ImportFormatError
from ctxcore.formats.accounting import Tally
from ctxcore.formats.openai import normalize_message, text_of, tool_from_obj
from ctxcore.formats.otlp_records import Prompt, SpanRecord
from ctxcore.models import ToolDef

FORMAT = "openinference"
_INPUT = "llm.input_messages."
_OUTPUT = "llm.output_messages."
#: ``llm.token_count.<name>`` -> the usage key it becomes.
USAGE_KEYS: dict[str, str] = {
    "prompt": "input_tokens",
    "completion": "output_tokens",
    "total": "total_tokens",
    "prompt_details.cache_read": "cache_read_tokens",
    "prompt_details.cache_write": "cache_write_tokens",
    "completion_details.reasoning": "reasoning_tokens",
}


def is_openinference(attrs: dict[str, Any]) -> bool:
    """Whether a span's attributes follow OpenInference."""
    return "openinference.span.kind" in attrs or any(
        k.startswith((_INPUT, "llm.token_count.", "llm.model_name")) for k in attrs
    )


def _nest(attrs: dict[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """``<prefix><i>.message.<path>`` attributes as ``{i: {path: value}}``."""
    rows: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if key.startswith(prefix):
            idx, _, rest = key[len(prefix) :].partition(".")
            if idx.isdigit() and rest.startswith("message."):
                rows.setdefault(int(idx), {})[rest[len("message.") :]] = value
    return rows


def _indexed(fields: dict[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """``<prefix><k>.<path>`` entries of one message as ``{k: {path: value}}``."""
    out: dict[int, dict[str, Any]] = {}
    for key, value in fields.items():
        if key.startswith(prefix):
            idx, _, rest = key[len(prefix) :].partition(".")
            if idx.isdigit():
                out.setdefault(int(idx), {})[rest] = value
    return out


def _message(fields: dict[str, Any]) -> dict[str, Any]:
    """One flattened OpenInference message as an OpenAI-style message."""
    msg: dict[str, Any] = {"role": fields.get("role")}
    contents = _indexed(fields, "contents.")
    if contents:
        parts: list[Any] = []
        for _, c in sorted(contents.items()):
            ctype = c.get("message_content.type", "text")
            if ctype == "text":
                parts.append({"type": "text", "text": c.get("message_content.text", "")})
            elif ctype == "image":
                url = c.get("message_content.image.image.url")
                parts.append({"type": "image_url", "image_url": {"url": url}})
            else:  # a content type we do not know: kept whole by normalize_message
                parts.append({"type": ctype, **c})
        msg["content"] = parts
    elif "content" in fields:
        msg["content"] = fields["content"]
    calls = _indexed(fields, "tool_calls.")
    if calls:
        msg["tool_calls"] = [
            {
                "id": c.get("tool_call.id"),
                "function": {
                    "name": c.get("tool_call.function.name"),
                    "arguments": c.get("tool_call.function.arguments", "{}"),
                },
            }
            for _, c in sorted(calls.items())
        ]
    for key in ("tool_call_id", "name"):
        if key in fields:
            msg[key] = fields[key]
    return msg


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError):  # nested past the parser: unreadable
            return None
    return value


def _input_value_messages(attrs: dict[str, Any]) -> list[Any] | None:
    """The request in ``input.value`` (JSON): a list of messages or ``{messages: [...]}``."""
    value = _json(attrs.get("input.value"))
    if isinstance(value, dict) and isinstance(value.get("messages"), list):
        value = value["messages"]
    if (
        isinstance(value, list)
        and value
        and all(isinstance(m, dict) and "role" in m for m in value)
    ):
        return value
    return None


def _tools(attrs: dict[str, Any], where: str) -> list[ToolDef]:
    rows: dict[int, Any] = {}
    for key, value in attrs.items():
        if key.startswith("llm.tools.") and key.endswith(".tool.json_schema"):
            idx = key[len("llm.tools.") : -len(".tool.json_schema")]
            if idx.isdigit():
                rows[int(idx)] = value
    out: list[ToolDef] = []
    for i in sorted(rows):
        schema = _json(rows[i])
        try:
            out.append(tool_from_obj(schema, i))
        except ImportFormatError as exc:
            raise ImportFormatError(f"{where}: llm.{exc}") from exc
    return out


def _output(attrs: dict[str, Any]) -> str | None:
    rows = _nest(attrs, _OUTPUT)
    if rows:
        first = _message(rows[min(rows)])
        first["role"] = first.get("role") or "assistant"
        return normalize_message(first, 0).text or None
    value = attrs.get("output.value")
    if value is None:
        return None
    parsed = _json(value)
    if isinstance(parsed, dict) and ("text" in parsed or "content" in parsed):
        return text_of(parsed.get("text", parsed.get("content"))) or None
    return text_of(value) or None


def prompt_from_span(span: SpanRecord) -> Prompt | None:
    """The span's prompt; ``None`` when it carries none."""
    attrs, where = span.attrs, span.where
    tally = Tally(FORMAT)
    rows = _nest(attrs, _INPUT)
    if rows:
        messages: list[Any] = [_message(rows[i]) for i in sorted(rows)]
        source = "llm.input_messages"
    else:
        from_value = _input_value_messages(attrs)
        if from_value is None:
            return None
        messages, source = from_value, "input.value"
    norm = []
    for i, m in enumerate(messages):
        try:
            norm.append(normalize_message(m, i, tally))
        except ImportFormatError as exc:
            raise ImportFormatError(f"{where}: {source}: {exc}") from exc
    tools = _tools(attrs, where)
    tally.add("tools", len(tools))
    params = _json(attrs.get("llm.invocation_parameters"))
    params = params if isinstance(params, dict) else {}
    reserve = params.get("max_completion_tokens", params.get("max_tokens"))
    model = attrs.get("llm.model_name") or params.get("model")
    usage: dict[str, int] = {}
    for name, key in USAGE_KEYS.items():
        value = attrs.get(f"llm.token_count.{name}")
        if isinstance(value, int | float) and not isinstance(value, bool):
            usage[key] = int(value)
    return Prompt(
        messages=norm,
        tally=tally,
        tools=tools,
        usage=usage,
        usage_mapping="openinference",
        output=_output(attrs),
        model=model if isinstance(model, str) else None,
        output_reserve=reserve if isinstance(reserve, int) and reserve >= 0 else None,
        notes={"messages_from": source},
    )


__all__ = ["FORMAT", "USAGE_KEYS", "is_openinference", "prompt_from_span"]
