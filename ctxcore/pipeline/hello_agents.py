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

The flow and the report are ``_hello_shared.HelloBuilder``'s; ``Package`` holds the rules
(docs/design.md, "hello-agents").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ctxcore.knobs import preset_defaults, refused, whole
from ctxcore.models import BuildResult, CapturedInput, Config, Reason, Status
from ctxcore.pipeline._hello_shared import (
    Compressed,
    Gathered,
    HelloBuilder,
    PackageCounter,
    Renderer,
    Section,
    Selected,
    Selection,
    as_utc,
    fmt_tokens,
    history_cut,
    packet_candidate,
    query_overlap,
    resolve_updates,
)
from ctxcore.pipeline.common import HISTORY_ID, INSTRUCTIONS_ID, Candidate, Summarizer
from ctxcore.tokens import TokenCounter

NAME = "hello-agents"
VERSION = "0.2.8"

#: the package's defaults and the knobs it does not have (setting one is an error rather
#: than silently ignored), declared with each knob (docs/design.md, "Knobs")
DEFAULTS: dict[str, object] = preset_defaults(NAME)
UNSUPPORTED = refused(NAME)
#: the package always folds its last 10 history messages: its ``history_limit`` default
PACKAGE_HISTORY_LIMIT = whole("history_limit", NAME)

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

    def refusal(given: list[str]) -> str:
        return (
            f"preset hello-agents has no {', '.join(given)} (the 0.2.8 package fixes "
            "score = 0.7 × relevance + 0.3 × recency and a skip fill); remove "
            f"{'it' if len(given) == 1 else 'them'} from the config or use preset ctxscope"
        )

    updates = resolve_updates(config, DEFAULTS, UNSUPPORTED, refusal, str(DEFAULTS["tokenizer"]))
    return config.model_copy(update=updates)


def run(
    input: CapturedInput,
    config: Config,
    counter: TokenCounter,
    summarizer: Summarizer | None = None,
) -> BuildResult:
    """The package's build() on a captured input, with a decision for every candidate."""
    del summarizer  # the package never summarizes
    return Package(config, counter).run(input)


@dataclass(frozen=True, slots=True)
class PackageScores:
    """The package's scores of every candidate, and its sort over all of them."""

    relevance: list[float]
    recency: list[float]
    score: list[float]
    order: list[int]  # candidate indices by score, descending (the package's sort)
    rank: list[int]  # 1-based position in that sort
    overlap: list[int]  # query words found in the content
    n_query: int
    notes: dict[int, list[str]]


