"""The optimal fill a greedy builder is measured against: a 0/1 knapsack over the budget.

Greedy fills (``break`` at the first packet that does not fit, or ``skip`` it and keep
trying) are what the seed builders do; the question an engineer asks is how much better
the same candidates could have been packed. This solves the exact knapsack (maximize the
summed score under the token budget) by dynamic programming over token counts with numpy,
and coarsens the token unit only when the table would exceed ``max_cells`` (then weights
are rounded *up*, so the answer still fits the real budget).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class KnapsackResult:
    chosen: tuple[int, ...]  # indices into the items, ascending
    value: float
    weight: int
    unit: int  # tokens per DP cell (1 = exact)


def knapsack(
    weights: Sequence[int],
    values: Sequence[float],
    capacity: int,
    max_cells: int = 20_000_000,
) -> KnapsackResult:
    """The subset of items with the largest total value whose weights sum to ≤ capacity."""
    n = len(weights)
    capacity = max(int(capacity), 0)
    free = [i for i in range(n) if weights[i] <= 0 and values[i] > 0]
    items = [i for i in range(n) if 0 < weights[i] <= capacity and values[i] > 0]
    if sum(weights[i] for i in items) <= capacity:
        chosen = tuple(sorted(free + items))
        return KnapsackResult(
            chosen,
            float(sum(values[i] for i in chosen)),
            int(sum(max(weights[i], 0) for i in chosen)),
            1,
        )
    unit = max(1, math.ceil(len(items) * (capacity + 1) / max_cells))
    cap = capacity // unit
    w = [math.ceil(weights[i] / unit) for i in items]
    best = np.zeros(cap + 1, dtype=np.float64)
    take = np.zeros((len(items), cap + 1), dtype=bool)
    for k, i in enumerate(items):
        wk = w[k]
        if wk > cap:
            continue
        cand = best[: cap + 1 - wk] + float(values[i])
        better = cand > best[wk:] + 1e-12
        take[k, wk:] = better
        best[wk:] = np.where(better, cand, best[wk:])
    c = cap
    chosen_items: list[int] = []
    for k in range(len(items) - 1, -1, -1):
        if take[k, c]:
            chosen_items.append(items[k])
            c -= w[k]
    chosen = tuple(sorted(free + chosen_items))
    return KnapsackResult(
        chosen,
        float(sum(values[i] for i in chosen)),
        int(sum(max(weights[i], 0) for i in chosen)),
        unit,
    )
