"""The skeleton the two hello-agents presets share (the 0.2.8 package and the tutorial listing).

Both builders gather candidates, score them, select some, render a prompt string from
sections and then cut it blindly (by lines or by blank-line blocks). ``HelloBuilder`` runs
that flow and writes the report (one decision per candidate, partitions, totals, warnings);
each preset module subclasses it with only its own rules: token counting, relevance and
recency, the fill, the sections it renders and how it compresses (docs/design.md,
"hello-agents" and "hello-agents-book").

To say which packet a cut hit, the structure stage records where every packet's content
landed in the prompt (character spans); the compress stage only says at which character
the prompt was cut, and ``classify_span`` maps that back to packets.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import ClassVar, Generic, Protocol, TypeVar

from ctxcore.errors import InputError
from ctxcore.models import (
    PARTITIONS,
    BuildResult,
    CapturedInput,
    Config,
    Decision,
    Message,
    Packet,
    PartitionUsage,
    Reason,
    Status,
    Totals,
    unvalidated,
)
from ctxcore.pipeline.common import Candidate, ReportParts, Timer, finish_parts
from ctxcore.tokens import TOKENIZERS, TokenCounter, get_encoding, is_exact

CountFn = Callable[[str], int]


def fmt_tokens(n: int) -> str:
    """``1,234`` — token counts read better with thousands separators."""
    return f"{n:,}"


def as_utc(dt: datetime) -> datetime:
    """Compare times in UTC: the packages compare naive datetimes, ours are tz-aware."""
    return dt.astimezone(UTC)


# --------------------------------------------------------------------------- words


@lru_cache(maxsize=16384)
def words(text: str) -> frozenset[str]:
    """``set(text.lower().split())``, the packages' notion of words; cached for warm re-runs."""
    return frozenset(text.lower().split())


@lru_cache(maxsize=16384)
def query_overlap(query: frozenset[str], text: str) -> int:
    """``len(query & words(text))`` without splitting ``text`` into its words (a thousand
    packets make some hundred thousand word strings): a query word is one of ``text``'s
    words when it occurs in ``text.lower()`` between whitespace (``str.split``'s and
    ``str.isspace``'s, the same characters) or the text's ends. Cached for warm re-runs."""
    low = text.lower()
    end = len(low)
    found = 0
    for w in query:
        n = len(w)
        i = low.find(w)
        while i >= 0:
            if (i == 0 or low[i - 1].isspace()) and (i + n == end or low[i + n].isspace()):
                found += 1
                break
            i = low.find(w, i + 1)
    return found


# --------------------------------------------------------------------------- counting


@dataclass
class PackageCounter:
    """The hello-agents package's ``count_tokens``: ``tiktoken.encode`` or ``len // 4``.

    ``encoding.encode(text)`` raises on text that spells a special token (``<|endoftext|>``)
    and the package then silently falls back to ``len(text) // 4``; replicated here so the
    prompt matches. Estimators have no special tokens and never fall back.
    """

    counter: TokenCounter
    specials: tuple[str, ...] = field(default=())

    @classmethod
    def for_counter(cls, counter: TokenCounter) -> PackageCounter:
        specials: tuple[str, ...] = ()
        if is_exact(counter.name):
            specials = tuple(sorted(get_encoding(counter.name).special_tokens_set))
        return cls(counter, specials)

    def special_in(self, text: str) -> str | None:
        """The first special token spelled in ``text`` (None when there is none)."""
        if "<|" not in text:
            return None
        for tok in self.specials:
            if tok in text:
                return tok
        return None

    def count(self, text: str) -> int:
        if self.specials and self.special_in(text) is not None:
            return len(text) // 4
        return self.counter.count(text)

    def count_many(self, texts: list[str]) -> list[int]:
        return self.count_many_started(texts)()

    def count_many_started(self, texts: list[str]) -> Callable[[], list[int]]:
        """``count_many`` started on background threads (``TokenCounter.count_many_started``):
        call the result to wait for the counts."""
        plain = [t for t in texts if not (self.specials and self.special_in(t) is not None)]
        if len(plain) != len(texts):
            wait = self.counter.count_many_started(plain)

            def counts() -> list[int]:
                wait()
                return [self.count(t) for t in texts]

            return counts
        return self.counter.count_many_started(texts)


