"""Moving a DuckDB file's traces into a team store in one command (issue 35, README "A team
store"): ``ctxscope migrate --db URL --move FILE.duckdb``. Every trace arrives as it was
stored, a second run moves nothing twice, a trace the team store holds with other content is
reported and kept, and a --move that is not a DuckDB file is refused in one line.

The real command line, a real DuckDB file and the session's throwaway server
(tests/pg_cluster.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from helpers_store import make_trace

from ctxcore.store.engines import open_store

ROOT = Path(__file__).resolve().parent.parent


def _ctxscope(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxcore", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )


def test_migrate_from_a_duckdb_file_moves_its_traces_once(pg_server: Any, tmp_path: Path) -> None:
    url = pg_server.new_database()
    file = tmp_path / "old.duckdb"
    traces = [make_trace(i, session_id=f"s{i % 3}") for i in range(1203)]
    with open_store(file) as duck:
        duck.add_traces(traces)
        stored = dict(duck.traces_json([t.trace_id for t in traces]))
    clash = make_trace(7, session_id="s1").model_copy(update={"turn": 70})
    with open_store(url) as team:
        team.add_traces([clash])  # the team store has trace 7 already, other content

    first = _ctxscope("migrate", "--db", url, "--move", str(file))
    assert first.returncode == 1, first.stderr
    assert "moved 1,202 traces from" in first.stdout
    assert f"trace_id {clash.trace_id!r} is already stored" in first.stderr
    with open_store(url, read_only=True) as team:
        assert team.count() == 1203
        moved = dict(team.traces_json([t.trace_id for t in traces]))
        assert team.get_trace(clash.trace_id) == clash  # kept as it was
    assert {k: v for k, v in moved.items() if k != clash.trace_id} == {
        k: v for k, v in stored.items() if k != clash.trace_id
    }

    again = _ctxscope("migrate", "--db", url, "--move", str(file))
    assert "moved 0 traces" in again.stdout and "(1,202 were there already)" in again.stdout
    with open_store(url, read_only=True) as team:
        assert team.count() == 1203


def test_migrate_from_refuses_what_is_not_a_duckdb_file(pg_server: Any, tmp_path: Path) -> None:
    url = pg_server.new_database()
    missing = _ctxscope("migrate", "--db", url, "--move", str(tmp_path / "none.duckdb"))
    assert missing.returncode != 0
    assert "--move" in missing.stderr and "give a DuckDB store file" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    server = _ctxscope("migrate", "--db", url, "--move", url)
    assert server.returncode != 0 and "give a DuckDB store file" in server.stderr
