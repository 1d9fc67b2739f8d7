"""The ``hello-agents-book`` preset: the ContextBuilder printed in the hello-agents tutorial, ch. 9.

Many users learn context building from that listing (DESIGN §4.2), so this preset does what
it prints, quirks included, and records each quirk in the decisions:

- tokens are estimated as CJK characters + 1.3 × whitespace words (``book-heuristic``);
- the last 5 history messages become one packet each (``builder:history:K``), relevance 0.6,
  counted without their ``role: `` prefix;
- a relevance of exactly 0.5 (the default) is replaced by the Jaccard overlap of content and
  query words; any other caller value is kept (clipped to [0, 1]);
- system instructions are always kept; if they leave no budget nothing else is considered;
- the fill stops at the first packet that does not fit (break), so smaller ones after it
  are never tried;
- compression keeps whole blank-line blocks, cuts the first that does not fit by a
  characters-per-token estimate (only if more than 50 tokens remain) and appends a marker;
  the result can still exceed the budget, and ``[Task]``/``[Output]`` can be lost;
- there is no ``[State]``: state packets land in ``[Context]``.

``budget_left`` in a decision is the budget remaining once that decision was applied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime

from ctxcore.errors import InputError
from ctxcore.models import (
    BuildResult,
    CapturedInput,
    Config,
    Decision,
    Reason,
    Status,
    Totals,
)
from ctxcore.pipeline._hello_shared import (
    Renderer,
    Section,
    as_utc,
    classify_span,
    decision,
    fmt_tokens,
    lost_sections,
    partitions_from_sections,
    words,
)
from ctxcore.pipeline.common import (
    INSTRUCTIONS_ID,
    Candidate,
    ReportParts,
    Summarizer,
    Timer,
    finish_parts,
    history_id,
)
from ctxcore.tokens import TOKENIZERS, TokenCounter

NAME = "hello-agents-book"
VERSION = "book-ch9"

BOOK_HISTORY_LIMIT = 5
DEFAULTS: dict[str, object] = {
    "max_tokens": 3000,
    "reserve_ratio": 0.2,
    "min_relevance": 0.1,
    "enable_compression": True,
    "recency_weight": 0.3,
    "relevance_weight": 0.7,
    "history_limit": BOOK_HISTORY_LIMIT,
}
UNSUPPORTED = (
    "output_reserve",
    "safety_margin",
    "priority_weight",
    "recency_tau_hours",
    "fill",
    "partition_budgets",
    "degrade",
)
WEIGHT_TOLERANCE = 1e-9
DEFAULT_RELEVANCE = 0.5
HISTORY_RELEVANCE = 0.6
SYSTEM_TYPE = "system_instruction"
EVIDENCE_TYPES = frozenset({"rag_result", "knowledge"})
MIN_TRUNCATE_TOKENS = 50
MARKER = "\n[... 内容已压缩 ...]"
OUTPUT_BLOCK = "[Output]\n请基于以上信息,提供准确、有据的回答。"
PARTITION_NAMES = (
    "[Role & Policies]",
    "[Task]",
    "[State]",
    "[Evidence]",
    "[Context]",
    "[Output]",
)


def partition_of(kind: str) -> str:
    if kind == SYSTEM_TYPE:
        return "[Role & Policies]"
    if kind in EVIDENCE_TYPES:
        return "[Evidence]"
    return "[Context]"


# --------------------------------------------------------------------------- config


def resolve(config: Config, input: CapturedInput) -> Config:
    """Fill the listing's defaults; the two weights must sum to 1."""
    given = [k for k in UNSUPPORTED if getattr(config, k) is not None]
    if given:
        raise InputError(
            f"preset hello-agents-book has no {', '.join(given)} (the tutorial's listing "
            "has max_tokens, reserve_ratio, min_relevance, enable_compression and the two "
            "weights); remove them from the config or use preset ctxscope"
        )
    if config.tokenizer is not None and config.tokenizer not in TOKENIZERS:
        raise InputError(
            f"unknown tokenizer {config.tokenizer!r} in config; choose one of "
            f"{', '.join(TOKENIZERS)}"
        )
    updates: dict[str, object] = {k: v for k, v in DEFAULTS.items() if getattr(config, k) is None}
    rel, rec = config.relevance_weight, config.recency_weight
    # One weight given: the other is its complement (the listing requires the sum to be 1).
    if rel is not None and rec is None:
        updates["recency_weight"] = 1.0 - rel
    elif rec is not None and rel is None:
        updates["relevance_weight"] = 1.0 - rec
    if config.tokenizer is None:
        updates["tokenizer"] = "book-heuristic"
    cfg = config.model_copy(update=updates)
    assert cfg.relevance_weight is not None and cfg.recency_weight is not None
    total = cfg.relevance_weight + cfg.recency_weight
    if abs(total - 1.0) > WEIGHT_TOLERANCE:
        raise InputError(
            f"config: relevance_weight {cfg.relevance_weight!r} + recency_weight "
            f"{cfg.recency_weight!r} = {total:.6g}; preset hello-agents-book requires them to "
            "sum to 1 — change one of them"
        )
    return cfg


