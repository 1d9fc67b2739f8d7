"""A long session's packet chart is drawn the cheap way (issue 32, Speed): a gapless grid,
which plotly paints as one pixel a cell scaled (its "fast" image), its rows kept apart by
one white path with a line at every boundary between two rows; the turns under a tall
chart from a trace that draws no point; and the page sends the chart with the layout
Streamlit gives a chart that selects points, so Streamlit changes nothing after drawing
it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import app_support as data
import pytest
from app_support import open_page

from ctxcore import figures
from ctxcore.figures.timeline import GAPPED_TURNS


def _rows(turns: int, packets: int) -> list[dict[str, object]]:
    return [
        {"turn": t, "packet_id": f"p{k}", "kind": "k", "status": "kept", "reason": "FITS",
         "tokens_after": k}
        for t in range(turns)
        for k in range(packets)
    ]  # fmt: skip


def _row_lines(fig: object) -> list[tuple[float, float, float]]:
    """The row separators' segments (y, from x, to x) of the chart's path shapes."""
    out = []
    for shape in fig.layout.shapes:  # type: ignore[attr-defined]
        if shape.type == "path":
            for x0, y, x1 in re.findall(r"M([-\d.]+),([-\d.]+)H([-\d.]+)", shape.path):
                out.append((float(y), float(x0), float(x1)))
    return out


@pytest.mark.parametrize("packets", [2, 30])
def test_a_long_grid_is_gapless_and_its_rows_stay_apart(packets: int) -> None:
    turns = GAPPED_TURNS + 1
    fig = figures.timeline_heatmap(_rows(turns, packets), legend=False)
    grid = fig.data[0]
    assert (grid.xgap, grid.ygap) == (0, 0)  # plotly's fast image
    lines = _row_lines(fig)
    # one line at each boundary between two rows, across every turn
    assert sorted(y for y, _, _ in lines) == [k + 0.5 for k in range(packets - 1)]
    assert all((x0, x1) == (-0.5, turns - 0.5) for _, x0, x1 in lines)
    line = next(s.line for s in fig.layout.shapes if s.type == "path")
    assert line.color == "white" and line.width == 1


def test_a_short_grid_keeps_its_gaps_and_needs_no_line() -> None:
    fig = figures.timeline_heatmap(_rows(GAPPED_TURNS, 30), legend=False)
    assert (fig.data[0].xgap, fig.data[0].ygap) == (1, 1)
    assert _row_lines(fig) == []


def test_the_turns_below_a_tall_chart_draw_no_point() -> None:
    turns = GAPPED_TURNS + 20
    fig = figures.timeline_heatmap(_rows(turns, 30), legend=False)
    below = fig.data[1]
    assert below.xaxis == "x2" and list(below.x) == [str(t) for t in range(turns)]
    assert below.mode == "lines" and set(below.y) == {None}  # the axis' turns, no marker
    assert fig.layout.xaxis2.matches == "x" and fig.layout.xaxis2.side == "bottom"


def test_the_page_sends_the_layout_streamlit_gives_a_selecting_chart(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What Streamlit's chart sets on a chart with ``selection_mode="points"`` (click mode
    "event+select", hover "closest", drag "pan") is in the figure sent: its change after the
    first draw had plotly take the chart in again."""
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    monkeypatch.setenv("CTXSCOPE_DB", str(tmp_path / "ctxscope.duckdb"))
    monkeypatch.setenv("CTXSCOPE_TRACES", str(tmp_path / "traces"))
    data.fill(tmp_path / "ctxscope.duckdb", data.session("sess-grid", 3))
    at = open_page("timeline", session="sess-grid")
    assert not at.exception, [e.value for e in at.exception]
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    (layout,) = [c["layout"] for c in charts if "Packets across" in json.dumps(c["layout"])]
    assert (layout["clickmode"], layout["hovermode"], layout["dragmode"]) == (
        "event+select",
        "closest",
        "pan",
    )
