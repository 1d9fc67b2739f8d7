"""The compaction ledger in the app (docs/design.md, "Compaction ledger"): the Timeline marks
each recorded compaction of a session (its hover what was lost, escaped) and Inspect lists
the ledger on the call it took effect at and the call before it. AppTest on a real store of
the real Claude Code compaction log (items and script bait written into its texts) and the
real Codex compaction-turn rollout."""

from __future__ import annotations

import html
import json
from pathlib import Path

import app_support as data
import pytest
from app_support import open_page

from ctxcore.formats.load import load_file
from ctxcore.ledger import Entry, ledger
from ctxcore.models import Trace

IMPORTS = Path(__file__).parent / "fixtures" / "imports"
CLAUDE = IMPORTS / "claude-code" / "claude-code-log-compact-after-rewind.jsonl"
CODEX = IMPORTS / "codex" / "localpush-rollout-compaction-turn.subset.jsonl"
BAIT = "Never run <script>alert(1)</script> in the shell."


def _claude_written(tmp_path: Path) -> Path:
    """The real log with items written into its first message and the answer on the branch
    it kept, and a constraint holding script bait; the reply after its compaction names one."""
    lines = [json.loads(x) for x in CLAUDE.read_text(encoding="utf-8").splitlines() if x]
    text = {o["uuid"]: o["message"]["content"][0] for o in lines if o.get("message")}
    text["u1"]["text"] += f": fix src/parser.py. {BAIT}"
    text["b2a"]["text"] += "\nTraceback (most recent call last):\nValueError: bad header in frame 3"
    text["b2a"]["text"] += "\ntest_parse_header fails."
    text["p1a"]["text"] += ": test_parse_header passes."
    path = tmp_path / CLAUDE.name
    path.write_text("".join(json.dumps(o) + "\n" for o in lines), encoding="utf-8")
    return path


@pytest.fixture
def stored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, list[Trace]]:
    """Both logs imported into the store the app opens, by session (and a session of
    ctxscope builds without a compaction beside them)."""
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    traces = [*load_file(_claude_written(tmp_path)), *load_file(CODEX)]
    data.fill(tmp_path / "ctxscope.duckdb", [*traces, *data.session("sess-plain", 3)])
    out: dict[str, list[Trace]] = {}
    for t in sorted(traces, key=lambda t: t.turn):
        out.setdefault(t.session_id, []).append(t)
    return out


def _only(traces: list[Trace]) -> Entry:
    entries = ledger(traces)
    assert len(entries) == 1, entries
    return entries[0]


def _marks(at) -> dict | None:  # type: ignore[no-untyped-def,type-arg]
    """The compaction strip's markers (x, hover), or None when the page has none."""
    for c in at.get("plotly_chart"):
        spec = json.loads(c.proto.spec)
        if "Compactions" in json.dumps(spec["layout"].get("title", "")):
            return dict(spec["data"][0])
    return None


def test_the_timeline_marks_each_compaction_with_what_it_lost(
    stored: dict[str, list[Trace]],
) -> None:
    for sid, traces in stored.items():
        e = _only(traces)
        at = open_page("timeline", session=sid)
        marks = _marks(at)
        assert marks is not None and list(marks["x"]) == [e.turn]
        hover = marks["hovertext"][0]
        assert f"{len(e.lost)} lost" in hover and e.lost
        for i in e.lost[:12]:
            assert html.escape(i.text[:20]) in hover, (i.text, hover)
    # the Claude Code log's constraint holds script bait: escaped in the hover, never raw
    claude = next(sid for sid, ts in stored.items() if "claude" in ts[0].builder.name)
    hover = _marks(open_page("timeline", session=claude))["hovertext"][0]  # type: ignore[index]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in hover and "<script>" not in hover
    # a session without a compaction has no strip
    assert _marks(open_page("timeline", session="sess-plain")) is None


def _ledger_rows(at) -> list[tuple[str, str, str, str | None]]:  # type: ignore[no-untyped-def]
    """Inspect's ledger tables' rows: kind, item, kept or lost, where it was next needed."""
    frames = [d.value for d in at.dataframe if "fate" in d.value.columns]
    return [
        (r["kind"], r["item"], r["fate"], r["next needed"] if r.notna()["next needed"] else None)
        for f in frames
        for _, r in f.iterrows()
    ]


def test_inspect_shows_the_ledger_at_the_compaction_and_the_call_before(
    stored: dict[str, list[Trace]],
) -> None:
    for traces in stored.values():
        e = _only(traces)
        want = [
            (
                i.kind,
                i.text,
                "kept" if i.kept else "lost",
                None if i.needed_turn is None else f"turn {i.needed_turn} ({i.needed_in})",
            )
            for i in e.items
        ]
        assert any(fate == "lost" for _, _, fate, _ in want)
        by_turn = {t.turn: t for t in traces}
        for turn in (e.turn, e.before_turn):
            assert turn is not None
            at = open_page("inspect", trace=by_turn[turn].trace_id)
            assert _ledger_rows(at) == want
            assert any(f"{len(e.lost)} lost" in x.value for x in at.text)
        # a call neither at nor right before a compaction shows none
        other = next(t for t in traces if t.turn not in (e.turn, e.before_turn))
        assert _ledger_rows(open_page("inspect", trace=other.trace_id)) == []
