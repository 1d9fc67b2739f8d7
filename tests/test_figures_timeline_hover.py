"""The Timeline's packet chart sends each cell's hover as values filled into one template
(``figures.CELL_HOVER``) instead of one text a cell (issue 32, Speed: 6.4 MB of JSON for a
500-turn session), and what is the same along a row (the packet's id and kind) once a row,
as the row's category (1.9 MB where each cell carried them). What the hover shows is what
it showed: the packet id, its kind and the turn, status, reason and tokens, escaped, nothing
on a blank cell. Rows from a real store: a session of real builds, one whose packet ids and
kinds carry script bait, and a packet whose id is longer than a row's label."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import app_support as data
import plotly.graph_objects as go
import plotly.io as pio
import pytest
from plotly.utils import PlotlyJSONEncoder

from ctxcore import figures
from ctxcore.figures.common import esc
from ctxcore.store import TraceStore

LONG_ID = "tool:" + "a-very-long-call-id-" * 5


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The statuses of a stored session of real builds and of a hostile one, and the first
    packet's rows again under an id longer than a label shows."""
    db = tmp_path_factory.mktemp("hover") / "ctxscope.duckdb"
    data.fill(db, [*data.session("sess-hover", 4), data.hostile_trace("sess-evil")])
    with TraceStore(db, read_only=True) as store:
        out = store.session_statuses("sess-hover") + store.session_statuses("sess-evil")
    first = out[0]["packet_id"]
    out += [{**r, "packet_id": LONG_ID} for r in out if r["packet_id"] == first]
    return out


def _before(r: dict[str, Any]) -> str:
    """The hover text a cell carried as one string a cell, its kind moved before the turn
    (the kind is the row's, the turn the column's)."""
    return (
        f"<b>{esc(r['packet_id'], 120)}</b><br>{esc(r.get('kind', ''))} · turn {r['turn']}"
        f"<br>{esc(r['status'])} · {esc(r.get('reason', ''))} · "
        f"{int(r.get('tokens_after') or 0):,} tokens"
    )


def _filled(template: str, grid: dict[str, Any], i: int, j: int) -> str:
    """``template`` filled in for cell (i, j) as plotly.js fills a hovertemplate: ``%{y}``,
    ``%{x}``, ``%{customdata[k]}`` and ``%{customdata[k]:,}`` (d3's thousands separator);
    ``<extra></extra>`` (no trace name box) dropped."""
    values = grid["customdata"][i][j]

    def one(m: re.Match[str]) -> str:
        name, index, fmt = m.group(1), m.group(2), m.group(3)
        if name in ("x", "y"):
            return str(grid[name][i if name == "y" else j])
        value = values[int(index)]
        return f"{value:,}" if fmt == ":," else str(value)

    body = template.replace("<extra></extra>", "")
    return re.sub(r"%\{(x|y|customdata)(?:\[(\d+)\])?(:,)?\}", one, body)


@pytest.mark.parametrize("grouped", [False, True])
def test_each_cell_shows_what_its_own_text_showed(
    rows: list[dict[str, Any]], grouped: bool
) -> None:
    fig = figures.timeline_heatmap(rows, "t", group_by_kind=grouped, legend=False)
    grid = json.loads(pio.to_json(fig, validate=False))["data"][0]
    assert "hovertext" not in grid and grid["hoverongaps"] is False
    assert grid["hovertemplate"] == figures.CELL_HOVER
    ids = {r["packet_id"] for r in rows}
    row_of = {}
    labels = json.loads(pio.to_json(fig, validate=False))["layout"]["yaxis"]["ticktext"]
    for i, label in enumerate(labels):
        pid = next(p for p in ids if label.endswith(esc(p, 50 if grouped else 60)))
        row_of[pid] = i
        assert figures.timeline_row(grid, label) == i
    cells = {(r["packet_id"], str(r["turn"])): r for r in rows}
    shown = 0
    for pid, i in row_of.items():
        for j, turn in enumerate(grid["x"]):
            hover = figures.cell_hover(grid, i, j)
            assert hover == (_filled(figures.CELL_HOVER, grid, i, j) if hover else "")
            r = cells.get((pid, turn))
            if r is None:  # not a candidate: blank, no hover
                assert grid["z"][i][j] is None and grid["customdata"][i][j] is None
                continue
            shown += 1
            before = _before(r)
            if pid == LONG_ID:  # the row's label cuts it: the whole id follows it
                head, rest = before.split("<br>", 1)
                assert hover.endswith(f"<br>{html.escape(pid)}<br>{rest}"), hover
            elif grouped:  # the label is "kind · id"
                kind = esc(r.get("kind", ""), 20)
                assert hover == before.replace("<b>", f"<b>{kind} · ", 1)
            else:
                assert hover == before
    assert shown == len(cells)
    assert any("&lt;script&gt;" in figures.cell_hover(grid, i, 0) for i in row_of.values())


def test_the_browser_receives_a_fraction_of_a_text_a_cell(rows: list[dict[str, Any]]) -> None:
    """The grid's JSON against the same grid with one hover text a cell (what it was)."""
    fig = figures.timeline_heatmap(rows, "t", legend=False)
    now = len(pio.to_json(fig, validate=False))
    grid = fig.data[0]
    texts = [
        [figures.cell_hover(grid, i, j) for j in range(len(grid.x))] for i in range(len(grid.y))
    ]
    fig.update_traces(customdata=None, hovertemplate=None, hovertext=texts, selector=0)
    assert now < 0.6 * len(pio.to_json(fig, validate=False))


def test_a_row_sends_its_packet_and_kind_once(rows: list[dict[str, Any]]) -> None:
    """A cell's values are its own (status, reason, tokens) and its colour band a small
    integer; the packet id and kind are the row's, once a row: the grid's JSON is under
    four fifths of what it was with the whole id and kind in every cell's values and the
    band's centre (0.5, 1.5...) as its value (a row of 4 turns here; 65 % over 500)."""
    fig = figures.timeline_heatmap(rows, "t", legend=False)
    grid = fig.data[0]
    filled = [v for row in grid.customdata for v in row if v is not None]
    assert filled and all(len(v) == 3 for v in filled)
    assert all(isinstance(z, int) for row in grid.z for z in row if z is not None)
    now = _sent(grid)
    kinds = {str(r["packet_id"]): esc(r.get("kind", "")) for r in rows}
    labels = list(fig.layout.yaxis.ticktext)
    ids = {label: next(p for p in kinds if label.endswith(esc(p, 60))) for label in labels}
    before = [
        [
            None if v is None else [
                f"<br>{esc(ids[label], 120)}" if len(ids[label]) > 60 else "",
                kinds[ids[label]],
                *v,
            ]
            for v in row
        ]
        for label, row in zip(labels, grid.customdata, strict=True)
    ]  # fmt: skip
    z = [[None if v is None else v + 0.5 for v in row] for row in grid.z]
    grid.update(customdata=before, z=z, y=labels)
    assert now < 0.8 * _sent(grid)


def _sent(grid: go.Heatmap) -> int:
    """The characters of JSON the grid's values, hover values and rows take."""
    got = grid.to_plotly_json()
    return len(json.dumps({k: got[k] for k in ("z", "customdata", "y")}, cls=PlotlyJSONEncoder))
