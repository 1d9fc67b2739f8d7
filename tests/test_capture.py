"""Recorder: builds and foreign builds recorded as JSONL, safely, without hurting the agent."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from datetime import UTC, datetime
from pathlib import Path

import pytest
from helpers_store import corpus_lines, make_trace

from ctxcore.capture.recorder import Recorder, RecorderWarning
from ctxcore.errors import InputError
from ctxcore.models import CapturedInput, Config, Packet, Trace
from ctxcore.pipeline import build
from ctxcore.store import TraceStore
from ctxcore.store.ingest import ingest_paths

ROOT = Path(__file__).resolve().parent.parent


def corpus_input(n: int = 6) -> CapturedInput:
    lines = corpus_lines()
    return CapturedInput(
        query="why does test_reportingdemo fail?",
        now=datetime(2026, 3, 1, tzinfo=UTC),
        system_instructions="You are a careful coding agent.",
        packets=[
            Packet(id=f"tool:call_{k}", kind="tool_result", content=lines[k * 5], relevance=0.5)
            for k in range(n)
        ],
    )


def read_lines(path: Path) -> list[Trace]:
    return [Trace.model_validate_json(ln) for ln in path.read_text(encoding="utf-8").splitlines()]


def test_build_records_the_trace_it_returns(tmp_path: Path) -> None:
    rec = Recorder(tmp_path / "traces", session_id="agent-1")
    cfg = Config(preset="hello-agents-book")
    r0 = rec.build(corpus_input(), cfg)
    r1 = rec.build(corpus_input(3), cfg)
    assert r0 == build(corpus_input(), cfg).model_copy(update={"timings": r0.timings})
    written = read_lines(tmp_path / "traces" / "agent-1.jsonl")
    assert [t.result for t in written] == [r0, r1]
    assert [(t.session_id, t.turn) for t in written] == [("agent-1", 0), ("agent-1", 1)]
    assert rec.last_trace == written[-1] and rec.written == 2


def test_record_a_foreign_build(tmp_path: Path) -> None:
    rec = Recorder(tmp_path, session_id="other", file_name="foreign.jsonl")
    inp = corpus_input()
    cfg = Config(preset="hello-agents")
    same = build(inp, cfg).prompt
    t1 = rec.record(input=inp, config=cfg, prompt=same)
    t2 = rec.record(input=inp, config=cfg, prompt="something the other builder made")
    t3 = rec.record(make_trace(3))
    assert t1 is not None and t2 is not None and t3 is not None
    assert t1.metadata["reproduced"] is True and t1.result is not None
    assert t2.metadata["reproduced"] is False
    assert t2.result is not None and t2.result.prompt == "something the other builder made"
    assert any("differs" in w for w in t2.result.warnings)
    assert read_lines(tmp_path / "foreign.jsonl") == [t1, t2, t3]
    with pytest.raises(TypeError):
        rec.record()


def test_io_failure_warns_and_the_agent_carries_on(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the traces folder should be", encoding="utf-8")
    rec = Recorder(blocker, session_id="s")
    with pytest.warns(RecorderWarning, match="could not record trace .* carries on"):
        result = rec.build(corpus_input(), Config(preset="hello-agents-book"))
    assert result.decisions  # the agent got its context anyway
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert rec.record(make_trace(1)) is None
    assert rec.failures == 2 and rec.written == 0


def test_redaction_on_capture(tmp_path: Path) -> None:
    secret = "sk-proj-" + "Ab3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9fG1hJ3"
    t = make_trace(1)
    pkts = list(t.input.packets)
    pkts[1] = pkts[1].model_copy(update={"content": f"export OPENAI_API_KEY={secret}"})
    t = t.model_copy(update={"input": t.input.model_copy(update={"packets": pkts})})
    rec = Recorder(tmp_path, session_id="r", redact=True)
    out = rec.record(t)
    text = (tmp_path / "r.jsonl").read_text(encoding="utf-8")
    assert secret not in text
    assert out is not None and sum(out.redactions.values()) >= 1


WRITER = """
import sys
sys.path.insert(0, {tests!r})
from helpers_store import make_trace
from ctxcore.capture.recorder import Recorder
wid, n, big = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rec = Recorder({dir!r}, session_id=f"w{{wid}}", file_name="shared.jsonl")
for i in range(n):
    rec.record(make_trace(wid * 10000 + i, n_packets=big))
