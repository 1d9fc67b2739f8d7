"""Ingest's msgspec fast path never accepts what the pydantic models refuse, and what it
accepts decodes to the same data and the same store rows."""

from __future__ import annotations

import collections.abc
import copy
import json
import random
import typing
from pathlib import Path
from typing import Any

import msgspec
import pytest
from pydantic import ValidationError

from ctxcore import models as m
from ctxcore.formats.load import load_file
from ctxcore.store import fastdecode
from ctxcore.store.rows import TraceLike, prepare

ROOT = Path(__file__).resolve().parent.parent
DEMO = sorted((ROOT / "ctxcore" / "data" / "demo").glob("*.jsonl"))


def demo_lines() -> list[bytes]:
    out: list[bytes] = []
    for f in DEMO:
        out += [ln for ln in f.read_bytes().splitlines() if ln.strip()]
    return out


def pydantic_verdict(raw: bytes) -> m.Trace | None:
    try:
        return m.Trace.model_validate_json(raw)
    except ValidationError:
        return None


def rows(view: Any, raw: bytes) -> dict[str, list[dict[str, Any]]]:
    tables = prepare([(view, raw)], ["f.jsonl"], diagnose=False).tables
    out = {name: t.drop_columns(["ingested_at"]).to_pylist() if name == "traces" else
           t.to_pylist() for name, t in tables.items()}  # fmt: skip
    return out


def assert_agrees(raw: bytes) -> bool:
    """The rule: fast accepts => pydantic accepts, with equal data. Returns fast's verdict."""
    view = fastdecode.decode(raw)
    if view is None:
        return False
    trace = pydantic_verdict(raw)
    assert trace is not None, f"fast path accepted what pydantic refuses: {raw[:300]!r}"
    assert msgspec.to_builtins(view) == trace.to_dict()
    return True


def test_every_model_validator_is_covered_by_the_fast_path() -> None:
    found = set()
    for name in dir(m):
        obj = getattr(m, name)
        if isinstance(obj, type) and issubclass(obj, m.BaseModel) and obj is not m.BaseModel:
            dec = obj.__pydantic_decorators__
            found |= {(obj.__name__, v) for v in (*dec.field_validators, *dec.model_validators)}
    assert found == set(fastdecode.COVERED_VALIDATORS)


def test_demo_traces_take_the_fast_path_and_give_identical_rows() -> None:
    lines = demo_lines()
    assert len(lines) >= 100
    for raw in lines:
        assert assert_agrees(raw), raw[:200]
        trace = m.Trace.model_validate_json(raw)
        fast, full = rows(fastdecode.decode(raw), raw), rows(trace, raw)
        # a trace decoded without pydantic and not diagnosed has no cost summary stored:
        # its reader makes one from the trace (docs/design.md, "Cost and prices")
        assert "cost_parts" not in fast and len(full.pop("cost_parts")) >= 1
        assert fast == full


def like_members(proto: type) -> dict[str, Any]:
    """name -> return type of the read-only members of a ``rows.*Like`` protocol."""
    return {
        name: typing.get_type_hints(member.fget)["return"]
        for name, member in vars(proto).items()
        if isinstance(member, property)
    }


def visit(obj: Any, proto: type, seen: set[tuple[str, str]]) -> None:
    """Read every member ``proto`` names from ``obj``, and from the objects they hold."""
    for name, tp in like_members(proto).items():
        value = getattr(obj, name)  # an AttributeError names what the struct lacks
        seen.add((proto.__name__, name))
        if value is None:
            continue
        inner = [a for a in typing.get_args(tp) if a is not type(None)] or [tp]
        many = typing.get_origin(tp) is collections.abc.Sequence
        for sub in inner:
            if getattr(sub, "_is_protocol", False):
                for item in value if many else [value]:
                    visit(item, sub, seen)


@pytest.mark.slow
def test_the_fast_path_struct_has_every_member_rows_read() -> None:
    """``rows.TraceLike`` is the seam mypy checks ``models.Trace`` against; fastdecode's
    struct is typed ``Any``, so this reads every member from real decoded traces."""
    every: set[tuple[str, str]] = set()
    todo: list[type] = [TraceLike]
    while todo:
        proto = todo.pop()
        for name, tp in like_members(proto).items():
            every.add((proto.__name__, name))
            todo += [a for a in (tp, *typing.get_args(tp)) if getattr(a, "_is_protocol", False)]
    seen: set[tuple[str, str]] = set()
    # the demo's builds record no usage: a real Claude Code log's calls carry every count
    recorded = load_file(
        ROOT / "tests/fixtures/imports/claude-code/ccviewer-task-sidechain-session.jsonl"
    )
    lines = demo_lines() + [t.to_json().encode() for t in recorded]
    for raw in lines:
        visit(fastdecode.decode(raw), TraceLike, seen)
        visit(m.Trace.model_validate_json(raw), TraceLike, seen)
    assert seen == every


