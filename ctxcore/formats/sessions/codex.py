"""OpenAI Codex CLI rollouts (``~/.codex/sessions/…/rollout-*.jsonl``), one trace per call.

Each line is ``{"timestamp", "type", "payload"}``:

- ``session_meta``: the session's id, cwd, CLI version, originator and the base
  instructions (the system prompt, recorded);
- ``turn_context``: the model, the approval and sandbox policies of the calls that follow.
  Older CLIs (0.104) write one before each call, after the user's message; newer ones
  (0.135) one per turn, before the user's message: it marks no call boundary;
- ``response_item``: a Responses API item, read by ``ctxcore.formats.responses`` (messages,
  ``function_call``/``function_call_output``, ``reasoning``…); Codex's own
  ``custom_tool_call``/``custom_tool_call_output`` (apply_patch) and ``local_shell_call`` are
  tool calls and results too. A call is the model's reply: a run of items the model
  produces (reasoning, assistant messages, tool calls); its context is every item recorded
  before the run, and an item the model did not produce (a tool result, the user's next
  message) ends the run, so the next reply is the next call;
- ``event_msg`` ``token_count``: the usage of the call that just ended. The one written right
  after a ``turn_context`` repeats the previous call's, so a call's usage is the first
  ``last_token_usage`` whose cumulative total is new (never the sum of the repeats). A
  rollout without any (0.77, or one cut before the first) has its calls all the same, with
  no usage;
- ``compacted``: the context is replaced by ``replacement_history`` (or, in older rollouts,
  a summary ``message``); the calls after it show what it replaced as summarized.

Rollouts do not record the tool definitions: each trace says so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ctxcore.errors import ImportFormatError
from ctxcore.formats import responses
from ctxcore.formats.accounting import Tally
from ctxcore.formats.norm import NormMessage, usage_from_obj
from ctxcore.formats.sessions.calls import Call, Compaction, Segment
from ctxcore.formats.sessions.lines import LogLine, parse_time, unexpected

FORMAT = "codex"
BUILDER_NAME = "import/codex"
LINE_TYPES = frozenset({"session_meta", "turn_context", "response_item", "event_msg", "compacted"})
#: Items the model produces (a call's output); every other item is input.
_OUTPUT_ITEMS = frozenset(
    {
        "reasoning",
        "function_call",
        "custom_tool_call",
        "local_shell_call",
        "web_search_call",
        "image_generation_call",
    }
)
#: Items Codex records for itself and never sends to the model.
_INTERNAL_ITEMS = frozenset({"ghost_snapshot"})
WARNING = (
    "reconstructed from a Codex rollout, which does not record the tool definitions: this "
    "input lacks them, the provider's prompt count includes them"
)
_PATH = re.compile(r"^input\[(\d+)\]")


def looks_like(obj: Any) -> bool:
    """Whether one parsed line is a Codex rollout event."""
    kind = obj.get("type") if isinstance(obj, dict) else None
    return isinstance(kind, str) and kind in LINE_TYPES and isinstance(obj.get("payload"), dict)


def _as_responses(item: dict[str, Any]) -> dict[str, Any]:
    """Codex's own item types in the Responses shapes the reader knows."""
    kind = item.get("type")
    if kind == "custom_tool_call":
        return {
            "type": "function_call",
            "call_id": item.get("call_id"),
            "name": item.get("name"),
            "arguments": item.get("input", ""),
        }
    if kind == "custom_tool_call_output":
        return {
            "type": "function_call_output",
            "call_id": item.get("call_id"),
            "output": item.get("output"),
        }
    if kind == "local_shell_call":
        return {
            "type": "function_call",
            "call_id": item.get("call_id", item.get("id")),
            "name": "local_shell",
            "arguments": json.dumps(item.get("action", {}), ensure_ascii=False),
        }
    if kind == "compaction":
        # the summary a remote compaction wrote, encrypted: only its size is known
        size = len(str(item.get("encrypted_content") or ""))
        return {
            "type": "message",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": f"[compaction summary, encrypted: {size:,} chars]"}
            ],
        }
    return item


def _is_output(item: dict[str, Any]) -> bool:
    kind = item.get("type")
    return kind in _OUTPUT_ITEMS or (kind == "message" and item.get("role") == "assistant")


@dataclass(eq=False)
class _Open:
    """A call under way: its context is fixed, its output is still being written."""

    line: int
    context: list[Segment]
    created_at: datetime
    model: str | None
    compaction: Compaction | None
    policies: dict[str, Any]
    outputs: list[dict[str, Any]] = field(default_factory=list)


