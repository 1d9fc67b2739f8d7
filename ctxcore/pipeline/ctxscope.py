"""The ``ctxscope`` preset: our own best practice for assembling an agent's context.

budget = window − output reserve − safety margin; must-keep items first and never silently
lost; per-partition budgets; CJK-aware BM25 relevance that respects caller relevance; a fill
that skips what does not fit (or an ``optimal`` knapsack fill, or the seeds' ``break``);
the degradation ladder before any drop; all six partitions with headers and the ``[Output]``
block charged to the budget; every cut marked in the prompt (docs/design.md, "ctxscope" and
"Degradation ladder").

The stages live in their own modules — ``gather`` (candidates, exact counts, relevance),
``select`` (score, must-keep, filter, fill, degrade) with ``fill`` (the optimal knapsack) and
``degrade`` (summaries, outlines, shortened messages), ``structure`` (render, compress),
``reasons`` (the sentences) — and this module resolves the config, runs them in order and
writes the report: one decision per candidate with a reason code and a sentence a person
understands. ``sweep`` reuses the same stages for a grid of configs.

Config knobs: ``resolve`` fills every one with its default, declared with the knob in
``ctxcore.knobs`` (docs/design.md, "Knobs"), and derives ``max_tokens`` (the input's window,
else ``DEFAULT_WINDOW``), ``output_reserve`` (the input's, else reserve_ratio × max_tokens),
``safety_margin`` (2 % of max_tokens) and ``degrade`` (the whole ladder). The relevance,
recency and priority weights need not sum to 1; ``partition_budgets`` are caps as shares of
the available budget and may sum past 1; each signal weight (``current_turn_weight`` …
``lexical_weight``) adds ``weight × strength`` of its signal to the score (``signals``).
Fresh evidence — the latest error output and the result of the last tool call — is placed
right after the must-keep items, shortened by the ladder rather than dropped, and this turn's
tool results and whatever the user or the last step named are exempt from ``min_relevance``
(issue 13).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ctxcore.models import (
    PARTITIONS,
    BuildResult,
    CapturedInput,
    Config,
    Decision,
    PartitionUsage,
    Reason,
    Status,
    Totals,
    unvalidated,
)
from ctxcore.pipeline.common import Summarizer, Timer, finish
from ctxcore.pipeline.ctxscope_config import (
    DEFAULT_DEGRADE,
    DEFAULT_PARTITION_BUDGETS,
    NAME,
    VERSION,
    resolve,
)
from ctxcore.pipeline.degrade import history_content
from ctxcore.pipeline.gather import HISTORY_SUMMARY_ID, Item, Prepared, prepare
from ctxcore.pipeline.reasons import describe, describe_summary
from ctxcore.pipeline.select import REASONS, STATUSES, Knobs, Plan, plan
from ctxcore.pipeline.signals import SIGNALS, WEIGHT_KNOBS
from ctxcore.pipeline.signals import describe as describe_signals
from ctxcore.pipeline.structure import compress, render
from ctxcore.scoring import QueryTerms
from ctxcore.summarize import default_summarizer
from ctxcore.tokens import TokenCounter, is_exact


def knobs(config: Config) -> Knobs:
    """The numbers ``select.plan`` needs, from a resolved config."""
    assert config.max_tokens is not None and config.output_reserve is not None
    assert config.safety_margin is not None and config.partition_budgets is not None
    available = config.max_tokens - config.output_reserve - config.safety_margin
    return Knobs(
        available=available,
        min_relevance=float(config.min_relevance or 0.0),
        relevance_weight=float(config.relevance_weight or 0.0),
        recency_weight=float(config.recency_weight or 0.0),
        priority_weight=float(config.priority_weight or 0.0),
        recency_tau_hours=float(config.recency_tau_hours or 6.0),
        fill=config.fill or "skip",
        history_limit=int(config.history_limit if config.history_limit is not None else 20),
        caps=tuple(int(config.partition_budgets[p] * available) for p in PARTITIONS),
        degrade=tuple(config.degrade or ()),
        signal_weights=tuple(float(getattr(config, WEIGHT_KNOBS[s]) or 0.0) for s in SIGNALS),
    )


def _summarizer(input: CapturedInput, summarizer: Summarizer | None) -> Summarizer:
    if summarizer is not None:
        return summarizer
    return default_summarizer(QueryTerms.of(input.query).latin)


def _prefetch(kn: Knobs, summarizer: Summarizer) -> Callable[[list[Item]], None] | None:
    """While gather counts tokens: let the summarizer read the history that is beyond the
    history limit (the history rung summarizes exactly those messages)."""
    prefetch = getattr(summarizer, "prefetch", None)
    if prefetch is None or "history" not in kn.degrade:
        return None

    def run(items: list[Item]) -> None:
        history = [it for it in items if it.history_pos is not None]
        old = history[: max(len(history) - kn.history_limit, 0)]
        if old:
            prefetch("history", history_content(old))

    return run


def _item_notes(prep: Prepared) -> list[tuple[str, ...]]:
    """The notes of each item's decision that depend only on the input (made once)."""
    cached: list[tuple[str, ...]] | None = prep.__dict__.get("_item_notes")
    if cached is None:
        cached = []
        for it in prep.items:
            notes: list[str] = []
            if it.caller_relevance is not None:
                notes.append(f"caller relevance {it.caller_relevance:g} used")
            if it.no_timestamp and not it.builder_made:
                notes.append("no timestamp: recency 0.5")
            if it.raw_tokens is not None and it.raw_tokens != it.tokens:
                notes.append(
                    f"caller said {it.raw_tokens:,} tokens; {prep.tokenizer} counts "
                    f"{it.tokens:,} for the rendered item"
                )
            cached.append(tuple(notes))
        prep.__dict__["_item_notes"] = cached
    return cached


