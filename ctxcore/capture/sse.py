"""A streamed model reply, put back together from its server-sent events.

The proxy hands a streamed reply to the client chunk by chunk and keeps a copy; once the
call is over, the copy is read here into the object the same call would have returned
without ``stream: true``, so that one importer per API (``ctxcore.formats``) reads both:

- OpenAI Chat Completions: ``chat.completion.chunk`` events (``data: [DONE]`` last) become a
  ``chat.completion``: per choice the role, the content and refusal deltas joined, tool calls
  assembled by index (id, name, argument fragments), the finish reason; ``usage`` from the
  last chunk (sent with ``stream_options.include_usage``);
- OpenAI Responses: the ``response`` of ``response.completed`` (or ``.incomplete`` /
  ``.failed``), which holds the whole reply; a stream cut before it is assembled from its
  ``response.output_item.done`` items and ``response.output_text.delta`` deltas;
- Anthropic Messages: ``message_start`` (id, model, the input usage) and its content blocks
  (``text_delta``, ``input_json_delta`` fragments of a tool call's input, ``thinking_delta``),
  ``message_delta`` (stop reason, the final usage).

An ``error`` event in the stream (Anthropic's ``overloaded_error`` mid-reply, OpenAI's
``error``) is returned beside the reply: the call failed after it began.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Event:
    """One server-sent event: its ``event:`` name (empty when none) and its data lines."""

    name: str
    data: str


def events(text: str) -> Iterator[Event]:
    """The events of an ``text/event-stream`` body (the WHATWG parsing rules: blank lines end
    an event, ``data:`` lines are joined by newlines, comments and unknown fields ignored)."""
    name = ""
    data: list[str] = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if not line:
            if data:
                yield Event(name, "\n".join(data))
            name, data = "", []
            continue
        if line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if key == "event":
            name = value
        elif key == "data":
            data.append(value)
    if data:
        yield Event(name, "\n".join(data))


def _json(data: str) -> dict[str, Any] | None:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):  # an event no parser can read is no event
        return None
    return value if isinstance(value, dict) else None


@dataclass
class Assembled:
    """A streamed reply as the non-streamed response object, and the error event, if any."""

    response: dict[str, Any] | None
    error: dict[str, Any] | None = None
    events: int = 0
    complete: bool = False


@dataclass
class _Choice:
    """One choice of a Chat Completions stream, assembled from its deltas."""

    role: str = "assistant"
    content: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None

    def add(self, c: dict[str, Any]) -> None:
        """One chunk's entry for this choice: its delta and finish reason."""
        raw_delta = c.get("delta")
        delta: dict[str, Any] = raw_delta if isinstance(raw_delta, dict) else {}
        if isinstance(delta.get("role"), str):
            self.role = delta["role"]
        if isinstance(delta.get("content"), str):
            self.content.append(delta["content"])
        if isinstance(delta.get("refusal"), str):
            self.refusal.append(delta["refusal"])
        for call in delta.get("tool_calls") or []:
            if isinstance(call, dict):
                self._add_call(call)
        if c.get("finish_reason"):
            self.finish_reason = c["finish_reason"]

    def _add_call(self, call: dict[str, Any]) -> None:
        """A piece of a tool call: its id, and more of its name and arguments."""
        k = call.get("index", len(self.calls))
        into = self.calls.setdefault(
            k if isinstance(k, int) else len(self.calls),
            {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
        )
        if call.get("id"):
            into["id"] = call["id"]
        raw_fn = call.get("function")
        fn: dict[str, Any] = raw_fn if isinstance(raw_fn, dict) else {}
        if isinstance(fn.get("name"), str):
            into["function"]["name"] += fn["name"]
        if isinstance(fn.get("arguments"), str):
            into["function"]["arguments"] += fn["arguments"]

    def message(self) -> dict[str, Any]:
        """The choice's message, as a non-streamed response has it."""
        message: dict[str, Any] = {"role": self.role, "content": "".join(self.content) or None}
        if self.refusal:
            message["refusal"] = "".join(self.refusal)
        if self.calls:
            message["tool_calls"] = [self.calls[k] for k in sorted(self.calls)]
        return message


def chat_completion(text: str) -> Assembled:
    """A Chat Completions stream as a ``chat.completion`` object."""
    head: dict[str, Any] = {}
    choices: dict[int, _Choice] = {}
    usage: Any = None
    error: dict[str, Any] | None = None
    n = 0
    done = False
    for ev in events(text):
        n += 1
        if ev.data.strip() == "[DONE]":
            done = True
            continue
        chunk = _json(ev.data)
        if chunk is None:
            continue
        if isinstance(chunk.get("error"), dict):
            error = chunk["error"]
            continue
        for key in ("id", "model", "created", "system_fingerprint", "service_tier"):
            if chunk.get(key) is not None:
                head.setdefault(key, chunk[key])
        if chunk.get("usage"):
            usage = chunk["usage"]
        for c in chunk.get("choices") or []:
            if isinstance(c, dict):
                index = c.get("index", 0)
                choices.setdefault(index if isinstance(index, int) else 0, _Choice()).add(c)
    if not choices and usage is None and not head:
        return Assembled(None, error, n, done)
    out: dict[str, Any] = {"object": "chat.completion", **head, "choices": []}
    for index in sorted(choices):
        ch = choices[index]
        out["choices"].append(
            {"index": index, "message": ch.message(), "finish_reason": ch.finish_reason}
        )
    if usage is not None:
        out["usage"] = usage
    return Assembled(out, error, n, done)


_FINAL = ("response.completed", "response.incomplete", "response.failed")


def responses(text: str) -> Assembled:
    """A Responses API stream as a ``response`` object."""
    final: dict[str, Any] | None = None
    latest: dict[str, Any] | None = None
    items: dict[int, dict[str, Any]] = {}
    deltas: dict[int, list[str]] = {}
    error: dict[str, Any] | None = None
    n = 0
    for ev in events(text):
        n += 1
        data = _json(ev.data)
        if data is None:
            continue
        kind = data.get("type", ev.name)
        if kind == "error":
            error = data.get("error") if isinstance(data.get("error"), dict) else data
        elif isinstance(data.get("response"), dict):
            latest = data["response"]
            if kind in _FINAL:
                final = latest
                if kind == "response.failed" and isinstance(latest.get("error"), dict):
                    error = latest["error"]
        elif kind == "response.output_item.done" and isinstance(data.get("item"), dict):
            items[int(data.get("output_index", len(items)))] = data["item"]
        elif kind == "response.output_text.delta" and isinstance(data.get("delta"), str):
            deltas.setdefault(int(data.get("output_index", 0)), []).append(data["delta"])
    if final is not None:
        return Assembled(final, error, n, True)
    if latest is None and not items and not deltas:
        return Assembled(None, error, n, False)
    out = dict(latest or {"object": "response"})
    for index, parts in deltas.items():
        items.setdefault(
            index,
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "".join(parts)}],
            },
        )
    out["output"] = [items[k] for k in sorted(items)]
    return Assembled(out, error, n, False)


