"""Bad input to `ctxscope build`: one clear line naming what and where, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxcore.cli import main, parse_set

ROOT = Path(__file__).resolve().parent.parent


def good_input() -> dict[str, Any]:
    return {
        "query": "why does the build fail",
        "now": "2026-11-29T12:00:00Z",
        "system_instructions": "You are a coding agent.",
        "history": [{"role": "user", "content": "fix it"}],
        "packets": [
            {"id": "tool:call_1", "kind": "tool_result", "content": "FAILED test_a"},
            {"id": "file:src/a.py", "kind": "file", "content": "def a():\n    return 1\n"},
        ],
    }


def run_build(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], payload: bytes | str, *extra: str
) -> tuple[int, str, str]:
    f = tmp_path / "input.json"
    f.write_bytes(payload.encode() if isinstance(payload, str) else payload)
    rc = main(["build", str(f), *extra])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line_error(rc: int, err: str, *needles: str) -> None:
    assert rc != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], lines[0]


def mutate(**changes: Any) -> str:
    data = good_input()
    for path, value in changes.items():
        node: Any = data
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[int(k)] if k.isdigit() else node[k]
        last = keys[-1]
        if last.isdigit():
            node[int(last)] = value
        else:
            node[last] = value
    return json.dumps(data)


def test_malformed_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run_build(tmp_path, capsys, '{"query": "x",\n "now": }')
    assert_one_line_error(rc, err, "input.json", "malformed JSON at line 2 column")


def test_wrong_type_names_packet_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = run_build(tmp_path, capsys, mutate(packets__0__priority="high"))
    assert_one_line_error(rc, err, "packet 'tool:call_1'", "'priority'")


def test_missing_packet_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = good_input()
    del data["packets"][1]["id"]
    rc, _, err = run_build(tmp_path, capsys, json.dumps(data))
    assert_one_line_error(rc, err, "packets[1]", "'id'", "Field required")


def test_duplicate_packet_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run_build(tmp_path, capsys, mutate(packets__1__id="tool:call_1"))
    assert_one_line_error(rc, err, "duplicate packet id 'tool:call_1'", "packets[0]", "packets[1]")


def test_nan_score_in_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = mutate(packets__0__relevance=0.5).replace('"relevance": 0.5', '"relevance": NaN')
    rc, _, err = run_build(tmp_path, capsys, text)
    assert_one_line_error(rc, err, "NaN")


def test_naive_timestamp(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run_build(tmp_path, capsys, mutate(packets__0__timestamp="2026-11-29T11:00:00"))
    assert_one_line_error(rc, err, "packet 'tool:call_1'", "'timestamp'", "timezone")


def test_naive_now(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run_build(tmp_path, capsys, mutate(now="2026-11-29T12:00:00"))
    assert_one_line_error(rc, err, "'now'", "timezone")


def test_negative_budget_from_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run_build(tmp_path, capsys, json.dumps(good_input()), "--set", "max_tokens=-5")
    assert_one_line_error(rc, err, "'max_tokens'", "greater than 0")


def test_negative_output_reserve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run_build(tmp_path, capsys, mutate(output_reserve=-100))
    assert_one_line_error(rc, err, "'output_reserve'")


def test_weights_must_sum_to_one_for_the_book_preset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = run_build(
        tmp_path,
        capsys,
        json.dumps(good_input()),
        "--preset",
        "hello-agents-book",
        "--set",
        "relevance_weight=0.8",
        "--set",
        "recency_weight=0.3",
    )
    assert_one_line_error(rc, err, "relevance_weight", "recency_weight", "sum to 1")


def test_fifty_megabyte_packet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = "x" * (50 * 1024 * 1024)
    rc, _, err = run_build(tmp_path, capsys, mutate(packets__1__content=big))
    assert_one_line_error(rc, err, "packet 'file:src/a.py'", "'content'", "52,428,800 characters")


def test_invalid_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    payload = mutate(query="QQQ").encode().replace(b"QQQ", b"ok \xff\xfe bad")
    rc, _, err = run_build(tmp_path, capsys, payload)
    assert_one_line_error(rc, err, "invalid UTF-8 at byte", "line 1")


def test_unknown_preset_and_knob(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run_build(tmp_path, capsys, json.dumps(good_input()), "--set", "max_tokenz=5")
    assert_one_line_error(rc, err, "'max_tokenz'", "unknown field")


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["build", str(tmp_path / "nope.json")])
    _, err = capsys.readouterr()
    assert_one_line_error(rc, err, "nope.json", "cannot read")


def test_set_values_are_json_when_they_parse() -> None:
    assert parse_set(["max_tokens=4000", "enable_compression=false", "fill=skip"]) == {
        "max_tokens": 4000,
        "enable_compression": False,
        "fill": "skip",
    }
    assert parse_set(["tokenizer=o200k_base", "min_relevance=0.25"]) == {
        "tokenizer": "o200k_base",
        "min_relevance": 0.25,
    }


def test_console_entry_point_exits_non_zero_with_one_line(tmp_path: Path) -> None:
    f = tmp_path / "bad.json"
    f.write_text('{"query": 1}')
    proc = subprocess.run(
        [sys.executable, "-m", "ctxcore", "build", str(f)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr
