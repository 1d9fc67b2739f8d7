"""Cost and the prompt cache in the app (issue 32 item 7): the Traces page's $ per trace and
per session from the store's usage columns, Inspect's cost and cache panel with the cached
prefix on the window bar, the Timeline's cost per turn with its breaks, all through the real
app (AppTest) on a real DuckDB store holding real imported Claude Code sessions with the
usage their providers recorded. Costs are checked against ``ctxcore.cost`` applied to each
trace's own ``outcome.tokens`` and ``ctxcore.costing`` over its session, not hard-coded.
"""

from __future__ import annotations

import json
from pathlib import Path

import app_support as data
import pandas as pd
import pytest
from app_support import EVIL, EVIL_IMG
from app_support import open_page as _open_page
from streamlit.testing.v1 import AppTest

from ctxapp.ui import costs
from ctxcore import figures
from ctxcore.cache import CacheBreak
from ctxcore.cost import cost, price_table
from ctxcore.costing import CallCost, session_costs
from ctxcore.formats.load import load_file
from ctxcore.models import Trace

ROOT = Path(__file__).resolve().parent.parent
CLAUDE_CODE = ROOT / "tests" / "fixtures" / "imports" / "claude-code"


def open_page(page: str, **params: str) -> AppTest:
    at: AppTest = _open_page(page, timeout=60, **params)
    return at


@pytest.fixture(scope="module")
def logged() -> list[Trace]:
    """A real Claude Code session with recorded usage (and its Task agent's side chain)."""
    return list(load_file(CLAUDE_CODE / "ccviewer-task-sidechain-session.jsonl"))


@pytest.fixture(scope="module")
def built() -> list[Trace]:
    """Real builds of the pipeline: no model, no usage (their cost is unknown)."""
    return data.session("sess-plain", 3)