# --------------------------------------------------------------------------- rendering


@dataclass(frozen=True, slots=True)
class Span:
    """Where one packet's content sits in the rendered prompt: ``prompt[start:end]``."""

    packet_id: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Section:
    """A rendered section (partition) and the packet spans inside it."""

    name: str
    start: int
    end: int
    spans: tuple[Span, ...]


@dataclass
class Renderer:
    """Builds a prompt from sections joined by a separator while tracking packet spans."""

    separator: str = "\n\n"
    parts: list[str] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    _pos: int = 0
    _spans: list[Span] = field(default_factory=list)

    @contextmanager
    def section(self, name: str) -> Iterator[Renderer]:
        """Text and packets emitted inside belong to section ``name``."""
        if self.parts:
            self.text(self.separator)
        start, self._spans = self._pos, []
        yield self
        self.sections.append(Section(name, start, self._pos, tuple(self._spans)))

    def text(self, s: str) -> None:
        self.parts.append(s)
        self._pos += len(s)

    def packet(self, packet_id: str, content: str) -> None:
        start = self._pos
        self.text(content)
        self._spans.append(Span(packet_id, start, self._pos))

    def block(self, name: str, text: str) -> None:
        """Section ``name`` made of fixed text (the task, the output format)."""
        with self.section(name):
            self.text(text)

    def listing(
        self, name: str, header: str, cands: Sequence[Candidate], sep: str, tail: str = ""
    ) -> None:
        """Section ``name``: ``header``, the candidates' contents with ``sep`` between them,
        ``tail``; left out when there are no candidates."""
        if not cands:
            return
        with self.section(name):
            self.text(header)
            for j, c in enumerate(cands):
                if j:
                    self.text(sep)
                self.packet(c.id, c.content)
            if tail:
                self.text(tail)

    def result(self) -> tuple[str, tuple[Section, ...]]:
        return "".join(self.parts), tuple(self.sections)


# --------------------------------------------------------------------------- cutting


@dataclass(frozen=True, slots=True)
class CutFate:
    """What a cut of the prompt at ``cut`` characters did to one packet span."""

    status: Status  # KEPT, TRUNCATED or DROPPED
    kept_text: str


def classify_span(span: Span, content: str, cut: int) -> CutFate:
    """Kept whole, cut inside, or removed entirely by a prompt cut at ``cut``."""
    if span.end <= cut:
        return CutFate(Status.KEPT, content)
    if span.start >= cut:
        return CutFate(Status.DROPPED, "")
    return CutFate(Status.TRUNCATED, content[: cut - span.start])


def partitions_from_sections(
    sections: tuple[Section, ...],
    prompt: str,
    cut: int,
    count: CountFn,
    names: tuple[str, ...],
    items: dict[str, int],
) -> list[PartitionUsage]:
    """Tokens each partition occupies in the final prompt (``prompt[:cut]`` + any marker)."""
    used: dict[str, int] = {}
    present: dict[str, bool] = {}
    for s in sections:
        end = min(s.end, cut)
        if end > s.start or (s.start == s.end and s.start <= cut):
            used[s.name] = used.get(s.name, 0) + count(prompt[s.start : end])
            present[s.name] = True
    out = []
    for name in names:
        n_items = items.get(name, 0)
        if name in ("[Task]", "[Output]") and present.get(name):
            n_items = max(n_items, 1)
        out.append(PartitionUsage(name=name, budget=None, used=used.get(name, 0), items=n_items))
    return out


def lost_sections(sections: tuple[Section, ...], cut: int, names: tuple[str, ...]) -> list[str]:
    """Warnings for protected sections (``names``) that a cut removed or shortened."""
    out = []
    for s in sections:
        if s.name not in names:
            continue
        if s.start >= cut:
            out.append(f"compression removed the whole {s.name} section from the prompt")
        elif s.end > cut:
            out.append(f"compression cut the {s.name} section short")
    return out


