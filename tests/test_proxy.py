"""``ctxscope proxy`` as real processes on loopback, against a fake upstream.

The fake upstream (``fake_upstream.py``) records every request's bytes and replays recorded
responses: the non-streamed request/response pairs of ``fixtures/imports`` and the recorded
SSE streams of ``fixtures/streams`` (sources in ``SOURCES.md``). The tests check that
bytes pass unchanged both ways, that each call becomes one trace with the right usage, that
200 concurrent streams are neither lost nor mixed up, that upstream failures and a client
hanging up reach the client as they happened and the trace as its outcome, and that no
credential is written anywhere. No app runs: the proxy does not need one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gzip
import json
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from proxy_support import (
    FIXTURES,
    STREAM_FIXTURES,
    Proc,
    read_traces,
    send,
    start_proxy,
    start_upstream,
    wait_traces,
)

OPENAI_KEY = "sk-proj-TESTSECRETabcdefghijklmnopqrstuvwxyz0123456789"
ANTHROPIC_KEY = "sk-ant-api03-TESTSECRETabcdefghijklmnopqrstuvwxyz0123456789"
COOKIE = "session=COOKIESECRET0123456789"
#: what each recorded stream's usage says, read off the fixture by hand
STREAMS: dict[str, tuple[str, dict[str, int], str]] = {
    "openai-chat-otel-contrib-streaming": (
        "/v1/chat/completions",
        {"input": 12, "output": 5, "cached": 0},
        '"This is a test."',
    ),
    "openai-chat-otel-contrib-tools-streaming": (
        "/v1/chat/completions",
        {"input": 75, "output": 51, "cached": 0},
        "get_current_weather(",
    ),
    "openai-responses-otel-contrib-streaming": (
        "/v1/responses",
        {"input": 22, "output": 6, "cached": 0},
        "This is a test.",
    ),
    "anthropic-openllmetry-caching-stream-write": (
        "/v1/messages",
        {"input": 4 + 1165, "output": 201, "cached": 0, "cache_creation": 1165},
        "Here are concise summaries",
    ),
    "anthropic-openllmetry-caching-stream-read": (
        "/v1/messages",
        {"input": 4 + 1165, "output": 221, "cached": 1165, "cache_creation": 0},
        "Here are concise summaries",
    ),
    "anthropic-openllmetry-tools-streaming": (
        "/v1/messages",
        {"input": 506, "output": 153, "cached": 0, "cache_creation": 0},
        "get_weather(",
    ),
}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("proxy")


@pytest.fixture(scope="module")
def upstream(workdir: Path) -> Iterator[Proc]:
    p = start_upstream(workdir / "upstream")
    yield p
    p.stop()


@pytest.fixture(scope="module")
def proxy(workdir: Path, upstream: Proc) -> Iterator[Proc]:
    p = start_proxy(workdir / "traces", upstream.port, "--timeout", "2")
    yield p
    p.stop()


def live(workdir: Path, source: str) -> Path:
    return workdir / "traces" / "live" / f"{source}.jsonl"


def recorded(workdir: Path) -> list[Path]:
    return sorted((workdir / "upstream").glob("*.http"))


def last_request(workdir: Path) -> bytes:
    return recorded(workdir)[-1].read_bytes()


def auth(api: str) -> list[tuple[str, str]]:
    if api == "anthropic":
        return [("x-api-key", ANTHROPIC_KEY), ("anthropic-version", "2023-06-01")]
    return [("Authorization", f"Bearer {OPENAI_KEY}")]


# --------------------------------------------------------------------------- pass-through


@pytest.mark.parametrize(
    ("path", "api", "stem", "scenario"),
    [
        ("/v1/chat/completions", "openai", "openai-chat/otel-contrib-tool-calls-turn1", "json"),
        ("/v1/responses", "openai", "openai-responses/openllmetry-agents-function-call", "json"),
        ("/v1/messages", "anthropic", "anthropic-messages/openllmetry-thinking", "json"),
        ("/v1/messages", "anthropic", "anthropic-messages/openllmetry-thinking", "gzip"),
    ],
)
@pytest.mark.slow
def test_bytes_pass_unchanged_both_ways(
    workdir: Path, proxy: Proc, path: str, api: str, stem: str, scenario: str
) -> None:
    body = (FIXTURES / f"{stem}.request.json").read_bytes()
    source = f"bytes-{scenario}-{api}-{path.rsplit('/', 1)[-1]}"
    headers = [
        *auth(api),
        ("Cookie", COOKIE),
        ("Content-Type", "application/json"),
        ("X-Custom", "kept as sent"),
        ("Accept-Encoding", "gzip" if scenario == "gzip" else "identity"),
        ("x-test-scenario", f"{scenario}:{stem}.response.json"),
    ]
    reply = send(proxy.port, "POST", f"/{source}{path}", headers, body)

    # what the upstream got: the same body, the client's headers in their order, its own Host
    got = last_request(workdir)
    head, _, got_body = got.partition(b"\r\n\r\n")
    assert got_body == body
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0] == f"POST {path} HTTP/1.1"
    names = [ln.split(":", 1)[0].lower() for ln in lines[1:]]
    assert names[0] == "host" and "127.0.0.1" in lines[1]
    sent = [f"{k}: {v}".lower() for k, v in headers]
    assert [
        ln.lower()
        for ln in lines[1:]
        if ln.split(":")[0].lower() in {k.lower() for k, _ in headers}
    ] == sent

    # what the client got: the upstream's bytes, still compressed if they were
    expected = (FIXTURES / f"{stem}.response.json").read_bytes()
    assert reply.status == 200
    if scenario == "gzip":
        assert reply.header("content-encoding") == "gzip"
        assert reply.body == gzip.compress(expected, mtime=0)
    else:
        assert reply.body == expected
    assert reply.header("request-id") == "req_fake_1"

    [trace] = wait_traces(live(workdir, source), 1)
    resp = json.loads(expected)
    cap = trace["metadata"]["capture"]
    assert cap["status"] == 200 and cap["api"].startswith(api)
    assert trace["outcome"]["usage"] == {
        k: v for k, v in _flat(resp["usage"]).items() if isinstance(v, int)
    }
    assert f"source:{source}" in trace["tags"] and "live" in trace["tags"]


def _flat(usage: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in usage.items():
        if isinstance(v, dict):
            out.update({f"{k}.{s}": x for s, x in v.items()})
        elif not isinstance(v, bool):
            out[k] = v
    return out


@pytest.mark.parametrize("stem", sorted(STREAMS))
def test_recorded_streams_pass_unchanged_and_become_traces(
    workdir: Path, proxy: Proc, stem: str
) -> None:
    path, usage, reply_starts = STREAMS[stem]
    api = "anthropic" if stem.startswith("anthropic") else "openai"
    source = f"stream-{stem}"
    request = (STREAM_FIXTURES / f"{stem}.request.json").read_bytes()
    events = (STREAM_FIXTURES / f"{stem}.response.sse").read_bytes()
    reply = send(
        proxy.port,
        "POST",
        f"/{source}{path}",
        [*auth(api), ("x-test-scenario", f"sse:{stem}.response.sse")],
        request,
    )
    assert reply.status == 200 and reply.complete
    assert reply.body == events
    assert reply.header("content-type") == "text/event-stream; charset=utf-8"

    [trace] = wait_traces(live(workdir, source), 1)
    cap = trace["metadata"]["capture"]
    assert cap["usage"] == usage
    assert cap["stream"] is True and "error" not in cap
    assert reply_starts in trace["outcome"]["output"]
    assert trace["outcome"]["note"] == ""
    # the request went through the importer: the prompt is the request's
    req = json.loads(request)
    assert trace["input"]["query"] or trace["input"]["history"]
    assert trace["metadata"]["model"] == req["model"]


@pytest.mark.slow
def test_a_stream_is_handed_on_as_it_arrives(workdir: Path, proxy: Proc) -> None:
    stem = "openai-chat-otel-contrib-streaming"
    request = (STREAM_FIXTURES / f"{stem}.request.json").read_bytes()
    head = (
        f"POST /slow/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(request)}"
        f"\r\nx-test-scenario: sse:{stem}.response.sse\r\nx-test-delay-ms: 300\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        t0 = time.monotonic()
        sock.sendall(head + request)
        first = b""
        while b"data: " not in first:  # the headers may come in a write of their own
            first += sock.recv(65536)
        t_first = time.monotonic() - t0
        while not first.endswith(b"0\r\n\r\n"):
            more = sock.recv(65536)
            if not more:
                break
            first += more
        t_all = time.monotonic() - t0
    # nine events 300 ms apart: the first is through long before the last is sent
    assert b"data: " in first
    assert t_first < 1.0 < 2.0 < t_all


@pytest.mark.slow
def test_200_concurrent_streams_none_lost_or_mixed_up(workdir: Path, proxy: Proc) -> None:
    run = uuid.uuid4().hex[:8]
    messages = [f"call {i} of run {run}" for i in range(200)]

    async def one(client: httpx.AsyncClient, text: str) -> str:
        body = {"model": "echo-1", "stream": True, "messages": [{"role": "user", "content": text}]}
        async with client.stream(
            "POST",
            f"http://127.0.0.1:{proxy.port}/concurrent/v1/chat/completions",
            json=body,
            headers={"x-test-scenario": "echo", "authorization": f"Bearer {OPENAI_KEY}"},
        ) as resp:
            assert resp.status_code == 200
            chunks = [
                json.loads(line[6:])
                async for line in resp.aiter_lines()
                if line.startswith("data: {")
            ]
        return "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])

    async def all_of_them() -> list[str]:
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
        async with httpx.AsyncClient(limits=limits, timeout=60) as client:
            return await asyncio.gather(*(one(client, m) for m in messages))

    # on a thread of its own: a browser test earlier in the run may leave an event loop
    # running on this one (asyncio.run refuses to nest)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        replies = pool.submit(asyncio.run, all_of_them()).result()
    assert replies == [f"echo: {m}" for m in messages]

    traces = wait_traces(live(workdir, "concurrent"), 200, timeout=120)
    assert len(traces) == 200
    assert len({t["trace_id"] for t in traces}) == 200
    by_query = {t["input"]["query"]: t for t in traces}
    assert sorted(by_query) == sorted(messages)
    for text, t in by_query.items():
        assert t["outcome"]["output"] == f"echo: {text}"
        assert t["metadata"]["capture"]["usage"]["output"] > 0


# --------------------------------------------------------------------------- failures


@pytest.mark.parametrize("code", [429, 500])
def test_upstream_errors_come_back_unchanged(workdir: Path, proxy: Proc, code: int) -> None:
    body = (FIXTURES / "anthropic-messages/openllmetry-thinking.request.json").read_bytes()
    source = f"status-{code}"
    reply = send(
        proxy.port,
        "POST",
        f"/{source}/v1/messages",
        [*auth("anthropic"), ("x-test-scenario", f"status:{code}")],
        body,
    )
    assert reply.status == code
    assert reply.header("retry-after") == "7"
    assert json.loads(reply.body)["error"]["message"] == f"fake {code}"
    [trace] = wait_traces(live(workdir, source), 1)
    assert trace["metadata"]["capture"]["status"] == code
    assert trace["outcome"]["note"].startswith(f"upstream answered {code}: rate_limit_error")
    assert "failed" in trace["tags"]


def test_upstream_that_stalls_or_resets_before_answering(workdir: Path, proxy: Proc) -> None:
    body = (FIXTURES / "openai-chat/otel-contrib-tool-calls-turn1.request.json").read_bytes()
    stalled = send(
        proxy.port, "POST", "/stall/v1/chat/completions", [("x-test-scenario", "stall")], body
    )
    assert stalled.status == 504 and stalled.header("x-ctxscope-proxy") == "error"
    reset = send(
        proxy.port, "POST", "/reset/v1/chat/completions", [("x-test-scenario", "reset")], body
    )
    assert reset.status == 502 and reset.header("x-ctxscope-proxy") == "error"
    [t1] = wait_traces(live(workdir, "stall"), 1)
    [t2] = wait_traces(live(workdir, "reset"), 1)
    assert "timed out waiting for" in t1["outcome"]["note"]
    assert "failed before answering" in t2["outcome"]["note"]
    assert t1["metadata"]["capture"]["status"] is None


@pytest.mark.parametrize("scenario", ["reset-mid", "stall-mid"])
def test_a_stream_the_upstream_breaks_off_is_cut_for_the_client_too(
    workdir: Path, proxy: Proc, scenario: str
) -> None:
    stem = "anthropic-openllmetry-tools-streaming"
    body = (STREAM_FIXTURES / f"{stem}.request.json").read_bytes()
    reply = send(
        proxy.port,
        "POST",
        f"/{scenario}/v1/messages",
        [("x-test-scenario", f"{scenario}:{stem}.response.sse")],
        body,
    )
    events = (STREAM_FIXTURES / f"{stem}.response.sse").read_bytes()
    # what arrived is the stream's beginning, and the stream does not look finished
    assert reply.status == 200
    assert not reply.complete
    assert events.startswith(reply.body) and reply.body
    [trace] = wait_traces(live(workdir, scenario), 1)
    note = trace["outcome"]["note"]
    assert ("broke after" if scenario == "reset-mid" else "stalled after") in note
    assert "failed" in trace["tags"]


def test_a_client_that_hangs_up_mid_stream_cancels_the_upstream_call(
    workdir: Path, proxy: Proc
) -> None:
    stem = "openai-chat-otel-contrib-streaming"
    request = (STREAM_FIXTURES / f"{stem}.request.json").read_bytes()
    head = (
        f"POST /hangup/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(request)}"
        f"\r\nx-test-scenario: stall-mid:{stem}.response.sse\r\n\r\n"
    ).encode()
    before = len(recorded(workdir))
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        sock.sendall(head + request)
        got = b""
        while b"data: " not in got:
            got += sock.recv(65536)
    # the proxy closes its upstream connection too: the upstream sees its peer go
    deadline = time.monotonic() + 10
    gone = workdir / "upstream" / f"{before + 1:05d}.gone"
    while not gone.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone.exists()
    [trace] = wait_traces(live(workdir, "hangup"), 1)
    assert trace["outcome"]["note"].startswith("the client disconnected after")
    assert "failed" not in trace["tags"]
    # the reply as far as it came (the client may hang up after the first event or the second)
    assert (trace["outcome"]["output"] or "") in ("", '"This')


# --------------------------------------------------------------------------- routing, sessions


def test_other_paths_pass_through_and_are_not_recorded(workdir: Path, proxy: Proc) -> None:
    got = send(proxy.port, "GET", "/v1/models?limit=2", auth("openai"))
    assert got.status == 200
    assert json.loads(got.body) == {"ok": True, "path": "/v1/models?limit=2", "method": "GET"}
    counted = send(
        proxy.port, "POST", "/counting/v1/messages/count_tokens", auth("anthropic"), b"{}"
    )
    assert json.loads(counted.body)["path"] == "/v1/messages/count_tokens"
    time.sleep(1.5)
    assert not live(workdir, "counting").exists()


def test_sessions_follow_the_conversation(workdir: Path, proxy: Proc) -> None:
    source = "sessions"
    # Anthropic: metadata.user_id names the session
    req = json.loads(
        (FIXTURES / "anthropic-messages/openllmetry-thinking.request.json").read_text()
    )
    req["metadata"] = {"user_id": "user_abc_session_42"}
    scenario = ("x-test-scenario", "json:anthropic-messages/openllmetry-thinking.response.json")
    for _ in range(2):
        send(proxy.port, "POST", f"/{source}/v1/messages", [scenario], json.dumps(req).encode())
    # Responses: a call that continues a response joins that response's session
    stem = "openai-responses/openllmetry-agents-function-call"
    first = json.loads((FIXTURES / f"{stem}.request.json").read_text())
    rid = json.loads((FIXTURES / f"{stem}.response.json").read_text())["id"]
    follow = {"model": first["model"], "input": "and then?", "previous_response_id": rid}
    rscenario = ("x-test-scenario", f"json:{stem}.response.json")
    send(proxy.port, "POST", f"/{source}/v1/responses", [rscenario], json.dumps(first).encode())
    wait_traces(live(workdir, source), 3)
    send(proxy.port, "POST", f"/{source}/v1/responses", [rscenario], json.dumps(follow).encode())
    traces = wait_traces(live(workdir, source), 4)
    anth = [t for t in traces if t["metadata"]["capture"]["api"] == "anthropic.messages"]
    assert [t["session_id"] for t in anth] == ["user_abc_session_42"] * 2
    assert sorted(t["turn"] for t in anth) == [0, 1]
    resp = [t for t in traces if t["metadata"]["capture"]["api"] == "openai.responses"]
    assert resp[0]["session_id"] == resp[1]["session_id"]
    # (the same first request went through earlier in this module: turns go on from there)
    assert resp[1]["turn"] == resp[0]["turn"] + 1
    assert resp[1]["metadata"]["capture"]["session_from"] == "previous_response_id"


# --------------------------------------------------------------------------- secrets (last)


def test_no_credential_is_written_anywhere(workdir: Path, proxy: Proc) -> None:
    # a secret inside the prompt is redacted like an export's
    body = {
        "model": "echo-1",
        "stream": True,
        "messages": [{"role": "user", "content": f"my key is {OPENAI_KEY}, keep it"}],
    }
    send(
        proxy.port,
        "POST",
        "/secret/v1/chat/completions",
        [*auth("openai"), ("Cookie", COOKIE), ("x-test-scenario", "echo")],
        json.dumps(body).encode(),
    )
    [trace] = wait_traces(live(workdir, "secret"), 1)
    assert trace["redactions"]
    # the spool is handed over and deleted once idle
    spool = workdir / "traces" / ".ctxscope-spool"
    deadline = time.monotonic() + 15
    while any(spool.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(spool.iterdir())
    secrets = [OPENAI_KEY, ANTHROPIC_KEY, "COOKIESECRET", "TESTSECRET"]
    # every file the module's proxy wrote: this call's trace at least, and those of the
    # tests before it that ran in this worker (pytest-xdist may give some to another)
    written = [p for p in (workdir / "traces").rglob("*") if p.is_file()]
    assert live(workdir, "secret") in written
    for path in written:
        data = path.read_bytes()
        assert not [s for s in secrets if s.encode() in data], path
    assert not [s for s in secrets if s in proxy.text]
    # the upstream did get them: they were forwarded, only never kept
    assert any(OPENAI_KEY.encode() in p.read_bytes() for p in recorded(workdir))
    assert read_traces(live(workdir, "secret"))[0]["metadata"]["capture"]["status"] == 200