@pytest.fixture
def db(
    logged: list[Trace], built: list[Trace], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Path:
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    monkeypatch.delenv("CTXSCOPE_PRICES", raising=False)
    path = tmp_path / "ctxscope.duckdb"  # the conftest points CTXSCOPE_DB here
    data.fill(path, logged + built)
    return path


def billed(t: Trace) -> float | None:
    """What a trace's call cost by its own recorded usage."""
    found = cost(t.metadata.get("model"), t.outcome.tokens if t.outcome else None)
    return None if found is None else found.total_usd


def main_session(logged: list[Trace]) -> str:
    """The session of the log's main thread (the one with the most calls)."""
    ids = [t.session_id for t in logged]
    return max(set(ids), key=ids.count)


def test_traces_shows_each_calls_cost_and_its_sessions(db: Path, logged, built) -> None:
    sid = main_session(logged)
    at = open_page("traces", session=sid)
    frame = next(d.value for d in at.dataframe if "$" in d.value.columns)
    mine = sorted((t for t in logged if t.session_id == sid), key=lambda t: t.created_at)
    by_id = {t.trace_id: t for t in mine}
    assert sorted(frame["trace_id"]) == sorted(by_id)
    for tid, shown in zip(frame["trace_id"], frame["$"], strict=True):
        assert shown == pytest.approx(billed(by_id[tid]))
    session_total = sum(v for t in mine if (v := billed(t)) is not None)
    assert all(v > 0 for v in frame["$"])
    assert list(frame["session $"]) == pytest.approx([session_total] * len(frame))
    said = [str(e.value) for e in at.text]
    assert f"Session cost (recorded usage): {figures.usd(session_total)}" in " ".join(said)
    # builds with no model and no usage: an unknown cost, never 0
    at = open_page("traces", session="sess-plain")
    frame = next(d.value for d in at.dataframe if "$" in d.value.columns)
    assert len(frame) == len(built)
    assert frame["$"].isna().all() and frame["session $"].isna().all()


def test_inspect_panel_puts_the_simulation_beside_the_recorded_usage(db: Path, logged) -> None:
    sid = main_session(logged)
    calls = {c.trace_id: c for c in session_costs([t for t in logged if t.session_id == sid],
                                                  price_table())}  # fmt: skip
    t = next(t for t in logged if t.trace_id in calls and calls[t.trace_id].cache_read_tokens)
    call = calls[t.trace_id]
    rec = t.outcome.tokens if t.outcome else None
    assert rec is not None and rec.input_tokens and rec.cache_read_tokens
    at = open_page("inspect", trace=t.trace_id)
    panel = next(d.value for d in at.dataframe if "simulated" in d.value.columns)
    shown = dict(zip(panel["tokens"], zip(panel["simulated"], panel["recorded"], strict=True),
                       strict=True))  # fmt: skip
    assert shown["prompt"] == (call.input_tokens, rec.input_tokens)
    assert shown["cached (read)"] == (call.cache_read_tokens, rec.cache_read_tokens)
    assert shown["written"] == (call.cache_write_tokens, rec.cache_write_tokens)
    uncached = rec.input_tokens - rec.cache_read_tokens - (rec.cache_write_tokens or 0)
    assert shown["uncached"] == (call.uncached_tokens, uncached)
    assert shown["output"] == (call.output_tokens, rec.output_tokens)
    text = "\n".join(str(e.value) for e in at.text)
    assert f"Cost: {figures.usd(billed(t))}, priced from the usage the provider recorded" in text
    # the cached prefix outlined on the window bar: the recorded share of the prompt
    bar = next(
        json.loads(c.proto.spec)
        for c in at.get("plotly_chart")
        if "Context window" in json.dumps(json.loads(c.proto.spec)["layout"].get("title"))
    )
    [shape] = bar["layout"]["shapes"]
    assert t.result is not None
    share = rec.cache_read_tokens / rec.input_tokens
    assert shape["x0"] == 0 and shape["x1"] == pytest.approx(share * t.result.totals.used)
    if call.cache_break is not None:
        assert f"Why: {call.cache_break.reason}" in text


def test_inspect_of_a_build_with_no_model_has_no_cost_panel(db: Path, built) -> None:
    at = open_page("inspect", trace=built[0].trace_id)
    assert not any("simulated" in d.value.columns for d in at.dataframe)
    bar = next(
        json.loads(c.proto.spec)
        for c in at.get("plotly_chart")
        if "Context window" in json.dumps(json.loads(c.proto.spec)["layout"].get("title"))
    )
    assert not bar["layout"].get("shapes")


def cost_view(at: AppTest) -> AppTest:
    """The Timeline with its "Cost and cache" view open (it opens on its packets)."""
    at.session_state["tl_view"] = "Cost and cache"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _chart_titles(at: AppTest) -> list[str]:
    """The titles of the charts the page sent."""
    return [
        json.dumps(json.loads(c.proto.spec)["layout"].get("title", ""))
        for c in at.get("plotly_chart")
    ]


def test_timeline_sends_only_the_open_views_chart(db: Path, logged) -> None:
    """The Timeline opens on its packets: the cost and usage charts are neither built nor sent
    until their view is open, and each view sends its own; a session of no model calls has
    no cost view."""
    sid = main_session(logged)
    at = open_page("timeline", session=sid)
    assert [t.label for t in at.tabs] == ["Packets", "Partition usage", "Cost and cache"]
    titles = _chart_titles(at)
    assert any("Packets across the turns" in t for t in titles)
    assert not any("Prompt cache and cost per turn" in t for t in titles)
    assert not any("Partition usage per turn" in t for t in titles)
    assert not any("break reason" in d.value.columns for d in at.dataframe)
    # the session's cost is on top whatever the view
    calls = session_costs([t for t in logged if t.session_id == sid], price_table())
    total = sum(c.cost_usd for c in calls if c.cost_usd is not None)
    assert any(figures.usd(total) in str(m.value) for m in at.markdown)
    at = cost_view(at)
    titles = _chart_titles(at)
    assert any("Prompt cache and cost per turn" in t for t in titles)
    assert not any("Packets across the turns" in t for t in titles)
    assert any("break reason" in d.value.columns for d in at.dataframe)
    at.session_state["tl_view"] = "Partition usage"
    at.run()
    titles = _chart_titles(at)
    assert any("Partition usage per turn" in t for t in titles)
    assert not any("Prompt cache and cost per turn" in t for t in titles)
    plain = open_page("timeline", session="sess-plain")
    assert [t.label for t in plain.tabs] == ["Packets", "Partition usage"]


def test_timeline_gives_each_turns_cache_and_cost_and_marks_the_breaks(db: Path, logged) -> None:
    sid = main_session(logged)
    mine = [t for t in logged if t.session_id == sid]
    calls = session_costs(mine, price_table())
    at = cost_view(open_page("timeline", session=sid))
    frame = next(d.value for d in at.dataframe if "break reason" in d.value.columns)
    assert list(frame["turn"]) == sorted(t.turn for t in mine)
    by_turn = {t.turn: t for t in mine}
    for _, row in frame.iterrows():
        t = by_turn[int(row["turn"])]
        rec = t.outcome.tokens if t.outcome else None
        assert rec is not None
        assert row["figures"] == "recorded"
        assert (row["cached"], row["written"], row["output"]) == (
            rec.cache_read_tokens,
            rec.cache_write_tokens,
            rec.output_tokens,
        )
        assert row["$"] == pytest.approx(billed(t))
    broken = {c.turn: c.cache_break for c in calls if c.cache_break is not None}
    assert {int(r["turn"]): r["break reason"] for _, r in frame.iterrows() if r["break"]} == {
        turn: b.reason for turn, b in broken.items()
    }
    chart = next(
        json.loads(c.proto.spec)
        for c in at.get("plotly_chart")
        if "Prompt cache and cost per turn" in json.dumps(json.loads(c.proto.spec)["layout"])
    )
    names = [d.get("name") for d in chart["data"]]
    assert names[:4] == ["cached (read)", "written", "uncached", "$ per turn"]
    if broken:
        marks = next(d for d in chart["data"] if d.get("name") == "cache break")
        assert marks["x"] == sorted(broken)
    total = sum(c.cost_usd for c in calls if c.cost_usd is not None)
    assert any(figures.usd(total) in str(m.value) for m in at.markdown)


def test_timeline_of_builds_with_no_model_shows_no_cost(db: Path) -> None:
    at = open_page("timeline", session="sess-plain")
    assert not any("break reason" in d.value.columns for d in at.dataframe)


def _hostile_call(logged: list[Trace]) -> CallCost:
    """A real call of the log, its break quoting a hostile system-prompt line."""
    calls = session_costs([t for t in logged if t.session_id == main_session(logged)],
                          price_table())  # fmt: skip
    brk = CacheBreak(
        block="system",
        kind="system_changed",
        index=None,
        packet=f"system {EVIL_IMG}",
        reason=f"the system prompt changed at line 3: 'Today is {EVIL}'",
        tokens=1200,
        cost_usd=0.0042,
        fix=f"move the date out of the system prompt {EVIL_IMG}",
        provider_reason=EVIL,
    )
    return CallCost(**{**calls[1].__dict__, "cache_break": brk})


def test_a_break_reason_quoting_the_prompt_stays_text(logged: list[Trace]) -> None:
    call = _hostile_call(logged)
    fig = figures.turns_figure([call], f"session {EVIL}")
    spec = fig.to_json()
    assert "<script>" not in spec and "<img" not in spec
    marks = next(d for d in fig.data if d.name == "cache break")
    assert "&lt;script&gt;" in marks.hovertext[0]
    lines = figures.break_lines(call.cache_break)  # type: ignore[arg-type]
    # plain text lines for st.text (never markdown): the words as they were
    assert lines[1] == f"Why: the system prompt changed at line 3: 'Today is {EVIL}'"
    assert lines[-1] == f"The provider's reason: {EVIL}"


def test_unknown_costs_are_never_zero(logged: list[Trace]) -> None:
    assert figures.usd(None) == "—"
    assert figures.usd(0.01234) == "$0.0123" and figures.usd(12.345) == "$12.35"
    spend = costs.Spend(calls=3, priced=0, usd=0.0)
    assert spend.total is None and spend.label() == "—"
    part = costs.Spend(calls=3, priced=2, usd=0.5)
    assert part.total == 0.5 and part.label() == "$0.5000 (2 of 3 calls priced)"
    frame = costs.turns_frame([_hostile_call(logged)])
    assert isinstance(frame, pd.DataFrame) and frame["break"].tolist() == ["system_changed"]


def test_timeline_marks_a_real_break_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # a real Codex rollout whose context was compacted: the cached prefix breaks there
    rollout = ROOT / "tests" / "fixtures" / "imports" / "codex"
    traces = list(load_file(rollout / "localpush-rollout-compaction-turn.subset.jsonl"))
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    data.fill(tmp_path / "ctxscope.duckdb", traces)
    calls = session_costs(traces, price_table())
    broken = {c.turn: c.cache_break for c in calls if c.cache_break is not None}
    assert broken, "the compaction breaks the cached prefix"
    at = cost_view(open_page("timeline", session=traces[0].session_id))
    frame = next(d.value for d in at.dataframe if "break reason" in d.value.columns)
    shown = {int(r["turn"]): (r["break"], r["break reason"]) for _, r in frame.iterrows()}
    for turn, brk in broken.items():
        assert shown[turn] == (brk.kind, brk.reason)
    chart = next(
        json.loads(c.proto.spec)
        for c in at.get("plotly_chart")
        if "Prompt cache and cost per turn" in json.dumps(json.loads(c.proto.spec)["layout"])
    )
    marks = next(d for d in chart["data"] if d.get("name") == "cache break")
    assert marks["x"] == sorted(broken)
    assert all(brk.reason[:40] in h for brk, h in zip(
        (broken[t] for t in sorted(broken)), marks["hovertext"], strict=True))  # fmt: skip
    assert any(f"{len(broken):,} cache breaks" in str(c.value) for c in at.caption)


def test_inspect_says_where_the_provider_billed_otherwise_and_why_the_prefix_broke(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rollout = ROOT / "tests" / "fixtures" / "imports" / "codex"
    traces = list(load_file(rollout / "localpush-rollout-compaction-turn.subset.jsonl"))
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    data.fill(tmp_path / "ctxscope.duckdb", traces)
    call = next(c for c in session_costs(traces, price_table()) if c.cache_break is not None)
    rec = call.recorded
    assert rec is not None and rec.cache_read_tokens is not None
    at = open_page("inspect", trace=call.trace_id)
    text = "\n".join(str(e.value) for e in at.text)
    assert call.cache_break is not None
    for line in figures.break_lines(call.cache_break):
        assert line in text
    # the simulation and the bill disagree on this call's cache read: said, both figures
    assert abs(rec.cache_read_tokens - call.cache_read_tokens) > 0.05 * rec.cache_read_tokens
    assert (
        f"Billed differently: the provider read {rec.cache_read_tokens:,} tokens from the "
        f"cache, the simulation {call.cache_read_tokens:,}" in text
    )
