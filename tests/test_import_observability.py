"""Exports of observability tools, on real samples: Langfuse traces, LiteLLM logging payloads,
OpenAI Agents SDK trace exports (docs/design.md, "Formats").

The samples in ``tests/fixtures/imports/{langfuse,litellm,openai-agents}`` come from public
repositories (``SOURCES.md``); ``EXPECTED.json`` holds their hand counts. Each file goes
through the import path (``formats.load`` and ``ctxscope import``): one trace per model call,
the counts the import records for each call equal the hand counts and what reached the
trace, usage and time as the file says, tool calls and results structured, no
``import_loss``. A broken record is its own error, the rest imported; an Agents SDK export
whose spans carry no input is refused in one line naming what to turn on.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from test_import_sessions import EXPECTED, FIXTURES, LOSS_ONLY

from ctxcore.cli import main
from ctxcore.diagnostics import diagnose
from ctxcore.errors import ImportFormatError
from ctxcore.formats import langfuse, openai_agents
from ctxcore.formats.accounting import imported_counts
from ctxcore.formats.load import detect_format, load_file, traces_from_value
from ctxcore.models import Trace

LANGFUSE = sorted(n for n in EXPECTED if n.startswith("langfuse/"))
LITELLM = sorted(n for n in EXPECTED if n.startswith("litellm/"))
AGENTS = sorted(n for n in EXPECTED if n.startswith("openai-agents/"))


def _json(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def _counts(exp: dict[str, Any]) -> dict[str, int]:
    """A hand-counted call as the import's ``source`` counts."""
    return {
        "messages": exp["messages"]["total"],
        "system_parts": exp["system_parts"],
        "tool_calls": exp["tool_calls"],
        "tool_results": exp["tool_results"],
        "tools": exp["tool_definitions"],
        "media": exp["images"] + exp["documents"],
    }


def _whole(t: Trace) -> None:
    """Nothing lost on the way: the source's counts reached the trace, no part kept as text,
    no import_loss, and the decisions (counted with the real tokenizer) add up."""
    meta = t.metadata["import"]
    assert meta["source"] == imported_counts(t)
    assert "kept_as_text" not in meta and "skipped" not in meta
    assert not diagnose(t, options=LOSS_ONLY)
    assert t.result is not None
    assert sum(d.tokens_after for d in t.result.decisions) == t.result.totals.used
    assert sum(p.used for p in t.result.partitions) == t.result.totals.used


def _calls_of(t: Trace) -> list[dict[str, Any]]:
    assert t.result is not None
    return [c for m in t.result.messages or [] for c in m.metadata.get("tool_calls") or []]


# --------------------------------------------------------------------------- Langfuse


@pytest.mark.parametrize("name", LANGFUSE)
def test_langfuse_one_trace_per_generation_with_the_hand_counts(name: str) -> None:
    exp = EXPECTED[name]
    data = _json(name)
    assert detect_format(data) == "langfuse"
    traces = load_file(FIXTURES / name)
    assert len(traces) == exp["model_calls"] == len(exp["per_call"])
    assert {t.session_id for t in traces} == {exp["session"]}
    assert [t.turn for t in traces] == list(range(len(traces)))
    generations = sorted(
        (o for o in data["observations"] if o["type"] == "GENERATION"),
        key=lambda o: o["startTime"],
    )
    for t, call, obs in zip(traces, exp["per_call"], generations, strict=True):
        assert t.metadata["import"]["format"] == "langfuse"
        assert t.metadata["import"]["source"] == _counts(call)
        _whole(t)
        # the usage and the time as Langfuse recorded them
        mapped = {langfuse.USAGE_KEYS.get(k, k): v for k, v in call["usage"].items()}
        assert t.outcome is not None and t.outcome.usage == mapped
        assert t.created_at.isoformat().replace("+00:00", "Z")[:23] == obs["startTime"][:23]
        assert t.metadata["model"] == obs["model"]
        assert t.metadata["langfuse"]["observation_id"] == obs["id"]
        # each tool result a structured packet answering a call of the history
        results = [p for p in t.input.packets if p.kind == "tool_result"]
        assert len(results) == call["tool_results"]
        calls = {c["id"] for c in _calls_of(t)}
        assert len(calls) == call["tool_calls"]
        if calls:
            assert {p.metadata["tool_call_id"] for p in results} == calls
        # the reply's tool calls are its output's name(args) lines
        lines = (t.outcome.output or "").split("\n")
        made = [x for x in lines if x.split("(", 1)[0].isidentifier() and x.endswith(")")]
        assert len(made) == call["output_tool_calls"]
    total = {k: sum(t.outcome.usage[k] for t in traces if t.outcome) for k in exp["usage"]}
    assert total == exp["usage"]


