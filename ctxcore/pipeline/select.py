"""Select and degrade for the ``ctxscope`` preset: who gets in, at what size, and why.

``plan(prepared, knobs, summarizer, counter)`` is the whole decision core, shared by
``build`` and by the sweep (which calls it for each grid cell without rendering a prompt):

1. score — ``relevance_weight × relevance + recency_weight × recency + priority_weight ×
   priority`` plus ``Σ weight × strength`` of the signals (``signals``) over numpy arrays;
2. must-keep first — instructions, tool definitions, the current task, packets marked
   ``must_keep``, explicit constraints, the active plan, the latest failure. If they alone
   overflow, the tool logs/files/repo maps among them are summarized, rung by rung in the
   ladder's order, stopping as soon as they fit; if that is not enough, ``BudgetError``
   names every one of them with its size;
   Then the floor: fresh evidence (the latest error output, the result of the last tool
   call) is placed ahead of the ranked fill, shortened by its rung if it does not fit whole;
3. filter (numpy masks) — empty and duplicate content (the ladder's ``noise`` rung: packets
   already judged noise are dropped first), relevance below ``min_relevance`` (history
   messages are exempt: they are ranked, not filtered, and so are this turn's tool results
   and what the user or the last step named; the word-match signal counts as relevance
   here), history older than ``history_limit``;
4. fill — by score, within the global budget and each partition's cap: ``skip`` keeps
   trying smaller items, ``break`` stops at the first that does not fit (the seeds' fill,
   for comparison), ``optimal`` maximises the total score (0/1 knapsack, ``fill.optimal_set``);
5. degrade — before an item that does not fit is dropped, its rung of the ladder shrinks it
   (tool logs → summaries, files → outlines, repo maps → compact trees, recent messages →
   shortened); the old history beyond ``history_limit`` competes as one structured summary.
   A degraded version is made once per input and memoised, so it costs nothing in a sweep.

Each step is a function of its own (``_score``, ``_place_must_keep``, ``_filter``,
``_rank``, ``_fill``) writing into one ``Plan``. The result is plain per-item codes and
numbers (cheap enough for 400 sweep cells); the sentences people read are written from them
by ``reasons.describe`` only when a build reports. Every placement is charged to a
``Budget`` per rendered segment, headers included, which for tiktoken encodings is exactly
the token count of the final prompt (see ``gather`` and ``budget``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ctxcore.errors import BudgetError
from ctxcore.models import PARTITIONS, Reason, Status
from ctxcore.pipeline.budget import Budget
from ctxcore.pipeline.common import Summarizer
from ctxcore.pipeline.degrade import Degrader
from ctxcore.pipeline.fill import optimal_set
from ctxcore.pipeline.gather import PARTITION_INDEX, Prepared
from ctxcore.pipeline.signals import SIGNALS, weighted
from ctxcore.summarize import FILE_KINDS, REPO_MAP_KINDS, TOOL_KINDS
from ctxcore.tokens import TokenCounter

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
    #: one weight per signal, in ``signals.SIGNALS`` order
    signal_weights: tuple[float, ...] = (0.0,) * len(SIGNALS)

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
    must_keep: list[int]
    used: int = 0
    part_used: list[int] = field(default_factory=list)
    part_items: list[int] = field(default_factory=list)
    segments: dict[int, str] = field(default_factory=dict)  # degraded segments
    rung: dict[int, str] = field(default_factory=dict)
    notes: dict[int, list[str]] = field(default_factory=dict)
    summary: Summary | None = None
    summary_need: int = 0  # tokens the history summary needed when it did not fit
    stopped_at: str | None = None  # break mode: the item the fill stopped at
    floor: list[int] = field(default_factory=list)  # fresh evidence placed before the fill
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


#: the place of the old history's summary in the fill order (item indexes are ≥ 0)
SUMMARY_SLOT = -1


def plan(prep: Prepared, kn: Knobs, summarizer: Summarizer, counter: TokenCounter) -> Plan:
    """Score, place must-keep items, filter, fill and degrade (see the module docstring)."""
    score, recency = _score(prep, kn)
    budget = _open_budget(prep, kn)
    pl = _empty_plan(prep, score, recency, budget.left)
    deg = Degrader(prep, summarizer, counter)
    _place_must_keep(prep, kn, pl, budget, deg)
    _place_floor(prep, kn, pl, budget, deg)
    eligible, old = _filter(prep, kn, pl)
    order = _rank(prep, kn, pl, eligible, old)
    _fill(prep, kn, pl, budget, deg, order, old)
    for j in old:
        if pl.status[j] == FILTERED:  # the history rung is not in the ladder
            pl.status[j], pl.reason[j] = DROPPED, R_HIST_LIMIT
    pl.used = kn.available - budget.left
    pl.part_used = budget.used
    pl.part_items = budget.items
    return pl


def _score(prep: Prepared, kn: Knobs) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The weighted score of every item, and the recency it used."""
    recency = prep.recency(kn.recency_tau_hours)
    score = (
        kn.relevance_weight * prep.relevance
        + kn.recency_weight * recency
        + kn.priority_weight * prep.priority
    )
    if any(kn.signal_weights):
        score = score + weighted(prep.signals.strength, kn.signal_weights)
    return score, recency


