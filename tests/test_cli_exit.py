"""The ``ctxscope`` command ends ``import -o`` without the interpreter's teardown once its
output is written (``cli.run``; docs/design.md, "Capture, import, export, redaction"): the
output is whole and the same as ``main``'s in process, and any other command, or an import
that leaves a thread or an exit handler behind, exits as ever."""

from __future__ import annotations

import argparse
import atexit
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from ctxcore import cli

ROOT = Path(__file__).resolve().parent.parent
LOG = (
    ROOT
    / "tests"
    / "fixtures"
    / "imports"
    / "claude-code"
    / "ccviewer-task-sidechain-session.jsonl"
)


def _untimed(path: Path) -> list[Any]:
    """The traces written, without their build timings (the only values two runs differ by)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        obj = json.loads(line)
        result = obj.get("trace", {}).get("result")
        if result is not None:
            result.pop("timings", None)
        out.append(obj)
    return out


def test_import_o_by_the_command_writes_what_main_writes(tmp_path: Path) -> None:
    # a long log, so that the counting process runs too (its pipes, its kill at the end)
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_import import build

    log = tmp_path / "long.jsonl"
    build(log, 300, 3.0, 150_000)
    for src in (LOG, log):
        by_command = tmp_path / f"{src.stem}.command.jsonl"
        in_process = tmp_path / f"{src.stem}.main.jsonl"
        done = subprocess.run(
            [sys.executable, "-m", "ctxcore", "import", str(src), "-o", str(by_command)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert f"-> {by_command}" in done.stdout  # the summary flushed before the end
        assert cli.main(["import", str(src), "-o", str(in_process)]) == 0
        want = _untimed(in_process)
        assert len(want) > 1 and _untimed(by_command) == want


def test_import_to_stdout_reaches_the_pipe_whole(tmp_path: Path) -> None:
    in_process = tmp_path / "main.jsonl"
    assert cli.main(["import", str(LOG), "-o", str(in_process)]) == 0
    done = subprocess.run(
        [sys.executable, "-m", "ctxcore", "import", str(LOG), "-o", "-"],
        capture_output=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = tmp_path / "stdout.jsonl"
    got.write_bytes(done.stdout)
    assert _untimed(got) == _untimed(in_process)


def _args(*argv: str) -> argparse.Namespace:
    return cli.make_parser().parse_args(list(argv))


def test_only_an_import_o_that_leaves_nothing_behind_ends_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # this test process's own threads and exit handlers (pytest's) set aside
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setattr(atexit, "_ncallbacks", lambda: 0)
    assert cli._ends_at_once(_args("import", str(LOG), "-o", "out.jsonl"))
    assert not cli._ends_at_once(_args("import", str(LOG), "--db", "s.duckdb"))
    assert not cli._ends_at_once(_args("check", str(LOG)))
    with monkeypatch.context() as m:  # a thread still running (its work would be cut short)
        m.setattr(threading, "active_count", lambda: 2)
        assert not cli._ends_at_once(_args("import", str(LOG), "-o", "out.jsonl"))
    with monkeypatch.context() as m:  # something to run at exit
        m.setattr(atexit, "_ncallbacks", lambda: 1)
        assert not cli._ends_at_once(_args("import", str(LOG), "-o", "out.jsonl"))

    class Closed:
        def flush(self) -> None:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", Closed())
    assert not cli._ends_at_once(_args("import", str(LOG), "-o", "-"))