def test_langfuse_tool_returns_in_a_user_message_are_tool_results() -> None:
    # pydantic-ai sends its tool returns as tool_call_response parts of a user message
    name = "langfuse/pydantic-ai-tools-2025-12-04.trace.json"
    data = _json(name)
    second = sorted(
        (o for o in data["observations"] if o["type"] == "GENERATION"),
        key=lambda o: o["startTime"],
    )[1]
    raw = second["input"]  # Langfuse keeps it as JSON text or as the value
    messages = json.loads(raw) if isinstance(raw, str) else raw
    returns = {
        p["id"]: p
        for m in messages
        if m["role"] == "user"
        for p in m["parts"]
        if p["type"] == "tool_call_response"
    }
    t = load_file(FIXTURES / name)[1]
    packets = {p.id: p for p in t.input.packets if p.kind == "tool_result"}
    assert set(packets) == {f"tool:{i}" for i in returns}
    assert t.input.query == messages[1]["parts"][0]["content"]  # the user's words only
    assert t.input.system_instructions == messages[0]["parts"][0]["content"]


def test_langfuse_a_broken_observation_is_its_error_and_the_rest_imported() -> None:
    name = "langfuse/pydantic-ai-tools-2025-12-04.trace.json"
    data = _json(name)
    broken = copy.deepcopy(data)
    k = next(i for i, o in enumerate(broken["observations"]) if o["type"] == "GENERATION")
    broken["observations"][k]["input"] = 42
    traces = traces_from_value(broken, where="lf.json")
    assert len(traces) == EXPECTED[name]["model_calls"] - 1
    [error] = traces[0].metadata["import"]["skipped"]
    obs = broken["observations"][k]
    assert error.startswith(f"lf.json: observations[{k}] ({obs['name']}): input: expected")
    # no generation at all: one line saying what the file holds
    spans_only = {
        **data,
        "observations": [o for o in data["observations"] if o["type"] != "GENERATION"],
    }
    with pytest.raises(ImportFormatError) as info:
        traces_from_value(spans_only, where="lf.json")
    assert str(info.value) == (
        "lf.json: no GENERATION observation, so no model call to import "
        "(the file holds 5 SPAN, 3 TOOL)"
    )


