"""The packet chart's left margin is set from its rows' labels (issue 32, Speed: from a
narrow margin, plotly's ``automargin`` measured every label in the browser and drew the
chart a second time): it holds the longest label whole, measured here with the font
Chromium draws "sans-serif" in (Liberation Sans, Arial's metrics), for ids of wide and
narrow letters, escaped text and text outside ASCII; ``automargin`` stays on for a wider
font."""

from __future__ import annotations

import html
import random
from pathlib import Path

import pytest
from PIL import ImageFont

from ctxcore import figures
from ctxcore.figures.common import text_px
from ctxcore.figures.timeline import _LABEL_PX, label_margin

FONT = Path("/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf")
#: pixels of the margin that are not the label's (the pad of Streamlit's theme, the tick
#: labels' standoff): the label itself may take the rest
PAD = 12

LABELS = [
    "builder:history:summary",
    "W" * 60,
    "tool:mcp__server__WWW_MMM_mmm_www_%%%_@@@",
    "i" * 60 + "W",
    'tool:<script>alert("x")</script>&amp;',
    "记忆：用户偏好 · ünïcödé — ∑",
    "emoji 🔍🧪 packet",
]


def _measured(text: str, size: int = _LABEL_PX) -> float:
    """The label's width as the font lays it out (the browser shows an escaped label's
    entities as their characters): at the glyphs' own advances, as a browser places them
    (subpixel positioning), measured at 100 times the size, where hinting rounds nothing
    that matters."""
    return ImageFont.truetype(str(FONT), size * 100).getlength(html.unescape(text)) / 100


@pytest.mark.skipif(not FONT.exists(), reason="Liberation Sans is not installed")
def test_text_px_is_never_narrower_than_the_font_draws() -> None:
    rng = random.Random(32)
    alphabet = [chr(c) for c in range(32, 127)]
    texts = LABELS + ["".join(rng.choices(alphabet, k=rng.randint(1, 80))) for _ in range(300)]
    for text in texts:
        for size in (11, 13, 16):
            assert text_px(html.escape(text), size) >= _measured(text, size) - 0.01, text


@pytest.mark.skipif(not FONT.exists(), reason="Liberation Sans is not installed")
@pytest.mark.parametrize("grouped", [False, True])
def test_the_chart_margin_holds_its_longest_label(grouped: bool) -> None:
    rows = [
        {"turn": t, "packet_id": pid, "kind": "tool_result", "status": "kept", "reason": "FITS",
         "tokens_after": 3}
        for t in range(1, 130)
        for pid in LABELS
    ]  # fmt: skip
    fig = figures.timeline_heatmap(rows, group_by_kind=grouped, legend=False)
    labels = list(fig.layout.yaxis.ticktext)  # what the rows' ticks show
    assert fig.layout.yaxis.automargin is None  # the template's: on, for a wider font
    longest = max(_measured(x) for x in labels)
    assert fig.layout.margin.l == label_margin(labels) >= longest + PAD
    # and not much wider than needed: the grid keeps its room at 1024 px
    assert fig.layout.margin.l <= 1.1 * longest + 40
