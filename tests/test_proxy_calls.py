"""From a captured call to a trace, without processes: stream assembly, failures, sessions.

The recorded streams of ``fixtures/streams`` are cut, re-framed and broken here in
ways a real upstream produces (CRLF line ends, an error event mid-reply, a gzip body).
"""

from __future__ import annotations

import gzip
import json
import time
import zlib
from pathlib import Path

import pytest

from ctxcore.capture import sse
from ctxcore.capture.calls import (
    MAX_DECODED_BYTES,
    CallError,
    CallRecord,
    Sessions,
    decode_body,
    fingerprint,
    trace_from_call,
)
from ctxcore.capture.inflate import Broken, Inflater, TooBig

STREAMS = Path(__file__).resolve().parent / "fixtures" / "streams"
IMPORTS = STREAMS.parent / "imports"


def record(api: str, **kw: object) -> CallRecord:
    base: dict[str, object] = {
        "id": "call-1",
        "api": api,
        "path": "/v1/x",
        "source": "",
        "started_at": time.time(),
        "latency_ms": 5.0,
        "status": 200,
        "content_type": "text/event-stream",
    }
    base.update(kw)
    return CallRecord(**base)  # type: ignore[arg-type]


def test_event_parsing_follows_the_sse_rules() -> None:
    text = ": keep-alive\r\nevent: a\r\ndata: one\r\ndata: two\r\n\r\ndata:three\n\n"
    got = list(sse.events(text))
    assert [(e.name, e.data) for e in got] == [("a", "one\ntwo"), ("", "three")]


def test_crlf_framing_assembles_the_same_reply() -> None:
    text = (STREAMS / "anthropic-openllmetry-tools-streaming.response.sse").read_text()
    a = sse.anthropic_message(text)
    b = sse.anthropic_message(text.replace("\n", "\r\n"))
    assert a.response == b.response and a.complete and b.complete
    assert a.response is not None
    # two tool calls, each input put back together from its input_json_delta fragments
    tools = [(b["name"], b["input"]) for b in a.response["content"] if b["type"] == "tool_use"]
    assert tools == [
        ("get_weather", {"location": "San Francisco, CA", "unit": "celsius"}),
        ("get_time", {"timezone": "America/Los_Angeles"}),
    ]


def test_an_error_event_mid_stream_is_the_outcome() -> None:
    text = (STREAMS / "anthropic-openllmetry-tools-streaming.response.sse").read_text()
    events = text.split("\n\n")
    broken = "\n\n".join(events[:6]) + (
        '\n\nevent: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
        '"message":"Overloaded"}}\n\n'
    )
    request = (STREAMS / "anthropic-openllmetry-tools-streaming.request.json").read_bytes()
    trace = trace_from_call(record("anthropic.messages"), request, broken.encode(), Sessions())
    assert trace.outcome is not None
    assert trace.outcome.note == (
        "the stream ended in an error event: overloaded_error: Overloaded"
    )
    assert "failed" in trace.tags
    assert trace.metadata["capture"]["usage"]["input"] == 506


def test_a_gzip_reply_is_read_for_the_trace() -> None:
    request = (IMPORTS / "openai-chat/otel-contrib-tool-calls-turn1.request.json").read_bytes()
    reply = (IMPORTS / "openai-chat/otel-contrib-tool-calls-turn1.response.json").read_bytes()
    rec = record("openai.chat", content_type="application/json", content_encoding="gzip")
    trace = trace_from_call(rec, request, gzip.compress(reply), Sessions())
    assert trace.metadata["capture"]["usage"] == {"input": 75, "output": 51, "cached": 0}
    assert trace.outcome is not None and trace.outcome.output is not None
    assert trace.outcome.output.startswith("get_current_weather(")
    # an encoding Python cannot undo leaves the reply unread, and says so
    rec = record("openai.chat", content_type="application/json", content_encoding="br")
    trace = trace_from_call(rec, request, b"\x8b\x00", Sessions())
    assert trace.outcome is not None and "br-encoded" in trace.outcome.note


