"""The ``hello-agents`` preset: exactly what ``hello_agents==0.2.8``'s ``ContextBuilder`` does.

Byte-identical prompts are the bar (tests compare against the real package run in its own
venv by ``scripts/ha_oracle.py``). Its quirks are reproduced on purpose and each shows up in
the decisions, because seeing them is why a user picks this preset:

- ``count_tokens`` calls ``tiktoken``'s ``encode``, which raises on text spelling a special
  token (``<|endoftext|>``); the package then falls back to ``len(text) // 4``.
- a packet whose token count is 0 is recounted; any other caller count is trusted;
- the last 10 history messages become ONE packet (``builder:history``);
- relevance is recomputed for every packet (caller values are overwritten) as the share of
  query words found in the content; recency ``exp(-age_s / 3600)``; score ``0.7 r + 0.3 t``;
- the sort runs over all packets, instructions are then taken first in their own order, the
  others are filtered by ``min_relevance`` and filled skipping what does not fit;
- selected packets of a type no section renders use budget and appear nowhere;
- compression keeps whole lines while they fit and stops at the first that does not — no
  marker, and ``[Task]`` or ``[Output]`` can be lost.

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
    PackageCounter,
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
    HISTORY_ID,
    INSTRUCTIONS_ID,
    Candidate,
    ReportParts,
    Summarizer,
    Timer,
    finish_parts,
)
from ctxcore.tokens import TOKENIZERS, TokenCounter

NAME = "hello-agents"
VERSION = "0.2.8"

PACKAGE_HISTORY_LIMIT = 10
DEFAULTS: dict[str, object] = {
    "max_tokens": 8000,
    "reserve_ratio": 0.15,
    "min_relevance": 0.3,
    "enable_compression": True,
    "history_limit": PACKAGE_HISTORY_LIMIT,
}
#: Knobs the package does not have; setting one is an error rather than silently ignored.
UNSUPPORTED = (
    "output_reserve",
    "safety_margin",
    "relevance_weight",
    "recency_weight",
    "priority_weight",
    "recency_tau_hours",
    "fill",
    "partition_budgets",
    "degrade",
)

RELEVANCE_WEIGHT = 0.7
RECENCY_WEIGHT = 0.3
TAU_SECONDS = 3600

EVIDENCE_TYPES = frozenset({"related_memory", "knowledge_base", "retrieval", "tool_result"})
PARTITION_OF = {
    "instructions": "[Role & Policies]",
    "task_state": "[State]",
    "history": "[Context]",
    **{t: "[Evidence]" for t in EVIDENCE_TYPES},
}
PARTITION_NAMES = (
    "[Role & Policies]",
    "[Task]",
    "[State]",
    "[Evidence]",
    "[Context]",
    "[Output]",
)
_INDENT = " " * 28
OUTPUT_BLOCK = (
    "[Output]\n"
    f"{_INDENT}请按以下格式回答：\n"
    f"{_INDENT}1. 结论（简洁明确）\n"
    f"{_INDENT}2. 依据（列出支撑证据及来源）\n"
    f"{_INDENT}3. 风险与假设（如有）\n"
    f"{_INDENT}4. 下一步行动建议（如适用）"
)


# --------------------------------------------------------------------------- config


def resolve(config: Config, input: CapturedInput) -> Config:
    """Fill the package's defaults; reject knobs the package does not have."""
    given = [k for k in UNSUPPORTED if getattr(config, k) is not None]
    if given:
        raise InputError(
            f"preset hello-agents has no {', '.join(given)} (the 0.2.8 package fixes "
            "score = 0.7 × relevance + 0.3 × recency and a skip fill); remove "
            f"{'it' if len(given) == 1 else 'them'} from the config or use preset ctxscope"
        )
    if config.tokenizer is not None and config.tokenizer not in TOKENIZERS:
        raise InputError(
            f"unknown tokenizer {config.tokenizer!r} in config; choose one of "
            f"{', '.join(TOKENIZERS)}"
        )
    updates: dict[str, object] = {k: v for k, v in DEFAULTS.items() if getattr(config, k) is None}
    if config.tokenizer is None:
        updates["tokenizer"] = "cl100k_base"
    return config.model_copy(update=updates)


