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


# --------------------------------------------------------------------------- what the store holds

#: store column <- the model field that fills it (the other integer columns are counts)
_COLUMNS = [
    ("traces", "turn", Trace, "turn"),
    ("traces", "budget", Report, "budget"),
    ("traces", "used", Report, "used"),
    ("decisions", "rank", Decision, "rank"),
    ("decisions", "tokens_before", Decision, "tokens_before"),
    ("decisions", "tokens_before", Packet, "tokens"),  # a trace without a result
    ("decisions", "tokens_after", Decision, "tokens_after"),
    ("decisions", "budget_left", Decision, "budget_left"),
    ("partitions", "budget", PartitionUsage, "budget"),
    ("partitions", "used", PartitionUsage, "used"),
    ("partitions", "items", PartitionUsage, "items"),
]


def _bounds(model: type, name: str) -> tuple[int, int]:
    import annotated_types as at

    lo = hi = None
    for c in model.model_fields[name].metadata:  # type: ignore[attr-defined]
        if isinstance(c, at.Ge | at.Gt):
            lo = c.ge if isinstance(c, at.Ge) else c.gt + 1
        if isinstance(c, at.Le | at.Lt):
            hi = c.le if isinstance(c, at.Le) else c.lt - 1
    assert lo is not None and hi is not None, f"{model.__name__}.{name} is unbounded"
    return lo, hi


def test_every_integer_a_column_holds_fits_its_column() -> None:
    """Validation is what the store can hold: a model's bounds fit the Arrow (and DuckDB)
    column its value goes to, so an accepted trace never overflows an insert."""
    import pyarrow as pa

    from ctxcore.store.rows import _SCHEMAS

    for table, column, model, name in _COLUMNS:
        typ = _SCHEMAS[table].field(column).type
        width = 32 if typ == pa.int32() else 64
        lo, hi = _bounds(model, name)
        assert -(2 ** (width - 1)) <= lo and hi <= 2 ** (width - 1) - 1, (table, column)


def test_no_integer_field_is_unbounded() -> None:
    """Every integer a trace holds has bounds (a column's, or 64 bits), checked natively."""
    import typing

    from ctxcore import models as m

    seen = 0
    for model in vars(m).values():
        if not (isinstance(model, type) and issubclass(model, m.BaseModel)) or model is m.BaseModel:
            continue
        for name, info in model.model_fields.items():
            args = typing.get_args(info.annotation) or (info.annotation,)
            if int in args:
                _bounds(model, name)
                seen += 1
    assert seen >= 20
    big = {"usage": {"n": 2**63}}
    with pytest.raises(ValueError):
        Outcome.model_validate(big)
    with pytest.raises(ValueError):
        Trace.model_validate({**make_trace().to_dict(), "redactions": {"aws": 2**63}})
