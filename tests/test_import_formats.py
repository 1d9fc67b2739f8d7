"""Every request format, on real samples: detected, nothing lost, counts equal the source's.

The samples in ``tests/fixtures/imports/`` come from public repositories (``SOURCES.md``) and
``EXPECTED.json`` holds what each holds, counted by hand from the file, not by our code. For
each request fixture of a supported format: auto-detection names the format, the counts that
``ctxscope import`` prints for the source equal the hand counts, the same counts are read back
from the trace (nothing dropped on the way), and no ``import_loss`` finding fires. Then a block
of a type no importer knows is planted in each sample: it is kept as text and reported.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ctxcore.diagnostics import diagnose
from ctxcore.formats.accounting import imported_counts
from ctxcore.formats.load import detect_format, load_file, traces_from_value
from ctxcore.models import Trace

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "imports"
EXPECTED: dict[str, dict[str, Any]] = json.loads((FIXTURES / "EXPECTED.json").read_text())["files"]

UNKNOWN = {"type": "martian_block", "payload": {"secret_sauce": 42}}


def _plant_anthropic(req: dict[str, Any]) -> str:
    msg = req["messages"][-1]
    if isinstance(msg["content"], str):
        msg["content"] = [{"type": "text", "text": msg["content"]}]
    msg["content"].append(copy.deepcopy(UNKNOWN))
    return f"messages[{len(req['messages']) - 1}].content[{len(msg['content']) - 1}]"


def _plant_openai(req: dict[str, Any]) -> str:
    k = next(
        i for i in range(len(req["messages"]) - 1, -1, -1) if req["messages"][i]["role"] == "user"
    )
    msg = req["messages"][k]
    if isinstance(msg.get("content"), str):
        msg["content"] = [{"type": "text", "text": msg["content"]}]
    msg["content"].append(copy.deepcopy(UNKNOWN))
    return f"messages[{k}].content[{len(msg['content']) - 1}]"


def _plant_responses(req: dict[str, Any]) -> str:
    k = max(i for i, item in enumerate(req["input"]) if item.get("role") == "user")
    item = req["input"][k]
    if isinstance(item["content"], str):
        item["content"] = [{"type": "input_text", "text": item["content"]}]
    item["content"].append(copy.deepcopy(UNKNOWN))
    return f"input[{k}].content[{len(item['content']) - 1}]"


def _plant_gemini(req: dict[str, Any]) -> str:
    k = max(
        i
        for i, c in enumerate(req["contents"])
        if c.get("role", "user") == "user" and any("text" in p for p in c["parts"])
    )
    parts = req["contents"][k]["parts"]
    parts.append(copy.deepcopy(UNKNOWN))
    return f"contents[{k}].parts[{len(parts) - 1}]"


def _plant_bedrock(req: dict[str, Any]) -> str:
    k = max(
        i
        for i, m in enumerate(req["messages"])
        if m["role"] == "user" and not all("toolResult" in b for b in m["content"])
    )
    content = req["messages"][k]["content"]
    content.append(copy.deepcopy(UNKNOWN))
    return f"messages[{k}].content[{len(content) - 1}]"


def _plant_langchain(state: dict[str, Any]) -> str:
    k = max(i for i, m in enumerate(state["messages"]) if m["id"][-1].startswith("HumanMessage"))
    kwargs = state["messages"][k]["kwargs"]
    if isinstance(kwargs["content"], str):
        kwargs["content"] = [{"type": "text", "text": kwargs["content"]}]
    kwargs["content"].append(copy.deepcopy(UNKNOWN))
    return f"messages[{k}].content[{len(kwargs['content']) - 1}]"


def _plant_otlp_attributes(attrs: dict[str, Any]) -> str:
    key = "gen_ai.input.messages" if "gen_ai.input.messages" in attrs else "gen_ai.prompt"
    messages = json.loads(attrs[key])
    k = max(i for i, m in enumerate(messages) if m["role"] == "user")
    messages[k]["parts"].append(copy.deepcopy(UNKNOWN))
    attrs[key] = json.dumps(messages)
    return f"messages[{k}].content[{len(messages[k]['parts']) - 1}]"


#: format directory → (the name detect_format gives, how to plant an unknown block).
#: An importer for a new format adds its row here; its fixtures are then tested like these.
FORMATS: dict[str, tuple[str, Callable[[dict[str, Any]], str]]] = {
    "anthropic-messages": ("anthropic", _plant_anthropic),
    "openai-chat": ("openai", _plant_openai),
    "openai-responses": ("openai-responses", _plant_responses),
    "gemini": ("gemini", _plant_gemini),
    "bedrock-converse": ("bedrock-converse", _plant_bedrock),
    "langchain": ("langchain", _plant_langchain),
    "otlp-traces": ("otlp", _plant_otlp_attributes),
}


def _requests() -> list[str]:
    return sorted(
        name
        for name, exp in EXPECTED.items()
        # a LangGraph state is the request its next model call starts from, a span's
        # attributes the request of the call it records
        if name.split("/")[0] in FORMATS
        and exp.get("kind") in ("request", "state", "span-attributes")
    )


def _expected_counts(exp: dict[str, Any]) -> dict[str, int]:
    counts = {
        "messages": exp["messages"]["total"],
        "system_parts": exp["system_parts"],
        "tool_calls": exp["tool_calls"],
        "tool_results": exp["tool_results"],
        "tools": exp["tool_definitions"],
        "media": exp["images"] + exp["documents"],
    }
    # counted where the source holds some (accounting.OPTIONAL)
    counts.update({k: exp[k] for k in ("thinking", "compactions") if exp.get(k)})
    return counts


def _import_meta(trace: Trace) -> dict[str, Any]:
    meta = trace.metadata["import"]
    assert isinstance(meta, dict)
    return meta


def test_every_supported_format_has_two_real_samples() -> None:
    for fmt in FORMATS:
        assert len([n for n in _requests() if n.startswith(fmt + "/")]) >= 2, fmt


@pytest.mark.parametrize("name", _requests())
def test_a_real_request_imports_whole(name: str) -> None:
    path = FIXTURES / name
    fmt_dir = name.split("/")[0]
    assert detect_format(json.loads(path.read_text())) == FORMATS[fmt_dir][0]
    [trace] = load_file(path)
    expected = _expected_counts(EXPECTED[name])
    assert _import_meta(trace)["source"] == expected
    assert imported_counts(trace) == expected
    assert "kept_as_text" not in _import_meta(trace)
    assert not [f for f in diagnose(trace) if f.detector == "import_loss"]


@pytest.mark.parametrize("name", _requests())
def test_an_unknown_block_is_kept_and_reported(name: str) -> None:
    fmt_dir = name.split("/")[0]
    req = json.loads((FIXTURES / name).read_text())
    path = FORMATS[fmt_dir][1](req)
    [trace] = traces_from_value(req)
    meta = _import_meta(trace)
    assert meta["kept_as_text"] == [f"{path}.type='martian_block'"]
    assert '"secret_sauce": 42' in trace.to_json().replace('\\"', '"')
    [loss] = [f for f in diagnose(trace) if f.detector == "import_loss"]
    assert loss.severity == "warning" and path in loss.message


def test_anthropic_tool_results_become_packets_and_the_query_is_the_users_words() -> None:
    [trace] = load_file(
        FIXTURES / "anthropic-messages/openinference-tool-use-in-input.request.json"
    )
    req = json.loads(
        (FIXTURES / "anthropic-messages/openinference-tool-use-in-input.request.json").read_text()
    )
    tool_use = next(b for b in req["messages"][1]["content"] if b["type"] == "tool_use")
    [packet] = trace.input.packets
    assert packet.id == f"tool:{tool_use['id']}" and packet.kind == "tool_result"
    # the last user message holds only the tool result: the query is the user's own words
    assert trace.input.query == req["messages"][0]["content"]


def test_anthropic_system_blocks_and_cache_marks_are_kept() -> None:
    name = "anthropic-messages/openllmetry-prompt-caching-system-blocks.request.json"
    req = json.loads((FIXTURES / name).read_text())
    [trace] = load_file(FIXTURES / name)
    assert trace.input.system_instructions == "\n\n".join(b["text"] for b in req["system"])
    assert _import_meta(trace)["cache_control"] == ["messages[0].content[0]"]
    assert not [f for f in diagnose(trace) if f.severity == "error"]


@pytest.mark.parametrize("fmt", ["auto", "anthropic"])
def test_a_bare_list_of_anthropic_messages_is_anthropic(fmt: str) -> None:
    # Cline and Roo Code keep a task's conversation (api_conversation_history.json) as the bare
    # list of Anthropic messages they send: tool_use blocks are tool calls, tool_result blocks
    # tool results, not JSON text of an OpenAI chat. No licensed Cline history is public (see
    # SOURCES.md), so the list is the messages of a recorded Anthropic request with a tool round.
    name = "anthropic-messages/openinference-tool-use-in-input.request.json"
    messages = json.loads((FIXTURES / name).read_text())["messages"]
    assert detect_format(messages) == "anthropic"
    [trace] = traces_from_value(messages, fmt)
    assert "kept_as_text" not in _import_meta(trace)
    uses = [b for m in messages if isinstance(m["content"], list) for b in m["content"]]
    calls = [c for m in trace.input.history for c in m.metadata.get("tool_calls") or []]
    assert [c["id"] for c in calls] == [b["id"] for b in uses if b["type"] == "tool_use"]
    results = {p.id: p.content for p in trace.input.packets if p.kind == "tool_result"}
    assert results == {
        f"tool:{b['tool_use_id']}": b["content"] for b in uses if b["type"] == "tool_result"
    }
    assert imported_counts(trace)["tool_calls"] == 1
    assert not [f for f in diagnose(trace) if f.detector == "import_loss"]


def test_pydantic_ai_tool_returns_in_a_user_message_are_tool_results() -> None:
    # pydantic-ai sends a tool's return as a tool_call_response part of a 'user' message,
    # beside the user's own text: a tool result packet, not words of the user
    name = "otlp-traces/pydantic-ai-instrumented-model-tool-returns.attributes.json"
    attrs = json.loads((FIXTURES / name).read_text())
    [user] = [m for m in json.loads(attrs["gen_ai.input.messages"]) if m["role"] == "user"]
    returns = [p for p in user["parts"] if p["type"] == "tool_call_response"]
    words = [p["content"] for p in user["parts"] if p["type"] == "text"]
    [trace] = load_file(FIXTURES / name)
    assert {p.id: p.content for p in trace.input.packets if p.kind == "tool_result"} == {
        f"tool:{p['id']}": p["result"] for p in returns
    }
    assert trace.input.query == "\n".join(words)
    # the reply called two tools: they are in its output, after its text
    [reply] = json.loads(attrs["gen_ai.output.messages"])
    calls = [p for p in reply["parts"] if p["type"] == "tool_call"]
    assert trace.outcome is not None and trace.outcome.output is not None
    args = [
        a if isinstance(a, str) else json.dumps(a, separators=(",", ":"))
        for a in (c["arguments"] for c in calls)
    ]
    assert trace.outcome.output.split("\n")[-len(calls) :] == [
        f"{c['name']}({a})" for c, a in zip(calls, args, strict=True)
    ]


def test_mistral_thinking_chunks_are_reasoning_not_anthropic() -> None:
    # Mistral's thinking chunk holds a list of text chunks (Anthropic's thinking is a
    # string): the request is an OpenAI-style chat, its reasoning the chunks' text
    name = "openai-chat/pydantic-ai-mistral-thinking.request.json"
    req = json.loads((FIXTURES / name).read_text())
    assert detect_format(req) == "openai"
    [thinking] = [c for c in req["messages"][1]["content"] if c["type"] == "thinking"]
    [trace] = load_file(FIXTURES / name)
    [reply] = [m for m in trace.input.history if m.role == "assistant"]
    assert reply.metadata["reasoning"] == "".join(c["text"] for c in thinking["thinking"])
    [text] = [c["text"] for c in req["messages"][1]["content"] if c["type"] == "text"]
    assert reply.content == text
