"""The Replay page through AppTest on a store of a real demo session: knobs, both timelines,
the tokens per turn, the turns that changed, the worked case and a turn opened in Compare.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from test_replay import HELLO, load

from ctxcore import figures
from ctxcore.models import Trace
from ctxcore.replay import CHANGED_MEANS, variant_id
from ctxcore.store import TraceStore

APP = str(Path(__file__).resolve().parent.parent / "ctxapp" / "app.py")


@pytest.fixture(scope="module")
def hello() -> list[Trace]:
    return load(HELLO)


@pytest.fixture
def db(hello: list[Trace], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    path = tmp_path / "ctxscope.duckdb"  # the conftest points CTXSCOPE_DB here
    with TraceStore(path, diagnose=False) as store:
        store.add_traces(hello, source="tests")
    return path


def open_replay(session_id: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.switch_page("pages/replay.py")
    at.query_params["session"] = session_id
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def metric(at: AppTest, label: str) -> str:
    return next(str(m.value) for m in at.metric if m.label == label)


def test_recorded_settings_change_nothing_and_the_page_says_so(
    db: Path, hello: list[Trace]
) -> None:
    """Nothing changed is said in words, with what was compared, not drawn as a grid of
    every packet and turn all in the pale "unchanged" colour."""
    at = open_replay(hello[0].session_id)
    assert at.title[0].value == "Replay"
    assert metric(at, "turns changed") == f"0 of {len(hello)}"
    assert not any("imported" in i.value for i in at.info)
    assert metric(at, "turns losing must-keep / error evidence") == "0"
    said = [i.value for i in at.info]
    assert any(
        f"**Nothing changed**: all {len(hello)} turn(s) build the same context with the "
        "recorded settings (no knob set) as with the recording (compared: each packet's "
        "status and the tokens used)" in s
        for s in said
    ), said
    assert at.get("plotly_chart") == []
    assert not any("Δ tokens" in d.value.columns for d in at.dataframe)
    # the recorded budget set by hand changes nothing either, and the page names it
    (budget,) = {t.config.max_tokens for t in hello}
    at.number_input(key="rp_after_max_tokens").set_value(budget).run()
    assert not at.exception, [e.value for e in at.exception]
    said = [i.value for i in at.info]
    assert any(f"with max_tokens {budget} as with the recording" in s for s in said), said
    assert at.get("plotly_chart") == []
    at.checkbox(key="rp_findings").check().run()
    assert any("findings" in i.value for i in at.info), [i.value for i in at.info]
    assert any("detector" in d.value.columns for d in at.dataframe)


def test_the_page_counts_changed_turns_and_first_losses_as_the_cli_does(
    db: Path, hello: list[Trace], tmp_path: Path
) -> None:
    """One definition of a changed turn in ctxcore, shown by both, whether or not findings are
    compared; and an item the new settings drop where the recording kept it is lost there,
    not "never"."""
    import subprocess
    import sys

    sid = hello[0].session_id
    cli = subprocess.run(
        [sys.executable, "-m", "ctxcore", "replay", "--session", sid, "--db", str(db),
         "--set", "max_tokens=3000", "--fail-on", "never"],
        capture_output=True, text=True, timeout=300,
        cwd=Path(APP).parent,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    head = next(x for x in cli.stdout.splitlines() if " turn(s), " in x)
    said = head.split(" turn(s), ")[1].split(" changed")[0]
    assert f"changed ({CHANGED_MEANS})" in head
    lost = {
        x.split(": ")[1]: x.split(": ")[2]
        for x in cli.stdout.split("first turn lost (")[1].splitlines()[1:]
        if x.startswith("  ") and x.count(": ") == 2
    }
    assert lost["tool:call_12"] == "37 → 13", lost
    at = open_replay(sid)
    at.number_input(key="rp_after_max_tokens").set_value(3000).run()
    for findings in (False, True):
        at.checkbox(key="rp_findings").set_value(findings).run()
        assert not at.exception, [e.value for e in at.exception]
        assert metric(at, "turns changed") == f"{said} of {len(hello)}", findings
        (first,) = [d.value for d in at.dataframe if "item" in d.value.columns]
        row = first[first["item"] == "tool:call_12"].iloc[0]
        assert (row["before"], row["after"]) == ("37", "13")
        assert any(CHANGED_MEANS in c.value for c in at.caption)


def test_a_smaller_budget_shows_the_turns_that_changed_and_opens_compare(
    db: Path, hello: list[Trace]
) -> None:
    at = open_replay(hello[0].session_id)
    at.number_input(key="rp_after_max_tokens").set_value(2000).run()
    assert not at.exception, [e.value for e in at.exception]
    assert metric(at, "turns losing must-keep / error evidence") == "0"
    assert metric(at, "tokens saved") != "0"
    frame = next(d.value for d in at.dataframe if "Δ tokens" in d.value.columns)
    row = frame[frame["turn"] == 11].iloc[0]
    assert "tool:call_7" in row["lost"]
    assert int(row["Δ tokens"]) < 0
    # the difference grid colours that cell by its status after and says before -> after
    (diff,) = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    grid = diff["data"][0]
    i, j = figures.timeline_row(grid, "tool:call_7"), grid["x"].index("11")
    after = figures.cell_hover(grid, i, j)
    assert "kept → " in after, after
    status = after.split("kept → ")[1].split(" ·")[0]
    assert status != "kept" and grid["z"][i][j] == list(figures.DIFF_COLORS).index(status)
    at.selectbox(key="rp_turn").set_value(11).run()
    at.button(key="rp_open").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "Compare"
    rec = next(t for t in hello if t.turn == 11)
    assert at.query_params["a"] == rec.trace_id
    assert at.query_params["b"] == variant_id(rec.trace_id, {"max_tokens": 2000})
    diff = next(d.value for d in at.dataframe if "packet_id" in d.value.columns)
    assert "tool:call_7" in set(diff["packet_id"])
    with TraceStore(db) as store:  # the recording is untouched (the app holds the file)
        assert store.get_trace(rec.trace_id) == rec


def test_the_worked_case_compares_two_budgets_where_the_preset_reads_no_window(
    db: Path, hello: list[Trace]
) -> None:
    at = open_replay(hello[0].session_id)
    at.button(key="rp_worked").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.radio(key="rp_before_mode").value == "other settings"
    # a hello-agents session: its presets size the prompt from the budget, not the window
    assert at.number_input(key="rp_before_window").value == 0
    assert at.number_input(key="rp_after_window").value == 0
    assert at.number_input(key="rp_before_max_tokens").value == 4000
    assert at.number_input(key="rp_after_max_tokens").value == 8000
    assert not at.error, [e.value for e in at.error]
    changed = metric(at, "turns changed")
    assert not changed.startswith("0 of"), changed
    assert metric(at, "tokens spent") != "0"


def test_an_imported_session_says_why_its_turns_differ_from_the_recording(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A public Claude Code log imported: its recording is what Claude Code sent, so replay's
    ctxscope rebuild differs from it even with nothing changed, and the page says why (a
    ctxscope-built session says nothing of the kind)."""
    from ctxcore.formats.load import load_file

    log = Path(__file__).parent / "fixtures" / "imports" / "claude-code"
    traces = load_file(log / "ccviewer-task-sidechain-session.jsonl", "auto")
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    with TraceStore(tmp_path / "ctxscope.duckdb", diagnose=False) as store:
        store.add_traces(traces, source="tests")
    main = max({t.session_id for t in traces}, key=lambda s: sum(t.session_id == s for t in traces))
    at = open_replay(main)
    said = [i.value for i in at.info]
    assert any("were imported (` import/claude-code `)" in s for s in said), said
    assert not metric(at, "turns changed").startswith("0 of")  # what the note explains
    at.radio(key="rp_before_mode").set_value("other settings").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not any("import/claude-code" in i.value for i in at.info)
