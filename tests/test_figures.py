"""The figure builders: what they draw is what the trace says, and packet text stays text."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import plotly.io as pio
import pytest

from ctxcore import figures
from ctxcore.figures.timeline import GAPPED_TURNS
from ctxcore.models import (
    PARTITIONS,
    Builder,
    BuildResult,
    CapturedInput,
    Config,
    Decision,
    Packet,
    PartitionUsage,
    Reason,
    Report,
    Status,
    Totals,
    Trace,
)

EVIL_ID = "tool:<script>alert(1)</script>"
EVIL_KIND = "<img src=x onerror=alert(1)>"
EVIL_REASON = "see [here](javascript:alert(1)) <b>bold</b>"


def _trace(corpus: Path) -> Trace:
    """A hand-made build over real tool output, with a hostile packet among them."""
    now = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    texts = {
        "tool:pytest": (corpus / "d01_pytest_reportingdemo_44_failures.rst").read_text()[:3000],
        "tool:grep": (corpus / "d04_grep_r_qualname_sphinx.txt").read_text()[:2000],
        "tool:pip": (corpus / "d05_pip_install_editable_marshmallow.log").read_text()[:1500],
        EVIL_ID: "<script>alert(1)</script>",
    }
    packets = [Packet(id=k, kind="tool_result", content=v) for k, v in texts.items()]
    # score = 0.7 relevance + 0.3 recency, exactly.
    rows = [
        ("tool:pytest", "tool_result", Status.KEPT, Reason.FITS, 0.9, 0.8, 700, 700, "[Evidence]"),
        (
            "tool:grep",
            "tool_result",
            Status.TRUNCATED,
            Reason.DEGRADED,
            0.5,
            0.5,
            500,
            200,
            "[Evidence]",
        ),
        ("tool:pip", "tool_result", Status.DROPPED, Reason.NO_ROOM, 0.3, 0.2, 400, 0, None),
        (EVIL_ID, EVIL_KIND, Status.FILTERED, Reason.BELOW_MIN_RELEVANCE, 0.05, 1.0, 10, 0, None),
        (
            "builder:instructions",
            "instructions",
            Status.KEPT,
            Reason.MUST_KEEP,
            None,
            None,
            50,
            50,
            "[Role & Policies]",
        ),
    ]
    decisions = []
    for rank, (pid, kind, st, reason, rel, rec, tb, ta, part) in enumerate(rows):
        score = None if rel is None else 0.7 * rel + 0.3 * rec
        decisions.append(
            Decision(
                packet_id=pid,
                kind=kind,
                status=st,
                reason=reason,
                reason_text=EVIL_REASON if pid == EVIL_ID else f"{reason.value} sentence",
                partition=part,
                relevance=rel,
                recency=rec,
                score=score,
                rank=rank,
                tokens_before=tb,
                tokens_after=ta,
            )
        )
    used = {"[Role & Policies]": 50, "[Task]": 30, "[Evidence]": 900, "[Output]": 20}
    parts = [
        PartitionUsage(
            name=n,
            budget=1000 if n == "[Evidence]" else None,
            used=used.get(n, 0),
            items=1 if n in used else 0,
        )
        for n in PARTITIONS
    ]
    totals = Totals(
        window=4000,
        output_reserve=800,
        safety_margin=200,
        available=3000,
        used=1040,
        tokenizer="cl100k_base",
    )
    return Trace(
        trace_id="t-fig",
        session_id="s<1>",
        turn=3,
        created_at=now,
        builder=Builder(name="test", version="0"),
        input=CapturedInput(query="why does pytest fail?", now=now, packets=packets),
        config=Config(
            preset="ctxscope", min_relevance=0.1, relevance_weight=0.7, recency_weight=0.3
        ),
        result=BuildResult(
            prompt="[Task]\nwhy",
            decisions=decisions,
            partitions=parts,
            totals=totals,
            report=Report(budget=3000, used=1040),
        ),
    )


@pytest.fixture
def trace(corpus: Path) -> Trace:
    return _trace(corpus)


def _all_strings(fig) -> str:
    return json.dumps(fig.to_plotly_json(), default=str)


def test_window_bar_accounts_for_the_whole_window(trace: Trace) -> None:
    fig = figures.window_bar(trace)
    widths = {bar.name: bar.x[0] for bar in fig.data}
    # partitions + headers (1040 - 1000) + free (3000 - 1040) + safety + reserve = window
    assert widths["[Evidence]"] == 900
    assert widths["headers &amp; separators"] == 40
    assert widths["free"] == 1960
    assert widths["safety margin"] == 200
    assert widths["output reserve"] == 800
    assert sum(widths.values()) == trace.result.totals.window
    assert "[State]" not in widths  # an empty partition draws nothing


def test_window_bar_shows_overflow(trace: Trace) -> None:
    over = trace.model_copy(
        update={
            "result": trace.result.model_copy(
                update={"totals": trace.result.totals.model_copy(update={"used": 3500})}
            )
        }
    )
    names = {bar.name: bar.x[0] for bar in figures.window_bar(over).data}
    assert names["over budget"] == 500
    assert "free" not in names


def test_partition_budgets_marks_overspent_partition(trace: Trace) -> None:
    fig = figures.partition_budgets(trace)
    used = next(b for b in fig.data if b.name == "used")
    budget = next(b for b in fig.data if b.name == "budget")
    # one horizontal bar a partition, first on top: names read across in a narrow column
    assert used.orientation == budget.orientation == "h"
    assert fig.layout.yaxis.autorange == "reversed"
    i = list(used.y).index("[Evidence]")
    assert used.x[i] == 900 and budget.x[i] == 1000
    assert used.marker.color[i] != figures.OVER_COLOR
    j = list(used.y).index("[Task]")
    assert "no budget of its own" in budget.hovertext[j]


def test_score_scatter_groups_by_status_and_draws_thresholds(trace: Trace) -> None:
    fig = figures.score_scatter(trace)
    points = {b.name: b for b in fig.data if b.mode == "markers"}
    assert set(points) == {"kept (1)", "truncated (1)", "dropped (1)", "filtered (1)"}
    # size grows with tokens: the 700-token packet is drawn bigger than the 10-token one.
    assert points["kept (1)"].marker.size[0] > points["filtered (1)"].marker.size[0]
    # min_relevance line at 0.1
    assert any(s.x0 == 0.1 and s.x1 == 0.1 for s in fig.layout.shapes)
    # cut-off = lowest score admitted by the fill (the truncated grep: 0.7*.5+.3*.5 = 0.5)
    line = next(b for b in fig.data if b.mode == "lines")
    assert line.name.startswith("score cut-off 0.500")
    for x, y in zip(line.x, line.y, strict=True):
        assert 0.7 * x + 0.3 * y == pytest.approx(0.5)
    # the must-keep instructions have no scores and are reported as not shown
    assert "1 without relevance/recency not shown" in fig.layout.title.subtitle.text


def test_score_cutoff_ignores_must_keep(trace: Trace) -> None:
    assert figures.score_cutoff(trace.result.decisions) == pytest.approx(0.5)


def test_untrusted_text_is_escaped_in_every_figure(trace: Trace) -> None:
    figs = [
        figures.window_bar(trace),
        figures.partition_budgets(trace),
        figures.score_scatter(trace),
        figures.timeline_heatmap(
            [
                {
                    "turn": 1,
                    "packet_id": EVIL_ID,
                    "kind": EVIL_KIND,
                    "status": "kept",
                    "reason": "FITS",
                    "tokens_after": 3,
                }
            ]
        ),
        figures.sweep_heatmap(
            [[1.0]], [EVIL_ID], [0.5], x_label=EVIL_KIND, y_label="y", title=EVIL_REASON
        ),
    ]
    for fig in figs:
        blob = _all_strings(fig)
        assert "<script" not in blob and "<img" not in blob and "<b>bold" not in blob
        html_out = pio.to_html(fig, include_plotlyjs=False, full_html=False)
        assert "<script>alert" not in html_out
    blob = _all_strings(figures.score_scatter(trace))
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in blob
    assert "&lt;img src=x onerror=alert(1)&gt;" in blob


def test_timeline_heatmap_colours_each_status(trace: Trace) -> None:
    rows = [
        {
            "turn": 1,
            "packet_id": "a",
            "kind": "note",
            "status": "kept",
            "reason": "FITS",
            "tokens_after": 5,
        },
        {
            "turn": 2,
            "packet_id": "a",
            "kind": "note",
            "status": "dropped",
            "reason": "NO_ROOM",
            "tokens_after": 0,
        },
        {
            "turn": 2,
            "packet_id": "b",
            "kind": "note",
            "status": "summarized",
            "reason": "DEGRADED",
            "tokens_after": 2,
        },
    ]
    fig = figures.timeline_heatmap(rows)
    heat = fig.data[0]
    assert list(fig.layout.yaxis.ticktext) == ["a", "b"] and list(heat.x) == ["1", "2"]
    # each row's category is its head (the hover's first lines), its tick its label
    assert list(fig.layout.yaxis.tickvals) == list(heat.y)
    assert [figures.timeline_row(heat, x) for x in ("a", "b")] == [0, 1]
    assert heat.z[1][0] is None  # b was not a candidate at turn 1
    n = len(figures.STATUS_ORDER)

    def colour(v: float) -> str:
        pos = (v - heat.zmin) / (heat.zmax - heat.zmin)
        band = min(int(pos * n), n - 1)
        return heat.colorscale[2 * band][1]

    assert colour(heat.z[0][0]) == figures.STATUS_COLORS["kept"]
    assert colour(heat.z[0][1]) == figures.STATUS_COLORS["dropped"]
    assert colour(heat.z[1][1]) == figures.STATUS_COLORS["summarized"]


def test_session_usage_stacks_partitions_against_budget() -> None:
    rows = [
        {"turn": 1, "partition": "[Task]", "budget": 100, "used": 40},
        {"turn": 1, "partition": "[Evidence]", "budget": 900, "used": 700},
        {"turn": 2, "partition": "[Task]", "budget": 100, "used": 50},
        {"turn": 2, "partition": "[Evidence]", "budget": 900, "used": 950},
    ]
    fig = figures.session_usage(rows)
    bars = {b.name: list(b.y) for b in fig.data if b.type == "bar"}
    assert bars == {"[Task]": [40, 50], "[Evidence]": [700, 950]}
    line = next(b for b in fig.data if b.type == "scatter")
    assert list(line.y) == [1000, 1000]
    # with the builds' own budgets, the line shows those instead of the caps' sum
    fig = figures.session_usage(rows, budgets={1: 800, 2: 900})
    line = next(b for b in fig.data if b.type == "scatter")
    assert list(line.y) == [800, 900]


def test_tokenizer_drift_reports_relative_error() -> None:
    fig = figures.tokenizer_drift(
        [{"partition": "[Task]", "exact": 100, "estimates": {"len/4": 123}}], "cl100k_base"
    )
    est = next(b for b in fig.data if b.name == "len/4")
    assert est.orientation == "h" and list(est.y) == ["[Task]"]
    assert est.x[0] == 123 and "+23%" in est.hovertext[0]


def test_result_less_trace_gives_a_message(trace: Trace) -> None:
    bare = trace.model_copy(update={"result": None})
    for fn in (figures.window_bar, figures.partition_budgets, figures.score_scatter):
        fig = fn(bare)
        assert "no build result" in fig.layout.annotations[0].text


def test_scatter_points_map_back_to_decisions(trace: Trace) -> None:
    fig = figures.score_scatter(trace)
    for bar in fig.data:
        if bar.mode != "markers":
            continue
        for i, x in zip(bar.customdata, bar.x, strict=True):
            assert trace.result.decisions[i].relevance == x


def _row(turn: int, pid: str, kind: str, status: str = "kept") -> dict[str, object]:
    return {
        "turn": turn,
        "packet_id": pid,
        "kind": kind,
        "status": status,
        "reason": "FITS",
        "tokens_after": 1,
    }


#: the packet chart's cells at 1024 px, a 500-turn session (tl_mine_1024 screenshot): ~258 px
CELLS_AT_1024 = 258


@pytest.mark.parametrize("turns", [12, 100, 500])
def test_every_turn_of_a_long_session_keeps_a_visible_column(turns: int) -> None:
    """The gap between columns never eats a column: at 500 turns a 1 px gap left nothing
    of the ~0.5 px columns at 1024 px, and the chart was drawn empty."""
    rows = [
        {"turn": t, "packet_id": p, "kind": "k", "status": "kept", "reason": "r",
         "tokens_after": 10}
        for t in range(turns)
        for p in ("a", "b")
    ]  # fmt: skip
    fig = figures.timeline_heatmap(rows)
    grid = fig.data[0]
    assert CELLS_AT_1024 / turns - grid.xgap >= 0.5
    # rows are 22 px: they stay apart, by their gap or (gapless, drawn as plotly's fast
    # image) by a white line between them
    lines = [s for s in fig.layout.shapes if s.type == "path"]
    assert grid.ygap == 1 if turns <= GAPPED_TURNS else lines


def test_timeline_marks_gaps_and_groups_rows_by_kind() -> None:
    rows = [_row(16, "tool:a", "tool"), _row(16, "msg-1", "history"), _row(37, "tool:b", "tool")]
    fig = figures.timeline_heatmap(rows)
    assert list(fig.layout.yaxis.ticktext) == ["tool:a", "msg-1", "tool:b"]
    gaps = [a.text for a in fig.layout.annotations]
    assert gaps == ["gap: 20 turn(s)"], gaps
    assert len(fig.layout.shapes) == 1 and fig.layout.shapes[0].x0 == 0.5
    # the legend sits at the top, where a tall chart opens, on lines of its own under the
    # title (which holds the very top)
    legend, title = fig.layout.legend, fig.layout.title
    assert legend.yref == title.yref == "container" and legend.yanchor == title.yanchor == "top"
    assert title.y == 1 and 0.8 < legend.y < 1
    grouped = figures.timeline_heatmap(rows, group_by_kind=True)
    assert list(grouped.layout.yaxis.ticktext) == [
        "history · msg-1",
        "tool · tool:a",
        "tool · tool:b",
    ]
    # consecutive turns: no gap drawn
    assert not figures.timeline_heatmap([_row(1, "a", "x"), _row(2, "a", "x")]).layout.shapes


def test_status_colours_are_distinct_from_partition_colours() -> None:
    statuses = set(figures.STATUS_COLORS.values())
    assert len(statuses) == len(figures.STATUS_ORDER)
    assert not statuses & set(figures.PARTITION_COLORS.values())
    # Okabe-Ito: dropped is vermillion, kept bluish green
    assert figures.STATUS_COLORS["dropped"] == "#d55e00"
    assert figures.STATUS_COLORS["kept"] == "#009e73"


def test_window_bars_share_a_scale_and_partition_caps_say_when_they_overlap(
    trace: Trace,
) -> None:
    assert trace.result is not None
    wide = figures.window_extent(trace) * 2
    fig = figures.window_bar(trace, x_max=wide, note="flipped (2): 2 now kept")
    assert tuple(fig.layout.xaxis.range) == (0, wide)
    assert "flipped (2): 2 now kept" in fig.layout.title.subtitle.text
    caps = [p.budget for p in trace.result.partitions if p.budget is not None]
    text = figures.partition_budgets(trace).layout.title.subtitle.text
    if not caps:
        assert "no budget per partition" in text
    elif sum(caps) > trace.result.totals.available:
        assert "they overlap" in text
    else:
        assert f"add up to {sum(caps):,}" in text


def test_timeline_diff_colours_what_changed_and_pales_what_did_not() -> None:
    before = [_row(1, "a", "tool"), _row(1, "b", "tool"), _row(2, "a", "tool"), _row(2, "c", "x")]
    after = [
        _row(1, "a", "tool"),
        {**_row(1, "b", "tool"), "status": "dropped"},
        _row(2, "a", "tool"),
        _row(2, "d", "x"),
    ]
    fig = figures.timeline_diff(before, after)
    grid = fig.data[0]
    order = list(figures.DIFF_COLORS)

    def cell(turn: int, pid: str) -> tuple[float | None, str]:
        i, j = figures.timeline_row(grid, pid), list(grid.x).index(str(turn))
        return grid.z[i][j], figures.cell_hover(grid, i, j)

    assert cell(1, "a")[0] == order.index(figures.UNCHANGED)
    z, hover = cell(1, "b")
    assert z == order.index("dropped") and "kept → dropped" in hover
    z, hover = cell(2, "d")  # a candidate after only
    assert z == order.index("kept") and "not a candidate → kept" in hover
    z, hover = cell(2, "c")  # a candidate before only
    assert z == order.index(figures.GONE) and "kept → not a candidate" in hover
    assert cell(1, "c")[0] is None  # not a candidate on either side: blank
    assert [d.name for d in fig.data[1:]] == order  # the legend names every colour


def _demo_turn(name: str, turn: int) -> Trace:
    from ctxcore.loading import parse_json, trace_from_obj

    path = Path(__file__).resolve().parent.parent / "ctxcore" / "data" / "demo" / name
    lines = path.read_text(encoding="utf-8").splitlines()
    found = [trace_from_obj(parse_json(ln, str(path)), str(path)) for ln in lines if ln.strip()]
    return next(t for t in found if t.turn == turn)


def test_a_crowded_build_opens_its_score_scatter_on_ranks_where_every_packet_shows() -> None:
    """The demo's 187-packet CJK turn has all but a few packets at relevance 0 with recency
    0 or 1: on rank axes each packet has a spot of its own, and the hover keeps the values."""
    t = _demo_turn("zh-opencode-codesummary-ctxscope.jsonl", 88)
    assert t.result is not None
    assert figures.crowding(t) > figures.CROWDED and figures.score_axes(t) == "ranks"
    fig = figures.score_scatter(t, "ranks")
    points = [
        (x, y, h)
        for tr in fig.data
        if tr.mode == "markers" and tr.hovertext
        for x, y, h in zip(tr.x, tr.y, tr.hovertext, strict=True)
    ]
    scored = [d for d in t.result.decisions if d.relevance is not None and d.recency is not None]
    assert len(points) == len(scored) == 187
    assert len({(x, y) for x, y, _ in points}) == 187  # no packet under another
    assert all(0 <= x <= 1 and 0 <= y <= 1 for x, y, _ in points)
    assert fig.layout.xaxis.title.text == "rank by relevance"
    # the threshold sits between the ranks below min_relevance and those at or above it
    (line,) = fig.layout.shapes
    below = sum(1 for d in scored if (d.relevance or 0) < (t.config.min_relevance or 0))
    ranks = sorted(x for x, _, _ in points)
    assert ranks[below - 1] < line.x0 < ranks[below]
    # on value axes the packets that share a spot are spread a little, and said to be
    values = figures.score_scatter(t, "values")
    spots = [
        (x, y)
        for tr in values.data
        if tr.mode == "markers" and tr.hovertext
        for x, y in zip(tr.x, tr.y, strict=True)
    ]
    assert len(set(spots)) == len(spots) == 187
    assert "jittered" in values.layout.title.subtitle.text


def test_a_build_with_spread_scores_keeps_value_axes() -> None:
    t = _demo_turn("zh-toolchat-glaive-197-ctxscope.jsonl", 3)
    assert figures.crowding(t) <= figures.CROWDED and figures.score_axes(t) == "values"
    with pytest.raises(ValueError):
        figures.score_scatter(t, "log")
