"""Break attribution (ctxcore/cache/breaks.py; docs/design.md, "Prompt cache", Breaks): real
sessions whose cache broke (a Codex compaction, a pi session idle past the lifetime) and real
sessions edited in one thing (a date line in the system prompt, a tool added, removed or moved,
an earlier message edited, a tool result cleared, the model switched)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from ctxcore.cache import CacheBreak, simulate_session
from ctxcore.cost import price_table
from ctxcore.formats.load import load_file
from ctxcore.models import Message, ToolDef, Trace

IMPORTS = Path(__file__).parent / "fixtures" / "imports"


def _session(name: str) -> list[Trace]:
    by: dict[str, list[Trace]] = defaultdict(list)
    for t in load_file(IMPORTS / name):
        by[t.session_id].append(t)
    (traces,) = by.values()
    return sorted(traces, key=lambda t: (t.input.now, t.turn))


def _browser() -> list[Trace]:
    """Inspect's gpt-4o-mini browser session: 5 calls, each reading the one before."""
    return _session("inspect/browser-gpt-4o-mini-tools.json")


def _messages(t: Trace, edit: Callable[[list[Message]], list[Message]]) -> Trace:
    assert t.result is not None and t.result.messages is not None
    result = t.result.model_copy(update={"messages": edit(list(t.result.messages))})
    return t.model_copy(update={"result": result})


def _with_system(t: Trace, day: str) -> Trace:
    system = Message(role="system", content=f"You browse the web.\nToday is {day}.\nBe brief.")
    return _messages(t, lambda ms: [system, *ms])


def _breaks(traces: list[Trace]) -> list[CacheBreak | None]:
    return [c.cache_break for c in simulate_session(traces)]


def test_an_unchanged_session_has_no_break() -> None:
    assert _breaks(_browser()) == [None] * 5


def test_a_date_line_in_the_system_prompt() -> None:
    traces = _browser()
    edited = [
        _with_system(t, "2026-12-01" if i < 3 else "2026-12-02") for i, t in enumerate(traces)
    ]
    breaks = _breaks(edited)
    assert breaks[:3] == [None] * 3 and breaks[4] is None
    b = breaks[3]
    assert b is not None and (b.block, b.kind) == ("system", "system_changed")
    assert "line 2" in b.reason and "2026-12-01" in b.reason and "2026-12-02" in b.reason
    assert "system prompt" in b.fix
    calls = simulate_session(edited)
    # the tools before the system prompt are still read; the rest, in whole 128-token steps,
    # is written again
    left = (calls[2].cache_read + calls[2].cache_write) // 128 * 128
    assert 0 < calls[3].cache_read < left and b.tokens == left - calls[3].cache_read
    row = price_table().price("openai/gpt-4o-mini")
    assert row is not None and row.cache_read is not None
    assert b.cost_usd == pytest.approx(b.tokens * (row.input - row.cache_read) / 1e6)


def _tools(t: Trace, edit: Callable[[list[ToolDef]], list[ToolDef]]) -> Trace:
    return t.model_copy(
        update={"input": t.input.model_copy(update={"tools": edit(list(t.input.tools))})}
    )


EXTRA = ToolDef(
    name="mcp__search__query", description="Search the web.", parameters={"type": "object"}
)


@pytest.mark.parametrize(
    ("edit", "kind"),
    [
        (lambda ts: [*ts, EXTRA], "tools_added"),
        (lambda ts: ts[:-1], "tools_removed"),
        (lambda ts: ts[::-1], "tools_reordered"),
        (
            lambda ts: [ts[0].model_copy(update={"description": "changed"}), *ts[1:]],
            "tools_changed",
        ),
    ],
)
def test_a_tool_list_change(edit: Callable[[list[ToolDef]], list[ToolDef]], kind: str) -> None:
    traces = _browser()
    assert len(traces[0].input.tools) >= 2
    edited = [t if i < 2 else _tools(t, edit) for i, t in enumerate(traces)]
    breaks = _breaks(edited)
    assert breaks[:2] == [None, None] and breaks[3:] == [None, None]
    b = breaks[2]
    assert b is not None and (b.block, b.kind) == ("tools", kind) and b.index is not None
    assert b.tokens > 0 and "tool list" in b.fix


def test_an_earlier_message_edited() -> None:
    traces = _browser()

    def edit(ms: list[Message]) -> list[Message]:
        return [ms[0].model_copy(update={"content": ms[0].content + " (edited)"}), *ms[1:]]

    edited = [t if i < 3 else _messages(t, edit) for i, t in enumerate(traces)]
    b = _breaks(edited)[3]
    assert b is not None and (b.block, b.kind, b.index) == ("messages", "history_edited", 0)


def test_a_tool_result_cleared_is_a_context_edit() -> None:
    traces = _browser()

    def clear(ms: list[Message]) -> list[Message]:
        k = next(i for i, m in enumerate(ms) if m.role == "tool")
        return [*ms[:k], ms[k].model_copy(update={"content": "[cleared]"}), *ms[k + 1 :]]

    edited = [t if i < 3 else _messages(t, clear) for i, t in enumerate(traces)]
    b = _breaks(edited)[3]
    assert b is not None and (b.block, b.kind) == ("messages", "context_edit")
    assert b.packet is not None and b.packet.startswith("tool:")


def test_the_model_changed() -> None:
    traces = _browser()
    edited = [
        t if i != 2 else t.model_copy(update={"metadata": {**t.metadata, "model": "gpt-4o"}})
        for i, t in enumerate(traces)
    ]
    b = _breaks(edited)[2]
    assert b is not None and (b.block, b.kind) == ("model", "model_changed")


def test_the_lifetime_passed() -> None:
    traces = _browser()
    late = [
        t
        if i < 2
        else t.model_copy(
            update={
                "input": t.input.model_copy(update={"now": t.input.now + timedelta(minutes=15)})
            }
        )
        for i, t in enumerate(traces)
    ]
    b = _breaks(late)[2]
    assert b is not None and (b.block, b.kind) == ("expired", "expired")
    assert "lifetime" in b.reason


def test_a_real_compaction_in_a_codex_session() -> None:
    """The Codex rollout's compaction: the call after it reads only the start of the prompt
    (billed: 22,912 of 48,297 tokens); the break names the compaction."""
    traces = _session("codex/localpush-rollout-compaction-turn.subset.jsonl")
    calls = simulate_session(traces)
    found = [(c, c.cache_break) for c in calls if c.cache_break is not None]
    assert len(found) == 1
    call, b = found[0]
    assert (b.block, b.kind) == ("messages", "compaction") and "line 58" in b.reason
    assert call.recorded_read is not None and call.recorded_read < call.recorded_read + b.tokens


def test_a_real_pi_session_idle_past_the_lifetime() -> None:
    """pi's session: 9.5 minutes pass between two calls; the provider billed no read, and
    the break says the lifetime passed."""
    calls = simulate_session(_session("pi/pi-mono-large-session.subset.jsonl"))
    found = [c for c in calls if c.cache_break is not None]
    assert [c.cache_break.kind for c in found if c.cache_break] == ["expired"]
    assert found[0].recorded_read == 0 and found[0].cache_read == 0