# Timestamps: msgspec must not accept one pydantic refuses (it may refuse more).
STAMPS = [
    "2026-01-01T00:00:00Z", "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:00.123456789Z",
    "2026-01-01t00:00:00z", "2026-01-01 00:00:00Z", "2026-01-01T23:59:60Z",
    "2026-01-01T00:00Z", "2026-01-01T00:00:00+0000", "2026-01-01T00:00:00+24:00",
    "2026-01-01T00:00:00-23:59", "2026-02-30T00:00:00Z", "2026-01-01T00:00:00.Z",
    "2026-01-01T00:00:00,5Z", "20260101T000000Z", "2026-01-01T00:00:00.1234567Z",
    "0000-01-01T00:00:00Z", "9999-12-31T23:59:59.9999999Z", "2026-01-01T00:00:00+00",
    "2026-01-01T24:00:00Z", "2026-01-01T00:00:00", "2026-01-01", "1767225600",
    "2026-01-01T00:00:00.5+05:30", "2026-01-01T00:00:00-00:00", "+2026-01-01T00:00:00Z",
]  # fmt: skip


@pytest.fixture(scope="module")
def base() -> dict[str, Any]:
    """A demo trace with a result, history and packets, as a dict."""
    for raw in demo_lines():
        d = json.loads(raw)
        if d.get("result") and d["input"]["packets"] and d["input"]["history"]:
            return d
    raise AssertionError("no demo trace with history, packets and a result")


@pytest.mark.parametrize("stamp", STAMPS)
@pytest.mark.parametrize("where", ["created_at", "now", "packet", "history"])
def test_timestamps(base: dict[str, Any], stamp: str, where: str) -> None:
    d = copy.deepcopy(base)
    if where == "created_at":
        d["created_at"] = stamp
    elif where == "now":
        d["input"]["now"] = stamp
    elif where == "packet":
        d["input"]["packets"][0]["timestamp"] = stamp
    else:
        d["input"]["history"][0]["timestamp"] = stamp
    raw = json.dumps(d, ensure_ascii=False).encode()
    assert_agrees(raw)
    if where == "created_at" and fastdecode.decode(raw) is not None:
        # the one timestamp that becomes a column: pydantic's value, to the microsecond
        view = fastdecode.decode(raw)
        assert view.created_at == m.Trace.model_validate_json(raw).created_at


