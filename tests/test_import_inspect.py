"""Inspect AI eval logs imported as one trace per model event (``formats/inspect_ai.py``).

The samples in ``tests/fixtures/imports/inspect`` are logs Inspect wrote for its own tests
(``SOURCES.md``): two ``.json`` logs and two ``.eval`` zips, one of them keeping its messages
once in a message pool. ``EXPECTED.json`` holds their hand counts, event by event.
"""

from __future__ import annotations

import json
import zipfile
from collections import Counter
from pathlib import Path

import pytest
from test_import_sessions import EXPECTED, FIXTURES, LOSS_ONLY, _check_sums

from ctxcore.cli import main
from ctxcore.diagnostics import diagnose
from ctxcore.errors import ImportFormatError
from ctxcore.formats import registry
from ctxcore.formats.accounting import imported_counts
from ctxcore.formats.load import iter_traces, load_file

INSPECT = sorted(n for n in EXPECTED if n.startswith("inspect/"))
COUNTS = ("messages", "system_parts", "tool_calls", "tool_results", "tools")


@pytest.mark.parametrize("name", INSPECT)
def test_one_trace_per_model_event_with_its_input_tools_output_and_usage(name: str) -> None:
    exp = EXPECTED[name]
    traces = load_file(FIXTURES / name)
    assert len(traces) == exp["model_calls"]
    sessions: dict[str, list[int]] = {}
    for t, counts in zip(traces, exp["calls"], strict=True):
        sessions.setdefault(t.session_id, []).append(t.turn)
        meta = t.metadata["import"]
        assert meta["format"] == "inspect"
        assert {k: meta["source"][k] for k in COUNTS} == counts
        assert meta["source"] == imported_counts(t)
        assert "kept_as_text" not in meta and "skipped" not in meta
        assert t.builder.name == "import/inspect"
        assert t.outcome is not None and t.outcome.output  # the event's reply
        _check_sums(t)
        assert not diagnose(t, options=LOSS_ONLY)
    assert len(sessions) == exp["samples"]
    assert all(turns == list(range(len(turns))) for turns in sessions.values())
    calls = [c for t in traces for c in t.metadata["session_log"].get("tool_calls", [])]
    assert Counter(c["name"] for c in calls) == exp["tool_calls_by_name"]
    if exp["usage"] is None:  # absent stays absent
        assert all(t.outcome is not None and t.outcome.usage == {} for t in traces)
    else:
        for key, total in exp["usage"].items():
            assert sum(t.outcome.usage[key] for t in traces if t.outcome) == total, key


@pytest.mark.parametrize("name", INSPECT)
def test_tool_calls_and_results_stay_structured(name: str) -> None:
    exp = EXPECTED[name]
    traces = load_file(FIXTURES / name)
    last = traces[-1]
    results = [p for p in last.input.packets if p.kind == "tool_result"]
    assert len(results) == exp["tool_results"]
    made = {c["id"] for t in traces for c in t.metadata["session_log"].get("tool_calls", [])}
    for p in results:  # each result answers a call a reply made, by its id and name
        assert p.id.removeprefix("tool:") in made
        assert p.metadata["name"] in exp["tool_calls_by_name"]
    assert len(last.input.tools) == exp["tool_definitions"]
    assert all(not m.content.startswith("attachment://") for m in last.input.history)
    assert not any(p.content.startswith("attachment://") for p in last.input.packets)


def test_an_eval_zip_is_sniffed_and_read_sample_by_sample(tmp_path: Path) -> None:
    """A .eval is a zip: told by its first bytes whatever its name, and a sample that cannot
    be read is that sample's error while the others import."""
    src = FIXTURES / "inspect" / "mmlu-gpt-4o.eval"
    p = tmp_path / "run.zip"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(p, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info, zin.read(info))
        zout.writestr("samples/2_epoch_1.json", '{"id": 2, "epoch": 1, "events": [')
    head = p.read_bytes()[: registry.SNIFF_BYTES]
    assert registry.sniff_file(p.name, head) is registry.get("inspect")
    traces = load_file(p)
    assert len(traces) == EXPECTED["inspect/mmlu-gpt-4o.eval"]["model_calls"]
    skipped = traces[-1].metadata["import"]["skipped"]
    assert len(skipped) == 1
    assert skipped[0].startswith(f"{p}: samples/2_epoch_1.json: ")
    assert "malformed JSON" in skipped[0]


def test_a_broken_model_event_is_one_error_and_the_rest_imports(tmp_path: Path) -> None:
    name = "inspect/browser-gpt-4o-mini-tools.json"
    data = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    events = data["samples"][0]["events"]
    at = [k for k, e in enumerate(events) if e["event"] == "model"][2]
    events[at]["input"][1]["role"] = "robot"
    p = tmp_path / "log.json"
    p.write_text(json.dumps(data), encoding="utf-8")
    traces = load_file(p)
    assert len(traces) == EXPECTED[name]["model_calls"] - 1
    [error] = [e for t in traces for e in t.metadata["import"].get("skipped", [])]
    assert error == f"{p}: samples[0].events[{at}].input[1].role: not an Inspect role ('robot')"


def test_through_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = "inspect/message-deduplication-tool-loop.eval"
    out = tmp_path / "t.jsonl"
    assert main(["import", str(FIXTURES / name), "-o", str(out)]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == EXPECTED[name]["model_calls"]
    said = capsys.readouterr()
    assert "(inspect)" in said.out + said.err


def test_a_log_without_events_says_why_in_one_line(tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "inspect/security-guide-gpt-4o-mini.json").read_text())
    for s in data["samples"]:
        del s["events"]
    p = tmp_path / "old.json"
    p.write_text(json.dumps(data))
    with pytest.raises(ImportFormatError, match="no model event recorded") as exc:
        list(iter_traces(p))
    assert "\n" not in str(exc.value)
