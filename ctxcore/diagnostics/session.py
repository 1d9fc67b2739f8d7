"""A session's diagnosis: findings per turn, and the turn where each item was first lost.

"Why did turn 14 go wrong?" often has its answer earlier: the constraint the user gave in
turn 2 was summarized away in turn 9. The Timeline shows detector hits per turn from
``SessionDiagnosis.turns`` and marks ``SessionDiagnosis.lost``: for each packet id (ids
are stable across turns) and each user constraint, the first turn in which it left the
prompt after having been in it — or, for a must-keep packet, was never let in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ctxcore.diagnostics.context import IN_PROMPT, LOST
from ctxcore.models import Finding, Status, Trace
from ctxcore.pipeline.common import HISTORY_ID


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TurnFindings(_Model):
    """The findings of one turn (one trace) of a session."""

    trace_id: str
    turn: int
    findings: list[Finding] = Field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Detector id → number of findings (for per-turn markers on the Timeline)."""
        return dict(Counter(f.detector for f in self.findings))

    @property
    def worst(self) -> str | None:
        order = {"info": 0, "warning": 1, "error": 2}
        return max((f.severity for f in self.findings), key=order.__getitem__, default=None)


class LostItem(_Model):
    """The first turn in which something the agent needed stopped reaching the model."""

    item: str  # a packet id, or the text of a user constraint
    kind: Literal["packet", "constraint"]
    first_seen_turn: int | None  # first turn it was in the prompt (None: never)
    lost_turn: int
    trace_id: str
    status: str  # dropped / filtered / not_rendered / summarized / missing
    reason: str


class SessionDiagnosis(_Model):
    """What ``diagnose_session`` returns (shown on the Timeline)."""

    session_id: str
    turns: list[TurnFindings]
    lost: list[LostItem] = Field(default_factory=list)

    def first_lost(self, item: str) -> LostItem | None:
        """The first turn where ``item`` (a packet id or constraint text) was lost."""
        return next((x for x in self.lost if x.item == item), None)

    def by_turn(self) -> dict[int, list[Finding]]:
        return {t.turn: list(t.findings) for t in self.turns}

    def detector_counts(self) -> dict[int, dict[str, int]]:
        """turn → detector id → count."""
        return {t.turn: t.counts() for t in self.turns}


def _tracked(packet_id: str) -> bool:
    # builder:history:K is counted from the oldest kept message, so K names a different
    # message in each turn; the whole-history packet is not one item either.
    return not packet_id.startswith(HISTORY_ID)


def lost_items(
    traces: list[Trace], turns: list[TurnFindings], *, seen: Mapping[str, int] | None = None
) -> list[LostItem]:
    """Packets and constraints, each with the first turn where it was lost (turn order).

    ``seen`` gives, per packet id, a turn from which it counts as having been in the prompt
    although these traces never let it in: replay compares two builds of a session, and an
    item the other side had in its prompt at turn 13 is lost at turn 13 on a side that drops
    it there (without ``seen`` that side never "lost" it, having never had it)."""
    seen_in: dict[str, int] = {}
    also = seen or {}
    out: dict[str, LostItem] = {}
    for t in traces:
        assert t.result is not None
        must = {p.id for p in t.input.packets if p.must_keep}
        for d in t.result.decisions:
            pid = d.packet_id
            if not _tracked(pid) or pid in out:
                continue
            if d.status in IN_PROMPT:
                seen_in.setdefault(pid, t.turn)
                continue
            lost = d.status in LOST or d.status == Status.SUMMARIZED
            if lost and (pid in seen_in or pid in must or also.get(pid, t.turn + 1) <= t.turn):
                out[pid] = LostItem(
                    item=pid,
                    kind="packet",
                    first_seen_turn=seen_in.get(pid),
                    lost_turn=t.turn,
                    trace_id=t.trace_id,
                    status=d.status.value,
                    reason=f"{d.reason.value}: {d.reason_text}",
                )
    for tf in turns:
        for f in tf.findings:
            texts = f.evidence.get("constraints")
            if f.detector != "must_have_lost" or not isinstance(texts, list):
                continue
            origin = f.evidence.get("turn")
            for text in texts:
                if not isinstance(text, str) or text in out:
                    continue
                out[text] = LostItem(
                    item=text,
                    kind="constraint",
                    first_seen_turn=origin if isinstance(origin, int) else None,
                    lost_turn=tf.turn,
                    trace_id=tf.trace_id,
                    status=str(f.evidence.get("status", "missing")),
                    reason=f.message,
                )
    return sorted(out.values(), key=lambda x: (x.lost_turn, x.kind, x.item))