def _edit(d: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    d = copy.deepcopy(d)
    node: Any = d
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return d


BAD_EDITS: list[tuple[tuple[Any, ...], Any]] = [
    (("input", "packets", 0, "id"), ""),
    (("input", "packets", 0, "tokens"), -1),
    (("input", "packets", 0, "tokens"), 1.5),
    (("input", "packets", 0, "relevance"), "0.5"),
    (("input", "packets", 0, "must_keep"), 1),
    (("input", "packets", 0, "must_keep"), "true"),
    (("input", "packets", 0, "content"), None),
    (("input", "packets", 0, "content"), 12),
    (("input", "packets", 0, "surprise"), 1),
    (("input", "window"), 0),
    (("input", "output_reserve"), -5),
    (("config", "preset"), "langchain"),
    (("config", "fill"), "greedy"),
    (("config", "reserve_ratio"), 1.0),
    (("config", "min_relevance"), 1.5),
    (("config", "partition_budgets"), {"[Nope]": 0.5}),
    (("config", "partition_budgets"), {"[Task]": 2}),
    (("config", "max_tokens"), "8000"),
    (("schema",), "ctxscope.trace/2"),
    (("schema",), "ctxscope.trace/1.1"),
    (("trace_id",), ""),
    (("turn",), "3"),
    (("turn",), 3.0),
    (("tags",), "x"),
    (("outcome",), {"verdict": "meh"}),
    (("result", "decisions", 0, "status"), "lost"),
    (("result", "decisions", 0, "reason"), "fits"),
    (("result", "decisions", 0, "tokens_after"), None),
    (("result", "totals", "window"), "big"),
    (("result", "timings", "gather"), "1 ms"),
    # what the store cannot hold (issue 11): the bounds are the models', mirrored
    (("turn",), 2**31),
    (("turn",), -(2**31) - 1),
    (("created_at",), "0001-01-01T00:00:00+00:01"),
    (("created_at",), "9999-12-31T23:59:59-00:01"),
    (("input", "now"), "0001-01-01T00:00:00+01:00"),
    (("input", "packets", 0, "timestamp"), "9999-12-31T23:30:00-01:00"),
    (("input", "history", 0, "timestamp"), "0001-01-01T00:00:00+23:59"),
    (("input", "packets", 0, "tokens"), 2**40 + 1),
    (("input", "packets", 0, "priority"), 2**63),
    (("input", "window"), 2**70),
    (("config", "max_tokens"), 2**40 + 1),
    (("result", "decisions", 0, "rank"), 2**31),
    (("result", "decisions", 0, "budget_left"), -(2**41)),
    (("result", "partitions", 0, "items"), 2**31),
    (("result", "report", "budget"), 2**70),
    (("result", "totals", "available"), 2**41),
    (("outcome",), {"usage": {"total_tokens": 2**63}}),
    (("redactions",), {"aws": 2**64}),
    (("metadata",), {"a": json.loads("[" * 64 + "]" * 64)}),  # 65 levels
    (("input", "packets", 0, "metadata"), {"deep": json.loads("[" * 70 + "]" * 70)}),
    (("input", "tools"), [{"name": "t", "parameters": json.loads('{"a":' * 65 + "{}" + "}" * 65)}]),
]


@pytest.mark.parametrize(("path", "value"), BAD_EDITS, ids=[str(e) for e in BAD_EDITS])
def test_targeted_edits_agree(base: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    raw = json.dumps(_edit(base, path, value), ensure_ascii=False).encode()
    assert_agrees(raw)


def test_text_level_cases(base: dict[str, Any]) -> None:
    good = json.dumps(base, ensure_ascii=False, separators=(",", ":")).encode()
    pid = base["input"]["packets"][0]["id"]
    cases = [
        good.replace(b'"schema":', b'"schema_":', 1),  # pydantic's populate_by_name
        good.replace(b'"turn":', b'"turn":1e999,"x":', 1),  # inf (and an unknown key)
        good.replace(b'"tokens_before":', b'"tokens_before":99999999999999999999999,"y":', 1),
        good.replace(b'"relevance":', b'"relevance":1e999,"z":', 1),
        good[:-1] + b',"trace_id":"dup-key"}',  # a repeated key
        good.replace(b'"content":"', b'"content":"\\ud800', 1),  # a lone surrogate
        good.replace(b'"content":"', b'"content":"\xff\xfe', 1),  # invalid UTF-8
        good[: len(good) // 2],  # truncated
        good[:-1] + b',"metadata":{"x":NaN}}',  # not JSON, though pydantic would take it
        good[:-1] + b',"metadata":{"x":-Infinity}}',
        json.dumps(
            _edit(base, ("input", "packets"), base["input"]["packets"] * 2)
        ).encode(),  # duplicate packet ids
        json.dumps(
            _edit(base, ("input", "packets", 0, "content"), "x" * (m.MAX_CONTENT_CHARS + 1))
        ).encode(),
        json.dumps(_edit(base, ("input", "packets", 0), {"id": pid, "kind": "k"})).encode(),
    ]
    assert all(raw != good for raw in cases)
    verdicts = [assert_agrees(raw) for raw in cases]
    assert verdicts[0] is False and verdicts[-1] is False  # refused: pydantic decides
    assert not any(verdicts[1:4]) and not any(verdicts[5:])


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node[:3]):
            out += _paths(v, (*prefix, i))
    return out


POOL: list[Any] = [
    None, "", "x", "中文", 0, -1, 1, 2.5, -0.0, 1e308, True, False, [], {}, ["a"], {"k": 1},
    "2026-01-01T00:00:00", "2026-01-01T00:00:00Z", "kept", "FITS", 10**19, "ctxscope",
]  # fmt: skip


@pytest.mark.slow
def test_random_mutations_never_let_a_bad_trace_through(base: dict[str, Any]) -> None:
    rng = random.Random(20261129)
    lines = demo_lines()
    bases = [base] + [json.loads(lines[i]) for i in rng.sample(range(len(lines)), 9)]
    accepted = refused = 0
    for _ in range(3000):
        d = copy.deepcopy(rng.choice(bases))
        for _ in range(rng.randint(1, 3)):
            paths = _paths(d)
            path = rng.choice(paths)
            node: Any = d
            for k in path[:-1]:
                node = node[k]
            op = rng.random()
            if op < 0.15 and isinstance(node, dict):
                del node[path[-1]]
            elif op < 0.25 and isinstance(node, dict):
                node[f"extra_{rng.randint(0, 9)}"] = rng.choice(POOL)
            else:
                node[path[-1]] = copy.deepcopy(rng.choice(POOL))
        raw = json.dumps(d, ensure_ascii=False).encode()
        if assert_agrees(raw):
            accepted += 1
        else:
            refused += 1
    # both sides of the rule were exercised
    assert accepted > 100 and refused > 1000, (accepted, refused)