def test_replies_unpack_in_every_framing_and_never_past_the_limit() -> None:
    """Several gzip members, zlib-wrapped and raw deflate, a cut body, and bombs: each coding
    is unpacked to the limit at most, also when it arrives in pieces."""
    reply = (IMPORTS / "openai-chat/otel-contrib-tool-calls-turn1.response.json").read_bytes()
    half = len(reply) // 2
    members = gzip.compress(reply[:half]) + gzip.compress(reply[half:])
    assert decode_body(members, "gzip") == reply
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    assert decode_body(raw.compress(reply) + raw.flush(), "deflate") == reply
    assert decode_body(zlib.compress(reply), "deflate") == reply
    cut = gzip.compress(reply)[: len(reply) // 4]
    got = decode_body(cut, "gzip")
    assert got is not None and reply.startswith(got) and got
    with pytest.raises(Broken, match="does not unpack"):
        decode_body(b"not gzip at all", "gzip")
    bomb = gzip.compress(bytes(64 << 20))
    with pytest.raises(TooBig, match="unpacks past 1,048,576 bytes"):
        decode_body(bomb, "gzip", limit=1 << 20)
    # two layers: each is bounded
    with pytest.raises(TooBig):
        decode_body(gzip.compress(bomb), "gzip, gzip", limit=1 << 20)
    inflater = Inflater("gzip", 1 << 20)
    with pytest.raises(TooBig):
        for i in range(0, len(bomb), 4096):
            assert len(inflater.feed(bomb[i : i + 4096])) <= 1 << 20
    assert inflater.size == (1 << 20) + 1


def test_a_reply_that_unpacks_past_the_limit_is_the_outcome() -> None:
    request = (IMPORTS / "openai-chat/otel-contrib-tool-calls-turn1.request.json").read_bytes()
    rec = record("openai.chat", content_type="application/json", content_encoding="gzip")
    bomb = gzip.compress(b"{" + b" " * (MAX_DECODED_BYTES + 1) + b"}")
    trace = trace_from_call(rec, request, bomb, Sessions())
    assert trace.outcome is not None and trace.outcome.output is None
    assert f"unpacks past {MAX_DECODED_BYTES:,} bytes" in trace.outcome.note
    assert "failed" in trace.tags


def test_a_request_no_importer_reads_is_an_error() -> None:
    with pytest.raises(CallError, match="not a JSON object"):
        trace_from_call(record("openai.chat"), b"not json", b"", Sessions())


def test_sessions_in_order_of_precedence() -> None:
    s = Sessions()
    anth = {"metadata": {"user_id": "u-1"}, "messages": [{"role": "user", "content": "hi"}]}
    assert s.session_of("anthropic.messages", anth) == ("u-1", "metadata.user_id")
    keyed = {"prompt_cache_key": "conv-9", "previous_response_id": "resp_1", "input": "x"}
    assert s.session_of("openai.responses", keyed) == ("conv-9", "prompt_cache_key")
    s.answered("resp_1", "live-abc")
    follow = {"previous_response_id": "resp_1", "input": "next"}
    assert s.session_of("openai.responses", follow) == ("live-abc", "previous_response_id")
    chat = {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "second"},
        ]
    }
    shorter = {"messages": chat["messages"][:2]}
    assert fingerprint("openai.chat", chat) == fingerprint("openai.chat", shorter)
    assert s.next_turn("x") == 0 and s.next_turn("x") == 1
    # the same opening words from two sources (two agents, two machines) are two sessions
    a, named = s.session_of("openai.chat", chat, "team-a")
    assert named == "system prompt and first user message"
    assert a == fingerprint("openai.chat", shorter, "team-a") != fingerprint("openai.chat", chat)
    assert a != s.session_of("openai.chat", chat, "team-b")[0]


def test_a_truncated_copy_says_so() -> None:
    request = (STREAMS / "openai-chat-otel-contrib-streaming.request.json").read_bytes()
    text = (STREAMS / "openai-chat-otel-contrib-streaming.response.sse").read_bytes()
    rec = record("openai.chat", truncated=True)
    trace = trace_from_call(rec, request, text[:700], Sessions())
    assert trace.outcome is not None
    assert "too big to keep whole" in trace.outcome.note
    assert json.loads(trace.to_json())["metadata"]["capture"]["stream"] is True
