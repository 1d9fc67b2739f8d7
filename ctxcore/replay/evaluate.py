"""Policies evaluated side by side on recorded sessions (docs/design.md, "Evaluating policies").

For each policy (a settings patch: a preset and its knobs) every recorded turn is rebuilt
(``replay`` with its variants kept) and scored, beside the recording as sent:

- input tokens: the rebuilt prompt's (``result.totals.used``);
- cost with the prompt cache: the session's rebuilt prompts run through the simulated cache
  in the order they were sent (``costing.costs``), so a clearing that changes an early part
  of the prompt breaks the cached prefix and the next call pays to write it again. Every
  side, the recording too, is priced from the simulation on ctxscope's counts (the recorded
  usage is the recording's alone, so it is set aside), output tokens counted from the
  recorded reply;
- context recall: what the model's reply to the call used that was in the recorded prompt
  (``summarize.targets_of``: the paths and test names it names, the error lines it
  quotes, as ``bench/bench_recall.py`` measures), and the share of it still in the rebuilt
  prompt; turns whose reply used nothing of its prompt have no recall;
- findings introduced (``TurnReport.findings_added``) and losses: the packets in the
  recorded prompt that the policy took out or squeezed (``Flip.loss``). The recording's
  findings are diagnosed by the first policy's replay and shared by the others'
  (``replay(recorded=...)``); each side's turns are diagnosed one after the other, the
  session detectors carrying on from the turn before (docs/design.md, "Evaluating
  policies");
- the compaction ledger (docs/design.md, "Compaction ledger"): the recording's own
  compactions, and each of a policy's (``replay.compactions``) with what its summary kept
  and lost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxcore.cost import PriceTable
from ctxcore.costing import CallCost, cache_group, costs
from ctxcore.ledger import Entry, ledger
from ctxcore.models import Trace
from ctxcore.replay.compactions import ledger_of_policy
from ctxcore.replay.report import TurnReport
from ctxcore.replay.run import SharedRecorded, replay
from ctxcore.replay.variants import Settings
from ctxcore.summarize import targets_of

RECORDED = "recorded (as sent)"


@dataclass(frozen=True)
class TurnScore:
    """One turn under one policy."""

    session_id: str
    turn: int
    input_tokens: int
    cost_usd: float | None
    cache_read_tokens: int
    cache_write_tokens: int
    cache_break: bool
    #: what the reply used that was in the recorded prompt, and what of it the policy lost
    targets: int
    lost: list[str]
    findings_added: list[str]
    losses: int

    @property
    def recall(self) -> float | None:
        return 1 - len(self.lost) / self.targets if self.targets else None

    def as_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "turn": self.turn,
            "input_tokens": self.input_tokens,
            "cost_usd": self.cost_usd,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cache_break": self.cache_break,
            "recall": self.recall,
            "recall_targets": self.targets,
            "recall_lost": self.lost,
            "findings_added": self.findings_added,
            "losses": self.losses,
        }


@dataclass
class PolicyScore:
    """A policy over every turn replayed, and its totals."""

    label: str
    settings: dict[str, Any] | None
    turns: list[TurnScore] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: its compactions (docs/design.md, "Compaction ledger"): the recording's or the policy's
    ledger: list[Entry] = field(default_factory=list)

    @property
    def input_tokens(self) -> int:
        return sum(t.input_tokens for t in self.turns)

    @property
    def cost_usd(self) -> float | None:
        known = [t.cost_usd for t in self.turns]
        return None if any(c is None for c in known) else sum(c or 0.0 for c in known)

    @property
    def recall(self) -> float | None:
        """The mean recall over the turns whose reply used something of its prompt."""
        found = [r for t in self.turns if (r := t.recall) is not None]
        return sum(found) / len(found) if found else None

    @property
    def cache_breaks(self) -> int:
        return sum(t.cache_break for t in self.turns)

    @property
    def losses(self) -> int:
        return sum(t.losses for t in self.turns)

    @property
    def findings_added(self) -> int:
        return sum(len(t.findings_added) for t in self.turns)

    def as_json(self) -> dict[str, Any]:
        return {
            "policy": self.label,
            "settings": self.settings,
            "input_tokens": self.input_tokens,
            "cost_usd": self.cost_usd,
            "recall": self.recall,
            "cache_breaks": self.cache_breaks,
            "losses": self.losses,
            "findings_added": self.findings_added,
            "turns": [t.as_json() for t in self.turns],
            "errors": self.errors,
            "ledger": [e.as_json() for e in self.ledger],
        }


def _unbilled(trace: Trace, rebuilt: Trace) -> Trace:
    """The recorded call with ``rebuilt``'s prompt and without its recorded usage: what the
    simulated cache prices (the recording's model, session and time; the reply's text)."""
    outcome = trace.outcome
    if outcome is not None and outcome.tokens is not None:
        outcome = outcome.model_copy(update={"tokens": None})
    return trace.model_copy(update={"result": rebuilt.result, "outcome": outcome})


def _costed(
    recorded: Sequence[Trace], rebuilt: dict[str, Trace], prices: PriceTable
) -> dict[str, CallCost]:
    """Each call's cost with the rebuilt prompts, by recorded trace id: a session's calls
    (a side chain's with its parent's) together, in the order they were sent."""
    calls = [_unbilled(t, rebuilt[t.trace_id]) for t in recorded if t.trace_id in rebuilt]
    calls.sort(key=lambda t: (cache_group(t), t.input.now, t.turn))
    return {c.trace_id: c for c in costs(calls, prices)}


def _targets(trace: Trace) -> list[str]:
    """What the reply to the recorded call used that was in its prompt (``targets_of``)."""
    reply = trace.outcome.output if trace.outcome is not None else None
    if not reply or trace.result is None:
        return []
    return targets_of(reply, trace.result.prompt)


def _score(
    label: str,
    settings: Settings | None,
    recorded: Sequence[Trace],
    rebuilt: dict[str, Trace],
    reports: dict[str, TurnReport],
    prices: PriceTable,
    used: Sequence[list[str]],
) -> PolicyScore:
    """One policy's scores, turn by turn in the order of ``recorded``; ``used``: each
    recorded call's ``_targets``, in the same order (the same for every policy)."""
    out = PolicyScore(label, None if settings is None else dict(settings))
    priced = _costed(recorded, rebuilt, prices)
    for t, targets in zip(recorded, used, strict=True):
        v = rebuilt.get(t.trace_id)
        if v is None or v.result is None:
            continue
        c = priced[t.trace_id]
        prompt = v.result.prompt.lower()
        rep = reports.get(t.trace_id)
        out.turns.append(
            TurnScore(
                session_id=t.session_id,
                turn=t.turn,
                input_tokens=v.result.totals.used,
                cost_usd=c.cost_usd,
                cache_read_tokens=c.cache_read_tokens,
                cache_write_tokens=c.cache_write_tokens,
                cache_break=c.cache_break is not None,
                targets=len(targets),
                lost=[x for x in targets if x not in prompt],
                findings_added=list(rep.findings_added) if rep is not None else [],
                losses=len(rep.losses("info")) if rep is not None else 0,
            )
        )
    return out


