"""What each request format has that the generic fixture tests do not check.

``test_import_formats.py`` checks every real request sample for detection, counts and loss.
These tests pin what is special to one format, on the same real samples (changed only where
a test needs a field the sample lacks): Responses reasoning items and ``function_call_output``
ids, Gemini responses matched to their calls by name, Bedrock ``toolResult`` JSON content, and
LangChain's serialized message shapes.
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

from ctxcore.formats.accounting import imported_counts
from ctxcore.formats.load import detect_format, load_file, traces_from_value
from ctxcore.models import Trace

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "imports"
EXPECTED: dict[str, dict[str, Any]] = json.loads((FIXTURES / "EXPECTED.json").read_text())["files"]


def _load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def _one(data: Any) -> Trace:
    [trace] = traces_from_value(data)
    return trace


def _pair(stem: str) -> dict[str, Any]:
    return {"request": _load(f"{stem}.request.json"), "response": _load(f"{stem}.response.json")}


def _message(trace: Trace, mid: str) -> Any:
    assert trace.result is not None
    return next(m for m in trace.result.messages if m.id == mid)


# --------------------------------------------------------------------------- responses


def test_responses_reasoning_item_is_the_next_turns_metadata_not_context() -> None:
    name = "openai-responses/openinference-litellm-reasoning-item.request.json"
    req = _load(name)
    [trace] = load_file(FIXTURES / name)
    summary = req["input"][0]["summary"][0]["text"]
    answer = _message(trace, "msg-1")
    assert answer.role == "assistant" and answer.content == "4"
    assert answer.metadata["reasoning"] == summary
    [item] = answer.metadata["reasoning_items"]
    assert item == {
        "id": req["input"][0]["id"],
        "encrypted_chars": len(req["input"][0]["encrypted_content"]),
    }
    assert trace.result is not None and summary not in trace.result.prompt
    assert trace.input.query == "Now multiply that by 10."


def test_responses_function_call_output_is_the_calls_packet() -> None:
    stem = "openai-responses/openllmetry-agents-function-call"
    pair = _pair(stem)
    req = pair["request"]
    assert detect_format(pair) == "openai-responses"
    trace = _one(pair)
    call_id = req["input"][1]["call_id"]
    [packet] = trace.input.packets
    assert packet.id == f"tool:{call_id}" and packet.kind == "tool_result"
    assert packet.content == req["input"][2]["output"]
    assert packet.metadata["name"] == "get_city_info"
    [call] = _message(trace, "item-1").metadata["tool_calls"]
    assert call == {
        "id": call_id,
        "name": "get_city_info",
        "arguments": req["input"][1]["arguments"],
    }
    assert trace.input.system_instructions == req["instructions"]
    assert trace.outcome is not None
    assert (
        trace.outcome.usage["input_tokens"]
        == EXPECTED[f"{stem}.response.json"]["usage"]["input_tokens"]
    )
    assert trace.outcome.output == pair["response"]["output"][0]["content"][0]["text"]


def test_responses_session_hint_reserve_and_built_in_items() -> None:
    req = _load("openai-responses/openllmetry-agents-function-call.request.json")
    req |= {
        "previous_response_id": "resp_prev",
        "prompt_cache_key": "conv-7",
        "max_output_tokens": 900,
    }
    req["input"].append({"type": "web_search_call", "id": "ws_1", "status": "completed"})
    trace = _one(req)
    assert trace.metadata["session_hint"] == {
        "previous_response_id": "resp_prev",
        "prompt_cache_key": "conv-7",
    }
    assert trace.session_id == "conv-7"
    assert trace.input.output_reserve == 900
    # a built-in tool's item is a call and its result (docs/design.md, "Formats")
    assert "kept_as_text" not in trace.metadata["import"]
    [call] = _message(trace, "item-3").metadata["tool_calls"]
    assert (call["id"], call["name"], call["server_tool"]) == (
        "ws_1",
        "web_search",
        "web_search_call",
    )
    assert [p.id for p in trace.input.packets if p.kind == "tool_result"][-1] == "tool:ws_1"


def test_responses_input_may_be_a_string() -> None:
    trace = _one({"model": "gpt-4o", "instructions": "Be brief.", "input": "Tell me about London"})
    assert trace.input.query == "Tell me about London"
    assert trace.input.system_instructions == "Be brief."
    assert imported_counts(trace)["messages"] == 1


# --------------------------------------------------------------------------- gemini


def test_gemini_responses_without_ids_answer_the_oldest_call_of_their_name() -> None:
    req = _load("gemini/otel-contrib-vertexai-tool-events.request.json")
    # the sample: two calls of one function, answered in order
    first, second = _one(req).input.packets
    assert (first.id, second.id) == ("tool:call_1_0", "tool:call_1_1")
    assert "35" in first.content and "25" in second.content
    # two functions, answered in the other order: each response still finds its own call
    calls, responses = req["contents"][1]["parts"], req["contents"][2]["parts"]
    calls[1]["functionCall"]["name"] = "get_local_time"
    responses[1]["functionResponse"]["name"] = "get_local_time"
    responses.reverse()
    by_name = {p.metadata["name"]: p for p in _one(req).input.packets}
    assert (
        by_name["get_local_time"].id == "tool:call_1_1"
        and "25" in by_name["get_local_time"].content
    )
    assert by_name["get_current_weather"].id == "tool:call_1_0"


def test_a_bare_list_of_contents_is_one_gemini_request() -> None:
    # a Gemini CLI /chat save checkpoint keeps a conversation as its contents alone: the
    # real request's contents so kept read as that request does, less what only the
    # request holds (its system instruction and tools)
    req = _load("gemini/openinference-automatic-tool-calling.request.json")
    bare = req["contents"]
    assert detect_format(bare) == "gemini"
    whole, alone = _one(req), _one(bare)
    for field in ("query", "packets", "history"):
        assert getattr(alone.input, field) == getattr(whole.input, field), field
    assert alone.input.system_instructions == "" and alone.input.tools == []
    source = alone.metadata["import"]["source"]
    calls = sum("functionCall" in p for c in bare for p in c["parts"])
    answers = sum("functionResponse" in p for c in bare for p in c["parts"])
    assert calls and (source["tool_calls"], source["tool_results"]) == (calls, answers)


def test_gemini_sdk_call_shape_in_snake_case_reads_the_same() -> None:
    rest = _load("gemini/openinference-automatic-tool-calling.request.json")
    contents = json.loads(
        json.dumps(rest["contents"])
        .replace('"functionCall"', '"function_call"')
        .replace('"functionResponse"', '"function_response"')
    )
    sdk = {
        "model": "gemini-2.0-flash",
        "contents": contents,
        "config": {
            "system_instruction": rest["systemInstruction"]["parts"][0]["text"],
            "tools": [{"function_declarations": rest["tools"][0]["functionDeclarations"]}],
            "max_output_tokens": 256,
        },
    }
    a, b = _one(rest), _one(sdk)
    assert detect_format(sdk) == "gemini"
    for field in ("system_instructions", "query", "packets", "history", "tools"):
        assert getattr(a.input, field) == getattr(b.input, field), field
    assert b.input.output_reserve == 256


def test_gemini_thoughts_and_code_execution_are_kept_and_counted() -> None:
    req = _load("gemini/openinference-automatic-tool-calling.request.json")
    req["contents"][1]["parts"][:0] = [
        {"text": "The user wants the weather.", "thought": True},
        {"executableCode": {"language": "PYTHON", "code": "print(1 + 1)"}},
        {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "2\n"}},
    ]
    trace = _one(req)
    model = _message(trace, "msg-1")
    assert model.metadata["reasoning"] == "The user wants the weather."
    assert "The user wants the weather." not in model.content
    assert "```python\nprint(1 + 1)\n```" in model.content and "OUTCOME_OK" in model.content
    meta = trace.metadata["import"]
    assert meta["code_parts"] == {"executable_code": 1, "code_execution_result": 1}
    assert "kept_as_text" not in meta


def test_gemini_file_and_inline_data_are_placeholders_with_what_they_were() -> None:
    trace = _one(_pair("gemini/otel-contrib-vertexai-with-files"))
    file, inline = _message(trace, "msg-0").metadata["media"]
    assert file["type"] == "fileData" and file["url"].endswith(".jpg")
    assert (
        inline["type"] == "inlineData"
        and inline["media_type"] == "image/jpeg"
        and inline["bytes"] > 0
    )
    assert "iVBORw0KGgo" not in trace.to_json()  # the payload itself is not kept
    assert trace.outcome is not None and trace.outcome.usage["promptTokenCount"] == 521


# --------------------------------------------------------------------------- bedrock


def test_bedrock_tool_result_json_content_and_error_status() -> None:
    req = _load("bedrock-converse/openinference-converse-stream-tool-result.request.json")
    result = req["messages"][2]["content"][0]["toolResult"]
    result["content"] = [{"json": {"song": "Rock and Roll Hall", "plays": 12}}]
    result["status"] = "error"
    [packet] = _one(req).input.packets
    assert packet.id == f"tool:{result['toolUseId']}"
    assert json.loads(packet.content) == {"song": "Rock and Roll Hall", "plays": 12}
    assert packet.metadata["is_error"] is True


def test_bedrock_text_document_bytes_are_read_as_text() -> None:
    # a DocumentBlock as the Converse API documents it (API_runtime_DocumentBlock: format,
    # name, source.bytes as base64 in JSON): a txt/md/csv/html document is text, its bytes
    # UTF-8; a pdf, or bytes that are not UTF-8, stay a placeholder naming format and size
    req = _load("bedrock-converse/openinference-converse-tool-use.request.json")
    text = "city,forecast\nParis,rain — 57°F\n"
    content = req["messages"][0]["content"]
    raw = base64.b64encode(text.encode()).decode()
    content.append({"document": {"format": "csv", "name": "forecast", "source": {"bytes": raw}}})
    content.append({"document": {"format": "pdf", "name": "scan", "source": {"bytes": raw}}})
    bad = base64.b64encode(b"\xff\xfe").decode()
    content.append({"document": {"format": "txt", "name": "odd", "source": {"bytes": bad}}})
    message = _one(req).input.query
    assert f"[document forecast]\n{text}" in message
    assert f"[document: pdf {len(raw) * 3 // 4} bytes scan]" in message
    assert "[document: txt 3 bytes odd]" in message


def test_bedrock_system_list_is_not_taken_for_anthropic() -> None:
    stem = "bedrock-converse/openllmetry-nova-converse-system"
    pair = _pair(stem)
    assert detect_format(pair["request"]) == "bedrock-converse"
    trace = _one(pair)
    assert trace.input.system_instructions == "You are a helpful assistant"
    assert _message(trace, "msg-0").metadata["guard_qualifiers"] == [
        ["grounding_source"],
        ["query"],
    ]
    assert trace.outcome is not None
    assert trace.outcome.usage == {"inputTokens": 54, "outputTokens": 18, "totalTokens": 72}
    assert trace.metadata["stop_reason"] == "guardrail_intervened"


def test_bedrock_tool_spec_schema_is_the_tool_parameters() -> None:
    req = _load("bedrock-converse/openinference-converse-tool-use.request.json")
    [tool] = _one(req).input.tools
    spec = req["toolConfig"]["tools"][0]["toolSpec"]
    assert (tool.name, tool.parameters) == (spec["name"], spec["inputSchema"]["json"])


# --------------------------------------------------------------------------- langchain


def test_langchain_lc_form_calls_results_reasoning_and_usage_per_call() -> None:
    name = "langchain/vercel-ai-langgraph-react-agent-tool-calling.state.json"
    state = _load(name)
    [trace] = load_file(FIXTURES / name)
    assert trace.result is not None
    assert [m.role for m in trace.result.messages] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    calls = state["messages"][1]["kwargs"]["tool_calls"]
    assert [p.id for p in trace.input.packets] == [f"tool:{c['id']}" for c in calls]
    first = _message(trace, "msg-1")
    summary = state["messages"][1]["kwargs"]["additional_kwargs"]["reasoning"]["summary"][0]["text"]
    assert first.metadata["reasoning"] == summary
    assert [t.name for t in trace.input.tools] == [
        "get_weather",
        "wiki_search",
        "get_datetime",
        "image_generation",
    ]
    got = [c["usage"] for c in trace.metadata["model_calls"]]
    want = EXPECTED[name]["per_call_usage"]
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        assert [u[key] for u in got] == [w[key] for w in want], key


def test_langchain_usage_falls_back_to_the_providers_response_metadata() -> None:
    name = "langchain/vercel-ai-langgraph-response-2.state.json"
    [trace] = load_file(FIXTURES / name)
    first, second = trace.metadata["model_calls"]
    want = EXPECTED[name]["per_call_usage"]
    assert first["usage"]["input_tokens"] == want[0]["input_tokens"]  # no usage_metadata there
    assert second["usage"]["input_tokens"] == want[1]["input_tokens"]
    assert first["model"] == "gpt-5-2025-08-07"


def _reshaped(state: dict[str, Any], shape: str) -> Any:
    out = []
    for msg in copy.deepcopy(state["messages"]):
        kind = {"HumanMessage": "human", "AIMessageChunk": "ai", "ToolMessage": "tool"}[
            msg["id"][-1]
        ]
        kwargs = msg["kwargs"]
        out.append(
            {"type": kind, "data": {**kwargs, "type": kind}}
            if shape == "dict"
            else {"type": kind, **kwargs}
        )
    return out if shape == "dict" else {"messages": out}


def test_langchain_messages_to_dict_and_plain_shapes_give_the_same_input() -> None:
    state = _load("langchain/vercel-ai-langgraph-react-agent-tool-calling.state.json")
    lc = _one(state)
    for shape in ("dict", "plain"):
        data = _reshaped(state, shape)
        assert detect_format(data) == "langchain", shape
        other = _one(data)
        assert other.input == lc.input, shape
        assert imported_counts(other) == imported_counts(lc), shape