def _open_budget(prep: Prepared, kn: Knobs) -> Budget:
    """The budget with [Task] and [Output] charged (they are always in the prompt)."""
    budget = Budget(kn.available, list(kn.caps), [prep.header_tokens[p] for p in PARTITIONS])
    budget.reserve(prep.task_tokens, TASK_I)
    budget.reserve(prep.output_tokens, OUTPUT_I)
    if budget.left < 0:
        fixed = kn.available - budget.left
        raise BudgetError(
            f"the [Task] and [Output] blocks alone need {_fmt(fixed)} tokens but only "
            f"{_fmt(kn.available)} are available; raise max_tokens or lower output_reserve "
            "/ safety_margin"
        )
    return budget


def _empty_plan(
    prep: Prepared,
    score: npt.NDArray[np.float64],
    recency: npt.NDArray[np.float64],
    left: int,
) -> Plan:
    """Every item filtered until a step says otherwise."""
    n = len(prep.items)
    return Plan(
        score=score,
        recency=recency,
        status=[FILTERED] * n,
        reason=[R_BELOW] * n,
        tokens_after=[0] * n,
        budget_left=[left] * n,
        rank=[0] * n,
        need=[0] * n,
        room=[0] * n,
        why=[0] * n,
        must_keep=list(prep.must_keep_idx),
    )


# --------------------------------------------------------------------------- must-keep


def _place_must_keep(prep: Prepared, kn: Knobs, pl: Plan, budget: Budget, deg: Degrader) -> None:
    """Place every must-keep item, shrunk by the ladder if they overflow together."""
    mk = pl.must_keep
    if not mk:
        return
    part = prep.partition_list
    sizes = {i: prep.tokens_list[i] for i in mk}
    if _must_keep_cost(mk, sizes, part, budget) > budget.left:
        _shrink_must_keep(prep, kn, pl, budget, deg, sizes)
    for i in mk:
        p = part[i]
        left = budget.charge(sizes[i], p)
        shrunk = i in pl.rung
        pl.status[i] = SUMMARIZED if shrunk else KEPT
        pl.reason[i] = R_DEGRADED if shrunk else R_MUST
        pl.tokens_after[i] = sizes[i]
        pl.budget_left[i] = left
        if budget.over_cap(p):
            pl.notes.setdefault(i, []).append(
                f"over the {PARTITIONS[p]} cap of {_fmt(budget.caps[p])} (must keep)"
            )
    over = [
        PARTITIONS[p]
        for p in range(len(PARTITIONS))
        if p not in (TASK_I, OUTPUT_I) and budget.over_cap(p)
    ]
    if over:
        pl.warnings.append(f"must-keep items exceed the partition budget of {', '.join(over)}")


def _must_keep_cost(mk: list[int], sizes: dict[int, int], part: list[int], budget: Budget) -> int:
    return budget.cost_of((sizes[i], part[i]) for i in mk)


def _shrink_must_keep(
    prep: Prepared,
    kn: Knobs,
    pl: Plan,
    budget: Budget,
    deg: Degrader,
    sizes: dict[int, int],
) -> None:
    """Degrade must-keep tool logs/files/repo maps, rung by rung and largest first, until
    they fit; ``BudgetError`` naming every must-keep item if they still do not."""
    items, tok, part, mk = prep.items, prep.tokens_list, prep.partition_list, pl.must_keep
    left = budget.left

    def too_big() -> bool:
        return _must_keep_cost(mk, sizes, part, budget) > left

    for rung in kn.degrade:
        kinds = RUNG_KINDS.get(rung)
        if kinds is None or not too_big():
            continue
        for i in sorted(mk, key=lambda j: -tok[j]):
            if items[i].kind in kinds and too_big():
                seg, t = deg.item(i, rung)
                if t < tok[i]:
                    sizes[i] = t
                    pl.segments[i] = seg
                    pl.rung[i] = rung
    if too_big():
        fixed = kn.available - left
        names = ", ".join(
            f"{items[i].id} ({_fmt(sizes[i])}"
            + (f", summarized from {_fmt(tok[i])})" if i in pl.rung else ")")
            for i in mk
        )
        raise BudgetError(
            f"must-keep items alone need {_fmt(_must_keep_cost(mk, sizes, part, budget))} "
            f"tokens but only {_fmt(left)} are left (available {_fmt(kn.available)} minus "
            f"{_fmt(fixed)} for [Task] and [Output]): {names}. Raise max_tokens, lower "
            "output_reserve/safety_margin, or unset must_keep on some of them",
            packet_ids=[items[i].id for i in mk],
        )


