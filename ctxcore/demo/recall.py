"""Context recall on the corpus sessions: does a built prompt hold what the agent's next step
used? (``bench/bench_recall.py`` prints the table, ``ctxscope tune`` searches knobs with it.)

For every assistant step of the multi-turn sessions in ``corpus/`` (SWE-agent, mini-swe-agent,
aider, opencode), the input is what the agent had before that step (``captured_input_from_
messages``: the history, and the tool results as packets) and the *targets* are what the step
used: the files it opens or edits and the tests it runs (paths and test names in its text and
tool-call arguments) and the error text it quotes (error lines of earlier tool output that the
step repeats). A turn's recall is the share of the targets that were anywhere in the input
and are in the built prompt (case-insensitive); a config's recall is the mean over turns with
at least one such target. Separately, "error kept" is the share of turns whose latest error
output among the current turn's tool results keeps at least one of its error lines in the
prompt (docs/design.md, "ctxscope").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ctxcore.errors import CtxscopeError
from ctxcore.formats.openai import captured_input_from_messages
from ctxcore.formats.transcripts import (
    Conversation,
    parse_aider,
    parse_mini_swe,
    parse_opencode,
    parse_sweagent,
)
from ctxcore.models import CapturedInput, Config
from ctxcore.pipeline import build
from ctxcore.pipeline.signals import Source, current_turn
from ctxcore.summarize import error_evidence, targets_of

PRESETS = ("ctxscope", "hello-agents", "hello-agents-book")
BUDGETS = (4000, 8000, 16000, 32000)
#: the multi-turn sessions and their parsers
SESSIONS: dict[str, Callable[[Path], Conversation]] = {
    "a01_sweagent_marshmallow-1867_function-calling.traj.json": parse_sweagent,
    "a02_sweagent_function_calling_simple.traj.json": parse_sweagent,
    "a03_mini-swe-agent_github_issue.traj.json": parse_mini_swe,
    "b01_mswea_gemini3pro_pytest-dev__pytest-7571.traj.json": parse_mini_swe,
    "b02_mswea_gemini3pro_django__django-16560.traj.json": parse_mini_swe,
    "b03_sweagent_pydicom-1458.traj.json": parse_sweagent,
    "b04_aider_chat_session_2024-08-13_1342.md": parse_aider,
    "b05_zh_opencode_session_ses_4119.md": parse_opencode,
    "c01_zh_opencode_session_ses_4398.md": parse_opencode,
}
#: at most this many steps per session (evenly spread), so the table takes minutes, not hours
MAX_STEPS = 24
_T0 = datetime(2024, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Turn:
    """One assistant step: what it saw, what it used, and which error lines are fresh."""

    session: str
    step: int
    input: CapturedInput
    targets: tuple[str, ...]
    fresh_errors: tuple[str, ...]


def _step_text(msg: dict[str, Any]) -> str:
    parts = [str(msg.get("content") or "")]
    for call in msg.get("tool_calls") or []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        parts.append(f"{fn.get('name', '')} {fn.get('arguments', '')}")
    return "\n".join(parts)


def _text_of(inp: CapturedInput) -> str:
    return "\n".join(
        [inp.query, inp.system_instructions]
        + [m.content for m in inp.history]
        + [p.content for p in inp.packets]
    )


def fresh_errors(inp: CapturedInput) -> list[str]:
    """The error lines of the latest error output among the current turn's tool results."""
    sources = [Source(p.id, p.kind, p.content, p.metadata, p.timestamp, True) for p in inp.packets]
    fresh = sorted(current_turn(inp, sources))
    for k in reversed(fresh):
        lines = error_evidence(sources[k].text)
        if lines:
            return lines
    return []


def turns_of(path: Path, max_steps: int = MAX_STEPS) -> list[Turn]:
    """The turns of one session file."""
    conv = SESSIONS[path.name](path)
    msgs = conv.messages
    times = [t or _T0 + timedelta(minutes=k) for k, t in enumerate(conv.times)]
    steps = [i for i in conv.assistant_indices() if i >= 2]
    if len(steps) > max_steps:
        stride = len(steps) / max_steps
        steps = [steps[int(k * stride)] for k in range(max_steps)]
    # one long task message (SWE-agent, mini-swe-agent): it stays in the history and the
    # title is the query, as the demo does; a chat (aider, opencode): the last user message
    query = conv.title.splitlines()[0][:200] if conv.count("user") <= 1 and conv.title else None
    out: list[Turn] = []
    for k, at in enumerate(steps, start=1):
        try:
            inp = captured_input_from_messages(msgs[:at], now=times[at], query=query)
        except CtxscopeError:
            continue
        inp = _stamped(inp, msgs[:at], times)
        targets = targets_of(_step_text(msgs[at]), _text_of(inp))
        errs = fresh_errors(inp)
        if targets or errs:
            out.append(Turn(path.name, k, inp, tuple(targets), tuple(errs)))
    return out


def _stamped(
    inp: CapturedInput, msgs: Sequence[dict[str, Any]], times: list[datetime]
) -> CapturedInput:
    """Give history messages and tool results the time of the message they came from."""
    by_call: dict[str, datetime] = {}
    for m, t in zip(msgs, times, strict=False):
        if m.get("role") == "tool" and m.get("tool_call_id"):
            by_call[str(m["tool_call_id"])] = t
    packets = [
        p.model_copy(update={"timestamp": by_call.get(str(p.metadata.get("tool_call_id")))})
        for p in inp.packets
    ]
    users = [t for m, t in zip(msgs, times, strict=False) if m.get("role") == "user"]
    history = []
    u = 0
    for msg in inp.history:
        if msg.role == "user" and u < len(users):
            msg = msg.model_copy(update={"timestamp": users[u]})
            u += 1
        history.append(msg)
    return inp.model_copy(update={"packets": packets, "history": history})


@dataclass
class Score:
    """A preset × budget's recall over some turns, and the turns it missed."""

    recall: float
    error_kept: float
    turns: int
    error_turns: int
    missed: list[tuple[str, int, list[str]]]


def recall_of(turns: Iterable[Turn], config: Config) -> Score:
    """Build every turn with ``config`` and measure (see the module docstring)."""
    shares: list[float] = []
    kept: list[bool] = []
    missed: list[tuple[str, int, list[str]]] = []
    for t in turns:
        try:
            prompt = build(t.input, config).prompt.lower()
        except CtxscopeError:
            prompt = ""
        if t.targets:
            lost = [x for x in t.targets if x not in prompt]
            shares.append(1 - len(lost) / len(t.targets))
            if lost:
                missed.append((t.session, t.step, lost))
        if t.fresh_errors:
            kept.append(any(ln.lower()[:200] in prompt for ln in t.fresh_errors))
    return Score(
        recall=sum(shares) / len(shares) if shares else 0.0,
        error_kept=sum(kept) / len(kept) if kept else 1.0,
        turns=len(shares),
        error_turns=len(kept),
        missed=missed,
    )


def all_turns(corpus: Path = Path("corpus"), max_steps: int = MAX_STEPS) -> list[Turn]:
    out: list[Turn] = []
    for name in SESSIONS:
        if (corpus / name).exists():
            out.extend(turns_of(corpus / name, max_steps))
    return out


__all__ = [
    "BUDGETS",
    "MAX_STEPS",
    "PRESETS",
    "SESSIONS",
    "Score",
    "Turn",
    "all_turns",
    "fresh_errors",
    "recall_of",
    "targets_of",
    "turns_of",
]
