"""``ingest --defer-diagnostics`` defers the per-trace analysis: the findings, and the cost
summaries of the lines that take the fast path (docs/design.md, "Cost and prices"). A
deferred trace's reader summarizes it from the trace meanwhile, and ``diagnose_pending``
(the app's idle worker, ``ctxscope watch``) stores both: the summaries it stores are the
bytes an eager ingest stores, and every reader gets the same calls before and after. On
both engines: a DuckDB file and the test cluster's PostgreSQL (which redacts on ingest: the
line with a secret takes the pydantic path)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ctxcore.cli import main
from ctxcore.costing import CallSummary, stored_calls, summary_version
from ctxcore.models import CapturedInput, Config, Message, Packet, Trace
from ctxcore.pipeline import build_trace
from ctxcore.store.engines import open_store

SECRET = "sk-proj-" + "Q7x2Lm9Pz4Kd8Rt1Vb6Nc3Hj5Wf0Ys2Ue7Ga9Io4" * 2


def _traces() -> list[Trace]:
    """A session of six real builds whose history grows, one holding a secret."""
    now = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)
    history: list[Message] = []
    out = []
    for turn in range(6):
        history.append(Message(role="user", content=f"step {turn}: run the tests again"))
        history.append(Message(role="assistant", content=f"ran them; {turn} failures left"))
        env = f"OPENAI_API_KEY={SECRET}" if turn == 3 else "nothing secret here"
        inp = CapturedInput(
            query=f"why does test {turn} fail?",
            now=now + timedelta(minutes=turn),
            system_instructions="You fix failing tests.",
            history=list(history),
            packets=[
                Packet(id="tool:log", kind="tool_result", content="FAILED test_x " * 40),
                Packet(id="tool:env", kind="tool_result", content=env),
            ],
        )
        out.append(
            build_trace(
                inp,
                Config(preset="ctxscope", max_tokens=4000),
                trace_id=f"d-{turn}",
                session_id="s-deferred",
            )
        )
    return out


def _calls(url: str, ids: list[str]) -> tuple[dict[str, bytes], list[CallSummary]]:
    """The summaries the store keeps, and what a reader gets (``costing.stored_calls``)."""
    with open_store(url) as store:
        stored = store.cost_summaries(ids)

        def load(missing: list[str]) -> list[Trace]:
            got = [store.get_trace(t) for t in missing]
            return [t for t in got if isinstance(t, Trace)]

        return stored, stored_calls(ids, stored, summary_version(), load)


@pytest.mark.parametrize("engine", ["duckdb", "postgresql"])
def test_deferred_ingest_leaves_summaries_to_diagnose_pending(
    engine: str, pg_server: Any, tmp_path: Path
) -> None:
    traces = _traces()
    ids = [t.trace_id for t in traces]
    path = tmp_path / "session.jsonl"
    path.write_text("".join(t.to_json() + "\n" for t in traces), encoding="utf-8")

    def url(name: str) -> str:
        if engine == "duckdb":
            return str(tmp_path / f"{name}.duckdb")
        return str(pg_server.new_database())

    eager, deferred = url("eager"), url("deferred")
    assert main(["ingest", str(path), "--db", eager]) == 0
    assert main(["ingest", str(path), "--db", deferred, "--defer-diagnostics"]) == 0

    want_stored, want_calls = _calls(eager, ids)
    assert sorted(want_stored) == sorted(ids)
    stored, calls = _calls(deferred, ids)
    # none made at ingest for the lines that took the fast path; the line with a secret
    # that PostgreSQL's ingest redacts was validated by pydantic, and summarized then
    assert sorted(stored) == (["d-3"] if engine == "postgresql" else [])
    assert calls == want_calls  # its reader summarizes the traces meanwhile

    with open_store(deferred) as store:
        assert store.undiagnosed() == len(ids)
        assert store.diagnose_pending() == len(ids)
        assert store.undiagnosed() == 0
    stored, calls = _calls(deferred, ids)
    assert stored == want_stored  # the bytes an eager ingest stores
    assert calls == want_calls
    with open_store(deferred) as store:
        red = store.get_trace("d-3")
    assert isinstance(red, Trace) and (SECRET in red.to_json()) == (engine == "duckdb")
