"""A call as a prompt cache sees it: its blocks in prefix order, their tokens, its breakpoints
(docs/design.md, "Prompt cache").

A call's prompt is cut into blocks (``Block``): the tool definitions, then its messages in the
order they were sent (the trace's ``result.messages`` where the importer kept them, else the
history, tool-result packets and query placed by their message index). System messages before
the conversation are ``system`` blocks. Each block is counted with cl100k_base (a count is kept
per distinct block, so a session's calls count each message once); when the trace records the
prompt's total (``outcome.tokens.input_tokens``) and the importer says part of the prompt was
not recorded (``metadata.import.reconstructed``: the system prompt or the tool definitions of a
session log), that part is one ``unrecorded`` block first, holding ``input_tokens`` minus the
counted blocks; otherwise the counts are scaled so that they sum to ``input_tokens``. A prefix's
tokens are therefore the provider's count of the whole prompt less our count of what follows.

Breakpoints (Anthropic) come from the importer's marks (``metadata.import.cache_control``, the
path of each marked block, and ``cache_control_ttl``, the lifetime a mark names). A session log
(Claude Code, pi, OpenHands: ``metadata.session_log``) records no request, so no marks; the
placement those agents use is assumed: the end of the system prompt and the last message.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from ctxcore.models import Message, TokenUsage, Trace
from ctxcore.tokens import get_counter

Ttl = Literal["5m", "1h"]
BlockKind = Literal["tools", "system", "unrecorded", "message"]
Provider = Literal["anthropic", "openai", "gemini"]

_MSG_ID = re.compile(r"^msg-(\d+)")
_MARK = re.compile(r"^(tools|system|messages)\[(\d+)\]")
#: counts kept per distinct block text (its key); emptied when it grows past this
_MEMO_LIMIT = 200_000
_COUNTS: dict[str, int] = {}
#: system texts kept for break attribution, one object per distinct text
_TEXTS: dict[str, str] = {}


def provider_of(model: str) -> Provider | None:
    """The provider whose cache serves ``model``, by its name (a provider path such as
    ``openai/`` or ``models/`` dropped); ``None`` for a model of none of them."""
    name = model.lower().rsplit("/", 1)[-1]
    if name.startswith("claude") or ".anthropic." in model or model.startswith("anthropic."):
        return "anthropic"
    if name.startswith("gemini"):
        return "gemini"
    if name.startswith(("gpt-", "o1", "o3", "o4", "chatgpt", "codex")):
        return "openai"
    return None


@dataclass(frozen=True)
class Block:
    """One block of a prompt: its kind, a label (``tools``, ``system``, a message id...), a
    key of its content, its tokens and, when marked, the lifetime of its breakpoint. For
    break attribution it also keeps the packet or message id, what it is (``tool_result``,
    ``compaction``), a system block's text and the tools' (name, key) pairs."""

    kind: BlockKind
    label: str
    key: str
    tokens: int
    breakpoint: Ttl | None = None
    packet: str | None = None
    role: str = ""
    text: str | None = None
    tools: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Prompt:
    """One call as the cache sees it: when it was sent, the model, its blocks in prefix
    order, the usage the provider recorded (``None`` when not recorded), the compaction the
    call's context follows (``metadata.import.compaction.at``), the provider's own reason
    for a cache miss where a reply records one (no format read records one yet) and its
    session (a side chain shares its parent's cache but is compared with its own calls)."""

    trace_id: str
    at: datetime
    model: str
    blocks: tuple[Block, ...]
    recorded: TokenUsage | None = None
    compaction: str | None = None
    provider_reason: str | None = None
    session_id: str = ""

    @property
    def tokens(self) -> int:
        return sum(b.tokens for b in self.blocks)

    @property
    def output_tokens(self) -> int:
        rec = self.recorded
        return rec.output_tokens or 0 if rec is not None else 0


def key_of(*parts: str) -> str:
    return hashlib.sha1("\x00".join(parts).encode()).hexdigest()


def _count(key: str, text: str) -> int:
    n = _COUNTS.get(key)
    if n is None:
        if len(_COUNTS) >= _MEMO_LIMIT:
            _COUNTS.clear()
        n = _COUNTS[key] = get_counter().count(text)
    return n


def _kept(key: str, text: str) -> str:
    """One shared object per distinct system text (a session's calls repeat it)."""
    kept = _TEXTS.get(key)
    if kept is None:
        if len(_TEXTS) >= 256:
            _TEXTS.clear()
        kept = _TEXTS[key] = text
    return kept


# --------------------------------------------------------------------------- messages


@dataclass(frozen=True)
class _Raw:
    """A block before its tokens are fitted: kind, label, text, message index, packet id,
    role."""

    kind: BlockKind
    label: str
    text: str
    index: int | None
    packet: str | None = None
    role: str = ""


def _index(ident: str | None) -> int | None:
    m = _MSG_ID.match(ident or "")
    return int(m.group(1)) if m else None


def _message_text(m: Message) -> str:
    calls = m.metadata.get("tool_calls")
    tail = json.dumps(calls, sort_keys=True, default=str) if calls else ""
    return f"{m.role}\n{m.content}\n{tail}"


def _from_result(trace: Trace, messages: list[Message]) -> list[_Raw]:
    """The messages as sent (``result.messages``): system messages before the conversation
    are ``system`` blocks; a tool result names its ``tool:<call id>`` packet, a compaction
    summary its ``compaction:`` packet."""
    packets = {p.metadata.get("message_index"): p for p in trace.input.packets}
    out: list[_Raw] = []
    conversation = False
    for pos, m in enumerate(messages):
        idx = _index(m.id)
        system = m.role in ("system", "developer") and not conversation
        conversation = conversation or not system
        packet = None
        if m.role == "tool":
            call = m.metadata.get("tool_call_id")
            packet = f"tool:{call}" if call else None
        elif "compaction" in m.metadata:
            packet = f"compaction:{m.id}"
        elif idx is not None and idx in packets:
            packet = packets[idx].id
        out.append(
            _Raw(
                "system" if system else "message",
                m.id or f"message-{pos}",
                _message_text(m),
                idx if idx is not None else pos,
                packet,
                m.role,
            )
        )
    return out


def _from_input(trace: Trace) -> list[_Raw]:
    """The messages of a trace without ``result.messages``, in request order: the system
    prompt, then history and tool-result packets by their message index and the query (the
    last user message, whose index the trace does not keep) at the first free index after
    the history's last user message."""
    inp = trace.input
    items: list[_Raw] = []
    for pos, m in enumerate(inp.history):
        idx = _index(m.id)
        at = pos if idx is None else idx
        items.append(_Raw("message", m.id or f"history-{pos}", _message_text(m), at, role=m.role))
    for p in inp.packets:
        idx = p.metadata.get("message_index")
        at = idx if isinstance(idx, int) else (max((r.index or 0 for r in items), default=-1) + 1)
        role = "tool" if p.kind == "tool_result" else "user"
        items.append(_Raw("message", p.id, f"packet\n{p.content}", at, p.id, role))
    if inp.query:
        users = [_index(m.id) for m in inp.history if m.role == "user"]
        last_user = max((u for u in users if u is not None), default=-1)
        taken = {r.index for r in items}
        q = last_user + 1
        while q in taken:
            q += 1
        items.append(_Raw("message", "query", f"user\n{inp.query}", q, role="user"))
    items.sort(key=lambda r: r.index or 0)
    if inp.system_instructions:
        text = f"system\n{inp.system_instructions}"
        items.insert(0, _Raw("system", "system", text, None, role="system"))
    return items


def _raw_blocks(trace: Trace) -> list[_Raw]:
    """The tool definitions, then the messages in request order."""
    raw: list[_Raw] = []
    if trace.input.tools:
        tools = json.dumps([t.model_dump() for t in trace.input.tools], sort_keys=True)
        raw.append(_Raw("tools", "tools", tools, None))
    messages = trace.result.messages if trace.result is not None else None
    raw.extend(_from_result(trace, messages) if messages else _from_input(trace))
    return raw


# --------------------------------------------------------------------------- tokens


def _import_meta(trace: Trace) -> dict[str, object]:
    meta = trace.metadata.get("import")
    return meta if isinstance(meta, dict) else {}


def _fitted(counts: list[int], total: int | None, unrecorded: bool) -> tuple[list[int], int]:
    """Block tokens summing to the recorded total: the unrecorded part takes the rest, or the
    counts are scaled (the rounding left on the last block); (counts, unrecorded tokens)."""
    counted = sum(counts)
    if total is None:
        return counts, 0
    if unrecorded:
        return counts, max(0, total - counted)
    if counted == 0:
        return counts, 0
    scale = total / counted
    out = [round(c * scale) for c in counts]
    out[-1] = max(0, out[-1] + total - sum(out))
    return out, 0


def _tool_parts(trace: Trace) -> tuple[tuple[str, str], ...]:
    return tuple(
        (t.name, key_of(json.dumps(t.model_dump(), sort_keys=True))) for t in trace.input.tools
    )


def _compaction(meta: dict[str, object]) -> str | None:
    comp = meta.get("compaction")
    at = comp.get("at") if isinstance(comp, dict) else None
    return str(at) if at is not None else None


def prompt_of(trace: Trace) -> Prompt:
    """The call of ``trace`` as the cache sees it (module docstring: blocks, their tokens,
    the breakpoints)."""
    meta = _import_meta(trace)
    model = str(trace.metadata.get("model") or "")
    reconstructed = meta.get("reconstructed")
    hidden = {"system prompt", "tool definitions"} & set(
        reconstructed if isinstance(reconstructed, list) else ()
    )
    raw = _raw_blocks(trace)
    keys = [key_of(r.kind, r.text) for r in raw]
    tokens = trace.outcome.tokens if trace.outcome is not None else None
    total = tokens.input_tokens if tokens is not None else None
    counted = [_count(k, r.text) for k, r in zip(keys, raw, strict=True)]
    counts, unrecorded = _fitted(counted, total, bool(hidden))
    blocks: list[Block] = []
    indices: list[int | None] = []
    if hidden:
        agent = "sidechain" if "parent" in (trace.metadata.get("session_log") or {}) else "main"
        label = " and ".join(sorted(hidden))
        blocks.append(Block("unrecorded", label, key_of("unrecorded", model, agent), unrecorded))
        indices.append(None)
    tools = _tool_parts(trace)
    for r, k, n in zip(raw, keys, counts, strict=True):
        text = _kept(k, r.text.split("\n", 1)[-1]) if r.kind == "system" else None
        parts = tools if r.kind == "tools" else ()
        blocks.append(Block(r.kind, r.label, k, n, None, r.packet, r.role, text, parts))
        indices.append(r.index)
    assumed = not isinstance(meta.get("cache_control"), list) and "session_log" in trace.metadata
    marked = _breakpoints(meta, blocks, indices, assumed)
    final = tuple(
        Block(b.kind, b.label, b.key, b.tokens, marked.get(i), b.packet, b.role, b.text, b.tools)
        for i, b in enumerate(blocks)
    )
    return Prompt(
        trace.trace_id,
        trace.input.now,
        model,
        final,
        tokens,
        _compaction(meta),
        None,
        trace.session_id,
    )


def _breakpoints(
    meta: dict[str, object], blocks: list[Block], indices: list[int | None], assumed: bool
) -> dict[int, Ttl]:
    """The block indices marked and the lifetime of each: the importer's ``cache_control``
    paths (``cache_control_ttl`` names a mark's lifetime, else 5 minutes), or for a session
    log (``assumed``: Claude Code, pi, OpenHands... record no request, so no marks) the
    placement those agents use: the end of the system prompt and the last message."""
    marks = meta.get("cache_control")
    ttls = meta.get("cache_control_ttl")
    ttl_of = ttls if isinstance(ttls, dict) else {}
    out: dict[int, Ttl] = {}
    if assumed or meta.get("format") == "claude-code":
        for i, b in enumerate(blocks):
            if b.kind in ("unrecorded", "system"):
                out[i] = "5m"
        if blocks:
            out[len(blocks) - 1] = "5m"
        return out
    if not isinstance(marks, list):
        return out
    for path in marks:
        m = _MARK.match(str(path))
        if m is None:
            continue
        ttl: Ttl = "1h" if ttl_of.get(str(path)) == "1h" else "5m"
        kind, n = m.group(1), int(m.group(2))
        if kind == "tools":
            hits = [i for i, b in enumerate(blocks) if b.kind == "tools"]
        elif kind == "system":
            hits = [i for i, b in enumerate(blocks) if b.kind == "system"]
        else:
            hits = [i for i, idx in enumerate(indices) if idx == n and blocks[i].kind == "message"]
        for i in hits[-1:]:
            out[i] = ttl
    return out
