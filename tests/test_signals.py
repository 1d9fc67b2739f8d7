"""The ctxscope preset's signals, floors and the fresh-evidence detectors (issue 13)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ctxcore.diagnostics import diagnose
from ctxcore.models import CapturedInput, Config, Decision, Message, Packet, Reason, Status
from ctxcore.pipeline import build, build_trace
from ctxcore.pipeline.signals import entities, lexical_overlap, query_stems, stem, word_parts
from ctxcore.summarize import error_evidence

NOW = datetime(2026, 1, 24, 14, 0, tzinfo=UTC)
IN = (Status.KEPT, Status.TRUNCATED, Status.SUMMARIZED)
FAILED = "FAILED tests/test_api.py::test_login - AssertionError: expected 200, got 500"


def _read(corpus: Path, name: str) -> str:
    return (corpus / name).read_bytes().decode("utf-8")


def _p(pid: str, kind: str, content: str, minutes: float = 5.0, **kw: object) -> Packet:
    return Packet(
        id=pid, kind=kind, content=content, timestamp=NOW - timedelta(minutes=minutes), **kw
    )


def _by_id(decisions: list[Decision]) -> dict[str, Decision]:
    return {d.packet_id: d for d in decisions}


def _signals(d: Decision) -> list[str]:
    return [n.removeprefix("signal:") for n in d.notes if n.startswith("signal:")]


def _findings(inp: CapturedInput, preset: str) -> dict[str, list[str]]:
    t = build_trace(inp, Config(preset=preset))
    out: dict[str, list[str]] = {}
    for f in diagnose(t):
        out.setdefault(f.detector, []).extend(f.packet_ids)
    return out


# --------------------------------------------------------------------------- building blocks


def test_stems_and_identifier_splitting() -> None:
    assert {stem(w) for w in ("fail", "failing", "failed", "FAILED", "fails")} == {"fail"}
    assert stem("tests") == stem("testing") == "test"
    assert word_parts("test_login getUserName src/api.py") == [
        "test", "login", "get", "User", "Name", "src", "api", "py",
    ]  # fmt: skip
    assert query_stems("fix the failing test") == ("fix", "fail", "test")
    share = lexical_overlap(("fail", "test"), [FAILED, "all green", "def testLogin(): pass"])
    assert share.tolist() == [1.0, 0.0, 0.5]


def test_entities_of_a_user_message() -> None:
    ents = entities(
        "Why does `Schema.load` fail in src/marshmallow/fields.py for test_nested_only? "
        "See #1867 and the error 'Invalid input type'."
    )
    assert {"schema.load", "src/marshmallow/fields.py", "fields.py", "test_nested_only"} <= ents
    assert {"#1867", "invalid input type"} <= ents


def test_error_evidence_lines(corpus: Path) -> None:
    tsc = _read(corpus, "d09_tsc_output_first1500_of_18741_errors.txt")[:2000]
    assert any("error TS" in ln for ln in error_evidence(tsc))
    tb = 'Traceback (most recent call last):\n  File "app.py", line 3, in <module>\nKeyError: 1'
    assert error_evidence(tb) == [
        "Traceback (most recent call last):",
        'File "app.py", line 3, in <module>',
        "KeyError: 1",
    ]
    assert error_evidence("Successfully installed marshmallow-3.0.0") == []


# --------------------------------------------------------------------------- each signal


def test_signal_error_on_a_real_pytest_report(corpus: Path) -> None:
    report = _read(corpus, "d01_pytest_reportingdemo_44_failures.rst")[:4000]
    inp = CapturedInput(
        query="what should I look at next",
        now=NOW,
        history=[Message(role="user", content="run the tests", timestamp=NOW)],
        packets=[_p("tool:pytest", "tool_result", report, minutes=30)],
    )
    d = _by_id(build(inp).decisions)["tool:pytest"]
    assert d.status in IN and "error" in _signals(d)
    assert "error evidence (" in d.reason_text


def test_signal_current_turn_after_the_last_user_message() -> None:
    inp = CapturedInput(
        query="and now?",
        now=NOW,
        history=[
            Message(role="user", content="list the files", timestamp=NOW - timedelta(hours=1))
        ],
        packets=[
            _p("tool:old", "tool_result", "README.md setup.py", minutes=120),
            _p("tool:ls", "tool_result", "src tests docs", minutes=30),
            _p("tool:cat", "tool_result", "version = 3", minutes=10),
        ],
    )
    d = _by_id(build(inp).decisions)
    assert "current_turn" not in _signals(d["tool:old"])
    assert "current turn (after the last user message)" in d["tool:ls"].reason_text
    assert "current turn (result of the last tool call)" in d["tool:cat"].reason_text


def test_signal_mention_and_reference(corpus: Path) -> None:
    fields = "class Nested(Field):\n    def _deserialize(self, value):\n        return value\n"
    schema = "class Schema:\n    def load(self, data):\n        ...\n"
    other = "def unrelated():\n    return 1\n"
    inp = CapturedInput(
        query="fix it",
        now=NOW,
        history=[
            Message(role="user", content="The bug is in src/marshmallow/fields.py", timestamp=NOW),
            Message(
                role="assistant", content="Let me open src/marshmallow/schema.py", timestamp=NOW
            ),
        ],
        packets=[
            _p("file:src/marshmallow/fields.py", "file", fields),
            _p("file:src/marshmallow/schema.py", "file", schema),
            _p("file:src/other.py", "file", other),
        ],
    )
    d = _by_id(build(inp).decisions)
    assert "mention" in _signals(d["file:src/marshmallow/fields.py"])
    assert "reference" in _signals(d["file:src/marshmallow/schema.py"])
    assert not _signals(d["file:src/other.py"])
    assert d["file:src/other.py"].reason == Reason.BELOW_MIN_RELEVANCE


def test_signal_metadata_and_test_module_link() -> None:
    inp = CapturedInput(
        query="why is login broken",
        now=NOW,
        packets=[
            _p("tool:run", "tool_result", FAILED),
            _p("file:src/api.py", "file", "def handler():\n    return 500\n"),
            _p("file:tests/test_api.py", "file", "def test_login():\n    assert True\n"),
            _p("doc:hits", "retrieval", "handler docs", metadata={"search_hits": 3}),
            _p("doc:mod", "file", "x = 1", metadata={"modified_at": "2026-01-24T13:30:00Z"}),
            _p("doc:link", "file", "y = 2", metadata={"linked_test": "tests/test_y.py"}),
        ],
    )
    d = _by_id(build(inp).decisions)
    assert "metadata" in _signals(d["file:src/api.py"])  # the module of a failing test file
    assert "test ↔ module" in d["file:src/api.py"].reason_text
    for pid, words in (
        ("doc:hits", "search_hits 3"),
        ("doc:mod", "recently modified"),
        ("doc:link", "linked_test"),
    ):
        assert "metadata" in _signals(d[pid]) and words in d[pid].reason_text


def test_lexical_signal_matches_word_forms_and_cjk_stays_bm25(corpus: Path) -> None:
    inp = CapturedInput(
        query="fix the failing login test",
        now=NOW,
        history=[Message(role="user", content="hi", timestamp=NOW - timedelta(hours=2))],
        packets=[
            _p("note:a", "note", "testLogin failed twice yesterday", minutes=300),
            _p("note:b", "note", "the weather is nice", minutes=300),
        ],
    )
    d = _by_id(build(inp).decisions)
    assert d["note:a"].relevance == 0.0  # BM25 sees no shared word
    assert "lexical" in _signals(d["note:a"]) and d["note:a"].status in IN
    assert d["note:b"].reason == Reason.BELOW_MIN_RELEVANCE
    zh = _read(corpus, "d06_jest_failure_zh_xresolver.log")
    r = build(CapturedInput(query="测试失败", now=NOW, packets=[_p("tool:jest", "log", zh)]))
    assert _by_id(r.decisions)["tool:jest"].relevance > 0  # type: ignore[operator]


def test_weights_are_knobs() -> None:
    inp = CapturedInput(
        query="fix the failing test", now=NOW, packets=[_p("tool:t", "log", FAILED)]
    )
    base = _by_id(build(inp).decisions)["tool:t"].score
    off = Config(current_turn_weight=0, error_weight=0, mention_weight=0, lexical_weight=0)
    less = _by_id(build(inp, off).decisions)["tool:t"].score
    assert base is not None and less is not None and base > less
    with pytest.raises(Exception, match="has no error_weight"):
        build(inp, Config(preset="hello-agents", error_weight=0.5))


# --------------------------------------------------------------------------- floors


def test_floor_summarizes_the_latest_error_output_instead_of_dropping(corpus: Path) -> None:
    report = _read(corpus, "d01_pytest_reportingdemo_44_failures.rst")
    filler = [_p(f"doc:{k}", "retrieval", "fix failing test " * 200, minutes=1) for k in range(6)]
    inp = CapturedInput(
        query="fix the failing test",
        now=NOW,
        packets=[*filler, _p("tool:pytest", "tool_result", report, minutes=2)],
    )
    r = build(inp, Config(max_tokens=4000))
    d = _by_id(r.decisions)["tool:pytest"]
    assert d.status == Status.SUMMARIZED and d.reason == Reason.DEGRADED
    assert any("shortened rather than dropped" in n for n in d.notes)
    assert "tool:pytest" in r.prompt and "FAILED" in r.prompt or "Error" in r.prompt


# --------------------------------------------------------------------------- the issue's cases


def test_issue_case_failing_test_and_copies_is_kept() -> None:
    packets = [Packet(id=f"tool:{k}", kind="tool_result", content=FAILED) for k in range(4)]
    inp = CapturedInput(query="fix the failing test", now=NOW, packets=packets)
    d = _by_id(build(inp).decisions)
    assert d["tool:0"].status == Status.KEPT
    assert "error evidence (FAILED tests/test_api.py::test_login" in d["tool:0"].reason_text
    assert {d[f"tool:{k}"].reason for k in (1, 2, 3)} == {Reason.DUPLICATE}
    assert _findings(inp, "ctxscope").keys().isdisjoint({"evidence_starved", "error_evidence_lost"})
    for preset in ("hello-agents", "hello-agents-book"):
        found = _findings(inp, preset)
        assert found["error_evidence_lost"] == ["tool:0", "tool:1", "tool:2", "tool:3"]
        assert found["evidence_starved"] == ["tool:0", "tool:1", "tool:2", "tool:3"]


def test_issue_case_readme_is_kept() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text("utf-8")[:3000]
    inp = CapturedInput(
        query="summarise the README",
        now=NOW,
        packets=[Packet(id="tool:read", kind="tool_result", content=readme)],
    )
    d = _by_id(build(inp).decisions)["tool:read"]
    assert d.status in IN and "current turn (result of the last tool call)" in d.reason_text


def test_issue_case_imported_request_keeps_the_tool_result() -> None:
    from ctxcore.formats.openai import captured_input_from_messages

    inp = captured_input_from_messages(
        [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What's the weather like in Boston today?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Boston"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "50 degrees and raining"},
        ],
        now=NOW,
    )
    tool = inp.packets[0].id
    d = _by_id(build(inp).decisions)[tool]
    assert d.status == Status.KEPT and "current turn" in d.reason_text
    assert _findings(inp, "hello-agents")["evidence_starved"] == [tool]


def test_score_scatter_marks_the_strongest_signal() -> None:
    from ctxcore.figures import score_scatter, strongest_signal

    packets = [Packet(id=f"tool:{k}", kind="tool_result", content=FAILED) for k in range(2)]
    t = build_trace(CapturedInput(query="fix the failing test", now=NOW, packets=packets))
    assert t.result is not None
    assert strongest_signal(_by_id(t.result.decisions)["tool:0"]) == "error"
    fig = score_scatter(t)
    symbols = [s for tr in fig.data if tr.marker.symbol is not None for s in tr.marker.symbol]
    assert "x" in symbols  # error evidence
    assert any(tr.name == "strongest signal: error evidence" for tr in fig.data)
