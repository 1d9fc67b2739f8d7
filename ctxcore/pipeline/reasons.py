"""The sentences people read in a ``ctxscope`` build's decisions.

A ``Plan`` holds codes and numbers (cheap for a 400-cell sweep); ``describe`` turns one
item's codes into the reason text of its decision — "needs 812 tokens, 120 left", "tool
log summarized to 410 tokens (degrade step 3: tool_results)" — only when a build reports.
"""

from __future__ import annotations

from ctxcore.pipeline.gather import HISTORY_SUMMARY_ID, PARTITION_INDEX, Prepared
from ctxcore.pipeline.select import (
    R_AFTER_BREAK,
    R_BELOW,
    R_DEGRADED,
    R_DUP,
    R_EMPTY,
    R_FITS,
    R_HIST_LIMIT,
    R_MUST,
    R_NO_ROOM,
    R_NOT_OPT,
    R_PART_FULL,
    R_REMOVED,
    REASONS,
    RUNG_WORDS,
    Knobs,
    Plan,
)


def _fmt(n: int) -> str:
    return f"{n:,}"


def describe(prep: Prepared, pl: Plan, kn: Knobs, i: int) -> str:
    """The sentence a person reads for item ``i``'s decision."""
    it = prep.items[i]
    r = pl.reason[i]
    if r == R_MUST:
        return f"must keep ({it.must_keep}); {_fmt(pl.tokens_after[i])} tokens placed first"
    if r == R_FITS:
        return (
            f"rank {pl.rank[i]}, score {pl.score_list[i]:.3f}: {_fmt(pl.tokens_after[i])} tokens "
            f"fit, {_fmt(pl.budget_left[i])} left"
        )
    if r == R_BELOW:
        src = "caller relevance" if it.caller_relevance is not None else "relevance"
        return f"{src} {prep.relevance_list[i]:.3f} is below min_relevance {kn.min_relevance:g}"
    if r == R_EMPTY:
        return f"no content (noise; {kn.label('noise')})"
    if r == R_DUP:
        return f"same content as {it.duplicate_of} (noise; {kn.label('noise')})"
    if r == R_HIST_LIMIT:
        base = f"older than the last {kn.history_limit} messages (history_limit)"
        if pl.summary_need:
            base += (
                f"; their summary needs {_fmt(pl.summary_need)} tokens, "
                f"{_fmt(pl.budget_left[i])} left"
            )
        return base
    if r == R_AFTER_BREAK:
        return f"the fill stopped at {pl.stopped_at} (break mode)"
    if r in (R_NO_ROOM, R_PART_FULL, R_NOT_OPT) or (r == R_DEGRADED and pl.why[i]):
        code = pl.why[i] if r == R_DEGRADED else r
        if code == R_NOT_OPT:
            code = R_NO_ROOM if pl.need[i] > pl.budget_left[i] else R_PART_FULL
        if code == R_PART_FULL:
            cap = kn.caps[PARTITION_INDEX[it.partition]]
            text = (
                f"needs {_fmt(pl.need[i])} tokens; {it.partition} has {_fmt(pl.room[i])} of "
                f"its {_fmt(cap)} left"
            )
        else:
            left_then = pl.budget_left[i] + (pl.tokens_after[i] if r == R_DEGRADED else 0)
            text = f"needs {_fmt(pl.need[i])} tokens, {_fmt(left_then)} left"
        if r == R_NOT_OPT:
            return f"not in the score-maximizing set; {text}"
        if r == R_DEGRADED:
            rung = pl.rung[i]
            return (
                f"{text}; {RUNG_WORDS[rung]} to {_fmt(pl.tokens_after[i])} tokens "
                f"({kn.label(rung)})"
            )
        return text
    if r == R_DEGRADED:
        rung = pl.rung.get(i, "")
        if rung == "history":
            return (
                f"older than the last {kn.history_limit} messages; folded into "
                f"{HISTORY_SUMMARY_ID} ({kn.label('history')})"
            )
        return (
            f"must keep ({it.must_keep}), but the must-keep items overflow: "
            f"{RUNG_WORDS.get(rung, rung)} from {_fmt(it.tokens)} to "
            f"{_fmt(pl.tokens_after[i])} tokens ({kn.label(rung)})"
        )
    if r == R_REMOVED:
        return "removed by the last-resort compress (the estimated prompt was over budget)"
    return REASONS[r].value


def describe_summary(pl: Plan, kn: Knobs) -> str:
    s = pl.summary
    assert s is not None
    return (
        f"structured summary of the messages older than the last {kn.history_limit} "
        f"({_fmt(s.tokens_before)} tokens → {_fmt(s.tokens)}; {kn.label('history')})"
    )
