"""Redaction that reads each text once, however many traces of a session repeat it.

An agent's call N repeats the messages of calls 1..N-1: the proxy's converter, the OTLP
receiver and ``ctxscope import`` with redaction see the same texts again in every trace of a
session (its history, its packets, its decisions' ids and reasons).
``formats.redact.redact_trace`` reads every string of every trace; here ``redact_text``'s
answer for a text (the text as redacted and what it found) is kept by content, so a
session's earlier texts cost one dict lookup and only what is new is read by the rules.
``redact_text`` is a function of its text alone, so the traces are the ones
``redact_trace`` gives, byte for byte (tests/test_redact_memo.py compares them). The memory
is bounded like the token counter's cache: at most ``max_chars`` characters of text, then
it starts over (docs/design.md, "Capture, import, export, redaction").
"""

from __future__ import annotations

from typing import Any

from ctxcore.formats.redact import redact_text
from ctxcore.models import Trace

#: How many characters of text the memory holds before it starts over.
MAX_CHARS = 64_000_000
#: What a text with no secret is remembered as (its redaction is itself, nothing found).
_CLEAN: dict[str, int] = {}


class Redactor:
    """``redact_trace`` with a memory of the texts it has redacted (see the module)."""

    def __init__(self, max_chars: int = MAX_CHARS) -> None:
        self.max_chars = max_chars
        self._seen: dict[str, tuple[str, dict[str, int]]] = {}
        self._chars = 0
        #: texts read by the rules (the others were known)
        self.misses = 0

    def text(self, text: str) -> tuple[str, dict[str, int]]:
        """``redact_text(text)``, read once per distinct text."""
        known = self._seen.get(text)
        if known is not None:
            return known
        got = redact_text(text)
        self.misses += 1
        if self._chars + len(text) > self.max_chars:
            self._seen = {}
            self._chars = 0
        if len(text) <= self.max_chars:
            self._seen[text] = got if got[1] else (got[0], _CLEAN)
            self._chars += len(text)
        return got

    def _walk(self, node: Any, counts: dict[str, int]) -> Any:
        # every string at every depth, keys included, as formats.redact._walk reads them
        kind = type(node)
        if kind is str:
            new, found = self._seen.get(node) or self.text(node)
            if found:
                for k, v in found.items():
                    counts[k] = counts.get(k, 0) + v
            return new
        if kind is dict:
            walk = self._walk
            return {walk(k, counts): walk(v, counts) for k, v in node.items()}
        if kind is list:
            walk = self._walk
            return [walk(v, counts) for v in node]
        return node

    def trace(self, trace: Trace) -> tuple[Trace, dict[str, int]]:
        """What ``formats.redact.redact_trace(trace)`` returns, from the memory where it can."""
        counts: dict[str, int] = {}
        data = trace.to_dict()
        redactions = data.pop("redactions", {}) or {}
        data = self._walk(data, counts)
        if not counts:
            return trace, counts
        total = dict(redactions)
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v
        data["redactions"] = dict(sorted(total.items()))
        return Trace.model_validate(data), counts


__all__ = ["MAX_CHARS", "Redactor"]
