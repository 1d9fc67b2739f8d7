"""What every figure shares: the status and partition palettes, escaping of untrusted text,
the layout and the title, legend and empty-figure helpers.

Every string that comes from a trace (packet ids, kinds, reason sentences, session ids)
is untrusted: plotly renders hover text, tick labels and annotations as a small subset
of HTML (``<b>``, ``<br>``, ``<a href>``...), so such strings go through ``esc`` before
they reach a figure. Our own fixed labels may use ``<br>``.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from ctxcore.models import Status

#: One colour per decision status, used by every figure so the legend means one thing:
#: the Okabe-Ito palette, told apart with any colour vision (docs/design.md, "The app").
STATUS_COLORS: dict[str, str] = {
    Status.KEPT.value: "#009e73",
    Status.TRUNCATED.value: "#e69f00",
    Status.SUMMARIZED.value: "#0072b2",
    Status.DROPPED.value: "#d55e00",
    Status.FILTERED.value: "#999999",
    Status.NOT_RENDERED.value: "#cc79a7",
}
STATUS_ORDER: tuple[str, ...] = tuple(s.value for s in Status)
#: in / not in the window (Sweep's watch map): the kept and dropped colours
IN_COLOR = STATUS_COLORS[Status.KEPT.value]
OUT_COLOR = STATUS_COLORS[Status.DROPPED.value]

#: Partitions are told apart by lightness within one slate-violet hue that no status uses,
#: so green, orange, blue, vermillion, grey and pink mean a status on every page (red on
#: Inspect meant [Evidence] while it meant "dropped" on the Timeline).
PARTITION_COLORS: dict[str, str] = {
    "[Role & Policies]": "#3f3f74",
    "[Task]": "#5e5e9c",
    "[State]": "#7d7dbf",
    "[Evidence]": "#4a4a4a",
    "[Context]": "#a3a3d6",
    "[Output]": "#6b6b6b",
}
_OTHER_COLORS = ("#c4c4e6", "#8a8aa8", "#b8b8b8", "#2f2f4f")
RESERVE_COLOR = "#b0b0b0"
SAFETY_COLOR = "#d9d9d9"
FREE_COLOR = "#f4f4f4"
OVER_COLOR = "#b22222"

#: the layout every figure starts from
LAYOUT: dict[str, Any] = {
    "template": "plotly_white",
    "font": {"family": "sans-serif", "size": 13},
    "hoverlabel": {"align": "left"},
}

#: what a build-less trace's figures say
NO_RESULT = "This trace has no build result (captured input only)."


def esc(text: object, limit: int = 300) -> str:
    """Untrusted text made safe for plotly's pseudo-HTML: shortened, then escaped."""
    s = str(text)
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return html.escape(s, quote=True)


#: the advance widths of Arial's metrics (Liberation Sans and Arimo share them: the
#: "sans-serif" Chromium draws on Windows and Linux; Helvetica's are alike) for the printable
#: ASCII characters " " to "~", in thousandths of the font size, rounded up
_ASCII_WIDTHS = (
    278, 278, 355, 557, 557, 890, 667, 191, 334, 334, 390, 584, 278, 334, 278, 278, 557, 557,
    557, 557, 557, 557, 557, 557, 557, 557, 278, 278, 584, 584, 584, 557, 1016, 667, 667, 723,
    723, 667, 611, 778, 723, 278, 500, 667, 557, 834, 723, 778, 667, 778, 723, 667, 611, 723,
    667, 944, 667, 667, 611, 278, 278, 278, 470, 557, 334, 557, 557, 500, 557, 557, 278, 557,
    557, 223, 223, 500, 223, 834, 557, 557, 557, 557, 334, 500, 278, 557, 500, 723, 500, 500,
    500, 334, 260, 334, 584,
)  # fmt: skip


def text_px(text: str, size: float) -> float:
    """The width in pixels of ``text`` (escaped for plotly: its entities count as the
    character they stand for) drawn in a sans-serif font of Arial's metrics at ``size`` px,
    at most: a character outside ASCII counts 1.25 em, wider than a CJK one or an emoji, and
    each character 1/64 px more, what a renderer's fixed-point advance (26.6) may round up.
    A figure that places its labels itself sizes its margins by it (a wider font, DejaVu
    Sans where it is the default, is left to plotly's ``automargin``)."""
    shown = html.unescape(text)
    widths = 0
    for ch in shown:
        code = ord(ch) - 32
        widths += _ASCII_WIDTHS[code] if 0 <= code < len(_ASCII_WIDTHS) else 1250
    return widths * size / 1000 + len(shown) / 64


