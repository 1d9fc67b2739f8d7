"""The proxy's converter derives a session's call from its new messages only
(``formats.request.Incremental``, docs/design.md "Live capture", "Speed").

Call N of a session repeats call N-1's messages: the converter goes on from the parts the
earlier messages made and normalizes only the new ones. The traces must be the ones a
converter deriving every call in full writes, byte for byte: for sessions grown from every
request fixture of the three live APIs, and for a session that is not always an extension
(an edit in the middle, a compaction, a tool-list change, a second session interleaved).
Without ``timings`` (milliseconds measured as each trace was built), the JSON is compared
whole.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from ctxcore.capture.calls import CallRecord, Sessions, trace_from_call
from ctxcore.capture.spool import Converter, SpoolWriter, live_file, spool_dir
from ctxcore.pipeline import recorded

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "imports"
#: the live APIs whose importers read message by message, and their fixtures' folders
APIS = {
    "openai.chat": ("openai-chat", "/v1/chat/completions"),
    "anthropic.messages": ("anthropic-messages", "/v1/messages"),
    "openai.responses": ("openai-responses", "/v1/responses"),
}
SECRET = "sk-proj-" + "Q7fK2mZ9xL4pR8tV1wY6bN3cD5gH0jE2" * 2

Call = tuple[CallRecord, bytes, bytes]


def untimed(text: str) -> str:
    """A trace's JSON without ``result.timings``."""
    data = json.loads(text)
    if data.get("result") is not None:
        data["result"].pop("timings", None)
    return json.dumps(data, sort_keys=True)


def unturned(text: str) -> tuple[str, int]:
    """A trace's JSON without ``timings`` and ``turn``, and its turn."""
    data = json.loads(untimed(text))
    turn = data.pop("turn")
    return json.dumps(data, sort_keys=True), turn


def record(n: int, api: str, path: str, source: str = "agent") -> CallRecord:
    return CallRecord(
        id=f"call-{n:04d}",
        api=api,
        path=path,
        source=source,
        started_at=1_760_000_000.0 + n,
        latency_ms=3.0,
        status=200,
        content_type="application/json",
    )


def converted(calls: list[Call], sessions: Sessions) -> list[str]:
    return [untimed(trace_from_call(r, req, resp, sessions).to_json()) for r, req, resp in calls]


class Forgetful(dict[Any, Any]):
    """A memo that never has what it is asked for (``recorded._KEPT`` made useless)."""

    def get(self, key: Any, default: Any = None) -> Any:
        return default