def _decisions(prep: Prepared, pl: Plan, kn: Knobs, reasons: bool = True) -> list[Decision]:
    out: list[Decision] = []
    items = prep.items
    n = len(items)
    rel = np.round(prep.relevance, 4).tolist()
    rec = np.round(pl.recency, 4).tolist()
    sc = np.round(pl.score, 4).tolist()
    status = [STATUSES[c] for c in pl.status]
    reason = [REASONS[c] for c in pl.reason]
    texts = [describe(prep, pl, kn, i) for i in range(n)] if reasons else [""] * n
    base_notes = _item_notes(prep) if reasons else [()] * n
    sig_notes: list[list[str]] = [[] for _ in range(n)]
    if reasons and prep.signals.strength.any():
        for i in np.flatnonzero(prep.signals.strength.any(axis=1)).tolist():
            suffix, notes = describe_signals(prep.signals, i, kn.signal_weights)
            texts[i] += suffix
            sig_notes[i] = notes
    plan_notes = pl.notes if reasons else {}
    rank, tokens_after, budget_left = pl.rank, pl.tokens_after, pl.budget_left
    summary = pl.summary
    at = summary.index if summary is not None else -1
    for i, it in enumerate(items):
        if i == at:
            assert summary is not None
            out.append(
                _decision(
                    {
                        "packet_id": HISTORY_SUMMARY_ID,
                        "kind": "summary",
                        "status": Status.KEPT,
                        "reason": Reason.DEGRADED,
                        "reason_text": describe_summary(pl, kn) if reasons else "",
                        "partition": "[Context]",
                        "relevance": None,
                        "recency": None,
                        "score": None,
                        "rank": summary.rank,
                        "tokens_before": summary.tokens_before,
                        "tokens_after": summary.tokens,
                        "budget_left": summary.budget_left,
                        "notes": [],
                    }
                )
            )
        extra = plan_notes.get(i)
        base = base_notes[i]
        out.append(
            _decision(
                {
                    "packet_id": it.id,
                    "kind": it.kind,
                    "status": status[i],
                    "reason": reason[i],
                    "reason_text": texts[i],
                    "partition": it.partition,
                    "relevance": rel[i],
                    "recency": rec[i],
                    "score": sc[i],
                    "rank": rank[i] or None,
                    "tokens_before": it.tokens,
                    "tokens_after": tokens_after[i],
                    "budget_left": budget_left[i],
                    "notes": [*(extra or ()), *base, *sig_notes[i]],
                }
            )
        )
    return out


def _decision(values: dict[str, Any]) -> Decision:
    """A ``Decision`` without re-validation: every value here is built by this module.

    ``model_construct`` costs ~10 µs per call, too much for 1,000 decisions in a 20 ms
    re-run; this sets the same internals directly (a test checks the result equals a
    validated ``Decision``).
    """
    return unvalidated(Decision, values)


def _drift_warning(prep: Prepared) -> list[str]:
    worst = None
    for it in prep.items:
        if it.raw_tokens and it.tokens:
            d = abs(it.raw_tokens - it.tokens) / it.tokens
            if d > 0.2 and (worst is None or d > worst[0]):
                worst = (d, it.id)
    if worst is None:
        return []
    return [
        f"caller-supplied token counts differ from {prep.tokenizer} by up to "
        f"{worst[0]:.0%} ({worst[1]}); the real counts are used"
    ]


