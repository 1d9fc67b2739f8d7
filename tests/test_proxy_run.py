"""``ctxscope run -- python script.py`` end to end, with the official SDKs as the agent.

The script uses the ``openai`` and ``anthropic`` Python SDKs exactly as an agent would: the
base URL comes from the environment ``ctxscope run`` sets, nothing else knows about ctxscope.
The upstream is the fake one replaying recorded responses and streams (``fake_upstream.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from proxy_support import (
    ROOT,
    Proc,
    free_port,
    read_traces,
    start_collector,
    start_proxy,
    start_upstream,
)

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    import anthropic
    import openai

    FIX, STREAMS = Path(sys.argv[1]), Path(sys.argv[2])
    def load(name):
        return json.loads((FIX / name).read_text())

    def load_stream(name):
        return json.loads((STREAMS / name).read_text())

    def scenario(value):
        return {"x-test-scenario": value}

    out = {}
    oa = openai.OpenAI(api_key="sk-proj-RUNSECRET0123456789abcdefghij", max_retries=0)
    req = load("openai-chat/otel-contrib-tool-calls-turn1.request.json")
    got = oa.chat.completions.create(
        **req,
        extra_headers=scenario("json:openai-chat/otel-contrib-tool-calls-turn1.response.json"),
    )
    out["chat_tool"] = got.choices[0].message.tool_calls[0].function.name
    req = load_stream("openai-chat-otel-contrib-streaming.request.json")
    stream = oa.chat.completions.create(
        **req,
        extra_headers=scenario("sse:openai-chat-otel-contrib-streaming.response.sse"),
    )
    out["chat_stream"] = "".join(
        c.choices[0].delta.content or "" for c in stream if c.choices
    )
    req = load_stream("openai-responses-otel-contrib-streaming.request.json")
    events = oa.responses.create(
        **req,
        extra_headers=scenario("sse:openai-responses-otel-contrib-streaming.response.sse"),
    )
    out["responses_stream"] = [e.response.output_text for e in events
                               if e.type == "response.completed"][0]

    an = anthropic.Anthropic(api_key="sk-ant-api03-RUNSECRET0123456789abcdefghij", max_retries=0)
    req = load("anthropic-messages/openllmetry-thinking.request.json")
    msg = an.messages.create(
        **req,
        extra_headers=scenario("json:anthropic-messages/openllmetry-thinking.response.json"),
    )
    out["messages"] = [b.type for b in msg.content]
    req = load_stream("anthropic-openllmetry-caching-stream-read.request.json")
    req.pop("stream", None)
    with an.messages.stream(
        **req,
        extra_headers=scenario(
            "sse:anthropic-openllmetry-caching-stream-read.response.sse"
        ),
    ) as s:
        final = s.get_final_message()
    out["messages_stream_cached"] = final.usage.cache_read_input_tokens
    print(json.dumps(out))
    sys.exit(3)
    """
)


