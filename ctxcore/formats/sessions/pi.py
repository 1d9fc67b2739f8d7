"""Pi coding agent sessions (badlogic/pi-mono, ``~/.pi/agent/sessions/…/*.jsonl``), one trace
per model call.

Each line is an entry ``{"type", "timestamp", …}``:

- ``session``: the header (the session's id, cwd, provider and model; ``version`` 2 or 3 for
  the tree layout below, none for the first, linear one);
- ``message``: an agent message. ``user`` and ``toolResult`` messages are input;
  ``bashExecution`` (a ``!command`` the user ran), ``custom``, ``branchSummary`` and
  ``compactionSummary`` messages reach the model as user messages, as pi sends them
  (``convertToLlm`` in pi-mono). Every ``assistant`` message is one model call: its reply
  (text, ``thinking``, ``toolCall`` blocks), the provider, model and API that answered, the
  usage (``input`` without cache reads, ``output``, ``cacheRead``, ``cacheWrite``, ``cost``),
  its ``stopReason`` and the time the request started (``timestamp``, ms);
- ``custom_message`` and ``branch_summary``: text pi puts in the context as user messages;
- ``compaction``: the context before it is replaced by its ``summary`` (sent as a user message)
  and the entries from ``firstKeptEntryId`` (``firstKeptEntryIndex`` in the linear layout: an
  index into the file's entries, the header being 0) up to the compaction;
- ``model_change``, ``thinking_level_change``, ``label``, ``session_info``, ``custom``:
  settings and the agent's own records, never sent to the model.

From version 2 every entry has an ``id`` and a ``parentId``: a session is a tree (the user
went back and branched), and a call's context is the path from the root to its parent entry.
The linear layout is the chain of its lines, as pi migrates it.

Pi does not record the system prompt or the tool definitions: each trace says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ctxcore.errors import ImportFormatError
from ctxcore.formats import anthropic
from ctxcore.formats.accounting import Tally
from ctxcore.formats.norm import reply_text
from ctxcore.formats.sessions.calls import Call, Compaction, Segment, prepare
from ctxcore.formats.sessions.lines import LogLine, parse_time, unexpected

FORMAT = "pi"
BUILDER_NAME = "import/pi"
ENTRY_TYPES = frozenset(
    {
        "session",
        "message",
        "model_change",
        "thinking_level_change",
        "compaction",
        "branch_summary",
        "custom",
        "custom_message",
        "label",
        "session_info",
    }
)
#: Entries pi keeps for itself (settings, bookmarks, extension state): never in a context.
_RECORDS = frozenset({"model_change", "thinking_level_change", "custom", "label", "session_info"})
ROLES = frozenset(
    {"user", "assistant", "toolResult", "bashExecution", "custom", "branchSummary"}
    | {"compactionSummary"}
)
#: How pi words the summaries it puts in a context (pi-mono ``core/messages.ts``).
COMPACTION_PREFIX = (
    "The conversation history before this point was compacted into the following summary:"
    "\n\n<summary>\n"
)
COMPACTION_SUFFIX = "\n</summary>"
BRANCH_PREFIX = (
    "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
)
BRANCH_SUFFIX = "</summary>"
#: Pi's usage counters under the Messages API names (pi's ``input`` excludes cache reads and
#: writes, as Anthropic's ``input_tokens`` does, whatever the provider).
_USAGE = {
    "input": "input_tokens",
    "output": "output_tokens",
    "cacheRead": "cache_read_input_tokens",
    "cacheWrite": "cache_creation_input_tokens",
    "totalTokens": "total_tokens",
}
RECONSTRUCTED = ("system prompt", "tool definitions")
WARNING = (
    "reconstructed from a Pi session, which does not record the system prompt or the tool "
    "definitions: this input lacks them, the provider's prompt count includes them"
)


def looks_like(obj: Any) -> bool:
    """Whether one parsed line is a Pi session entry: the header (an ``id`` and a ``cwd``) or
    a ``message`` entry holding an agent message of a Pi role."""
    if not isinstance(obj, dict):
        return False
    kind = obj.get("type")
    if kind == "session":
        return isinstance(obj.get("id"), str) and isinstance(obj.get("cwd"), str)
    message = obj.get("message")
    return (
        kind == "message"
        and isinstance(message, dict)
        and message.get("role") in ROLES
        and "payload" not in obj
    )


def _text_blocks(content: Any) -> list[Any]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])


def _block(block: Any) -> Any:
    """A Pi content block in the Messages API shape (unknown blocks as they are: the
    Anthropic reader keeps them as text and reports them)."""
    if not isinstance(block, dict):
        return block
    kind = block.get("type")
    if kind == "toolCall":
        return {
            "type": "tool_use",
            "id": block.get("id"),
            "name": block.get("name"),
            "input": block.get("arguments", {}),
        }
    if kind == "thinking":
        return {"type": "thinking", "thinking": block.get("thinking", "")}
    if kind == "image":
        source = {"type": "base64", "media_type": block.get("mimeType"), "data": block.get("data")}
        return {"type": "image", "source": source}
    return block


def bash_text(msg: dict[str, Any]) -> str:
    """A ``!command`` the user ran, as pi sends it (``bashExecutionToText``)."""
    text = f"Ran `{msg.get('command', '')}`\n"
    output = msg.get("output")
    text += f"```\n{output}\n```" if output else "(no output)"
    code = msg.get("exitCode")
    if msg.get("cancelled"):
        text += "\n\n(command cancelled)"
    elif isinstance(code, int) and code != 0:
        text += f"\n\nCommand exited with code {code}"
    if msg.get("truncated") and msg.get("fullOutputPath"):
        text += f"\n\n[Output truncated. Full output: {msg['fullOutputPath']}]"
    return text


def as_messages_api(msg: dict[str, Any]) -> dict[str, Any] | None:
    """An agent message as the Messages API message pi sends for it (None: not sent)."""
    role = msg.get("role")
    if role == "assistant":
        return {"role": "assistant", "content": [_block(b) for b in _text_blocks(msg["content"])]}
    if role == "toolResult":
        result = {
            "type": "tool_result",
            "tool_use_id": msg.get("toolCallId"),
            "content": [_block(b) for b in _text_blocks(msg.get("content"))],
        }
        if msg.get("isError"):
            result["is_error"] = True
        return {"role": "user", "content": [result]}
    if role == "bashExecution":
        if msg.get("excludeFromContext"):
            return None
        return {"role": "user", "content": bash_text(msg)}
    if role == "branchSummary":
        return {"role": "user", "content": BRANCH_PREFIX + str(msg["summary"]) + BRANCH_SUFFIX}
    if role == "compactionSummary":
        text = COMPACTION_PREFIX + str(msg["summary"]) + COMPACTION_SUFFIX
        return {"role": "user", "content": text}
    if role in ("user", "custom"):
        return {"role": "user", "content": [_block(b) for b in _text_blocks(msg["content"])]}
    raise ImportFormatError(f"message.role: not a Pi message role ({role!r})")


def usage(obj: Any) -> dict[str, int]:
    """A Pi usage object under the Messages API names (cost is not a token count: it goes in
    the call's metadata)."""
    if not isinstance(obj, dict):
        return {}
    return {
        name: obj[key]
        for key, name in _USAGE.items()
        if isinstance(obj.get(key), int) and not isinstance(obj.get(key), bool)
    }


@dataclass(eq=False, slots=True)
class _Node:
    """One entry of the session's tree: its parent, and what it adds to a context."""

    key: str
    parent: str | None
    line: int
    seg: Segment | None = None
    #: a compaction: the summary's segment and the entry the kept context starts at
    compaction: Compaction | None = None
    first_kept: str | None = None


@dataclass(eq=False)
class _Path:
    """The branch of the tree the log is on: its entries from the root, where each is, the
    segments they add (``before[i]``: how many come before entry ``i``) and the compactions
    on it (their places)."""

    nodes: list[_Node] = field(default_factory=list)
    at: dict[str, int] = field(default_factory=dict)
    segs: list[Segment] = field(default_factory=list)
    before: list[int] = field(default_factory=list)
    compactions: list[int] = field(default_factory=list)

    def extend(self, node: _Node, tree: dict[str, _Node]) -> None:
        """Put ``node`` at the end of the path: after the last entry, after its parent
        earlier on the path (the user went back), or on the branch its parent is on."""
        if node.parent is None:
            self._cut(0)
        elif not self.nodes or self.nodes[-1].key != node.parent:
            if node.parent in self.at:
                self._cut(self.at[node.parent] + 1)
            else:
                self._cut(0)
                for old in _chain(node.parent, tree):
                    self._append(old)
        self._append(node)

    def _append(self, node: _Node) -> None:
        self.at[node.key] = len(self.nodes)
        self.before.append(len(self.segs))
        if node.compaction is not None:
            self.compactions.append(len(self.nodes))
        self.nodes.append(node)
        if node.seg is not None:
            self.segs.append(node.seg)

    def _cut(self, keep: int) -> None:
        """Keep the first ``keep`` entries of the path."""
        for gone in self.nodes[keep:]:
            self.at.pop(gone.key, None)
        if keep < len(self.nodes):
            del self.segs[self.before[keep] :]
        del self.nodes[keep:], self.before[keep:]
        while self.compactions and self.compactions[-1] >= keep:
            self.compactions.pop()

    def context(self) -> tuple[list[Segment], Compaction | None]:
        """The segments the model sees at the end of the path, and the compaction in force
        (the last one on the path: its summary, then the kept entries, then what follows)."""
        if not self.compactions:
            return list(self.segs), None
        last = self.compactions[-1]
        comp = self.nodes[last]
        assert comp.compaction is not None
        start = min(self.at.get(comp.first_kept or "", last), last)
        kept = self.segs[self.before[start] : self.before[last]]
        after = self.segs[self.before[last] :]
        return after[:1] + kept + after[1:], comp.compaction

    def drop(self, node: _Node) -> None:
        """Take a segment that cannot be imported out of the path (the entry stays)."""
        node.seg = None
        self.segs = [n.seg for n in self.nodes if n.seg is not None]
        count = 0
        for i, n in enumerate(self.nodes):
            self.before[i] = count
            count += n.seg is not None

    def kept_from(self, key: str | None) -> list[Segment]:
        """The segments from entry ``key`` to the end of the path (none: not on it)."""
        at = self.at.get(key or "")
        return [] if at is None else self.segs[self.before[at] :]


def _chain(key: str, tree: dict[str, _Node]) -> list[_Node]:
    """The entries from the root to ``key`` (as far as the file holds them)."""
    chain: list[_Node] = []
    seen: set[str] = set()
    cur: str | None = key
    while cur is not None and cur in tree and cur not in seen:
        seen.add(cur)
        chain.append(tree[cur])
        cur = tree[cur].parent
    chain.reverse()
    return chain


class Reader:
    """Reads a session line by line and yields each call as its assistant message comes."""

    def __init__(self, name: str, default_session: str, default_now: datetime) -> None:
        self.name = name
        self.session = default_session
        self.default_now = default_now
        self.meta: dict[str, Any] = {}
        self.tree: dict[str, _Node] = {}
        self.path = _Path()
        self.prev: str | None = None  # the previous entry (the linear layout's parent)
        self.keys: list[str] = []  # the linear layout's entries in order (its indexes)
        self.turns = 0
        self.errors: list[str] = []
        self.reported = 0
        self.since_call = {"messages": 0, "tool_results": 0}
        self.skipped: dict[str, int] = {}
        #: entries whose segments are not checked yet (``calls.prepare``, at the next call)
        self.fresh: list[_Node] = []

    def calls(self, lines: Iterable[LogLine]) -> Iterator[Call]:
        """The calls, in the order of their assistant messages."""
        last: Call | None = None
        for ln in lines:
            if ln.error is not None:
                self.errors.append(ln.error)
                continue
            try:
                call = self._line(ln.number, ln.value)
            except ImportFormatError as exc:
                self.errors.append(f"{self.name}:{ln.number}: {exc}")
                continue
            except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
                self.errors.append(f"{self.name}:{ln.number}: {unexpected(exc)}")
                continue
            if call is not None:
                if last is not None:
                    yield last
                last = call
        if last is not None:
            if any(self.since_call.values()):
                last.metadata["session_log"]["after_last_call"] = dict(self.since_call)
            yield last

    def _line(self, n: int, obj: Any) -> Call | None:
        if not isinstance(obj, dict) or obj.get("type") not in ENTRY_TYPES:
            raise ImportFormatError("not a Pi session entry (type: session, message, …)")
        kind = obj["type"]
        if kind == "session":
            self._header(obj)
            return None
        node = self._node(n, obj)
        if kind in _RECORDS:
            self.skipped[kind] = self.skipped.get(kind, 0) + 1
        elif kind == "compaction":
            self._compaction(node, obj)
        elif kind == "branch_summary":
            node.seg = self._segment(n, {"role": "branchSummary", "summary": obj["summary"]})
        elif kind == "custom_message":
            node.seg = self._segment(n, {"role": "custom", "content": obj["content"]})
        else:
            message = obj["message"]
            if not isinstance(message, dict):
                raise ImportFormatError("message: expected an object")
            if message.get("role") == "assistant":
                node.seg = self._segment(n, message)
                self._settle()
                call = self._call(n, obj, message, node.seg)  # its context: the path before it
                self.path.extend(node, self.tree)
                self.fresh.append(node)
                return call
            node.seg = self._segment(n, message)
            if node.seg is not None:
                results = node.seg.counts.get("tool_results", 0)
                self.since_call["tool_results"] += results
                self.since_call["messages"] += node.seg.counts.get("messages", 0) - results
        self.path.extend(node, self.tree)
        self.fresh.append(node)
        return None

    def _header(self, obj: dict[str, Any]) -> None:
        sid = obj.get("id")
        if isinstance(sid, str) and sid and not self.meta:
            self.session = sid
        for key in ("cwd", "provider", "modelId", "version", "branchedFrom", "parentSession"):
            if isinstance(obj.get(key), (str, int)) and not isinstance(obj.get(key), bool):
                self.meta[key] = obj[key]
        self.keys.append("header")

    def _node(self, n: int, obj: dict[str, Any]) -> _Node:
        """The entry's place in the tree (the linear layout: after the previous entry)."""
        eid = obj.get("id")
        if isinstance(eid, str) and eid and "parentId" in obj:
            parent = obj["parentId"]
            if parent is not None and not isinstance(parent, str):
                raise ImportFormatError(f"parentId: expected a string or null, got {parent!r}")
            if parent is not None and parent not in self.tree:
                self.errors.append(
                    f"{self.name}:{n}: its parent entry {parent!r} is not in the file: "
                    "it goes on from the entry before it"
                )
                parent = self.prev
            key = eid
        else:
            key, parent = f"line-{n}", self.prev
        node = _Node(key, parent, n)
        self.tree[key] = node
        self.keys.append(key)
        self.prev = key
        return node

    def _segment(self, n: int, message: dict[str, Any]) -> Segment | None:
        api = as_messages_api(message)
        if api is None:
            return None
        tally = Tally(FORMAT)
        norm = anthropic.normalize_message(api, n, tally, where=f"line {n}: message")
        return Segment(
            label=f"line {n}", norm=norm, counts=dict(tally.counts), unknown=list(tally.unknown)
        )

    def _settle(self) -> None:
        """Check the segments read since the last call, together (``calls.prepare``): a
        message the trace contract refuses is its line's error, and leaves the context."""
        fresh = {id(node.seg): node for node in self.fresh if node.seg is not None}
        self.fresh = []
        for seg, exc in prepare([node.seg for node in fresh.values() if node.seg is not None]):
            node = fresh[id(seg)]
            self.errors.append(f"{self.name}:{node.line}: {exc}")
            if node.key in self.path.at:
                self.path.drop(node)
            else:
                node.seg = None

    def _compaction(self, node: _Node, obj: dict[str, Any]) -> None:
        summary = obj["summary"]
        if not isinstance(summary, str):
            raise ImportFormatError("compaction.summary: expected a string")
        first = obj.get("firstKeptEntryId")
        index = obj.get("firstKeptEntryIndex")
        if not isinstance(first, str) and isinstance(index, int) and 0 < index < len(self.keys):
            first = self.keys[index]
        node.first_kept = first if isinstance(first, str) else None
        node.seg = self._segment(node.line, {"role": "compactionSummary", "summary": summary})
        self._settle()
        before, _ = self.path.context()
        kept = {id(seg) for seg in self.path.kept_from(node.first_kept)}
        info: dict[str, Any] = {"line": node.line, "tokens_before": obj.get("tokensBefore")}
        if node.first_kept is not None and node.first_kept not in self.path.at:
            info["first_kept_not_found"] = node.first_kept
        node.compaction = Compaction(
            label=f"the compaction at line {node.line}",
            replaced=[s for s in before if id(s) not in kept],
            info=info,
        )

    def _call(
        self, n: int, obj: dict[str, Any], message: dict[str, Any], reply: Segment | None
    ) -> Call:
        """The call whose reply is this assistant message: its context is the path so far."""
        context, compaction = self.path.context()
        norm = reply.norm if reply is not None else []
        calls = [{"id": c.id, "name": c.name} for m in norm for c in m.tool_calls]
        lines = [t for m in norm if (t := reply_text(m))]
        log: dict[str, Any] = {"file": self.name, "line": n, **self.meta}
        for key in ("provider", "api", "stopReason", "errorMessage"):
            if isinstance(message.get(key), str):
                log[key] = message[key]
        cost = (message.get("usage") or {}).get("cost")
        if isinstance(cost, dict) and isinstance(cost.get("total"), (int, float)):
            log["cost"] = cost["total"]
        if calls:
            log["tool_calls"] = calls
        if self.skipped:
            log["not_sent_to_the_model"] = dict(self.skipped)
        model = message.get("model")
        call = Call(
            session_id=self.session,
            turn=self.turns,
            key=f"line-{n}",
            context=context,
            created_at=_started(message, obj) or self.default_now,
            model=model if isinstance(model, str) and model else None,
            usage=usage(message.get("usage")),
            usage_mapping="anthropic",
            output="\n".join(lines) if lines else None,
            compaction=compaction,
            metadata={"session_log": log},
            recorded=["messages", "usage", "model"],
            reconstructed=list(RECONSTRUCTED),
            warnings=[WARNING],
            skipped=self.errors[self.reported :],
        )
        self.reported = len(self.errors)
        self.turns += 1
        self.since_call = {"messages": 0, "tool_results": 0}
        return call


def _started(message: dict[str, Any], obj: dict[str, Any]) -> datetime | None:
    """When the call's request went out: the assistant message's ``timestamp`` (ms), else the
    time the entry was written."""
    ms = message.get("timestamp")
    if isinstance(ms, (int, float)) and not isinstance(ms, bool) and ms > 0:
        try:
            return datetime.fromtimestamp(ms / 1000, tz=UTC)
        except (OverflowError, OSError, ValueError):
            pass
    return parse_time(obj.get("timestamp"))


__all__ = ["BUILDER_NAME", "FORMAT", "Reader", "as_messages_api", "looks_like", "usage"]