def test_import_prints_each_langfuse_call_against_what_reached_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "langfuse/microsoft-agent-2025-12-17.trace.json"
    out = tmp_path / "out.jsonl"
    assert main(["import", str(FIXTURES / name), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    session = EXPECTED[name]["session"]
    assert f"{session} turn 1 (langfuse): 1 messages, 1 tool results" in printed
    assert len(load_file(out, "trace")) == EXPECTED[name]["model_calls"]


# --------------------------------------------------------------------------- LiteLLM


@pytest.mark.parametrize("name", LITELLM)
def test_litellm_payload_is_one_call_with_its_usage_cost_and_time(name: str) -> None:
    exp = EXPECTED[name]
    payload = _json(name)
    assert detect_format(payload) == "litellm"
    [t] = load_file(FIXTURES / name)
    assert t.metadata["import"]["format"] == "litellm"
    assert t.metadata["import"]["source"] == _counts(exp)
    _whole(t)
    assert t.session_id == (exp["session"] or (FIXTURES / name).name.split(".")[0])
    assert t.metadata["model"] == exp["model"]
    assert t.metadata["litellm"]["response_cost"] == exp["response_cost"]
    assert t.metadata["litellm"]["id"] == payload["id"]
    usage = payload["response"]["usage"]
    assert t.outcome is not None
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert t.outcome.usage[key] == usage[key]
    assert t.outcome.usage["prompt_tokens"] == exp["usage"]["input_tokens"]
    assert t.outcome.output == payload["response"]["choices"][0]["message"]["content"]
    assert t.input.query == payload["messages"][-1]["content"]
    started = exp["started"]
    if isinstance(started, float):
        assert t.created_at.timestamp() == pytest.approx(started)
    else:
        assert t.created_at.isoformat().startswith(started.replace(" ", "T"))


def test_litellm_jsonl_a_broken_line_is_its_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "payloads.jsonl"
    rows = [json.dumps(_json(n)) for n in LITELLM]
    bad = dict(_json(LITELLM[0]), messages={"role": "user"})
    path.write_text("\n".join([rows[0], json.dumps(bad), rows[1]]) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert main(["import", str(path), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:2: messages: expected a list of chat messages or a prompt, got dict" in err
    assert sorted(t.metadata["litellm"]["id"] for t in load_file(out, "trace")) == sorted(
        _json(n)["id"] for n in LITELLM
    )


# --------------------------------------------------------------------------- Agents SDK


@pytest.mark.parametrize("name", AGENTS)
def test_agents_sdk_export_without_inputs_is_refused_naming_what_to_turn_on(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = EXPECTED[name]
    data = _json(name)
    assert detect_format(data) == "openai-agents"
    items = data["data"]
    assert len(items) == exp["objects"]
    with pytest.raises(ImportFormatError) as info:
        load_file(FIXTURES / name)
    said = str(info.value)
    assert "\n" not in said
    assert f"none of its {exp['model_calls']} model-call span(s) carries its input" in said
    assert "trace_include_sensitive_data=True" in said and "RunConfig" in said
    assert main(["import", str(FIXTURES / name), "-o", str(tmp_path / "o.jsonl")]) != 0
    assert "trace_include_sensitive_data" in capsys.readouterr().err


def test_agents_sdk_a_response_span_that_carries_its_input_is_a_call() -> None:
    # What a TracingProcessor that keeps ResponseSpanData.input writes: the batch the SDK
    # exported for this run, its response span holding the items the same run's Responses
    # request sent (both recorded in one OpenLLMetry cassette)
    batch = _json("openai-agents/openllmetry-tool-call-and-result.ingest.json")
    request = _json("openai-responses/openllmetry-agents-function-call.request.json")
    span = next(x for x in batch["data"] if x.get("span_data", {}).get("type") == "response")
    span["span_data"]["input"] = request["input"]
    [t] = traces_from_value(batch, where="batch.json")
    assert t.metadata["import"]["format"] == "openai-agents"
    assert t.metadata["openai_agents"]["response_id"] == span["span_data"]["response_id"]
    assert t.session_id == batch["data"][0]["id"]  # the trace's id: its group_id is null
    calls = [i for i in request["input"] if i.get("type") == "function_call"]
    outputs = [i for i in request["input"] if i.get("type") == "function_call_output"]
    assert [c["id"] for c in _calls_of(t)] == [c["call_id"] for c in calls]
    assert {p.id for p in t.input.packets if p.kind == "tool_result"} == {
        f"tool:{o['call_id']}" for o in outputs
    }
    _whole(t)
    # a generation span without input beside it is not imported, and not an error
    gen = {**span, "id": "span_gen", "span_data": {"type": "generation", "input": None}}
    batch["data"].append(gen)
    assert len(traces_from_value(batch)) == 1
    assert openai_agents.refusal([gen]).startswith("none of its 1 model-call span(s)")


# --------------------------------------------------------------------------- unknown parts

UNKNOWN = {"type": "martian_block", "payload": {"secret_sauce": 42}}


def _plant_langfuse(data: dict[str, Any]) -> str:
    gen = next(o for o in data["observations"] if o["type"] == "GENERATION")
    raw = gen["input"]
    messages = json.loads(raw) if isinstance(raw, str) else raw
    k = max(i for i, m in enumerate(messages) if m["role"] == "user")
    messages[k]["parts"].append(copy.deepcopy(UNKNOWN))
    gen["input"] = json.dumps(messages)
    return f"messages[{k}].content[{len(messages[k]['parts']) - 1}]"


def _plant_litellm(payload: dict[str, Any]) -> str:
    message = payload["messages"][-1]
    message["content"] = [{"type": "text", "text": message["content"]}, copy.deepcopy(UNKNOWN)]
    return f"messages[{len(payload['messages']) - 1}].content[1]"


@pytest.mark.parametrize(
    ("name", "plant"),
    [
        ("langfuse/microsoft-agent-2025-12-17.trace.json", _plant_langfuse),
        ("litellm/gcs-pubsub-standard-logging-payload.json", _plant_litellm),
    ],
)
def test_an_unknown_part_is_kept_as_text_and_reported(name: str, plant: Any) -> None:
    data = _json(name)
    path = plant(data)
    t = traces_from_value(data)[0]
    meta = t.metadata["import"]
    assert meta["kept_as_text"] == [f"{path}.type='martian_block'"]
    assert '"secret_sauce": 42' in t.to_json().replace('\\"', '"')
    [loss] = [f for f in diagnose(t) if f.detector == "import_loss"]
    assert loss.severity == "warning" and path in loss.message
