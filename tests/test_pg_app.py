"""The app on a team store (docs/design.md, "Store"): ``ctxscope app --db postgresql://…``
shows the traces a server holds. Real parts: the throwaway cluster of ``tests/pg_cluster.py``,
real builds stored by ``ctxscope ingest`` into it, and the real app through AppTest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import app_support as data
import pytest
from app_support import open_page

from ctxcore.cli import main
from ctxcore.models import Trace


@pytest.fixture(scope="module")
def built() -> list[Trace]:
    return data.session("team-a", 3) + data.session("team-b", 2, first=30, tags=["nightly"])


@pytest.fixture
def team(
    pg_server: Any, built: list[Trace], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """A new database of the test cluster holding ``built`` (stored by ``ctxscope ingest``),
    the app pointed at it through ``CTXSCOPE_DB`` as ``ctxscope app --db`` does, with a
    token of the store (tests/test_pg_access.py checks the login itself)."""
    url = str(pg_server.new_database())
    src = tmp_path / "built.jsonl"
    src.write_text("".join(t.model_dump_json() + "\n" for t in built), encoding="utf-8")
    assert main(["ingest", str(src), "--db", url]) == 0
    assert main(["migrate", "--db", url]) == 0  # the app's read-only role
    from ctxcore.store.pgaccess import add_token

    monkeypatch.setenv("CTXSCOPE_DB", url)
    monkeypatch.setenv("CTXSCOPE_TOKEN", add_token(url, "tests"))  # the app asks for one
    return url


def test_traces_lists_the_team_store_and_opens_inspect(team: str, built: list[Trace]) -> None:
    at = open_page("traces")
    assert not at.error, [e.value for e in at.error]
    frame = at.dataframe[0].value
    assert set(frame["trace_id"]) == {t.trace_id for t in built}
    # the store is named without the URL's scheme-less path folded, and no file is made
    captions = " ".join(str(c.value) for c in at.caption)
    assert "team store" in captions and "127.0.0.1" in captions, captions
    at.selectbox(key="tr_open_id").set_value("team-b-t1").run()
    at.button(key="tr_open").click().run()
    assert at.title[0].value == "Inspect" and at.query_params["trace"] == "team-b-t1"
    t = next(t for t in built if t.trace_id == "team-b-t1")
    frame = next(d.value for d in at.dataframe if "reason_text" in d.value.columns)
    assert list(frame["packet_id"]) == [d.packet_id for d in t.result.decisions]
    assert not at.error, [e.value for e in at.error]


def test_the_team_store_is_read_not_fed_from_a_folder(
    team: str, built: list[Trace], tmp_path: Path
) -> None:
    """The app reads a team store: nothing of the demo goes into it, and nothing is made on
    this machine in the store's name (a Path of the URL would be a folder ``postgresql:``)."""
    at = open_page("traces")
    assert len(at.dataframe[0].value) == len(built)
    assert not Path("postgresql:").exists()
    assert not (tmp_path / "traces" / "demo").exists()
    ids = json.loads(at.dataframe[0].value[["trace_id"]].to_json(orient="values"))
    assert sorted(i for [i] in ids) == sorted(t.trace_id for t in built)


def test_ctxscope_app_serves_a_team_store(team: str, tmp_path: Path) -> None:
    """``ctxscope app --db URL`` as a process: the URL reaches the app whole (its password
    never said), no demo traces are copied for it, no note is left beside a file."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    secret = team.replace("ctxscope@", "ctxscope:hunter2@")  # the test cluster trusts anyone
    cmd = [sys.executable, "-m", "ctxcore", "app", "--db", secret, "--port", str(port)]
    cmd += ["--traces", str(tmp_path / "traces")]
    proc = subprocess.Popen(
        cmd, env=dict(os.environ), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, cwd=tmp_path
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                url = f"http://127.0.0.1:{port}/_stcore/health"
                with urllib.request.urlopen(url, timeout=2) as resp:
                    assert resp.status == 200
                break
            except OSError:
                assert time.monotonic() < deadline, "the app did not come up in 60 s"
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    said = err.decode()
    assert "is a team store: the app asks each person for their token" in said, said
    assert "hunter2" not in said
    assert not (tmp_path / "traces" / "demo").exists()
    assert not (tmp_path / "postgresql:").exists()
