"""The Live indicator on Traces: calls captured live, counted from a real store.

Live calls are traces tagged ``live`` (the proxy adds ``source:<name>``, the OTLP receiver
``otlp``). The store query, the counting against the exact clock, the line the page shows
(untrusted parts as code) and the page itself through AppTest.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import app_support as data
import pytest
from streamlit.testing.v1 import AppTest

from ctxapp.ui import live
from ctxcore.models import Trace
from ctxcore.store import TraceStore
from ctxcore.store.records import LiveCalls

APP = str(Path(__file__).resolve().parent.parent / "ctxapp" / "app.py")
NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def _calls(ages_s: list[float], tags: list[list[str]], session: str = "sess-live") -> list[Trace]:
    base = data.session(session, len(ages_s))
    return [
        t.model_copy(update={"created_at": NOW - timedelta(seconds=age), "tags": tg})
        for t, age, tg in zip(base, ages_s, tags, strict=True)
    ]


@pytest.fixture(scope="module")
def captured() -> list[Trace]:
    return _calls(
        [5, 20, 50, 90, 300, 900],
        [
            ["live", "source:claude"],
            ["live", "source:claude"],
            ["live", "otlp"],
            ["live", "source:python"],
            ["nightly"],  # not live: never counted
            ["live", "source:claude"],  # live, but older than the 10-minute window
        ],
    )


def test_the_store_returns_live_calls_newest_first_with_their_source(
    tmp_path: Path, captured: list[Trace]
) -> None:
    with TraceStore(tmp_path / "s.duckdb") as store:
        store.add_traces(captured, source="test")
        got = store.live_calls(NOW - timedelta(minutes=10))
        assert [c.trace_id for c in got.recent] == [t.trace_id for t in captured[:4]]
        assert [c.source for c in got.recent] == ["claude", "claude", "otlp", "python"]
        assert got.total == 5
        assert got.last is not None and got.last.trace_id == captured[0].trace_id
        assert got.last.created_at == NOW - timedelta(seconds=5)
        # nothing recent: the last call ever is still named
        later = store.live_calls(NOW + timedelta(hours=1))
        assert later.recent == [] and later.total == 5
        assert later.last is not None and later.last.trace_id == captured[0].trace_id
        # a cap on the recent ones, newest kept
        capped = store.live_calls(NOW - timedelta(minutes=10), limit=2)
        assert [c.trace_id for c in capped.recent] == [t.trace_id for t in captured[:2]]


def test_an_empty_store_has_no_live_calls(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "s.duckdb") as store:
        got = store.live_calls(NOW - timedelta(minutes=10))
    assert got == LiveCalls([], 0, None)


def test_counts_are_made_against_the_exact_clock(tmp_path: Path, captured: list[Trace]) -> None:
    with TraceStore(tmp_path / "s.duckdb") as store:
        store.add_traces(captured, source="test")
        calls = store.live_calls(NOW - timedelta(minutes=11))
    s = live.summarize(calls, NOW)
    assert (s.last_minute, s.last_window, s.total) == (3, 4, 5)
    assert s.sources == [("claude", 2), ("otlp", 1), ("python", 1)]
    # a minute on, the two calls of the last 25 s have left the last minute
    s2 = live.summarize(calls, NOW + timedelta(seconds=30))
    assert (s2.last_minute, s2.last_window) == (2, 4)


@pytest.mark.parametrize(
    ("seconds", "said"),
    [
        (-3, "just now"),
        (0.2, "just now"),
        (7, "7 s ago"),
        (61, "1 min ago"),
        (7_300, "2 h ago"),
        (200_000, "2 d ago"),
    ],
)
def test_ago(seconds: float, said: str) -> None:
    assert live.ago(NOW - timedelta(seconds=seconds), NOW) == said


def test_the_headline_names_the_last_call_and_keeps_ids_as_code() -> None:
    evil = "[x](http://evil.example) <b>"
    calls = LiveCalls([], 0, None)
    assert live.headline(live.summarize(calls, NOW), NOW, 4318) == (
        "**Live** · no call captured yet · receiving OTLP on 127.0.0.1:4318"
    )
    from ctxcore.store.records import LiveCall

    last = LiveCall(NOW - timedelta(seconds=4), evil, 7, "t-1", "claude")
    other = LiveCall(NOW - timedelta(seconds=40), "s2", 1, "t-2", "otlp")
    line = live.headline(live.summarize(LiveCalls([last, other], 9, last), NOW), NOW, None)
    assert line.startswith("**Live** · **2** calls/min · 2 in the last 10 min")
    said = "last call 4 s ago (session ` [x](http://evil.example) <b> `, turn 7, via ` claude `)"
    assert said in line
    assert "` claude ` 1, ` otlp ` 1" in line
    assert "OTLP" not in line


def _page(db: Path, traces: list[Trace], monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    data.fill(db, traces)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_traces_page_shows_live_calls_and_opens_the_last_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    calls = [
        t.model_copy(update={"created_at": now - timedelta(seconds=s), "tags": tg})
        for t, s, tg in zip(
            data.session("sess-proxy", 3),
            [2, 15, 200],
            [["live", "source:claude"], ["live", "source:claude"], ["live", "otlp"]],
            strict=True,
        )
    ]
    at = _page(Path(os.environ["CTXSCOPE_DB"]), calls, monkeypatch)
    text = " ".join(m.value for m in at.markdown)
    assert "**Live** · **2** calls/min · 3 in the last 10 min" in text
    assert "(session ` sess-proxy `, turn 0, via ` claude `)" in text
    at.button(key="live_open_session").click().run()
    assert not at.exception
    assert at.query_params.get("session") in ("sess-proxy", ["sess-proxy"])
    assert any(t.value == "Timeline" for t in at.title)


def test_traces_page_without_live_calls_says_how_to_get_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = _page(Path(os.environ["CTXSCOPE_DB"]), data.session("plain", 2), monkeypatch)
    assert any("ctxscope run -- CMD" in c.value for c in at.caption)
    assert not [b for b in at.button if b.key == "live_open_last"]


def test_traces_page_says_it_receives_otlp_when_started_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = Path(os.environ["CTXSCOPE_DB"])
    note = db.with_name(db.name + ".app.json")
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text(json.dumps({"pid": os.getpid(), "traces": str(tmp_path), "otlp_port": 4399}))
    at = _page(db, data.session("plain", 1), monkeypatch)
    text = " ".join(m.value for m in at.markdown)
    assert "no call captured yet · receiving OTLP on 127.0.0.1:4399" in text
