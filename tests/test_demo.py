"""The demo sessions: generated from the real corpus through the real presets.

Generation runs once per module (it is the slow part) into tmp folders; the checks then read
the JSONL files back the way ingest does, through ``ctxcore.loading.trace_from_obj``.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from ctxcore import settings
from ctxcore.cli import main
from ctxcore.demo.build import generate
from ctxcore.demo.turns import trace_id_for
from ctxcore.loading import trace_from_obj
from ctxcore.models import Status, Trace

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "ctxcore" / "data" / "demo"
_CJK = re.compile(r"[\u4e00-\u9fff]")
LOST = {Status.DROPPED, Status.FILTERED, Status.SUMMARIZED, Status.NOT_RENDERED}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    corpus = settings.corpus_dir(ROOT / "corpus")
    if not corpus.exists():
        pytest.skip(f"corpus not found at {corpus}")
    return generate(corpus, tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def traces(generated: list[Path]) -> list[Trace]:
    out = []
    for path in generated:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            out.append(trace_from_obj(json.loads(line), where=f"{path.name}:{n}"))
    return out


def test_sessions_and_counts(generated: list[Path], traces: list[Trace]) -> None:
    assert len(generated) >= 3
    assert len(traces) >= 60
    by_session: dict[str, list[Trace]] = defaultdict(list)
    for t in traces:
        by_session[t.session_id].append(t)
    assert len(by_session) == len(generated)  # one file per session
    for path in generated:
        assert path.stem in by_session
    presets = {t.config.preset for t in traces}
    assert {"ctxscope", "hello-agents", "hello-agents-book"} <= presets
    # most turns use the ctxscope preset
    assert sum(t.config.preset == "ctxscope" for t in traces) > len(traces) / 2


def test_turns_ids_and_clock(traces: list[Trace]) -> None:
    ids = [t.trace_id for t in traces]
    assert len(set(ids)) == len(ids)
    by_session: dict[str, list[Trace]] = defaultdict(list)
    for t in traces:
        assert t.trace_id == trace_id_for(t.session_id, t.turn)
        assert t.created_at == t.input.now
        assert t.metadata["demo"]["clock"]
        assert t.metadata["demo"]["source"].startswith("corpus/")
        assert t.result is not None and t.result.timings == {}
        by_session[t.session_id].append(t)
    for session in by_session.values():
        turns = [t.turn for t in session]
        assert turns == sorted(turns) and len(set(turns)) == len(turns)
        times = [t.created_at for t in session]
        assert times == sorted(times)
        assert times[-1] > times[0]  # the clock advances over the session


def test_ids_persist_across_turns(traces: list[Trace]) -> None:
    """The same tool call keeps its packet id from the turn it appears in to the end."""
    session = [t for t in traces if t.session_id == "swe-pytest-7571"]
    assert len(session) >= 20
    first = {p.id for p in session[5].input.packets}
    for later in session[6:]:
        assert first <= {p.id for p in later.input.packets}
    assert any(p.id.startswith("tool:call_") for p in session[5].input.packets)
    assert "task:pytest-dev__pytest-7571" in first
    # a file keeps one id while its content follows the latest read of it
    zh = [t for t in traces if t.session_id.startswith("zh-opencode")]
    views = [
        next((p for p in t.input.packets if p.id == "file:src/agent/codeSummary.ts"), None)
        for t in zh
    ]
    start = next(i for i, v in enumerate(views) if v is not None)
    assert all(v is not None for v in views[start:])
    assert len({v.content for v in views[start:] if v is not None}) > 1


def test_a_must_keep_or_failing_test_was_lost(traces: list[Trace]) -> None:
    hits = []
    for t in traces:
        assert t.result is not None
        special = {p.id for p in t.input.packets if p.must_keep}
        special.add(t.metadata["demo"].get("open_failure", ""))
        for d in t.result.decisions:
            if d.packet_id in special and d.status in LOST:
                hits.append((t.session_id, t.turn, d.packet_id, d.status))
    assert hits, "no turn shows a must-keep or failing-test packet dropped or summarized"


def test_a_single_packet_floods_the_window(traces: list[Trace]) -> None:
    floods = []
    for t in traces:
        assert t.result is not None
        window = t.result.totals.window
        for d in t.result.decisions:
            if d.status != Status.DROPPED and d.tokens_after > 0.3 * window:
                floods.append((t.session_id, t.turn, d.packet_id, d.tokens_after, window))
    assert floods, "no packet takes more than 30% of a window"


def test_a_chinese_session(traces: list[Trace]) -> None:
    by_session: dict[str, list[Trace]] = defaultdict(list)
    for t in traces:
        by_session[t.session_id].append(t)
    chinese = []
    for sid, session in by_session.items():
        text = "".join(m.content for t in session for m in t.input.history)
        text += "".join(t.input.query for t in session)
        if len(_CJK.findall(text)) > 0.2 * len(text.replace(" ", "")):
            chinese.append(sid)
    assert chinese, "no session is mostly Chinese"
    # and a hello-agents build of Chinese text shows its whitespace-relevance blind spot
    blind = [
        d
        for t in traces
        if t.session_id in chinese and t.config.preset == "hello-agents"
        for d in t.result.decisions  # type: ignore[union-attr]
        if d.relevance == 0.0 and _CJK.search(t.input.query)
    ]
    assert blind


def test_verdicts(traces: list[Trace]) -> None:
    verdicts = [t.outcome.verdict for t in traces if t.outcome]
    assert len(verdicts) == len(traces)
    assert "bad" in verdicts and "good" in verdicts
    assert all(t.outcome and t.outcome.note for t in traces)
    assert all(t.outcome and t.outcome.output for t in traces)
    # the constraint violation of pytest-7571 (a new file under testing/) is judged bad
    writes = [
        t
        for t in traces
        if t.session_id == "swe-pytest-7571"
        and t.outcome
        and "testing/logging/test_caplog_restore.py" in (t.outcome.output or "")
        and "cat <<" in (t.outcome.output or "")
    ]
    assert writes and all(t.outcome and t.outcome.verdict == "bad" for t in writes)
    assert all("DO NOT MODIFY: Tests" in (t.outcome.note if t.outcome else "") for t in writes)


def test_deterministic(generated: list[Path], tmp_path: Path) -> None:
    again = generate(ROOT / "corpus", tmp_path / "again")
    assert [p.name for p in again] == [p.name for p in generated]
    for a, b in zip(generated, again, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_committed_demo_matches_generation(generated: list[Path]) -> None:
    committed = sorted(p.name for p in COMMITTED.glob("*.jsonl"))
    assert committed == sorted(p.name for p in generated), (
        "ctxcore/data/demo is out of date: run `ctxscope demo` and commit ctxcore/data/demo"
    )
    for path in generated:
        assert (COMMITTED / path.name).read_bytes() == path.read_bytes(), (
            f"ctxcore/data/demo/{path.name} differs from what `ctxscope demo` generates now "
            "(a preset changed?): regenerate and commit it"
        )


@pytest.mark.slow
def test_cli_demo_writes_files_and_fills_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, db = tmp_path / "cli", tmp_path / "demo.duckdb"
    argv = ["demo", "--out", str(out), "--corpus", str(ROOT / "corpus"), "--db", str(db)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    files = sorted(out.glob("*.jsonl"))
    total = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in files)
    assert f"{total} traces in {len(files)} sessions" in printed
    assert f"{total} new traces from {len(files)} files (0 already stored, 0 errors)" in printed
    # running it again rewrites the same bytes and stores nothing twice
    before = {p.name: p.read_bytes() for p in files}
    assert main(argv) == 0
    assert f": 0 new traces from {len(files)} files" in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in sorted(out.glob("*.jsonl"))} == before


def test_cli_demo_missing_corpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["demo", "--out", str(tmp_path / "x"), "--corpus", str(tmp_path / "nope")])
    assert code != 0
    assert "corpus folder" in capsys.readouterr().err


@pytest.mark.slow
def test_every_detector_fires_somewhere_in_the_demo(traces: list[Trace]) -> None:
    """The demo sessions show each diagnostics detector about builds at least once
    (``import_loss`` is about imported files: tests/test_import_formats.py shows it;
    ``cache_break`` about the calls of a named model, which the demo's builds do not name:
    tests/test_cost.py shows it on recorded sessions)."""
    from ctxcore.diagnostics import DETECTORS, diagnose_session
    from ctxcore.diagnostics.context import DiagnosticsOptions

    by_session: dict[str, list[Trace]] = defaultdict(list)
    for t in traces:
        by_session[t.session_id].append(t)
    seen: set[str] = set()
    opts = DiagnosticsOptions(counterfactuals=False)
    for session in by_session.values():
        for turn in diagnose_session(session, options=opts).turns:
            seen.update(f.detector for f in turn.findings)
    assert set(DETECTORS) - seen == {"import_loss", "cache_break"}


@pytest.mark.slow
def test_cli_demo_when_another_process_owns_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import subprocess
    import sys

    db = tmp_path / "owned.duckdb"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from ctxcore.store.tracestore import TraceStore\n"
            f"s = TraceStore({str(db)!r}); print('ready', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        out = tmp_path / "demo"
        argv = ["demo", "--out", str(out), "--corpus", str(ROOT / "corpus"), "--db", str(db)]
        assert main(argv) == 0
        captured = capsys.readouterr()
        assert "demo files are written to" in captured.err
        assert len(list(out.glob("*.jsonl"))) >= 3
    finally:
        holder.communicate("", timeout=30)
