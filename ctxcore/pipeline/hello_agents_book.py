"""The ``hello-agents-book`` preset: the ContextBuilder printed in the hello-agents tutorial, ch. 9.

Many users learn context building from that listing (docs/design.md, "hello-agents-book"),
so this preset does what it prints, quirks included, and records each quirk in the decisions:

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

The flow and the report are ``_hello_shared.HelloBuilder``'s; ``Listing`` holds the rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from ctxcore.errors import InputError
from ctxcore.knobs import preset_defaults, refused, whole
from ctxcore.models import BuildResult, CapturedInput, Config, Reason, Status
from ctxcore.pipeline._hello_shared import (
    Compressed,
    Gathered,
    HelloBuilder,
    Renderer,
    Section,
    Selected,
    Selection,
    as_utc,
    fmt_tokens,
    history_cut,
    packet_candidate,
    resolve_updates,
    words,
)
from ctxcore.pipeline.common import INSTRUCTIONS_ID, Candidate, Summarizer, history_id
from ctxcore.tokens import TokenCounter

NAME = "hello-agents-book"
VERSION = "book-ch9"

#: the listing's defaults and the knobs it does not have, declared with each knob
#: (docs/design.md, "Knobs")
DEFAULTS: dict[str, object] = preset_defaults(NAME)
UNSUPPORTED = refused(NAME)
#: the listing keeps its last 5 history messages: its ``history_limit`` default
BOOK_HISTORY_LIMIT = whole("history_limit", NAME)
WEIGHT_TOLERANCE = 1e-9
DEFAULT_RELEVANCE = 0.5
HISTORY_RELEVANCE = 0.6
SYSTEM_TYPE = "system_instruction"
EVIDENCE_TYPES = frozenset({"rag_result", "knowledge"})
MIN_TRUNCATE_TOKENS = 50
MARKER = "\n[... 内容已压缩 ...]"
OUTPUT_BLOCK = "[Output]\n请基于以上信息,提供准确、有据的回答。"


def partition_of(kind: str) -> str:
    if kind == SYSTEM_TYPE:
        return "[Role & Policies]"
    if kind in EVIDENCE_TYPES:
        return "[Evidence]"
    return "[Context]"


def listed_relevance(c: Candidate) -> float:
    """The relevance the listing starts from: 1.0 for the system instructions, 0.6 for a
    history message, a packet's own (0.5 when it has none) clipped to [0, 1]."""
    if c.builder_made:
        return 1.0 if c.id == INSTRUCTIONS_ID else HISTORY_RELEVANCE
    r = DEFAULT_RELEVANCE if c.relevance is None else c.relevance
    return max(0.0, min(1.0, r))


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


# --------------------------------------------------------------------------- config


def resolve(config: Config, input: CapturedInput) -> Config:
    """Fill the listing's defaults; the two weights must sum to 1."""

    def refusal(given: list[str]) -> str:
        return (
            f"preset hello-agents-book has no {', '.join(given)} (the tutorial's listing "
            "has max_tokens, reserve_ratio, min_relevance, enable_compression and the two "
            "weights); remove them from the config or use preset ctxscope"
        )

    updates = resolve_updates(config, DEFAULTS, UNSUPPORTED, refusal, str(DEFAULTS["tokenizer"]))
    rel, rec = config.relevance_weight, config.recency_weight
    # One weight given: the other is its complement (the listing requires the sum to be 1).
    if rel is not None and rec is None:
        updates["recency_weight"] = 1.0 - rel
    elif rec is not None and rel is None:
        updates["relevance_weight"] = 1.0 - rec
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


def run(
    input: CapturedInput,
    config: Config,
    counter: TokenCounter,
    summarizer: Summarizer | None = None,
) -> BuildResult:
    """The tutorial listing's build() on a captured input, with a decision per candidate."""
    del summarizer  # the listing truncates, it never summarizes
    return Listing(config, counter).run(input)


@dataclass(frozen=True, slots=True)
class ListingScores:
    """The listing's scores (None for system packets: it never scores them)."""

    relevance: list[float | None]
    recency: list[float | None]
    score: list[float | None]
    notes: dict[int, list[str]]


