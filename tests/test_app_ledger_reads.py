"""What the app reads for a session's compaction ledger (docs/design.md, "Compaction ledger",
issue 32 Speed): a session whose cost summaries show no compaction is not read at all; one
with compactions is read from the call before its first compaction on; the ledger is the
one of the whole session. On a real store of the real Claude Code compaction log and Codex
compaction-turn rollout (test_app_ledger's), beside a session of ctxscope builds."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_app_ledger import stored  # noqa: F401 - the fixture

from ctxapp.ui import ledger as app_ledger
from ctxapp.ui import state
from ctxcore.ledger import compaction_starts, ledger
from ctxcore.models import Trace
from ctxcore.store import TraceStore


@pytest.fixture
def reads(
    stored: dict[str, list[Trace]],  # noqa: F811 - the fixture imported above
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> list[str]:
    """The app on that store; each trace id the app reads from it, in order (the store's own
    ``traces_json``, watched)."""
    monkeypatch.setenv("CTXSCOPE_DB", str(tmp_path / "ctxscope.duckdb"))
    monkeypatch.setenv("CTXSCOPE_TRACES", str(tmp_path / "traces"))
    read: list[str] = []
    real = TraceStore.traces_json

    def watched(self: TraceStore, trace_ids: list[str]) -> list[tuple[str, bytes]]:
        read.extend(trace_ids)
        return real(self, trace_ids)

    monkeypatch.setattr(TraceStore, "traces_json", watched)
    assert isinstance(state.store(), TraceStore)
    return read


def test_a_session_without_a_compaction_is_not_read(reads: list[str]) -> None:
    assert app_ledger.session_ledger("sess-plain") == []
    assert reads == []
    assert app_ledger.ledger_trace_ids("sess-plain") == []


def test_a_session_with_one_is_read_from_the_call_before_it(
    stored: dict[str, list[Trace]],  # noqa: F811
    reads: list[str],
) -> None:
    for sid, traces in stored.items():
        reads.clear()
        (first,) = compaction_starts(traces)
        assert first > 1  # something before it to leave unread
        entries = app_ledger.session_ledger(sid)
        assert entries == ledger(traces) and len(entries) == 1
        assert reads == [t.trace_id for t in traces[first - 1 :]]
