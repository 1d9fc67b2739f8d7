"""Structure and compress for the ``ctxscope`` preset.

``render(prep, plan)`` lays the chosen segments out in the six partitions, in the order
``[Role & Policies] [Task] [State] [Evidence] [Context] [Output]``, each partition's items in
gather order (history stays chronological, with its summary where the oldest folded message
was). Partitions without items are left out, except ``[Task]`` and ``[Output]``. Every cut
is already marked inside its segment by the degrader ("[… 1,234 tokens of tool:call_12
summarized; source id tool:call_12 …]").

``compress`` is the last resort. With a tiktoken encoding the plan's charge is the exact
count of the prompt, so it never has anything to do; with an estimator (whose counts are not
additive over concatenation) it removes whole segments, lowest score first, never a
must-keep item and never a header, until the estimated count fits.
"""

from __future__ import annotations

from ctxcore.models import PARTITIONS
from ctxcore.pipeline.gather import Prepared, header
from ctxcore.pipeline.select import DROPPED, INCLUDED, R_REMOVED, Plan
from ctxcore.tokens import TokenCounter


def render(prep: Prepared, plan: Plan) -> str:
    """The prompt: partition headers, the task, the chosen segments, the output block."""
    by_part: list[list[str]] = [[] for _ in PARTITIONS]
    part = prep.partition_list
    summary = plan.summary
    for i in range(len(prep.items)):
        if summary is not None and summary.index == i:
            by_part[part[i]].append(summary.segment)
        seg = plan.segment_of(prep, i)
        if seg is not None:
            by_part[part[i]].append(seg)
    chunks: list[str] = []
    for p, name in enumerate(PARTITIONS):
        if name == "[Task]":
            chunks.append(header(name))
            chunks.append(prep.task_segment)
            chunks.extend(by_part[p])
        elif name == "[Output]":
            chunks.append(header(name))
            chunks.append(prep.output_segment)
        elif by_part[p]:
            chunks.append(header(name))
            chunks.extend(by_part[p])
    return "".join(chunks)


def compress(
    prep: Prepared, plan: Plan, prompt: str, available: int, counter: TokenCounter
) -> tuple[str, int]:
    """Remove lowest-score optional segments until ``counter`` says the prompt fits."""
    used = counter.count(prompt)
    if used <= available:
        return prompt, used
    must = set(plan.must_keep)
    removable = sorted(
        (
            i
            for i in range(len(prep.items))
            if plan.status[i] in INCLUDED and plan.tokens_after[i] > 0 and i not in must
        ),
        key=lambda i: (float(plan.score[i]), -i),
    )
    for i in removable:
        before = plan.tokens_after[i]
        plan.status[i] = DROPPED
        plan.reason[i] = R_REMOVED
        plan.tokens_after[i] = 0
        p = prep.partition_list[i]
        plan.part_used[p] -= before
        plan.part_items[p] -= 1
        plan.notes.setdefault(i, []).append(
            f"the {counter.name} estimate of the whole prompt was {used:,} tokens for "
            f"{available:,} available; removing it freed about {before:,}"
        )
        prompt = render(prep, plan)
        used = counter.count(prompt)
        if used <= available:
            break
    return prompt, used
