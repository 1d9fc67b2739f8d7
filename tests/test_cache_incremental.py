"""The simulated cache read incrementally through a session (docs/design.md, "Prompt
cache"): ``PromptReader`` digests each message once per session and ``Chain`` reuses the
previous call's prefix keys, and both give exactly what reading every call afresh gives, on
the real session logs of the fixtures and when a message changes under the same id."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

import ctxcore.cache.prompts as prompts_mod
from ctxcore.cache import PromptReader, prompt_of, simulate
from ctxcore.cache.anthropic import Chain, chain
from ctxcore.formats.load import iter_traces
from ctxcore.models import Message, Packet, Trace

IMPORTS = Path(__file__).parent / "fixtures" / "imports"
LOGS = [
    IMPORTS / "claude-code" / "ccviewer-init-session.jsonl",
    IMPORTS / "claude-code" / "ccviewer-task-sidechain-session.jsonl",
    IMPORTS / "claude-code" / "claude-code-log-compact-after-rewind.jsonl",
    IMPORTS / "codex" / "localpush-rollout-2034.jsonl",
    IMPORTS / "codex" / "localpush-rollout-compaction-turn.subset.jsonl",
    IMPORTS / "inspect" / "browser-gpt-4o-mini-tools.json",
]


def _sessions(path: Path) -> dict[str, list[Trace]]:
    out: dict[str, list[Trace]] = defaultdict(list)
    for t in iter_traces(path):
        out[t.session_id].append(t)
    return {s: sorted(ts, key=lambda t: (t.input.now, t.turn)) for s, ts in out.items()}


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name)
def test_a_session_read_incrementally_is_the_session_read_afresh(path: Path) -> None:
    for traces in _sessions(path).values():
        reader = PromptReader()
        together = [reader.read(t) for t in traces]
        alone = [prompt_of(t) for t in traces]
        assert together == alone
        assert simulate(together) == simulate(alone)


def test_the_reader_hashes_a_message_carried_by_later_calls_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traces = _sessions(LOGS[0]).popitem()[1]
    hashed: list[str] = []
    real = prompts_mod.key_of

    def counting(*parts: str) -> str:
        hashed.append(parts[0])
        return real(*parts)

    monkeypatch.setattr(prompts_mod, "key_of", counting)
    afresh = [prompt_of(t) for t in traces]
    blocks = sum(len(p.blocks) for p in afresh)
    assert len(hashed) >= blocks  # every block of every call, read afresh
    distinct = {(b.kind, b.key) for p in afresh for b in p.blocks}
    hashed.clear()
    reader = PromptReader()
    for t in traces:
        reader.read(t)
    # each distinct block once, and per call the unrecorded part and the query (which the
    # next call carries as a history message under its own id)
    assert len(hashed) <= len(distinct) + 2 * len(traces)
    assert len(hashed) < blocks / 2


def _edited(t: Trace, index: int, content: str, calls: object = None) -> Trace:
    """``t`` with the history message at ``index`` replaced by a new object under the
    same id (what a trace file read line by line gives: equal values, new objects)."""
    history = list(t.input.history)
    old = history[index]
    meta = dict(old.metadata)
    if calls is not None:
        meta["tool_calls"] = calls
    history[index] = Message(id=old.id, role=old.role, content=content, metadata=meta)
    inp = t.input.model_copy(update={"history": history})
    return t.model_copy(update={"input": inp, "result": None})


def test_a_message_changed_under_its_id_is_digested_again() -> None:
    first = next(t for t in iter_traces(LOGS[0]) if len(t.input.history) >= 3)
    first = first.model_copy(update={"result": None})
    text = first.input.history[1].content
    same_length = text[::-1] if text[::-1] != text else text + "!"
    calls = [{"id": "c1", "name": "ls", "arguments": {"all": 1}}]
    cases = [
        _edited(first, 1, text),  # equal content, new objects: reused
        _edited(first, 1, same_length),  # changed, same length
        _edited(first, 1, text, calls),
        _edited(first, 1, text, [{"id": "c1", "name": "ls", "arguments": {"all": True}}]),
        _edited(first, 1, text, [{"id": "c1", "name": "ls", "arguments": {"all": 1.0}}]),
        _edited(first, 1, text, calls),
    ]
    reader = PromptReader()
    for t in [first, *cases]:
        assert reader.read(t) == prompt_of(t)
    label = first.input.history[1].id
    keys = {b.key for t in cases[2:5] for b in prompt_of(t).blocks if b.label == label}
    assert len(keys) == 3  # 1, True and 1.0 are three different prompts


def test_the_chain_reuses_the_shared_prefix_and_nothing_else() -> None:
    traces = _sessions(LOGS[2]).popitem()[1]
    last = Chain()
    for t in traces:
        p = prompt_of(t)
        assert chain(p.model, p.blocks, last) == chain(p.model, p.blocks)
        other = p.model + "-other"
        assert chain(other, p.blocks, last) == chain(other, p.blocks)


def test_a_call_extending_the_previous_one_reads_only_its_new_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A session log's calls share their messages: each message is read (made into a
    block) once per session, not once per call that carries it, and the prompts are those
    read afresh."""
    traces = _sessions(LOGS[0]).popitem()[1]
    afresh = [prompt_of(t) for t in traces]
    made: list[str | None] = []
    real = prompts_mod._message

    def counting(
        kind: prompts_mod.BlockKind, label: str, m: Message, index: int | None, packet: str | None
    ) -> prompts_mod._Raw:
        made.append(m.id)
        return real(kind, label, m, index, packet)

    monkeypatch.setattr(prompts_mod, "_message", counting)
    reader = PromptReader()
    assert [reader.read(t) for t in traces] == afresh
    carried = sum(len(t.result.messages) for t in traces if t.result is not None)
    distinct = {id(m) for t in traces if t.result is not None for m in t.result.messages}
    assert carried > 2 * len(distinct)  # the calls repeat their messages
    assert len(made) == len(distinct)