# --------------------------------------------------------------------------- gather


@dataclass(frozen=True, slots=True)
class Gathered:
    cands: list[Candidate]
    relevance: list[float]  # after the listing's clipping / defaults, before recomputation
    history_cut: list[Decision]
    notes: dict[str, list[str]]


def gather(input: CapturedInput, config: Config, counter: TokenCounter) -> Gathered:
    assert config.history_limit is not None
    now = input.now
    cands: list[Candidate] = []
    rel: list[float] = []
    notes: dict[str, list[str]] = {}
    history_cut: list[Decision] = []
    if input.system_instructions:
        cands.append(
            Candidate(
                id=INSTRUCTIONS_ID,
                kind=SYSTEM_TYPE,
                content=input.system_instructions,
                tokens=counter.count(input.system_instructions),
                timestamp=now,
                order=len(cands),
                builder_made=True,
            )
        )
        rel.append(1.0)
    limit = config.history_limit
    history = input.history
    keep_from = max(len(history) - limit, 0)
    for i, m in enumerate(history[:keep_from]):
        history_cut.append(
            decision(
                packet_id=m.id or f"history:{i}",
                kind="conversation_history",
                status=Status.DROPPED,
                reason=Reason.HISTORY_LIMIT,
                reason_text=(
                    f"message {i + 1} of {len(history)} is older than the last {limit} "
                    "the listing keeps"
                ),
                partition="[Context]",
                relevance=None,
                recency=None,
                score=None,
                rank=None,
                tokens_before=counter.count(m.content),
                tokens_after=0,
                budget_left=None,
                notes=[],
            )
        )
    for k, m in enumerate(history[keep_from:]):
        pid = history_id(k)
        cands.append(
            Candidate(
                id=pid,
                kind="conversation_history",
                content=f"{m.role}: {m.content}",
                tokens=counter.count(m.content),
                timestamp=m.timestamp or now,
                order=len(cands),
                builder_made=True,
                metadata={"role": m.role, "message_id": m.id},
            )
        )
        rel.append(HISTORY_RELEVANCE)
        notes[pid] = [f"tokens counted on the message content only ('{m.role}: ' not charged)"]
    for p in input.packets:
        tokens = p.tokens if p.tokens is not None else counter.count(p.content)
        r = DEFAULT_RELEVANCE if p.relevance is None else p.relevance
        clipped = max(0.0, min(1.0, r))
        if clipped != r:
            notes.setdefault(p.id, []).append(f"relevance {r:g} clipped to {clipped:g}")
        cands.append(
            Candidate(
                id=p.id,
                kind=p.kind,
                content=p.content,
                tokens=tokens,
                timestamp=p.timestamp or now,
                relevance=p.relevance,
                priority=p.priority,
                must_keep=p.must_keep,
                order=len(cands),
                metadata=p.metadata,
            )
        )
        rel.append(clipped)
    return Gathered(cands, rel, history_cut, notes)


# --------------------------------------------------------------------------- score


def jaccard(content: str, query: str) -> float:
    q = set(query.lower().split())
    if not q:
        return 0.0
    c = words(content)
    union = c | q
    return len(c & q) / len(union) if union else 0.0