@pytest.fixture
def full_derivation(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Converts calls from scratch: no session's derivation kept, and every kept decision
    validated anew (none shared with an earlier trace)."""

    def convert(calls: list[Call]) -> list[str]:
        with monkeypatch.context() as patch:
            patch.setattr(recorded, "_KEPT", Forgetful())
            return converted(calls, Sessions(derived=0))

    return convert


def incremental_and_full(calls: list[Call], full: Any) -> tuple[list[str], list[str], Sessions]:
    """The calls converted by one converter's sessions (going on from each session's previous
    call) and from scratch (``full_derivation``)."""
    going_on = Sessions()
    return converted(calls, going_on), full(calls), going_on


def list_key(api: str) -> str:
    return "input" if api == "openai.responses" else "messages"


def grown(api: str, request: dict[str, Any]) -> list[dict[str, Any]]:
    """A session grown to ``request``: one call per prefix of its messages (a call that
    has no message yet is left out), then the whole request with one more user message."""
    key = list_key(api)
    items = request[key] if isinstance(request[key], list) else [request[key]]
    calls = [{**request, key: items[:k]} for k in range(1, len(items) + 1)]
    calls.append({**request, key: [*items, {"role": "user", "content": "and now?"}]})
    return calls


def fixture_sessions() -> list[tuple[str, str]]:
    out = []
    for api, (folder, _) in APIS.items():
        for path in sorted((FIXTURES / folder).glob("*.request.json")):
            out.append((api, path.name.removesuffix(".request.json")))
    return out


@pytest.mark.parametrize(("api", "stem"), fixture_sessions())
def test_a_session_grown_from_each_request_fixture_is_the_full_derivation(
    api: str, stem: str, full_derivation: Any
) -> None:
    folder, path = APIS[api]
    request = json.loads((FIXTURES / folder / f"{stem}.request.json").read_text())
    reply = FIXTURES / folder / f"{stem}.response.json"
    response = reply.read_bytes() if reply.exists() else b"{}"
    calls = [
        (record(n, api, path), json.dumps(req).encode(), response)
        for n, req in enumerate(grown(api, request))
    ]
    going_on, full, _ = incremental_and_full(calls, full_derivation)
    assert going_on == full


def chat(session: str, messages: list[dict[str, Any]], tools: list[Any]) -> bytes:
    return json.dumps(
        {"model": "gpt-4o", "prompt_cache_key": session, "messages": messages, "tools": tools}
    ).encode()


TOOLS = [
    {
        "type": "function",
        "function": {"name": "read", "parameters": {"type": "object", "properties": {}}},
    }
]
REPLY = json.dumps(
    {
        "id": "chatcmpl-1",
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}}],
        "usage": {"prompt_tokens": 900, "completion_tokens": 3},
    }
).encode()


def step(i: int, tag: str) -> list[dict[str, Any]]:
    """One turn of a tool-using chat: the user asks, the model calls a tool (one call without
    an id, named by its position), the tool answers."""
    return [
        {"role": "user", "content": f"{tag} step {i}: read f{i}.py"},
        {
            "role": "assistant",
            "content": f"reading f{i}",
            "tool_calls": [
                {
                    "id": f"{tag}_{i}",
                    "type": "function",
                    "function": {"name": "read", "arguments": "{}"},
                },
                {"type": "function", "function": {"name": "read", "arguments": f'{{"n":{i}}}'}},
            ],
        },
        {"role": "tool", "tool_call_id": f"{tag}_{i}", "content": f"def f{i}(): return {i}\n" * 9},
        {"role": "tool", "content": f"the unnamed call's result {i}"},
    ]


def test_edits_compaction_tool_changes_and_interleaved_sessions_are_the_full_derivation(
    full_derivation: Any,
) -> None:
    """Two sessions interleaved call by call; one of them has its history edited in the
    middle, compacted (the history replaced by a summary), its tools changed, and a secret
    in a new message."""
    system = {"role": "system", "content": "You are a careful agent."}
    a: list[dict[str, Any]] = [system]
    b: list[dict[str, Any]] = [system, {"role": "developer", "content": "be brief"}]
    calls: list[Call] = []
    tools: list[Any] = TOOLS
    for i in range(14):
        a = [*a, *step(i, "a")]
        b = [*b, *step(i, "b")]
        if i == 5:  # an edit in the middle of the history
            a = copy.deepcopy(a)
            a[3]["content"] = "reading f0, edited"
        if i == 8:  # a compaction: the history so far replaced by a summary
            a = [system, {"role": "user", "content": "summary of the work so far"}, *step(i, "a")]
        if i == 10:  # a tool-list change
            tools = [*TOOLS, {"type": "function", "function": {"name": "write"}}]
        if i == 12:  # a secret in a new message
            a = [*a, {"role": "user", "content": f"use the key {SECRET}"}]
        for session, messages in (("sess-a", a), ("sess-b", b)):
            rec = record(len(calls), "openai.chat", "/v1/chat/completions")
            calls.append((rec, chat(session, messages, tools), REPLY))
    going_on, full, sessions = incremental_and_full(calls, full_derivation)
    assert going_on == full
    # every call but each session's first went on from an earlier one: the edited and the
    # compacted conversations still start with the first call's system message
    kept = {s: sessions.incremental(s) for s in ("sess-a", "sess-b")}
    assert kept["sess-b"].full == 1 and kept["sess-b"].resumed == 13
    assert kept["sess-a"].full == 1 and kept["sess-a"].resumed == 13
    # the session's checkpoints hold its messages once: each one's are the latest's objects
    cps = kept["sess-b"]._checkpoints
    assert len(cps) == 8
    assert all(m is cps[-1].items[k] for cp in cps for k, m in enumerate(cp.items))


def test_calls_ending_out_of_order_and_two_conversations_under_one_id_go_on(
    full_derivation: Any,
) -> None:
    """Under a burst a session's calls end (and are spooled) out of order, and two agents
    may share a session id (one ``prompt_cache_key``): each call goes on from the longest
    earlier call it extends, and the traces are the full derivation's."""
    one: list[dict[str, Any]] = [{"role": "system", "content": "main agent"}]
    two: list[dict[str, Any]] = [{"role": "system", "content": "sub-agent"}]
    calls: list[Call] = []
    for i in range(12):
        one = [*one, *step(i, "m")]
        two = [*two, *step(i, "s")]
        for messages in (one, two):
            rec = record(len(calls), "openai.chat", "/v1/chat/completions")
            calls.append((rec, chat("shared", messages, TOOLS), REPLY))
    order = [0, 1, 4, 2, 3, 5, 8, 6, 9, 7, 10, 11, 14, 12, 13, 16, 15, 17, 20, 18, 19, 21, 23, 22]
    shuffled = [calls[k] for k in order]
    going_on, full, sessions = incremental_and_full(shuffled, full_derivation)
    assert going_on == full
    memo = sessions.incremental("shared")
    assert memo.full == 2 and memo.resumed == len(calls) - 2