def _with_packet(t: Trace, packet: Packet, messages: list[Message] | None = None) -> Trace:
    """``t`` with one more packet, its messages as sent the same objects (or ``messages``)."""
    assert t.result is not None
    inp = t.input.model_copy(update={"packets": [*t.input.packets, packet]})
    result = t.result.model_copy(update={"messages": messages or t.result.messages})
    return t.model_copy(update={"input": inp, "result": result})


def test_a_new_packet_naming_an_earlier_message_changes_that_block_as_afresh() -> None:
    """The next call's messages start with the previous call's, but a new packet names the
    index of an earlier message: that message's block names the new packet, as read
    afresh; a packet naming it again under the same id changes nothing."""
    traces = _sessions(LOGS[0]).popitem()[1]
    first = traces[2]
    assert first.result is not None
    early = next(m for m in first.result.messages if m.role == "user" and m.id)
    index = prompts_mod._index(early.id)
    assert index is not None
    again = Packet(id="note-1", kind="note", content="x", metadata={"message_index": index})
    second = _with_packet(first, again)
    grown = [*first.result.messages, Message(role="user", content="more", id="msg-999")]
    third = _with_packet(second, again.model_copy(update={"id": "note-2"}), grown)
    reader = PromptReader()
    read = [reader.read(t) for t in (first, second, third)]
    assert read == [prompt_of(t) for t in (first, second, third)]
    packets = [next(b.packet for b in p.blocks if b.label == early.id) for p in read]
    assert packets[1:] == ["note-1", "note-2"]
    assert packets[0] != "note-1"
    assert read[2].blocks[-1].label == "msg-999"


def test_calls_read_out_of_order_or_interleaved_are_read_as_afresh() -> None:
    """Calls that do not extend the previous one (read backwards, two sessions
    interleaved, a call repeated) are read from their first message."""
    sessions = [_sessions(path).popitem()[1] for path in LOGS[:3]]
    orders = [
        list(reversed(sessions[0])),
        [t for pair in zip(sessions[0], sessions[2], strict=False) for t in pair],
        [t for t in sessions[1] for _ in range(2)],
    ]
    for order in orders:
        reader = PromptReader()
        assert [reader.read(t) for t in order] == [prompt_of(t) for t in order]
