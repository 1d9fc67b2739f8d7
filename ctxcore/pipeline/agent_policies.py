"""SWE-agent's history processors and OpenHands' condensers over the recorded request
(docs/design.md, "Presets", "Agent policies").

Each policy is ported from its source and run on the request the ``recorded`` preset
rebuilds, as LangChain messages (``langchain_policies.ChatMsg``, the system prompt apart):

- ``last_n_observations``: SWE-agent's ``LastNObservations`` (``n``, ``polling``), from
  ``SWE-agent/SWE-agent`` at ``3ea751c087f32b16e039a2233dd6eefecef325d5``,
  ``sweagent/agent/history_processors.py``;
- ``summarize_every_n_turns``: the Complexity Trap's ``SummarizeEveryNTurns`` (``n``,
  ``keep_last_m_turns``, static checkpointing), from the paper's repository (JetBrains
  Research, mirrored as ``Recursive-Safeguarding/the-complexity-trap`` at
  ``adfaa1a18b8b3500abb7537101b2bdcefa31f22a``), ``sweagent/agent/history_processors.py``;
- ``observation_masking``, ``recent_events``, ``conversation_window``, ``llm_summarizing``:
  OpenHands' ``ObservationMaskingCondenser``, ``RecentEventsCondenser``,
  ``ConversationWindowCondenser`` and ``LLMSummarizingCondenser`` from
  ``All-Hands-AI/OpenHands`` at ``156d0686c46aafb0fa9d291da6421fb6f64dddc0``,
  ``openhands/memory/condenser/impl/*.py`` (defaults from
  ``openhands/core/config/condenser_config.py``).

What each source calls an observation, read from a recorded request: for SWE-agent, the
instance template (the task, the first observation, never elided) and every tool result or
user message after it (SWE-agent sends environment output as a tool or a user message);
the user messages before the task are demonstrations, not observations. For OpenHands, an
event is a message (the system prompt the first event) and an observation is a tool result.

Where a source calls a model (the summaries), ctxscope's deterministic summarizer writes
them, a stand-in said so in every decision it makes. The rolling policies (OpenHands'
summarizing condenser, SWE-agent's every-n-turns summary) are stateful across the agent's
steps: they are replayed over the request's own history, one step per model call it records
(each assistant message), so a turn sees what the policy had made of every earlier step.

Every function returns the new list and a ``Fate`` per input message (by position), naming
the policy and the knob that decided.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ctxcore.pipeline.common import Summarizer
from ctxcore.pipeline.gather import HISTORY_SUMMARY_ID
from ctxcore.pipeline.langchain_policies import (
    STAND_IN_LABEL,
    STAND_IN_TARGET_TOKENS,
    ChatMsg,
    Fate,
    history_text,
)
from ctxcore.pipeline.recorded import TASK_ID

#: the text ``LastNObservations`` puts in place of an elided observation
ELIDED = "Old environment output: ({lines} lines omitted)"
#: what ``ObservationMaskingCondenser`` puts in place of a masked observation
MASKED = "<MASKED>"
#: ``AgentCondensationObservation``'s text when nothing was summarized before
NO_EVENTS = "No events summarized"
#: the summary ``SummarizeEveryNTurns`` writes (``_summarize_turns``)
CHECKPOINT = "Checkpoint for the last {n} turns:\n{summary}"

Fates = dict[int, Fate]


#: the stand-in's summaries by what it read: a rolling policy replayed at every turn of a
#: session (or every cell of a sweep) summarizes the same batches again
_WRITTEN: dict[tuple[int, str], tuple[Summarizer, str]] = {}
_WRITTEN_MAX = 512


def stand_in(summarizer: Summarizer, text: str) -> str:
    """``summarizer``'s history summary of ``text`` (deterministic, so remembered)."""
    key = (id(summarizer), text)
    hit = _WRITTEN.get(key)
    if hit is not None and hit[0] is summarizer:
        return hit[1]
    summary = summarizer("history", text, STAND_IN_TARGET_TOKENS)
    if len(_WRITTEN) >= _WRITTEN_MAX:
        _WRITTEN.clear()
    _WRITTEN[key] = (summarizer, summary)
    return summary


def _rest(fates: Fates, n: int, fate: Fate) -> None:
    for k in range(n):
        fates.setdefault(k, fate)


