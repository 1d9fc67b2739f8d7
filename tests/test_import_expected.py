"""Every row of ``tests/fixtures/imports/EXPECTED.json``, whatever its format, through import.

The per-format tests check what each format holds in detail; this one holds every sample
(old and new, whoever added it) to the issue's bar: it is detected as its folder's format,
it imports into as many traces as the hand counts say it records calls, a request's counts
equal the hand counts, and no ``import_loss`` finding fires (docs/design.md, "Formats").
No row is skipped: a row whose file is missing, or a fixture file with no row, fails.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_format_registry import FOLDERS

from ctxcore.diagnostics import diagnose
from ctxcore.errors import ImportFormatError
from ctxcore.formats import registry
from ctxcore.formats.accounting import COUNTED
from ctxcore.formats.load import detect_format, load_file, traces_from_value
from ctxcore.models import Trace

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "imports"
EXPECTED: dict[str, dict[str, Any]] = json.loads((FIXTURES / "EXPECTED.json").read_text())["files"]
#: kinds of sample that are one call each: a request (with its response when there is one),
#: a LangGraph state (the request of its next call), a span's attributes
ONE_CALL = {"request", "response", "state", "span-attributes"}
#: the rows whose counts are a request's, compared with ``metadata.import.source``
REQUEST_COUNTS = {"request", "span-attributes"}


def _pair(path: Path, fmt: str) -> dict[str, Any]:
    """A request with the response it got: ``{"request", "response"}``, or (a chat
    completion log) the request with ``response`` beside its fields."""
    stem = str(path).removesuffix(".response.json").removesuffix(".request.json")
    request = json.loads(Path(stem + ".request.json").read_text())
    response = json.loads(Path(stem + ".response.json").read_text())
    pair = {"request": request, "response": response}
    return pair if registry.get(fmt).detects(pair) else {**request, "response": response}


def _traces(name: str, exp: dict[str, Any]) -> list[Trace]:
    path = FIXTURES / name
    fmt = FOLDERS[name.split("/")[0]]
    if exp["kind"] == "response":
        # a response is imported with the request it answers
        pair = _pair(path, fmt)
        assert detect_format(pair) == fmt
        traces = traces_from_value(pair, where=str(path))
        assert all(t.outcome is not None and t.outcome.output for t in traces)
        return traces
    if path.suffix == ".json":
        assert detect_format(json.loads(path.read_text())) == fmt
    return load_file(path)


def _hand_counts(exp: dict[str, Any]) -> dict[str, int]:
    """The counts of a request; a span whose conversation is only in ``input.value``: those
    read from it (``from_input_value``, ``*_in_input_value``)."""
    messages = exp["messages"].get("from_input_value", exp["messages"])
    return {
        "messages": messages["total"],
        "system_parts": exp["system_parts"],
        "tool_calls": exp.get("tool_calls_in_input_value", exp["tool_calls"]),
        "tool_results": exp.get("tool_results_in_input_value", exp["tool_results"]),
        "tools": exp["tool_definitions"],
        "media": exp["images"] + exp["documents"],
    }


def test_every_fixture_file_has_a_row() -> None:
    files = {
        str(p.relative_to(FIXTURES))
        for p in FIXTURES.rglob("*")
        if p.is_file() and p.parent != FIXTURES
    }
    assert sorted(files - set(EXPECTED)) == []


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_sample_imports_as_its_hand_counts_say(name: str) -> None:
    exp = EXPECTED[name]
    assert (FIXTURES / name).is_file(), f"{name}: the row names no file"
    folder = name.split("/")[0]
    assert folder in FOLDERS, f"{folder}: no format named for it in test_format_registry"
    calls = 1 if exp["kind"] in ONE_CALL else exp.get("model_calls_with_input", exp["model_calls"])
    if calls == 0:
        # an export that records no call's input is refused in one line naming what to turn on
        with pytest.raises(ImportFormatError, match=exp["refusal_names"]):
            _traces(name, exp)
        return
    traces = _traces(name, exp)
    assert len(traces) == calls
    if exp["kind"] in REQUEST_COUNTS and isinstance(exp.get("messages"), dict):
        source = traces[0].metadata["import"]["source"]
        assert {k: source[k] for k in COUNTED} == _hand_counts(exp)
    for t, counts in zip(traces, exp.get("calls", []), strict=False):
        # a file of several calls that counts each: the call's own counts, in file order
        source = t.metadata["import"]["source"]
        assert {k: source[k] for k in counts} == counts, f"{name}: turn {t.turn}"
    assert len(exp.get("calls", traces)) == len(traces)
    for t in traces:
        loss = [f.message for f in diagnose(t) if f.detector == "import_loss"]
        assert loss == [], f"{name}: turn {t.turn}: {loss}"
