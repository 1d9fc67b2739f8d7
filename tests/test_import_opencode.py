"""OpenCode sessions (docs/design.md, "Formats"), on the real samples of
``tests/fixtures/imports/opencode`` (SOURCES.md): recorded server events and a message list.

What each test expects is read from the raw files here (the last state of a recorded part, an
error text, the parts of a message), never from the reader's own output.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxcore.diagnostics import diagnose
from ctxcore.errors import ImportFormatError
from ctxcore.formats.load import detect_format, load_file, traces_from_value
from ctxcore.formats.usage import normalize
from ctxcore.models import Trace

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "imports" / "opencode"
EVENTS = FIXTURES / "opencode-nvim-planning.events.json"
SIMPLE = FIXTURES / "opencode-nvim-simple-session.events.json"
MESSAGES = FIXTURES / "opencode-nvim-todowrite.messages.json"


def _raw(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _read(value: Any, where: str = "t.json") -> list[Trace]:
    assert detect_format(value) == "opencode"
    return traces_from_value(value, where=where)


def _packet(trace: Trace, call_id: str) -> str:
    return next(p.content for p in trace.input.packets if p.id == f"tool:{call_id}")


def test_the_last_recorded_state_of_a_part_is_what_the_next_call_saw() -> None:
    events = _raw(EVENTS)
    tool_updates = [
        e["properties"]["part"]
        for e in events
        if e["type"] == "message.part.updated" and e["properties"]["part"]["type"] == "tool"
    ]
    first = tool_updates[0]
    states = [p["state"]["status"] for p in tool_updates if p["id"] == first["id"]]
    assert states == ["pending", "running", "completed"]
    final = [p for p in tool_updates if p["id"] == first["id"]][-1]
    traces = load_file(EVENTS)
    # the step that called it is a call; the next call holds its completed output
    assert traces[0].outcome is not None and traces[0].outcome.output is not None
    assert traces[0].outcome.output.endswith(
        f"{first['tool']}({json.dumps(final['state']['input'], separators=(',', ':'))})"
    )
    assert _packet(traces[1], first["callID"]) == final["state"]["output"]


def test_synthetic_text_is_sent_and_a_text_file_part_is_not() -> None:
    events = _raw(SIMPLE)
    parts = [e["properties"]["part"] for e in events if e["type"] == "message.part.updated"]
    user_id = next(
        e["properties"]["info"]["id"]
        for e in events
        if e["type"] == "message.updated" and e["properties"]["info"]["role"] == "user"
    )
    texts = [p["text"] for p in parts if p["messageID"] == user_id and p["type"] == "text"]
    assert len(texts) == 3  # what the user typed, then the Read OpenCode added
    [trace] = load_file(SIMPLE)
    assert trace.input.query == "\n".join(texts)
    log = trace.metadata["session_log"]
    assert log["not_sent_to_the_model"]["file (text/plain)"] == 1
    assert trace.metadata["import"]["source"]["media"] == 0


def test_a_call_whose_user_message_is_not_in_the_file_says_so() -> None:
    raw = _raw(MESSAGES)
    ids = {m["info"]["id"] for m in raw}
    parent = raw[0]["info"]["parentID"]
    assert parent not in ids
    traces = load_file(MESSAGES)
    assert len(traces) == len(raw)
    assert traces[0].input.history == [] and traces[0].input.packets == []
    for t in traces:
        assert t.metadata["session_log"]["parent_not_in_file"] == parent
        assert any(parent in w for w in t.result.warnings)


def test_a_failed_tool_call_is_an_error_result() -> None:
    raw = _raw(MESSAGES)
    failed = [
        (k, p)
        for k, m in enumerate(raw)
        for p in m["parts"]
        if p["type"] == "tool" and p["state"]["status"] == "error"
    ]
    assert [p["tool"] for _, p in failed] == ["todowrite", "edit"]
    traces = load_file(MESSAGES)
    k, part = failed[0]
    later = traces[k + 1]
    packet = next(p for p in later.input.packets if p.id == f"tool:{part['callID']}")
    assert packet.content == part["state"]["error"]
    assert packet.metadata["is_error"] is True


def test_a_message_of_several_steps_is_a_call_per_step() -> None:
    # older OpenCode versions kept a whole turn in one assistant message, a step each call:
    # the five real messages as one, each still its own call with the same context
    raw = _raw(MESSAGES)
    alone = load_file(MESSAGES)
    merged = [{"info": raw[0]["info"], "parts": [p for m in raw for p in m["parts"]]}]
    together = _read(merged)
    assert len(together) == len(alone) == 5
    for a, b in zip(alone, together, strict=True):
        assert b.outcome is not None and a.outcome is not None
        assert b.outcome.output == a.outcome.output
        assert b.metadata["import"]["source"] == a.metadata["import"]["source"]
        assert [p.content for p in b.input.packets] == [p.content for p in a.input.packets]


def test_removed_messages_and_parts_leave_the_session() -> None:
    events = _raw(EVENTS)
    assistants = list(
        dict.fromkeys(
            e["properties"]["info"]["id"]
            for e in events
            if e["type"] == "message.updated" and e["properties"]["info"]["role"] == "assistant"
        )
    )
    assert len(assistants) == 4
    removed = [*events, {"type": "message.removed", "properties": {"messageID": assistants[-1]}}]
    assert len(_read(removed)) == 3
    typed = next(
        e["properties"]["part"]
        for e in events
        if e["type"] == "message.part.updated" and e["properties"]["part"].get("text")
    )
    gone = {"messageID": typed["messageID"], "partID": typed["id"]}
    without = [*events, {"type": "message.part.removed", "properties": gone}]
    assert typed["text"] not in _read(without)[0].input.query


def test_a_message_that_cannot_be_read_is_its_error_and_the_rest_is_imported() -> None:
    raw = _raw(MESSAGES)
    tool = next(p for p in raw[2]["parts"] if p["type"] == "tool")
    tool["tool"] = None  # a call without a name
    traces = _read(raw, where="broken.json")
    assert len(traces) == 4
    skipped = [s for t in traces for s in t.metadata["import"].get("skipped", [])]
    assert len(skipped) == 1 and skipped[0].startswith("broken.json: [2]: ")
    assert "without a name" in skipped[0]


def test_a_session_with_no_reply_is_refused_in_one_line() -> None:
    events = [
        e
        for e in _raw(SIMPLE)
        if e["type"] != "message.updated" or e["properties"]["info"]["role"] == "user"
    ]
    with pytest.raises(ImportFormatError, match="an OpenCode session with no model call"):
        _read(events)


def test_an_export_is_its_messages() -> None:
    # ``opencode export`` writes the session's info beside the same message list
    raw = _raw(MESSAGES)
    export = {"info": {"id": raw[0]["info"]["sessionID"], "title": "t"}, "messages": raw}
    from_export = _read(export)
    assert [t.outcome.output for t in from_export if t.outcome] == [
        t.outcome.output for t in load_file(MESSAGES) if t.outcome
    ]


@pytest.mark.parametrize(
    ("tokens", "want"),
    [
        # a version that records the total: reasoning beside output, the total says so
        (
            {"input": 10, "output": 5, "reasoning": 3, "cache.read": 100, "total": 118},
            {"input_tokens": 110, "output_tokens": 8, "reasoning_tokens": 3},
        ),
        # the total leaves reasoning out: output already holds it
        (
            {"input": 10, "output": 5, "reasoning": 3, "cache.read": 100, "total": 115},
            {"input_tokens": 110, "output_tokens": 5, "reasoning_tokens": 3},
        ),
        # no total: whether output holds the reasoning is unknown
        (
            {"input": 10, "output": 5, "reasoning": 3, "cache.read": 100},
            {"input_tokens": 110, "output_tokens": None, "reasoning_tokens": 3},
        ),
    ],
)
def test_opencode_tokens_read_by_the_documented_mapping(
    tokens: dict[str, int], want: dict[str, int | None]
) -> None:
    got = normalize("opencode", tokens)
    assert got is not None
    assert {k: getattr(got, k) for k in want} == want


def _user(sid: str, mid: str, part: dict[str, Any]) -> list[dict[str, Any]]:
    info = {"id": mid, "sessionID": sid, "role": "user", "time": {"created": 1760204600000}}
    part = {"id": f"prt_{mid}", "messageID": mid, "sessionID": sid, **part}
    return [
        {"type": "message.updated", "properties": {"info": info}},
        {"type": "message.part.updated", "properties": {"part": part}},
    ]


def _assistant(sid: str, mid: str, text: str, **info: Any) -> list[dict[str, Any]]:
    full = {"id": mid, "sessionID": sid, "role": "assistant", "modelID": "m", **info}
    part = {"id": f"prt_{mid}", "messageID": mid, "sessionID": sid, "type": "text", "text": text}
    return [
        {"type": "message.updated", "properties": {"info": full}},
        {"type": "message.part.updated", "properties": {"part": part}},
    ]


def test_a_compaction_replaces_what_came_before_its_request() -> None:
    # the real session, then what OpenCode records when it compacts: a user message with a
    # compaction part, the summary (an assistant message marked summary), and the next turn
    events = _raw(EVENTS)
    sid = events[0]["properties"]["info"]["sessionID"]
    events += _user(sid, "msg_z1", {"type": "compaction", "auto": True})
    events += _assistant(sid, "msg_z2", "We planned a Neovim plugin.", summary=True)
    events += _user(sid, "msg_z3", {"type": "text", "text": "go on"})
    events += _assistant(sid, "msg_z4", "Going on.")
    before = load_file(EVENTS)
    traces = _read(events)
    assert len(traces) == len(before) + 2
    summary_call, after = traces[-2], traces[-1]
    # the summary's call saw everything, and the request as OpenCode words it
    assert summary_call.input.query == "What did we do so far?"
    assert len(summary_call.input.history) > 1
    assert summary_call.metadata["import"].get("compaction") is None
    # the next call sees the request, the summary and what follows, nothing before
    assert after.input.query == "go on"
    assert [m.content for m in after.input.history] == [
        "What did we do so far?",
        "We planned a Neovim plugin.",
    ]
    assert after.input.packets == []
    # replaced: the user message, four replies, the three messages of tool results (the
    # hand counts: 1 user, 4 assistant messages of one step, 3 tool calls)
    assert after.metadata["import"]["compaction"]["summarized"] == 1 + 4 + 3


def test_text_streamed_as_deltas_is_the_parts_text() -> None:
    events = _raw(EVENTS)
    last = [
        e
        for e in events
        if e["type"] == "message.part.updated" and e["properties"]["part"]["type"] == "text"
    ][-1]
    part = last["properties"]["part"]
    text = part["text"]
    streamed = [
        e
        for e in events
        if e is not last
        and not (
            e["type"] == "message.part.updated" and e["properties"]["part"]["id"] == part["id"]
        )
    ]
    cut = len(text) // 2
    for piece in (text[:cut], text[cut:]):
        delta = {"messageID": part["messageID"], "partID": part["id"], "field": "text"}
        streamed.append({"type": "message.part.delta", "properties": {**delta, "delta": piece}})
    traces = _read(streamed)
    assert traces[-1].outcome is not None and traces[-1].outcome.output == text
    assert traces[-1].outcome.output == load_file(EVENTS)[-1].outcome.output  # type: ignore[union-attr]


def test_a_part_of_a_type_not_read_is_kept_as_text_and_reported() -> None:
    raw = _raw(MESSAGES)
    raw[0]["parts"].insert(1, {"id": "prt_x", "type": "subtask", "prompt": "look around"})
    traces = _read(raw)
    later = traces[1]
    assert any('"prompt": "look around"' in m.content for m in later.input.history)
    loss = [f for f in diagnose(later) if f.detector == "import_loss"]
    assert loss and "opencode:subtask" in loss[0].message