def test_an_anthropic_session_with_tool_results_and_a_compaction_block_goes_on(
    full_derivation: Any,
) -> None:
    """Anthropic messages: tool results inside user messages, a system field that changes
    once (derived in full then), and a compaction block that replaces what came before."""
    messages: list[dict[str, Any]] = []
    calls: list[Call] = []
    system: Any = [{"type": "text", "text": "agent", "cache_control": {"type": "ephemeral"}}]
    for i in range(10):
        messages = [
            *messages,
            {"role": "user", "content": f"step {i}"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"calling {i}"},
                    {"type": "tool_use", "id": f"tu_{i}", "name": "read", "input": {"n": i}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"tu_{i}", "content": f"out {i}"},
                    {"type": "text", "text": f"next {i}"},
                ],
            },
        ]
        if i == 4:
            system = "a new system prompt"
        if i == 7:
            messages = [
                *messages,
                {"role": "assistant", "content": [{"type": "compaction", "content": "summary"}]},
            ]
        body = {"model": "claude-sonnet-4-5", "system": system, "messages": messages}
        body["metadata"] = {"user_id": "user-1"}
        rec = record(i, "anthropic.messages", "/v1/messages")
        calls.append((rec, json.dumps(body).encode(), b"{}"))
    going_on, full, sessions = incremental_and_full(calls, full_derivation)
    assert going_on == full
    memo = sessions.incremental("user-1")
    assert memo.resumed >= 7


def spool(traces: Path, calls: list[Call]) -> None:
    writer = SpoolWriter(spool_dir(traces))
    for call in calls:
        writer.put(*call)
    writer.close()