def recency(ts: datetime, now: datetime) -> float:
    age_hours = (as_utc(now) - as_utc(ts)).total_seconds() / 3600
    return max(0.1, min(1.0, math.exp(-0.1 * age_hours / 24)))


@dataclass(frozen=True, slots=True)
class Scored:
    relevance: list[float | None]
    recency: list[float | None]
    score: list[float | None]
    recomputed: list[bool]


def score(
    cands: list[Candidate], given: list[float], query: str, now: datetime, config: Config
) -> Scored:
    """Relevance (Jaccard at exactly 0.5), recency, combined score; None for system packets."""
    assert config.relevance_weight is not None and config.recency_weight is not None
    rel: list[float | None] = []
    rec: list[float | None] = []
    sc: list[float | None] = []
    recomputed: list[bool] = []
    for c, r in zip(cands, given, strict=True):
        if c.kind == SYSTEM_TYPE:
            rel.append(r)
            rec.append(None)
            sc.append(None)
            recomputed.append(False)
            continue
        again = r == DEFAULT_RELEVANCE
        if again:
            r = jaccard(c.content, query)
        assert c.timestamp is not None
        t = recency(c.timestamp, now)
        rel.append(r)
        rec.append(t)
        sc.append(config.relevance_weight * r + config.recency_weight * t)
        recomputed.append(again)
    return Scored(rel, rec, sc, recomputed)


# --------------------------------------------------------------------------- select


@dataclass(frozen=True, slots=True)
class Outcome:
    status: Status
    reason: Reason
    text: str
    budget_left: int
    rank: int | None = None


@dataclass
class Selection:
    selected: list[int]
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    system_tokens: int = 0
    used: int = 0


def select(cands: list[Candidate], s: Scored, budget: int, min_relevance: float) -> Selection:
    system = [i for i, c in enumerate(cands) if c.kind == SYSTEM_TYPE]
    others = [i for i, c in enumerate(cands) if c.kind != SYSTEM_TYPE]
    system_tokens = sum(cands[i].tokens for i in system)
    remaining = budget - system_tokens
    sel = Selection(selected=list(system), system_tokens=system_tokens)
    for i in system:
        sel.outcomes[i] = Outcome(
            Status.KEPT,
            Reason.MUST_KEEP,
            f"system instructions are always kept: {fmt_tokens(cands[i].tokens)} tokens",
            remaining,
        )
    if remaining <= 0:
        for i in others:
            sel.outcomes[i] = Outcome(
                Status.DROPPED,
                Reason.BUDGET_EXHAUSTED_BY_SYSTEM,
                f"system instructions use {fmt_tokens(system_tokens)} of "
                f"{fmt_tokens(budget)} tokens: the listing considers nothing else",
                remaining,
            )
        sel.used = system_tokens
        return sel
    passing: list[int] = []
    for i in others:
        r = s.relevance[i]
        assert r is not None
        if r >= min_relevance:
            passing.append(i)
        else:
            sel.outcomes[i] = Outcome(
                Status.FILTERED,
                Reason.BELOW_MIN_RELEVANCE,
                f"relevance {r:.2f} is below min_relevance {min_relevance:.2f}",
                remaining,
            )
    order = sorted(passing, key=lambda i: s.score[i] or 0.0, reverse=True)
    used = system_tokens
    stopped: Candidate | None = None
    for rank, i in enumerate(order, start=1):
        c = cands[i]
        left = budget - used
        if stopped is not None:
            sel.outcomes[i] = Outcome(
                Status.DROPPED,
                Reason.AFTER_BREAK,
                f"never tried: the fill stopped at {stopped.id} (break); this one needs "
                f"{fmt_tokens(c.tokens)} tokens, {fmt_tokens(left)} left",
                left,
                rank,
            )
        elif used + c.tokens <= budget:
            used += c.tokens
            sel.selected.append(i)
            sel.outcomes[i] = Outcome(
                Status.KEPT,
                Reason.FITS,
                f"fits: {fmt_tokens(c.tokens)} tokens, {fmt_tokens(budget - used)} left",
                budget - used,
                rank,
            )
        else:
            stopped = c
            sel.outcomes[i] = Outcome(
                Status.DROPPED,
                Reason.NO_ROOM,
                f"needs {fmt_tokens(c.tokens)} tokens, {fmt_tokens(left)} left; the fill "
                "stops here (break) and tries nothing after it",
                left,
                rank,
            )
    sel.used = used
    return sel