def round_score(x: float | None) -> float | None:
    """Scores are stored as computed; NaN never occurs but would break JSON round trips."""
    if x is None or not math.isfinite(x):
        return None
    return x


def _score(x: float | None) -> float | None:
    """A score as ``Decision`` validation stores it (a plain float)."""
    x = round_score(x)
    return x if x is None or type(x) is float else float(x)


def _int(x: int | None) -> int | None:
    """A count as ``Decision`` validation stores it (a plain int)."""
    return x if x is None or type(x) is int else int(x)


def decision(
    *,
    packet_id: str,
    kind: str,
    status: Status,
    reason: Reason,
    reason_text: str,
    partition: str | None,
    relevance: float | None,
    recency: float | None,
    score: float | None,
    rank: int | None,
    tokens_before: int,
    tokens_after: int,
    budget_left: int | None,
    notes: list[str],
) -> Decision:
    """One ``Decision`` (keyword-only so the many numbers cannot be swapped silently).

    Built without re-validation, as the ctxscope preset builds its own (``ctxscope._decision``):
    every value comes from the builder, and validating 1,000 decisions costs about 10 ms of
    a cold build (tests compare the result with a validated ``Decision``)."""
    return unvalidated(
        Decision,
        {
            "packet_id": packet_id,
            "kind": kind,
            "status": status,
            "reason": reason,
            "reason_text": reason_text,
            "partition": partition,
            "relevance": _score(relevance),
            "recency": _score(recency),
            "score": _score(score),
            "rank": _int(rank),
            "tokens_before": _int(tokens_before),
            "tokens_after": _int(tokens_after),
            "budget_left": _int(budget_left),
            "notes": list(notes),
        },
    )


# --------------------------------------------------------------------------- config


def resolve_updates(
    config: Config,
    defaults: Mapping[str, object],
    unsupported: tuple[str, ...],
    refusal: Callable[[list[str]], str],
    tokenizer: str,
) -> dict[str, object]:
    """The config updates both presets start from: refuse the knobs the builder does not
    have (``refusal(names)`` says why), check the tokenizer, fill the defaults."""
    given = [k for k in unsupported if getattr(config, k) is not None]
    if given:
        raise InputError(refusal(given))
    if config.tokenizer is not None and config.tokenizer not in TOKENIZERS:
        raise InputError(
            f"unknown tokenizer {config.tokenizer!r} in config; choose one of "
            f"{', '.join(TOKENIZERS)}"
        )
    updates: dict[str, object] = {k: v for k, v in defaults.items() if getattr(config, k) is None}
    if config.tokenizer is None:
        updates["tokenizer"] = tokenizer
    return updates


# --------------------------------------------------------------------------- stage values


@dataclass(frozen=True, slots=True)
class Gathered:
    """Candidates in the builder's gather order, the decisions for the history messages its
    limit cut, and notes by candidate id."""

    cands: list[Candidate]
    history_cut: list[Decision]
    notes: dict[str, list[str]]


class Scores(Protocol):
    """What the report reads of a preset's scores (each preset keeps more for its fill)."""

    @property
    def relevance(self) -> Sequence[float | None]: ...
    @property
    def recency(self) -> Sequence[float | None]: ...
    @property
    def score(self) -> Sequence[float | None]: ...
    @property
    def notes(self) -> Mapping[int, list[str]]: ...


S = TypeVar("S", bound=Scores)


@dataclass(frozen=True, slots=True)
class Selection:
    """What the select stage decided for one candidate, and why."""

    status: Status
    reason: Reason
    text: str
    budget_left: int
    rank: int | None = None


@dataclass
class Selected:
    """The select stage's result: what got in, and a ``Selection`` for every candidate."""

    indices: list[int]  # selected candidates, in the builder's order
    selections: dict[int, Selection] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Compressed:
    """The final prompt and where the compress stage cut the structured one."""

    prompt: str
    cut: int  # the prompt is structured[:cut] (plus a marker where the builder adds one)
    before: int  # tokens of the structured prompt
    ran: bool
    stop_left: int | None = None  # budget left where the cut fell
    why: str = ""  # why a packet was cut, for its decision
    what: str = ""  # what the cut did, for the warning