def test_a_restarted_converter_writes_the_same_traces_and_redacts_new_secrets(
    tmp_path: Path,
) -> None:
    """A converter that stops half-way leaves the rest to a new one, which has no memory of
    the session: it derives the next call in full and goes on from there; the lines are the
    ones one converter writes. A secret in a new message never reaches the file."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "agent"}]
    calls: list[Call] = []
    for i in range(12):
        messages = [*messages, *step(i, "s")]
        if i == 7:
            messages = [*messages, {"role": "user", "content": f"the key is {SECRET}"}]
        calls.append(
            (record(i, "openai.chat", "/v1/chat/completions"), chat("s", messages, TOOLS), REPLY)
        )
    one = tmp_path / "one"
    spool(one, calls)
    assert Converter(one).step() == len(calls)
    two = tmp_path / "two"
    spool(two, calls[:5])
    first = Converter(two)
    assert first.step() == 5
    spool(two, calls[5:])
    second = Converter(two)
    assert second.step() == len(calls) - 5
    assert second.sessions.incremental("s").full == 1
    lines = [unturned(x) for x in live_file(one, "agent").read_text().splitlines()]
    again = [unturned(x) for x in live_file(two, "agent").read_text().splitlines()]
    # turn numbers restart with a new converter (docs/design.md, "Live capture")
    assert [turn for _, turn in again] == [*range(5), *range(len(calls) - 5)]
    assert [text for text, _ in lines] == [text for text, _ in again]
    assert len(lines) == len(calls)
    text = live_file(one, "agent").read_text()
    assert SECRET not in text
    assert all("openai_key" in json.loads(x)["redactions"] for x in text.splitlines()[7:])


def _chat_calls(sessions: list[list[dict[str, Any]]], model: str = "gpt-4o") -> list[Call]:
    out: list[Call] = []
    for messages in sessions:
        body = json.dumps({"model": model, "prompt_cache_key": "c", "messages": messages})
        out.append((record(len(out), "openai.chat", "/v1/chat/completions"), body.encode(), REPLY))
    return out


SYS = {"role": "system", "content": "agent"}


@pytest.mark.parametrize(
    "case",
    ["late tool result", "call made after its result", "system at the cut", "unknown window"],
)
def test_calls_whose_new_parts_change_the_carried_prefix_are_the_full_derivation(
    case: str, full_derivation: Any
) -> None:
    """The recorded derivation carried from a session's earlier call (``recorded.Carry``)
    is not reused where the new parts would move or change its parts: a tool result that
    answers a call of the carried history after a new user message (it goes right after
    that call), a result carried before the call that makes it (it moves after it), a
    developer message at the cut (its block joins the carried one) and a window the model
    does not give (every decision's budget moves with the prompt)."""
    call = {"id": "X", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    u = [{"role": "user", "content": f"u{i}"} for i in range(4)]
    model = "gpt-4o"
    if case == "late tool result":
        asks = {"role": "assistant", "content": "", "tool_calls": [call]}
        a = [SYS, u[0], asks, {"role": "assistant", "content": "more"}, u[1]]
        b = [*a, {"role": "tool", "tool_call_id": "X", "content": "late"}, u[2]]
    elif case == "call made after its result":
        a = [SYS, u[0], {"role": "tool", "tool_call_id": "X", "content": "early"}, u[1]]
        b = [*a, {"role": "assistant", "content": "", "tool_calls": [call]}, u[2]]
    elif case == "system at the cut":
        asked = {"role": "assistant", "content": "", "tool_calls": [call]}
        head = [SYS, u[0], asked, {"role": "tool", "tool_call_id": "X", "content": "out"}]
        a = [*head, {"role": "developer", "content": "rule one"}, u[1]]
        b = [*a[:-1], {"role": "developer", "content": "rule two"}, u[1], u[2]]
    else:
        model = "a-model-ctxscope-does-not-know"
        a = [SYS, u[0], {"role": "assistant", "content": "a0"}, u[1]]
        b = [*a, {"role": "assistant", "content": "a1"}, u[2]]
    calls = _chat_calls([a, b, [*b, {"role": "assistant", "content": "a2"}, u[3]]], model)
    going_on, full, sessions = incremental_and_full(calls, full_derivation)
    assert going_on == full
    assert sessions.incremental("c").resumed == 2  # the parsing went on from each call


def test_a_new_message_repeating_a_carried_message_id_is_the_full_derivation() -> None:
    """A session log's messages name their own ids: a new message repeating a carried
    one's id takes the carried message's own id away (both become ``builder:history:K``),
    so the carried items are not reused."""
    from datetime import UTC, datetime

    from ctxcore.models import CapturedInput, Message
    from ctxcore.tokens import get_counter

    counter = get_counter("cl100k_base")
    hist = [
        Message(role="user", content="first", id="m1"),
        Message(role="assistant", content="reply", id="m2"),
    ]
    now = datetime(2026, 1, 1, tzinfo=UTC)

    def call(history: list[Message], query: str) -> tuple[CapturedInput, list[Message]]:
        inp = CapturedInput(query=query, now=now, system_instructions="agent", history=history)
        flat = [Message(role="system", content="agent"), *history]
        return inp, [*flat, Message(role="user", content=query)]

    carry = recorded.Carry()
    recorded.derive_result(*call(hist, "second"), counter, carry=carry)
    later = call([*hist, Message(role="user", content="second"), hist[1].model_copy()], "third")
    going_on = recorded.derive_result(*later, counter, carry=carry)
    full = recorded.derive_result(*later, counter)
    assert going_on.model_dump(exclude={"timings"}) == full.model_dump(exclude={"timings"})
    assert "m2" not in [d.packet_id for d in full.decisions]


def test_a_running_session_reuses_the_carried_derivation() -> None:
    """Call N+1 of a chat session builds only its new parts: the carried prefix's items,
    kept decisions and prompt are the same objects in its result."""
    msgs: list[dict[str, Any]] = [SYS]
    bodies = []
    for i in range(6):
        msgs = [*msgs, {"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]
        bodies.append([*msgs, {"role": "user", "content": f"now {i}"}])
    sessions = Sessions()
    traces = [trace_from_call(r, q, s, sessions) for r, q, s in _chat_calls(bodies)]
    carry = sessions.incremental("c").derived
    assert carry.full == 1 and carry.resumed == 5
    prev, last = (t.result for t in traces[-2:])
    assert prev is not None and last is not None
    shared = [d for d in last.decisions if any(d is e for e in prev.decisions)]
    assert len(shared) >= len(prev.decisions) - 3


@pytest.mark.parametrize(("api", "stem"), fixture_sessions())
def test_the_trace_id_going_on_from_a_checkpoint_is_the_request_s_hash(api: str, stem: str) -> None:
    """The importer's trace id (``derive.stable_id`` of the request's identity) made from
    the hash kept at the session's previous checkpoint is the id made from scratch, for a
    session grown from each fixture and for calls whose tools or system field change."""
    from ctxcore.formats import anthropic, openai, responses
    from ctxcore.formats.derive import stable_id
    from ctxcore.formats.request import Incremental, RequestFormat

    forms: dict[str, RequestFormat] = {
        "openai.chat": openai.REQUESTS,
        "anthropic.messages": anthropic.REQUESTS,
        "openai.responses": responses.REQUESTS,
    }
    form = forms[api]
    folder, _ = APIS[api]
    request = json.loads((FIXTURES / folder / f"{stem}.request.json").read_text())
    calls = grown(api, request)
    key = list_key(api)
    ask = {"role": "user", "content": "again?"}
    calls.append({**calls[-1], "tools": [], key: [*calls[-1][key], ask]})
    calls.append(
        {**calls[-1], "system": "other", "instructions": "other", key: [*calls[-1][key], ask]}
    )
    memo = Incremental()
    for req in calls:
        got = form.trace(req, incremental=memo).trace_id
        assert got == stable_id(form.builder, *form.identity(req))
    assert memo.resumed >= 1 or form.items(request) is None


def test_an_agent_loop_s_trace_ids_go_on_from_the_kept_hash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Calls whose query is followed by the model's tool calls and their results (the
    checkpoint ends before the query, not at the last message): every id is the request's
    hash from scratch, and only the first call starts a hash (the others go on from the
    one kept at the checkpoint they extend)."""
    import hashlib

    from ctxcore.formats import openai, request
    from ctxcore.formats.derive import stable_id
    from ctxcore.formats.request import Incremental

    started: list[bytes] = []

    class Counting:
        @staticmethod
        def sha256(data: bytes) -> Any:
            started.append(data)
            return hashlib.sha256(data)

    monkeypatch.setattr(request, "hashlib", Counting)
    form, memo = openai.REQUESTS, Incremental()
    messages: list[dict[str, Any]] = [SYS]
    for i in range(8):
        messages = [*messages, *step(i, "t")]
        req = {"model": "gpt-4o", "messages": messages, "tools": TOOLS}
        assert form.trace(req, incremental=memo).trace_id == stable_id(
            form.builder, *form.identity(req)
        )
    assert memo.resumed == 7
    assert len(started) == 1
