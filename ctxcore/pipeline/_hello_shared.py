"""Helpers shared by the two hello-agents presets (the 0.2.8 package and the tutorial listing).

Both builders render a prompt string from sections and then cut it blindly (by lines or by
blank-line blocks). To say which packet each cut hit, the structure stage records where every
packet's content landed in the prompt (character spans); the compress stage only needs the
character position where the prompt was cut, and ``classify_cut`` maps that back to packets.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache

from ctxcore.models import Decision, PartitionUsage, Reason, Status
from ctxcore.tokens import TokenCounter, get_encoding, is_exact

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
        plain = [t for t in texts if not (self.specials and self.special_in(t) is not None)]
        if len(plain) != len(texts):
            self.counter.count_many(plain)
            return [self.count(t) for t in texts]
        return self.counter.count_many(texts)


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
    """One ``Decision`` (keyword-only so the many numbers cannot be swapped silently)."""
    return Decision(
        packet_id=packet_id,
        kind=kind,
        status=status,
        reason=reason,
        reason_text=reason_text,
        partition=partition,
        relevance=round_score(relevance),
        recency=round_score(recency),
        score=round_score(score),
        rank=rank,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        budget_left=budget_left,
        notes=list(notes),
    )