class Listing(HelloBuilder[ListingScores]):
    """The rules of the tutorial's chapter-9 ContextBuilder."""

    WHO = "the listing"
    OVER_AFTER_CUT = " (the listing's cut is an estimate and its marker costs tokens too)"

    def __init__(self, config: Config, counter: TokenCounter) -> None:
        super().__init__(config, counter.count)

    def budget(self) -> int:
        assert self.config.max_tokens is not None
        return self.config.max_tokens

    def partition_of(self, kind: str) -> str | None:
        return partition_of(kind)

    def history_cut_at(self, cands: list[Candidate]) -> int:
        # after the system packets that lead the gather order
        for i, c in enumerate(cands):
            if c.kind != SYSTEM_TYPE:
                return i
        return len(cands)

    def must_keep_ids(self, cands: list[Candidate]) -> list[str]:
        return [c.id for c in cands if c.kind == SYSTEM_TYPE]

    # ------------------------------------------------------------------------- gather

    def gather(self, input: CapturedInput) -> Gathered:
        limit = self.config.history_limit
        assert limit is not None
        count, now, history = self.count, input.now, input.history
        cands: list[Candidate] = []
        notes: dict[str, list[str]] = {}
        if input.system_instructions:
            cands.append(
                Candidate(
                    id=INSTRUCTIONS_ID,
                    kind=SYSTEM_TYPE,
                    content=input.system_instructions,
                    tokens=count(input.system_instructions),
                    timestamp=now,
                    order=len(cands),
                    builder_made=True,
                )
            )
        cut = history_cut(
            history, limit, "conversation_history", self.WHO, lambda m: count(m.content)
        )
        for k, m in enumerate(history[max(len(history) - limit, 0) :]):
            pid = history_id(k)
            cands.append(
                Candidate(
                    id=pid,
                    kind="conversation_history",
                    content=f"{m.role}: {m.content}",
                    tokens=count(m.content),
                    timestamp=m.timestamp or now,
                    order=len(cands),
                    builder_made=True,
                    metadata={"role": m.role, "message_id": m.id},
                )
            )
            notes[pid] = [f"tokens counted on the message content only ('{m.role}: ' not charged)"]
        for p in input.packets:
            tokens = p.tokens if p.tokens is not None else count(p.content)
            c = packet_candidate(p, tokens, len(cands), now)
            if p.relevance is not None and listed_relevance(c) != p.relevance:
                notes.setdefault(p.id, []).append(
                    f"relevance {p.relevance:g} clipped to {listed_relevance(c):g}"
                )
            cands.append(c)
        return Gathered(cands, cut, notes)

    # ------------------------------------------------------------------------- score

    def score(self, input: CapturedInput, cands: list[Candidate]) -> ListingScores:
        """Relevance (Jaccard at exactly 0.5), recency, combined score; None for system
        packets."""
        rw, tw = self.config.relevance_weight, self.config.recency_weight
        assert rw is not None and tw is not None
        rel: list[float | None] = []
        rec: list[float | None] = []
        sc: list[float | None] = []
        notes: dict[int, list[str]] = {}
        for i, c in enumerate(cands):
            r = listed_relevance(c)
            if c.kind == SYSTEM_TYPE:
                rel.append(r)
                rec.append(None)
                sc.append(None)
                continue
            if r == DEFAULT_RELEVANCE:
                r = jaccard(c.content, input.query)
                why = (
                    "no relevance given: the default 0.5"
                    if c.relevance is None
                    else "caller relevance 0.5 equals the default and"
                )
                notes[i] = [f"{why} is replaced by the Jaccard overlap {r:.4g}"]
            assert c.timestamp is not None
            t = recency(c.timestamp, input.now)
            rel.append(r)
            rec.append(t)
            sc.append(rw * r + tw * t)
        return ListingScores(rel, rec, sc, notes)

    # ------------------------------------------------------------------------- select

    def select(self, cands: list[Candidate], s: ListingScores, budget: int) -> Selected:
        """System packets always; nothing else if they leave no budget; the rest filtered
        by min_relevance, sorted by score and filled until the first that does not fit."""
        min_relevance = self.config.min_relevance
        assert min_relevance is not None
        system = [i for i, c in enumerate(cands) if c.kind == SYSTEM_TYPE]
        others = [i for i, c in enumerate(cands) if c.kind != SYSTEM_TYPE]
        system_tokens = sum(cands[i].tokens for i in system)
        remaining = budget - system_tokens
        sel = Selected(indices=list(system))
        for i in system:
            sel.selections[i] = Selection(
                Status.KEPT,
                Reason.MUST_KEEP,
                f"system instructions are always kept: {fmt_tokens(cands[i].tokens)} tokens",
                remaining,
            )
        if remaining <= 0:
            for i in others:
                sel.selections[i] = Selection(
                    Status.DROPPED,
                    Reason.BUDGET_EXHAUSTED_BY_SYSTEM,
                    f"system instructions use {fmt_tokens(system_tokens)} of "
                    f"{fmt_tokens(budget)} tokens: the listing considers nothing else",
                    remaining,
                )
            return sel
        passing: list[int] = []
        for i in others:
            r = s.relevance[i]
            assert r is not None
            if r >= min_relevance:
                passing.append(i)
            else:
                sel.selections[i] = Selection(
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
                sel.selections[i] = Selection(
                    Status.DROPPED,
                    Reason.AFTER_BREAK,
                    f"never tried: the fill stopped at {stopped.id} (break); this one needs "
                    f"{fmt_tokens(c.tokens)} tokens, {fmt_tokens(left)} left",
                    left,
                    rank,
                )
            elif used + c.tokens <= budget:
                used += c.tokens
                sel.indices.append(i)
                sel.selections[i] = Selection(
                    Status.KEPT,
                    Reason.FITS,
                    f"fits: {fmt_tokens(c.tokens)} tokens, {fmt_tokens(budget - used)} left",
                    budget - used,
                    rank,
                )
            else:
                stopped = c
                sel.selections[i] = Selection(
                    Status.DROPPED,
                    Reason.NO_ROOM,
                    f"needs {fmt_tokens(c.tokens)} tokens, {fmt_tokens(left)} left; the fill "
                    "stops here (break) and tries nothing after it",
                    left,
                    rank,
                )
        return sel

    def selection_warnings(self, cands: list[Candidate], sel: Selected, budget: int) -> list[str]:
        system_tokens = sum(c.tokens for c in cands if c.kind == SYSTEM_TYPE)
        if system_tokens >= budget and system_tokens > 0:
            return [
                f"system instructions alone exceed the budget ({fmt_tokens(system_tokens)} "
                f">= {fmt_tokens(budget)} tokens): nothing else was considered"
            ]
        return []

    # ------------------------------------------------------------------------- structure

    def structure(self, chosen: list[Candidate], query: str) -> tuple[str, tuple[Section, ...]]:
        role = [c for c in chosen if c.kind == SYSTEM_TYPE]
        evidence = [c for c in chosen if c.kind != SYSTEM_TYPE and c.kind in EVIDENCE_TYPES]
        context = [c for c in chosen if c.kind != SYSTEM_TYPE and c.kind not in EVIDENCE_TYPES]
        r = Renderer("\n\n")
        r.listing("[Role & Policies]", "[Role & Policies]\n", role, "\n")
        r.block("[Task]", f"[Task]\n{query}")
        r.listing("[Evidence]", "[Evidence]\n", evidence, "\n---\n")
        r.listing("[Context]", "[Context]\n", context, "\n")
        r.block("[Output]", OUTPUT_BLOCK)
        return r.result()

    # ------------------------------------------------------------------------- compress

    def compress(self, text: str, budget: int) -> Compressed:
        """Whole blank-line blocks while they fit; the first that does not is cut by a
        characters-per-token estimate (with a marker) if more than 50 tokens remain."""
        count = self.count
        before = count(text)
        if not self.config.enable_compression or before <= budget:
            return Compressed(text, len(text), before, False)
        pos = 0
        current = 0
        kept_end = 0
        for block in text.split("\n\n"):
            n = count(block)
            if current + n <= budget:
                current += n
                kept_end = pos + len(block)
                pos += len(block) + 2
                continue
            left = budget - current
            if left > MIN_TRUNCATE_TOKENS:
                cpt = len(block) / n if n > 0 else 4
                cut = pos + len(block[: int(left * cpt)])
                why = (
                    f"the listing cut its block to the {fmt_tokens(left)} tokens left and added "
                    "a marker"
                )
                what = "the listing kept whole blocks and cut the next one, adding a marker"
                return Compressed(text[:cut] + MARKER, cut, before, True, left, why, what)
            why = (
                f"{fmt_tokens(left)} tokens left, not more than {MIN_TRUNCATE_TOKENS}: the rest "
                "is dropped"
            )
            what = "the listing kept whole blocks and dropped the rest"
            return Compressed(text[:kept_end], kept_end, before, True, left, why, what)
        return Compressed(
            text, len(text), before, True, what="the listing kept whole blocks and dropped the rest"
        )
