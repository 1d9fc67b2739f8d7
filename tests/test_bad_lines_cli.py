"""A line ``check``, ``cost`` or ``replay`` cannot read is that line's error, and the rest of the
file is read, checked, costed or replayed exactly as it would be without that line
(``ctxcore/cli/bad_lines.py``; docs/design.md, "Command line").

The traces are the demo session ``zh-opencode-codesummary-ctxscope`` (ctxscope's bundled
demo data); the bad lines are what a crash mid-write, a hand edit or another tool leaves: a
line cut short, a field of the wrong type, a shared line whose parts are an array, text
that is not JSON.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import ctxcore.cli.bad_lines as bad_lines
from ctxcore.cli import main
from ctxcore.settings import MAX_ERRORS_PER_FILE

DEMO = Path(__file__).resolve().parent.parent / "ctxcore" / "data" / "demo"
SESSION = DEMO / "zh-opencode-codesummary-ctxscope.jsonl"


@pytest.fixture(scope="module")
def lines() -> list[str]:
    return [x for x in SESSION.read_text(encoding="utf-8").splitlines() if x.strip()][:8]


def _bad(lines: list[str]) -> list[str]:
    """Four bad lines of four kinds."""
    wrong = re.sub(r'"turn":\d+', '"turn":"four"', lines[1], count=1)
    assert wrong != lines[1]
    return [
        lines[0][: len(lines[0]) // 2],  # cut short
        wrong,
        '{"share":"ctxscope.share/1","parts":[1,2],"trace":{}}',
        "this is not JSON",
    ]


def _mixed(tmp_path: Path, lines: list[str]) -> tuple[Path, Path, list[int]]:
    """The good lines alone, and the same lines with a bad one after every other good one;
    the mixed file's bad line numbers (1-based)."""
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(lines) + "\n", encoding="utf-8")
    mixed: list[str] = []
    where: list[int] = []
    bad = iter(_bad(lines))
    for k, line in enumerate(lines):
        mixed.append(line)
        if k % 2 == 1:
            mixed.append(next(bad))
            where.append(len(mixed))
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(mixed) + "\n", encoding="utf-8")
    return good, path, where


def _named(err: str, command: str, path: Path) -> list[int]:
    """The line numbers of ``path`` the command's errors name, in order."""
    pattern = re.compile(rf"^ctxscope {command}: error: {re.escape(str(path))}:(\d+): \S")
    return [int(m[1]) for line in err.splitlines() if (m := pattern.match(line))]


def test_check_reports_every_good_line_and_names_each_bad_one(
    tmp_path: Path, lines: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    good, mixed, where = _mixed(tmp_path, lines)
    assert main(["check", str(good), "--fail-on", "info"]) == 1  # the demo has findings
    alone = capsys.readouterr()
    assert alone.out
    assert main(["check", str(mixed), "--fail-on", "info"]) == 2
    got = capsys.readouterr()
    # every finding of the good lines, as checking them alone gives them
    assert got.out == alone.out.replace(str(good), str(mixed))
    assert _named(got.err, "check", mixed) == where
    summary = got.err.strip().splitlines()[-1]
    assert summary.startswith(f"ctxscope check: {len(lines)} trace(s): ")
    assert summary.endswith(f"; {len(where)} line(s) could not be read (said above)")


def test_checks_exit_code_says_bad_input_whatever_the_findings(
    tmp_path: Path, lines: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, mixed, _ = _mixed(tmp_path, lines)
    # no finding reaches the threshold: still 2, the gate did not see every trace
    assert main(["check", str(mixed), "--fail-on", "error"]) == 2
    assert "line(s) could not be read" in capsys.readouterr().err


def test_cost_costs_every_good_line_and_names_each_bad_one(
    tmp_path: Path, lines: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    good, mixed, where = _mixed(tmp_path, lines)
    assert main(["cost", str(good)]) == 0
    alone = capsys.readouterr().out
    assert main(["cost", str(mixed)]) == 1
    got = capsys.readouterr()
    assert got.out == alone
    assert _named(got.err, "cost", mixed) == where
    assert main(["cost", str(good), "--json"]) == 0
    calls = capsys.readouterr().out
    assert len(calls.splitlines()) == len(lines)
    assert main(["cost", str(mixed), "--json"]) == 1
    assert capsys.readouterr().out == calls  # JSON lines: the errors go to stderr only


def test_the_first_bad_lines_of_a_file_are_said_and_the_rest_counted(
    tmp_path: Path,
    lines: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bad_lines, "MAX_ERRORS_PER_FILE", 3)
    path = tmp_path / "many.jsonl"
    path.write_text(lines[0] + "\n" + "{oops\n" * 10 + lines[1] + "\n", encoding="utf-8")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert _named(err, "check", path) == [2, 3, 4]
    assert f"ctxscope check: error: {path}: 7 more bad lines not listed" in err
    assert "2 trace(s)" in err and "10 line(s) could not be read" in err
    assert main(["cost", str(path)]) == 1
    err = capsys.readouterr().err
    assert _named(err, "cost", path) == [2, 3, 4]
    assert f"ctxscope cost: error: {path}: 7 more bad lines not listed" in err


def test_replay_keeps_the_first_bad_lines_of_a_file_and_counts_the_rest(
    tmp_path: Path, lines: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    n = MAX_ERRORS_PER_FILE + 5
    path = tmp_path / "many.jsonl"
    path.write_text("\n".join([*lines[:3], *["{oops"] * n]) + "\n", encoding="utf-8")
    args = ["replay", str(path), "--set", "max_tokens=4000", "--no-findings", "--format", "json"]
    assert main([*args, "--fail-on", "never"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["turns"]) == 3
    messages = [e["message"] for e in out["errors"]]
    assert len(messages) == MAX_ERRORS_PER_FILE + 1
    assert messages[0].startswith(f"{path}:4: malformed JSON at column 2")
    assert messages[-1] == f"{path}: 5 more bad lines not listed"


def test_a_one_line_json_error_names_its_column_and_a_document_its_line(tmp_path: Path) -> None:
    from ctxcore.errors import InputError
    from ctxcore.loading import parse_json

    with pytest.raises(InputError, match=r"^f\.jsonl:7: malformed JSON at column 7: "):
        parse_json('{"a": nope}', "f.jsonl:7")
    with pytest.raises(InputError, match=r"^f\.json: malformed JSON at line 2 column 7: "):
        parse_json('{\n "a": nope}', "f.json")
