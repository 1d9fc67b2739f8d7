"""Values and helpers shared by every preset's stages.

A ``Candidate`` is the internal, mutable-free working form of a packet (plain dataclass,
not persisted). Stages are pure functions over lists of candidates; the report stage turns
the final decisions into the persisted ``BuildResult``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from ctxcore.models import (
    PARTITIONS,
    BuildResult,
    Decision,
    Message,
    PartitionUsage,
    Report,
    Status,
    Totals,
)

if TYPE_CHECKING:
    from ctxcore.models import CapturedInput, Config
    from ctxcore.tokens import TokenCounter

INSTRUCTIONS_ID = "builder:instructions"
HISTORY_ID = "builder:history"


def history_id(k: int) -> str:
    """Id of the K-th history message a builder kept, counted from the oldest kept."""
    return f"builder:history:{k}"


@dataclass(frozen=True, slots=True)
class Candidate:
    """One item a builder considers: a caller packet or one it made itself."""

    id: str
    kind: str
    content: str
    tokens: int
    timestamp: datetime | None = None
    relevance: float | None = None  # as given by the caller (None = not given)
    priority: int = 0
    must_keep: bool = False
    order: int = 0  # position in gather order (stable tie-breaks)
    builder_made: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Timer:
    """Collects per-stage wall-clock milliseconds (the one non-deterministic output)."""

    timings: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            # a stage entered twice (e.g. "report": the preset's part, then make_report's)
            # accumulates
            ms = (time.perf_counter() - t0) * 1000
            self.timings[name] = round(self.timings.get(name, 0.0) + ms, 3)


class ReportLists:
    """A report's lists, added to decision by decision in prompt order (``add``): what
    ``make_report`` makes of a build's decisions, and what a session log's importer keeps of
    the decisions its calls share (``formats.sessions.calls``)."""

    __slots__ = ("included", "summarized", "dropped", "reasons")

    def __init__(self) -> None:
        self.included: list[str] = []
        self.summarized: list[str] = []
        self.dropped: list[str] = []
        #: (packet id, reason) of each decision with a reason, in order
        self.reasons: list[tuple[str, str]] = []

    def add(self, decisions: list[Decision]) -> None:
        included, summarized, dropped = self.included, self.summarized, self.dropped
        reasons = self.reasons
        kept, truncated, summ = Status.KEPT, Status.TRUNCATED, Status.SUMMARIZED
        for d in decisions:  # one pass: this runs on every build of 1,000+ decisions
            v = d.__dict__
            status = v["status"]
            pid = v["packet_id"]
            if status == kept or status == truncated:
                included.append(pid)
            elif status == summ:
                summarized.append(pid)
            else:  # dropped, filtered, not rendered
                dropped.append(pid)
            if status != kept or v["notes"]:
                reasons.append((pid, v["reason_text"]))

    def report(self, budget: int, used: int, must_keep_ids: list[str]) -> Report:
        return Report(
            budget=budget,
            used=used,
            mustKeep=must_keep_ids,
            included=self.included,
            summarized=self.summarized,
            dropped=self.dropped,
            reasons=dict(self.reasons),  # a packet id given twice: its first place, last reason
        )


def make_report(
    decisions: list[Decision], budget: int, used: int, must_keep_ids: list[str]
) -> Report:
    lists = ReportLists()
    lists.add(decisions)
    return lists.report(budget, used, must_keep_ids)


def make_partitions(
    used: dict[str, int], items: dict[str, int], budgets: dict[str, int | None] | None = None
) -> list[PartitionUsage]:
    budgets = budgets or {}
    return [
        PartitionUsage(
            name=name,
            budget=budgets.get(name),
            used=used.get(name, 0),
            items=items.get(name, 0),
        )
        for name in PARTITIONS
    ]


def finish(
    *,
    prompt: str,
    decisions: list[Decision],
    partitions: list[PartitionUsage],
    totals: Totals,
    must_keep_ids: list[str],
    warnings: list[str],
    timer: Timer,
    messages: list[Message] | None = None,
    report: Report | None = None,
) -> BuildResult:
    """The build's result; its report made of the decisions unless ``report`` is given
    (made by the caller from the same decisions, as ``make_report`` would)."""
    with timer.stage("report"):
        if report is None:
            report = make_report(decisions, totals.available, totals.used, must_keep_ids)
    return BuildResult(
        prompt=prompt,
        messages=messages,
        decisions=decisions,
        partitions=partitions,
        totals=totals,
        report=report,
        warnings=warnings,
        timings=dict(timer.timings),
    )


@dataclass(frozen=True, slots=True)
class ReportParts:
    """What a preset's report stage produces; ``finish_parts`` wraps it into the result."""

    prompt: str
    decisions: list[Decision]
    partitions: list[PartitionUsage]
    totals: Totals
    must_keep_ids: list[str]
    warnings: list[str]


def finish_parts(parts: ReportParts, timer: Timer) -> BuildResult:
    return finish(
        prompt=parts.prompt,
        decisions=parts.decisions,
        partitions=parts.partitions,
        totals=parts.totals,
        must_keep_ids=parts.must_keep_ids,
        warnings=parts.warnings,
        timer=timer,
    )


Summarizer = Callable[[str, str, int], str]
"""``summarizer(kind, content, target_tokens) -> summary``: pluggable (e.g. an LLM)."""


class RunFn(Protocol):
    """A preset's ``run``: its build of ``input`` under a resolved ``config``."""

    def __call__(
        self,
        input: CapturedInput,
        config: Config,
        counter: TokenCounter,
        summarizer: Summarizer | None = None,
    ) -> BuildResult: ...