# --------------------------------------------------------------------------- structure


def structure(
    cands: list[Candidate], selected: list[int], query: str
) -> tuple[str, tuple[Section, ...]]:
    chosen = [cands[i] for i in selected]
    role = [c for c in chosen if c.kind == SYSTEM_TYPE]
    evidence = [c for c in chosen if c.kind != SYSTEM_TYPE and c.kind in EVIDENCE_TYPES]
    context = [c for c in chosen if c.kind != SYSTEM_TYPE and c.kind not in EVIDENCE_TYPES]
    r = Renderer("\n\n")

    def body(header: str, items: list[Candidate], sep: str) -> None:
        r.text(header)
        for j, c in enumerate(items):
            if j:
                r.text(sep)
            r.packet(c.id, c.content)

    if role:
        with r.section("[Role & Policies]"):
            body("[Role & Policies]\n", role, "\n")
    with r.section("[Task]"):
        r.text(f"[Task]\n{query}")
    if evidence:
        with r.section("[Evidence]"):
            body("[Evidence]\n", evidence, "\n---\n")
    if context:
        with r.section("[Context]"):
            body("[Context]\n", context, "\n")
    with r.section("[Output]"):
        r.text(OUTPUT_BLOCK)
    return r.result()


# --------------------------------------------------------------------------- compress


@dataclass(frozen=True, slots=True)
class Compressed:
    prompt: str
    cut: int  # the prompt is structured[:cut] (+ MARKER when marked)
    before: int
    ran: bool
    marked: bool
    stop_left: int | None  # budget left when the first block did not fit


def compress(text: str, budget: int, enabled: bool, counter: TokenCounter) -> Compressed:
    before = counter.count(text)
    if not enabled or before <= budget:
        return Compressed(text, len(text), before, False, False, None)
    pos = 0
    current = 0
    kept_end = 0
    for block in text.split("\n\n"):
        n = counter.count(block)
        if current + n <= budget:
            current += n
            kept_end = pos + len(block)
            pos += len(block) + 2
            continue
        left = budget - current
        if left > MIN_TRUNCATE_TOKENS:
            cpt = len(block) / n if n > 0 else 4
            max_chars = int(left * cpt)
            cut = pos + len(block[:max_chars])
            return Compressed(text[:cut] + MARKER, cut, before, True, True, left)
        return Compressed(text[:kept_end], kept_end, before, True, False, left)
    return Compressed(text, len(text), before, True, False, None)


# --------------------------------------------------------------------------- run


def run(
    input: CapturedInput,
    config: Config,
    counter: TokenCounter,
    summarizer: Summarizer | None = None,
) -> BuildResult:
    """The tutorial listing's build() on a captured input, with a decision per candidate."""
    del summarizer  # the listing truncates, it never summarizes
    assert config.max_tokens is not None and config.min_relevance is not None
    assert config.enable_compression is not None
    timer = Timer()
    budget = config.max_tokens
    with timer.stage("gather"):
        g = gather(input, config, counter)
    with timer.stage("score"):
        s = score(g.cands, g.relevance, input.query, input.now, config)
    with timer.stage("select"):
        sel = select(g.cands, s, budget, config.min_relevance)
    with timer.stage("structure"):
        structured, sections = structure(g.cands, sel.selected, input.query)
    with timer.stage("compress"):
        comp = compress(structured, budget, config.enable_compression, counter)
    with timer.stage("report"):
        parts = report(input, config, counter, budget, g, s, sel, sections, comp)
    return finish_parts(parts, timer)