def history_cut(
    history: list[Message], limit: int, kind: str, who: str, tokens: Callable[[Message], int]
) -> list[Decision]:
    """Decisions for the messages older than the last ``limit``, which the builder drops."""
    keep_from = max(len(history) - limit, 0)
    return [
        decision(
            packet_id=m.id or f"history:{i}",
            kind=kind,
            status=Status.DROPPED,
            reason=Reason.HISTORY_LIMIT,
            reason_text=(
                f"message {i + 1} of {len(history)} is older than the last {limit} {who} keeps"
            ),
            partition="[Context]",
            relevance=None,
            recency=None,
            score=None,
            rank=None,
            tokens_before=tokens(m),
            tokens_after=0,
            budget_left=None,
            notes=[],
        )
        for i, m in enumerate(history[:keep_from])
    ]


def packet_candidate(p: Packet, tokens: int, order: int, now: datetime) -> Candidate:
    """A caller packet as both builders take it (no timestamp: ``now``)."""
    return Candidate(
        id=p.id,
        kind=p.kind,
        content=p.content,
        tokens=tokens,
        timestamp=p.timestamp or now,
        relevance=p.relevance,
        priority=p.priority,
        must_keep=p.must_keep,
        order=order,
        metadata=p.metadata,
    )


# --------------------------------------------------------------------------- the builder