class Package(HelloBuilder[PackageScores]):
    """The rules of hello-agents 0.2.8's ContextBuilder."""

    WHO = "the package"
    CUT_NOTE = "; the package cuts at a line without a marker"
    REMOVED_NOTE = "; the package cuts the prompt at a line without a marker"

    def __init__(self, config: Config, counter: TokenCounter) -> None:
        self.pc = PackageCounter.for_counter(counter)
        super().__init__(config, self.pc.count)

    def budget(self) -> int:
        assert self.config.max_tokens is not None and self.config.reserve_ratio is not None
        return int(self.config.max_tokens * (1 - self.config.reserve_ratio))

    def partition_of(self, kind: str) -> str | None:
        return PARTITION_OF.get(kind)

    def history_cut_at(self, cands: list[Candidate]) -> int:
        # where the history packet is (after the instructions), even when it is empty
        for i, c in enumerate(cands):
            if c.id == HISTORY_ID:
                return i
        return 1 if cands and cands[0].id == INSTRUCTIONS_ID else 0

    # ------------------------------------------------------------------------- gather

    def gather(self, input: CapturedInput) -> Gathered:
        limit = self.config.history_limit
        assert limit is not None
        pc, now, history = self.pc, input.now, input.history
        cands: list[Candidate] = []
        notes: dict[str, list[str]] = {}
        kept = history[max(len(history) - limit, 0) :]
        history_text = "\n".join(f"[{m.role}] {m.content}" for m in kept)
        counted = self._count(input, history_text)

        if input.system_instructions:
            cands.append(
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
        cut = history_cut(
            history, limit, "history", self.WHO, lambda m: pc.count(f"[{m.role}] {m.content}")
        )
        if history:
            if kept:
                cands.append(
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
            if p.tokens == 0:
                notes.setdefault(p.id, []).append("tokens 0 given: the package recounts it")
            elif p.tokens is not None:
                real = pc.count(p.content)
                notes.setdefault(p.id, []).append(
                    f"{fmt_tokens(p.tokens)} tokens given by the caller are used as is"
                    + ("" if real == p.tokens else f" (the content counts {fmt_tokens(real)})")
                )
            tokens = p.tokens if p.tokens else counted[p.content]
            cands.append(packet_candidate(p, tokens, len(cands), now))
        self._special_notes(cands, counted, notes)
        for p in input.packets:
            if p.must_keep:
                notes.setdefault(p.id, []).append(
                    "must_keep is ignored: the package has no notion of it"
                )
        return Gathered(cands, cut, notes)

    def _count(self, input: CapturedInput, history_text: str) -> dict[str, int]:
        """Everything the package counts (the instructions, the history, the packets that
        come without a count), counted in one batch (cached by content) on background
        threads; meanwhile the query's words are found in each packet, which the score
        stage reads (cached by query and content)."""
        texts = [input.system_instructions, history_text]
        texts += [p.content for p in input.packets if not p.tokens]
        pending = self.pc.count_many_started(texts)
        query = frozenset(input.query.lower().split())
        if query:
            for p in input.packets:
                query_overlap(query, p.content)
        return dict(zip(texts, pending(), strict=True))

    def _special_notes(
        self, cands: list[Candidate], counted: dict[str, int], notes: dict[str, list[str]]
    ) -> None:
        """A note on each candidate whose content spells a special token, counted here
        as the package counts it (its fallback), not as tiktoken would."""
        pc = self.pc
        if not pc.specials:
            return
        for c in cands:
            tok = pc.special_in(c.content)
            if tok is not None and c.tokens == counted.get(c.content):
                notes.setdefault(c.id, []).append(
                    f"content spells the special token {tok}: the package's tiktoken "
                    f"encode() raises and it falls back to len(text)//4 = "
                    f"{fmt_tokens(c.tokens)} tokens (tiktoken would count "
                    f"{fmt_tokens(pc.counter.count(c.content))})"
                )

    # ------------------------------------------------------------------------- score

    def score(self, input: CapturedInput, cands: list[Candidate]) -> PackageScores:
        query_words = frozenset(input.query.lower().split())
        nq = len(query_words)
        now_utc = as_utc(input.now)
        rel: list[float] = []
        rec: list[float] = []
        sc: list[float] = []
        ov: list[int] = []
        notes: dict[int, list[str]] = {}
        for i, c in enumerate(cands):
            if nq > 0:
                overlap = query_overlap(query_words, c.content)
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
            if c.relevance is not None:
                notes[i] = [
                    f"caller relevance {c.relevance:g} overwritten with {r:.4g} "
                    "(the package recomputes relevance for every packet)"
                ]
        order = sorted(range(len(cands)), key=lambda i: sc[i], reverse=True)
        rank = [0] * len(cands)
        for pos, i in enumerate(order):
            rank[i] = pos + 1
        return PackageScores(rel, rec, sc, order, rank, ov, nq, notes)

    # ------------------------------------------------------------------------- select

    def select(self, cands: list[Candidate], s: PackageScores, budget: int) -> Selected:
        """Instructions first, in their own order; the rest by score, filtered by
        min_relevance, skipping what does not fit."""
        min_relevance = self.config.min_relevance
        assert min_relevance is not None
        sel = Selected(indices=[])
        used = 0
        for i in (i for i, c in enumerate(cands) if c.kind == "instructions"):
            c = cands[i]
            left = budget - used
            if used + c.tokens <= budget:
                sel.indices.append(i)
                used += c.tokens
                sel.selections[i] = Selection(
                    Status.KEPT,
                    Reason.FITS,
                    f"instructions are placed first: {fmt_tokens(c.tokens)} tokens, "
                    f"{fmt_tokens(budget - used)} left",
                    budget - used,
                    s.rank[i],
                )
            else:
                sel.selections[i] = Selection(
                    Status.DROPPED,
                    Reason.NO_ROOM,
                    f"instructions need {fmt_tokens(c.tokens)} tokens, {fmt_tokens(left)} "
                    "left: the package leaves them out without a warning",
                    left,
                    s.rank[i],
                )
        for i in (i for i in s.order if cands[i].kind != "instructions"):
            c = cands[i]
            left = budget - used
            if s.relevance[i] < min_relevance:
                sel.selections[i] = Selection(
                    Status.FILTERED,
                    Reason.BELOW_MIN_RELEVANCE,
                    f"relevance {s.relevance[i]:.2f} ({s.overlap[i]} of {s.n_query} query "
                    f"words) is below min_relevance {min_relevance:.2f}",
                    left,
                    s.rank[i],
                )
            elif used + c.tokens > budget:
                sel.selections[i] = Selection(
                    Status.DROPPED,
                    Reason.NO_ROOM,
                    f"needs {fmt_tokens(c.tokens)} tokens, {fmt_tokens(left)} left; skipped "
                    "(the package keeps trying the next ones)",
                    left,
                    s.rank[i],
                )
            else:
                sel.indices.append(i)
                used += c.tokens
                sel.selections[i] = self._placed(c, budget - used, s.rank[i])
        return sel

    @staticmethod
    def _placed(c: Candidate, left: int, rank: int) -> Selection:
        if c.kind in PARTITION_OF:
            return Selection(
                Status.KEPT,
                Reason.FITS,
                f"fits: {fmt_tokens(c.tokens)} tokens, {fmt_tokens(left)} left",
                left,
                rank,
            )
        return Selection(
            Status.NOT_RENDERED,
            Reason.TYPE_NOT_RENDERED,
            f"selected and charged {fmt_tokens(c.tokens)} tokens, but the package renders "
            f"no section for type {c.kind!r}: it appears nowhere in the prompt",
            left,
            rank,
        )

    def selection_warnings(self, cands: list[Candidate], sel: Selected, budget: int) -> list[str]:
        out: list[str] = []
        instr_tokens = sum(c.tokens for c in cands if c.kind == "instructions")
        if instr_tokens > budget:
            out.append(
                f"system instructions alone exceed the budget ({fmt_tokens(instr_tokens)} > "
                f"{fmt_tokens(budget)} tokens)"
            )
        unrendered = [i for i, o in sel.selections.items() if o.status == Status.NOT_RENDERED]
        if unrendered:
            wasted = sum(cands[i].tokens for i in unrendered)
            out.append(
                f"{len(unrendered)} selected packet(s) of types the package never renders used "
                f"{fmt_tokens(wasted)} tokens of budget and appear nowhere in the prompt"
            )
        return out

    # ------------------------------------------------------------------------- structure

    def structure(self, chosen: list[Candidate], query: str) -> tuple[str, tuple[Section, ...]]:
        r = Renderer("\n\n")
        r.listing(
            "[Role & Policies]",
            "[Role & Policies]\n",
            [c for c in chosen if c.kind == "instructions"],
            "\n",
        )
        r.block("[Task]", f"[Task]\n用户问题：{query}")
        r.listing(
            "[State]",
            "[State]\n关键进展与未决问题：\n",
            [c for c in chosen if c.kind == "task_state"],
            "\n",
        )
        # each evidence packet between blank lines
        r.listing(
            "[Evidence]",
            "[Evidence]\n事实与引用：\n\n",
            [c for c in chosen if c.kind in EVIDENCE_TYPES],
            "\n\n",
            tail="\n",
        )
        r.listing(
            "[Context]",
            "[Context]\n对话历史与背景：\n",
            [c for c in chosen if c.kind == "history"],
            "\n",
        )
        r.block("[Output]", OUTPUT_BLOCK)
        return r.result()

    # ------------------------------------------------------------------------- compress

    def compress(self, text: str, budget: int) -> Compressed:
        """Whole lines while they fit; stop at the first that does not (no marker)."""
        before = self.pc.count(text)
        if not self.config.enable_compression or before <= budget:
            return Compressed(text, len(text), before, False)
        lines = text.split("\n")
        used = 0
        kept = 0
        cut = 0
        why = "budget reached"
        for line in lines:
            n = self.pc.count(line)
            if used + n > budget:
                why = f"line needs {fmt_tokens(n)} tokens, {fmt_tokens(budget - used)} left"
                break
            cut = cut + len(line) + (1 if kept else 0)
            kept += 1
            used += n
        return Compressed(
            text[:cut],
            cut,
            before,
            True,
            stop_left=budget - used,
            why=why,
            what=(
                f"the package cut it to the first {kept} of {len(lines)} lines, without a marker"
            ),
        )
