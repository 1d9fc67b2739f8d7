"""Claude Code session logs (``~/.claude/projects/<project>/<session>.jsonl``), one trace per call.

Each line is an event: ``user`` and ``assistant`` lines carry ``message`` in the Anthropic
Messages shape (read by ``ctxcore.formats.anthropic``'s block handling: tool_use, tool_result,
thinking, images, anything unknown kept as text), chained by ``uuid``/``parentUuid``. A model
call's context is the chain from the root to the line before its reply, so a rewind (two
children of one line) gives the later calls the branch they really saw. One API response is
written over several ``assistant`` lines sharing ``message.id``: they are one call (its
usage is the last line's, whose ``output_tokens`` is final) and one assistant message.

Sub-agents (the Task tool) write ``isSidechain`` lines: each sidechain is its own session,
``<session>/<agent>`` (``agentId``, else the id of the Task call whose prompt started it),
with the parent named in ``metadata.session_log.parent``. Compaction: a ``compact_boundary``
system line starts a new chain (its ``logicalParentUuid`` is the last line before it) and the
``isCompactSummary`` user line after it holds the summary; the calls after it see the summary
instead of the older messages, which appear as ``summarized`` decisions.

``summary`` lines are the titles Claude Code writes for a conversation, named by its last line
(``leafUuid``), for its resume list: the model never saw them, so they are metadata, not
context. Every call after one carries the titles read so far in ``metadata.session_log.titles``
(text, line, and the leaf's line or that it is not in the file), and ``title`` when the leaf
was read before the call was made and the call's reply leads to it (or is on the chain that
does). A summary line with a ``uuid`` is a line of the chain: a line naming it as parent finds
it. A line whose parent comes later in the file is read as continuing the line before it, and
the error says where its parent is; only a parent the whole file lacks is "not in the file".

The log does not record the system prompt, the tool definitions or ``max_tokens``: each trace
says so (``metadata.import.reconstructed`` and a warning), and the provider's prompt count
(``input_tokens`` + cache reads + cache writes) is kept beside ours.

Memory holds the messages of each session's current chain (what its next call sees), the
context its latest compaction replaced, and up to ``HELD_CHARS`` characters of the other
lines read (a branch a rewind left, the chain before a compaction), oldest let go first:
a later line that reaches one of those (a rewind to it) has it read again from the file
(``lines.values_at``). Every line keeps its id, its parent and where it starts, a few
hundred bytes (docs/design.md, "Capture, import, export, redaction").
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ctxcore.errors import ImportFormatError
from ctxcore.formats import anthropic
from ctxcore.formats.accounting import Tally
from ctxcore.formats.norm import NormMessage, usage_from_obj
from ctxcore.formats.sessions.calls import Call, Compaction, Segment, prepare
from ctxcore.formats.sessions.lines import LogLine, parse_time, unexpected

FORMAT = "claude-code"
BUILDER_NAME = "import/claude-code"
LINE_TYPES = frozenset(
    {"user", "assistant", "system", "summary", "file-history-snapshot", "queue-operation"}
)
_KINDS = {k: k for k in LINE_TYPES}
#: The tools that start a sub-agent (its prompt is the sidechain's first message).
_AGENT_TOOLS = frozenset({"Task", "Agent"})
RECONSTRUCTED = ["system prompt", "tool definitions", "max_tokens"]
#: Characters of messages held for lines off every session's current chain (see the module
#: docstring); past this, the oldest are let go and read again from the file when needed.
HELD_CHARS = 4_000_000
#: What one message counts for beside its text, in that budget (its objects).
_MESSAGE_CHARS = 200
WARNING = (
    "reconstructed from a Claude Code session log, which does not record the system prompt "
    "or the tool definitions: this input lacks them, the provider's prompt count includes them"
)


def looks_like(obj: Any) -> bool:
    """Whether one parsed line is a Claude Code session event."""
    kind = obj.get("type") if isinstance(obj, dict) else None
    if not isinstance(kind, str) or kind not in LINE_TYPES:
        return False
    if obj.get("type") == "summary":
        return "leafUuid" in obj
    return "sessionId" in obj or ("uuid" in obj and "parentUuid" in obj)


@dataclass(eq=False, slots=True)
class _Node:
    uuid: str
    parent: _Node | None
    line: int
    kind: str
    session: _Session
    norm: list[NormMessage] | None = None
    counts: dict[str, int] | None = None
    unknown: list[str] | None = None
    msg_id: str | None = None
    compact: bool = False
    logical_parent: str | None = None
    summary: bool = False
    #: where the line starts in the file (``LogLine.offset``), to read it again
    offset: int = -1
    #: characters its message holds (``_chars``), while it is held
    chars: int = 0
    #: its message was let go (``Reader._trim``): read it again before use
    released: bool = False
    #: the key of the segment last made of it (``_Session.seg_cache``)
    seg: tuple[str, str] | None = None
    #: a compact boundary's ``compactMetadata``, to make its compaction again
    meta: dict[str, Any] | None = None


@dataclass(eq=False)
class _Pending:
    """A call whose reply lines are still coming."""

    msg_id: str
    nodes: list[_Node]
    context: list[Segment]
    compaction: Compaction | None
    created_at: datetime
    obj: dict[str, Any]
    fork: dict[str, Any] | None


@dataclass(eq=False)
class _Session:
    id: str
    parent: dict[str, Any] | None = None
    turns: int = 0
    pending: _Pending | None = None
    last: _Node | None = None
    path: list[_Node] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)
    segs: list[Segment] = field(default_factory=list)
    seg_end: list[int] = field(default_factory=list)
    seg_cache: dict[tuple[str, str], Segment | None] = field(default_factory=dict)
    compactions: dict[str, Compaction] = field(default_factory=dict)
    #: what the session's lines after its latest call hold (messages, tool results)
    since_call: dict[str, int] = field(default_factory=dict)


class Reader:
    """Reads a Claude Code log line by line and yields its calls as they complete.

    ``fetch`` reads lines again by ``LogLine.offset`` (``lines.values_at`` on the file):
    with it, messages off the current chains are held up to ``HELD_CHARS`` characters;
    without it (the lines are held by the caller anyway) every message is held."""

    def __init__(
        self,
        name: str,
        default_session: str,
        default_now: datetime,
        fetch: Callable[[Sequence[int]], dict[int, Any]] | None = None,
    ) -> None:
        self.name = name
        self.default_session = default_session
        self.default_now = default_now
        self.fetch = fetch
        #: nodes whose message is held but that no session's chain holds, oldest first
        self._off: OrderedDict[str, _Node] = OrderedDict()
        self._off_chars = 0
        self.nodes: dict[str, _Node] = {}
        self.sessions: dict[str, _Session] = {}
        self.main: _Session | None = None
        self.last_main: _Node | None = None
        self.last_side: _Node | None = None
        self.agents: dict[str, tuple[str, int]] = {}  # Task prompt -> (tool_use id, line)
        self.titles: list[dict[str, Any]] = []
        #: parents named before their line was read: uuid -> (child line, line it continued)
        self.awaited: dict[str, list[tuple[int, int | None]]] = {}
        #: each title's leaf and the lines above it (``_leaf_chain``)
        self.leaf_chains: dict[int, dict[str, None]] = {}
        self.errors: list[str] = []
        self.reported = 0  # errors already on a call
        self.lines_by_type: dict[str, int] = {}
        self.meta: dict[str, Any] = {}

    # ------------------------------------------------------------------ lines

    def calls(self, lines: Iterable[LogLine]) -> Iterator[Call]:
        for ln in lines:
            if ln.error is not None:
                self.errors.append(ln.error)
                continue
            call = None
            try:
                call = self._line(ln.number, ln.value, ln.offset)
            except ImportFormatError as exc:
                self.errors.append(f"{self.name}:{ln.number}: {exc}")
            except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
                # a field of a type the reader did not expect: this line's error, one line
                self.errors.append(f"{self.name}:{ln.number}: {unexpected(exc)}")
            self._trim()
            if call is not None:
                yield call
        self._unresolved()
        for s in sorted(
            (s for s in self.sessions.values() if s.pending is not None),
            key=lambda s: s.pending.nodes[0].line if s.pending else 0,
        ):
            yield self._emit(s, last=True)

    def _line(self, n: int, obj: Any, offset: int = -1) -> Call | None:
        if not isinstance(obj, dict):
            raise ImportFormatError(f"expected an event object, got {type(obj).__name__}")
        kind = obj.get("type")
        # the module's own string (one object for every line of a type, not one each)
        kind = _KINDS.get(kind, kind) if isinstance(kind, str) else "?"
        self.lines_by_type[kind] = self.lines_by_type.get(kind, 0) + 1
        if kind == "summary":
            self._title(obj, n)
        uuid = obj.get("uuid")
        if not isinstance(uuid, str) or not uuid:
            return None  # a snapshot or queue event: not part of the conversation
        if uuid in self.nodes:
            raise ImportFormatError(f"uuid {uuid!r} repeats line {self.nodes[uuid].line}")
        side = bool(obj.get("isSidechain"))
        parent = self._parent(obj, side, n)
        session = parent.session if parent is not None else self._new_session(obj, side, n)
        node = _Node(uuid, parent, n, kind, session, offset=offset)
        message = obj.get("message")
        if kind in ("user", "assistant"):
            self._message_line(node, obj, message, n)
        elif kind == "system" and obj.get("subtype") == "compact_boundary":
            self._compact_boundary(node, obj)
        self.nodes[uuid] = node
        self._arrived(node)
        session.last = node
        if side:
            self.last_side = node
        else:
            self.last_main = node
        for key in ("cwd", "version", "gitBranch"):
            if isinstance(obj.get(key), str) and obj[key]:
                self.meta[key] = obj[key]
        if kind != "assistant" or node.msg_id is None:
            return None
        if isinstance(message, dict) and message.get("model") == "<synthetic>":
            return None  # a message Claude Code wrote itself (an API error), not a model call
        return self._assistant(session, node, obj)

    def _parent(self, obj: dict[str, Any], side: bool, n: int) -> _Node | None:
        """The line this one continues; one whose parent is not in the file continues the
        last line of its chain (main or sidechain), and the error says so."""
        pid = obj.get("parentUuid")
        if not isinstance(pid, str):
            return None
        parent = self.nodes.get(pid)
        if parent is None:
            parent = self.last_side if side else self.last_main
            self.awaited.setdefault(pid, []).append((n, parent.line if parent else None))
        return parent

    def _arrived(self, node: _Node) -> None:
        """A line that lines before it named as parent: each of them is said to have been
        read as continuing another line, its parent being later in the file."""
        for child, used in self.awaited.pop(node.uuid, ()):
            self.errors.append(
                f"{self.name}:{child}: its parent line ({node.uuid}) comes after it, at line "
                f"{node.line}; "
                + (f"read as continuing line {used}" if used else "read as a start")
            )

    def _unresolved(self) -> None:
        """At the end of the file: the parents no line of it holds."""
        for pid, children in self.awaited.items():
            for child, used in children:
                self.errors.append(
                    f"{self.name}:{child}: its parent line ({pid}) is not in the file (a line "
                    "that could not be read?); "
                    + (f"continued from line {used}" if used else "read as a new start")
                )
        self.awaited.clear()

    def _title(self, obj: dict[str, Any], n: int) -> None:
        """A ``summary`` line: the title of the conversation ending at its ``leafUuid``."""
        text = obj.get("summary")
        if not isinstance(text, str):
            text = _prompt_text(obj.get("message"))
        if not text:  # said, and the line (with a uuid) still stays in the chain
            self.errors.append(f"{self.name}:{n}: a summary line with no 'summary' text")
            return
        leaf = obj.get("leafUuid")
        self.titles.append({"summary": text, "leafUuid": leaf, "line": n})

    def _message_line(self, node: _Node, obj: dict[str, Any], message: Any, n: int) -> None:
        """A user or assistant line: its message, normalised. A line that cannot be read
        stays in the chain (its children still find their parent), its message is left out
        and the error says why."""
        session = node.session
        try:
            if not isinstance(message, dict):
                raise ImportFormatError(f"a {node.kind} line needs a 'message' object")
            self._normalize(node, message, n)
            self._hold(node)
            if node.kind == "user":  # what a later call will see (or none, at the end)
                for key in ("messages", "tool_results"):
                    v = (node.counts or {}).get(key, 0)
                    session.since_call[key] = session.since_call.get(key, 0) + v
        except ImportFormatError as exc:
            self.errors.append(f"{self.name}:{n}: {exc}")
            node.norm = node.msg_id = None
        node.summary = bool(obj.get("isCompactSummary"))

    def _compact_boundary(self, node: _Node, obj: dict[str, Any]) -> None:
        """A compaction's boundary line: where the conversation was summarised."""
        node.compact = True
        lp = obj.get("logicalParentUuid")
        node.logical_parent = lp if isinstance(lp, str) else None
        meta = obj.get("compactMetadata")
        node.meta = meta if isinstance(meta, dict) else {}
        node.session.compactions[node.uuid] = self._compaction(node, node.meta)

    def _assistant(self, session: _Session, node: _Node, obj: dict[str, Any]) -> Call | None:
        """An assistant line: a further line of the reply being read (same message id), or
        the start of the next call, which ends the one before."""
        pending = session.pending
        if pending is not None and pending.msg_id == node.msg_id:
            pending.nodes.append(node)
            pending.obj = obj
            return None
        out = self._emit(session) if pending is not None else None
        session.pending = self._start(session, node, obj)
        return out

    def _new_session(self, obj: dict[str, Any], side: bool, n: int) -> _Session:
        if self.main is None:
            sid = obj.get("sessionId")
            self.main = _Session(sid if isinstance(sid, str) and sid else self.default_session)
            self.sessions[self.main.id] = self.main
        if not side:
            return self.main
        agent = obj.get("agentId")
        parent: dict[str, Any] = {"session": self.main.id}
        if not (isinstance(agent, str) and agent):
            prompt = _prompt_text(obj.get("message"))
            found = self.agents.pop(prompt, None) if prompt is not None else None
            if found is not None:
                agent = found[0]
                parent.update(tool_use_id=found[0], line=found[1])
            else:
                agent = f"sidechain-{n}"
        sid = f"{self.main.id}/{agent}"
        if sid in self.sessions:
            sid = f"{sid}-{n}"
        s = self.sessions[sid] = _Session(sid, parent=parent)
        return s

    def _normalize(
        self, node: _Node, message: dict[str, Any], n: int, *, again: bool = False
    ) -> None:
        """The line's message as normalised messages and what it holds; ``again``: read
        again after it was let go (what reading it first recorded stays as it was)."""
        tally = Tally(FORMAT)
        node.norm = anthropic.normalize_message(message, n, tally, where=f"line {n}: message")
        node.counts = dict(tally.counts)
        node.unknown = list(tally.unknown)
        if node.kind == "assistant":
            mid = message.get("id")
            node.msg_id = mid if isinstance(mid, str) and mid else f"line-{n}"
            if node.session is self.main and not again:
                for m in node.norm:
                    for c in m.tool_calls:
                        if c.name in _AGENT_TOOLS and c.id:
                            prompt = _json_field(c.arguments, "prompt")
                            if prompt is not None:
                                self.agents[prompt] = (c.id, n)

    # ------------------------------------------------------------------ memory

    def _hold(self, node: _Node) -> None:
        """Count a node's message as held (off its chain, it may be let go)."""
        node.chars = _chars(node.norm)
        if node.uuid not in node.session.index:
            self._off[node.uuid] = node
            self._off_chars += node.chars

    def _pin(self, node: _Node) -> None:
        """The node joined its session's chain: its message stays while it is on it."""
        if self._off.pop(node.uuid, None) is not None:
            self._off_chars -= node.chars

    def _unpin(self, node: _Node) -> None:
        """The node left its session's chain (a rewind, a compaction)."""
        if node.norm is not None and not node.released and node.uuid not in self._off:
            self._off[node.uuid] = node
            self._off_chars += node.chars

    def _trim(self) -> None:
        """Let go of the oldest messages off the chains while they hold more than
        ``HELD_CHARS`` (only when they can be read again)."""
        if self.fetch is None:
            return
        while self._off_chars > HELD_CHARS and self._off:
            _, node = self._off.popitem(last=False)
            self._off_chars -= node.chars
            node.norm = node.counts = node.unknown = None
            node.released = True
            cache = node.session.seg_cache
            if node.seg is not None and cache.get(node.seg) is not None:
                del cache[node.seg]  # made again from the line, should it be needed
            node.seg = None

    def _load(self, nodes: Sequence[_Node]) -> None:
        """Read again the messages of these nodes that were let go."""
        todo = [node for node in nodes if node.released]
        if not todo:
            return
        assert self.fetch is not None  # only a reader that can read again lets go
        values = self.fetch([node.offset for node in todo])
        for node in todo:
            node.released = False
            value = values.get(node.offset)
            message = value.get("message") if isinstance(value, dict) else None
            if not isinstance(value, dict) or value.get("uuid") != node.uuid:
                message = None
            try:
                if not isinstance(message, dict):
                    raise ImportFormatError(
                        "the line changed while the log was read (read again for a later "
                        "line that branches from it); its message is left out"
                    )
                self._normalize(node, message, node.line, again=True)
            except (ImportFormatError, TypeError, ValueError, KeyError, IndexError) as exc:
                self.errors.append(f"{self.name}:{node.line}: {exc}")
                node.norm = None
                continue
            self._hold(node)

    # ------------------------------------------------------------------ context

    def _compaction(self, boundary: _Node, meta: dict[str, Any]) -> Compaction:
        info: dict[str, Any] = {k: meta[k] for k in ("trigger", "preTokens") if k in meta}
        desc = ", ".join(
            [str(info["trigger"])] * ("trigger" in info)
            + [f"{info['preTokens']:,} tokens before it"] * isinstance(info.get("preTokens"), int)
        )
        label = f"the compaction at line {boundary.line}" + (f" ({desc})" if desc else "")
        last = self.nodes.get(boundary.logical_parent or "")
        replaced: list[Segment] = []
        if last is not None:
            path: list[_Node] = []
            node: _Node | None = last
            while node is not None:
                path.append(node)
                node = node.parent
            path.reverse()
            replaced = self._segments(boundary.session, path, 0, [], [])
        else:
            info["replaced"] = "not in this file"
        info["line"] = boundary.line
        return Compaction(label=label, replaced=replaced, info=info)

    def _path(self, s: _Session, node: _Node | None) -> tuple[int, list[_Node]]:
        """Move the session's path to the chain ending at ``node``; returns how many of the
        old path's nodes it kept, and the nodes it dropped (a rewind)."""
        walked: list[_Node] = []
        while node is not None and node.uuid not in s.index:
            walked.append(node)
            node = node.parent
        keep = s.index[node.uuid] + 1 if node is not None else 0
        dropped = s.path[keep:]
        for d in dropped:
            del s.index[d.uuid]
            self._unpin(d)
        del s.path[keep:]
        for w in reversed(walked):
            s.index[w.uuid] = len(s.path)
            s.path.append(w)
            self._pin(w)
        return keep, dropped

    def _segments(
        self, s: _Session, path: list[_Node], start: int, segs: list[Segment], ends: list[int]
    ) -> list[Segment]:
        """Group ``path[start:]`` into segments (one per message; consecutive lines of one
        reply make one), appended to ``segs``/``ends``; a message that cannot be imported is
        its line's error and is left out."""
        found: list[tuple[Segment, int, list[_Node]]] = []  # segment, end in path, its lines
        self._load(path[start:])
        k = start
        while k < len(path):
            node = path[k]
            j = k + 1
            if node.kind == "assistant":
                while (
                    j < len(path) and path[j].kind == "assistant" and path[j].msg_id == node.msg_id
                ):
                    j += 1
            if node.norm is not None:
                seg = self._segment(s, path[k:j])
                if seg is not None:
                    found.append((seg, j, path[k:j]))
            k = j
        bad = {id(seg): exc for seg, exc in prepare([seg for seg, _, _ in found])}
        for seg, end, nodes in found:
            if id(seg) in bad:
                self.errors.append(f"{self.name}:{nodes[0].line}: {bad[id(seg)]}")
                s.seg_cache[(nodes[0].uuid, nodes[-1].uuid)] = None
                continue
            segs.append(seg)
            ends.append(end)
        return segs

    def _segment(self, s: _Session, nodes: list[_Node]) -> Segment | None:
        """The segment of these lines (made once; None if its messages cannot be imported)."""
        key = (nodes[0].uuid, nodes[-1].uuid)
        if key in s.seg_cache:
            return s.seg_cache[key]
        first = nodes[0]
        counts: dict[str, int] = {}
        unknown: list[str] = []
        for node in nodes:
            for c, v in (node.counts or {}).items():
                counts[c] = counts.get(c, 0) + v
            unknown.extend(node.unknown or [])
        if len(nodes) > 1:
            counts["messages"] = 1
        where = f"line {first.line}" if len(nodes) == 1 else f"lines {first.line}-{nodes[-1].line}"
        note = None
        if first.summary:
            note = f"the summary a compaction wrote ({where}); it replaced the older messages"
        seg = Segment(label=where, norm=_merge(nodes), counts=counts, unknown=unknown, note=note)
        s.seg_cache[key] = seg
        for node in nodes:
            old, node.seg = node.seg, key
            if old is not None and old != key and s.seg_cache.get(old) is not None:
                del s.seg_cache[old]  # a reply regrouped: the old grouping is not made again
        return seg

    def _start(self, s: _Session, node: _Node, obj: dict[str, Any]) -> _Pending:
        s.since_call = {}
        keep, dropped = self._path(s, node.parent)
        # the segments of the kept path stay; a reply cut by the new path, or continued by
        # it (a reply's lines on both sides of a tool result), is grouped again
        while s.seg_end and (s.seg_end[-1] > keep or _continues(s.path, s.seg_end[-1])):
            s.segs.pop()
            s.seg_end.pop()
        start = s.seg_end[-1] if s.seg_end else 0
        self._segments(s, s.path, start, s.segs, s.seg_end)
        fork = None
        compaction = None
        if s.path and s.path[0].compact:
            root = s.path[0]
            compaction = s.compactions.get(root.uuid)
            if compaction is None:  # a rewind to a chain an older compaction started
                compaction = s.compactions[root.uuid] = self._compaction(root, root.meta or {})
            # older compactions (the contexts they replaced) are made again if reached
            for uuid in [u for u, c in s.compactions.items() if c.info["line"] < root.line]:
                del s.compactions[uuid]
        if dropped and not (compaction is not None and keep == 0):
            fork = {
                "from_line": s.path[keep - 1].line if keep else None,
                "left_out_lines": [d.line for d in dropped][:50],
            }
        when = parse_time(obj.get("timestamp")) or self.default_now
        return _Pending(node.msg_id or "", [node], list(s.segs), compaction, when, obj, fork)

    def _emit(self, s: _Session, *, last: bool = False) -> Call:
        """The pending call of ``s``; ``last``: the log ended, and what its lines after the
        call held (results no later call saw) is said in the metadata."""
        p = s.pending
        assert p is not None
        s.pending = None
        message = p.obj.get("message") if isinstance(p.obj.get("message"), dict) else {}
        assert isinstance(message, dict)
        self._load(p.nodes)
        merged = (
            _merge(p.nodes) or [NormMessage(index=p.nodes[0].line, role="assistant", text="")]
        )[0]
        lines = [merged.text] if merged.text else []
        lines += [f"{c.name}({c.arguments})" for c in merged.tool_calls]
        model = message.get("model")
        log: dict[str, Any] = {
            "file": self.name,
            "line": p.nodes[0].line,
            "lines": [n.line for n in p.nodes],
            "message_id": p.msg_id,
            **{k: v for k, v in self.meta.items()},
        }
        for key, out in (("requestId", "request_id"), ("stop_reason", "stop_reason")):
            src = p.obj if key == "requestId" else message
            if isinstance(src.get(key), str):
                log[out] = src[key]
        if merged.tool_calls:
            log["tool_calls"] = [{"id": c.id, "name": c.name} for c in merged.tool_calls]
        if s.parent is not None:
            log["parent"] = s.parent
        if p.fork is not None:
            log["fork"] = p.fork
        if self.titles:
            log["titles"] = [self._leaf_line(t) for t in self.titles]
            title = self._call_title(s, p)
            if title is not None:
                log["title"] = title
        if last and any(s.since_call.values()):
            log["after_last_call"] = dict(s.since_call)
        call = Call(
            session_id=s.id,
            turn=s.turns,
            key=p.msg_id,
            context=p.context,
            created_at=p.created_at,
            model=model if isinstance(model, str) else None,
            usage=usage_from_obj(message.get("usage")),
            usage_mapping="anthropic",
            output="\n".join(lines) if lines else None,
            compaction=p.compaction,
            metadata={"session_log": log},
            recorded=["messages", "usage", "model"],
            reconstructed=list(RECONSTRUCTED),
            warnings=[WARNING],
            skipped=self.errors[self.reported :],
        )
        self.reported = len(self.errors)
        s.turns += 1
        return call

    def _leaf_line(self, title: dict[str, Any]) -> dict[str, Any]:
        """A title as a call shows it: with its leaf's line, or that the file lacks it."""
        leaf = self.nodes.get(title["leafUuid"]) if isinstance(title["leafUuid"], str) else None
        return {**title, "leaf_line": leaf.line if leaf is not None else None}

    def _call_title(self, s: _Session, p: _Pending) -> str | None:
        """The latest title whose leaf is on the call's chain, or below its reply (read by
        now: a leaf further on in the file is not known yet)."""
        for k in range(len(self.titles) - 1, -1, -1):
            chain = self._leaf_chain(k)
            leaf = next(iter(chain), None)
            if leaf is not None and (leaf in s.index or any(n.uuid in chain for n in p.nodes)):
                return str(self.titles[k]["summary"])
        return None

    def _leaf_chain(self, k: int) -> dict[str, None]:
        """The uuids from the ``k``-th title's leaf up to its root, leaf first (made once the
        leaf is read; empty before)."""
        chain = self.leaf_chains.get(k)
        if chain is not None:
            return chain
        leaf_id = self.titles[k]["leafUuid"]
        node = self.nodes.get(leaf_id) if isinstance(leaf_id, str) else None
        if node is None:
            return {}
        chain = {}
        while node is not None:
            chain[node.uuid] = None
            node = node.parent
        self.leaf_chains[k] = chain
        return chain


