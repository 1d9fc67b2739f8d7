"""Hostile values every command must refuse the same way: one line naming the file, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

INPUT = {
    "query": "why does test_login fail?",
    "now": "2026-01-01T00:00:00Z",
    "packets": [{"id": "tool:1", "kind": "tool_result", "content": "FAILED", "metadata": {}}],
}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxcore", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


@pytest.mark.parametrize("command", ["build", "check", "import"])
def test_a_number_too_large_for_a_float_is_refused_not_nulled(tmp_path: Path, command: str) -> None:
    path = tmp_path / "input.json"
    text = json.dumps(INPUT).replace('"metadata": {}', '"metadata": {"score": 1e400}')
    path.write_text(text)
    args = [command, str(path)]
    if command == "import":
        args += ["-o", str(tmp_path / "out.jsonl")]
    proc = _run(*args)
    assert proc.returncode == 2, proc.stdout[-500:]
    [line] = proc.stderr.strip().splitlines()
    assert str(path) in line and "1e400" in line
    assert not (tmp_path / "out.jsonl").exists()
