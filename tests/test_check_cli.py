"""``ctxscope check FILE... [--fail-on SEVERITY]``: one line per finding, CI exit codes.

Exit codes are checked through a real subprocess (``python -m ctxcore check``); output
details in-process through ``ctxcore.cli.main``.
"""

from __future__ import annotations

import gzip
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ctxcore.cli import main
from ctxcore.models import CapturedInput, Config, Message, Packet, Trace
from ctxcore.pipeline import build_trace

ROOT = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 1, 16, 12, 0, tzinfo=UTC)
QUERY = "fix qualname autodoc failure"
LINE = re.compile(
    r"^(?P<file>[^:]+):(?P<trace>[^:]+): (?P<sev>info|warning|error) (?P<det>[a-z_]+): .+$"
)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "ctxcore", "check", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def packets(
    corpus: Path, *, must_keep: bool = False, unlabelled: bool = False, clean: bool = False
) -> list[Packet]:
    grep = (
        QUERY
        + "\n"
        + (corpus / "d04_grep_r_qualname_sphinx.txt").read_text(encoding="utf-8")[:6000]
    )
    failure = (
        "fix qualname\n"
        + (corpus / "d01_pytest_reportingdemo_44_failures.rst").read_text(encoding="utf-8")[:3000]
    )
    out = [
        Packet(
            id="0" if unlabelled else "tool:grep",
            kind="tool_result",
            content=grep,
            timestamp=NOW,
            metadata={} if unlabelled else {"command": "grep -r __qualname__ sphinx"},
        ),
        Packet(
            id="tool:pytest",
            kind="tool_result",
            content=failure,
            timestamp=NOW - timedelta(minutes=30),
            must_keep=must_keep,
            metadata={"command": "pytest"},
        ),
    ]
    return out[1:] if clean else out  # the grep output is over half repeated lines


def trace(corpus: Path, trace_id: str, max_tokens: int, turn: int = 0, **kw: object) -> Trace:
    history = kw.pop("history", [])
    inp = CapturedInput(query=QUERY, now=NOW, history=history, packets=packets(corpus, **kw))  # type: ignore[arg-type]
    return build_trace(
        inp,
        Config(preset="hello-agents", max_tokens=max_tokens),
        trace_id=trace_id,
        session_id="sess",
        turn=turn,
    )


def test_clean_trace_exits_0(corpus: Path, tmp_path: Path) -> None:
    f = tmp_path / "clean.json"
    f.write_text(trace(corpus, "clean", 20_000, clean=True).to_json(), encoding="utf-8")
    proc = run_cli(str(f))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert "1 trace(s): 0 error(s)" in proc.stderr


def test_error_findings_exit_1_one_line_each(corpus: Path, tmp_path: Path) -> None:
    f = tmp_path / "session.jsonl"
    lines = [
        trace(corpus, "t-ok", 20_000, turn=1, must_keep=True).to_json(),
        trace(corpus, "t-bad", 2500, turn=2, must_keep=True).to_json(),
    ]
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    proc = run_cli(str(f))
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout.splitlines()
    assert out and all(LINE.match(line) for line in out), out
    errors = [line for line in out if " error must_have_lost: " in line]
    assert len(errors) == 1
    assert errors[0].startswith(
        f"{f}:t-bad: error must_have_lost: must-keep packet tool:pytest was dropped"
    )
    assert re.search(r" \(fix: max_tokens \+[\d,]+\) \[tool:pytest\]$", errors[0])
    assert not any(":t-ok:" in line and " error " in line for line in out)


@pytest.mark.slow
def test_fail_on_sets_the_threshold(corpus: Path, tmp_path: Path) -> None:
    f = tmp_path / "warn.json"
    f.write_text(trace(corpus, "warn", 20_000, unlabelled=True).to_json(), encoding="utf-8")
    assert run_cli(str(f)).returncode == 0  # only warnings; the default threshold is error
    proc = run_cli(str(f), "--fail-on", "warning")
    assert proc.returncode == 1
    assert f"{f}:warn: warning unlabelled_evidence:" in proc.stdout


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"schema": "ctxscope.trace/1", "trace_id": ', "malformed JSON at column 44"),
        ('{"schema": "ctxscope.trace/9", "trace_id": "x"}', "unsupported schema"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path: Path, content: str, expected: str) -> None:
    f = tmp_path / "bad.json"
    f.write_text(content, encoding="utf-8")
    proc = run_cli(str(f))
    assert proc.returncode == 2
    assert proc.stdout == ""
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ctxscope check: error: ") and expected in err[0]
    assert str(f) in err[0]


def test_missing_file_and_folder_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tmp_path / "nope.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["check", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_bad_line_in_jsonl_names_the_line_and_the_others_are_checked(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "mixed.jsonl"
    a = trace(corpus, "a", 2500, must_keep=True).to_json()
    f.write_text(a + "\n{oops\n", encoding="utf-8")
    assert main(["check", str(f)]) == 2
    captured = capsys.readouterr()
    assert f"{f}:a: error must_have_lost: " in captured.out  # line 1 is checked
    assert f"ctxscope check: error: {f}:2: malformed JSON at column 2" in captured.err


def test_gzip_and_lists_are_read(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    t = trace(corpus, "gz", 2500, must_keep=True)
    gz = tmp_path / "t.jsonl.gz"
    gz.write_bytes(gzip.compress((t.to_json() + "\n").encode()))
    lst = tmp_path / "list.json"
    lst.write_text("[" + trace(corpus, "l0", 20_000).to_json() + "]", encoding="utf-8")
    assert main(["check", str(gz), str(lst)]) == 1
    out = capsys.readouterr()
    assert f"{gz}:gz: error must_have_lost" in out.out
    assert "2 trace(s)" in out.err


def test_constraint_lost_across_lines_of_one_session(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    said = Message(role="user", content="Fix it, but never modify files under tests/.")
    t1 = trace(corpus, "turn1", 20_000, turn=1, history=[said])
    t2 = trace(corpus, "turn2", 20_000, turn=2)  # the agent dropped the old message itself
    f = tmp_path / "s.jsonl"
    f.write_text(t2.to_json() + "\n" + t1.to_json() + "\n", encoding="utf-8")
    assert main(["check", str(f), "--fail-on", "warning"]) == 1
    out = capsys.readouterr().out
    said_text = "'Fix it, but never modify files under tests/.'"
    expected = f"{f}:turn2: warning must_have_lost: the user constraint {said_text} from turn 1"
    assert expected + " is missing from the prompt" in out


def test_captured_input_is_built_with_the_default_preset(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "input.json"
    inp = CapturedInput(query=QUERY, now=NOW, packets=packets(corpus, unlabelled=True))
    f.write_text(inp.model_dump_json(), encoding="utf-8")
    assert main(["check", str(f), "--fail-on", "warning"]) == 1
    out = capsys.readouterr().out
    assert f"{f}:input.json: warning unlabelled_evidence:" in out


def test_exported_snapshot_is_checked(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ctxcore.formats.share import snapshot_json

    f = tmp_path / "shared.json"
    f.write_text(snapshot_json([trace(corpus, "snap", 2500, must_keep=True)]), encoding="utf-8")
    assert main(["check", str(f)]) == 1
    assert (
        f"{f}:snap: error must_have_lost: must-keep packet tool:pytest" in capsys.readouterr().out
    )
