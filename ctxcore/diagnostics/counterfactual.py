"""Counterfactuals: the smallest single config change that would have kept a packet.

"Why was ``tool:call_12`` dropped?" is half an answer; the other half is "what would have
kept it": ``max_tokens +312``, ``relevance_weight ≤ 0.55``, ``min_relevance ≤ 0.08``.
For each knob the preset has, an analytic first guess (the tokens it was short by, its
relevance) is refined by bisection over the knob, and every answer is VERIFIED by
re-running ``ctxcore.pipeline.build`` on the captured input with the patched config —
a suggestion that was not re-run is never returned. The result carries a config patch
(``Finding.fix`` / the Playground's one-click settings) and a sentence. Knobs a preset does
not have (``None`` in its resolved config) or rejects are skipped; ``output_reserve`` is
tried because the ``ctxscope`` preset resolves ``reserve_ratio`` into it.

``ALL_KNOBS`` adds ``safety_margin``, ``history_limit`` (a message older than the last N:
the smallest N that reaches back to it) and ``partition_budgets`` (the packet's own
partition share); with ``pairs=True``, when no single change keeps the packet, two knobs
are loosened together and each moved back as far as the pair still keeps it. A history
message counts as kept when the message itself, or the builder packet that holds it
(``builder:history:K``, ``builder:history``), is kept. ``searched_knobs`` names what a
search on a trace tries, so the app can say so.

Greedy fills are not monotone in every knob (a bigger budget can let a higher-ranked
packet in first), so bisection finds *a* boundary, not always the global minimum; the
value returned is always one that was built and checked.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ctxcore.errors import CtxscopeError, InputError
from ctxcore.knobs import names, searched
from ctxcore.models import BuildResult, Config, Decision, Message, Reason, Status, Trace
from ctxcore.pipeline.common import HISTORY_ID
from ctxcore.tokens import get_counter

if TYPE_CHECKING:
    from ctxcore.pipeline import ctxscope

#: the detectors' quick set (what ``smallest_fix`` and the findings use), in search order
#: (``ctxcore.knobs``, ``Knob.search``)
KNOBS: tuple[str, ...] = searched(quick=True)
#: every knob the search knows: the quick set and the rest, which the app's "What would
#: have kept it?" searches
ALL_KNOBS: tuple[str, ...] = (*KNOBS, *(k for k in searched() if k not in KNOBS))
#: knob → the decisions' reasons a change of that knob can undo
_ROOM_REASONS = frozenset(
    {
        Reason.NO_ROOM,
        Reason.AFTER_BREAK,
        Reason.PARTITION_FULL,
        Reason.NOT_IN_OPTIMAL_SET,
        Reason.DEGRADED,
        Reason.TRUNCATED_BY_COMPRESS,
        Reason.REMOVED_BY_COMPRESS,
        Reason.BUDGET_EXHAUSTED_BY_SYSTEM,
    }
)


class Counterfactual(BaseModel):
    """One verified single-knob change and what it did to the packet."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    packet_id: str
    knob: str
    old: float
    new: float
    #: merge into the trace's config to reproduce (what the Playground applies)
    patch: dict[str, Any]
    #: short form for a table cell: "max_tokens +312", "relevance_weight ≤ 0.55"
    label: str
    sentence: str
    #: the packet's status in the verifying re-run (always "kept")
    status: Status
    #: how far the knob moved, relative (max_tokens) or absolute (ratios and weights)
    size: float
    builds: int


BuildCache = dict[str, dict[str, Status] | None]
"""Config patch → every packet's status in that re-run (None: the patch could not run).

One re-run answers the question for every packet, so callers that look for fixes for
several packets of the same trace share one cache."""


