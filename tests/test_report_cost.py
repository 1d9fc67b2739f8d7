"""The HTML report carries the cost and prompt-cache figures the app shows (issue 32 item
7): per session a row per turn with its cached, written and uncached tokens, its cost and
its cache break, and per trace the simulation's figures beside the provider's with the cost
and the break; everything in it escaped (a break reason quotes system-prompt lines). Checked
on a real Claude Code log with recorded usage against ``ctxcore.cost`` applied to each
trace's own usage and ``ctxcore.costing`` over its session.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import app_support as data
from app_support import EVIL, EVIL_IMG

from ctxcore import figures
from ctxcore.cache import CacheBreak
from ctxcore.cost import cost, price_table
from ctxcore.costing import CallCost, session_costs
from ctxcore.formats.load import load_file
from ctxcore.formats.share import html_report, report_costs
from ctxcore.models import Trace

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "tests" / "fixtures" / "imports" / "claude-code" / "ccviewer-init-session.jsonl"


class _Tables(HTMLParser):
    """Every table of a page as rows of cell texts, and the text of every paragraph."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.paragraphs: list[str] = []
        self._cell: list[str] | None = None
        self._p: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "p":
            self._p = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "p" and self._p is not None:
            self.paragraphs.append("".join(self._p))
            self._p = None

    def handle_data(self, text: str) -> None:
        for part in (self._cell, self._p):
            if part is not None:
                part.append(text)


def read(doc: str) -> _Tables:
    parser = _Tables()
    parser.feed(doc)
    return parser


def billed(t: Trace) -> float | None:
    found = cost(t.metadata.get("model"), t.outcome.tokens if t.outcome else None)
    return None if found is None else found.total_usd


def _n(v: int | None) -> str:
    return "" if v is None else f"{v:,}"


def test_the_report_carries_each_turns_cache_and_cost_and_the_sessions_total() -> None:
    logged = list(load_file(LOG))
    plain = data.session("sess-plain", 2)
    doc = html_report(logged + plain, findings=[[]] * 9, fixes=[[]] * 9)
    page = read(doc)
    per_turn = next(t for t in page.tables if t[0][:2] == ["turn", "$"])
    by_turn = {t.turn: t for t in logged}
    assert [int(r[0].removeprefix("turn ")) for r in per_turn[1:]] == sorted(by_turn)
    calls = {c.turn: c for c in session_costs(logged, price_table())}
    for row in per_turn[1:]:
        t = by_turn[int(row[0].removeprefix("turn "))]
        rec = t.outcome.tokens if t.outcome else None
        assert rec is not None
        assert row[1] == figures.usd(billed(t))
        assert row[2:6] == [
            _n(rec.cache_read_tokens),
            _n(rec.cache_write_tokens),
            _n(rec.input_tokens - (rec.cache_read_tokens or 0) - (rec.cache_write_tokens or 0)),
            _n(rec.output_tokens),
        ]
        brk = calls[t.turn].cache_break
        assert row[6:] == ["recorded", brk.kind if brk else "", brk.reason if brk else ""]
    total = sum(v for t in logged if (v := billed(t)) is not None)
    assert f"{figures.usd(total)} over {len(logged)} calls" in page.paragraphs
    # per trace: the simulation beside the provider's figures, the cost line
    panels = [t for t in page.tables if t[0] == ["tokens", "simulated", "recorded (provider)"]]
    assert len(panels) == len(logged)  # the plain builds name no model: no panel
    first = min(logged, key=lambda t: t.turn)
    rec = first.outcome.tokens if first.outcome else None
    assert rec is not None
    call = calls[first.turn]
    assert panels[0][1] == ["prompt", _n(call.input_tokens), _n(rec.input_tokens)]
    assert panels[0][2] == ["cached (read)", _n(call.cache_read_tokens), _n(rec.cache_read_tokens)]
    assert figures.cost_line(call) in page.paragraphs


def test_a_break_reason_in_the_report_is_text() -> None:
    logged = list(load_file(LOG))
    costs = report_costs(logged)
    victim = logged[1].trace_id
    brk = CacheBreak(
        block="system",
        kind="system_changed",
        index=None,
        packet=None,
        reason=f"the system prompt changed at line 2: '{EVIL}'",
        tokens=900,
        cost_usd=0.003,
        fix=f"move the date out of the system prompt {EVIL_IMG}",
        provider_reason=EVIL_IMG,
    )
    costs[victim] = CallCost(**{**costs[victim].__dict__, "cache_break": brk})
    doc = html_report(logged, findings=[[]] * len(logged), fixes=[[]] * len(logged), costs=costs)
    assert "<script>" not in doc and "<img src=x" not in doc
    page = read(doc)
    # the words reach the reader as they were, as text
    assert f"Why: the system prompt changed at line 2: '{EVIL}'" in page.paragraphs
    assert f"The provider's reason: {EVIL_IMG}" in page.paragraphs
    per_turn = next(t for t in page.tables if t[0][:2] == ["turn", "$"])
    assert any(r[-1] == brk.reason for r in per_turn[1:])


def test_a_report_of_several_sessions_draws_each_apart() -> None:
    # a Claude Code log with its Task agents' side chains: three sessions, turns from 0 each
    logged = list(load_file(LOG.with_name("ccviewer-task-sidechain-session.jsonl")))
    sessions = list(dict.fromkeys(t.session_id for t in logged))
    assert len(sessions) == 3
    doc = html_report(logged, findings=[[]] * len(logged), fixes=[[]] * len(logged))
    page = read(doc)
    timelines = [t for t in page.tables if t[0][:3] == ["turn", "used", "kept"]]
    assert len(timelines) == len(sessions)
    for sid, table in zip(sessions, timelines, strict=True):
        turns = sorted(t.turn for t in logged if t.session_id == sid)
        assert [r[0] for r in table[1:]] == [f"turn {n}" for n in turns]
        assert f"Session {sid}" in doc
    assert "not in this export" not in doc
