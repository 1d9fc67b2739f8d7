"""The ctxscope.trace/1 contract: field names, round trips, decisions."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from ctxcore.errors import InputError
from ctxcore.loading import trace_from_obj
from ctxcore.models import (
    SCHEMA,
    Builder,
    BuildResult,
    CapturedInput,
    Config,
    Decision,
    Message,
    Outcome,
    Packet,
    PartitionUsage,
    Reason,
    Report,
    Status,
    ToolDef,
    Totals,
    Trace,
)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def make_trace() -> Trace:
    inp = CapturedInput(
        query="why does test_dump fail?",
        now=NOW,
        system_instructions="You are a careful coding agent.",
        history=[
            Message(role="user", content="fix the bug", timestamp=NOW - timedelta(hours=1)),
            Message(role="assistant", content="looking", id="m2"),
        ],
        packets=[
            Packet(
                id="tool:call_12",
                kind="tool_result",
                content="FAILED tests/test_x.py::test_dump - AssertionError 0.1+0.2",
                timestamp=NOW - timedelta(minutes=3),
                relevance=0.8,
                priority=2,
                must_keep=True,
                tokens=21,
                metadata={"tool": "bash", "nested": {"a": [1, 2.5, None]}},
            ),
            Packet(id="note:blocker-3", kind="note", content="用户要求：不要修改公共 API"),
        ],
        tools=[ToolDef(name="bash", description="run", parameters={"type": "object"})],
        window=8000,
        output_reserve=1200,
    )
    decision = Decision(
        packet_id="tool:call_12",
        kind="tool_result",
        status=Status.KEPT,
        reason=Reason.MUST_KEEP,
        reason_text="must-keep item, placed first",
        partition="[Evidence]",
        relevance=0.8,
        recency=0.95122942450071402,
        score=0.1 + 0.2,
        rank=1,
        tokens_before=21,
        tokens_after=21,
        budget_left=6000,
    )
    result = BuildResult(
        prompt="[Task]\nwhy?",
        decisions=[decision],
        partitions=[PartitionUsage(name="[Task]", budget=100, used=4, items=1)],
        totals=Totals(
            window=8000,
            output_reserve=1200,
            safety_margin=100,
            available=6700,
            used=4,
            tokenizer="cl100k_base",
        ),
        report=Report(budget=6700, used=4, mustKeep=["tool:call_12"], included=["tool:call_12"]),
        warnings=["estimated counts differ from the real tokenizer by 23%"],
        timings={"gather": 0.5},
    )
    return Trace(
        trace_id="t-1",
        session_id="s-1",
        turn=3,
        created_at=NOW,
        builder=Builder(name="ctxcore/ctxscope", version="0.1.0"),
        tags=["demo"],
        input=inp,
        config=Config(preset="ctxscope", max_tokens=8000, relevance_weight=0.7),
        result=result,
        outcome=Outcome(verdict="bad", note="dropped the failing log", usage={"input": 10}),
    )


def test_json_round_trip_is_exact() -> None:
    trace = make_trace()
    text = trace.to_json()
    again = trace_from_obj(json.loads(text))
    assert again == trace
    assert again.to_json() == text
    data = json.loads(text)
    assert data["schema"] == SCHEMA
    assert data["result"]["report"]["mustKeep"] == ["tool:call_12"]
    assert data["input"]["packets"][0]["must_keep"] is True
    assert data["result"]["decisions"][0]["score"] == 0.1 + 0.2


def test_contract_field_names() -> None:
    data = make_trace().to_dict()
    assert set(data["input"]) == {
        "query",
        "now",
        "system_instructions",
        "history",
        "packets",
        "tools",
        "window",
        "output_reserve",
    }
    assert set(data["input"]["packets"][0]) == {
        "id",
        "kind",
        "content",
        "timestamp",
        "relevance",
        "priority",
        "must_keep",
        "tokens",
        "metadata",
    }
    assert {
        "preset",
        "max_tokens",
        "reserve_ratio",
        "min_relevance",
        "relevance_weight",
        "recency_weight",
        "enable_compression",
    } <= set(data["config"])
    assert {"prompt", "decisions", "partitions", "totals", "report", "warnings", "timings"} <= set(
        data["result"]
    )
    assert {
        "packet_id",
        "status",
        "reason",
        "reason_text",
        "partition",
        "relevance",
        "recency",
        "score",
        "rank",
        "tokens_before",
        "tokens_after",
        "budget_left",
    } <= set(data["result"]["decisions"][0])
    assert {s.value for s in Status} == {
        "kept",
        "truncated",
        "summarized",
        "dropped",
        "filtered",
        "not_rendered",
    }


def test_unknown_schema_major_is_rejected_clearly() -> None:
    data = make_trace().to_dict()
    data["schema"] = "ctxscope.trace/2"
    with pytest.raises(InputError, match="unsupported schema 'ctxscope.trace/2'"):
        trace_from_obj(data, "f.jsonl:4")


def test_unknown_field_is_an_error_not_ignored() -> None:
    data = make_trace().to_dict()
    data["input"]["packets"][0]["relevence"] = 0.3
    with pytest.raises(InputError) as err:
        trace_from_obj(data)
    assert "packet 'tool:call_12'" in str(err.value)
    assert "relevence" in str(err.value)
    assert "unknown field" in str(err.value)


def test_models_are_frozen() -> None:
    p = Packet(id="a", kind="note", content="x")
    with pytest.raises(Exception, match="frozen"):
        p.content = "y"  # type: ignore[misc]
