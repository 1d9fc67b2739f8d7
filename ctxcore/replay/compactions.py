"""A policy's own compactions on recorded sessions, for the compaction ledger (docs/design.md,
"Compaction ledger").

A preset that summarizes (``auto-compact``, ``langchain-summarization``,
``openhands-summarizing``, ``masking-summary-hybrid``) marks each recorded part its summary
replaced ``summarized`` and sends the summary as ``builder:history:summary`` (``:2``, … for
more). Here each recorded call and the policy's rebuild of it become what
``ctxcore.ledger.policy_ledger`` reads (``Rebuilt``): the texts of the parts the policy
summarized, as ``recorded`` rebuilds them from the input (a part the recording's own
compaction had replaced is the recording's, not the policy's), the user's among them, the
summaries' text and the prompt sent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ctxcore.ledger import Entry, Rebuilt, policy_ledger
from ctxcore.models import BuildResult, Status, Trace
from ctxcore.pipeline.gather import HISTORY_SUMMARY_ID
from ctxcore.pipeline.recorded import conversation


def _summarized(result: BuildResult | None) -> list[str]:
    """The ids of the parts a build marks summarized, in prompt order."""
    if result is None:
        return []
    return [d.packet_id for d in result.decisions if d.status == Status.SUMMARIZED]


def rebuilt(recorded: Trace, result: BuildResult) -> Rebuilt:
    """What the ledger reads of a policy's build ``result`` of the call ``recorded``."""
    summary = "\n".join(
        m.content for m in result.messages or [] if (m.id or "").startswith(HISTORY_SUMMARY_ID)
    )
    already = set(_summarized(recorded.result))
    ids = [i for i in _summarized(result) if i not in already]
    if not ids:
        return Rebuilt(result.prompt, summary=summary)
    parts = {p.id: p.message for p in conversation(recorded.input).parts}
    gone = [parts[i] for i in ids if i in parts]
    return Rebuilt(
        prompt=result.prompt,
        replaced=tuple(m.content for m in gone),
        replaced_user=tuple(m.content for m in gone if m.role == "user"),
        summary=summary,
    )


def ledger_of_policy(
    recorded: Sequence[Trace], variants: Mapping[str, Trace], policy: str
) -> list[Entry]:
    """The ledger of ``policy``'s compactions: ``variants`` its rebuilds of ``recorded``,
    by the recorded trace's id (a call not rebuilt has none)."""
    calls: list[tuple[Trace, Rebuilt | None]] = []
    for t in recorded:
        v = variants.get(t.trace_id)
        calls.append((t, rebuilt(t, v.result) if v is not None and v.result is not None else None))
    return policy_ledger(calls, policy)


__all__ = ["ledger_of_policy", "rebuilt"]
