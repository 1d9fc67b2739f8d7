"""The hello-agents capture adapter, driven by the real package inside the oracle venv.

A small driver (written to tmp_path) runs in the oracle venv with ctxcore on PYTHONPATH:
it wraps a real ``ContextBuilder``, builds a few contexts the way an agent would, and
prints the prompts the package returned. The test then reads the JSONL the adapter wrote
(with our models) and checks each trace reproduced the real prompt byte for byte — and
that a customised builder our preset cannot match is recorded as not reproduced, with the
real prompt kept.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from ctxcore.errors import InputError
from ctxcore.models import Status, Trace
from ctxcore.tokens import seed_tiktoken_cache

ROOT = Path(__file__).resolve().parent.parent
ORACLE = Path(os.environ.get("CTXSCOPE_ORACLE_PYTHON", ROOT / ".oracle-venv" / "bin" / "python"))

DRIVER = textwrap.dedent(
    """
    import json, sys
    from datetime import datetime, timedelta
    from hello_agents.context.builder import ContextBuilder, ContextConfig, ContextPacket
    from hello_agents.core.message import Message
    from ctxcore.capture.hello_agents import wrap

    out_dir = sys.argv[1]
    prompts = []
    now = datetime.now()

    b = wrap(ContextBuilder(config=ContextConfig(max_tokens=600)), out_dir, session_id="drv")
    history = [
        Message(f"turn {i}: the flaky test fails on CI again",
                "user" if i % 2 == 0 else "assistant",
                timestamp=now - timedelta(minutes=30 - i))
        for i in range(14)
    ]
    packets = [
        ContextPacket(content="FAILED tests/test_io.py::test_flaky - TimeoutError after 30s",
                      timestamp=now - timedelta(minutes=3), metadata={"type": "tool_result"}),
        ContextPacket(content="the flaky test uses a real network socket",
                      metadata={"type": "retrieval", "id": "rag:socket"}, relevance_score=0.9),
        ContextPacket(content="a note the package never renders about the flaky test",
                      metadata={"type": "note"}),
        ContextPacket(content="the marker <|endoftext|> appears in the flaky test fixture",
                      metadata={"type": "tool_result"}),
        ContextPacket(content="Step 3: make the flaky test deterministic",
                      timestamp=now - timedelta(days=2), metadata={"type": "task_state"}),
    ]
    prompts.append(b.build("why does the flaky test fail", history,
                           "You are a careful engineer.", packets))
    prompts.append(b.build("", None, None, None))
    long = [ContextPacket(content="\\n".join(f"line {j}: flaky test log output" for j in range(60)),
                          metadata={"type": "tool_result"}, token_count=5)]
    prompts.append(b.build("flaky test log", None, "Be brief.", long))

    class Custom(ContextBuilder):
        def _structure(self, selected_packets, user_query, system_instructions):
            text = super()._structure(selected_packets, user_query, system_instructions)
            return "CUSTOM\\n" + text

    c = wrap(Custom(), out_dir, session_id="custom")
    prompts.append(c.build("anything", None, "Rules.", None))

    class Memory:  # stands in for MemoryTool (which needs an embedding model here)
        def execute(self, action, query, limit, min_importance=None):
            if min_importance is not None:
                return "任务状态: flaky test step 2 of 3 done; blocker: socket timeout"
            return "related: the flaky test opened a real socket last week"

    m = wrap(ContextBuilder(memory_tool=Memory()), out_dir, session_id="memory")
    prompts.append(m.build("flaky test socket", None, "Rules.", None))

    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        broken = wrap(ContextBuilder(), "/dev/null/not-a-dir", session_id="broken")
        prompts.append(broken.build("still answers", None, None, None))
    prompts.append([str(w.message) for w in caught])
    print(json.dumps(prompts, ensure_ascii=False))
    """
)


Driven = tuple[list[Any], list[Trace]]


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Driven:
    """Run the driver once in the oracle venv; its prompts and the traces it wrote."""
    return _run_driver(tmp_path_factory.mktemp("adapter"))


def _run_driver(tmp_path: Path) -> tuple[list[Any], list[Trace]]:
    if not ORACLE.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"the hello-agents oracle venv is missing ({ORACLE}); run `make oracle`")
        pytest.skip(f"oracle venv not found at {ORACLE} (run `make oracle`)")
    script = tmp_path / "driver.py"
    script.write_text(DRIVER, "utf-8")
    out_dir = tmp_path / "traces"
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PYTHONPATH"] = str(ROOT)
    env["TIKTOKEN_CACHE_DIR"] = seed_tiktoken_cache(str(tmp_path / "tiktoken-oracle"))
    proc = subprocess.run(
        [str(ORACLE), str(script), str(out_dir)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    prompts = json.loads(proc.stdout.strip().splitlines()[-1])
    lines = (out_dir / "hello-agents.jsonl").read_text("utf-8").splitlines()
    traces = [Trace.model_validate_json(line) for line in lines]
    return prompts, traces


@pytest.mark.slow
def test_adapter_records_traces_that_reproduce_the_real_prompt(
    driver: tuple[list[Any], list[Trace]],
) -> None:
    prompts, traces = driver
    assert len(traces) == 5 and len(prompts) == 7
    plain = [t for t in traces if t.session_id == "drv"]
    assert [t.turn for t in plain] == [0, 1, 2]
    for t, prompt in zip(plain, prompts[:3], strict=True):
        assert t.metadata["reproduced"] is True, t.metadata
        assert "real_prompt" not in t.metadata
        assert t.result is not None and t.result.prompt == prompt
        assert t.config.preset == "hello-agents"
        assert (t.builder.name, t.builder.version) == ("hello-agents", "0.2.8")
        assert t.metadata["reconstructed_by"] == "ctxcore/hello-agents"
    first = plain[0]
    assert first.config.max_tokens == 600
    assert first.input.query == "why does the flaky test fail"
    assert len(first.input.history) == 14 and first.input.now.tzinfo is not None
    assert first.result is not None
    d = {x.packet_id: x for x in first.result.decisions}
    # The caller's 0.9 was captured before the package overwrote it, and the quirk is noted.
    assert first.input.packets[1].relevance == 0.9
    assert any("overwritten" in n for n in d["rag:socket"].notes)
    assert d["packet:2"].status == Status.NOT_RENDERED
    assert sum(1 for x in first.result.decisions if x.reason == "HISTORY_LIMIT") == 4
    # The compressing build: the package cut lines, so did we, identically.
    third = plain[2]
    assert third.result is not None
    assert any("context over budget" in w for w in third.result.warnings)
    assert third.result.prompt == prompts[2]
    # Only a caller-supplied count is kept as such, and the preset flags it.
    assert [p.tokens for p in first.input.packets] == [None] * 5
    assert third.input.packets[0].tokens == 5
    (long,) = [x for x in third.result.decisions if x.packet_id == "packet:0"]
    assert any("5 tokens given by the caller" in n and "content counts" in n for n in long.notes)


@pytest.mark.slow
def test_adapter_flags_a_prompt_it_cannot_reproduce_and_keeps_it(
    driver: tuple[list[Any], list[Trace]],
) -> None:
    prompts, traces = driver
    custom = [t for t in traces if t.session_id == "custom"]
    assert len(custom) == 1
    t = custom[0]
    assert t.metadata["reproduced"] is False
    assert t.metadata["real_prompt"] == prompts[3]
    assert prompts[3].startswith("CUSTOM\n")
    assert t.result is not None and not t.result.prompt.startswith("CUSTOM")
    assert any("did not reproduce" in w for w in t.result.warnings)


@pytest.mark.slow
def test_adapter_captures_memory_tool_packets_and_never_breaks_the_agent(
    driver: tuple[list[Any], list[Trace]],
) -> None:
    prompts, traces = driver
    (mem,) = [t for t in traces if t.session_id == "memory"]
    assert mem.metadata["reproduced"] is True and mem.metadata["tool_packets"] == 2
    assert [p.kind for p in mem.input.packets] == ["task_state", "related_memory"]
    assert "[State]" in prompts[4] and "任务状态" in prompts[4]
    # An unwritable traces folder: the prompt still comes back, with a warning.
    assert prompts[5].startswith("[Task]\n用户问题：still answers")
    assert any("could not record" in w for w in prompts[6])
    assert not [t for t in traces if t.session_id == "broken"]


def test_ctxcore_imports_the_adapter_without_hello_agents() -> None:
    code = (
        "import sys, ctxcore.capture.hello_agents as a; "
        "assert 'hello_agents' not in sys.modules; print(a.wrap.__name__)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "wrap"


def test_wrap_rejects_something_that_is_not_a_builder(tmp_path: Path) -> None:
    from ctxcore.capture.hello_agents import wrap

    with pytest.raises(InputError, match="ContextBuilder"):
        wrap(object(), tmp_path)
