"""The ``optimal`` fill of the ``ctxscope`` preset: maximise the total score under the budget.

A 0/1 knapsack by dynamic programming (numpy over a capacity grid of at most 4,000 cells),
checked against the partition caps by simulating the placement, and never worse than the
``skip`` fill (both sets are simulated and the better one wins). It exists so that an
engineer can see how far the greedy fill is from the best possible choice.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from ctxcore.pipeline.budget import Budget


def knapsack(values: list[float], weights: list[int], capacity: int) -> list[int]:
    """0/1 knapsack by dynamic programming over a capacity grid of at most 4,000 cells.

    Weights are rounded *up* to the grid, so every chosen set really fits; the loss is at
    most one grid cell per item (exact when capacity ≤ 4,000 tokens).
    """
    if capacity <= 0 or not values:
        return []
    g = max(1, math.ceil(capacity / 4000))
    cap = capacity // g
    w = [math.ceil(x / g) for x in weights]
    dp = np.zeros(cap + 1, dtype=np.float64)
    take = np.zeros((len(values), cap + 1), dtype=bool)
    buf = np.empty(cap + 1, dtype=np.float64)
    for k, (v, wk) in enumerate(zip(values, w, strict=True)):
        if v <= 0 or wk > cap:
            continue
        # in place (no array made per item, a third of the time): the maximum is the
        # candidate exactly where it is greater, so dp and take are what np.where gave
        cand = np.add(dp[: cap + 1 - wk], v, out=buf[: cap + 1 - wk])
        row = dp[wk:]
        np.greater(cand, row, out=take[k, wk:])
        np.maximum(row, cand, out=row)
    chosen: list[int] = []
    c = int(np.argmax(dp))
    for k in range(len(values) - 1, -1, -1):
        if take[k, c]:
            chosen.append(k)
            c -= w[k]
    return chosen[::-1]


def optimal_set(
    order: list[int],
    tok: list[int],
    part: list[int],
    score: npt.NDArray[np.float64],
    budget: Budget,
) -> set[int]:
    """The set that maximises total score, never worse than the skip fill's set.

    Headers of partitions not yet opened are reserved up front (a slight under-use of the
    budget, never an overflow). Partition caps are enforced by simulating the placement on
    a copy of ``budget``; the skip fill's set is simulated too and the better of the two is
    returned.
    """
    order = [i for i in order if i >= 0]
    hdr_cost = budget.unopened_headers(part[i] for i in order)
    cands = [i for i in order if score[i] > 0]
    picked = knapsack(
        [float(score[i]) for i in cands], [tok[i] for i in cands], budget.left - hdr_cost
    )
    dp_set = [cands[k] for k in picked]

    def simulate(candidates: list[int]) -> tuple[float, set[int]]:
        trial = budget.copy()
        kept: set[int] = set()
        total = 0.0
        for i in candidates:
            if trial.fits(tok[i], part[i]):
                trial.charge(tok[i], part[i])
                kept.add(i)
                total += float(score[i])
        return total, kept

    pos = {i: r for r, i in enumerate(order)}
    dp_total, dp_kept = simulate(sorted(dp_set, key=pos.__getitem__))
    skip_total, skip_kept = simulate(order)
    return dp_kept if dp_total >= skip_total else skip_kept
