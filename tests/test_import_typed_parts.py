"""Typed parts on real samples (issue 31 item 2, docs/design.md "Formats").

Calls a provider runs itself (Anthropic ``server_tool_use``/``mcp_tool_use``, Responses
``web_search_call``/``mcp_call``/``code_interpreter_call``) are tool calls with their results
as ``tool:<id>`` packets; MCP servers and ``mcp_list_tools`` are tool definitions; a compaction
is a ``summary`` packet and what it replaced is summarized; reasoning in every provider format
is a ``thinking`` part, an encrypted one by its size with no text. Nothing of these is kept as
JSON text, so ``import_loss`` stays silent, and the counts equal the hand counts of
``EXPECTED.json``. The samples are recorded requests from pydantic-ai's cassettes (SOURCES.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxcore.diagnostics import diagnose
from ctxcore.formats.accounting import describe, imported_counts
from ctxcore.formats.derive import with_window
from ctxcore.formats.load import load_file
from ctxcore.models import Message, Trace

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "imports"
EXPECTED: dict[str, dict[str, Any]] = json.loads((FIXTURES / "EXPECTED.json").read_text())["files"]


def _load(name: str) -> tuple[dict[str, Any], Trace]:
    [trace] = load_file(FIXTURES / name)
    return json.loads((FIXTURES / name).read_text()), trace


def _whole(name: str, trace: Trace) -> None:
    """Counted as the hand counts say, on both sides, nothing kept as text, no import_loss."""
    exp = EXPECTED[name]
    want = {
        "messages": exp["messages"]["total"],
        "system_parts": exp["system_parts"],
        "tool_calls": exp["tool_calls"],
        "tool_results": exp["tool_results"],
        "tools": exp["tool_definitions"],
        "media": exp["images"] + exp["documents"],
    }
    want.update({k: exp[k] for k in ("thinking", "compactions") if exp.get(k)})
    meta = trace.metadata["import"]
    assert meta["source"] == want
    assert imported_counts(trace) == want
    assert "kept_as_text" not in meta
    assert not [f for f in diagnose(trace) if f.detector == "import_loss"]


def _calls(trace: Trace) -> list[dict[str, Any]]:
    msgs = (trace.result.messages if trace.result else None) or []
    return [c for m in msgs for c in m.metadata.get("tool_calls") or []]


def _thinking(trace: Trace) -> list[dict[str, Any]]:
    msgs = (trace.result.messages if trace.result else None) or []
    return [p for m in msgs for p in m.metadata.get("thinking") or []]


SERVER_CALLS = [
    # (fixture, the block type of the call, of its result, the tool's name)
    ("pydantic-ai-web-search-tool", "server_tool_use", "web_search_tool_result", "web_search"),
    ("pydantic-ai-web-fetch-tool", "server_tool_use", "web_fetch_tool_result", "web_fetch"),
    (
        "pydantic-ai-code-execution-container-reuse",
        "server_tool_use",
        "bash_code_execution_tool_result",
        "bash_code_execution",
    ),
    ("pydantic-ai-mcp-servers", "mcp_tool_use", "mcp_tool_result", "ask_question"),
]


@pytest.mark.parametrize(("stem", "call_type", "result_type", "tool"), SERVER_CALLS)
def test_an_anthropic_server_tool_call_is_a_call_and_its_result_a_packet(
    stem: str, call_type: str, result_type: str, tool: str
) -> None:
    name = f"anthropic-messages/{stem}.request.json"
    req, trace = _load(name)
    _whole(name, trace)
    blocks = [b for m in req["messages"] for b in m["content"] if isinstance(b, dict)]
    [use] = [b for b in blocks if b["type"] == call_type]
    [result] = [b for b in blocks if b["type"] == result_type]
    [call] = _calls(trace)
    assert (call["id"], call["name"], call["server_tool"]) == (use["id"], tool, call_type)
    assert json.loads(call["arguments"]) == use["input"]
    [packet] = [p for p in trace.input.packets if p.kind == "tool_result"]
    assert packet.id == f"tool:{result['tool_use_id']}" == f"tool:{use['id']}"
    assert packet.metadata["server_tool"] == result_type
    assert packet.metadata["name"] == tool
    assert packet.content  # the result's words, not an empty placeholder
    assert '"type": "' + result_type not in packet.content  # not its JSON kept as text


def test_search_results_are_titles_and_urls_their_encrypted_pages_only_measured() -> None:
    req, trace = _load("anthropic-messages/pydantic-ai-web-search-tool.request.json")
    [result] = [b for b in req["messages"][1]["content"] if b["type"] == "web_search_tool_result"]
    [packet] = [p for p in trace.input.packets if p.kind == "tool_result"]
    for hit in result["content"]:
        assert f"{hit['title']}\n{hit['url']}" in packet.content
        assert f"encrypted: {len(hit['encrypted_content']):,} chars" in packet.content
        assert hit["encrypted_content"] not in trace.to_json()
    # the text after the result follows it, as in the message
    flat = [m.id for m in (trace.result.messages if trace.result else None) or []]
    assert flat.index("msg-1.2") < flat.index("msg-1.2.text")


def test_mcp_servers_and_calls_name_their_server() -> None:
    req, trace = _load("anthropic-messages/pydantic-ai-mcp-servers.request.json")
    [call] = _calls(trace)
    assert call["mcp_server"] == req["mcp_servers"][0]["name"] == "deepwiki"
    [tool] = trace.input.tools
    assert tool.name == "deepwiki" and tool.parameters["url"] == req["mcp_servers"][0]["url"]


def test_an_anthropic_compaction_summarizes_what_it_replaced() -> None:
    name = "anthropic-messages/pydantic-ai-compaction-round-trip.request.json"
    req, trace = _load(name)
    _whole(name, trace)
    [block] = [b for b in req["messages"][1]["content"] if b["type"] == "compaction"]
    [summary] = [p for p in trace.input.packets if p.kind == "summary"]
    assert summary.id == "compaction:msg-1.0" and summary.content == block["content"]
    assert summary.metadata["compaction"]["replaced"] == 1
    # the user's first message: summarized, out of the input and of the prompt
    assert trace.result is not None
    [gone] = [d for d in trace.result.decisions if d.status.value == "summarized"]
    assert (gone.packet_id, gone.reason.value, gone.tokens_after) == ("msg-0", "DEGRADED", 0)
    assert gone.tokens_before > 0 and "compaction:msg-1.0" in gone.reason_text
    assert [m.id for m in trace.input.history] == ["msg-1"]
    first = req["messages"][0]["content"][0]["text"]
    assert f"[user]\n{first}" not in trace.result.prompt
    assert block["content"] in trace.result.prompt
    # re-derived with another window, the compaction's decision stays
    again = with_window(trace, window=100_000)
    assert again.result is not None
    assert [d.packet_id for d in again.result.decisions if d.status.value == "summarized"] == [
        "msg-0"
    ]
    assert imported_counts(again) == imported_counts(trace)


def test_a_responses_compaction_is_a_summary_of_its_encrypted_size() -> None:
    name = "openai-responses/pydantic-ai-compact-messages.request.json"
    req, trace = _load(name)
    _whole(name, trace)
    [item] = [it for it in req["input"] if it.get("type") == "compaction"]
    [summary] = [p for p in trace.input.packets if p.kind == "summary"]
    assert summary.content == ""
    assert summary.metadata["compaction"]["encrypted_chars"] == len(item["encrypted_content"])
    assert item["encrypted_content"] not in trace.to_json()
    assert trace.result is not None
    assert not [d for d in trace.result.decisions if d.status.value == "summarized"]
    assert any("1 compactions" in line for line in describe([trace]))


RESPONSES_CALLS = [
    ("pydantic-ai-web-search-tool", "web_search_call", "web_search"),
    ("pydantic-ai-mcp-server-tool", "mcp_call", "ask_question"),
    ("pydantic-ai-code-interpreter", "code_interpreter_call", "code_interpreter"),
]


@pytest.mark.parametrize(("stem", "itype", "tool"), RESPONSES_CALLS)
def test_a_responses_built_in_call_is_a_call_and_its_outcome_a_result(
    stem: str, itype: str, tool: str
) -> None:
    name = f"openai-responses/{stem}.request.json"
    req, trace = _load(name)
    _whole(name, trace)
    [item] = [it for it in req["input"] if it.get("type") == itype]
    [call] = _calls(trace)
    assert (call["id"], call["name"], call["server_tool"]) == (item["id"], tool, itype)
    [packet] = [p for p in trace.input.packets if p.kind == "tool_result"]
    assert packet.id == f"tool:{item['id']}"
    assert packet.metadata["server_tool"] == itype
    if itype == "mcp_call":
        assert call["mcp_server"] == packet.metadata["mcp_server"] == item["server_label"]
        assert json.loads(call["arguments"]) == json.loads(item["arguments"])
    if itype == "code_interpreter_call":
        assert json.loads(call["arguments"])["code"] == item["code"]
        # sent back without its outputs: the result says so rather than make them up
        assert item["outputs"] is None
        assert (
            packet.content
            == "[code_interpreter_call completed: its results are not in the request]"
        )


def test_mcp_list_tools_is_read_as_tool_definitions_not_text() -> None:
    req, trace = _load("openai-responses/pydantic-ai-mcp-server-tool.request.json")
    [listing] = [it for it in req["input"] if it.get("type") == "mcp_list_tools"]
    # the recorded listing is empty (pydantic-ai sends it back so): it adds no definition
    # and leaves no text behind; the mcp tool itself is the request's one definition
    assert listing["tools"] == []
    assert [t.name for t in trace.input.tools] == [listing["server_label"]]
    assert listing["id"] not in trace.to_json()


THINKING = [
    # (fixture, the part types its reasoning becomes)
    ("anthropic-messages/pydantic-ai-web-search-tool.request.json", ["thinking"]),
    ("anthropic-messages/pydantic-ai-thinking-redacted.request.json", ["redacted_thinking"]),
    ("openai-responses/pydantic-ai-web-search-tool.request.json", ["reasoning", "reasoning"]),
    ("openai-responses/openinference-litellm-reasoning-item.request.json", ["reasoning"]),
    ("gemini/pydantic-ai-thinking-part.request.json", ["thought", "thoughtSignature"]),
    ("bedrock-converse/pydantic-ai-thinking-anthropic.request.json", ["reasoningText"]),
    ("bedrock-converse/pydantic-ai-thinking-redacted.request.json", ["redactedContent"]),
    ("openai-chat/pydantic-ai-deepseek-thinking-tools.request.json", ["reasoning_content"]),
    ("openai-chat/pydantic-ai-mistral-thinking.request.json", ["thinking"]),
]


def _encrypted(value: Any) -> list[str]:
    """Every encrypted reasoning payload a request holds, where each format keeps it:
    Anthropic ``redacted_thinking.data``, a Responses reasoning item's
    ``encrypted_content``, Bedrock ``redactedContent``, Gemini ``thoughtSignature``."""
    if isinstance(value, list):
        return [x for v in value for x in _encrypted(v)]
    if not isinstance(value, dict):
        return []
    kind = value.get("type")
    own = [value.get("thoughtSignature"), value.get("redactedContent")]
    if kind == "redacted_thinking":
        own.append(value.get("data"))
    if kind == "reasoning":
        own.append(value.get("encrypted_content"))
    return [x for x in own if isinstance(x, str)] + [
        x for v in value.values() for x in _encrypted(v)
    ]


@pytest.mark.parametrize(("name", "types"), THINKING)
def test_reasoning_is_a_thinking_part_in_every_format(name: str, types: list[str]) -> None:
    req, trace = _load(name)
    _whole(name, trace)
    parts = _thinking(trace)
    assert [p["type"] for p in parts] == types
    sealed = [p for p in parts if "encrypted_chars" in p]
    payloads = _encrypted(req)
    assert sorted(p["encrypted_chars"] for p in sealed) == sorted(len(x) for x in payloads)
    for p in parts:
        assert "text" not in p  # a part says what and how big; readable text is `reasoning`
    readable = [p for p in parts if "chars" in p and p["chars"]]
    history: list[Message] = list(trace.input.history)
    said = "".join(m.metadata.get("reasoning", "") for m in history)
    assert sum(p["chars"] for p in readable) <= len(said) + len(readable)
    for secret in payloads:
        assert secret not in trace.to_json()