class _Runner:
    """Re-runs one trace's input with patched configs, counting the builds."""

    def __init__(
        self, trace: Trace, packet_id: str, max_builds: int, cache: BuildCache | None = None
    ) -> None:
        self.trace = trace
        self.packet_id = packet_id
        self.max_builds = max_builds
        self.builds = 0
        self._cache: BuildCache = cache if cache is not None else {}

    def status(self, patch: dict[str, Any]) -> Status | None:
        # canonical JSON: a partition_budgets patch holds a dict
        key = json.dumps(patch, sort_keys=True)
        if key not in self._cache:
            if self.builds >= self.max_builds:
                return None
            self.builds += 1
            result = rerun(self.trace, patch)
            self._cache[key] = (
                _statuses(result, self.trace.input.history) if result is not None else None
            )
        statuses = self._cache[key]
        return statuses.get(self.packet_id) if statuses is not None else None

    def keeps(self, patch: dict[str, Any]) -> bool:
        return self.status(patch) == Status.KEPT


def _statuses(result: BuildResult, history: Sequence[Message]) -> dict[str, Status]:
    """Every packet's status in a build, and every history message's under whatever id
    the preset gave it: its own, ``builder:history:K`` (K counted from the oldest message
    considered) or the one ``builder:history`` packet holding the messages not cut."""
    out = {d.packet_id: d.status for d in result.decisions}
    ks = [
        int(pid.rsplit(":", 1)[1])
        for pid in out
        if pid.startswith(HISTORY_ID + ":") and pid.rsplit(":", 1)[1].isdigit()
    ]
    offset = len(history) - (max(ks) + 1) if ks else 0
    for pos, m in enumerate(history):
        name = m.id or f"history:{pos}"
        if name in out:
            continue
        if f"{HISTORY_ID}:{pos - offset}" in out:
            out[name] = out[f"{HISTORY_ID}:{pos - offset}"]
        elif HISTORY_ID in out:
            out[name] = out[HISTORY_ID]
    return out


def patched_config(config: Config, patch: dict[str, Any]) -> Config:
    """``config`` with ``patch`` applied and validated (an invalid patch is an InputError)."""
    data = config.model_dump()
    data.update(patch)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise InputError(f"config patch {patch!r} is invalid: {exc.errors()[0]['msg']}") from exc


def rebuild(trace: Trace, patch: dict[str, Any] | None = None) -> BuildResult | None:
    """Re-run the trace's captured input with its config patched; None if it cannot run.

    A preset that is not installed, a knob the preset rejects or a must-keep overflow all
    mean "this change is not a valid what-if", never a crash.
    """
    from ctxcore.pipeline import build

    try:
        cfg = patched_config(trace.config, patch or {})
        return build(trace.input, cfg, counter=get_counter(cfg.tokenizer or "cl100k_base"))
    except CtxscopeError:
        return None


def rerun(trace: Trace, patch: dict[str, Any] | None = None) -> BuildResult | None:
    """``rebuild`` for the detectors and the fix search, which read a re-run's statuses,
    scores, prompt and totals only: the ctxscope preset leaves the decisions' sentences out
    (``reasons=False``, a third of a re-run's time); the other presets build as ``rebuild``."""
    from ctxcore.pipeline import build, ctxscope, resolve_config

    try:
        cfg = patched_config(trace.config, patch or {})
        counter = get_counter(cfg.tokenizer or "cl100k_base")
        if cfg.preset != ctxscope.NAME:
            return build(trace.input, cfg, counter=counter)
        return ctxscope.run(
            trace.input, resolve_config(cfg, trace.input), counter, None, reasons=False
        )
    except CtxscopeError:
        return None


def rerun_outcome(
    trace: Trace, patch: dict[str, Any] | None = None, *, prompt: bool = False
) -> ctxscope.Outcome | None:
    """What ``rerun`` would decide (ids, statuses, scores, tokens used and, with ``prompt``,
    the prompt), without the decisions' models where the ctxscope preset counts exactly
    (``ctxscope.outcome``: the plan and the prompt alone, about half a re-run); else read off
    a full re-run. None if it cannot run."""
    from ctxcore.pipeline import ctxscope, resolve_config
    from ctxcore.pipeline.ctxscope import Outcome
    from ctxcore.tokens import is_exact

    try:
        cfg = patched_config(trace.config, patch or {})
        counter = get_counter(cfg.tokenizer or "cl100k_base")
        if cfg.preset == ctxscope.NAME and is_exact(counter.name):
            cfg = resolve_config(cfg, trace.input)
            return ctxscope.outcome(trace.input, cfg, counter, prompt=prompt)
    except CtxscopeError:
        return None
    alt = rerun(trace, patch)
    if alt is None:
        return None
    ds = alt.decisions
    return Outcome(
        [d.packet_id for d in ds],
        [d.status for d in ds],
        [d.score for d in ds],
        alt.totals.used,
        alt.prompt if prompt else None,
    )