def _task_index(messages: Sequence[ChatMsg]) -> int | None:
    """The instance template: the task part, else the first user message."""
    for k, m in enumerate(messages):
        if m.id == TASK_ID:
            return k
    return next((k for k, m in enumerate(messages) if m.role == "user"), None)


def observations(messages: Sequence[ChatMsg]) -> list[int]:
    """SWE-agent's observations in ``messages``: the instance template and every tool result
    or user message after it (``message_type == "observation"``, demonstrations excluded)."""
    first = _task_index(messages)
    if first is None:
        return []
    return [first] + [
        k for k in range(first + 1, len(messages)) if messages[k].role in ("tool", "user")
    ]


# --------------------------------------------------------------------------- SWE-agent


@dataclass(frozen=True, slots=True)
class LastN:
    """``LastNObservations``' ``n`` and ``polling``."""

    n: int = 10
    polling: int = 1

    @property
    def label(self) -> str:
        return f"LastNObservations(n={self.n}, polling={self.polling})"


def omitted(messages: Sequence[ChatMsg], spec: LastN) -> list[int]:
    """``_get_omit_indices``: every observation but the first (the instance template) up to
    the last ``n`` (fewer, by up to ``polling`` - 1, between polls)."""
    return _omitted(observations(messages), spec)


def _omitted(obs: list[int], spec: LastN) -> list[int]:
    """``omitted`` given the observations ``obs``."""
    last_removed = max(0, (len(obs) // spec.polling) * spec.polling - spec.n)
    return obs[1:last_removed]


#: an observation SWE-agent had already elided when the request was recorded
ALREADY_ELIDED = re.compile(
    r"Old environment output: \(\d+ lines omitted\)( \(\d+ images omitted\))?"
)


def elided_text(content: str) -> str:
    """What an elided observation reads (its lines counted as ``str.splitlines`` counts); a
    recording made with ``LastNObservations`` holds some already elided: they stay as
    recorded (their count is of the output SWE-agent saw, which the recording no longer has)."""
    hit = _ELIDED.get(content)
    if hit is None:
        if ALREADY_ELIDED.fullmatch(content):
            hit = content
        else:
            hit = ELIDED.format(lines=len(content.splitlines()))
        if len(_ELIDED) >= _WRITTEN_MAX * 8:
            _ELIDED.clear()
        _ELIDED[content] = hit
    return hit


#: ``elided_text`` by content: a sweep's cells elide the same observations again
_ELIDED: dict[str, str] = {}


def last_n_observations(messages: list[ChatMsg], spec: LastN) -> tuple[list[ChatMsg], Fates]:
    """``LastNObservations.__call__``: the omitted observations' text replaced by
    ``Old environment output: (K lines omitted)``."""
    obs = observations(messages)
    omit = set(_omitted(obs, spec))
    label = spec.label
    template = Fate("kept", f"{label}: the instance template, never elided")
    recent = Fate(
        "kept",
        f"{label}: one of the last n={spec.n} observations (polling keeps"
        f" up to {spec.n + spec.polling - 1})",
    )
    other = Fate("kept", f"{label}: not an observation (only they are elided)")
    observed = set(obs)
    out: list[ChatMsg] = []
    fates: Fates = {}
    for k, m in enumerate(messages):
        if k in omit:
            out.append(replace(m, content=elided_text(m.content)))
            fates[k] = Fate(
                "cleared",
                f"{label}: an observation older than the last n={spec.n}; replaced by "
                f"'{out[-1].content}'",
            )
            continue
        out.append(m)
        if obs and k == obs[0]:
            fates[k] = template
        elif k in observed:
            fates[k] = recent
        else:
            fates[k] = other
    return out, fates


@dataclass(frozen=True, slots=True)
class EveryNTurns:
    """``SummarizeEveryNTurns``' ``n`` and ``keep_last_m_turns`` (static checkpointing on,
    as the paper's hybrid runs it)."""

    n: int = 43
    keep_last_m_turns: int = 10

    @property
    def label(self) -> str:
        return (
            f"SummarizeEveryNTurns(summarize_every_n_turns={self.n}, "
            f"keep_last_m_turns={self.keep_last_m_turns})"
        )


def turns(messages: Sequence[ChatMsg], upto: int) -> list[list[int]]:
    """``_extract_turns_from`` over ``messages[:upto]``: each assistant message after the
    task with the observations right after it (a turn is a (reasoning + action, observation)
    pair; several tool results of one step belong to it)."""
    first = _task_index(messages)
    if first is None:
        return []
    out: list[list[int]] = []
    k = first + 1
    while k < upto:
        if messages[k].role != "assistant":
            k += 1
            continue
        j = k + 1
        while j < upto and messages[j].role in ("tool", "user"):
            j += 1
        if j > k + 1:
            out.append(list(range(k, j)))
        k = j
    return out


@dataclass
class Checkpoints:
    """``SummarizeEveryNTurns``' state over the steps: the summaries written (the
    ``_processed_history_cache`` past the prompt), and the turns each one summarized."""

    summaries: list[ChatMsg] = field(default_factory=list)
    summarized: list[list[int]] = field(default_factory=list)


def _checkpoint(
    messages: Sequence[ChatMsg],
    first: int,
    done: Checkpoints,
    batch: list[list[int]],
    summarizer: Summarizer,
) -> ChatMsg:
    """``_summarize_turns``: the stand-in reads the previous checkpoint (or the problem
    statement, ``messages[first]``) and the turns, and writes the checkpoint."""
    if done.summaries:
        context = f"<PREVIOUS_CHECKPOINT>\n{done.summaries[-1].content}\n</PREVIOUS_CHECKPOINT>"
    else:
        context = f"<PROBLEM_STATEMENT>\n{messages[first].content}\n</PROBLEM_STATEMENT>"
    text = history_text([messages[i] for t in batch for i in t])
    summary = stand_in(summarizer, f"{context}\n{text}")
    sid = (
        HISTORY_SUMMARY_ID
        if not done.summaries
        else f"{HISTORY_SUMMARY_ID}:{len(done.summaries) + 1}"
    )
    return ChatMsg("assistant", CHECKPOINT.format(n=len(batch), summary=summary.strip()), sid)


@dataclass(frozen=True, slots=True)
class Step:
    """What one ``SummarizeEveryNTurns.__call__`` returned: the recorded positions it kept
    (the prompt: up to ``head``; then the turns kept) and the summaries before them (the
    latest alone when it has just summarized, with static checkpointing; every one written so
    far otherwise). The positions are listed only when asked: a replay over the steps reads
    the last step's alone."""

    head: int
    kept_turns: list[list[int]]
    summaries: list[ChatMsg]

    @property
    def kept(self) -> list[int]:
        return [*range(self.head), *(i for t in self.kept_turns for i in t)]

    def messages(self, messages: Sequence[ChatMsg], head: int) -> list[ChatMsg]:
        return [
            *(messages[i] for i in self.kept[:head]),
            *self.summaries,
            *(messages[i] for i in self.kept[head:]),
        ]


def _every_n_step(
    messages: Sequence[ChatMsg],
    first: int,
    prefix_turns: list[list[int]],
    done: Checkpoints,
    spec: EveryNTurns,
    summarizer: Summarizer,
) -> Step | None:
    """One ``SummarizeEveryNTurns.__call__`` on a history whose task is ``messages[first]``
    and whose turns are ``prefix_turns``; None when it returns the history unchanged."""
    unprocessed = prefix_turns[len(done.summaries) * spec.n :]
    if len(unprocessed) < spec.n + spec.keep_last_m_turns:
        if not done.summaries:
            return None
        return Step(first + 1, unprocessed, list(done.summaries))
    batch, keep = unprocessed[: spec.n], unprocessed[spec.n :]
    done.summaries.append(_checkpoint(messages, first, done, batch, summarizer))
    done.summarized.append([i for t in batch for i in t])
    return Step(first + 1, keep, [done.summaries[-1]])


def calls(messages: Sequence[ChatMsg]) -> list[int]:
    """The model calls the request records: the history each earlier call saw ends before an
    assistant message; the last call is the request itself."""
    return [k for k, m in enumerate(messages) if m.role == "assistant"] + [len(messages)]


def summarize_every_n_turns(
    messages: list[ChatMsg], spec: EveryNTurns, summarizer: Summarizer
) -> tuple[list[ChatMsg], Fates]:
    """``SummarizeEveryNTurns`` replayed over the request's steps (``calls``); the list it
    returns at the last one, with a fate per recorded message."""
    fates: Fates = {}
    label = spec.label
    first = _task_index(messages)
    if first is None:
        _rest(fates, len(messages), Fate("kept", f"{label}: no task message to start from"))
        return messages, fates
    done = Checkpoints()
    last: Step | None = None
    every = turns(messages, len(messages))
    ends = [t[-1] for t in every]
    for upto in calls(messages):
        # a call's history ends before an assistant message: no turn straddles it
        seen = every[: bisect_left(ends, upto)]
        last = _every_n_step(messages, first, seen, done, spec, summarizer)
    if last is None:
        why = f"fewer than {spec.n} + {spec.keep_last_m_turns} turns to summarize"
        _rest(fates, len(messages), Fate("kept", f"{label}: {why}"))
        return messages, fates
    out = last.messages(messages, first + 1)
    summarized = {i: s for s, batch in enumerate(done.summarized) for i in batch}
    keep = set(last.kept)
    kept = Fate("kept", f"{label}: the prompt, or a turn not yet summarized")
    trimmed = Fate(
        "trimmed",
        f"{label}: not part of a (action, observation) turn; the summarized history is "
        "rebuilt from turns only",
    )
    for k in range(len(messages)):
        if k in keep:
            fates[k] = kept
        elif k in summarized:
            fates[k] = Fate(
                "summarized",
                f"{label}: in the {_nth(summarized[k] + 1)} batch of "
                f"{spec.n} turns, replaced by a checkpoint written by {STAND_IN_LABEL}",
            )
        else:
            fates[k] = trimmed
    return out, fates


def _nth(k: int) -> str:
    return f"{k}{'tsnrhtdd'[(k // 10 % 10 != 1) * (k % 10 < 4) * k % 10 :: 4]}"


# --------------------------------------------------------------------------- OpenHands


def _label(name: str, **knobs: int) -> str:
    return f"{name}({', '.join(f'{k}={v}' for k, v in knobs.items())})"


def observation_masking(
    events: list[ChatMsg], attention_window: int
) -> tuple[list[ChatMsg], Fates]:
    """``ObservationMaskingCondenser.condense``: every observation (tool result) outside the
    ``attention_window`` most recent events becomes ``<MASKED>``."""
    label = _label("ObservationMaskingCondenser", attention_window=attention_window)
    out: list[ChatMsg] = []
    fates: Fates = {}
    edge = len(events) - attention_window
    for i, e in enumerate(events):
        if e.role == "tool" and i < edge:
            out.append(replace(e, content=MASKED))
            fates[i] = Fate(
                "cleared",
                f"{label}: an observation outside the {attention_window} most recent events; "
                f"its content replaced by {MASKED}",
            )
        else:
            out.append(e)
            where = "inside the attention window" if i >= edge else "not an observation"
            fates[i] = Fate("kept", f"{label}: {where}")
    return out, fates


def recent_events(
    events: list[ChatMsg], keep_first: int, max_events: int
) -> tuple[list[ChatMsg], Fates]:
    """``RecentEventsCondenser.condense``: the first ``keep_first`` events and the most recent
    up to ``max_events`` in all. The same events the source keeps, each once (its slices
    repeat the head when the view holds fewer than ``max_events`` events)."""
    label = _label("RecentEventsCondenser", keep_first=keep_first, max_events=max_events)
    head = set(range(min(keep_first, len(events))))
    tail_length = max(0, max_events - len(head))
    start = max(0, len(events) - tail_length) if tail_length else 0  # view[-0:] is all of it
    fates: Fates = {}
    out: list[ChatMsg] = []
    for i, e in enumerate(events):
        if i in head:
            fates[i] = Fate("kept", f"{label}: one of the first keep_first={keep_first} events")
        elif i >= start:
            fates[i] = Fate("kept", f"{label}: one of the most recent max_events={max_events}")
        else:
            fates[i] = Fate(
                "trimmed", f"{label}: older than the most recent max_events={max_events}"
            )
            continue
        out.append(e)
    return out, fates


def _essential(events: Sequence[ChatMsg]) -> list[int]:
    """``ConversationWindowCondenser``'s essential events: the system message and the first
    user message (the recall action and observation have no recorded counterpart)."""
    out = [i for i, e in enumerate(events[:1]) if e.role == "system"]
    first_user = next((i for i, e in enumerate(events) if e.role == "user"), None)
    return out + ([first_user] if first_user is not None else [])


def conversation_window(
    events: list[ChatMsg], requested: bool, why: str
) -> tuple[list[ChatMsg], Fates]:
    """``ConversationWindowCondenser.get_condensation`` when a condensation is ``requested``
    (the provider refused the request as too long, ``why``): the essential events and
    roughly the later half of the rest, without the observations that would lead it."""
    label = "ConversationWindowCondenser"
    fates: Fates = {}
    essential = _essential(events)
    if not requested or not any(e.role == "user" for e in events):
        reason = why if not requested else "no first user message (it condenses nothing)"
        _rest(fates, len(events), Fate("kept", f"{label}: {reason}"))
        return events, fates
    keep_recent = max(1, (len(events) - len(essential)) // 2)
    start = max(0, len(events) - keep_recent)
    while start < len(events) and events[start].role == "tool":
        start += 1
    out: list[ChatMsg] = []
    for i, e in enumerate(events):
        if i in essential:
            fates[i] = Fate("kept", f"{label}: an essential event (system or first user message)")
        elif i >= start:
            fates[i] = Fate(
                "kept", f"{label}: in the later half kept ({keep_recent} events); {why}"
            )
        else:
            what = (
                "an observation that would lead the kept half without its action"
                if i >= len(events) - keep_recent
                else "in the older half forgotten"
            )
            fates[i] = Fate("trimmed", f"{label}: {what}; {why}")
            continue
        out.append(e)
    return out, fates


@dataclass(frozen=True, slots=True)
class Summarizing:
    """``LLMSummarizingCondenser``'s ``max_size`` and ``keep_first``."""

    max_size: int = 100
    keep_first: int = 1

    @property
    def label(self) -> str:
        return _label("LLMSummarizingCondenser", max_size=self.max_size, keep_first=self.keep_first)


#: a view entry: a recorded event by position, or the summary (``SUMMARY``)
SUMMARY = -1


def _condense(
    events: Sequence[ChatMsg],
    view: list[int],
    summary: str | None,
    spec: Summarizing,
    summarizer: Summarizer,
) -> tuple[list[int], str]:
    """``get_condensation`` and the view it leads to: the head, the summary event, and the
    ``max_size // 2 - keep_first - 1`` most recent events; the stand-in summarizes the
    previous summary and the forgotten events."""
    head = view[: spec.keep_first]
    from_tail = spec.max_size // 2 - len(head) - 1
    forgotten = [i for i in view[spec.keep_first : len(view) - from_tail] if i != SUMMARY]
    previous = summary or NO_EVENTS
    text = history_text([events[i] for i in forgotten])
    body = f"<PREVIOUS SUMMARY>\n{previous}\n</PREVIOUS SUMMARY>\n\n{text}"
    new = stand_in(summarizer, body).strip()
    return [*head, SUMMARY, *view[len(view) - from_tail :]], new


def llm_summarizing(
    events: list[ChatMsg], spec: Summarizing, summarizer: Summarizer
) -> tuple[list[ChatMsg], Fates]:
    """``LLMSummarizingCondenser`` (a rolling condenser) replayed over the request's steps:
    at each model call whose view holds more than ``max_size`` events, the events between
    the head and the tail are forgotten into one summary event after the head."""
    view: list[int] = []
    summary: str | None = None
    added = 0
    rounds = 0
    for upto in calls(events):
        view.extend(range(added, upto))
        added = upto
        if len(view) > spec.max_size:
            view, summary = _condense(events, view, summary, spec, summarizer)
            rounds += 1
    fates: Fates = {}
    kept = set(view)
    out: list[ChatMsg] = []
    for i in view:
        if i == SUMMARY:
            assert summary is not None
            out.append(ChatMsg("user", summary, HISTORY_SUMMARY_ID))
        else:
            out.append(events[i])
    for i in range(len(events)):
        if i in kept:
            why = (
                f"the view holds at most max_size={spec.max_size} events"
                if not rounds
                else f"in the head (keep_first={spec.keep_first}) or the tail kept after "
                f"{rounds} condensation(s)"
            )
            fates[i] = Fate("kept", f"{spec.label}: {why}")
        else:
            fates[i] = Fate(
                "summarized",
                f"{spec.label}: forgotten when the view passed max_size={spec.max_size}; "
                f"in the summary written by {STAND_IN_LABEL}",
            )
    return out, fates


__all__ = [
    "CHECKPOINT",
    "ELIDED",
    "MASKED",
    "Checkpoints",
    "EveryNTurns",
    "LastN",
    "Summarizing",
    "calls",
    "conversation_window",
    "elided_text",
    "last_n_observations",
    "llm_summarizing",
    "observation_masking",
    "observations",
    "omitted",
    "recent_events",
    "summarize_every_n_turns",
    "turns",
]
