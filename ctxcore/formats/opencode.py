"""OpenCode sessions: one trace per model call (docs/design.md, "Formats").

OpenCode (anomalyco/opencode, formerly sst/opencode) keeps a session as messages, each an
``info`` object and its ``parts``:

- a user message (``role: user``): ``text`` parts (what the user typed, and ``synthetic``
  ones OpenCode added, such as a file it read for an ``@`` mention), ``file`` parts (an
  attachment: its ``mime``, ``url``, ``filename``);
- an assistant message (``role: assistant``, ``modelID``, ``providerID``, ``tokens``,
  ``parentID``: the user message it answers): ``step-start`` … ``step-finish`` around each
  model call (a step: its ``reasoning``, ``text`` and ``tool`` parts; ``step-finish`` holds
  the step's ``tokens`` and ``reason``); a ``tool`` part is a call and its outcome at once
  (``callID``, ``tool``, ``state``: ``status``, ``input``, ``output`` or ``error``).

A file holds them in one of three ways, all read here: the export (``opencode export``:
``{"info": <session>, "messages": [...]}``), the message list of ``GET
/session/:id/message`` (``[{"info", "parts"}, ...]``), or the server's events as a client
recorded them (``[{"type": "message.updated" | "message.part.updated" | …, "properties"}]``:
the last version of each message and part wins, ``message.removed`` and
``message.part.removed`` take them out; other events say nothing of the conversation).

Each step is one model call. Its context is the session before it as OpenCode sends it
back: every earlier message (a user message's text parts and attachments; an earlier step's
reasoning, text and tool calls, then the tool results, each call's ``output``, or its
``error``, or that it was interrupted), read by the Anthropic Messages reader
(``anthropic.normalize_message``) so parts mean what they mean in a request. A ``text/plain``
or directory ``file`` part is not sent (OpenCode sends the file's text as a synthetic text
part beside it); ``step-start``, ``snapshot``, ``patch`` and ``retry`` parts are bookkeeping,
never sent: both are counted in ``session_log.not_sent_to_the_model``. The step's text and
tool calls are the call's outcome, its ``step-finish`` tokens its usage (the message's
``tokens`` when it has one step and no ``step-finish``), ``modelID`` its model, the message's
creation time its time, the ``sessionID`` its session. The files record neither the system
prompt nor the tool declarations OpenCode sent: each trace says so. A part of a type not
read here is kept as JSON text and reported. A message that cannot be read is one error
naming it; the rest is imported.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ctxcore.errors import ImportFormatError
from ctxcore.formats import anthropic
from ctxcore.formats.accounting import Tally
from ctxcore.formats.norm import reply_text
from ctxcore.formats.sessions import SessionImport
from ctxcore.formats.sessions.calls import Call, Compaction, Segment
from ctxcore.formats.sessions.records import RecordReader

FORMAT = "opencode"
#: The events that change a session's messages (the rest are ignored).
MESSAGE_EVENTS = frozenset(
    {
        "message.updated",
        "message.part.updated",
        "message.part.delta",
        "message.removed",
        "message.part.removed",
    }
)
#: Parts OpenCode keeps for itself and never sends to the model.
BOOKKEEPING = frozenset({"step-start", "step-finish", "snapshot", "patch", "retry"})
#: Attachments OpenCode does not send as such (their text is a synthetic text part).
NOT_SENT_MIME = frozenset({"text/plain", "application/x-directory"})
#: What OpenCode sends for a user message's ``compaction`` part (the request to summarise).
COMPACTION_PROMPT = "What did we do so far?"
#: What OpenCode sends for a tool call that never finished.
INTERRUPTED = "[Tool execution was interrupted]"
RECONSTRUCTED = ("system prompt", "tool definitions")
WARNING = (
    "reconstructed from an OpenCode session, which does not record the system prompt or the "
    "tool declarations: this input lacks them, the prompt count OpenCode reports includes them"
)


@dataclass
class Message:
    """One message of a session: its ``info`` and its parts, in order."""

    info: dict[str, Any]
    parts: list[dict[str, Any]] = field(default_factory=list)
    where: str = ""


def _is_message(obj: Any) -> bool:
    info = obj.get("info") if isinstance(obj, dict) else None
    return (
        isinstance(info, dict)
        and info.get("role") in ("user", "assistant")
        and isinstance(info.get("sessionID"), str)
        and isinstance(obj.get("parts"), list)
    )


def _is_event(obj: Any) -> bool:
    """A recorded event: a type and its properties (a client's own events may carry an
    empty list)."""
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("type"), str)
        and isinstance(obj.get("properties"), dict | list)
    )


def looks_like(data: Any) -> bool:
    """Whether a JSON value is an OpenCode session: an export, a message list, or recorded
    server events of which some change a message."""
    if isinstance(data, dict) and isinstance(data.get("messages"), list):
        info = data.get("info")
        return isinstance(info, dict) and all(_is_message(m) for m in data["messages"][:20])
    if not isinstance(data, list) or not data:
        return False
    head = data[:50]
    if all(_is_message(m) for m in head):
        return True
    return all(_is_event(e) for e in head) and any(
        e["type"] in MESSAGE_EVENTS for e in data if isinstance(e, dict)
    )


class _Fold:
    """Recorded events folded into the messages they leave (``_folded``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.messages: dict[str, Message] = {}
        self.parts: dict[str, dict[str, dict[str, Any]]] = {}
        #: text streamed to a part not recorded yet: (message, part) -> field -> text
        self.deltas: dict[tuple[str, str], dict[str, str]] = {}

    def event(self, k: int, kind: str, props: dict[str, Any]) -> None:
        """One event that changes a message or a part."""
        if kind == "message.updated" and isinstance(props.get("info"), dict):
            info = props["info"]
            old = self.messages.get(str(info.get("id")))
            where = old.where if old else f"{self.name}: [{k}] (message {info.get('id')})"
            self.messages[str(info.get("id"))] = Message(info, where=where)
        elif kind == "message.part.updated" and isinstance(props.get("part"), dict):
            part = props["part"]
            key = (str(part.get("messageID")), str(part.get("id")))
            self.parts.setdefault(key[0], {})[key[1]] = part
            self.deltas.pop(key, None)  # the part whole: what streamed before is in it
        elif kind == "message.part.delta":
            self._delta(props)
        elif kind == "message.removed":
            self.messages.pop(str(props.get("messageID")), None)
        elif kind == "message.part.removed":
            self.parts.get(str(props.get("messageID")), {}).pop(str(props.get("partID")), None)

    def _delta(self, props: dict[str, Any]) -> None:
        """Text streamed to a part's field: added to the part, or kept until it is recorded."""
        key = (str(props.get("messageID")), str(props.get("partID")))
        name, text = str(props.get("field") or "text"), str(props.get("delta") or "")
        part = self.parts.get(key[0], {}).get(key[1])
        if part is not None:
            part[name] = str(part.get(name) or "") + text
        else:
            fields = self.deltas.setdefault(key, {})
            fields[name] = fields.get(name, "") + text

    def messages_left(self) -> list[Message]:
        """The messages, their parts in the order each first appeared; a part known only by
        the text streamed to it is a text part (marked ``from_deltas``)."""
        for (mid, pid), fields in self.deltas.items():
            part = {"id": pid, "messageID": mid, "type": "text", "from_deltas": True, **fields}
            self.parts.setdefault(mid, {})[pid] = part
        for mid, msg in self.messages.items():
            msg.parts = list(self.parts.get(mid, {}).values())
        return list(self.messages.values())


def _folded(events: list[Any], name: str) -> list[Message]:
    """Recorded events as the messages they leave: the last version of each message and
    part, text streamed to a part added to it, removed ones left out."""
    fold = _Fold(name)
    for k, event in enumerate(events):
        if _is_event(event) and event["type"] in MESSAGE_EVENTS:
            if isinstance(event["properties"], dict):
                fold.event(k, event["type"], event["properties"])
    return fold.messages_left()


def messages_of(data: Any, name: str) -> list[Message]:
    """The messages a value holds, in session order (see the module docstring)."""
    if isinstance(data, dict):
        listed = data["messages"]
        return [
            Message(m["info"], list(m["parts"]), f"{name}: messages[{k}]")
            for k, m in enumerate(listed)
        ]
    if all(_is_message(m) for m in data):
        return [Message(m["info"], list(m["parts"]), f"{name}: [{k}]") for k, m in enumerate(data)]
    return _folded(data, name)


def _usage(tokens: Any) -> dict[str, int]:
    """OpenCode's ``tokens`` (``input``, ``output``, ``reasoning``, ``cache.read``,
    ``cache.write``, ``total``), integer counts only, nested names joined with ``.``."""
    out: dict[str, int] = {}
    if not isinstance(tokens, dict):
        return out
    for key, value in tokens.items():
        if isinstance(value, dict):
            out.update(
                {
                    f"{key}.{sub}": v
                    for sub, v in value.items()
                    if isinstance(v, int) and not isinstance(v, bool)
                }
            )
        elif isinstance(value, int) and not isinstance(value, bool):
            out[key] = value
    return out


def _steps(parts: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """An assistant message's parts cut into steps at each ``step-start`` (a message with
    none is one step)."""
    steps: list[list[dict[str, Any]]] = []
    for part in parts:
        if part.get("type") == "step-start" or not steps:
            steps.append([])
        steps[-1].append(part)
    return [s for s in steps if any(p.get("type") not in BOOKKEEPING for p in s)] or steps[:1]


def _result(part: dict[str, Any]) -> dict[str, Any]:
    """A tool part's outcome as the ``tool_result`` block OpenCode sends back."""
    state = _obj(part.get("state"))
    status = state.get("status")
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": part.get("callID")}
    if status == "completed":
        output = state.get("output")
        block["content"] = output if isinstance(output, str) else json.dumps(output)
    elif status == "error":
        block["content"] = str(state.get("error") or "")
        block["is_error"] = True
    else:  # pending or running when the session was saved
        block["content"] = INTERRUPTED
        block["is_error"] = True
    return block


@dataclass(eq=False)
class _Session:
    """One session's context as read so far, its turns, and its compaction: the compaction
    request's place in the context (``asked``, until its summary is read) and the last
    compaction done, which every later call names."""

    context: list[Segment] = field(default_factory=list)
    turns: int = 0
    asked: tuple[int, str] | None = None
    compaction: Compaction | None = None


@dataclass
class _Step:
    """One step of an assistant message: its place (``k`` of ``of``), its parts, its reply
    as read, and the session and turn its call takes."""

    k: int
    of: int
    parts: list[dict[str, Any]]
    reply: Segment
    session: str
    turn: int


class Reader(RecordReader):
    """Reads a session's messages in order; each step of an assistant message is a call."""

    def __init__(self, name: str, session: str, now: datetime) -> None:
        super().__init__()
        self.name, self.session, self.now = name, session, now
        self.index = 0  # a running message number: the ids of the normalised messages
        self.seen: set[str] = set()  # the ids of the messages read so far

    def calls(self, messages: Iterable[Message]) -> list[Call]:
        """The calls, in session order (each session its own context and turns)."""
        sessions: dict[str, _Session] = {}
        out: list[Call] = []
        for msg in messages:
            self.seen.add(str(msg.info.get("id")))
            sid = str(msg.info.get("sessionID") or self.session)
            state = sessions.setdefault(sid, _Session())
            made = self.guard(msg.where, lambda: self._message(msg, sid, state))  # noqa: B023
            state.turns += len(made or [])
            out.extend(made or [])
        return self.finish(out)

    def _segment(self, api: dict[str, Any], where: str) -> Segment:
        """One Messages API message, normalised and checked against the trace contract."""
        tally = Tally(FORMAT)
        norm = anthropic.normalize_message(api, self.index, tally, where=where)
        self.index += 1
        seg = Segment(label=where, norm=norm, counts=dict(tally.counts))
        seg.unknown = list(tally.unknown)
        seg.entries()  # a message the trace contract refuses is this message's error
        return seg

    def _message(self, msg: Message, sid: str, state: _Session) -> list[Call]:
        """One message: a user message adds to the context (a compaction request marks its
        place); an assistant message is a call per step, each step's reply and tool results
        added after it; a compaction's summary, once read, replaces what came before the
        request."""
        context = state.context
        if msg.info["role"] == "user":
            blocks = [b for b in (self._user_block(p) for p in msg.parts) if b is not None]
            if any(p.get("type") == "compaction" for p in msg.parts):
                state.asked = (len(context), msg.where)
            if blocks:
                context.append(self._segment({"role": "user", "content": blocks}, msg.where))
            return []
        calls: list[Call] = []
        steps = _steps(msg.parts)
        for s, parts in enumerate(steps):
            where = f"{msg.where} step {s}" if len(steps) > 1 else msg.where
            reply, results = self._step(parts, where)
            step = _Step(s, len(steps), parts, reply, sid, state.turns + len(calls))
            call = self._call(msg, step, list(context))
            call.compaction = state.compaction
            calls.append(call)
            context.append(reply)
            if results is not None:
                context.append(results)
        if msg.info.get("summary") is True and state.asked is not None:
            at, label = state.asked
            state.compaction = Compaction(
                label=f"the compaction asked at {label}",
                replaced=context[:at],
                info={"summary": msg.where},
            )
            del context[:at]
            state.asked = None
        return calls

    def _user_block(self, part: dict[str, Any]) -> dict[str, Any] | None:
        """A user message's part as the block OpenCode sends (None: not sent)."""
        kind = part.get("type")
        if kind == "text":
            if part.get("ignored"):
                self.count_not_sent("ignored text")
                return None
            return {"type": "text", "text": str(part.get("text") or "")}
        if kind == "file":
            mime = str(part.get("mime") or "")
            if mime in NOT_SENT_MIME:
                self.count_not_sent(f"file ({mime})")
                return None
            block = "image" if mime.startswith("image/") else "document"
            source = {"type": "url", "url": str(part.get("url") or "")}
            return {"type": block, "source": source, "title": part.get("filename")}
        if kind == "compaction":
            return {"type": "text", "text": COMPACTION_PROMPT}
        if kind in BOOKKEEPING:
            self.count_not_sent(str(kind))
            return None
        return {**part, "type": f"opencode:{kind}"}  # not read here: kept as text, reported

    def _step(self, parts: list[dict[str, Any]], where: str) -> tuple[Segment, Segment | None]:
        """A step as the assistant message it was (reasoning, text, tool calls) and the user
        message of its tool results."""
        content: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        for part in parts:
            kind = part.get("type")
            if kind == "text":
                content.append({"type": "text", "text": str(part.get("text") or "")})
            elif kind == "reasoning":
                content.append({"type": "thinking", "thinking": str(part.get("text") or "")})
            elif kind == "tool":
                state = _obj(part.get("state"))
                call = {"type": "tool_use", "id": part.get("callID"), "name": part.get("tool")}
                content.append({**call, "input": state.get("input") or {}})
                results.append(_result(part))
            elif kind in BOOKKEEPING:
                self.count_not_sent(str(kind))
            else:  # not read here: kept as JSON text and reported
                content.append({**part, "type": f"opencode:{kind}"})
        reply = self._segment({"role": "assistant", "content": content}, where)
        if not results:
            return reply, None
        return reply, self._segment({"role": "user", "content": results}, f"{where} results")

    def _call(self, msg: Message, step: _Step, context: list[Segment]) -> Call:
        """The call a step is: its context what came before, its reply the outcome."""
        info = msg.info
        finish = next((p for p in step.parts if p.get("type") == "step-finish"), None)
        alone = step.of == 1
        tokens = finish.get("tokens") if finish else info.get("tokens") if alone else None
        usage = _usage(tokens)
        log: dict[str, Any] = {"file": self.name, "message_id": info.get("id"), "step": step.k}
        for key in ("providerID", "mode", "agent", "parentID", "finish"):
            if isinstance(info.get(key), str):
                log[key] = info[key]
        if finish is not None and isinstance(finish.get("reason"), str):
            log["step_reason"] = finish["reason"]
        if isinstance(info.get("error"), dict):
            log["error"] = info["error"].get("name") or "error"
        warnings = [WARNING]
        parent = info.get("parentID")
        if isinstance(parent, str) and parent not in self.seen:
            log["parent_not_in_file"] = parent
            warnings.append(f"the user message this answers ({parent}) is not in the file")
        answer = next((m for m in step.reply.norm if m.role == "assistant"), None)
        times = _obj(info.get("time"))
        model = info.get("modelID")
        call = Call(
            session_id=step.session,
            turn=step.turn,
            key=f"{info.get('id')}-{step.k}",
            context=context,
            created_at=_ms(times.get("created")) or self.now,
            model=model if isinstance(model, str) and model else None,
            usage=usage,
            usage_mapping="opencode",
            output=reply_text(answer) if answer is not None else None,
            metadata={"session_log": log},
            recorded=["messages", "tool calls and results"] + (["usage", "model"] if usage else []),
            reconstructed=list(RECONSTRUCTED),
            warnings=warnings,
            skipped=self.since_last_call(),
        )
        return call


def _obj(value: Any) -> dict[str, Any]:
    """A field that should hold an object, or an empty one."""
    return value if isinstance(value, dict) else {}


def _ms(value: Any) -> datetime | None:
    """Epoch milliseconds (OpenCode's times) as an aware datetime."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return datetime.fromtimestamp(value / 1000, tz=UTC)
    return None


def read(data: Any, *, where: str, session_id: str, default_now: datetime | None) -> list[Any]:
    """The reader of an OpenCode session already parsed (``registry.Reader``)."""
    name = where or "input"
    if not looks_like(data):
        raise ImportFormatError(
            f"{name}: not an OpenCode session (an export, a message list or recorded events)"
        )
    reader = Reader(name, session_id, default_now or datetime.now(UTC))
    calls = reader.calls(messages_of(data, name))
    traces = SessionImport(FORMAT, lambda: calls, reader).collect()
    if not traces:
        why = reader.errors[0] if reader.errors else "it records no reply of the model"
        raise ImportFormatError(f"{name}: an OpenCode session with no model call ({why})")
    return traces


__all__ = ["FORMAT", "Message", "Reader", "looks_like", "messages_of", "read"]
