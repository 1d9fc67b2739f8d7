"""Gemini CLI chat files (``~/.gemini/tmp/<project>/chats/session-*.json``), one trace per
model call (docs/design.md, "Formats").

A chat file is one JSON object: ``sessionId``, ``projectHash``, ``startTime``,
``lastUpdated`` and the ``messages`` the CLI recorded (google-gemini/gemini-cli,
``chatRecordingService``):

- ``user``: what the user sent (``content``: a string, or Gemini parts);
- ``gemini``: one reply of the model, so one model call: its text (``content``), its thought
  summaries (``thoughts``: ``subject`` and ``description``), the tools it called
  (``toolCalls``: ``id``, ``name``, ``args``, and the ``result`` sent back, Gemini
  ``functionResponse`` parts), the usage of the call (``tokens``: ``input`` is the prompt,
  cached tokens included, ``output``, ``cached``, ``thoughts``, ``tool``, ``total``), its
  ``model`` and ``timestamp``;
- ``info``, ``error``, ``warning``: what the CLI showed the user, never sent to the model.

A call's context is the conversation before its reply as the CLI sends it back to Gemini:
each user message, each earlier reply (its text, its thoughts as reasoning, its function
calls) followed by the function responses of its tool calls. Every content is read by the
Gemini request reader (``gemini.normalize``), so parts mean here what they mean in a
``generateContent`` request. The file records neither the system prompt nor the tool
declarations the CLI sent: each trace says so.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ctxcore.errors import ImportFormatError
from ctxcore.formats import gemini
from ctxcore.formats.accounting import Tally
from ctxcore.formats.norm import NormMessage, reply_text
from ctxcore.formats.sessions import SessionImport
from ctxcore.formats.sessions.calls import Call, Segment
from ctxcore.formats.sessions.lines import parse_time
from ctxcore.formats.sessions.records import RecordReader

FORMAT = "gemini-cli"
TYPES = frozenset({"user", "gemini", "info", "error", "warning"})
#: What the CLI shows and never sends.
NOT_SENT = frozenset({"info", "error", "warning"})
#: The ``tokens`` of a reply under the names of Gemini's ``usageMetadata``.
_USAGE = {
    "input": "promptTokenCount",
    "output": "candidatesTokenCount",
    "cached": "cachedContentTokenCount",
    "thoughts": "thoughtsTokenCount",
    "tool": "toolUsePromptTokenCount",
    "total": "totalTokenCount",
}
RECONSTRUCTED = ("system prompt", "tool definitions")
WARNING = (
    "reconstructed from a Gemini CLI chat file, which does not record the system prompt or "
    "the tool declarations: this input lacks them, the prompt count Gemini reports includes "
    "them"
)


def looks_like(data: Any) -> bool:
    """Whether a JSON value is a Gemini CLI chat file: a session id, a project hash or a
    start time, and messages typed as the CLI types them."""
    if not isinstance(data, dict) or not isinstance(data.get("sessionId"), str):
        return False
    messages = data.get("messages")
    if not isinstance(messages, list) or not ("projectHash" in data or "startTime" in data):
        return False
    head = [m for m in messages[:20] if isinstance(m, dict)]
    return all(m.get("type") in TYPES for m in head)


def _parts(content: Any) -> list[Any]:
    """A message's content as Gemini parts (a string is one text part)."""
    if isinstance(content, str):
        return [{"text": content}] if content else []
    if isinstance(content, dict):
        return [content]
    return list(content) if isinstance(content, list) else []


def _thought(t: Any) -> dict[str, Any] | None:
    """A thought summary as the thought part it summarises."""
    if not isinstance(t, dict):
        return None
    subject, text = t.get("subject"), t.get("description")
    words = [f"**{subject}**" if isinstance(subject, str) and subject else ""]
    words.append(text if isinstance(text, str) else "")
    joined = " ".join(w for w in words if w)
    return {"text": joined, "thought": True} if joined else None


def _read(contents: list[dict[str, Any]], k: int, tally: Tally) -> list[NormMessage]:
    """Contents read by the Gemini request reader, named after the record they came from
    (``msg-<k>``; the function responses of its tool calls ``msg-<k>.r<j>``, counted with
    the record, not as a message of their own)."""
    msgs, _notes = gemini.normalize({"contents": contents}, tally)
    results = 0
    for m in msgs:
        m.index = k
        if m.role == "tool":
            m.id = f"msg-{k}.r{results}"
            results += 1
        else:
            m.id = f"msg-{k}"
    tally.counts["messages"] -= len(contents) - 1
    return msgs


def _gemini_contents(record: dict[str, Any], answered: set[str]) -> list[dict[str, Any]]:
    """A reply as the model content it was (thoughts, text, function calls) and the user
    content of the function responses its tool calls sent back."""
    parts = [p for p in (_thought(t) for t in record.get("thoughts") or []) if p]
    parts.extend(_parts(record.get("content")))
    responses: list[Any] = []
    for call in record.get("toolCalls") or []:
        if not isinstance(call, dict):
            raise ImportFormatError("toolCalls: a tool call is an object")
        fcall = {"name": call.get("name"), "args": call.get("args") or {}}
        if isinstance(call.get("id"), str):
            fcall["id"] = call["id"]
        parts.append({"functionCall": fcall})
        for r in _parts(call.get("result")):
            fresp = r.get("functionResponse") if isinstance(r, dict) else None
            if isinstance(fresp, dict) and isinstance(fresp.get("id"), str):
                answered.add(fresp["id"])
            responses.append(r)
    contents = [{"role": "model", "parts": parts}]
    if responses:
        contents.append({"role": "user", "parts": responses})
    return contents