# --------------------------------------------------------------------------- floor


def _place_floor(prep: Prepared, kn: Knobs, pl: Plan, budget: Budget, deg: Degrader) -> None:
    """Fresh evidence — the latest error output and the result of the last tool call — is
    placed right after the must-keep items, ahead of the ranked fill, so nothing ranked
    higher can crowd it out; when it does not fit whole, its rung of the ladder shrinks it
    (a tool log keeps its error lines verbatim and points at the rest). Only if even that
    does not fit is it left to the fill, which drops it with the usual reason
    (docs/design.md, "Degradation ladder")."""
    rung_of = prep.rungs_for(kn.degrade)
    tok, part = prep.tokens_list, prep.partition_list
    for i in prep.signals.floor:
        if pl.status[i] != FILTERED or prep.is_empty[i] or prep.is_duplicate[i]:
            continue  # must-keep already placed it, or it is noise (the original competes)
        t, p = tok[i], part[i]
        note = "fresh evidence: placed ahead of the ranked fill"
        if budget.fits(t, p):
            pl.status[i], pl.reason[i], pl.tokens_after[i] = KEPT, R_FITS, t
            pl.budget_left[i] = budget.charge(t, p)
        else:
            cost, left = t + budget.due[p], budget.left
            code = R_NO_ROOM if cost > left else R_PART_FULL
            rung = rung_of[i]
            pl.need[i], pl.room[i] = cost, max(budget.free[p], 0)
            if rung is None or not _place_degraded(kn, pl, budget, deg, i, t, p, rung, code):
                pl.notes.setdefault(i, []).append(
                    "fresh evidence, but neither it nor its shortened version fits: left to "
                    "the ranked fill"
                )
                continue
            note += ", shortened rather than dropped (error lines kept verbatim)"
        pl.floor.append(i)
        pl.rank[i] = len(pl.floor)
        pl.notes.setdefault(i, []).append(note)


# --------------------------------------------------------------------------- filter


def _filter(prep: Prepared, kn: Knobs, pl: Plan) -> tuple[npt.NDArray[np.intp], list[int]]:
    """Which items compete for the rest of the budget, and the history beyond the limit.

    Empty and duplicate items are noise (when the ladder has that rung); relevance below
    ``min_relevance`` filters everything but history messages (they are ranked, not
    filtered) and packets scored without query terms or a caller relevance."""
    n = len(prep.items)
    noise = "noise" in kn.degrade
    is_mk = prep.is_must_keep
    old_mask = prep.is_history & (prep.history_pos < prep.n_history - kn.history_limit) & ~is_mk
    placed = np.zeros(n, dtype=bool)
    placed[pl.floor] = True
    rest = ~is_mk & ~old_mask & ~placed
    empty = rest & prep.is_empty if noise else np.zeros(n, dtype=bool)
    dup = rest & ~empty & prep.is_duplicate if noise else np.zeros(n, dtype=bool)
    query_empty = prep.query_terms.empty
    below = (
        rest
        & ~empty
        & ~dup
        & ~prep.is_history
        & (prep.has_caller_relevance | (not query_empty))
        & (np.maximum(prep.relevance, prep.signals.lexical) < kn.min_relevance)
        & ~prep.signals.exempt
    )
    for mask, code in ((empty, R_EMPTY), (dup, R_DUP)):
        for i in np.flatnonzero(mask).tolist():
            pl.reason[i] = code
    if query_empty:
        pl.warnings.append(
            "the query has no searchable terms: relevance is 0 for every packet without a "
            "caller relevance, and min_relevance is not applied to them"
        )
    eligible = np.flatnonzero(rest & ~empty & ~dup & ~below)
    return eligible, np.flatnonzero(old_mask).tolist()


def _rank(
    prep: Prepared, kn: Knobs, pl: Plan, eligible: npt.NDArray[np.intp], old: list[int]
) -> list[int]:
    """The fill order: eligible items by score (ties by gather order), with the old
    history's summary (``SUMMARY_SLOT``) ranked by the best score among the messages it
    folds. Sets each item's rank."""
    score, el = pl.score, eligible
    order: list[int] = el[np.lexsort((el, -score[el]))].tolist() if el.size else []
    if old and "history" in kn.degrade:
        best = max(old, key=lambda j: (float(score[j]), -j))
        sb = score[best]
        se = score[el]
        order.insert(int(np.count_nonzero((se > sb) | ((se == sb) & (el < best)))), SUMMARY_SLOT)
    rank = pl.rank
    for r, i in enumerate(order, start=len(pl.floor) + 1):
        if i >= 0:
            rank[i] = r
    return order


