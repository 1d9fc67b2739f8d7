"""What every detector needs to know about one trace, computed once.

Detectors read the recorded decisions, the captured input and the final prompt; they
must not each re-derive which packet is in the prompt, what text a builder-made id like
``builder:history:3`` stands for, or which tokenizer counted the build. ``TraceView``
does that once per trace, and ``DiagnosticsOptions`` holds every threshold a detector
uses, so a team can tune them in one place (and the app can show them).
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

from ctxcore import settings
from ctxcore.diagnostics.text import lowered_ws
from ctxcore.errors import InputError
from ctxcore.models import BuildResult, Decision, Finding, Reason, Severity, Status, Trace
from ctxcore.pipeline.common import HISTORY_ID, INSTRUCTIONS_ID
from ctxcore.pipeline.signals import Source, current_turn
from ctxcore.tokens import TOKENIZERS, TokenCounter, get_counter, is_exact

S = TypeVar("S")

SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "error": 2}

IN_PROMPT = frozenset({Status.KEPT, Status.TRUNCATED})
LOST = frozenset({Status.DROPPED, Status.FILTERED, Status.NOT_RENDERED})

#: kinds whose text comes from tools, retrieval or files: untrusted and worth citing.
EVIDENCE_KINDS = frozenset(
    {
        "evidence",
        "retrieval",
        "knowledge",
        "tool_result",
        "tool_output",
        "tool",
        "observation",
        "file",
        "rag_result",
        "related_memory",
        "knowledge_base",
        "search_result",
        "web",
        "repo_map",
    }
)
HISTORY_KINDS = frozenset({"history", "conversation_history"})
#: kinds that are the operator's own voice; injection patterns there are by design.
TRUSTED_KINDS = frozenset(
    {"instructions", "policy", "system", "system_instruction", "task", "tools"}
)


@dataclass(frozen=True)
class DiagnosticsOptions:
    """Thresholds and switches of the detectors; every default is a documented guess.

    Pass a changed copy (``dataclasses.replace``) to ``diagnose``. ``enabled`` limits the
    run to some detector ids; ``counterfactuals`` and ``rerun`` turn off the parts that
    re-run the pipeline (useful at ingest time, where speed matters more).
    """

    enabled: frozenset[str] | None = None
    disabled: frozenset[str] = frozenset()
    #: re-run the pipeline where a detector needs it (greedy_waste, compression_damage).
    rerun: bool = True
    #: attach a verified smallest fix to findings about lost packets.
    counterfactuals: bool = True
    max_counterfactuals: int = 3
    #: re-runs all fixes of one ``diagnose`` call may cost together (a 1,000-packet build
    #: takes ~30 ms, a 100-packet one ~1–5 ms)
    fix_build_budget: int = 40
    # must_have_lost
    must_have_kinds: frozenset[str] = frozenset({"task", "instructions", "policy", "constraint"})
    # budget_flooded
    flood_packet_share: float = 0.35
    flood_kind_share: float = 0.6
    noise_share: float = 0.3
    noise_min_tokens: int = 50
    # greedy_waste
    waste_min_tokens: int = 100
    waste_min_score_gain: float = 0.05
    waste_warn_share: float = 0.1
    knapsack_max_cells: int = 20_000_000
    # stale_or_repeated
    near_duplicate_jaccard: float = 0.8
    duplicate_min_tokens: int = 8
    carried_turns: int = 3
    # unlabelled_evidence
    evidence_kinds: frozenset[str] = EVIDENCE_KINDS
    # relevance_blind_spot
    blind_spot_max_relevance: float = 0.05
    blind_spot_min_gain: float = 0.1
    # estimate_drift
    drift_threshold: float = 0.10
    drift_min_tokens: int = 20
    reference_tokenizer: str = "cl100k_base"
    # summary_coverage
    coverage_min_lost: int = 3
    coverage_warn_share: float = 0.3
    # cache_break: a price file over the shipped table and $CTXSCOPE_PRICES (check --prices)
    prices: str | None = None

    def wants(self, detector: str) -> bool:
        if detector in self.disabled:
            return False
        return self.enabled is None or detector in self.enabled


def finding(
    detector: str,
    severity: Severity,
    message: str,
    packet_ids: list[str] | None = None,
    evidence: Mapping[str, object] | None = None,
    fix: Mapping[str, object] | None = None,
) -> Finding:
    return Finding(
        detector=detector,
        severity=severity,
        packet_ids=list(dict.fromkeys(packet_ids or [])),
        message=message,
        evidence=dict(evidence or {}),
        fix=dict(fix) if fix is not None else None,
    )


_POSITIONAL_HISTORY = re.compile(r"^history:(\d+)$")


def normalize_ws(text: str) -> str:
    """Runs of whitespace made one space, stripped. ``str.split()`` splits on exactly the
    characters ``re``'s ``\\s`` matches (``str.isspace``), a third of the regex's time."""
    return " ".join(text.split())


def ws_head(text: str, n: int) -> str:
    """``normalize_ws(text)[:n]``, normalizing only as much of a long text as it takes.

    The normalized form of a prefix is a prefix of the normalized text (a run of spaces cut
    at the end is stripped, never changed), so once it holds ``n`` characters the rest
    cannot change them."""
    k = 4 * n + 64
    while k < len(text):
        head = normalize_ws(text[:k])
        if len(head) >= n:
            return head[:n]
        k *= 4
    return normalize_ws(text)[:n]


def short(text: str, limit: int = 60) -> str:
    """One line of ``text`` for a message (quoted by the caller with ``!r``)."""
    one = normalize_ws(text)
    return one if len(one) <= limit else one[: limit - 1] + "…"


def id_list(ids: list[str], limit: int = 4) -> str:
    head = ", ".join(ids[:limit])
    return head + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


class SessionFolds:
    """What the session detectors gather from the earlier turns, gathered once for a whole
    session (docs/design.md, "Diagnostics": ``diagnose_session``).

    Each detector that reads other turns folds them into some state (the tool calls seen,
    the user constraints given, the prompt cache); asked afresh at every turn, that is every
    earlier turn read again at each one, quadratic in the session's length. ``diagnose_session``
    diagnoses the turns in order, each with the turns before it, so each such state is a
    fold over a prefix of the session that only grows: ``fold`` keeps it and feeds it only
    the traces it has not seen yet. The state handed out is shared: a detector reads it and
    never changes it.
    """

    def __init__(self, traces: Sequence[Trace]) -> None:
        #: the session in the order it is diagnosed: by turn, then by time of creation
        self.traces = list(traces)
        self._turns = [t.turn for t in self.traces]
        self._folds: dict[Hashable, tuple[int, Any]] = {}
        ids = Counter(t.trace_id for t in self.traces)
        self._repeated = {i for i, n in ids.items() if n > 1}
        self._ids = set(ids)
        self._memos: dict[Hashable, dict[Any, Any]] = {}

    def append(self, trace: Trace) -> bool:
        """Add ``trace`` as the session's next trace (a replay builds a side's turns one at a
        time and diagnoses each with the turns before it). False, and nothing added, when it
        does not come last in the order diagnosed (an earlier turn than the last trace's):
        the caller then diagnoses the rest without these folds. A trace whose id an earlier
        one has is added, and ``earlier`` is None for it (as for a repeated id in the whole
        session; the earlier trace of its id had no such trace before it)."""
        if self._turns and trace.turn < self._turns[-1]:
            return False
        if trace.trace_id in self._ids:
            self._repeated.add(trace.trace_id)
        self.traces.append(trace)
        self._turns.append(trace.turn)
        self._ids.add(trace.trace_id)
        return True

    def earlier(self, trace: Trace) -> int | None:
        """How many traces come before ``trace``'s turn (the prefix of the earlier turns),
        or None for a trace whose id another trace of the session has too: the detectors
        leave a trace of its own id out of its earlier turns, and that is no prefix."""
        if trace.trace_id in self._repeated:
            return None
        return bisect_left(self._turns, trace.turn)

    def turn_start(self, at: int) -> int:
        """The position of the first trace of the turn of the trace at ``at``."""
        return bisect_left(self._turns, self._turns[at])

    def turn_size(self, at: int) -> int:
        """How many traces the turn of the trace at ``at`` has."""
        return bisect_right(self._turns, self._turns[at]) - self.turn_start(at)

    def memo(self, name: Hashable) -> dict[Any, Any]:
        """A dict kept for the whole session under ``name``: what a detector found about
        one of its turns, for the turns after it."""
        return self._memos.setdefault(name, {})

    def fold(
        self, name: Hashable, upto: int, start: Callable[[], S], step: Callable[[S, Trace], None]
    ) -> S:
        """``step`` folded over the first ``upto`` traces from ``start()``, kept under
        ``name``: a longer prefix feeds only the traces after the last one asked for (a
        shorter one starts again)."""
        upto = min(upto, len(self.traces))
        done, state = self._folds[name] if name in self._folds else (0, start())
        if upto < done:
            done, state = 0, start()
        for t in self.traces[done:upto]:
            step(state, t)
        self._folds[name] = (upto, state)
        return state


def fold_over(
    traces: Iterable[Trace], start: Callable[[], S], step: Callable[[S, Trace], None]
) -> S:
    """``step`` folded over ``traces`` from ``start()``: what ``SessionFolds.fold`` keeps,
    computed once (one trace diagnosed with its session)."""
    state = start()
    for t in traces:
        step(state, t)
    return state


@dataclass
class TraceView:
    """One built trace, indexed for the detectors (internal, not persisted)."""

    trace: Trace
    options: DiagnosticsOptions
    session_traces: list[Trace] = field(default_factory=list)
    #: ``counterfactual.rebuild(trace)`` when the caller already holds it (see ``diagnose``)
    rebuilt: BuildResult | None = None
    #: the whole session's folds when ``diagnose_session`` diagnoses its turns in order, each
    #: with the traces before it as ``session_traces``
    folds: SessionFolds | None = None

    def __post_init__(self) -> None:
        if self.trace.result is None:
            raise InputError(
                f"trace {self.trace.trace_id!r} has no result to diagnose; "
                "build it first (ctxscope build) or pass the captured input to ctxscope check"
            )
        self.result = self.trace.result
        self.input = self.trace.input
        self.config = self.trace.config
        self.decisions: list[Decision] = list(self.result.decisions)
        self.by_id: dict[str, Decision] = {d.packet_id: d for d in self.decisions}
        self.packets = {p.id: p for p in self.input.packets}
        self.prompt = self.result.prompt

    @property
    def tokenizer(self) -> str:
        """The build's tokenizer; a name we cannot count with (an external builder's own)
        falls back to the reference tokenizer rather than failing the diagnosis."""
        name = self.result.totals.tokenizer or self.config.tokenizer or ""
        return name if name in TOKENIZERS else self.options.reference_tokenizer

    @cached_property
    def counter(self) -> TokenCounter:
        """The build's own counter (an estimator for the book preset)."""
        return get_counter(self.tokenizer)

    @cached_property
    def exact_counter(self) -> TokenCounter:
        name = self.tokenizer if is_exact(self.tokenizer) else self.options.reference_tokenizer
        return get_counter(name)

    @cached_property
    def reproduces(self) -> bool:
        """Does our re-run of the recorded input and config give the recorded prompt?

        Re-run comparisons (optimal fill, uncompressed prompt) are only about this trace
        when our preset reproduces it; an external trace may not. An imported prompt never
        does (another system assembled it and ``formats.derive`` renders it as its messages,
        not as a ctxscope build's sections), so it is not re-run: on a long session log that
        re-run was half of ``ctxscope import --db``.
        """
        if not self.options.rerun or self.imported:
            return False
        if self.rebuilt is not None:
            return self.rebuilt.prompt == self.prompt
        from ctxcore.diagnostics.counterfactual import rerun_outcome

        # the plan and the prompt only: the decisions' models are not compared
        again = rerun_outcome(self.trace, prompt=True)
        return again is not None and again.prompt == self.prompt

    @cached_property
    def sources(self) -> list[Source]:
        """The packets as the ctxscope preset's signals read them (two detectors use them)."""
        return [
            Source(p.id, p.kind, p.content, p.metadata, p.timestamp, True)
            for p in self.input.packets
        ]

    @cached_property
    def current_turn(self) -> dict[int, str]:
        """``pipeline.signals.current_turn`` of ``sources``: index → why it is current."""
        return current_turn(self.input, self.sources)

    @property
    def imported(self) -> bool:
        """A prompt another system assembled, imported as it was sent (``ctxcore.formats``)."""
        return self.trace.builder.name.startswith(settings.IMPORT_BUILDER_PREFIX)

    @property
    def window_known(self) -> bool:
        """False for an imported prompt whose model's window nobody knows: its totals use the
        prompt's own size, so shares of "the window" and overflow mean nothing."""
        meta = self.trace.metadata.get("import") if isinstance(self.trace.metadata, dict) else None
        return not (isinstance(meta, dict) and meta.get("window_known") is False)

    @property
    def budget(self) -> int:
        totals = self.result.totals
        return totals.available if totals.available > 0 else totals.window

    @cached_property
    def contents(self) -> dict[str, str]:
        """Packet id → the text the builder considered for it (builder ids resolved)."""
        out: dict[str, str] = {}
        history = self.input.history
        for m in history:
            if m.id:
                out[m.id] = m.content
        out[INSTRUCTIONS_ID] = self.input.system_instructions
        ks = sorted(
            int(d.packet_id.rsplit(":", 1)[1])
            for d in self.decisions
            if d.packet_id.startswith(HISTORY_ID + ":") and d.packet_id.rsplit(":", 1)[1].isdigit()
        )
        if ks:
            # K counts from the oldest message the builder considered, which is the
            # (max K + 1)-th message from the end of the history.
            offset = len(history) - (ks[-1] + 1)
            for k in ks:
                if 0 <= offset + k < len(history):
                    out[f"{HISTORY_ID}:{k}"] = history[offset + k].content
        for d in self.decisions:
            m_pos = _POSITIONAL_HISTORY.match(d.packet_id)
            if m_pos and int(m_pos.group(1)) < len(history):
                out.setdefault(d.packet_id, history[int(m_pos.group(1))].content)
        if HISTORY_ID in self.by_id:
            # one packet for the history the builder kept: the messages after those it cut
            cut = sum(1 for d in self.decisions if d.reason == Reason.HISTORY_LIMIT)
            out[HISTORY_ID] = "\n".join(m.content for m in history[cut:])
        for p in self.input.packets:
            out[p.id] = p.content
        return out

    def content(self, packet_id: str) -> str:
        return self.contents.get(packet_id, "")

    def kind(self, packet_id: str) -> str:
        p = self.packets.get(packet_id)
        if p is not None:
            return p.kind
        d = self.by_id.get(packet_id)
        return d.kind if d is not None else ""

    def is_history(self, packet_id: str) -> bool:
        """A history candidate: builder-made, cut by a history limit, or of a history kind."""
        return (
            packet_id.startswith(HISTORY_ID)
            or bool(_POSITIONAL_HISTORY.match(packet_id))
            or self.kind(packet_id) in HISTORY_KINDS
        )

    def in_prompt(self, packet_id: str) -> bool:
        d = self.by_id.get(packet_id)
        return d is not None and d.status in IN_PROMPT

    def role(self, packet_id: str) -> str | None:
        """The history role behind a builder history id, if it is one: the first message
        with that id, or for a builder's own history id the last with that id's text
        (each looked up in a table made once: a decision each would scan the history, and
        a session's traces grow with it)."""
        if not packet_id.startswith(HISTORY_ID + ":"):
            return self._roles_by_id.get(packet_id)
        text = self.contents.get(packet_id)
        return None if text is None else self._roles_by_text.get(text)

    @cached_property
    def _roles_by_id(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for m in self.input.history:
            if m.id is not None:
                out.setdefault(m.id, m.role)
        return out

    @cached_property
    def _roles_by_text(self) -> dict[str, str]:
        return {m.content: m.role for m in self.input.history}

    @cached_property
    def normalized_prompt(self) -> str:
        return lowered_ws(self.prompt)

    def prompt_contains(self, text: str) -> bool:
        needle = normalize_ws(text).lower()
        return bool(needle) and needle in self.normalized_prompt

    def reason_of(self, packet_id: str) -> str:
        d = self.by_id.get(packet_id)
        if d is None:
            return "no decision recorded"
        return f"{d.status.value} ({d.reason.value}: {d.reason_text})"

    @property
    def where(self) -> str:
        return f"trace {self.trace.trace_id!r} (turn {self.trace.turn})"
