"""``protodict.message_to_dict`` gives exactly what ``json_format.MessageToDict`` gives.

Checked on the protobuf fixtures, on every OTLP JSON fixture parsed into the protobuf
classes, and on generated messages holding every kind of value an OTLP export can carry:
every ``AnyValue`` case (nested arrays and key-value lists, empty ones), NaN and infinities,
64-bit extremes, bytes that are not UTF-8, unknown enum numbers, empty sub-messages.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.message import Message
from google.rpc import status_pb2  # type: ignore[import-untyped]
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from ctxcore.formats.protodict import message_to_dict

FIXTURES = Path(__file__).parent / "fixtures" / "imports"


def _same(msg: Message) -> None:
    want = MessageToDict(msg)
    got = message_to_dict(msg)
    # the same keys in the same order, the same values (NaN compared as text, as JSON has it)
    assert json.dumps(got) == json.dumps(want)


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("otlp-protobuf/*.binpb")), ids=str)
def test_protobuf_fixtures(path: Path) -> None:
    raw = path.read_bytes()
    for cls in (ExportTraceServiceRequest, ExportLogsServiceRequest):
        try:
            msg = cls.FromString(raw)
        except Exception:  # noqa: BLE001 - the other signal's message
            continue
        assert msg.ListFields(), f"{path.name} decodes to an empty {cls.__name__}"
        _same(msg)


def _json_exports() -> list[tuple[str, dict[str, object]]]:
    out = []
    for path in sorted(FIXTURES.glob("otlp-*/*.json*")):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines() if path.suffix == ".jsonl" else [text]
        values = [json.loads(x) for x in lines if x.strip()]
        out += [(f"{path.name}#{i}", v) for i, v in enumerate(values) if isinstance(v, dict)]
    return out


@pytest.mark.parametrize(("name", "export"), _json_exports(), ids=lambda x: str(x)[:60])
def test_json_fixtures_through_the_protobuf_classes(name: str, export: dict[str, object]) -> None:
    cls = ExportTraceServiceRequest if "resourceSpans" in export else ExportLogsServiceRequest
    try:
        msg = ParseDict(export, cls(), ignore_unknown_fields=True)
    except Exception as exc:  # noqa: BLE001 - a JSON fixture protobuf refuses (e.g. hex ids)
        pytest.skip(f"{name}: not parseable into {cls.__name__}: {exc}")
    _same(msg)


def _any(rng: random.Random, depth: int = 0) -> common_pb2.AnyValue:
    v = common_pb2.AnyValue()
    kind = rng.choice(["s", "i", "d", "b", "y", "a", "k", "none"] if depth < 3 else ["s", "i"])
    if kind == "s":
        v.string_value = rng.choice(["", "héllo", "\u0000x", '{"role": "user"}', "🙂" * 3])
    elif kind == "i":
        v.int_value = rng.choice([0, -1, 2**63 - 1, -(2**63), 42])
    elif kind == "d":
        v.double_value = rng.choice([0.0, -0.0, 1e-300, 1.5, math.nan, math.inf, -math.inf, 0.1])
    elif kind == "b":
        v.bool_value = rng.choice([True, False])
    elif kind == "y":
        v.bytes_value = rng.choice([b"", b"\xff\x00\xfe", b"plain"])
    elif kind == "a":
        v.array_value.SetInParent()
        for _ in range(rng.randint(0, 3)):
            v.array_value.values.append(_any(rng, depth + 1))
    elif kind == "k":
        v.kvlist_value.SetInParent()
        for i in range(rng.randint(0, 3)):
            kv = v.kvlist_value.values.add(key=rng.choice(["", f"k{i}", "gen_ai.x"]))
            if rng.random() < 0.8:
                kv.value.CopyFrom(_any(rng, depth + 1))
    return v


def _span(rng: random.Random) -> trace_pb2.Span:
    s = trace_pb2.Span(
        trace_id=rng.randbytes(16) if rng.random() < 0.9 else b"",
        span_id=rng.randbytes(8),
        parent_span_id=rng.randbytes(8) if rng.random() < 0.5 else b"",
        name=rng.choice(["", "chat gpt-4o", "execute_tool"]),
        kind=rng.choice([0, 1, 3, 17]),  # 17: an enum number this version does not know
        start_time_unix_nano=rng.choice([0, 1, 2**64 - 1, 1_796_078_064_712_464_003]),
        end_time_unix_nano=rng.choice([0, 1_796_078_064_912_464_003]),
        flags=rng.choice([0, 1, 2**32 - 1]),
        dropped_attributes_count=rng.choice([0, 3]),
    )
    for i in range(rng.randint(0, 6)):
        kv = s.attributes.add(key=f"a{i}")
        if rng.random() < 0.9:
            kv.value.CopyFrom(_any(rng))
    for _ in range(rng.randint(0, 2)):
        ev = s.events.add(name=rng.choice(["", "gen_ai.user.message"]), time_unix_nano=5)
        ev.attributes.add(key="content").value.string_value = "hi"
    if rng.random() < 0.5:
        s.status.code = rng.choice([0, 1, 2, 9])
        s.status.message = rng.choice(["", "boom"])
    if rng.random() < 0.3:
        s.links.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    return s


@pytest.mark.parametrize("seed", range(40))
def test_generated_exports(seed: int) -> None:
    rng = random.Random(seed)
    req = ExportTraceServiceRequest()
    for _ in range(rng.randint(1, 3)):
        rs = req.resource_spans.add()
        if rng.random() < 0.7:
            rs.resource.attributes.add(key="service.name").value.string_value = "agent"
        rs.schema_url = rng.choice(["", "https://opentelemetry.io/schemas/1.30.0"])
        for _ in range(rng.randint(0, 2)):
            ss = rs.scope_spans.add()
            if rng.random() < 0.5:
                ss.scope.name = "opentelemetry.instrumentation.openai_v2"
            for _ in range(rng.randint(0, 4)):
                ss.spans.append(_span(rng))
    _same(req)
    # and after a wire round trip, as the receiver sees it
    _same(ExportTraceServiceRequest.FromString(req.SerializeToString()))


def test_types_it_does_not_plan_for_go_to_message_to_dict() -> None:
    resp = ExportTraceServiceResponse()
    resp.partial_success.rejected_spans = 2
    resp.partial_success.error_message = "bad JSON"
    _same(resp)
    status = status_pb2.Status(code=3, message="x")
    status.details.add().Pack(status_pb2.Status(code=1))  # a google.protobuf.Any inside
    assert message_to_dict(status) == MessageToDict(status)