_INT_KNOBS = frozenset(names(kind="int"))


def _fmt(knob: str, value: float) -> str:
    return f"{int(value):,}" if knob in _INT_KNOBS else f"{value:.2f}"


def _make(
    run: _Runner, d: Decision, knob: str, old: float, new: float, patch: dict[str, Any]
) -> Counterfactual:
    if knob == "history_limit":
        label = f"history_limit {'+' if new >= old else '−'}{abs(int(new) - int(old)):,}"
        size = abs(new - old) / max(old, 1)
    elif knob in _INT_KNOBS:
        label = f"{knob} {'+' if new >= old else '−'}{abs(int(new) - int(old)):,}"
        scale = run.trace.config.max_tokens or old
        size = abs(new - old) / scale if scale else abs(new - old)
    elif knob.startswith("partition_budgets"):
        label = f"{knob} {'≤' if new < old else '≥'} {new:.2f}"
        size = abs(new - old)
    else:
        label = f"{knob} {'≤' if new < old else '≥'} {new:.2f}"
        size = abs(new - old)
    extra = ""
    if knob == "relevance_weight" and "recency_weight" in patch:
        extra = f", recency_weight {patch['recency_weight']:.2f}"
    sentence = (
        f"{label} ({knob} {_fmt(knob, old)} → {_fmt(knob, new)}{extra}) would have kept "
        f"{run.packet_id}, which was {d.status.value} ({d.reason.value}); verified by "
        f"re-running {run.trace.config.preset}"
    )
    return Counterfactual(
        packet_id=run.packet_id,
        knob=knob,
        old=old,
        new=new,
        patch=patch,
        label=label,
        sentence=sentence,
        status=Status.KEPT,
        size=round(size, 6),
        builds=run.builds,
    )


