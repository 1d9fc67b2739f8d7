"""The running budget of one ``ctxscope`` plan: the tokens left, and each partition's use.

Every placement ``select.plan`` makes (a must-keep item, an item that fits, its degraded
version, the old history's summary) and every placement the ``optimal`` fill simulates is
charged the same way: the item's segment, plus its partition's header when it is the first
thing in that partition. Segments are additive for tiktoken encodings (see ``gather``), so
that charge is exactly what the item adds to the prompt. ``Budget`` is where this rule lives.
"""

from __future__ import annotations

from collections.abc import Iterable


class Budget:
    """Tokens left in the whole budget, and each partition's tokens, items and cap.

    Partitions are indexes into ``models.PARTITIONS``. The state is kept as what the fill
    asks about every candidate: ``due[p]``, the header tokens partition ``p`` still adds to
    its first item (0 once it is open), and ``free[p]``, the tokens left under its cap
    (negative when must-keep items overran it). An item of ``t`` tokens costs
    ``t + due[p]`` and fits when that cost is at most both ``left`` and ``free[p]``.
    """

    __slots__ = ("caps", "due", "free", "headers", "items", "left", "used")

    def __init__(self, available: int, caps: list[int], headers: list[int]) -> None:
        self.left = available
        self.caps = caps
        self.headers = headers
        self.due = list(headers)
        self.free = list(caps)
        self.used = [0] * len(caps)
        self.items = [0] * len(caps)

    def copy(self) -> Budget:
        """An independent budget in the same state (the optimal fill simulates on copies)."""
        out = Budget(self.left, self.caps, self.headers)
        out.due = list(self.due)
        out.free = list(self.free)
        out.used = list(self.used)
        out.items = list(self.items)
        return out

    def reserve(self, tokens: int, partition: int) -> None:
        """Charge fixed content that opens ``partition`` (the task, the output block).

        It is not an item: the partition's item count stays as it is."""
        cost = tokens + self.due[partition]
        self.due[partition] = 0
        self.used[partition] += cost
        self.free[partition] -= cost
        self.left -= cost

    def cost(self, tokens: int, partition: int) -> int:
        """What an item of ``tokens`` would add: with its partition's header if it opens it."""
        return tokens + self.due[partition]

    def fits(self, tokens: int, partition: int) -> bool:
        """Whether an item of ``tokens`` fits in what is left and in its partition's cap."""
        cost = tokens + self.due[partition]
        return cost <= self.left and cost <= self.free[partition]

    def charge(self, tokens: int, partition: int) -> int:
        """Place an item of ``tokens`` (whether or not it fits); returns the tokens left."""
        cost = tokens + self.due[partition]
        self.due[partition] = 0
        self.used[partition] += cost
        self.free[partition] -= cost
        self.items[partition] += 1
        self.left -= cost
        return self.left

    def room(self, partition: int) -> int:
        """Tokens left under ``partition``'s cap (0 when it is already over)."""
        free = self.free[partition]
        return free if free > 0 else 0

    def over_cap(self, partition: int) -> bool:
        return self.free[partition] < 0

    def cost_of(self, placements: Iterable[tuple[int, int]]) -> int:
        """What placing all of ``(tokens, partition)`` would add, each header once."""
        due = list(self.due)
        total = 0
        for tokens, p in placements:
            total += tokens + due[p]
            due[p] = 0
        return total

    def unopened_headers(self, partitions: Iterable[int]) -> int:
        """The headers of those of ``partitions`` that nothing has opened yet."""
        return sum(self.due[p] for p in set(partitions))
