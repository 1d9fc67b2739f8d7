"""Detectors about decisions and the budget: must-haves lost, the window flooded, greedy waste.

Each detector is a function ``TraceView -> list[Finding]`` registered under a stable id
(``ctxcore.diagnostics.DETECTORS``); it names the packets it is about and says what
happened in one sentence, with the numbers in ``evidence``. The content detectors
(duplicates, injection, labels, CJK relevance, summaries) live in ``detectors_content``;
compression damage and estimator drift in ``detectors_tokens``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ctxcore.diagnostics.context import (
    IN_PROMPT,
    LOST,
    TRUSTED_KINDS,
    TraceView,
    finding,
    fold_over,
    id_list,
    normalize_ws,
    short,
    ws_head,
)
from ctxcore.diagnostics.counterfactual import rerun_outcome
from ctxcore.diagnostics.knapsack import knapsack
from ctxcore.diagnostics.text import NoiseProfile, constraint_sentences, lowered_ws, strip_noise
from ctxcore.models import Decision, Finding, Reason, Severity, Status, Trace
from ctxcore.pipeline.common import HISTORY_ID, INSTRUCTIONS_ID

if TYPE_CHECKING:
    from ctxcore.pipeline import ctxscope

# --------------------------------------------------------------------------- must_have_lost


def _present(v: TraceView, content: str) -> bool:
    """Is (the start of) this content in the prompt? Noise-stripped text counts too."""
    for text in (content, strip_noise(content).clean):
        probe = ws_head(text, 120)
        if not probe or v.prompt_contains(probe):
            return True
    return False


def must_have_lost(v: TraceView) -> list[Finding]:
    out: list[Finding] = []
    query = v.input.query.strip()
    if query and not v.prompt_contains(query):
        head = normalize_ws(query)[:40]
        cut = bool(head) and v.prompt_contains(head)
        out.append(
            finding(
                "must_have_lost",
                "error",
                f"the current task ({short(query)!r}) is "
                f"{'cut short in' if cut else 'missing from'} the prompt",
                evidence={"query": query, "cut": cut},
            )
        )
    for d in v.decisions:
        p = v.packets.get(d.packet_id)
        must = (p is not None and p.must_keep) or d.reason == Reason.MUST_KEEP
        essential = must or (
            d.kind in v.options.must_have_kinds
            or (d.packet_id == INSTRUCTIONS_ID and bool(v.input.system_instructions.strip()))
        )
        if not essential:
            continue
        what = "must-keep packet" if must else f"{d.kind} packet"
        ev = {"status": d.status.value, "reason": d.reason.value, "reason_text": d.reason_text}
        if d.status in LOST:
            out.append(
                finding(
                    "must_have_lost",
                    "error",
                    f"{what} {d.packet_id} was {d.status.value}: {d.reason_text}",
                    [d.packet_id],
                    ev,
                )
            )
        elif d.status == Status.SUMMARIZED:
            out.append(
                finding(
                    "must_have_lost",
                    "warning",
                    f"{what} {d.packet_id} survives only in a summary: {d.reason_text}",
                    [d.packet_id],
                    ev,
                )
            )
        elif d.status == Status.TRUNCATED and must:
            out.append(
                finding(
                    "must_have_lost",
                    "warning",
                    f"{what} {d.packet_id} was truncated to {d.tokens_after:,} of "
                    f"{d.tokens_before:,} tokens: {d.reason_text}",
                    [d.packet_id],
                    ev,
                )
            )
        elif d.status == Status.KEPT and not _present(v, v.content(d.packet_id)):
            out.append(
                finding(
                    "must_have_lost",
                    "error",
                    f"{what} {d.packet_id} is marked kept but its text is not in the prompt",
                    [d.packet_id],
                    ev,
                )
            )
    decided = set(v.by_id)
    for p in v.input.packets:
        if p.must_keep and p.id not in decided and not _present(v, p.content):
            out.append(
                finding(
                    "must_have_lost",
                    "error",
                    f"must-keep packet {p.id} has no decision and is not in the prompt",
                    [p.id],
                )
            )
    out.extend(_lost_constraints(v))
    return out


def _history_carrier(v: TraceView, sentence: str) -> str | None:
    """The history candidate holding ``sentence``: a single message before the whole history."""
    needle = normalize_ws(sentence).lower()
    ids = [d.packet_id for d in v.decisions if v.is_history(d.packet_id)]
    for pid in sorted(ids, key=lambda i: i == HISTORY_ID):
        if needle in lowered_ws(v.content(pid)):
            return pid
    return None


#: a user constraint where it first came: normalized sentence → (turn, sentence, message id)
Constraints = dict[str, tuple[int | None, str, str | None]]


def _add_constraints(
    found: Constraints, turn: int | None, texts: Iterable[tuple[str, str | None]]
) -> None:
    """The constraint sentences of ``texts`` ((text, message id)) not already in ``found``."""
    for text, msg_id in texts:
        for sent in constraint_sentences(text):
            found.setdefault(normalize_ws(sent).lower(), (turn, sent, msg_id))


def _turn_constraints(found: Constraints, t: Trace) -> None:
    """An earlier turn's constraints: its task, then its history's user messages."""
    user = ((m.content, m.id) for m in t.input.history if m.role == "user")
    _add_constraints(found, t.turn, [(t.input.query, None), *user])


def _earlier_constraints(v: TraceView) -> Constraints:
    """The constraints of the earlier turns, each where it first came (turn order): carried
    over from the turn before when the whole session is diagnosed (``SessionFolds``)."""
    k = v.folds.earlier(v.trace) if v.folds is not None else None
    if v.folds is not None and k is not None:
        return v.folds.fold("constraints", k, dict, _turn_constraints)
    earlier = sorted(
        (t for t in v.session_traces if t.turn < v.trace.turn and t.trace_id != v.trace.trace_id),
        key=lambda t: t.turn,
    )
    return fold_over(earlier, dict, _turn_constraints)


def _lost_constraints(v: TraceView) -> list[Finding]:
    """User constraints from earlier turns (this input's history, earlier traces) now absent."""
    earlier = _earlier_constraints(v)  # shared: read, never changed
    own: Constraints = {}
    user = [(m.content, m.id) for m in v.input.history if m.role == "user"]
    _add_constraints(own, None, user)
    query = normalize_ws(v.input.query).lower()
    # one finding per message that carried them: (turn, carrier or message id) → sentences
    groups: dict[tuple[int | None, str | None], list[str]] = {}
    firsts = [*earlier.items(), *((k, c) for k, c in own.items() if k not in earlier)]
    for key, (turn, sent, msg_id) in firsts:
        if key in query or v.prompt_contains(sent):
            continue
        carrier = _history_carrier(v, sent) or msg_id
        groups.setdefault((turn, carrier), []).append(sent)
    out: list[Finding] = []
    for (turn, carrier), sents in groups.items():
        origin = f"turn {turn}" if turn is not None else "the history"
        d = v.by_id.get(carrier) if carrier else None
        summarized = d is not None and d.status == Status.SUMMARIZED
        ev: dict[str, object] = {"constraints": sents, "turn": turn}
        if d is not None:
            ev.update(status=d.status.value, reason=d.reason.value)
        what = (
            f"the user constraint {short(sents[0])!r}"
            if len(sents) == 1
            else f"{len(sents)} user constraints ({short(sents[0], 40)!r}, …)"
        )
        verb = "survive" if len(sents) > 1 else "survives"
        out.append(
            finding(
                "must_have_lost",
                "warning",
                f"{what} from {origin} "
                + (
                    f"{verb} only in a summary"
                    if summarized
                    else f"{'are' if len(sents) > 1 else 'is'} missing from the prompt"
                )
                + (f" ({carrier} was {d.status.value})" if d is not None else ""),
                [carrier] if carrier else [],
                ev,
            )
        )
    return out


# --------------------------------------------------------------------------- budget_flooded

_ROOM = frozenset({Reason.NO_ROOM, Reason.AFTER_BREAK, Reason.PARTITION_FULL})


def budget_flooded(v: TraceView) -> list[Finding]:
    out: list[Finding] = []
    budget = v.budget
    kept = [d for d in v.decisions if d.status in IN_PROMPT]
    if budget <= 0 or not v.window_known:
        # no window to be flooded (an import of an unknown model): only the noise check
        out.extend(_noise(v, kept))
        return out
    starved = [d for d in v.decisions if d.status in LOST and d.reason in _ROOM]
    for d in kept:
        share = d.tokens_after / budget
        if share <= v.options.flood_packet_share:
            continue
        crowded = [
            x.packet_id for x in starved if x.rank is None or d.rank is None or x.rank > d.rank
        ]
        msg = (
            f"{d.packet_id} ({d.kind}) takes {d.tokens_after:,} of the {budget:,}-token "
            f"budget ({share:.0%})"
        )
        if crowded:
            msg += f"; {len(crowded)} packet(s) were then dropped for room ({id_list(crowded, 3)})"
        out.append(
            finding(
                "budget_flooded",
                "warning" if crowded else "info",
                msg,
                [d.packet_id, *crowded],
                {
                    "tokens": d.tokens_after,
                    "budget": budget,
                    "share": round(share, 4),
                    "crowded_out": crowded,
                },
            )
        )
    by_kind: dict[str, list[str]] = defaultdict(list)
    tokens_by_kind: dict[str, int] = defaultdict(int)
    for d in kept:
        by_kind[d.kind].append(d.packet_id)
        tokens_by_kind[d.kind] += d.tokens_after
    for kind, ids in by_kind.items():
        share = tokens_by_kind[kind] / budget
        # a kind filling the window matters when it pushed out something of another kind
        others = [x.packet_id for x in starved if x.kind != kind]
        if len(ids) > 1 and share > v.options.flood_kind_share and others:
            out.append(
                finding(
                    "budget_flooded",
                    "warning",
                    f"{len(ids)} {kind} packets take {tokens_by_kind[kind]:,} of the "
                    f"{budget:,}-token budget ({share:.0%}) while {id_list(others, 3)} "
                    f"{'was' if len(others) == 1 else 'were'} dropped for room",
                    [*ids, *others],
                    {
                        "kind": kind,
                        "tokens": tokens_by_kind[kind],
                        "share": round(share, 4),
                        "crowded_out": others,
                    },
                )
            )
    out.extend(_noise(v, kept))
    return out


def _noise(v: TraceView, kept: list[Decision]) -> list[Finding]:
    rows: list[tuple[Decision, NoiseProfile, float, int]] = []
    total_noise = 0
    for d in kept:
        if v.kind(d.packet_id) in TRUSTED_KINDS or d.packet_id == INSTRUCTIONS_ID:
            continue
        content = v.content(d.packet_id)
        prof = strip_noise(content) if content else None
        if prof is None or not prof.any:
            continue
        full, clean = v.counter.count_many([content, prof.clean])
        if full <= 0 or d.tokens_before <= 0:
            continue
        share = max(full - clean, 0) / full
        # a truncated packet carries only part of its noise into the prompt
        noise = round(max(full - clean, 0) * d.tokens_after / d.tokens_before)
        total_noise += noise
        if noise >= v.options.noise_min_tokens and share >= v.options.noise_share:
            rows.append((d, prof, share, noise))
    prompt_share = round(total_noise / max(v.result.totals.used, 1), 4)
    return [
        finding(
            "budget_flooded",
            "warning",
            f"{d.packet_id} is {share:.0%} tool-log noise ({prof.describe()}): "
            f"about {noise:,} tokens in the prompt could be collapsed",
            [d.packet_id],
            {
                "noise_tokens": noise,
                "share": round(share, 4),
                "prompt_noise_share": prompt_share,
                "repeated_lines": prof.repeated_lines,
                "ansi": prof.ansi,
                "carriage_returns": prof.carriage_returns,
                "backspaces": prof.backspaces,
                "spinner_lines": prof.spinner_lines,
            },
        )
        for d, prof, share, noise in rows
    ]


# --------------------------------------------------------------------------- greedy_waste

_FILL_REASONS = frozenset(
    {
        Reason.FITS,
        Reason.NO_ROOM,
        Reason.AFTER_BREAK,
        Reason.NOT_IN_OPTIMAL_SET,
        Reason.TYPE_NOT_RENDERED,
        Reason.TRUNCATED_BY_COMPRESS,
        Reason.REMOVED_BY_COMPRESS,
    }
)
_NOT_SELECTED = frozenset({Reason.NO_ROOM, Reason.AFTER_BREAK, Reason.NOT_IN_OPTIMAL_SET})
_DEFAULT_FILL = {"hello-agents": "skip", "hello-agents-book": "break"}


#: Reasons a packet gets before the fill, whatever the fill does (or for being kept).
_NOT_FOR_ROOM = frozenset(
    {
        Reason.MUST_KEEP,
        Reason.FITS,
        Reason.BELOW_MIN_RELEVANCE,
        Reason.HISTORY_LIMIT,
        Reason.NOISE,
        Reason.TYPE_NOT_RENDERED,
        Reason.DUPLICATE,
        Reason.EMPTY,
    }
)


def greedy_waste(v: TraceView) -> list[Finding]:
    fill = v.config.fill or _DEFAULT_FILL.get(v.config.preset)
    if fill not in ("skip", "break"):
        return []
    if all(d.reason in _NOT_FOR_ROOM for d in v.decisions):
        # nothing was left out, cut or summarized for room: every packet the fill saw is in
        # the prompt whole, so no fill could add one (the optimal re-run would be the same)
        return []
    if v.config.preset == "ctxscope" and v.reproduces:
        alt = rerun_outcome(v.trace, {"fill": "optimal"})
        if alt is not None:
            return _waste_vs_rerun(v, fill, alt)
    return _waste_vs_knapsack(v, fill)


def _waste_vs_rerun(v: TraceView, fill: str, alt: ctxscope.Outcome) -> list[Finding]:
    mine = {d.packet_id for d in v.decisions if d.status in IN_PROMPT}
    theirs = {i for i, s in zip(alt.ids, alt.statuses, strict=True) if s in IN_PROMPT}
    score = {d.packet_id: d.score or 0.0 for d in v.decisions}
    only_theirs, only_mine = theirs - mine, mine - theirs
    added = [i for i in alt.ids if i in only_theirs]
    removed = [d.packet_id for d in v.decisions if d.packet_id in only_mine]
    g_score = sum(score.get(i, 0.0) for i in sorted(mine))  # one order: the same float every run
    o_score = sum((x or 0.0) for i, x in zip(alt.ids, alt.scores, strict=True) if i in theirs)
    capacity = v.budget
    return _waste_finding(
        v,
        fill,
        capacity,
        v.result.totals.used,
        alt.used,
        g_score,
        o_score,
        added,
        removed,
        {"fill": "optimal"},
    )


def _fill_items(v: TraceView) -> list[Decision]:
    """The decisions the fill chose among: scored, decided by the fill, not the
    instructions."""
    return [
        d
        for d in v.decisions
        if d.score is not None
        and d.reason in _FILL_REASONS
        and d.packet_id != INSTRUCTIONS_ID
        and d.kind not in ("instructions", "system_instruction")
    ]


def _fixed_tokens(v: TraceView, fill_ids: set[str]) -> int:
    """The tokens the prompt spends outside the fill (neither lost, filtered nor cut by the
    history limit)."""
    return sum(
        d.tokens_before
        for d in v.decisions
        if d.packet_id not in fill_ids
        and d.status not in LOST
        and d.status != Status.FILTERED
        and d.reason != Reason.HISTORY_LIMIT
    )


def _waste_vs_knapsack(v: TraceView, fill: str) -> list[Finding]:
    items = _fill_items(v)
    if not items:
        return []
    fixed = _fixed_tokens(v, {d.packet_id for d in items})
    selected = [d for d in items if d.reason not in _NOT_SELECTED]
    greedy_used = sum(d.tokens_before for d in selected)
    capacity = max(v.budget - fixed, greedy_used)
    res = knapsack(
        [d.tokens_before for d in items],
        [max(d.score or 0.0, 0.0) for d in items],
        capacity,
        v.options.knapsack_max_cells,
    )
    chosen = {items[i].packet_id for i in res.chosen}
    greedy = {d.packet_id for d in selected}
    g_score = sum(d.score or 0.0 for d in selected)
    only_chosen, only_greedy = chosen - greedy, greedy - chosen
    added = [d.packet_id for d in items if d.packet_id in only_chosen]
    removed = [d.packet_id for d in items if d.packet_id in only_greedy]
    return _waste_finding(
        v,
        fill,
        capacity,
        greedy_used,
        res.weight,
        g_score,
        res.value,
        added,
        removed,
        None,
        unit=res.unit,
    )


def _waste_finding(
    v: TraceView,
    fill: str,
    capacity: int,
    greedy_used: int,
    optimal_used: int,
    g_score: float,
    o_score: float,
    added: list[str],
    removed: list[str],
    fix: dict[str, object] | None,
    unit: int = 1,
) -> list[Finding]:
    gain = o_score - g_score
    if not added or gain <= 1e-9:
        return []
    greedy_unused = max(capacity - greedy_used, 0)
    more = optimal_used - greedy_used
    rel_gain = gain / g_score if g_score > 0 else float("inf")
    if rel_gain < v.options.waste_min_score_gain and more < v.options.waste_min_tokens:
        return []
    severity: Severity = (
        "warning"
        if greedy_unused >= v.options.waste_warn_share * capacity
        and more >= v.options.waste_min_tokens
        else "info"
    )
    how = (
        "stopped at the first packet that did not fit"
        if fill == "break"
        else "skipped what did not fit"
    )
    spend = (
        f"{more:+,} tokens"
        if more > 0
        else "on no more tokens"
        if more == 0
        else f"on {-more:,} fewer tokens"
    )
    msg = (
        f"the {fill} fill {how} and left {greedy_unused:,} of {capacity:,} tokens unused; "
        f"the optimal fill would add {id_list(added, 3)} (score {g_score:.2f} → {o_score:.2f}, "
        f"{spend})"
    )
    return [
        finding(
            "greedy_waste",
            severity,
            msg,
            added + removed,
            {
                "fill": fill,
                "capacity": capacity,
                "greedy_used": greedy_used,
                "optimal_used": optimal_used,
                "greedy_score": round(g_score, 6),
                "optimal_score": round(o_score, 6),
                "added": added,
                "removed": removed,
                "token_unit": unit,
            },
            fix,
        )
    ]