def partition_color(name: str, i: int) -> str:
    """A partition's colour; a partition of no preset's takes the ``i``-th spare one."""
    return PARTITION_COLORS.get(name, _OTHER_COLORS[i % len(_OTHER_COLORS)])


def empty_figure(title: str, message: str) -> go.Figure:
    """A figure with no data: its title and, in the middle, why there is nothing to draw."""
    fig = go.Figure()
    fig.update_layout(
        title=title,
        xaxis={"visible": False},
        yaxis={"visible": False},
        annotations=[
            {
                "text": message,
                "showarrow": False,
                "xref": "paper",
                "yref": "paper",
                "x": 0.5,
                "y": 0.5,
                "font": {"size": 14, "color": "#666"},
            }
        ],
        height=220,
        **LAYOUT,
    )
    return fig


def pct(n: int, of: int) -> str:
    """``n`` as a percentage of ``of`` (one decimal), a dash when ``of`` is 0."""
    return f"{100.0 * n / of:.1f}%" if of else "–"


#: plotly templates as plain dicts, by name (``_template``)
_TEMPLATES: dict[str, dict[str, Any]] = {}


def _template(name: str) -> dict[str, Any]:
    """A named plotly template as a plain dict, read once."""
    if name not in _TEMPLATES:
        import plotly.io as pio

        _TEMPLATES[name] = pio.templates[name].to_plotly_json()
    return _TEMPLATES[name]


def unchecked(data: list[dict[str, Any]], layout: dict[str, Any]) -> go.Figure:
    """A figure from plain dicts, without plotly.py's property-by-property validation.

    Validating a dozen-trace figure costs ~60 ms, twice what the Playground's re-run of a
    2,000-packet trace costs, on every knob move (docs/design.md, "The app"). The dicts come
    from this package's own code (trace text goes through ``esc``); a test checks that
    plotly's validation returns them unchanged. A template name becomes its dict here, as
    validation would have made it.
    """
    lay = dict(layout)
    if isinstance(lay.get("template"), str):
        lay["template"] = _template(lay["template"])
    return go.Figure({"data": data, "layout": lay}, _validate=False)


#: characters in a line of a title or subtitle: plotly never wraps them, and a half-width
#: chart at 1024 px holds about this many before its edge cuts the line
LINE_CHARS = 40


def wrap_lines(parts: Sequence[str], sep: str = " · ", width: int = LINE_CHARS) -> str:
    """``parts`` (escaped already) joined by ``sep`` in lines of at most ``width`` characters
    where a part allows it, ``<br>`` between the lines."""
    lines: list[str] = []
    for part in parts:
        if lines and len(html.unescape(lines[-1] + sep + part)) <= width:
            lines[-1] += sep + part
        else:
            lines.append(part)
    return "<br>".join(lines)


def wrap_words(text: str) -> str:
    """Untrusted or plain ``text``, escaped and cut into lines between its words."""
    return wrap_lines(esc(text).split(" "), sep=" ")


def top_title(title: str, subtitle: str) -> dict[str, Any]:
    """A title held at the figure's top edge, its subtitle's lines growing downwards into the
    top margin (a title placed by plotly sits in the middle of the margin, and a subtitle of
    several lines then ran into the plot)."""
    return {
        "text": title,
        "subtitle": {"text": subtitle},
        "y": 1,
        "yref": "container",
        "yanchor": "top",
        "pad": {"t": 12},
    }


def line_count(text: str) -> int:
    """The lines of a title or subtitle (``<br>`` between them)."""
    return text.count("<br>") + 1


def legend_rows(entries: int, per_row: int = 2) -> int:
    """Rows a horizontal legend of ``entries`` takes in the narrowest chart that shows it
    (two entries a row at 300 px)."""
    return -(-entries // per_row)


def legend_marker(name: str, color: str, symbol: str = "square") -> go.Scatter:
    """A legend entry with no points of its own: an invisible marker named ``name``."""
    return go.Scatter(
        x=[None],
        y=[None],
        mode="markers",
        name=name,
        marker={"color": color, "size": 10, "symbol": symbol},
    )


def banded_scale(colors: Sequence[str]) -> list[list[Any]]:
    """A heatmap colour scale of ``len(colors)`` flat bands: the value ``k + 0.5`` (for ``zmin``
    0, ``zmax`` the band count; or the value ``k`` for ``zmin`` -0.5, ``zmax`` the band count
    less 0.5) takes ``colors[k]``, and no band edge decides a colour."""
    n = len(colors)
    scale: list[list[Any]] = []
    for k, color in enumerate(colors):
        scale.append([k / n, color])
        scale.append([(k + 1) / n, color])
    return scale