def report(
    input: CapturedInput,
    config: Config,
    counter: TokenCounter,
    budget: int,
    g: Gathered,
    s: Scored,
    sel: Selection,
    sections: tuple[Section, ...],
    comp: Compressed,
) -> ReportParts:
    """Decisions, partitions, totals and warnings from what the stages did."""
    cands = g.cands
    spans = {sp.packet_id: sp for sec in sections for sp in sec.spans}
    decisions: list[Decision] = []
    items: dict[str, int] = {}
    cut_done = False
    for i, c in enumerate(cands):
        if not cut_done and c.kind != SYSTEM_TYPE:
            decisions.extend(g.history_cut)
            cut_done = True
        out = sel.outcomes[i]
        notes = list(g.notes.get(c.id, []))
        if s.recomputed[i]:
            why = (
                "no relevance given: the default 0.5"
                if c.relevance is None
                else "caller relevance 0.5 equals the default and"
            )
            notes.append(f"{why} is replaced by the Jaccard overlap {s.relevance[i]:.4g}")
        status, reason, text, left = out.status, out.reason, out.text, out.budget_left
        after = c.tokens if status == Status.KEPT else 0
        partition = partition_of(c.kind)
        span = spans.get(c.id)
        if span is not None and comp.ran:
            fate = classify_span(span, c.content, comp.cut)
            if fate.status != Status.KEPT and comp.stop_left is not None:
                left = comp.stop_left
            how = (
                f"the listing cut its block to the {fmt_tokens(left)} tokens left and "
                "added a marker"
                if comp.marked
                else f"{fmt_tokens(left)} tokens left, not more than {MIN_TRUNCATE_TOKENS}: the "
                "rest is dropped"
            )
            if fate.status == Status.TRUNCATED:
                after = counter.count(fate.kept_text)
                status, reason = Status.TRUNCATED, Reason.TRUNCATED_BY_COMPRESS
                text = (
                    f"cut by compression to {fmt_tokens(after)} of {fmt_tokens(c.tokens)} "
                    f"tokens ({how})"
                )
            elif fate.status == Status.DROPPED:
                after = 0
                status, reason = Status.DROPPED, Reason.REMOVED_BY_COMPRESS
                text = (
                    f"selected ({fmt_tokens(c.tokens)} tokens) but removed by compression ({how})"
                )
        if status in (Status.KEPT, Status.TRUNCATED):
            items[partition] = items.get(partition, 0) + 1
        decisions.append(
            decision(
                packet_id=c.id,
                kind=c.kind,
                status=status,
                reason=reason,
                reason_text=text,
                partition=partition,
                relevance=s.relevance[i],
                recency=s.recency[i],
                score=s.score[i],
                rank=out.rank,
                tokens_before=c.tokens,
                tokens_after=after,
                budget_left=left,
                notes=notes,
            )
        )
    if not cut_done:
        decisions.extend(g.history_cut)
    warnings: list[str] = []
    if sel.system_tokens >= budget and sel.system_tokens > 0:
        warnings.append(
            f"system instructions alone exceed the budget ({fmt_tokens(sel.system_tokens)} "
            f">= {fmt_tokens(budget)} tokens): nothing else was considered"
        )
    used = counter.count(comp.prompt)
    if input.tools:
        warnings.append(
            f"{len(input.tools)} tool definition(s) are not in the prompt: the listing has no "
            "notion of tools, though they cost tokens in the real request"
        )
    if comp.ran:
        warnings.append(
            f"context over budget ({fmt_tokens(comp.before)} > {fmt_tokens(budget)} tokens): "
            "the listing kept whole blocks and "
            + ("cut the next one, adding a marker" if comp.marked else "dropped the rest")
        )
        warnings.extend(lost_sections(sections, comp.cut, ("[Task]", "[Output]")))
    if used > budget:
        warnings.append(
            f"the final prompt has {fmt_tokens(used)} tokens, over the budget of "
            f"{fmt_tokens(budget)} (the listing's cut is an estimate and its marker costs "
            "tokens too)"
            if comp.ran
            else f"the final prompt has {fmt_tokens(used)} tokens, over the budget of "
            f"{fmt_tokens(budget)}"
        )
    partitions = partitions_from_sections(
        sections, comp.prompt, comp.cut, counter.count, PARTITION_NAMES, items
    )
    assert config.tokenizer is not None
    totals = Totals(
        window=budget,
        output_reserve=0,
        safety_margin=0,
        available=budget,
        used=used,
        tokenizer=config.tokenizer,
    )
    must_keep = [c.id for c in cands if c.kind == SYSTEM_TYPE]
    return ReportParts(comp.prompt, decisions, partitions, totals, must_keep, warnings)
