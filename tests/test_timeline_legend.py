"""The Timeline's status legend, kept in view over its scrolling packet chart, is a line of
HTML, not a second plotly chart (issue 32, Speed): one entry per status the chart shows, in
the order every page uses, each a square of the status's colour and its name, escaped; the
page sends it and no legend chart."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import app_support as data
import pytest
from app_support import open_page

from ctxcore import figures
from ctxcore.figures.common import STATUS_COLORS, STATUS_ORDER


class _Entries(HTMLParser):
    """The legend's entries: (colour of the swatch, name), in order."""

    def __init__(self) -> None:
        super().__init__()
        self.entries: list[tuple[str, str]] = []
        self._color = ""
        self._in_name = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        got = dict(attrs)
        if got.get("class") == "status-swatch":
            self._color = (got.get("style") or "").rsplit("background:", 1)[1]
        self._in_name = got.get("class") == "status-name"

    def handle_data(self, text: str) -> None:
        if self._in_name:
            self.entries.append((self._color, text))
            self._in_name = False


def entries(markup: str) -> list[tuple[str, str]]:
    parser = _Entries()
    parser.feed(markup)
    return parser.entries


def test_the_legend_names_each_status_shown_in_its_colour() -> None:
    shown = {"dropped", "kept", "summarized"}
    assert entries(figures.status_legend(shown)) == [
        (STATUS_COLORS[s], s) for s in STATUS_ORDER if s in shown
    ]
    assert [n for _, n in entries(figures.status_legend())] == list(STATUS_ORDER)


def test_the_legend_escapes_and_shows_only_known_statuses() -> None:
    bait = '<img src=x onerror="alert(1)">'
    markup = figures.status_legend({"kept", bait}, {**STATUS_COLORS, "kept": bait})
    assert "<img" not in markup and "&lt;img" in markup  # a colour is escaped too
    assert [n for _, n in entries(markup)] == ["kept"]  # an unknown status is no entry


def test_the_timeline_sends_its_legend_as_html_not_a_chart(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    monkeypatch.setenv("CTXSCOPE_DB", str(tmp_path / "ctxscope.duckdb"))
    monkeypatch.setenv("CTXSCOPE_TRACES", str(tmp_path / "traces"))
    data.fill(tmp_path / "ctxscope.duckdb", data.session("sess-legend", 3))
    at = open_page("timeline", session="sess-legend")
    assert not at.exception, [e.value for e in at.exception]
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    # the packets and the diagnostics, each a grid: no chart of legend markers alone
    assert [c["data"][0]["type"] for c in charts] == ["heatmap", "heatmap"]
    (grid,) = [c["data"][0] for c in charts if "Packets across" in json.dumps(c["layout"])]
    statuses = {s for s in STATUS_ORDER if f'"{s}"' in json.dumps(grid["customdata"])}
    (legend,) = [h.proto.body for h in at.get("html") if "status-legend" in h.proto.body]
    assert {n for _, n in entries(legend)} == statuses and statuses