def budget_of(config: Config) -> int:
    assert config.max_tokens is not None and config.reserve_ratio is not None
    return int(config.max_tokens * (1 - config.reserve_ratio))


# --------------------------------------------------------------------------- gather


@dataclass(frozen=True, slots=True)
class Gathered:
    """Candidates in the package's gather order, plus history messages cut by the limit."""

    cands: list[Candidate]
    history_cut: list[Decision]
    notes: dict[str, list[str]]


def gather(input: CapturedInput, config: Config, pc: PackageCounter) -> Gathered:
    assert config.history_limit is not None
    now = input.now
    cands: list[Candidate] = []
    notes: dict[str, list[str]] = {}
    history_cut: list[Decision] = []

    def add(c: Candidate) -> None:
        cands.append(c)

    kept = input.history[max(len(input.history) - config.history_limit, 0) :]
    history_text = "\n".join(f"[{m.role}] {m.content}" for m in kept)
    # Count everything the package counts in one batch (cached by content).
    texts = [input.system_instructions, history_text]
    texts += [p.content for p in input.packets if not p.tokens]
    counted = dict(zip(texts, pc.count_many(texts), strict=True))

    if input.system_instructions:
        add(
            Candidate(
                id=INSTRUCTIONS_ID,
                kind="instructions",
                content=input.system_instructions,
                tokens=counted[input.system_instructions],
                timestamp=now,
                order=len(cands),
                builder_made=True,
            )
        )
    history = input.history
    if history:
        limit = config.history_limit
        keep_from = max(len(history) - limit, 0)
        for i, m in enumerate(history[:keep_from]):
            line = f"[{m.role}] {m.content}"
            history_cut.append(
                decision(
                    packet_id=m.id or f"history:{i}",
                    kind="history",
                    status=Status.DROPPED,
                    reason=Reason.HISTORY_LIMIT,
                    reason_text=(
                        f"message {i + 1} of {len(history)} is older than the last "
                        f"{limit} the package keeps"
                    ),
                    partition="[Context]",
                    relevance=None,
                    recency=None,
                    score=None,
                    rank=None,
                    tokens_before=pc.count(line),
                    tokens_after=0,
                    budget_left=None,
                    notes=[],
                )
            )
        if kept:
            add(
                Candidate(
                    id=HISTORY_ID,
                    kind="history",
                    content=history_text,
                    tokens=counted[history_text],
                    timestamp=now,
                    order=len(cands),
                    builder_made=True,
                    metadata={"count": len(kept)},
                )
            )
        if limit != PACKAGE_HISTORY_LIMIT:
            notes.setdefault(HISTORY_ID, []).append(
                f"history_limit {limit} differs from the package's fixed "
                f"{PACKAGE_HISTORY_LIMIT}: the package would keep other messages"
            )
    for p in input.packets:
        tokens = p.tokens if p.tokens else counted[p.content]
        if p.tokens == 0:
            notes.setdefault(p.id, []).append("tokens 0 given: the package recounts it")
        elif p.tokens is not None:
            real = pc.count(p.content)
            notes.setdefault(p.id, []).append(
                f"{fmt_tokens(p.tokens)} tokens given by the caller are used as is"
                + ("" if real == p.tokens else f" (the content counts {fmt_tokens(real)})")
            )
        add(
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
    if pc.specials:
        for c in cands:
            tok = pc.special_in(c.content)
            if tok is not None and c.tokens == counted.get(c.content):
                notes.setdefault(c.id, []).append(
                    f"content spells the special token {tok}: the package's tiktoken "
                    f"encode() raises and it falls back to len(text)//4 = "
                    f"{fmt_tokens(c.tokens)} tokens (tiktoken would count "
                    f"{fmt_tokens(pc.counter.count(c.content))})"
                )
    if any(m.must_keep for m in input.packets):
        for p in input.packets:
            if p.must_keep:
                notes.setdefault(p.id, []).append(
                    "must_keep is ignored: the package has no notion of it"
                )
    return Gathered(cands, history_cut, notes)


# --------------------------------------------------------------------------- score


@dataclass(frozen=True, slots=True)
class Scored:
    relevance: list[float]
    recency: list[float]
    score: list[float]
    rank: list[int]  # 1-based position in the package's sort over ALL packets
    overlap: list[int]
    n_query: int


def score(cands: list[Candidate], query: str, now: datetime) -> Scored:
    query_words = set(query.lower().split())
    nq = len(query_words)
    now_utc = as_utc(now)
    rel: list[float] = []
    rec: list[float] = []
    sc: list[float] = []
    ov: list[int] = []
    for c in cands:
        if nq > 0:
            overlap = len(query_words & words(c.content))
            r = overlap / nq
        else:
            overlap, r = 0, 0.0
        assert c.timestamp is not None
        delta = max((now_utc - as_utc(c.timestamp)).total_seconds(), 0)
        t = math.exp(-delta / TAU_SECONDS)
        rel.append(r)
        rec.append(t)
        sc.append(RELEVANCE_WEIGHT * r + RECENCY_WEIGHT * t)
        ov.append(overlap)
    order = sorted(range(len(cands)), key=lambda i: sc[i], reverse=True)
    rank = [0] * len(cands)
    for pos, i in enumerate(order):
        rank[i] = pos + 1
    return Scored(rel, rec, sc, rank, ov, nq)


# --------------------------------------------------------------------------- select


@dataclass(frozen=True, slots=True)
class Outcome:
    status: Status
    reason: Reason
    text: str
    budget_left: int


@dataclass
class Selection:
    selected: list[int]  # candidate indices in the package's selected order
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    used: int = 0


def select(cands: list[Candidate], s: Scored, budget: int, min_relevance: float) -> Selection:
    sel = Selection(selected=[])
    used = 0
    system = [i for i, c in enumerate(cands) if c.kind == "instructions"]
    order = sorted(range(len(cands)), key=lambda i: s.score[i], reverse=True)
    remaining = [i for i in order if cands[i].kind != "instructions"]
    for i in system:
        c = cands[i]
        left = budget - used
        if used + c.tokens <= budget:
            sel.selected.append(i)
            used += c.tokens
            sel.outcomes[i] = Outcome(
                Status.KEPT,
                Reason.FITS,
                f"instructions are placed first: {fmt_tokens(c.tokens)} tokens, "
                f"{fmt_tokens(budget - used)} left",
                budget - used,
            )
        else:
            sel.outcomes[i] = Outcome(
                Status.DROPPED,
                Reason.NO_ROOM,
                f"instructions need {fmt_tokens(c.tokens)} tokens, {fmt_tokens(left)} left: "
                "the package leaves them out without a warning",
                left,
            )
    for i in remaining:
        c = cands[i]
        if s.relevance[i] < min_relevance:
            sel.outcomes[i] = Outcome(
                Status.FILTERED,
                Reason.BELOW_MIN_RELEVANCE,
                f"relevance {s.relevance[i]:.2f} ({s.overlap[i]} of {s.n_query} query words) "
                f"is below min_relevance {min_relevance:.2f}",
                budget - used,
            )
            continue
        left = budget - used
        if used + c.tokens > budget:
            sel.outcomes[i] = Outcome(
                Status.DROPPED,
                Reason.NO_ROOM,
                f"needs {fmt_tokens(c.tokens)} tokens, {fmt_tokens(left)} left; skipped "
                "(the package keeps trying the next ones)",
                left,
            )
            continue
        sel.selected.append(i)
        used += c.tokens
        if c.kind in PARTITION_OF:
            sel.outcomes[i] = Outcome(
                Status.KEPT,
                Reason.FITS,
                f"fits: {fmt_tokens(c.tokens)} tokens, {fmt_tokens(budget - used)} left",
                budget - used,
            )
        else:
            sel.outcomes[i] = Outcome(
                Status.NOT_RENDERED,
                Reason.TYPE_NOT_RENDERED,
                f"selected and charged {fmt_tokens(c.tokens)} tokens, but the package renders "
                f"no section for type {c.kind!r}: it appears nowhere in the prompt",
                budget - used,
            )
    sel.used = used
    return sel


# --------------------------------------------------------------------------- structure


def structure(
    cands: list[Candidate], selected: list[int], query: str
) -> tuple[str, tuple[Section, ...]]:
    chosen = [cands[i] for i in selected]
    r = Renderer("\n\n")
    role = [c for c in chosen if c.kind == "instructions"]
    if role:
        with r.section("[Role & Policies]"):
            r.text("[Role & Policies]\n")
            for j, c in enumerate(role):
                if j:
                    r.text("\n")
                r.packet(c.id, c.content)
    with r.section("[Task]"):
        r.text(f"[Task]\n用户问题：{query}")
    state = [c for c in chosen if c.kind == "task_state"]
    if state:
        with r.section("[State]"):
            r.text("[State]\n关键进展与未决问题：\n")
            for j, c in enumerate(state):
                if j:
                    r.text("\n")
                r.packet(c.id, c.content)
    evidence = [c for c in chosen if c.kind in EVIDENCE_TYPES]
    if evidence:
        with r.section("[Evidence]"):
            r.text("[Evidence]\n事实与引用：\n")
            for c in evidence:
                r.text("\n")
                r.packet(c.id, c.content)
                r.text("\n")
    context = [c for c in chosen if c.kind == "history"]
    if context:
        with r.section("[Context]"):
            r.text("[Context]\n对话历史与背景：\n")
            for j, c in enumerate(context):
                if j:
                    r.text("\n")
                r.packet(c.id, c.content)
    with r.section("[Output]"):
        r.text(OUTPUT_BLOCK)
    return r.result()


# --------------------------------------------------------------------------- compress


@dataclass(frozen=True, slots=True)
class Compressed:
    prompt: str
    cut: int  # the final prompt is structured[:cut]
    before: int  # tokens of the structured prompt (the package's count)
    ran: bool
    stop_tokens: int | None  # tokens of the first line that did not fit
    stop_left: int | None  # budget the line loop had left at that line
    lines_kept: int
    lines_total: int


def compress(text: str, budget: int, enabled: bool, pc: PackageCounter) -> Compressed:
    before = pc.count(text)
    if not enabled or before <= budget:
        return Compressed(text, len(text), before, False, None, None, 0, 0)
    lines = text.split("\n")
    used = 0
    kept = 0
    cut = 0
    stop_tokens: int | None = None
    for line in lines:
        n = pc.count(line)
        if used + n > budget:
            stop_tokens = n
            break
        cut = cut + len(line) + (1 if kept else 0)
        kept += 1
        used += n
    return Compressed(text[:cut], cut, before, True, stop_tokens, budget - used, kept, len(lines))


# --------------------------------------------------------------------------- run


def run(
    input: CapturedInput,
    config: Config,
    counter: TokenCounter,
    summarizer: Summarizer | None = None,
) -> BuildResult:
    """The package's build() on a captured input, with a decision for every candidate."""
    del summarizer  # the package never summarizes
    assert config.min_relevance is not None and config.enable_compression is not None
    assert config.max_tokens is not None
    timer = Timer()
    pc = PackageCounter.for_counter(counter)
    budget = budget_of(config)
    with timer.stage("gather"):
        g = gather(input, config, pc)
    cands = g.cands
    with timer.stage("score"):
        s = score(cands, input.query, input.now)
    with timer.stage("select"):
        sel = select(cands, s, budget, config.min_relevance)
    with timer.stage("structure"):
        structured, sections = structure(cands, sel.selected, input.query)
    with timer.stage("compress"):
        comp = compress(structured, budget, config.enable_compression, pc)
    with timer.stage("report"):
        parts = report(input, config, pc, budget, g, s, sel, sections, comp)
    return finish_parts(parts, timer)


def report(
    input: CapturedInput,
    config: Config,
    pc: PackageCounter,
    budget: int,
    g: Gathered,
    s: Scored,
    sel: Selection,
    sections: tuple[Section, ...],
    comp: Compressed,
) -> ReportParts:
    """Decisions, partitions, totals and warnings from what the stages did."""
    cands = g.cands
    warnings: list[str] = []
    spans = {sp.packet_id: sp for sec in sections for sp in sec.spans}
    decisions: list[Decision] = []
    items: dict[str, int] = {}
    history_done = False
    for i, c in enumerate(cands):
        if c.id == HISTORY_ID:
            decisions.extend(g.history_cut)
            history_done = True
        out = sel.outcomes[i]
        notes = list(g.notes.get(c.id, []))
        if c.relevance is not None:
            notes.append(
                f"caller relevance {c.relevance:g} overwritten with {s.relevance[i]:.4g} "
                "(the package recomputes relevance for every packet)"
            )
        status, reason, text, left = out.status, out.reason, out.text, out.budget_left
        after = c.tokens if status == Status.KEPT else 0
        partition = PARTITION_OF.get(c.kind)
        span = spans.get(c.id)
        if span is not None and status == Status.KEPT and comp.ran:
            fate = classify_span(span, c.content, comp.cut)
            if fate.status != Status.KEPT:
                left = comp.stop_left if comp.stop_left is not None else left
                need = (
                    f"line needs {fmt_tokens(comp.stop_tokens)} tokens, {fmt_tokens(left)} left"
                    if comp.stop_tokens is not None
                    else "budget reached"
                )
            if fate.status == Status.TRUNCATED:
                after = pc.count(fate.kept_text)
                status, reason = Status.TRUNCATED, Reason.TRUNCATED_BY_COMPRESS
                text = (
                    f"cut by compression to {fmt_tokens(after)} of {fmt_tokens(c.tokens)} "
                    f"tokens ({need}); the package cuts at a line without a marker"
                )
            elif fate.status == Status.DROPPED:
                after = 0
                status, reason = Status.DROPPED, Reason.REMOVED_BY_COMPRESS
                text = (
                    f"selected ({fmt_tokens(c.tokens)} tokens) but removed by compression "
                    f"({need}); the package cuts the prompt at a line without a marker"
                )
        if status in (Status.KEPT, Status.TRUNCATED) and partition is not None:
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
                rank=s.rank[i],
                tokens_before=c.tokens,
                tokens_after=after,
                budget_left=left,
                notes=notes,
            )
        )
    if not history_done and g.history_cut:
        at = 1 if cands and cands[0].id == INSTRUCTIONS_ID else 0
        decisions[at:at] = g.history_cut
    used = pc.count(comp.prompt)
    instr = [c for c in cands if c.kind == "instructions"]
    instr_tokens = sum(c.tokens for c in instr)
    if instr_tokens > budget:
        warnings.append(
            f"system instructions alone exceed the budget ({fmt_tokens(instr_tokens)} > "
            f"{fmt_tokens(budget)} tokens)"
        )
    if any(sel.outcomes[i].status == Status.NOT_RENDERED for i in range(len(cands))):
        n = sum(1 for o in sel.outcomes.values() if o.status == Status.NOT_RENDERED)
        wasted = sum(
            cands[i].tokens for i, o in sel.outcomes.items() if o.status == Status.NOT_RENDERED
        )
        warnings.append(
            f"{n} selected packet(s) of types the package never renders used "
            f"{fmt_tokens(wasted)} tokens of budget and appear nowhere in the prompt"
        )
    if input.tools:
        warnings.append(
            f"{len(input.tools)} tool definition(s) are not in the prompt: the package has no "
            "notion of tools, though they cost tokens in the real request"
        )
    if comp.ran:
        warnings.append(
            f"context over budget ({fmt_tokens(comp.before)} > {fmt_tokens(budget)} tokens): "
            f"the package cut it to the first {comp.lines_kept} of {comp.lines_total} lines, "
            "without a marker"
        )
        warnings.extend(lost_sections(sections, comp.cut, ("[Task]", "[Output]")))
    if used > budget:
        warnings.append(
            f"the final prompt has {fmt_tokens(used)} tokens, over the budget of "
            f"{fmt_tokens(budget)}"
        )
    assert config.max_tokens is not None
    partitions = partitions_from_sections(
        sections, comp.prompt, comp.cut, pc.count, PARTITION_NAMES, items
    )
    assert config.tokenizer is not None
    totals = Totals(
        window=config.max_tokens,
        output_reserve=config.max_tokens - budget,
        safety_margin=0,
        available=budget,
        used=used,
        tokenizer=config.tokenizer,
    )
    return ReportParts(comp.prompt, decisions, partitions, totals, [], warnings)