# --------------------------------------------------------------------------- fill + degrade


def _fill(
    prep: Prepared,
    kn: Knobs,
    pl: Plan,
    budget: Budget,
    deg: Degrader,
    order: list[int],
    old: list[int],
) -> None:
    """Place items in ``order`` while they fit; shrink or drop the ones that do not.

    ``optimal`` places the knapsack's set first, then gives what it left to the others in
    order; ``break`` turns every item after the first that overflows the budget away.

    This loop runs for every candidate of every sweep cell, so the per-item lists are
    locals and the test is ``Budget.fits`` written out (a method call per candidate made
    ``plan`` a third slower); everything it places still goes through ``budget.charge``."""
    items, tok, part = prep.items, prep.tokens_list, prep.partition_list
    status, reason, tokens_after = pl.status, pl.reason, pl.tokens_after
    budget_left, need, room = pl.budget_left, pl.need, pl.room
    due, free, charge = budget.due, budget.free, budget.charge
    rung_of = prep.rungs_for(kn.degrade)
    optimal = kn.fill == "optimal"
    brk = kn.fill == "break"
    chosen = optimal_set(order, tok, part, pl.score, budget) if optimal else None
    for phase in (0, 1) if chosen is not None else (1,):
        for i in order:
            if chosen is not None and (phase == 0) != (i in chosen):
                continue
            if i == SUMMARY_SLOT:
                _place_history_summary(pl, budget, deg, order, old)
                continue
            if pl.stopped_at is not None:
                status[i], reason[i], budget_left[i] = DROPPED, R_AFTER_BREAK, budget.left
                continue
            t, p = tok[i], part[i]
            cost = t + due[p]
            left = budget.left
            if cost <= left and cost <= free[p]:
                status[i], reason[i], tokens_after[i] = KEPT, R_FITS, t
                budget_left[i] = charge(t, p)
                if phase == 1 and chosen is not None:
                    pl.notes.setdefault(i, []).append(
                        "added after the knapsack, with the room it left"
                    )
                continue
            # turned away: by the whole budget or by its partition's cap
            code = R_NO_ROOM if cost > left else R_PART_FULL
            need[i], budget_left[i] = cost, left
            room[i] = cap_left = free[p] if free[p] > 0 else 0
            rung = rung_of[i]
            if (
                rung is not None
                and left >= MIN_DEGRADED
                and cap_left >= MIN_DEGRADED
                and _place_degraded(kn, pl, budget, deg, i, t, p, rung, code)
            ):
                continue
            status[i] = DROPPED
            reason[i] = R_NOT_OPT if optimal else code
            if brk and code == R_NO_ROOM:
                pl.stopped_at = items[i].id


def _place_degraded(
    kn: Knobs,
    pl: Plan,
    budget: Budget,
    deg: Degrader,
    i: int,
    full: int,
    partition: int,
    rung: str,
    why: int,
) -> bool:
    """Place the shortened version of item ``i`` (``full`` tokens, turned away for ``why``)
    that ``rung`` makes, if it is smaller and fits; else note what it needed and return
    False."""
    seg, tokens = deg.item(i, rung)
    if tokens < full and budget.fits(tokens, partition):
        pl.status[i] = TRUNCATED if rung == "recent" else SUMMARIZED
        pl.reason[i], pl.tokens_after[i], pl.why[i] = R_DEGRADED, tokens, why
        pl.budget_left[i] = budget.charge(tokens, partition)
        pl.segments[i] = seg
        pl.rung[i] = rung
        return True
    pl.notes.setdefault(i, []).append(
        f"{kn.label(rung)}: the shortened version needs {budget.cost(tokens, partition):,} "
        "tokens and does not fit either"
    )
    return False


def _place_history_summary(
    pl: Plan, budget: Budget, deg: Degrader, order: list[int], old: list[int]
) -> None:
    """The old history competes as one structured summary in [Context]."""
    status, reason, budget_left = pl.status, pl.reason, pl.budget_left
    if pl.stopped_at is not None:
        for j in old:
            status[j], reason[j], budget_left[j] = DROPPED, R_AFTER_BREAK, budget.left
        return
    seg, t, total = deg.history(old)
    if budget.fits(t, CONTEXT_I):
        left = budget.charge(t, CONTEXT_I)
        pl.summary = Summary(seg, t, total, old[0], left, order.index(SUMMARY_SLOT) + 1)
        for j in old:
            status[j], reason[j], budget_left[j] = SUMMARIZED, R_DEGRADED, left
            pl.rung[j] = "history"
    else:
        pl.summary_need = budget.cost(t, CONTEXT_I)
        for j in old:
            status[j], reason[j], budget_left[j] = DROPPED, R_HIST_LIMIT, budget.left
