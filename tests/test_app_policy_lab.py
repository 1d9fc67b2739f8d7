"""The Replay page's policy lab through AppTest on a real imported Claude Code session: the
table's figures are ``evaluate``'s, the heatmap's cells a direct evaluation of each cell, a
row and a cell opened in the Playground with their knobs, and the Playground taking a preset
on the recorded request the way replay does (docs/design.md, "The app", Replay)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from app_support import open_page
from streamlit.testing.v1 import AppTest

from ctxapp.ui import views
from ctxcore.cost import price_table
from ctxcore.formats.load import load_file
from ctxcore.models import Trace
from ctxcore.replay.evaluate import RECORDED, PolicyScore, evaluate
from ctxcore.replay.variants import variant
from ctxcore.store import TraceStore

IMPORTS = Path(__file__).parent / "fixtures" / "imports"
CLAUDE = IMPORTS / "claude-code" / "ccviewer-task-sidechain-session.jsonl"
CODEX = IMPORTS / "codex" / "localpush-rollout-2034.jsonl"
EDITING = "anthropic-context-editing"


@pytest.fixture(scope="module")
def claude() -> list[Trace]:
    return load_file(CLAUDE, "auto")


def _store(traces: list[Trace], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    with TraceStore(tmp_path / "ctxscope.duckdb", diagnose=False) as store:  # conftest's DB
        store.add_traces(traces, source="tests")


@pytest.fixture
def session(claude: list[Trace], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Trace]:
    """The Claude Code log stored; its main session's turns (the one with most calls)."""
    _store(claude, monkeypatch, tmp_path)
    main = max({t.session_id for t in claude}, key=lambda s: sum(t.session_id == s for t in claude))
    return sorted((t for t in claude if t.session_id == main), key=lambda t: t.turn)


def lab(session_id: str) -> AppTest:
    at: AppTest = open_page("replay", session=session_id, view="lab")
    assert at.segmented_control(key="rp_view").value == "Policy lab"
    return at


def ok(at: AppTest) -> AppTest:
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    return at


def chart(at: AppTest, index: int = 0) -> dict:
    spec: dict = json.loads(at.get("plotly_chart")[index].proto.spec)
    return spec


def test_the_table_and_the_chart_are_evaluates_figures(session: list[Trace]) -> None:
    """Three policies, one with its knobs moved, on the button: every figure of the table is
    ``evaluate``'s on the same turns, the chart places each at (recall, $), the recording as
    sent marked apart; nothing is evaluated before the button."""
    at = lab(session[0].session_id)
    assert at.multiselect(key="rp_lab_policies").value == [
        EDITING,
        "swe-agent-masking",
        "openhands-observation-masking",
    ]
    assert not at.dataframe and not at.get("plotly_chart")  # nothing runs on a rerun
    ok(at.number_input(key=f"rp_lab_{EDITING}_trigger").set_value(2000).run())
    ok(at.number_input(key=f"rp_lab_{EDITING}_keep").set_value(2).run())
    assert not at.dataframe
    ok(at.button(key="rp_lab_run").click().run())

    policies = [
        {"preset": EDITING, "trigger": 2000, "keep": 2},
        {"preset": "swe-agent-masking"},
        {"preset": "openhands-observation-masking"},
    ]
    want = evaluate(session, policies, price_table(), workers=1)
    frame = at.dataframe[0].value
    assert list(frame["policy"]) == [
        RECORDED,
        f"{EDITING} keep=2 trigger=2000",
        *[p["preset"] for p in policies[1:]],
    ]
    for (_, row), s in zip(frame.iterrows(), want, strict=True):
        assert row["input tokens"] == s.input_tokens
        assert row["Δ tokens"] == s.input_tokens - want[0].input_tokens
        assert row["$ with the cache"] == pytest.approx(s.cost_usd)
        assert row["recall"] == pytest.approx(s.recall)
        assert (row["losses"], row["findings introduced"], row["cache breaks"]) == (
            s.losses,
            s.findings_added,
            s.cache_breaks,
        )
    # the clearing sends fewer tokens yet costs more: its cache breaks, as the CLI finds
    assert want[1].input_tokens < want[0].input_tokens and want[1].cache_breaks > 0

    points = {
        d["hovertext"][0].split("<br>")[0]: (d["x"][0], d["y"][0], d["marker"]["symbol"])
        for d in chart(at)["data"]
    }
    for s in want:
        x, y, symbol = points[s.label]
        assert (x, y) == (pytest.approx(100 * (s.recall or 0)), pytest.approx(s.cost_usd))
        # the baseline a filled diamond; each policy an open shape of its own
        assert symbol.endswith("-open") == (s.label != RECORDED)
    assert len({p[2] for p in points.values()}) == len(want)
    # a policy that changed nothing sits on the recording's spot, and the page says so
    same = [s.label for s in want[1:] if (s.cost_usd, s.recall) == (want[0].cost_usd, 1.0)]
    assert same == ["openhands-observation-masking"], same
    said = views.md("On the recording's spot (same $ and recall): openhands-observation-masking")
    assert said in [c.value for c in at.caption]

    # a row selected: read whole beneath the table, and the policy the Playground opens
    at.session_state["rp_lab_table"] = {"selection": {"rows": [2], "columns": [], "cells": []}}
    ok(at.run())
    (whole,) = [c.value for c in at.code if c.value.startswith("swe-agent-masking\n")]
    assert f"$ with the cache: ${want[2].cost_usd:.4f}" in whole
    assert (
        f"input tokens: {want[2].input_tokens:,} ({want[2].input_tokens - want[0].input_tokens:+,})"
        in whole
    )
    assert at.selectbox(key="rp_lab_open_policy").value == 1  # the policies after the baseline

    # a knob moved after the evaluation: said, and nothing is evaluated until the button
    ok(at.number_input(key="rp_lab_swe-agent-masking_n").set_value(3).run())
    assert any("settings changed" in w.value for w in at.warning)
    assert list(at.dataframe[0].value["policy"])[2] == "swe-agent-masking"