def evaluate(
    traces: Sequence[Trace],
    policies: Sequence[Settings],
    prices: PriceTable,
    *,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    findings: bool = True,
) -> list[PolicyScore]:
    """The recording as sent, then each policy, scored on ``traces`` (module docstring);
    ``progress(done, total)`` is called after each policy (the app's progress bar).
    ``findings=False`` leaves the findings introduced out (none counted: the replays skip
    the diagnostics)."""
    recorded = [t for t in traces if t.result is not None]
    own = {t.trace_id: t for t in recorded}
    used = [_targets(t) for t in recorded]
    scores = [_score(RECORDED, None, recorded, own, {}, prices, used)]
    scores[0].ledger = ledger(recorded)
    shared: SharedRecorded = {}  # the recording's findings, diagnosed by the first replay
    for settings in policies:
        report = replay(
            recorded,
            settings,
            findings=findings,
            workers=workers,
            keep_variants=True,
            recorded=shared,
        )
        rebuilt = {v.source_trace_id: v for v in report.variants if v.source_trace_id}
        reports = {r.trace_id: r for r in report.turns}
        score = _score(label(settings), settings, recorded, rebuilt, reports, prices, used)
        score.errors = [f"{e.session_id}:{e.turn}: {e.message}" for e in report.errors]
        score.ledger = ledger_of_policy(recorded, rebuilt, score.label)
        scores.append(score)
        if progress is not None:
            progress(len(scores) - 1, len(policies))
    return scores


def label(settings: Settings) -> str:
    """A policy's name: its preset and the knobs set, ``auto-compact threshold=0.6``."""
    rest = " ".join(f"{k}={v}" for k, v in sorted(settings.items()) if k != "preset")
    name = settings.get("preset", "(each trace's own preset)")
    return f"{name} {rest}".strip()


def table(scores: Sequence[PolicyScore]) -> str:
    """The policies side by side: tokens, $ with the cache, recall, cache breaks, losses,
    findings introduced."""
    lines = [
        f"{'policy':<60} {'input tokens':>12} {'$ cached':>10} {'recall':>7} {'breaks':>6} "
        f"{'losses':>6} {'findings+':>9}"
    ]
    for s in scores:
        usd = "?" if s.cost_usd is None else f"{s.cost_usd:.4f}"
        rec = "-" if s.recall is None else f"{s.recall:.1%}"
        lines.append(
            f"{s.label[:60]:<60} {s.input_tokens:>12,} {usd:>10} {rec:>7} {s.cache_breaks:>6} "
            f"{s.losses:>6} {s.findings_added:>9}"
        )
        lines += [f"  not replayed: {e}" for e in s.errors[:5]]
    return "\n".join(lines) + "\n"


__all__ = ["RECORDED", "PolicyScore", "TurnScore", "evaluate", "label", "table"]
