"""``ctxscope check`` on whole sessions (ctxcore/cli/check.py; issue 32, Speed): the session
detectors read the earlier turns once per session (``SessionFolds``), and the findings are
those of diagnosing every trace with its earlier turns read afresh, on real multi-call
sessions written as trace files."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from ctxcore.cache.session import SessionCache
from ctxcore.cli.check import format_finding, run_check
from ctxcore.diagnostics import DiagnosticsOptions, diagnose, ensure_built
from ctxcore.formats.load import iter_traces
from ctxcore.models import Trace

IMPORTS = Path(__file__).parent / "fixtures" / "imports"
SESSIONS = [
    IMPORTS / "codex" / "localpush-rollout-compaction-turn.subset.jsonl",
    IMPORTS / "codex" / "localpush-rollout-2034.jsonl",
    IMPORTS / "claude-code" / "claude-code-log-compact-after-rewind.jsonl",
    IMPORTS / "inspect" / "message-deduplication-tool-loop.eval",
]


def _written(source: Path, tmp_path: Path) -> tuple[Path, list[Trace]]:
    traces = list(iter_traces(source))
    out = tmp_path / f"{source.name}.traces.jsonl"
    out.write_text("".join(t.model_dump_json(by_alias=True) + "\n" for t in traces))
    return out, traces


def _afresh(path: Path) -> list[str]:
    """What check printed before: every trace diagnosed with its session's earlier turns
    (file order) read again, no folds."""
    traces = [ensure_built(t) for t in iter_traces(path)]
    options = DiagnosticsOptions()
    lines = []
    for t in traces:
        earlier = [
            s
            for s in traces
            if s.session_id == t.session_id and s.turn < t.turn and s.trace_id != t.trace_id
        ]
        for f in diagnose(t, session_traces=earlier, options=options):
            lines.append(format_finding(str(path), t.trace_id, f))
    return lines


def test_check_finds_what_diagnosing_each_trace_afresh_finds(tmp_path: Path) -> None:
    detectors: set[str] = set()
    for source in SESSIONS:
        path, traces = _written(source, tmp_path)
        assert len(traces) >= 3
        out, err = io.StringIO(), io.StringIO()
        run_check([str(path)], fail_on="error", out=out, err=err)
        got = out.getvalue().splitlines()
        assert got == _afresh(path), source.name
        detectors |= {line.split(": ", 1)[1].split()[1].rstrip(":") for line in got}
    # the sessions exercise the session detectors this is about
    assert {"cache_break", "repeated_tool_call"} <= detectors


def test_the_cache_is_simulated_once_per_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, traces = _written(SESSIONS[1], tmp_path)
    fed: list[str] = []
    real = SessionCache.add

    def counting(self: SessionCache, p):  # type: ignore[no-untyped-def]
        fed.append(p.trace_id)
        return real(self, p)

    monkeypatch.setattr(SessionCache, "add", counting)
    run_check([str(path)], out=io.StringIO(), err=io.StringIO())
    assert sorted(fed) == sorted(t.trace_id for t in traces)  # each call once, not per turn
