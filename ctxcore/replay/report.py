"""What a replay reports: per turn, the two sides' totals and the packets whose fate flipped;
over the session, the first turn each item was lost; over all, the findings by detector
(docs/design.md, "Diagnostics")."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ctxcore.errors import InputError
from ctxcore.models import Trace

#: what a "changed" turn is, in the words the CLI and the app print (``TurnReport.changed``)
CHANGED_MEANS = "a packet's status or the tokens used differ"
#: what "first lost" means, in the words the CLI and the app print (``FirstLoss``)
FIRST_LOST_MEANS = (
    "the first turn each item leaves the prompt, before → after, counted from the first "
    "turn it was in the prompt on either side; never: it does not leave the prompt in the "
    "turns replayed"
)
LOSS_SEVERITIES: tuple[str, ...] = ("info", "warning", "error")
_RANK = {"info": 0, "warning": 1, "error": 2}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Flip(_Model):
    """One packet whose fate differs between the two sides of a turn."""

    packet_id: str
    kind: str
    before: str  # a Status value, or "absent"
    after: str
    must_keep: bool = False
    #: its text shows an error (``ctxcore.summarize.error_evidence``: a failing test, a
    #: traceback, an exception, a compiler error)
    error_evidence: bool = False
    #: None for a gain or a sideways change (dropped ↔ filtered); else how bad the loss is:
    #: error = a must-keep packet or error evidence left the prompt (or was only summarized),
    #: warning = a packet in the prompt before is out after, info = squeezed (truncated,
    #: summarized)
    loss: str | None = None


class TurnReport(_Model):
    """One turn replayed: both sides' totals and what changed."""

    session_id: str
    turn: int
    trace_id: str  # the recorded trace
    before_id: str  # the trace of the "before" side (the recorded one unless ``against``)
    after_id: str
    used_before: int
    used_after: int
    budget_before: int
    budget_after: int
    flips: list[Flip] = Field(default_factory=list)
    findings_added: list[str] = Field(default_factory=list)  # "severity detector [ids]"
    findings_cleared: list[str] = Field(default_factory=list)

    @property
    def tokens_delta(self) -> int:
        return self.used_after - self.used_before

    @property
    def changed(self) -> bool:
        """The model would be sent another context: a packet's status or the tokens used
        differ (``CHANGED_MEANS``). Findings alone do not count: they are compared only when
        asked for, and a count that moved with that switch said 14 turns changed in the CLI
        and 9 in the app for the same replay."""
        return bool(self.flips) or self.used_before != self.used_after

    @property
    def findings_changed(self) -> bool:
        return bool(self.findings_added or self.findings_cleared)

    def losses(self, at: str = "info") -> list[Flip]:
        """The flips that lose something, at severity ``at`` or above."""
        floor = _severity_rank(at)
        return [f for f in self.flips if f.loss is not None and _RANK[f.loss] >= floor]


class TurnError(_Model):
    """A turn that could not be compared: its trace could not be read, or a side's build
    failed (e.g. new settings too tight for what must be kept: the preset fails loudly rather
    than drop it). The other turns of the session are replayed without it. A build that fails
    only after the change is a loss of everything the turn kept (``ReplayReport.new_failures``,
    counted at ``error`` by ``--fail-on`` and ``assert_no_new_losses``)."""

    session_id: str
    turn: int
    trace_id: str
    side: str  # "read", "before", "after" or "both"
    message: str


class FirstLoss(_Model):
    """The first turn an item left the prompt on each side (None: never), counted from the
    first turn it was in the prompt on either side (a must-keep packet: from its first
    turn). An item the new settings drop from the turn it arrives, where the recording kept
    it, is lost at that turn after the change, not never."""

    session_id: str
    item: str  # a packet id, or the text of a user constraint
    kind: str  # packet | constraint
    before_turn: int | None
    after_turn: int | None


class ReplayReport(_Model):
    """What ``replay`` returns; ``ctxscope replay --format json`` prints it."""

    before: str  # "recorded" or the ``against`` settings as JSON
    after: str
    turns: list[TurnReport]
    first_lost: list[FirstLoss] = Field(default_factory=list)
    findings_before: dict[str, int] = Field(default_factory=dict)  # detector -> count
    findings_after: dict[str, int] = Field(default_factory=dict)
    findings_compared: bool = True
    #: turns that could not be compared, with why (one per turn; the rest are in ``turns``)
    errors: list[TurnError] = Field(default_factory=list)
    seconds: float = 0.0
    #: every rebuilt trace (the "after" side, and the "before" side with ``against``), only
    #: with ``keep_variants``; not in the JSON
    variants: list[Trace] = Field(default_factory=list, exclude=True, repr=False)

    @property
    def tokens_delta(self) -> int:
        """Tokens spent (positive) or saved (negative) over every turn."""
        return sum(t.tokens_delta for t in self.turns)

    @property
    def changed_turns(self) -> list[TurnReport]:
        """The turns whose context changed (``TurnReport.changed``, ``CHANGED_MEANS``): the
        one count the CLI and the app show."""
        return [t for t in self.turns if t.changed]

    @property
    def findings_only_turns(self) -> list[TurnReport]:
        """Turns built the same on both sides whose findings differ (only when compared)."""
        return [t for t in self.turns if not t.changed and t.findings_changed]

    def losses(self, at: str = "info") -> list[tuple[TurnReport, Flip]]:
        """Every loss at ``at`` or above, with its turn."""
        return [(t, f) for t in self.turns for f in t.losses(at)]

    @property
    def turns_losing_must_keep(self) -> list[TurnReport]:
        """Turns where a must-keep packet or error evidence was lost."""
        return [t for t in self.turns if t.losses("error")]

    def variant(self, trace_id: str) -> Trace | None:
        """A rebuilt trace kept on the report (``keep_variants``), by id."""
        return next((v for v in self.variants if v.trace_id == trace_id), None)

    @property
    def new_failures(self) -> list[TurnError]:
        """Turns whose build failed after the change only: everything they kept is lost."""
        return [e for e in self.errors if e.side == "after"]

    def worst_loss(self) -> str | None:
        found = [f.loss for _, f in self.losses() if f.loss is not None]
        if self.new_failures:
            found.append("error")
        return max(found, key=_RANK.__getitem__, default=None)


def _severity_rank(at: str) -> int:
    if at not in _RANK:
        raise InputError(f"unknown severity {at!r}; choose one of {', '.join(LOSS_SEVERITIES)}")
    return _RANK[at]