def _bisect_int(ok: Callable[[int], bool], lo: int, hi: int) -> int:
    """Smallest value in (lo, hi] with ok(value), given not ok(lo) and ok(hi)."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _search_max_tokens(run: _Runner, d: Decision) -> Counterfactual | None:
    cfg = run.trace.config
    if cfg.max_tokens is None or d.reason == Reason.BELOW_MIN_RELEVANCE:
        return None  # the relevance filter does not depend on the budget
    old = cfg.max_tokens
    short = d.tokens_before - max(d.budget_left or 0, 0)
    if d.reason not in _ROOM_REASONS or short <= 0:
        short = max(d.tokens_before, 1)
    keep = 1 - (cfg.reserve_ratio or 0.0) if cfg.preset == "hello-agents" else 1.0
    step = max(math.ceil(short / max(keep, 0.05)), 1)
    total = sum(x.tokens_before for x in run.trace.result.decisions) if run.trace.result else 0
    cap = max(old * 8, old + 2 * total + step)

    def ok(v: int) -> bool:
        return run.keeps({"max_tokens": v})

    hi = old + step
    while not ok(hi):
        if hi >= cap or run.builds >= run.max_builds:
            return None
        hi = min(old + (hi - old) * 2, cap)
    best = _bisect_int(ok, old, hi)
    return _make(run, d, "max_tokens", old, best, {"max_tokens": best})


def _search_min_relevance(run: _Runner, d: Decision) -> Counterfactual | None:
    old = run.trace.config.min_relevance
    if old is None or d.reason != Reason.BELOW_MIN_RELEVANCE or d.relevance is None:
        return None
    new = math.floor(d.relevance * 100 + 1e-9) / 100
    if new >= old:
        new = max(round(old - 0.01, 2), 0.0)
    if run.keeps({"min_relevance": new}):
        return _make(run, d, "min_relevance", old, new, {"min_relevance": new})
    return None


def _weight_patch(cfg: Config, w: float) -> dict[str, Any]:
    w = round(w, 4)
    patch: dict[str, Any] = {"relevance_weight": w}
    if cfg.recency_weight is not None:
        total = (cfg.relevance_weight or 0.0) + cfg.recency_weight
        patch["recency_weight"] = round(total - w, 4)
    return patch


def _search_weights(run: _Runner, d: Decision) -> Counterfactual | None:
    cfg = run.trace.config
    old = cfg.relevance_weight
    if old is None or d.reason == Reason.BELOW_MIN_RELEVANCE:
        return None
    total = old + cfg.recency_weight if cfg.recency_weight is not None else 1.0
    hi_w = min(1.0, total)
    grid = sorted(
        {round(k * 0.05, 2) for k in range(21) if k * 0.05 <= hi_w + 1e-9} - {round(old, 2)},
        key=lambda w: (abs(w - old), w),
    )

    def ok(w: float) -> bool:
        return run.keeps(_weight_patch(cfg, w))

    for w in grid:
        if run.builds >= run.max_builds:
            return None
        if ok(w):
            # refine to 0.01 between the last failing value toward ``old`` and ``w``
            fail, good = round(old * 100), round(w * 100)
            while abs(good - fail) > 1:
                mid = (fail + good) // 2
                if ok(mid / 100):
                    good = mid
                else:
                    fail = mid
            new = good / 100
            return _make(run, d, "relevance_weight", old, new, _weight_patch(cfg, new))
    return None


def _search_reserve_ratio(run: _Runner, d: Decision) -> Counterfactual | None:
    cfg = run.trace.config
    old = cfg.reserve_ratio
    if old is None or old <= 0 or d.reason == Reason.BELOW_MIN_RELEVANCE:
        return None
    old_i = round(old * 100)

    def ok(i: int) -> bool:
        return run.keeps({"reserve_ratio": i / 100})

    if not ok(0):
        return None
    # the largest ratio (in hundredths, below old) that still keeps the packet
    lo, hi = 0, old_i  # ok(lo), not ok(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    new = lo / 100
    return _make(run, d, "reserve_ratio", old, new, {"reserve_ratio": new})


def _search_output_reserve(run: _Runner, d: Decision) -> Counterfactual | None:
    """The ctxscope preset resolves ``reserve_ratio`` into ``output_reserve``: lower that."""
    return _search_reserve_int(run, d, "output_reserve")


def _search_reserve_int(run: _Runner, d: Decision, knob: str) -> Counterfactual | None:
    """The largest value of a token reserve (output_reserve, safety_margin) that keeps it."""
    old = getattr(run.trace.config, knob)
    if old is None or old <= 0 or d.reason == Reason.BELOW_MIN_RELEVANCE:
        return None

    def ok(v: int) -> bool:
        return run.keeps({knob: v})

    if not ok(0):
        return None
    lo, hi = 0, old  # ok(lo), not ok(hi): the largest reserve that still keeps the packet
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return _make(run, d, knob, old, lo, {knob: lo})


def _search_safety_margin(run: _Runner, d: Decision) -> Counterfactual | None:
    return _search_reserve_int(run, d, "safety_margin")


def _history_pos(trace: Trace, packet_id: str) -> int | None:
    for pos, m in enumerate(trace.input.history):
        if (m.id or f"history:{pos}") == packet_id:
            return pos
    return None


def _search_history_limit(run: _Runner, d: Decision) -> Counterfactual | None:
    """A history message older than the last ``history_limit``: the smallest limit that
    reaches back to it (first guess: exactly far enough), verified by re-running."""
    old = run.trace.config.history_limit
    pos = _history_pos(run.trace, run.packet_id)
    n = len(run.trace.input.history)
    if old is None or pos is None or n - pos <= old:
        return None

    def ok(v: int) -> bool:
        return run.keeps({"history_limit": v})

    guess = n - pos
    if ok(guess):
        hi = guess
    elif guess < n and ok(n):
        hi = n
    else:
        return None
    best = _bisect_int(ok, old, hi)
    return _make(run, d, "history_limit", old, best, {"history_limit": best})


def _search_partition_budget(run: _Runner, d: Decision) -> Counterfactual | None:
    """The smallest raise of the packet's own partition share (hundredths) that keeps it."""
    budgets = run.trace.config.partition_budgets
    part = d.partition
    if not budgets or part is None or part not in budgets:
        return None
    if d.reason == Reason.BELOW_MIN_RELEVANCE:
        return None
    old = budgets[part]
    old_i = round(old * 100)

    def patch(i: int) -> dict[str, Any]:
        return {"partition_budgets": {**budgets, part: i / 100}}

    def ok(i: int) -> bool:
        return run.keeps(patch(i))

    if old_i >= 100 or not ok(100):
        return None
    best = _bisect_int(ok, old_i, 100)
    cf = _make(run, d, f"partition_budgets[{part}]", old, best / 100, patch(best))
    return cf