class HelloBuilder(ABC, Generic[S]):
    """gather → score → select → structure → compress → report, with each rule a method.

    A subclass is one builder's rules; ``run`` and ``report`` are the same for both.
    ``budget_left`` in a decision is the budget remaining once that decision was applied.
    """

    #: how decisions and warnings name the builder ("the package", "the listing")
    WHO: ClassVar[str]
    #: appended to the decision of a packet the compress stage shortened / removed
    CUT_NOTE: ClassVar[str] = ""
    REMOVED_NOTE: ClassVar[str] = ""
    #: appended to the over-budget warning when the compress stage ran
    OVER_AFTER_CUT: ClassVar[str] = ""

    def __init__(self, config: Config, count: CountFn) -> None:
        self.config = config
        self.count = count

    # ----------------------------------------------------------------- the rules

    @abstractmethod
    def budget(self) -> int: ...

    @abstractmethod
    def gather(self, input: CapturedInput) -> Gathered: ...

    @abstractmethod
    def score(self, input: CapturedInput, cands: list[Candidate]) -> S: ...

    @abstractmethod
    def select(self, cands: list[Candidate], s: S, budget: int) -> Selected: ...

    @abstractmethod
    def structure(self, chosen: list[Candidate], query: str) -> tuple[str, tuple[Section, ...]]:
        """The prompt from the selected candidates, and where each landed."""

    @abstractmethod
    def compress(self, text: str, budget: int) -> Compressed: ...

    @abstractmethod
    def partition_of(self, kind: str) -> str | None:
        """The section a kind renders in (None: the builder renders it nowhere)."""

    @abstractmethod
    def history_cut_at(self, cands: list[Candidate]) -> int:
        """Where, among the candidates' decisions, those of the cut history go."""

    @abstractmethod
    def selection_warnings(self, cands: list[Candidate], sel: Selected, budget: int) -> list[str]:
        """Warnings about what the select stage did (they come first)."""

    def must_keep_ids(self, cands: list[Candidate]) -> list[str]:
        return []

    # ----------------------------------------------------------------- the flow

    def run(self, input: CapturedInput) -> BuildResult:
        """The builder's build() on a captured input, with a decision for every candidate."""
        timer = Timer()
        budget = self.budget()
        with timer.stage("gather"):
            g = self.gather(input)
        cands = g.cands
        with timer.stage("score"):
            s = self.score(input, cands)
        with timer.stage("select"):
            sel = self.select(cands, s, budget)
        with timer.stage("structure"):
            structured, sections = self.structure([cands[i] for i in sel.indices], input.query)
        with timer.stage("compress"):
            comp = self.compress(structured, budget)
        with timer.stage("report"):
            parts = self.report(input, budget, g, s, sel, sections, comp)
        return finish_parts(parts, timer)

    def report(
        self,
        input: CapturedInput,
        budget: int,
        g: Gathered,
        s: S,
        sel: Selected,
        sections: tuple[Section, ...],
        comp: Compressed,
    ) -> ReportParts:
        """Decisions, partitions, totals and warnings from what the stages did."""
        cands = g.cands
        spans = {sp.packet_id: sp for sec in sections for sp in sec.spans}
        decisions: list[Decision] = []
        items: dict[str, int] = {}
        for i, c in enumerate(cands):
            out = sel.selections[i]
            status, reason, text, left = out.status, out.reason, out.text, out.budget_left
            after = c.tokens if status == Status.KEPT else 0
            span = spans.get(c.id)
            if span is not None and status == Status.KEPT and comp.ran:
                fate = classify_span(span, c.content, comp.cut)
                if fate.status != Status.KEPT and comp.stop_left is not None:
                    left = comp.stop_left
                if fate.status == Status.TRUNCATED:
                    after = self.count(fate.kept_text)
                    status, reason = Status.TRUNCATED, Reason.TRUNCATED_BY_COMPRESS
                    text = (
                        f"cut by compression to {fmt_tokens(after)} of {fmt_tokens(c.tokens)} "
                        f"tokens ({comp.why}){self.CUT_NOTE}"
                    )
                elif fate.status == Status.DROPPED:
                    after = 0
                    status, reason = Status.DROPPED, Reason.REMOVED_BY_COMPRESS
                    text = (
                        f"selected ({fmt_tokens(c.tokens)} tokens) but removed by compression "
                        f"({comp.why}){self.REMOVED_NOTE}"
                    )
            partition = self.partition_of(c.kind)
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
                    rank=out.rank,
                    tokens_before=c.tokens,
                    tokens_after=after,
                    budget_left=left,
                    notes=[*g.notes.get(c.id, ()), *s.notes.get(i, ())],
                )
            )
        at = self.history_cut_at(cands)
        decisions[at:at] = g.history_cut
        used = self.count(comp.prompt)
        warnings = self.selection_warnings(cands, sel, budget)
        warnings.extend(self.prompt_warnings(input, budget, used, sections, comp))
        assert self.config.max_tokens is not None and self.config.tokenizer is not None
        totals = Totals(
            window=self.config.max_tokens,
            output_reserve=self.config.max_tokens - budget,
            safety_margin=0,
            available=budget,
            used=used,
            tokenizer=self.config.tokenizer,
        )
        partitions = partitions_from_sections(
            sections, comp.prompt, comp.cut, self.count, PARTITIONS, items
        )
        return ReportParts(
            comp.prompt, decisions, partitions, totals, self.must_keep_ids(cands), warnings
        )

    def prompt_warnings(
        self,
        input: CapturedInput,
        budget: int,
        used: int,
        sections: tuple[Section, ...],
        comp: Compressed,
    ) -> list[str]:
        """What the prompt leaves out or exceeds."""
        out: list[str] = []
        if input.tools:
            out.append(
                f"{len(input.tools)} tool definition(s) are not in the prompt: {self.WHO} has "
                "no notion of tools, though they cost tokens in the real request"
            )
        if comp.ran:
            out.append(
                f"context over budget ({fmt_tokens(comp.before)} > {fmt_tokens(budget)} "
                f"tokens): {comp.what}"
            )
            out.extend(lost_sections(sections, comp.cut, ("[Task]", "[Output]")))
        if used > budget:
            out.append(
                f"the final prompt has {fmt_tokens(used)} tokens, over the budget of "
                f"{fmt_tokens(budget)}" + (self.OVER_AFTER_CUT if comp.ran else "")
            )
        return out
