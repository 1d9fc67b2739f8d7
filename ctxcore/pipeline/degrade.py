"""The degraded versions of items, for the ladder of the ``ctxscope`` preset.

The rungs are described in docs/design.md, "Degradation ladder". A ``Degrader`` makes the
shortened segment of an item for one rung — a tool-log summary, a file outline, a compact
repo map, a shortened message, or one structured summary of the old history — renders it
with the marker that points back to the source id ("[… 1,234 tokens of tool:call_12
summarized; source id tool:call_12 …]"), counts it with the real tokenizer, cuts it
(token-exact) if the summarizer overshot, and memoises the result in the ``Prepared`` input:
a degraded version is made once per input, however many builds or sweep cells ask for it.
"""

from __future__ import annotations

from ctxcore.pipeline.common import Summarizer
from ctxcore.pipeline.gather import HISTORY_SUMMARY_ID, Item, Prepared, segment
from ctxcore.tokens import TokenCounter


def _fmt(n: int) -> str:
    return f"{n:,}"


def history_content(items: list[Item]) -> str:
    """The old history messages as the history summarizer reads them."""
    return "\n\n".join(f"[{it.id}] {it.role}: {it.text}" for it in items)


class Degrader:
    """Makes (and memoises in ``Prepared``) the degraded segment of an item."""

    def __init__(self, prep: Prepared, summarizer: Summarizer, counter: TokenCounter) -> None:
        self.prep = prep
        self.summarizer = summarizer
        self.counter = counter
        # memo keys use id(summarizer): keep it alive so that the id is never reused
        prep.summarizers[id(summarizer)] = summarizer

    def _fit(
        self, item_id: str, label: str, body: str, marker: str, target: int
    ) -> tuple[str, int]:
        seg = segment(item_id, label, f"{body}\n{marker}")
        n = self.counter.count(seg)
        if n > target * 3 // 2 + 48:
            body = self.counter.truncate(body, target).rstrip()
            seg = segment(item_id, label, f"{body}\n{marker}")
            n = self.counter.count(seg)
        return seg, n

    def item(self, i: int, rung: str) -> tuple[str, int]:
        key = (i, rung, id(self.summarizer))
        hit = self.prep.degraded.get(key)
        if hit is not None:
            return hit
        it = self.prep.items[i]
        tok = it.tokens
        if rung == "recent":
            target = min(max(tok // 3, 48), 400)
            head = self.counter.truncate(it.text, target).rstrip()
            marker = (
                f"[… {_fmt(tok - self.counter.count(head))} of {_fmt(tok)} tokens of {it.id} cut; "
                f"source id {it.id} …]"
            )
            out = self._fit(it.id, f"{it.role} (shortened)", head, marker, target)
        else:
            target = min(max(tok // 4, 64), 600)
            body = self.summarizer(it.kind, it.text, target).rstrip()
            marker = f"[… {_fmt(tok)} tokens of {it.id} summarized; source id {it.id} …]"
            out = self._fit(it.id, "summarized", body, marker, target)
        self.prep.degraded[key] = out
        return out

    def history(self, idx: list[int]) -> tuple[str, int, int]:
        key = ("history", tuple(idx), id(self.summarizer))
        hit = self.prep.degraded.get(key)
        if hit is not None:
            return hit[0], hit[1], sum(int(self.prep.tokens[i]) for i in idx)
        items = [self.prep.items[i] for i in idx]
        content = history_content(items)
        total = sum(it.tokens for it in items)
        target = min(max(total // 3, 120), 800)
        body = self.summarizer("history", content, target).rstrip()
        a, b = items[0].id, items[-1].id
        marker = f"[… {_fmt(total)} tokens of {a} … {b} summarized; source ids {a} … {b} …]"
        seg, n = self._fit(
            HISTORY_SUMMARY_ID, f"summary of {len(items)} messages", body, marker, target
        )
        self.prep.degraded[key] = (seg, n)
        return seg, n, total