_SEARCHES: dict[str, Callable[[_Runner, Decision], Counterfactual | None]] = {
    "max_tokens": _search_max_tokens,
    "min_relevance": _search_min_relevance,
    "relevance_weight": _search_weights,
    "reserve_ratio": _search_reserve_ratio,
    "output_reserve": _search_output_reserve,
    "safety_margin": _search_safety_margin,
    "history_limit": _search_history_limit,
    "partition_budgets": _search_partition_budget,
}


def searched_knobs(trace: Trace, knobs: Sequence[str] = ALL_KNOBS) -> list[str]:
    """The knobs of ``knobs`` this trace's preset has (the rest are None in its config):
    what a search on it actually tries, for the app to say so."""
    cfg = trace.config
    return [k for k in knobs if getattr(cfg, k, None) is not None]


def _permissive(trace: Trace, knob: str, d: Decision) -> dict[str, Any] | None:
    """The loosest value of one knob, for trying pairs (None: nothing to loosen)."""
    cfg = trace.config
    value = getattr(cfg, knob, None)
    if value is None:
        return None
    if knob == "max_tokens":
        total = sum(x.tokens_before for x in trace.result.decisions) if trace.result else 0
        return {knob: max(value * 2, value + total)}
    if knob == "min_relevance":
        return {knob: 0.0} if value > 0 else None
    if knob in ("reserve_ratio", "output_reserve", "safety_margin"):
        return {knob: 0} if value > 0 else None
    if knob == "history_limit":
        n = len(trace.input.history)
        return {knob: n} if n > value else None
    if knob == "partition_budgets" and d.partition in value and value[d.partition] < 1:
        return {knob: {**value, d.partition: 1.0}}
    return None


def _tighten(run: _Runner, loose: dict[str, Any], knob: str) -> dict[str, Any]:
    """Move one knob of a keeping patch back toward its recorded value while it still
    keeps the packet (bisection on integers or hundredths)."""
    cfg = run.trace.config
    old, new = getattr(cfg, knob), loose[knob]
    if knob == "partition_budgets":
        part = next(p for p in new if new[p] != old.get(p))
        lo_i, hi_i = round(old[part] * 100), round(new[part] * 100)

        def ok_p(i: int) -> bool:
            return run.keeps({**loose, knob: {**new, part: i / 100}})

        best = _bisect_int(ok_p, lo_i, hi_i)
        return {**loose, knob: {**new, part: best / 100}}
    scale = 1 if knob in _INT_KNOBS else 100
    a, b = round(old * scale), round(new * scale)

    def ok(i: int) -> bool:
        return run.keeps({**loose, knob: i / scale if scale != 1 else i})

    if a < b:
        best = _bisect_int(ok, a, b)
    else:  # lowering (min_relevance, reserves): the largest value that still keeps
        lo, hi = b, a  # ok(lo), not ok(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ok(mid):
                lo = mid
            else:
                hi = mid
        best = lo
    return {**loose, knob: best / scale if scale != 1 else best}


def _pair_sentence(run: _Runner, d: Decision, patch: dict[str, Any]) -> tuple[str, float]:
    cfg = run.trace.config
    parts, size = [], 0.0
    for knob, new in patch.items():
        old = getattr(cfg, knob)
        if knob == "partition_budgets":
            part = next(p for p in new if new[p] != old.get(p))
            parts.append(f"partition_budgets[{part}] {old[part]:.2f} → {new[part]:.2f}")
            size += abs(new[part] - old[part])
        else:
            parts.append(f"{knob} {_fmt(knob, old)} → {_fmt(knob, new)}")
            scale = cfg.max_tokens if knob in _INT_KNOBS and knob != "history_limit" else 1
            if knob == "history_limit":
                scale = max(old, 1)
            size += abs(new - old) / (scale or 1)
    return " and ".join(parts), size