assert rec.failures == 0
"""


@pytest.mark.slow
def test_concurrent_processes_never_tear_lines(tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(tests=str(ROOT / "tests"), dir=str(tmp_path)), "utf-8")
    # 60 packets make lines of ~30 KB, far above PIPE_BUF (4 KB).
    procs = [
        subprocess.Popen([sys.executable, str(script), str(w), "25", "60"], cwd=ROOT)
        for w in range(4)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    raw = (tmp_path / "shared.jsonl").read_bytes().split(b"\n")
    assert raw[-1] == b""
    ids = [json.loads(line)["trace_id"] for line in raw[:-1]]
    assert len(ids) == 100 and len(set(ids)) == 100
    with TraceStore(tmp_path / "c.duckdb") as store:
        c = ingest_paths(store, [tmp_path / "shared.jsonl"])
        assert (c.traces_added, c.errors) == (100, 0)


@pytest.mark.parametrize(
    "session_id", ["../x", "../../etc/passwd", "/abs/olute", "a/b", ".hidden", ".."]
)
def test_session_ids_never_leave_the_traces_folder(tmp_path: Path, session_id: str) -> None:
    folder = tmp_path / "traces"
    rec = Recorder(folder, session_id=session_id)
    assert rec.path.parent == folder
    assert not rec.path.name.startswith(".")
    rec.build(
        CapturedInput(query="q", now=datetime(2026, 1, 1, tzinfo=UTC), packets=[]),
        {"preset": "hello-agents"},
    )
    written = [p for p in tmp_path.rglob("*.jsonl")]
    assert written == [rec.path]
    # the trace keeps the session id it was given; only the file name is made safe
    assert json.loads(rec.path.read_text().splitlines()[0])["session_id"] == session_id


def test_two_unsafe_ids_that_clean_alike_get_two_files(tmp_path: Path) -> None:
    a, b = Recorder(tmp_path, session_id="a/b"), Recorder(tmp_path, session_id="a:b")
    assert a.path != b.path


@pytest.mark.parametrize("file_name", ["../escape.jsonl", "sub/dir.jsonl", ".."])
def test_a_file_name_with_a_path_is_refused(tmp_path: Path, file_name: str) -> None:
    with pytest.raises(InputError, match="plain file name"):
        Recorder(tmp_path, session_id="s", file_name=file_name)


def test_a_recorded_session_is_redacted_as_redact_trace_does_reading_each_text_once(
    tmp_path: Path,
) -> None:
    """``Recorder(redact=True)`` over a session whose calls repeat their history, a secret
    in the first message: every line is ``redact_trace``'s, and the rules read a text
    once, not once a call."""
    from test_redact_memo import rule_reads

    from ctxcore.formats.redact import redact_trace
    from ctxcore.models import Message

    secret = "sk-proj-" + "Ab3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9fG1hJ3"
    history = [Message(role="user", content=f"the key is OPENAI_API_KEY={secret}")]
    traces = []
    for i in range(6):
        history = [*history, Message(role="assistant", content=f"answer {i}: the password rule")]
        t = make_trace(i)
        traces.append(
            t.model_copy(update={"input": t.input.model_copy(update={"history": history})})
        )
    rec = Recorder(tmp_path, session_id="r", redact=True)
    with pytest.MonkeyPatch.context() as mp:
        reads = rule_reads(mp)
        for t in traces:
            assert rec.record(t) is not None
    lines = (tmp_path / "r.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines == [redact_trace(t)[0].to_json() for t in traces]
    assert all(secret not in x for x in lines)
    assert reads.count(history[0].content) == 1 and len(reads) == len(set(reads))
