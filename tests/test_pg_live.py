"""The live commands writing straight into a team store (docs/design.md, "Store"):
``ctxscope proxy`` and ``ctxscope collect`` with ``--db postgresql://…`` ingest each call they
capture into it as it is written, and ``ctxscope watch --db URL`` does the same for a folder.
Real parts: the throwaway cluster of ``tests/pg_cluster.py``, the real proxy and receiver as
processes, the fake upstream replaying recorded provider replies, recorded OTLP exports."""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from proxy_support import FIXTURES, Proc, send, start, start_upstream

from ctxcore.cli import main
from ctxcore.formats.otlp import traces_from_otlp
from ctxcore.store.engines import read_store
from ctxcore.store.records import TraceFilter

KEY = "sk-test-live-team-0123456789abcdef"


def _stored(url: str, n: int, timeout: float = 60.0) -> list[Any]:
    """The team store's rows once it holds ``n`` traces (those it holds at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        with read_store(url) as store:
            rows = store.list_traces(TraceFilter(), limit=100).rows
        if len(rows) >= n or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


def test_the_proxy_ingests_each_call_into_the_team_store(pg_server: Any, tmp_path: Path) -> None:
    url = str(pg_server.new_database())
    upstream = start_upstream(tmp_path / "upstream")
    stem = "openai-chat/otel-contrib-tool-calls-turn1"
    up = f"http://127.0.0.1:{upstream.port}"
    cmd = [sys.executable, "-m", "ctxcore", "proxy", "--port", "0"]
    cmd += ["--traces", str(tmp_path / "traces"), "--db", url]
    cmd += ["--upstream-openai", up, "--upstream-anthropic", up]
    proxy = start(cmd, r"listening on http://127\.0\.0\.1:(\d+)")
    try:
        body = (FIXTURES / f"{stem}.request.json").read_bytes()
        headers = [
            ("Authorization", f"Bearer {KEY}"),
            ("Content-Type", "application/json"),
            ("x-test-scenario", f"json:{stem}.response.json"),
        ]
        for k in range(2):
            reply = send(proxy.port, "POST", f"/team-{k}/v1/chat/completions", headers, body)
            assert reply.status == 200
        rows = _stored(url, 2)  # while the proxy runs
        assert sorted(t for r in rows for t in r.tags if t.startswith("source:")) == [
            "source:team-0",
            "source:team-1",
        ]
        assert all("live" in r.tags for r in rows)
    finally:
        assert proxy.stop() == 0
        upstream.stop()
    assert "ingested into the team store postgresql://ctxscope@127.0.0.1" in proxy.text
    assert "2 trace(s) ingested" in proxy.text, proxy.text
    # the files stay beside it: the same traces as the store's
    files = [
        json.loads(x)
        for x in (tmp_path / "traces" / "live").glob("*.jsonl")
        for x in x.read_text().splitlines()
    ]  # noqa: E501
    assert sorted(t["trace_id"] for t in files) == sorted(r.trace_id for r in rows)


def test_the_receiver_ingests_spans_into_the_team_store(pg_server: Any, tmp_path: Path) -> None:
    url = str(pg_server.new_database())
    cmd = [sys.executable, "-m", "ctxcore", "collect", "--port", "0"]
    cmd += ["--traces", str(tmp_path / "traces"), "--db", url]
    collector: Proc = start(cmd, r"OTLP/HTTP on http://127\.0\.0\.1:(\d+)")
    try:
        line = (FIXTURES / "otlp-json/openai-v2-latest-span-only.otlp.jsonl").read_text()
        req = urllib.request.Request(
            f"http://127.0.0.1:{collector.port}/v1/traces",
            data=line.splitlines()[0].encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 200
        want = traces_from_otlp(json.loads(line.splitlines()[0]))
        rows = _stored(url, len(want))
        assert sorted(r.trace_id for r in rows) == sorted(t.trace_id for t in want)
        assert ("conv-weather-seattle-sf", 1) in {(r.session_id, r.turn) for r in rows}
    finally:
        assert collector.stop() == 0


def test_a_live_command_refuses_a_duckdb_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "x.duckdb"
    assert main(["collect", "--port", "0", "--traces", str(tmp_path), "--db", str(db)]) == 2
    assert "collect feeds a team store" in capsys.readouterr().err
    assert not db.exists()
