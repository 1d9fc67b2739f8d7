"""The Live indicator on Traces: what the proxy, ``ctxscope run`` and the OTLP receiver captured.

Live calls are traces tagged ``live`` (docs/design.md, "Live capture"). The indicator counts
them in the last minute and the last ten, names the last call (how long ago, its session and
turn, its source) and links to it and to its session's Timeline; it also says whether this app
receives OTLP (``ctxscope app --otlp``). It is drawn inside the Traces page's refresh fragment,
so it moves on its own as calls arrive.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import streamlit as st

from ctxapp.ui import state, views
from ctxcore.store.records import LiveCall, LiveCalls

#: The span the indicator describes; calls per minute are those of the last minute.
WINDOW = timedelta(minutes=10)


@dataclass(frozen=True)
class LiveSummary:
    last_minute: int
    last_window: int
    total: int
    last: LiveCall | None
    sources: list[tuple[str, int]]  # the window's calls by source, most first


def summarize(calls: LiveCalls, now: datetime, window: timedelta = WINDOW) -> LiveSummary:
    """Counts against the exact ``now`` (the query behind ``calls`` is cached per minute)."""
    in_window = [c for c in calls.recent if c.created_at > now - window]
    minute = sum(1 for c in in_window if c.created_at > now - timedelta(minutes=1))
    sources = Counter(c.source or "unknown" for c in in_window).most_common()
    return LiveSummary(minute, len(in_window), calls.total, calls.last, sources)


def ago(then: datetime, now: datetime) -> str:
    """``3 s ago``, ``4 min ago``, ``2 h ago``, ``5 d ago``; ``just now`` for clock skew."""
    s = (now - then).total_seconds()
    if s < 1:
        return "just now"
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if s >= size:
            return f"{int(s // size)} {unit} ago"
    return f"{int(s)} s ago"


def headline(summary: LiveSummary, now: datetime, otlp_port: int | None) -> str:
    """The indicator's line as markdown; untrusted parts (session ids, sources) as code."""
    parts: list[str] = []
    if summary.last is None:
        parts.append("**Live** · no call captured yet")
    else:
        rate = f"**{summary.last_minute:,}** call{'s' if summary.last_minute != 1 else ''}/min"
        parts.append(f"**Live** · {rate} · {summary.last_window:,} in the last 10 min")
        last = summary.last
        source = f", via {views.code(last.source)}" if last.source else ""
        parts.append(
            f"last call {ago(last.created_at, now)} (session {views.code(last.session_id)}, "
            f"turn {last.turn}{source})"
        )
        if len(summary.sources) > 1:
            parts.append(", ".join(f"{views.code(s)} {n:,}" for s, n in summary.sources[:5]))
    if otlp_port is not None:
        parts.append(f"receiving OTLP on 127.0.0.1:{otlp_port}")
    return " · ".join(parts)


def render(now: datetime | None = None) -> None:
    """Draw the indicator (inside the caller's refresh fragment)."""
    note = state.app_note() or {}
    port = note.get("otlp_port")
    otlp_port = port if isinstance(port, int) else None
    calls = state.live_calls(WINDOW)
    if calls.total == 0 and otlp_port is None:
        st.caption(
            "No live calls yet: `ctxscope run -- CMD` records an agent's model calls here, "
            "`ctxscope app --otlp` receives OpenTelemetry spans"
        )
        return
    now = now or datetime.now(UTC)
    summary = summarize(calls, now)
    with st.container(border=True, key="live_box"):
        st.markdown(headline(summary, now, otlp_port))
        if summary.last is not None:
            c1, c2, _ = st.columns([1, 1, 3])
            if c1.button("Open the last call", key="live_open_last"):
                state.switch("inspect", trace=summary.last.trace_id)
            if c2.button("Its session on Timeline", key="live_open_session"):
                state.switch("timeline", session=summary.last.session_id)
