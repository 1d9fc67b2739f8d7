"""Playground and Sweep through AppTest: knobs re-run the real pipeline, links carry settings."""

from __future__ import annotations

import json
from pathlib import Path

import app_support as data
import plotly.graph_objects as go
import plotly.io as pio
import pytest
from app_support import open_page as _open_page
from streamlit.testing.v1 import AppTest

from ctxapp.ui import views
from ctxcore import figures
from ctxcore.models import Config, Trace
from ctxcore.pipeline import build, resolve_config

APP = str(Path(__file__).resolve().parent.parent / "ctxapp" / "app.py")


def open_page(page: str, **params: str) -> AppTest:
    at: AppTest = _open_page(page, timeout=60, **params)
    return at


@pytest.fixture(scope="module")
def built() -> list[Trace]:
    return data.session("sess-a", 2) + data.session("sess-b", 1, first=30, tags=["nightly"])


@pytest.fixture
def db(built: list[Trace], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    path = tmp_path / "ctxscope.duckdb"
    data.fill(path, built)
    return path


def move(at: AppTest, kind: str, key: str, value: object) -> AppTest:
    """Change one knob as a user would. The move reruns the two result fragments alone (the
    summary and the open tab's body): ``at`` then holds only what they drew, no page title,
    trace picker, knobs or tab bar. A later move or ``at.run()`` runs the whole page again
    first, as the next interaction would see it."""
    if not at.title:
        at.run()
    getattr(at, kind)(key=key).set_value(value).run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    assert not at.title and not at.slider and not at.tabs, f"moving {key} reran the page"
    assert any(s.value.startswith("Flipped (") for s in at.subheader)
    return at


def flipped_frame(at: AppTest):
    return next(d.value for d in at.dataframe if "status_now" in d.value.columns)


def expected_flips(t: Trace, **changes) -> dict[str, tuple[str, str]]:
    """packet -> (status before, status now) for the knobs changed on the recorded config,
    with output reserve and safety margin derived again by the preset (as the UI does)."""
    cfg = Config(
        **{**t.config.model_dump(), "output_reserve": None, "safety_margin": None, **changes}
    )
    now = {d.packet_id: d for d in build(t.input, cfg).decisions}
    before = {d.packet_id: d for d in t.result.decisions}
    out = {}
    for pid in set(now) | set(before):
        a, b = before.get(pid), now.get(pid)
        key_a = (a.status, a.tokens_after, a.rank) if a else None
        key_b = (b.status, b.tokens_after, b.rank) if b else None
        if key_a != key_b:
            out[pid] = (a.status.value if a else "—", b.status.value if b else "—")
    return out


def test_max_tokens_slider_flips_packets(db: Path, built: list[Trace]) -> None:
    t = built[1]
    at = open_page("playground", trace=t.trace_id)
    assert at.selectbox(key="pg_trace").value == t.trace_id
    assert at.slider(key="pg_max_tokens").value == t.config.max_tokens
    assert "Flipped (0)" in [s.value for s in at.subheader]
    new = (t.result.totals.used * 6 // 10) // 100 * 100
    want = expected_flips(t, max_tokens=new)
    assert any(b != a for a, b in want.values()), "the chosen budget must flip a status"
    move(at, "slider", "pg_max_tokens", new)
    assert not at.exception and not at.error, [e.value for e in at.error]
    frame = flipped_frame(at)
    assert f"Flipped ({len(want)})" in [s.value for s in at.subheader]
    got = {r.packet_id: (r.status_before, r.status_now) for r in frame.itertuples()}
    assert got == want
    # status flips are listed first
    first_non_status = next(
        (i for i, c in enumerate(frame["change"]) if "status" not in c), len(frame)
    )
    assert all("status" in c for c in frame["change"][:first_non_status])
    # the URL now carries the new budget
    assert at.query_params["max_tokens"] == str(new)


def test_min_relevance_slider_filters_packets(db: Path, built: list[Trace]) -> None:
    t = built[1]
    at = open_page("playground", trace=t.trace_id)
    move(at, "slider", "pg_min_relevance", 0.5)
    want = expected_flips(t, min_relevance=0.5)
    got = {r.packet_id: (r.status_before, r.status_now) for r in flipped_frame(at).itertuples()}
    assert got == want
    assert any(now == "filtered" for _, now in got.values())


def test_permalink_reproduces_settings(db: Path, built: list[Trace]) -> None:
    t = built[1]
    at = open_page("playground", trace=t.trace_id)
    move(at, "slider", "pg_max_tokens", 9000)
    move(at, "slider", "pg_relevance_weight", 0.45)
    move(at, "selectbox", "pg_fill", "optimal")
    link = dict(at.query_params)
    assert link["trace"] == t.trace_id and link["fill"] == "optimal"
    flips = flipped_frame(at)
    # A new session opened on that link shows the same settings and the same flips.
    again = open_page("playground", **link)
    assert again.slider(key="pg_max_tokens").value == 9000
    assert again.slider(key="pg_relevance_weight").value == pytest.approx(0.45)
    assert again.selectbox(key="pg_fill").value == "optimal"
    assert flipped_frame(again).equals(flips)
    assert dict(again.query_params) == link


def test_bad_permalink_value_is_a_message(db: Path, built: list[Trace]) -> None:
    at = open_page("playground", trace=built[0].trace_id, max_tokens="lots")
    assert any("max_tokens='lots'" in e.value.replace("\\", "") for e in at.error)
    assert at.slider(key="pg_max_tokens").value == built[0].config.max_tokens


def test_switching_preset_shows_its_knobs(db: Path, built: list[Trace]) -> None:
    t = built[0]
    at = open_page("playground", trace=t.trace_id)
    assert at.slider(key="pg_priority_weight").value == t.config.priority_weight
    at.selectbox(key="pg_preset").set_value("hello-agents-book").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    keys = {s.key for s in at.slider}
    assert "pg_priority_weight" not in keys and "pg_relevance_weight" in keys
    assert at.toggle(key="pg_tie_weights").value is True  # the tutorial's weights sum to 1
    at.slider(key="pg_relevance_weight").set_value(0.8).run()
    assert at.slider(key="pg_recency_weight").value == pytest.approx(0.2)
    assert at.query_params["preset"] == "hello-agents-book"


def test_save_variant_links_to_source(db: Path, built: list[Trace]) -> None:
    t = built[1]
    at = open_page("playground", trace=t.trace_id)
    move(at, "slider", "pg_max_tokens", 12000)
    at.session_state["pg_section"] = "Permalink & save"
    at.run()
    at.button(key="pg_save").click().run()
    assert not at.exception
    msg = next(s.value for s in at.success)
    assert f"linked to {views.code(t.trace_id)}" in msg  # ids as code spans: inert
    at.button(key="pg_open_saved").click().run()
    assert at.title[0].value == "Inspect"
    new_id = at.query_params["trace"]
    assert new_id != t.trace_id
    assert any(f"variant of {views.code(t.trace_id)}" in c.value for c in at.caption)
    # the Traces page lists it under the variant tag
    at = open_page("traces", tags="variant")
    frame = next(d.value for d in at.dataframe if "trace_id" in d.value.columns)
    assert list(frame["trace_id"]) == [new_id]


def test_sweep_cell_opens_playground_with_its_settings(db: Path, built: list[Trace]) -> None:
    t = built[1]
    at = open_page("sweep", trace=t.trace_id)
    at.selectbox(key="sw_x_param").set_value("max_tokens").run()
    at.number_input(key="sw_x_from").set_value(4000).run()
    at.number_input(key="sw_x_to").set_value(12000).run()
    at.number_input(key="sw_x_steps").set_value(3).run()
    at.selectbox(key="sw_y_param").set_value("min_relevance").run()
    at.number_input(key="sw_y_from").set_value(0.0).run()
    at.number_input(key="sw_y_to").set_value(0.4).run()
    at.number_input(key="sw_y_steps").set_value(3).run()
    at.button(key="sw_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    cells = at.selectbox(key="sw_cell").options
    assert len(cells) == 9
    # cell (x=2, y=1): max_tokens 12000, min_relevance 0.2
    at.selectbox(key="sw_cell").set_value((2, 1)).run()
    at.button(key="sw_open").click().run()
    assert at.title[0].value == "Playground"
    assert at.query_params["max_tokens"] == "12000"
    assert at.query_params["min_relevance"] == "0.2"
    assert at.slider(key="pg_max_tokens").value == 12000
    assert at.slider(key="pg_min_relevance").value == pytest.approx(0.2)
    # the rest of the settings are the recorded ones
    assert at.slider(key="pg_relevance_weight").value == t.config.relevance_weight


def test_max_tokens_slider_keeps_a_large_value(db: Path, built: list[Trace]) -> None:
    """The slider's range does not move with its value (which would reset the widget)."""
    t = built[1]
    at = open_page("playground", trace=t.trace_id)
    top = at.slider(key="pg_max_tokens").max
    high = int(top * 3 // 4) // 100 * 100
    assert high > 2 * t.config.max_tokens or high > 16_000
    move(at, "slider", "pg_max_tokens", high)
    assert at.query_params["max_tokens"] == str(high)
    at.run()
    assert at.slider(key="pg_max_tokens").value == high
    assert at.slider(key="pg_max_tokens").max == top
    at.run()
    assert at.slider(key="pg_max_tokens").value == high
    assert at.query_params["max_tokens"] == str(high)


def test_diff_against_the_previous_run_or_the_recorded_build(db: Path, built: list[Trace]) -> None:
    t = built[1]
    at = open_page("playground", trace=t.trace_id)
    assert at.radio(key="pg_diff_mode").value == "recorded build"
    first = (t.result.totals.used * 6 // 10) // 100 * 100
    move(at, "slider", "pg_max_tokens", first)
    move(at, "slider", "pg_min_relevance", 0.5)
    # against the recorded build: both moves
    assert {r.packet_id for r in flipped_frame(at).itertuples()} == set(
        expected_flips(t, max_tokens=first, min_relevance=0.5)
    )
    # against the previous run: only what the last move (min_relevance) did
    at.run()  # the switch sits above the fragments a knob move reruns
    at.radio(key="pg_diff_mode").set_value("previous run").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    cfg = Config(
        **{
            **t.config.model_dump(),
            "output_reserve": None,
            "safety_margin": None,
            "max_tokens": first,
        }
    )
    prev = build(t.input, cfg)
    now = build(t.input, cfg.model_copy(update={"min_relevance": 0.5}))
    want = views.flipped(prev, now)
    got = flipped_frame(at)
    assert list(got["packet_id"]) == list(want["packet_id"])
    assert f"Flipped ({len(want)})" in [s.value for s in at.subheader]
    # the reasons before and now sit next to the statuses, ahead of the numbers
    assert list(got.columns[:5]) == [
        "packet_id",
        "status_before",
        "status_now",
        "reason_before",
        "reason_now",
    ]
    # a tab switch (same settings) keeps "previous" the run before the last move
    at.session_state["pg_section"] = "Prompt diff"
    at.run()
    assert list(flipped_frame(at)["packet_id"]) == list(want["packet_id"])
    shown = "--- previous" if prev.prompt != now.prompt else "(the prompts are identical)"
    assert any(shown in c.value for c in at.code)


def _variant(t: Trace, **changes) -> Trace:
    """``t`` rebuilt with knobs changed as the Playground does (reserve and safety margin
    derived again by the preset)."""
    cfg = resolve_config(
        Config(
            **{**t.config.model_dump(), "output_reserve": None, "safety_margin": None, **changes}
        ),
        t.input,
    )
    return t.model_copy(update={"config": cfg, "result": build(t.input, cfg)})


def test_a_knob_move_reruns_the_result_alone(db: Path, built: list[Trace]) -> None:
    """The fragments: a value knob redraws the summary and the open tab, nothing else; a
    knob that changes the panel itself (the preset) reruns the whole page."""
    t = built[1]
    at = open_page("playground", trace=t.trace_id)
    assert at.title[0].value == "Playground" and at.tabs
    new = (t.result.totals.used * 6 // 10) // 100 * 100
    variant = _variant(t, max_tokens=new)
    assert variant.result is not None
    flips = views.flipped(t.result, variant.result, t.input.history)
    assert not flips.empty, "the chosen budget must flip something"
    move(at, "slider", "pg_max_tokens", new)
    # not redrawn: the picker, the knobs, the Reset button, the tab bar, and the decisions
    # table's filters, sort and pager (drawn by the page; only the rows follow a move)
    assert not at.selectbox and not at.button and not at.tabs
    assert not at.multiselect and not at.text_input and not at.number_input and not at.toggle
    # redrawn: the numbers (one line, not fourteen metric elements), what flipped, the
    # window bar and the open tab (Decisions) of the new build
    assert not at.metric
    numbers = next(m.value for m in at.markdown if m.value.startswith("budget **"))
    assert f"used **{variant.result.totals.used:,}** (" in numbers
    assert f"Flipped ({len(flips)})" in [s.value for s in at.subheader]
    decisions = next(d.value for d in at.dataframe if "reason_text" in d.value.columns)
    # the packets that changed first (in the flipped table's order), each with the status it
    # had, then the others in the builder's order
    changed = [
        p for p, now in zip(flips["packet_id"], flips["status_now"], strict=True) if now != "—"
    ]
    rest = [d.packet_id for d in variant.result.decisions if d.packet_id not in set(changed)]
    assert list(decisions["packet_id"]) == changed + rest
    before = dict(zip(flips["packet_id"], flips["status_before"], strict=True))
    assert list(decisions["before"]) == [before.get(p, "") for p in changed + rest]
    status = {d.packet_id: d.status.value for d in variant.result.decisions}
    assert list(decisions["status"]) == [status[p] for p in changed + rest]
    (chart,) = at.get("plotly_chart")
    subtitle = json.loads(chart.proto.spec)["layout"]["title"]["subtitle"]["text"]
    assert f"used {variant.result.totals.used:,} " in subtitle
    # the flip count is a caption under the bar, not part of the figure
    assert "flipped" not in subtitle
    assert views.flip_summary(flips) in [c.value for c in at.caption]
    assert at.query_params["max_tokens"] == str(new)
    # the preset changes which knobs there are: the whole page runs
    at.run()
    at.selectbox(key="pg_preset").set_value("hello-agents-book").run()
    assert not at.exception
    assert at.title and at.tabs and at.slider(key="pg_relevance_weight")


def test_reset_puts_back_the_recorded_settings(db: Path, built: list[Trace]) -> None:
    t = built[1]
    at = open_page("playground", trace=t.trace_id)
    new = (t.result.totals.used * 6 // 10) // 100 * 100
    move(at, "slider", "pg_max_tokens", new)
    move(at, "slider", "pg_min_relevance", 0.5)
    at.run()
    assert at.slider(key="pg_max_tokens").value == new
    at.button(key="pg_reset").click().run()
    assert not at.exception
    assert at.slider(key="pg_max_tokens").value == t.config.max_tokens
    assert at.slider(key="pg_min_relevance").value == pytest.approx(t.config.min_relevance)
    assert "Flipped (0)" in [s.value for s in at.subheader]
    assert at.query_params["max_tokens"] == str(t.config.max_tokens)


def test_window_bar_is_the_figure_plotly_validation_gives(built: list[Trace]) -> None:
    """``window_bar`` skips plotly.py's validation (it costs more than the re-run); what it
    builds must be exactly what validating the same figure gives."""
    for t in built:
        assert t.result is not None
        wide = figures.window_extent(t) * 2
        for kw in (
            {},
            {"note": "flipped (2): 2 now <b>kept</b>"},
            {"x_max": wide, "legend": False},
        ):
            fig = figures.window_bar(t, **kw)  # type: ignore[arg-type]
            checked = go.Figure(fig.to_dict())  # validates every property; raises on a typo
            assert json.loads(pio.to_json(checked)) == json.loads(pio.to_json(fig, validate=False))


def test_the_app_settles_its_heap_after_a_run(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    from ctxapp.ui import boot

    calls: list[int] = []
    monkeypatch.setattr(boot, "settle_heap", lambda: calls.append(1))
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception and calls  # app.py settles the heap after its run
    # in a server process (not AppTest) the first call collects and freezes what is alive,
    # and later calls leave the collector alone
    code = (
        "import gc, sys; sys.path.insert(0, sys.argv[1]); from ui import boot; "
        "assert gc.get_freeze_count() == 0; boot.settle_heap(); n = gc.get_freeze_count(); "
        "assert n > 10000, n; gc.collect(); boot.settle_heap(); "
        "assert gc.get_freeze_count() == n; print('ok')"
    )
    root = str(Path(APP).parent)
    out = subprocess.run(
        [sys.executable, "-c", code, root], capture_output=True, text=True, timeout=120
    )
    assert out.stdout.strip() == "ok", out.stderr[-2000:]
