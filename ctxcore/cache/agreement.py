"""The simulation against the cache reads the provider billed (docs/design.md, "Prompt
cache")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ctxcore.cache.calls import CallCache


@dataclass(frozen=True)
class Agreement:
    """Simulated against recorded cache reads over the calls with recorded usage, the first
    call apart (it may read what an earlier session cached)."""

    calls: int
    simulated: int
    recorded: int
    alike: int
    #: the calls the provider billed differently from the simulation
    differing: tuple[CallCache, ...]
    first: CallCache | None = None
    #: recorded minus simulated reads of the first call, when positive
    cached_before: int = 0
    per_call: tuple[CallCache, ...] = field(default=(), repr=False)

    @property
    def difference_pct(self) -> float | None:
        """The simulated sum's difference from the recorded one, in % of the recorded."""
        if self.recorded == 0:
            return None if self.simulated else 0.0
        return 100.0 * (self.simulated - self.recorded) / self.recorded

    @property
    def alike_pct(self) -> float | None:
        return 100.0 * self.alike / self.calls if self.calls else None


def agreement(calls: Sequence[CallCache]) -> Agreement:
    """How the simulation agrees with what was billed, from the second call on."""
    first = calls[0] if calls and calls[0].recorded_read is not None else None
    rest = [c for c in calls[1:] if c.recorded_read is not None]
    before = 0
    if first is not None and first.recorded_read is not None:
        before = max(0, first.recorded_read - first.cache_read)
    return Agreement(
        calls=len(rest),
        simulated=sum(c.cache_read for c in rest),
        recorded=sum(c.recorded_read or 0 for c in rest),
        alike=sum(1 for c in rest if c.hit == c.recorded_hit),
        differing=tuple(c for c in rest if c.billed_differently),
        first=first,
        cached_before=before,
        per_call=tuple(rest),
    )