def anthropic_message(text: str) -> Assembled:
    """An Anthropic Messages stream as a ``message`` object."""
    message: dict[str, Any] | None = None
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, list[str]] = {}
    error: dict[str, Any] | None = None
    n = 0
    done = False
    for ev in events(text):
        n += 1
        data = _json(ev.data)
        if data is None:
            continue
        kind = data.get("type", ev.name)
        if kind == "message_start" and isinstance(data.get("message"), dict):
            message = dict(data["message"])
            message["content"] = []
            message["usage"] = dict(message.get("usage") or {})
        elif kind == "content_block_start" and isinstance(data.get("content_block"), dict):
            blocks[int(data.get("index", len(blocks)))] = dict(data["content_block"])
        elif kind == "content_block_delta" and isinstance(data.get("delta"), dict):
            index = int(data.get("index", 0))
            block = blocks.setdefault(index, {"type": "text", "text": ""})
            piece = _block_delta(block, data["delta"])
            if piece is not None:
                partial.setdefault(index, []).append(piece)
        elif kind == "message_delta":
            message = _message_delta(message, data)
        elif kind == "message_stop":
            done = True
        elif kind == "error":
            error = data.get("error") if isinstance(data.get("error"), dict) else data
    for index, parts in partial.items():
        raw = "".join(parts)
        try:
            blocks[index]["input"] = json.loads(raw) if raw else {}
        except (ValueError, RecursionError):
            blocks[index]["input"] = raw  # cut mid-argument: kept as the text that arrived
    if message is None and not blocks:
        return Assembled(None, error, n, done)
    out = message or {"type": "message", "role": "assistant", "usage": {}}
    out["content"] = [blocks[k] for k in sorted(blocks)]
    return Assembled(out, error, n, done)


def _block_delta(block: dict[str, Any], delta: dict[str, Any]) -> str | None:
    """One ``content_block_delta`` applied to its block; a tool call's input arrives as
    pieces of JSON, returned to be read when the stream ends."""
    dtype = delta.get("type")
    if dtype == "input_json_delta":
        return str(delta.get("partial_json", ""))
    if dtype == "text_delta":
        block["text"] = str(block.get("text") or "") + str(delta.get("text", ""))
    elif dtype == "thinking_delta":
        block["thinking"] = str(block.get("thinking") or "") + str(delta.get("thinking", ""))
    elif dtype == "signature_delta":
        block["signature"] = str(delta.get("signature", ""))
    elif dtype == "citations_delta" and isinstance(delta.get("citation"), dict):
        block.setdefault("citations", []).append(delta["citation"])
    return None


def _message_delta(message: dict[str, Any] | None, data: dict[str, Any]) -> dict[str, Any]:
    """The message after a ``message_delta``: its stop reason and the final counts."""
    if message is None:
        message = {"type": "message", "role": "assistant", "content": [], "usage": {}}
    if isinstance(data.get("delta"), dict):
        for key in ("stop_reason", "stop_sequence"):
            if key in data["delta"]:
                message[key] = data["delta"][key]
    if isinstance(data.get("usage"), dict):
        # the final counts; newer streams repeat the input counts here too
        message["usage"].update({k: v for k, v in data["usage"].items() if v is not None})
    return message


__all__ = ["Assembled", "Event", "anthropic_message", "chat_completion", "events", "responses"]