def _user_contents(record: dict[str, Any], answered: set[str]) -> list[dict[str, Any]]:
    """A user message as its content, less the function responses a reply's tool calls
    already sent (some versions record them again as a user message)."""
    parts = []
    for p in _parts(record.get("content")):
        fresp = p.get("functionResponse") if isinstance(p, dict) else None
        if isinstance(fresp, dict) and fresp.get("id") in answered:
            continue
        parts.append(p)
    return [{"role": "user", "parts": parts}] if parts else []


def _usage(tokens: Any) -> dict[str, int]:
    if not isinstance(tokens, dict):
        return {}
    return {
        name: tokens[key]
        for key, name in _USAGE.items()
        if isinstance(tokens.get(key), int) and not isinstance(tokens.get(key), bool)
    }


class Reader(RecordReader):
    """Reads a chat file's messages in order; each ``gemini`` message is one call."""

    def __init__(self, name: str, session: str, now: datetime) -> None:
        super().__init__()
        self.name, self.session, self.now = name, session, now

    def calls(self, data: dict[str, Any]) -> list[Call]:
        """The calls, in the order of their replies."""
        sid = data.get("sessionId")
        if isinstance(sid, str) and sid:
            self.session = sid
        context: list[Segment] = []
        answered: set[str] = set()
        out: list[Call] = []
        for k, record in enumerate(data["messages"]):
            read = self.guard(
                f"{self.name}: messages[{k}]",
                lambda: self._record(record, k, context, answered, len(out)),  # noqa: B023
            )
            seg, call = read or (None, None)
            if call is not None:
                out.append(call)
            if seg is not None:
                context.append(seg)
        return self.finish(out)

    def _record(
        self, record: Any, k: int, context: list[Segment], answered: set[str], turn: int
    ) -> tuple[Segment | None, Call | None]:
        """One message: the segment it adds to the context, and the call it is (a reply)."""
        if not isinstance(record, dict) or record.get("type") not in TYPES:
            raise ImportFormatError("not a Gemini CLI message (type: user, gemini, info, …)")
        kind = record["type"]
        if kind in NOT_SENT:
            self.count_not_sent(kind)
            return None, None
        tally = Tally(FORMAT)
        if kind == "user":
            contents = _user_contents(record, answered)
            if not contents:
                return None, None
            seg = Segment(label=f"messages[{k}]", norm=_read(contents, k, tally), counts={})
            seg.counts = dict(tally.counts)
            seg.unknown = list(tally.unknown)
            seg.entries()
            return seg, None
        contents = _gemini_contents(record, answered)
        norm = _read(contents, k, tally)
        seg = Segment(label=f"messages[{k}]", norm=norm, counts=dict(tally.counts))
        seg.unknown = list(tally.unknown)
        seg.entries()
        return seg, self._call(record, k, norm, list(context), turn)

    def _call(
        self,
        record: dict[str, Any],
        k: int,
        norm: list[NormMessage],
        context: list[Segment],
        turn: int,
    ) -> Call:
        """The call whose reply is this ``gemini`` message: its context is what came before."""
        reply = next((m for m in norm if m.role != "tool"), None)
        calls = [{"id": c.id, "name": c.name} for c in (reply.tool_calls if reply else [])]
        log: dict[str, Any] = {"file": self.name, "message": k}
        if isinstance(record.get("id"), str):
            log["message_id"] = record["id"]
        if calls:
            log["tool_calls"] = calls
            statuses = [c.get("status") for c in record.get("toolCalls") or []]
            log["tool_status"] = {s: statuses.count(s) for s in dict.fromkeys(statuses) if s}
        usage = _usage(record.get("tokens"))
        model = record.get("model")
        call = Call(
            session_id=self.session,
            turn=turn,
            key=f"message-{k}",
            context=context,
            created_at=parse_time(record.get("timestamp")) or self.now,
            model=model if isinstance(model, str) and model else None,
            usage=usage,
            usage_mapping="gemini",
            output=reply_text(reply) if reply is not None else None,
            metadata={"session_log": log},
            recorded=["messages", "tool calls and results"] + (["usage", "model"] if usage else []),
            reconstructed=list(RECONSTRUCTED),
            warnings=[WARNING],
            skipped=self.since_last_call(),
        )
        if reply is not None and reply.reasoning:
            log["thoughts"] = len(record.get("thoughts") or [])
        return call


def read(data: Any, *, where: str, session_id: str, default_now: datetime | None) -> list[Any]:
    """The reader of a chat file already parsed (``registry.Reader``)."""
    name = where or "input"
    if not looks_like(data):
        raise ImportFormatError(f"{name}: not a Gemini CLI chat file")
    reader = Reader(name, session_id, default_now or datetime.now(UTC))
    calls = reader.calls(data)
    traces = SessionImport(FORMAT, lambda: calls, reader).collect()
    if not traces:
        why = reader.errors[0] if reader.errors else "it records no reply of the model"
        raise ImportFormatError(f"{name}: a Gemini CLI chat file with no model call ({why})")
    return traces


__all__ = ["FORMAT", "Reader", "looks_like", "read"]