def _cells(session: list[Trace], base: dict, xs: list[int], ys: list[int]) -> list[PolicyScore]:
    policies = [{**base, "trigger": x, "keep": y} for y in ys for x in xs]
    return evaluate(session, policies, price_table(), workers=1)[1:]


def test_the_heatmap_cells_are_a_direct_evaluation(session: list[Trace]) -> None:
    """trigger × keep of anthropic-context-editing, its other knob as set above: each cell's
    $ and recall those of evaluating that cell alone; below the floor crossed, the cheapest
    at or above it starred and preselected, and opened in the Playground with both values."""
    at = lab(session[0].session_id)
    ok(at.number_input(key=f"rp_lab_{EDITING}_clear_at_least").set_value(500).run())
    assert at.selectbox(key="rp_grid_policy").value == EDITING
    assert at.selectbox(key=f"rp_grid_x_{EDITING}").value == "trigger"
    assert at.selectbox(key=f"rp_grid_y_{EDITING}_trigger").value == "keep"
    xs, ys = [0, 2000, 5000], [0, 3]
    ok(at.text_input(key=f"rp_grid_xs_{EDITING}_trigger").set_value("0, 2000, 5000").run())
    ok(at.text_input(key=f"rp_grid_ys_{EDITING}_keep").set_value("0,3").run())
    cells = _cells(session, {"preset": EDITING, "clear_at_least": 500}, xs, ys)
    recalls = sorted({c.recall for c in cells if c.recall is not None})
    assert len(recalls) > 1, recalls
    floor = recalls[1]  # some cells below it
    ok(at.slider(key="rp_lab_floor").set_value(round(floor - 0.005, 3)).run())
    floor = at.slider(key="rp_lab_floor").value
    ok(at.button(key="rp_grid_run").click().run())

    fig = chart(at)
    heat, legend, star = fig["data"]
    assert heat["type"] == "heatmap"
    assert fig["layout"]["xaxis"]["ticktext"] == ["0", "2000", "5000"]
    assert fig["layout"]["yaxis"]["ticktext"] == ["0", "3"]
    for k, c in enumerate(cells):
        j, i = divmod(k, len(xs))
        assert heat["z"][j][i] == pytest.approx(c.cost_usd)
        assert f"{100 * (c.recall or 0):.1f}%" in heat["text"][j][i]
        assert ("✗" in heat["text"][j][i]) == (c.recall is None or c.recall < floor)
    # each cell below the floor framed: the frame's centre is the cell's position
    framed = {
        (round((f["x0"] + f["x1"]) / 2), round((f["y0"] + f["y1"]) / 2))
        for f in fig["layout"]["shapes"]
    }
    assert framed == {
        (k % 3, k // 3) for k, c in enumerate(cells) if c.recall is None or c.recall < floor
    }
    assert 0 < len(framed) < len(cells)
    assert legend["name"].startswith("recall below")
    ok_cells = [k for k, c in enumerate(cells) if c.recall is not None and c.recall >= floor]
    best = min(ok_cells, key=lambda k: (cells[k].cost_usd, cells[k].input_tokens, k))
    assert (round(star["x"][0]), round(star["y"][0])) == (best % 3, best // 3)
    assert at.selectbox(key="rp_grid_open_policy").value == best

    ok(at.button(key="rp_grid_open").click().run())
    assert at.title[0].value == "Playground"
    assert at.selectbox(key="pg_preset").value == EDITING
    assert at.number_input(key="pg_trigger").value == xs[best % 3]
    assert at.number_input(key="pg_keep").value == ys[best // 3]
    assert at.number_input(key="pg_clear_at_least").value == 500


def test_the_winner_opens_in_the_playground_with_what_flipped(session: list[Trace]) -> None:
    """The cheapest policy at or above the floor is preselected with the turn it changed most;
    the Playground rebuilds that turn with its preset and knobs and lists exactly the packets
    that differ from the recording."""
    at = lab(session[0].session_id)
    at.multiselect(key="rp_lab_policies").set_value([EDITING, "swe-agent-masking"])
    ok(at.run())
    ok(at.number_input(key=f"rp_lab_{EDITING}_trigger").set_value(5000).run())
    ok(at.number_input(key=f"rp_lab_{EDITING}_keep").set_value(0).run())
    ok(at.slider(key="rp_lab_floor").set_value(0.0).run())
    ok(at.button(key="rp_lab_run").click().run())
    settings = {"preset": EDITING, "trigger": 5000, "keep": 0}
    base, *scores = evaluate(
        session, [settings, {"preset": "swe-agent-masking"}], price_table(), workers=1
    )
    best = min(range(2), key=lambda i: (scores[i].cost_usd, scores[i].input_tokens, i))
    frame = at.dataframe[0].value
    assert list(frame["★"]) == ["", *["★" if i == best else "" for i in range(2)]]
    assert at.selectbox(key="rp_lab_open_policy").value == best
    won = scores[best]
    sent = {t.turn: t.input_tokens for t in base.turns}
    most = max(abs(sent[t.turn] - t.input_tokens) for t in won.turns)
    k = at.selectbox(key=f"rp_lab_open_turn_{best}").value
    assert abs(sent[won.turns[k].turn] - won.turns[k].input_tokens) == most

    # the cheaper one is not necessarily the clearing: open the clearing's row explicitly
    ok(at.selectbox(key="rp_lab_open_policy").set_value(0).run())
    k = at.selectbox(key="rp_lab_open_turn_0").value
    turn = scores[0].turns[k].turn
    ok(at.button(key="rp_lab_open").click().run())
    assert at.title[0].value == "Playground"
    rec = next(t for t in session if t.turn == turn)
    assert at.query_params["trace"] == rec.trace_id
    assert at.selectbox(key="pg_preset").value == EDITING
    assert (at.number_input(key="pg_trigger").value, at.number_input(key="pg_keep").value) == (
        5000,
        0,
    )
    assert rec.result is not None
    want = views.flipped(rec.result, variant(rec, settings).result, rec.input.history)
    assert len(want) > 0
    assert any(s.value == f"Flipped ({len(want)})" for s in at.subheader)
    shown = next(d.value for d in at.dataframe if "status_now" in d.value.columns)
    assert set(shown["packet_id"]) == set(want["packet_id"])


def test_the_playground_switches_to_a_recorded_preset_as_replay_does(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A Codex turn (counted with o200k_base): switching the Playground to ``recorded`` keeps
    the recorded tokenizer, so no packet's tokens change; a clearing policy's exclude_tools
    offers the session's tool names."""
    traces = load_file(CODEX, "auto")
    _store(traces, monkeypatch, tmp_path)
    t = [x for x in traces if x.result is not None][-1]
    assert t.config.tokenizer == "o200k_base"
    at: AppTest = open_page("playground", trace=t.trace_id)
    ok(at.selectbox(key="pg_preset").set_value("recorded").run())
    assert at.selectbox(key="pg_tokenizer").value == "o200k_base"
    flips = next((d.value for d in at.dataframe if "status_now" in d.value.columns), None)
    if flips is not None:  # the rank of a part may differ from the import's; never its tokens
        assert list(flips["tokens_before"]) == list(flips["tokens_now"])
    ok(at.selectbox(key="pg_preset").set_value(EDITING).run())
    assert at.selectbox(key="pg_tokenizer").value == "o200k_base"
    tools = at.multiselect(key="pg_exclude_tools").options
    assert "mcp__cloud-associates__search_workflows" in tools, tools


def test_the_recorded_preset_flips_nothing_on_an_imported_turn(session: list[Trace]) -> None:
    """The Playground switched to ``recorded`` on a Claude Code turn rebuilds the request as
    sent: no part flips, none moves rank (a policy's flips are then its own)."""
    for t in session[1:4]:
        at: AppTest = open_page("playground", trace=t.trace_id)
        ok(at.selectbox(key="pg_preset").set_value("recorded").run())
        assert any(s.value == "Flipped (0)" for s in at.subheader), [s.value for s in at.subheader]


def test_a_policy_that_changes_nothing_says_so_in_the_playground(session: list[Trace]) -> None:
    """An imported turn under a policy that leaves it as sent: "nothing changed", not a list
    of the recorded config's knobs as if they had moved (another preset has other knobs)."""
    from ctxapp.ui import policy_lab

    t = session[-1]
    params = policy_lab.playground_params(t, {"preset": "openhands-observation-masking"})
    at = ok(open_page("playground", **params))
    assert at.selectbox(key="pg_preset").value == "openhands-observation-masking"
    assert any(s.value == "Flipped (0)" for s in at.subheader)
    said = [c.value for c in at.caption]
    assert "Nothing changed against the recorded build." in said, said
    assert not any("changed; nothing was left out" in c for c in said), said


def test_a_policy_is_its_moved_knobs_and_the_lab_offers_the_sessions_tools(
    session: list[Trace],
) -> None:
    """A policy's settings are the knobs moved off its source's defaults (a computed default
    left empty stays computed); exclude_tools offers the tools the session called; the
    evaluation reports its progress policy by policy."""
    from ctxapp.ui import policy_lab

    assert policy_lab.policy(EDITING, {"trigger": 100_000, "keep": 3}) == {"preset": EDITING}
    assert policy_lab.policy(EDITING, {"keep": 1, "exclude_tools": ["Read"]}) == {
        "preset": EDITING,
        "keep": 1,
        "exclude_tools": ["Read"],
    }
    assert policy_lab.policy("auto-compact", {"threshold": None}) == {"preset": "auto-compact"}
    assert policy_lab.policy("auto-compact", {"threshold": 0.5}) == {
        "preset": "auto-compact",
        "threshold": 0.5,
    }
    at = lab(session[0].session_id)
    tools = at.multiselect(key=f"rp_lab_{EDITING}_exclude_tools").options
    assert {"Read", "Edit", "TodoWrite"} <= set(tools), tools
    ok(at.multiselect(key="rp_lab_policies").set_value(["auto-compact"]).run())
    assert at.number_input(key="rp_lab_auto-compact_threshold").value is None  # computed
    ok(at.number_input(key="rp_lab_auto-compact_threshold").set_value(0.05).run())
    ok(at.button(key="rp_lab_run").click().run())
    assert list(at.dataframe[0].value["policy"]) == [RECORDED, "auto-compact threshold=0.05"]

    seen: list[tuple[int, int]] = []
    policies = [{"preset": EDITING}, {"preset": "swe-agent-masking"}]
    evaluate(session, policies, price_table(), workers=1, progress=lambda d, n: seen.append((d, n)))
    assert seen == [(1, 2), (2, 2)]


def test_a_typed_knob_value_is_shown_as_text_never_as_markup(session: list[Trace]) -> None:
    """A placeholder holding markup: the policy's name shows it as text in the expander's
    label, the table and the chart (plotly reads a subset of HTML in its labels)."""
    from app_support import EVIL_IMG, EVIL_LINK

    policy = "langchain-context-editing"
    at = lab(session[0].session_id)
    ok(at.multiselect(key="rp_lab_policies").set_value([policy]).run())
    ok(at.text_input(key=f"rp_lab_{policy}_placeholder").set_value(EVIL_IMG + EVIL_LINK).run())
    name = f"{policy} placeholder={EVIL_IMG}{EVIL_LINK}"
    assert [e.label for e in at.expander] == [views.md(name)]
    ok(at.button(key="rp_lab_run").click().run())
    assert list(at.dataframe[0].value["policy"]) == [RECORDED, name]
    texts = [t for d in chart(at)["data"] for t in [d["name"], *d["hovertext"]]]
    assert not any("<img" in t for t in texts), texts
    assert sum("&lt;img" in t for t in texts) == 2, texts  # its name and its hover


def test_ctxscopes_own_presets_are_policies_too(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A ctxscope-built session with ctxscope's presets as the policies: every knob drawn
    (ctxscope's degrade ladder, computed by default, an empty box that stays computed), the
    table is evaluate's, the grid offers only knobs with values to start from."""
    import app_support as data

    traces = data.session("sess-own", 3)
    _store(traces, monkeypatch, tmp_path)
    at = lab("sess-own")
    ok(at.multiselect(key="rp_lab_policies").set_value(["ctxscope", "hello-agents"]).run())
    assert at.multiselect(key="rp_lab_ctxscope_degrade").value == []
    ok(at.button(key="rp_lab_run").click().run())
    policies = [{"preset": "ctxscope"}, {"preset": "hello-agents"}]
    want = evaluate(traces, policies, price_table(), workers=1)
    frame = at.dataframe[0].value
    assert list(frame["policy"]) == [s.label for s in want]
    assert list(frame["input tokens"]) == [s.input_tokens for s in want]
    assert at.selectbox(key="rp_grid_policy").options == ["ctxscope", "hello-agents"]
    ok(at.selectbox(key="rp_grid_policy").set_value("hello-agents").run())
    assert at.text_input(
        key=f"rp_grid_xs_hello-agents_{at.selectbox(key='rp_grid_x_hello-agents').value}"
    ).value