@dataclass(frozen=True)
class Outcome:
    """What a build decided, without its prompt or its decisions' models: per decision, in
    the order ``run`` lists them (the history summary before the oldest message it folds),
    the packet id, status and score (rounded as a ``Decision`` holds it), and the tokens used.

    For re-runs that compare which packets get in (the optimal-fill check of
    ``diagnostics.greedy_waste``): the plan alone, without rendering the prompt or making
    ~100 ``Decision`` models, is about half a re-run."""

    ids: list[str]
    statuses: list[Status]
    scores: list[float | None]
    used: int
    prompt: str | None = None  # with ``outcome(..., prompt=True)``


def outcome(
    input: CapturedInput, config: Config, counter: TokenCounter, *, prompt: bool = False
) -> Outcome:
    """``run``'s decisions as an ``Outcome`` (``config`` resolved, ``counter`` exact: an
    estimator's prompt is compressed after the plan, which may change what it holds), and
    with ``prompt``, ``run``'s prompt (for the reproduction check of the diagnostics)."""
    if not is_exact(counter.name):
        raise ValueError(f"outcome() needs an exact tokenizer, not {counter.name}")
    kn = knobs(config)
    summ = _summarizer(input, None)
    prep = prepare(input, counter, meanwhile=_prefetch(kn, summ))
    pl = plan(prep, kn, summ, counter)
    sc = np.round(pl.score, 4).tolist()
    at = pl.summary.index if pl.summary is not None else -1
    ids: list[str] = []
    statuses: list[Status] = []
    scores: list[float | None] = []
    for i, it in enumerate(prep.items):
        if i == at:
            ids.append(HISTORY_SUMMARY_ID)
            statuses.append(Status.KEPT)
            scores.append(None)
        ids.append(it.id)
        statuses.append(STATUSES[pl.status[i]])
        scores.append(sc[i])
    return Outcome(ids, statuses, scores, pl.used, render(prep, pl) if prompt else None)


def run(
    input: CapturedInput,
    config: Config,
    counter: TokenCounter,
    summarizer: Summarizer | None = None,
    *,
    reasons: bool = True,
) -> BuildResult:
    """gather → score/select/degrade → structure → compress → report.

    ``reasons=False`` leaves every decision's ``reason_text`` empty and its ``notes`` out,
    and so the report's ``reasons`` (the sentences are a third of a re-run's time), for
    callers that read only the statuses, scores, prompt and totals: the detectors' re-runs
    (``ctxcore.diagnostics``).
    """
    timer = Timer()
    kn = knobs(config)
    summ = _summarizer(input, summarizer)
    with timer.stage("gather"):
        prep = prepare(input, counter, meanwhile=_prefetch(kn, summ))
    with timer.stage("select"):
        pl = plan(prep, kn, summ, counter)
    with timer.stage("structure"):
        prompt = render(prep, pl)
    warnings = list(pl.warnings) + _drift_warning(prep)
    with timer.stage("compress"):
        used = pl.used
        if not is_exact(counter.name):
            if config.enable_compression:
                prompt, used = compress(prep, pl, prompt, kn.available, counter)
            else:
                used = counter.count(prompt)
            if used > kn.available:
                warnings.append(
                    f"the {counter.name} estimate of the prompt is {used:,} tokens, over the "
                    f"{kn.available:,} available"
                )
    with timer.stage("describe"):
        decisions = _decisions(prep, pl, kn, reasons)
    assert config.max_tokens is not None and config.output_reserve is not None
    assert config.safety_margin is not None
    totals = Totals(
        window=config.max_tokens,
        output_reserve=config.output_reserve,
        safety_margin=config.safety_margin,
        available=kn.available,
        used=used,
        tokenizer=counter.name,
    )
    partitions = [
        PartitionUsage(name=name, budget=kn.caps[p], used=pl.part_used[p], items=pl.part_items[p])
        for p, name in enumerate(PARTITIONS)
    ]
    must_ids = [prep.items[i].id for i in pl.must_keep]
    if is_exact(counter.name):
        assert used <= kn.available
    return finish(
        prompt=prompt,
        decisions=decisions,
        partitions=partitions,
        totals=totals,
        must_keep_ids=must_ids,
        warnings=warnings,
        timer=timer,
    )


__all__ = [
    "DEFAULT_DEGRADE",
    "DEFAULT_PARTITION_BUDGETS",
    "NAME",
    "VERSION",
    "Outcome",
    "knobs",
    "outcome",
    "resolve",
    "run",
]
