"""The corpus parsers on the real vendored files.

Every expected count is derived here from the source file itself (its JSON, or a plain
text search of its markdown), never copied from the parser's output.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ctxcore.errors import ImportFormatError
from ctxcore.formats.openai import captured_input_from_messages
from ctxcore.formats.transcripts import (
    parse_aider,
    parse_mini_swe,
    parse_opencode,
    parse_reason_tool_use,
    parse_sharegpt,
    parse_sweagent,
)


def _answered(messages: list[dict]) -> None:
    """Every tool message answers a call made earlier in the conversation."""
    made: set[str] = set()
    for m in messages:
        for c in m.get("tool_calls", []):
            made.add(c["id"])
        if m["role"] == "tool" and "tool_call_id" in m:
            assert m["tool_call_id"] in made, m["tool_call_id"]


@pytest.mark.parametrize(
    "name",
    [
        "a01_sweagent_marshmallow-1867_function-calling.traj.json",
        "a02_sweagent_function_calling_simple.traj.json",
    ],
)
def test_sweagent_function_calling(corpus: Path, name: str) -> None:
    raw = json.loads((corpus / name).read_text())["history"]
    conv = parse_sweagent(corpus / name)
    assert len(conv.messages) == len(raw)
    assert conv.count("tool") == sum(1 for m in raw if m["role"] == "tool")
    assert conv.count("assistant") == sum(1 for m in raw if m["role"] == "assistant")
    tool_ids = [m["tool_call_ids"][0] for m in raw if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in conv.messages if m["role"] == "tool"] == tool_ids
    # the longest observation survives byte for byte (a01: the pip log with spinners)
    longest = max((m["content"] for m in raw if m["role"] == "tool"), key=len)
    assert longest in [m["content"] for m in conv.messages]
    _answered(conv.messages)


def test_sweagent_thought_action_format(corpus: Path) -> None:
    name = "b03_sweagent_pydicom-1458.traj.json"
    raw = json.loads((corpus / name).read_text())["history"]
    conv = parse_sweagent(corpus / name)
    actions = [m for m in raw if m["role"] == "assistant" and m.get("action")]
    calls = [c for m in conv.messages for c in m.get("tool_calls", [])]
    assert len(calls) == len(actions)
    assert json.loads(calls[0]["function"]["arguments"])["command"] == actions[0]["action"].strip()
    # observations are the user messages after the real (non-demo) task message
    task_at = next(i for i, m in enumerate(raw) if m["role"] == "user" and not m.get("is_demo"))
    obs = [m for m in raw[task_at + 1 :] if m["role"] == "user"]
    assert conv.count("tool") == len(obs)
    assert "Pixel Representation" in conv.title
    _answered(conv.messages)


@pytest.mark.parametrize(
    "name",
    [
        "b01_mswea_gemini3pro_pytest-dev__pytest-7571.traj.json",
        "b02_mswea_gemini3pro_django__django-16560.traj.json",
    ],
)
def test_mini_swe(corpus: Path, name: str) -> None:
    data = json.loads((corpus / name).read_text())
    raw = data["messages"]
    conv = parse_mini_swe(corpus / name)
    n_assistant = sum(1 for m in raw if m["role"] == "assistant")
    assert conv.count("assistant") == n_assistant
    # every user message after the task is an observation
    assert conv.count("tool") == sum(1 for m in raw if m["role"] == "user") - 1
    blocks = sum(1 for m in raw if m["role"] == "assistant" and "```bash" in m["content"])
    assert sum(len(m.get("tool_calls", [])) for m in conv.messages) == blocks
    # the provider's created stamps are kept as the clock
    created = [m["extra"]["response"]["created"] for m in raw if m.get("extra")]
    times = [t for m, t in zip(conv.messages, conv.times, strict=True) if m["role"] == "assistant"]
    assert [int(t.timestamp()) for t in times if t] == created
    assert conv.meta["instance_id"] == data["instance_id"]
    _answered(conv.messages)


def test_mini_swe_bare_list(corpus: Path) -> None:
    name = "a03_mini-swe-agent_github_issue.traj.json"
    raw = json.loads((corpus / name).read_text())
    conv = parse_mini_swe(corpus / name)
    assert len(conv.messages) == len(raw)
    assert conv.count("tool") == sum(1 for m in raw if m["role"] == "user") - 1
    assert all(t is None for t in conv.times)


@pytest.mark.parametrize(
    "name", ["b05_zh_opencode_session_ses_4119.md", "c01_zh_opencode_session_ses_4398.md"]
)
def test_opencode(corpus: Path, name: str) -> None:
    text = (corpus / name).read_text()
    conv = parse_opencode(corpus / name)
    n_tools = len(re.findall(r"^Tool: ", text, re.M))
    assert conv.count("tool") == n_tools
    assert sum(len(m.get("tool_calls", [])) for m in conv.messages) == n_tools
    assert conv.count("user") == len(re.findall(r"^## User$", text, re.M))
    n_inputs = len(re.findall(r"^\*\*Input:\*\*$", text, re.M))
    assert n_inputs == n_tools
    for m in conv.messages:  # every tool input is the JSON object the agent sent
        for c in m.get("tool_calls", []):
            assert isinstance(json.loads(c["function"]["arguments"]), dict)
    errors = len(re.findall(r"^\*\*Error:\*\*$", text, re.M))
    assert sum(1 for m in conv.messages if m.get("is_error")) == errors
    # times advance from the header's Created stamp by the per-message durations
    times = [t for t in conv.times if t is not None]
    assert times == sorted(times)
    created = re.search(r"\*\*Created:\*\* (.+)", text)
    assert created and times[0].strftime("%-m/%-d/%Y") == created.group(1).split(",")[0]
    _answered(conv.messages)


def test_opencode_keeps_chinese_thinking(corpus: Path) -> None:
    conv = parse_opencode(corpus / "b05_zh_opencode_session_ses_4119.md")
    first = conv.messages[0]
    assert first["role"] == "assistant"
    assert first["reasoning"].startswith("好的，文件结构看起来完整")
    assert "Thinking" not in first["content"]
    outputs = [m["content"] for m in conv.messages if m["role"] == "tool"]
    assert any("error TS1128" in o for o in outputs)


def test_aider(corpus: Path) -> None:
    text = (corpus / "b04_aider_chat_session_2024-08-13_1342.md").read_text()
    conv = parse_aider(corpus / "b04_aider_chat_session_2024-08-13_1342.md")
    user_lines = [ln[5:].rstrip() for ln in text.splitlines() if ln.startswith("#### ")]
    joined = "\n".join(m["content"] for m in conv.messages if m["role"] == "user")
    for ln in user_lines:
        assert ln.strip() in joined
    assert conv.title == user_lines[0].strip()
    tokens_lines = len(re.findall(r"^> Tokens: ", text, re.M))
    tool_text = "\n".join(m["content"] for m in conv.messages if m["role"] == "tool")
    assert len(re.findall(r"^Tokens: ", tool_text, re.M)) == tokens_lines


def test_reason_tool_use(corpus: Path) -> None:
    path = corpus / "a04_llamafactory_reason_tool_use_demo_50.jsonl"
    records = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
    convs = parse_reason_tool_use(path)
    assert len(convs) == len(records)
    for conv, rec in zip(convs, records, strict=True):
        n_calls = sum(1 for m in rec["messages"] for p in m["content"] if p["type"] == "tool_call")
        assert sum(len(m.get("tool_calls", [])) for m in conv.messages) == n_calls
        results = [
            item
            for m in rec["messages"]
            if m["role"] == "tool"
            for item in json.loads(m["content"][0]["value"])
        ]
        got = [m["tool_call_id"] for m in conv.messages if m["role"] == "tool"]
        assert len(got) == len(results)
        for g, r in zip(got, results, strict=True):
            if isinstance(r, dict) and "tool_call_id" in r:
                assert g == r["tool_call_id"]
        assert len(conv.tools) == len(json.loads(rec["tools"]))
        _answered(conv.messages)


def test_sharegpt(corpus: Path) -> None:
    path = corpus / "c02_llamafactory_glaive_toolcall_zh_demo.json"
    records = json.loads(path.read_text())
    convs = parse_sharegpt(path)
    assert len(convs) == len(records)
    for conv, rec in zip(convs, records, strict=True):
        turns = rec["conversations"]
        assert len(conv.messages) == len(turns)
        assert conv.count("tool") == sum(1 for t in turns if t["from"] == "observation")
        _answered(conv.messages)


def test_conversation_feeds_the_openai_importer(corpus: Path) -> None:
    conv = parse_mini_swe(corpus / "b01_mswea_gemini3pro_pytest-dev__pytest-7571.traj.json")
    steps = conv.assistant_indices()
    upto = steps[5]  # the context of the sixth model call
    inp = captured_input_from_messages(
        conv.messages[:upto], now=conv.times[upto] or conv.times[steps[0]], query="caplog"
    )
    tool_ids = [p.id for p in inp.packets]
    assert tool_ids == [f"tool:call_{k}" for k in range(1, 6)]
    assert inp.system_instructions.startswith("You are a helpful assistant")


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ImportFormatError, match="corpus file not found"):
        parse_opencode(tmp_path / "nope.md")
    bad = tmp_path / "bad.traj.json"
    bad.write_text("{}")
    with pytest.raises(ImportFormatError, match="not a SWE-agent trajectory"):
        parse_sweagent(bad)