@pytest.fixture()
def upstream(tmp_path: Path) -> Iterator[Proc]:
    p = start_upstream(tmp_path / "upstream")
    yield p
    p.stop()


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "agent.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_BASE_URL")}
    return subprocess.run(
        [sys.executable, "-m", "ctxcore", "run", *args, "--", sys.executable, str(script)]
        + [
            str(ROOT / "tests" / "fixtures" / "imports"),
            str(ROOT / "tests" / "fixtures" / "streams"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=240,
    )


def _check_traces(path: Path) -> None:
    traces = read_traces(path)
    assert len(traces) == 5
    by_api: dict[str, list[dict[str, object]]] = {}
    for t in traces:
        by_api.setdefault(t["metadata"]["capture"]["api"], []).append(t)
    assert sorted((k, len(v)) for k, v in by_api.items()) == [
        ("anthropic.messages", 2),
        ("openai.chat", 2),
        ("openai.responses", 1),
    ]
    cached = [
        t["metadata"]["capture"]["usage"].get("cached")  # type: ignore[index]
        for t in by_api["anthropic.messages"]
    ]
    assert 1165 in cached
    assert all("python" in str(t["tags"]) for t in traces)
    text = path.read_text()
    assert "RUNSECRET" not in text


@pytest.mark.slow
def test_run_starts_a_proxy_and_records_the_sdk_calls(tmp_path: Path, upstream: Proc) -> None:
    port = free_port()
    up = f"http://127.0.0.1:{upstream.port}"
    proc = _run(
        tmp_path,
        "--proxy-port",
        str(port),
        "--traces",
        str(tmp_path / "traces"),
        "--upstream-openai",
        up,
        "--upstream-anthropic",
        up,
    )
    assert proc.returncode == 3, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {
        "chat_tool": "get_current_weather",
        "chat_stream": '"This is a test."',
        "responses_stream": "This is a test.",
        "messages": ["thinking", "text"],
        "messages_stream_cached": 1165,
    }
    assert "a new proxy" in proc.stderr
    assert "5 call(s) recorded" in proc.stderr
    assert "http://127.0.0.1:8501" in proc.stderr
    # run waited for the proxy to write every trace before it returned
    _check_traces(tmp_path / "traces" / "live" / "python.jsonl")


@pytest.mark.slow
def test_run_uses_a_proxy_that_is_already_running(tmp_path: Path, upstream: Proc) -> None:
    proxy = start_proxy(tmp_path / "shared", upstream.port)
    try:
        proc = _run(tmp_path, "--proxy-port", str(proxy.port))
        assert proc.returncode == 3, proc.stderr
        assert "the running proxy" in proc.stderr
        assert str((tmp_path / "shared").resolve()) in proc.stderr
    finally:
        proxy.stop()
    _check_traces(tmp_path / "shared" / "live" / "python.jsonl")


def _run_nothing(traces: Path, port: int) -> subprocess.CompletedProcess[str]:
    """``ctxscope run`` of a command that calls no model: the proxy it starts, started and
    stopped."""
    return subprocess.run(
        [sys.executable, "-m", "ctxcore", "run", "--proxy-port", str(port), "--traces",
         str(traces), "--", sys.executable, "-c", "pass"],
        capture_output=True, text=True, cwd=ROOT, timeout=240,
    )  # fmt: skip


@pytest.mark.slow
def test_run_and_stopped_services_leave_no_leaked_semaphores(tmp_path: Path) -> None:
    """Stopped with SIGTERM, the proxy (its converter's stop event) and the OTLP receiver (its
    pool) exit normally: multiprocessing unlinks their semaphores, and its resource tracker
    has nothing to warn about."""
    run = _run_nothing(tmp_path / "traces", free_port())
    assert run.returncode == 0, run.stderr
    assert "a new proxy" in run.stderr and "0 call(s) recorded" in run.stderr
    assert "leaked" not in run.stderr and "Traceback" not in run.stderr, run.stderr
    for service in (start_proxy(tmp_path / "p", free_port()), start_collector(tmp_path / "c")):
        try:
            assert service.stop() == 0, service.text
        finally:
            service.proc.kill()
            service.proc.wait()
        assert "leaked" not in service.text and "Traceback" not in service.text, service.text


@pytest.mark.slow
def test_run_names_the_app_that_watches_its_folder(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    run = _run_nothing(traces, free_port())
    assert run.returncode == 0, run.stderr
    assert f"see them with `ctxscope app --traces {traces}` at http://127.0.0.1:8501" in run.stderr
    # an app on another port watches that folder (on the store `run` and `app` default to)
    port = free_port()
    app = subprocess.Popen(
        [sys.executable, "-m", "ctxcore", "app", "--traces", str(traces), "--port", str(port)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        note = Path(os.environ["CTXSCOPE_DB"] + ".app.json")
        deadline = time.monotonic() + 90
        while not note.exists():
            assert app.poll() is None and time.monotonic() < deadline, "the app did not start"
            time.sleep(0.2)
        run = _run_nothing(traces, free_port())
        assert run.returncode == 0, run.stderr
        assert f"the running app shows them at http://127.0.0.1:{port}" in run.stderr
        assert ":8501" not in run.stderr
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(app.pid, signal.SIGTERM)
        try:
            app.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(app.pid, signal.SIGKILL)
            app.wait(timeout=30)