class Reader:
    """Reads a rollout line by line and yields each call once its usage (or the next call)
    arrives."""

    def __init__(self, name: str, default_session: str, default_now: datetime) -> None:
        self.name = name
        self.session = default_session
        self.default_now = default_now
        self.system: Segment | None = None
        self.context: list[Segment] = []
        self.pending: list[tuple[int, dict[str, Any]]] = []
        self.open: _Open | None = None
        #: an item the model did not produce came after the open call's reply: the next
        #: reply is another call
        self.fed = False
        self.when: datetime | None = None  # the last time a line gave
        self.last_total: Any = None
        self.window: int | None = None
        self.model: str | None = None
        self.policies: dict[str, Any] = {}
        self.compaction: Compaction | None = None
        self.turns = 0
        self.errors: list[str] = []
        self.reported = 0  # errors already on a call
        self.meta: dict[str, Any] = {}
        self.skipped: dict[str, int] = {}

    def calls(self, lines: Iterable[LogLine]) -> Iterator[Call]:
        """The calls, each once the next one starts (or the log ends: the last call then
        says what the items after it hold, which no call saw)."""
        ready: Call | None = None
        for ln in lines:
            if ln.error is not None:
                self.errors.append(ln.error)
                continue
            closed: list[Call] = []
            try:
                closed = list(self._line(ln.number, ln.value))
            except ImportFormatError as exc:
                self.errors.append(f"{self.name}:{ln.number}: {exc}")
            except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
                # a field of a type the reader did not expect: this line's error, one line
                self.errors.append(f"{self.name}:{ln.number}: {unexpected(exc)}")
            for call in closed:
                if ready is not None:
                    yield ready
                ready = call
        if self.open is not None:
            if ready is not None:
                yield ready
            ready = self._close(None)
        if ready is None and self.pending:
            # no reply: no call to hold what the log recorded, and nothing to say so but this
            msgs = sum(1 for _, it in self.pending if it.get("type") == "message")
            self.errors.append(
                f"{self.name}: no model reply in the log (no reasoning, assistant message or "
                f"tool call): {msgs} messages and {len(self.pending) - msgs} other items "
                "belong to no call"
            )
        if ready is not None:
            after = {
                "messages": sum(
                    1
                    for _, it in self.pending
                    if it.get("type") == "message" and not _is_output(it)
                ),
                "tool_results": sum(
                    1
                    for _, it in self.pending
                    if it.get("type") in ("function_call_output", "custom_tool_call_output")
                ),
            }
            if any(after.values()):
                ready.metadata["session_log"]["after_last_call"] = after
            yield ready

    def _line(self, n: int, obj: Any) -> Iterator[Call]:
        if not looks_like(obj):
            raise ImportFormatError("not a rollout event ({type, payload})")
        kind, payload = obj["type"], obj["payload"]
        when = parse_time(obj.get("timestamp"))
        sent = self.when  # the request went out after the lines before this one
        self.when = when or self.when
        if kind == "session_meta":
            self._session_meta(n, payload)
        elif kind == "turn_context":
            if self.open is not None:  # a new turn: the open call's reply is over
                yield self._close(None)
            model = payload.get("model")
            self.model = model if isinstance(model, str) and model else self.model
            self.policies = {
                k: payload[k]
                for k in ("approval_policy", "sandbox_policy", "effort", "cwd")
                if k in payload
            }
        elif kind == "response_item":
            item = payload
            itype = item.get("type")
            if itype in _INTERNAL_ITEMS:
                self.skipped[str(itype)] = self.skipped.get(str(itype), 0) + 1
                return
            if _is_output(item):
                if self.open is not None and self.fed:
                    yield self._close(None)
                if self.open is None:  # the first item of a reply: a call starts
                    self.open = self._start(n, sent or when)
                self.open.outputs.append(item)
            elif self.open is not None:
                self.fed = True
            self.pending.append((n, item))
        elif kind == "event_msg":
            yield from self._event(payload)
        elif kind == "compacted":
            if self.open is not None:
                yield self._close(None)
            self.open = None
            self._compacted(n, payload)

    def _session_meta(self, n: int, payload: dict[str, Any]) -> None:
        sid = payload.get("id")
        if isinstance(sid, str) and sid and not self.meta:
            self.session = sid
        for key in ("cwd", "originator", "cli_version", "source", "model_provider"):
            if isinstance(payload.get(key), str):
                self.meta[key] = payload[key]
        base = payload.get("base_instructions")
        text = base.get("text") if isinstance(base, dict) else payload.get("instructions")
        if isinstance(text, str) and text and self.system is None:
            self.system = Segment(
                label=f"line {n}",
                norm=[NormMessage(index=n, role="system", text=text, id="instructions")],
                counts={"system_parts": 1},
            )
            self.system.entries()

    def _event(self, payload: dict[str, Any]) -> Iterator[Call]:
        kind = payload.get("type")
        if kind == "task_started" and isinstance(payload.get("model_context_window"), int):
            self.window = payload["model_context_window"]
        if kind != "token_count" or not isinstance(payload.get("info"), dict):
            return
        info = payload["info"]
        if isinstance(info.get("model_context_window"), int):
            self.window = info["model_context_window"]
        total = info.get("total_token_usage")
        new = total != self.last_total
        self.last_total = total
        if new and self.open is not None:
            yield self._close(usage_from_obj(info.get("last_token_usage")))

    def _flush(self) -> None:
        """The items read since the last call become one segment of the context."""
        if not self.pending:
            return
        seg = self._segment(self.pending)
        self.pending = []
        if seg is not None:
            self.context.append(seg)

    def _segment(self, items: list[tuple[int, dict[str, Any]]]) -> Segment | None:
        lines = [n for n, _ in items]
        tally = Tally(FORMAT)
        try:
            norm = responses.normalize({"input": [_as_responses(it) for _, it in items]}, tally)
        except ImportFormatError as exc:
            # one bad item: read the items one by one and leave out the bad one
            if len(items) == 1:
                self.errors.append(f"{self.name}:{lines[0]}: {exc}")
                return None
            parts = [self._segment([x]) for x in items]
            good = [p for p in parts if p is not None]
            if not good:
                return None
            return Segment(
                label=f"lines {lines[0]}-{lines[-1]}",
                norm=[m for p in good for m in p.norm],
                counts={k: sum(p.counts.get(k, 0) for p in good) for k in tally.counts},
                unknown=[u for p in good for u in p.unknown],
            )
        per_line: dict[int, int] = {}
        for m in norm:
            line = lines[min(max(m.index, 0), len(lines) - 1)]
            k = per_line.get(line, 0)
            per_line[line] = k + 1
            m.index = line
            prefix = "msg" if m.id is None else "item"
            m.id = f"{prefix}-{line}" if lines.count(line) == 1 else f"{prefix}-{line}-{k}"
        unknown = [
            _PATH.sub(lambda g: f"line {lines[int(g.group(1))]}: payload", u) for u in tally.unknown
        ]
        label = f"line {lines[0]}" if len(set(lines)) == 1 else f"lines {lines[0]}-{lines[-1]}"
        seg = Segment(label=label, norm=norm, counts=dict(tally.counts), unknown=unknown)
        try:
            seg.entries()
        except ImportFormatError as exc:
            self.errors.append(f"{self.name}:{lines[0]}: {exc}")
            return None
        return seg

    def _start(self, n: int, when: datetime | None) -> _Open:
        self._flush()
        ctx = ([self.system] if self.system is not None else []) + self.context
        return _Open(
            n, ctx, when or self.default_now, self.model, self.compaction, dict(self.policies)
        )

    def _compacted(self, n: int, payload: dict[str, Any]) -> None:
        self._flush()
        replaced = list(self.context)
        history = payload.get("replacement_history")
        info: dict[str, Any] = {"line": n}
        if isinstance(history, list):
            items = [(n, it) for it in history if isinstance(it, dict)]
            info["replacement_items"] = len(items)
        else:
            summary = payload.get("message")
            text = summary if isinstance(summary, str) else ""
            items = [(n, {"type": "message", "role": "user", "content": text})]
            info["reconstructed"] = "the summary message only (no replacement_history)"
        seg = self._segment(items) if items else None
        self.context = [seg] if seg is not None else []
        self.compaction = Compaction(
            label=f"the compaction at line {n}", replaced=replaced, info=info
        )

    def _close(self, usage: dict[str, int] | None) -> Call:
        o = self.open
        assert o is not None
        self.open = None
        self.fed = False
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for it in o.outputs:
            item = _as_responses(it)
            if item.get("type") == "message":
                for part in item.get("content") or []:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        texts.append(part["text"])
            elif item.get("type") == "function_call":
                texts.append(f"{item.get('name')}({item.get('arguments')})")
                calls.append({"id": item.get("call_id"), "name": item.get("name")})
        log: dict[str, Any] = {"file": self.name, "line": o.line, **self.meta, **o.policies}
        if calls:
            log["tool_calls"] = calls
        if self.skipped:
            log["not_sent_to_the_model"] = dict(self.skipped)
        call = Call(
            session_id=self.session,
            turn=self.turns,
            key=f"line-{o.line}",
            context=o.context,
            created_at=o.created_at,
            model=o.model,
            usage=usage or {},
            usage_mapping="codex",
            output="\n".join(texts) if texts else None,
            window=self.window,
            window_source="the rollout (model_context_window)" if self.window else None,
            compaction=o.compaction,
            metadata={"session_log": log},
            recorded=["system prompt", "messages", "usage", "model", "context window"],
            reconstructed=["tool definitions"],
            warnings=[WARNING],
            skipped=self.errors[self.reported :],
        )
        self.reported = len(self.errors)
        self.turns += 1
        return call


__all__ = ["BUILDER_NAME", "FORMAT", "Reader", "looks_like"]