def _search_pairs(run: _Runner, d: Decision, knobs: Sequence[str]) -> list[Counterfactual]:
    """Two knobs together, when no single one keeps the packet: both loosened fully, then
    each moved back as far as the pair still keeps it; the final patch is re-run."""
    loose = {k: p for k in knobs if (p := _permissive(run.trace, k, d)) is not None}
    out: list[Counterfactual] = []
    names = list(loose)
    for i, k1 in enumerate(names):
        for k2 in names[i + 1 :]:
            if run.builds >= run.max_builds:
                return out
            patch = {**loose[k1], **loose[k2]}
            if not run.keeps(patch):
                continue
            patch = _tighten(run, patch, k1)
            patch = _tighten(run, patch, k2)
            if not run.keeps(patch):  # the final patch, re-run (cached when already built)
                continue
            what, size = _pair_sentence(run, d, patch)
            out.append(
                Counterfactual(
                    packet_id=run.packet_id,
                    knob=f"{k1} + {k2}",
                    old=0.0,
                    new=0.0,
                    patch=patch,
                    label=f"{k1} + {k2}",
                    sentence=(
                        f"{what} together would have kept {run.packet_id}, which was "
                        f"{d.status.value} ({d.reason.value}); no single change does; "
                        f"verified by re-running {run.trace.config.preset}"
                    ),
                    status=Status.KEPT,
                    size=round(size, 6),
                    builds=run.builds,
                )
            )
    return out


def counterfactuals(
    trace: Trace,
    packet_id: str,
    *,
    knobs: Sequence[str] = KNOBS,
    max_builds: int = 80,
    cache: BuildCache | None = None,
    pairs: bool = False,
) -> list[Counterfactual]:
    """Every verified single-knob change that keeps ``packet_id``, smallest first; with
    ``pairs``, when no single change does, the verified pairs of changes that do.

    Empty when the packet is already kept, when the preset cannot be re-run here, or when
    re-running the recorded config does not reproduce the recorded decision (a trace from
    another builder: a what-if on our re-run would not be about what happened).
    """
    if trace.result is None:
        raise InputError(f"trace {trace.trace_id!r} has no result; build it first")
    d = next((x for x in trace.result.decisions if x.packet_id == packet_id), None)
    if d is None:
        raise InputError(
            f"trace {trace.trace_id!r} has no decision for packet {packet_id!r}; "
            "pick a packet id from its decisions table"
        )
    if d.status == Status.KEPT:
        return []
    unknown = [k for k in knobs if k not in _SEARCHES]
    if unknown:
        raise InputError(
            f"unknown knob(s) {', '.join(unknown)}; choose from {', '.join(ALL_KNOBS)}"
        )
    run = _Runner(trace, packet_id, max_builds, cache)
    if run.status({}) != d.status:
        return []
    out = []
    for knob in knobs:
        cf = _SEARCHES[knob](run, d)
        if cf is not None:
            out.append(cf)
    if pairs and not out:
        return sorted(_search_pairs(run, d, knobs), key=lambda c: c.size)
    order = {k: i for i, k in enumerate(ALL_KNOBS)}
    return sorted(out, key=lambda c: (c.size, order.get(c.knob.split("[")[0], len(order))))


def smallest_fix(
    trace: Trace, packet_id: str, *, max_builds: int = 80, cache: BuildCache | None = None
) -> Counterfactual | None:
    """The smallest verified single change that keeps ``packet_id`` (None if there is none)."""
    found = counterfactuals(trace, packet_id, max_builds=max_builds, cache=cache)
    return found[0] if found else None


__all__ = [
    "ALL_KNOBS",
    "KNOBS",
    "BuildCache",
    "Counterfactual",
    "counterfactuals",
    "rebuild",
    "searched_knobs",
    "smallest_fix",
]