def _chars(norm: list[NormMessage] | None) -> int:
    """What a line's messages count for in ``HELD_CHARS``."""
    return sum(
        _MESSAGE_CHARS
        + len(m.text)
        + len(m.reasoning)
        + sum(len(c.arguments) for c in m.tool_calls)
        for m in norm or ()
    )


def _continues(path: list[_Node], at: int) -> bool:
    """Whether the reply ending at ``path[at - 1]`` goes on at ``path[at]``."""
    if at <= 0 or at >= len(path):
        return False
    a, b = path[at - 1], path[at]
    return a.kind == b.kind == "assistant" and a.msg_id == b.msg_id


def _merge(nodes: list[_Node]) -> list[NormMessage]:
    """The lines of one reply as one assistant message (a single line: its messages)."""
    if len(nodes) == 1:
        return list(nodes[0].norm or [])
    first = nodes[0]
    out = NormMessage(index=first.line, role="assistant", text="")
    texts: list[str] = []
    reasoning: list[str] = []
    results: list[NormMessage] = []  # what a server's tool returned inside the reply
    for node in nodes:
        for m in node.norm or []:
            if m.role == "tool":
                results.append(m)
                continue
            if m.text:
                texts.append(m.text)
            if m.reasoning:
                reasoning.append(m.reasoning)
            out.tool_calls.extend(m.tool_calls)
            out.media.extend(m.media)
            out.thinking.extend(m.thinking)
    out.text = "\n".join(texts)
    out.reasoning = "\n".join(reasoning)
    return [out, *results]


def _prompt_text(message: Any) -> str | None:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type") == "text"
        )
    return None


def _json_field(arguments: str, key: str) -> str | None:
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return None
    got = value.get(key) if isinstance(value, dict) else None
    return got if isinstance(got, str) else None


__all__ = ["BUILDER_NAME", "FORMAT", "Reader", "looks_like"]
