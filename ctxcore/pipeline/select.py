"""Select and degrade for the ``ctxscope`` preset: who gets in, at what size, and why.

``plan(prepared, knobs, summarizer, counter)`` is the whole decision core, shared by
``build`` and by the sweep (which calls it for each grid cell without rendering a prompt):

1. score — ``relevance_weight × relevance + recency_weight × recency + priority_weight ×
   priority`` over numpy arrays;
2. must-keep first — instructions, tool definitions, the current task, packets marked
   ``must_keep``, explicit constraints, the active plan, the latest failure. If they alone
   overflow, the tool logs/files/repo maps among them are summarized, rung by rung in the
   ladder's order, stopping as soon as they fit; if that is not enough, ``BudgetError``
   names every one of them with its size;
3. filter (numpy masks) — empty and duplicate content (the ladder's ``noise`` rung: packets
   already judged noise are dropped first), relevance below ``min_relevance`` (history
   messages are exempt: they are ranked, not filtered), history older than ``history_limit``;
4. fill — by score, within the global budget and each partition's cap: ``skip`` keeps
   trying smaller items, ``break`` stops at the first that does not fit (the seeds' fill,
   for comparison), ``optimal`` maximises the total score (0/1 knapsack, ``fill.optimal_set``);
5. degrade — before an item that does not fit is dropped, its rung of the ladder shrinks it
   (tool logs → summaries, files → outlines, repo maps → compact trees, recent messages →
   shortened); the old history beyond ``history_limit`` competes as one structured summary.
   A degraded version is made once per input and memoised, so it costs nothing in a sweep.

The result is a ``Plan`` of plain per-item codes and numbers (cheap enough for 400 sweep
cells); the sentences people read are written from them by ``reasons.describe`` only when a build
reports. Budgets are charged per rendered segment, headers included, which for tiktoken
encodings is exactly the token count of the final prompt (see ``gather``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ctxcore.errors import BudgetError
from ctxcore.models import PARTITIONS, Reason, Status
from ctxcore.pipeline.common import Summarizer
from ctxcore.pipeline.degrade import Degrader
from ctxcore.pipeline.fill import optimal_set
from ctxcore.pipeline.gather import PARTITION_INDEX, Prepared
from ctxcore.summarize import FILE_KINDS, REPO_MAP_KINDS, TOOL_KINDS
from ctxcore.tokens import TokenCounter

RUNGS: tuple[str, ...] = ("noise", "history", "tool_results", "files", "repo_map", "recent")
RUNG_KINDS: dict[str, frozenset[str]] = {
    "tool_results": TOOL_KINDS,
    "files": FILE_KINDS,
    "repo_map": REPO_MAP_KINDS,
}
RUNG_WORDS = {
    "history": "old history summarized",
    "tool_results": "tool log summarized",
    "files": "file sliced to an outline",
    "repo_map": "repo map compacted",
    "recent": "message shortened",
}
TASK_I = PARTITION_INDEX["[Task]"]
OUTPUT_I = PARTITION_INDEX["[Output]"]
CONTEXT_I = PARTITION_INDEX["[Context]"]

# status / reason codes of a plan (indexes into these tuples)
STATUSES: tuple[Status, ...] = (
    Status.KEPT,
    Status.TRUNCATED,
    Status.SUMMARIZED,
    Status.DROPPED,
    Status.FILTERED,
)
KEPT, TRUNCATED, SUMMARIZED, DROPPED, FILTERED = range(5)
INCLUDED = (KEPT, TRUNCATED, SUMMARIZED)
REASONS: tuple[Reason, ...] = (
    Reason.MUST_KEEP,
    Reason.FITS,
    Reason.BELOW_MIN_RELEVANCE,
    Reason.NO_ROOM,
    Reason.AFTER_BREAK,
    Reason.PARTITION_FULL,
    Reason.NOT_IN_OPTIMAL_SET,
    Reason.HISTORY_LIMIT,
    Reason.DEGRADED,
    Reason.DUPLICATE,
    Reason.EMPTY,
    Reason.REMOVED_BY_COMPRESS,
)
(
    R_MUST,
    R_FITS,
    R_BELOW,
    R_NO_ROOM,
    R_AFTER_BREAK,
    R_PART_FULL,
    R_NOT_OPT,
    R_HIST_LIMIT,
    R_DEGRADED,
    R_DUP,
    R_EMPTY,
    R_REMOVED,
) = range(len(REASONS))
#: smallest degraded segment worth making (marker + a few lines)
MIN_DEGRADED = 48


@dataclass(frozen=True)
class Knobs:
    """The resolved numbers a plan needs (extracted once from a ``Config``)."""

    available: int
    min_relevance: float
    relevance_weight: float
    recency_weight: float
    priority_weight: float
    recency_tau_hours: float
    fill: str
    history_limit: int
    caps: tuple[int, ...]  # per partition, in PARTITIONS order
    degrade: tuple[str, ...]

    def label(self, rung: str) -> str:
        return f"degrade step {self.degrade.index(rung) + 1}: {rung}"


@dataclass
class Summary:
    """The structured summary of the old history, when the history rung made one."""

    segment: str
    tokens: int
    tokens_before: int
    index: int  # item index of the oldest folded message (where it is listed/rendered)
    budget_left: int
    rank: int


@dataclass
class Plan:
    """The decisions of one build as per-item codes and numbers (lists indexed by item)."""

    score: npt.NDArray[np.float64]
    recency: npt.NDArray[np.float64]
    status: list[int]
    reason: list[int]
    tokens_after: list[int]
    budget_left: list[int]
    rank: list[int]  # 0 = not ranked
    need: list[int]  # tokens an item needed when it was turned away
    room: list[int]  # partition room at that moment (PARTITION_FULL)
    why: list[int]  # for DEGRADED items: the reason the full version did not fit
    used: int
    part_used: list[int]
    part_items: list[int]
    must_keep: list[int]
    segments: dict[int, str] = field(default_factory=dict)  # degraded segments
    rung: dict[int, str] = field(default_factory=dict)
    notes: dict[int, list[str]] = field(default_factory=dict)
    summary: Summary | None = None
    summary_need: int = 0  # tokens the history summary needed when it did not fit
    stopped_at: str | None = None  # break mode: the item the fill stopped at
    warnings: list[str] = field(default_factory=list)

    @property
    def score_list(self) -> list[float]:
        cached: list[float] | None = self.__dict__.get("_score_list")
        if cached is None:
            cached = self.score.tolist()
            self.__dict__["_score_list"] = cached
        return cached

    def segment_of(self, prep: Prepared, i: int) -> str | None:
        if self.status[i] not in INCLUDED or self.tokens_after[i] == 0:
            return None
        return self.segments.get(i, prep.items[i].segment)

    def count_status(self, code: int) -> int:
        return self.status.count(code) + (1 if code == KEPT and self.summary else 0)


def _fmt(n: int) -> str:
    return f"{n:,}"


def plan(prep: Prepared, kn: Knobs, summarizer: Summarizer, counter: TokenCounter) -> Plan:
    """Score, place must-keep items, filter, fill and degrade (see the module docstring)."""
    items = prep.items
    n = len(items)
    rec = prep.recency(kn.recency_tau_hours)
    score = (
        kn.relevance_weight * prep.relevance
        + kn.recency_weight * rec
        + kn.priority_weight * prep.priority
    )
    tok: list[int] = prep.tokens_list
    part: list[int] = prep.partition_list
    hdr = [prep.header_tokens[p] for p in PARTITIONS]
    caps = list(kn.caps)
    deg = Degrader(prep, summarizer, counter)
    status = [FILTERED] * n
    reason = [R_BELOW] * n
    tokens_after = [0] * n
    rank = [0] * n
    need = [0] * n
    room = [0] * n
    why = [0] * n
    segments: dict[int, str] = {}
    rungs: dict[int, str] = {}
    notes: dict[int, list[str]] = {}
    warnings: list[str] = []

    part_used = [0] * 6
    part_items = [0] * 6
    opened = [False] * 6
    for p, extra in ((TASK_I, prep.task_tokens), (OUTPUT_I, prep.output_tokens)):
        opened[p] = True
        part_used[p] = hdr[p] + extra
    fixed = part_used[TASK_I] + part_used[OUTPUT_I]
    left = kn.available - fixed
    budget_left = [left] * n
    if left < 0:
        raise BudgetError(
            f"the [Task] and [Output] blocks alone need {_fmt(fixed)} tokens but only "
            f"{_fmt(kn.available)} are available; raise max_tokens or lower output_reserve "
            "/ safety_margin"
        )

    # ---------------------------------------------------------------- must-keep
    mk = prep.must_keep_idx
    sizes = {i: tok[i] for i in mk}

    def mk_total() -> int:
        seen = {p for p in range(6) if opened[p]}
        total = 0
        for i in mk:
            p = part[i]
            total += sizes[i] + (0 if p in seen else hdr[p])
            seen.add(p)
        return total

    if mk and mk_total() > left:
        for rung in kn.degrade:
            kinds = RUNG_KINDS.get(rung)
            if kinds is None or mk_total() <= left:
                continue
            for i in sorted(mk, key=lambda j: -tok[j]):
                if items[i].kind in kinds and mk_total() > left:
                    seg, t = deg.item(i, rung)
                    if t < tok[i]:
                        sizes[i] = t
                        segments[i] = seg
                        rungs[i] = rung
        if mk_total() > left:
            names = ", ".join(
                f"{items[i].id} ({_fmt(sizes[i])}"
                + (f", summarized from {_fmt(tok[i])})" if i in rungs else ")")
                for i in mk
            )
            raise BudgetError(
                f"must-keep items alone need {_fmt(mk_total())} tokens but only {_fmt(left)} "
                f"are left (available {_fmt(kn.available)} minus {_fmt(fixed)} for [Task] and "
                f"[Output]): {names}. Raise max_tokens, lower output_reserve/safety_margin, or "
                "unset must_keep on some of them",
                packet_ids=[items[i].id for i in mk],
            )
    for i in mk:
        t = sizes[i]
        p = part[i]
        c = t if opened[p] else t + hdr[p]
        opened[p] = True
        part_used[p] += c
        part_items[p] += 1
        left -= c
        status[i] = SUMMARIZED if i in rungs else KEPT
        reason[i] = R_DEGRADED if i in rungs else R_MUST
        tokens_after[i] = t
        budget_left[i] = left
        if part_used[p] > caps[p]:
            notes.setdefault(i, []).append(
                f"over the {PARTITIONS[p]} cap of {_fmt(caps[p])} (must keep)"
            )
    over = [
        PARTITIONS[p]
        for p in range(6)
        if p not in (TASK_I, OUTPUT_I) and part_used[p] > caps[p] and mk
    ]
    if over:
        warnings.append(f"must-keep items exceed the partition budget of {', '.join(over)}")

    # ---------------------------------------------------------------- filter (numpy)
    noise = "noise" in kn.degrade
    is_mk = prep.is_must_keep
    old_mask = prep.is_history & (prep.history_pos < prep.n_history - kn.history_limit) & ~is_mk
    rest = ~is_mk & ~old_mask
    empty = rest & prep.is_empty if noise else np.zeros(n, dtype=bool)
    dup = rest & ~empty & prep.is_duplicate if noise else np.zeros(n, dtype=bool)
    query_empty = prep.query_terms.empty
    below = (
        rest
        & ~empty
        & ~dup
        & ~prep.is_history
        & (prep.has_caller_relevance | (not query_empty))
        & (prep.relevance < kn.min_relevance)
    )
    eligible = rest & ~empty & ~dup & ~below
    for mask, code in ((empty, R_EMPTY), (dup, R_DUP)):
        for i in np.flatnonzero(mask).tolist():
            reason[i] = code
    old = np.flatnonzero(old_mask).tolist()
    if query_empty:
        warnings.append(
            "the query has no searchable terms: relevance is 0 for every packet without a "
            "caller relevance, and min_relevance is not applied to them"
        )

    # ---------------------------------------------------------------- fill + degrade
    el = np.flatnonzero(eligible)
    order: list[int] = el[np.lexsort((el, -score[el]))].tolist() if el.size else []
    ladder = kn.degrade
    rung_of = prep.rungs_for(ladder)
    if old and "history" in ladder:
        # The summary of the old history competes like one more candidate, ranked by the
        # best score among the messages it folds.
        best = max(old, key=lambda j: (float(score[j]), -j))
        sb = score[best]
        se = score[el]
        pos = int(np.count_nonzero((se > sb) | ((se == sb) & (el < best))))
        order.insert(pos, -1)
    for r, i in enumerate(order, start=1):
        if i >= 0:
            rank[i] = r
    summary: Summary | None = None
    summary_need = 0
    stopped: str | None = None
    optimal = kn.fill == "optimal"
    brk = kn.fill == "break"
    chosen = (
        optimal_set(order, tok, part, hdr, opened, left, score, caps, part_used)
        if optimal
        else None
    )
    for phase in (0, 1) if optimal else (1,):
        for i in order:
            if chosen is not None and (phase == 0) != (i in chosen):
                continue
            if i == -1:
                if stopped is not None:
                    for j in old:
                        status[j], reason[j], budget_left[j] = DROPPED, R_AFTER_BREAK, left
                    continue
                seg, t, total = deg.history(old)
                c = t if opened[CONTEXT_I] else t + hdr[CONTEXT_I]
                if c <= left and part_used[CONTEXT_I] + c <= caps[CONTEXT_I]:
                    opened[CONTEXT_I] = True
                    part_used[CONTEXT_I] += c
                    part_items[CONTEXT_I] += 1
                    left -= c
                    summary = Summary(seg, t, total, old[0], left, order.index(-1) + 1)
                    for j in old:
                        status[j], reason[j], budget_left[j] = SUMMARIZED, R_DEGRADED, left
                        rungs[j] = "history"
                else:
                    summary_need = c
                    for j in old:
                        status[j], reason[j], budget_left[j] = DROPPED, R_HIST_LIMIT, left
                continue
            if stopped is not None:
                status[i], reason[i], budget_left[i] = DROPPED, R_AFTER_BREAK, left
                continue
            t = tok[i]
            p = part[i]
            c = t if opened[p] else t + hdr[p]
            if c <= left and part_used[p] + c <= caps[p]:
                opened[p] = True
                part_used[p] += c
                part_items[p] += 1
                left -= c
                status[i], reason[i], tokens_after[i], budget_left[i] = KEPT, R_FITS, t, left
                if phase == 1 and chosen is not None:
                    notes.setdefault(i, []).append(
                        "added after the knapsack, with the room it left"
                    )
                continue
            code = R_NO_ROOM if c > left else R_PART_FULL
            need[i] = c
            free = caps[p] - part_used[p]
            room[i] = free if free > 0 else 0
            budget_left[i] = left
            rung_i = rung_of[i]
            if rung_i is not None and left >= MIN_DEGRADED and room[i] >= MIN_DEGRADED:
                seg, t2 = deg.item(i, rung_i)
                c2 = t2 if opened[p] else t2 + hdr[p]
                if t2 < t and c2 <= left and part_used[p] + c2 <= caps[p]:
                    opened[p] = True
                    part_used[p] += c2
                    part_items[p] += 1
                    left -= c2
                    status[i] = TRUNCATED if rung_i == "recent" else SUMMARIZED
                    reason[i], tokens_after[i], budget_left[i], why[i] = (
                        R_DEGRADED,
                        t2,
                        left,
                        code,
                    )
                    segments[i] = seg
                    rungs[i] = rung_i
                    continue
                notes.setdefault(i, []).append(
                    f"{kn.label(rung_i)}: the shortened version needs {_fmt(c2)} tokens and "
                    "does not fit either"
                )
            status[i] = DROPPED
            reason[i] = R_NOT_OPT if chosen is not None else code
            if brk and code == R_NO_ROOM:
                stopped = items[i].id
    for j in old:
        if status[j] == FILTERED:  # the history rung is not in the ladder
            status[j], reason[j] = DROPPED, R_HIST_LIMIT
    return Plan(
        score=score,
        recency=rec,
        status=status,
        reason=reason,
        tokens_after=tokens_after,
        budget_left=budget_left,
        rank=rank,
        need=need,
        room=room,
        why=why,
        used=kn.available - left,
        part_used=part_used,
        part_items=part_items,
        must_keep=list(mk),
        segments=segments,
        rung=rungs,
        notes=notes,
        summary=summary,
        summary_need=summary_need,
        stopped_at=stopped,
        warnings=warnings,
    )
