"""What an import found in its source, so that nothing is lost without a word.

Every importer counts what the source holds (messages, system parts, tool calls, tool
results, tool definitions, images and documents; thinking parts and compactions where it
has some) while it reads, and records every part it does not know: such a part is never
dropped; its JSON is kept as text in the message it belongs to, and its path is listed
(``messages[3].content[1].type='container_upload'``).
The tally travels in the trace as ``metadata["import"]``; ``ctxscope import`` prints it
against what reached the trace, and the ``import_loss`` detector reports the unknown parts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ctxcore.models import Trace

#: What is counted on both sides, in the order ``ctxscope import`` prints it.
COUNTED: tuple[str, ...] = (
    "messages",
    "system_parts",
    "tool_calls",
    "tool_results",
    "tools",
    "media",
)
#: Counted too, but in ``metadata.import.source`` only where the source holds some: reasoning
#: parts (thinking blocks, reasoning items, thought parts; an encrypted one too) and
#: compactions (a compaction block or item: the summary that stands for older context).
OPTIONAL: tuple[str, ...] = ("thinking", "compactions")
#: Every count a ``Tally`` keeps.
TALLIED: tuple[str, ...] = COUNTED + OPTIONAL
LABELS = {
    "messages": "messages",
    "system_parts": "system parts",
    "tool_calls": "tool calls",
    "tool_results": "tool results",
    "tools": "tool definitions",
    "media": "images/documents",
    "thinking": "thinking parts",
    "compactions": "compactions",
}
#: The kind of the packet a compaction's summary becomes (``norm.captured_input_from_norm``).
COMPACTION_KIND = "summary"
#: How many unknown-part paths one trace lists (the total is always kept).
MAX_LISTED = 50
#: Longest JSON text kept for one unknown part (its size is said when cut).
MAX_UNKNOWN_CHARS = 20_000


@dataclass
class Tally:
    """Counts of what a source holds, and the parts an importer kept only as text."""

    format: str
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TALLIED, 0))
    unknown: list[str] = field(default_factory=list)
    unknown_total: int = 0
    cache_control: list[str] = field(default_factory=list)
    #: the lifetime a ``cache_control`` mark names ("5m" / "1h"), by the mark's path
    cache_ttl: dict[str, str] = field(default_factory=dict)

    def add(self, what: str, n: int = 1) -> None:
        self.counts[what] += n

    def mark(self, path: str, mark: Any) -> None:
        """A cache breakpoint at ``path``; ``mark`` is its ``cache_control`` (or
        ``cachePoint``) object, whose ``ttl`` is kept beside the path when it names one."""
        self.cache_control.append(path)
        ttl = mark.get("ttl") if isinstance(mark, dict) else None
        if ttl in ("5m", "1h"):
            self.cache_ttl[path] = ttl

    def keep_unknown(self, path: str, part: Any) -> str:
        """Record a part of a type this importer does not know and return the text that
        keeps it in its message: the part's JSON (cut past ``MAX_UNKNOWN_CHARS``)."""
        kind = part.get("type") if isinstance(part, dict) else None
        if kind is None and isinstance(part, dict) and len(part) == 1:
            kind = next(iter(part))  # Bedrock/Gemini style: {"toolUse": {...}}
        self.unknown_total += 1
        if len(self.unknown) < MAX_LISTED:
            self.unknown.append(f"{path}.type={kind!r}" if kind else path)
        text = json.dumps(part, ensure_ascii=False, default=str)
        if len(text) > MAX_UNKNOWN_CHARS:
            text = text[:MAX_UNKNOWN_CHARS] + f"… [{len(text):,} chars of JSON, cut]"
        return text

    def to_metadata(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": self.format, "source": source_counts(self.counts)}
        if self.unknown_total:
            out["kept_as_text"] = list(self.unknown)
            out["kept_as_text_total"] = self.unknown_total
        if self.cache_control:
            out["cache_control"] = list(self.cache_control[:MAX_LISTED])
        if self.cache_ttl:
            kept = set(self.cache_control[:MAX_LISTED])
            out["cache_control_ttl"] = {k: v for k, v in self.cache_ttl.items() if k in kept}
        return out


def source_counts(counts: dict[str, int]) -> dict[str, int]:
    """What ``metadata.import.source`` holds: every ``COUNTED`` count, and an ``OPTIONAL`` one
    where it is not 0."""
    out = {key: int(counts.get(key, 0)) for key in COUNTED}
    out.update({key: int(counts[key]) for key in OPTIONAL if counts.get(key)})
    return out


def imported_counts(trace: Trace) -> dict[str, int]:
    """The same counts, read from what reached the trace. A message a compaction replaced
    stays in the chat messages (``replaced_by``), out of the captured input: its tool result
    is counted there."""
    messages = (trace.result.messages if trace.result is not None else None) or []
    # A source message may become several (an Anthropic user message holding tool results
    # becomes one tool message per result, then the text): ids ``msg-<i>`` / ``msg-<i>.<j>``
    # name the source message each came from.
    sources = {(m.id or "").split(".")[0] for m in messages if (m.id or "").startswith("msg-")}
    replaced = [m for m in messages if m.metadata.get("replaced_by")]
    return source_counts(
        {
            "messages": len(sources),
            "system_parts": sum(1 for m in messages if m.role in ("system", "developer")),
            "tool_calls": sum(len(m.metadata.get("tool_calls") or []) for m in messages),
            "tool_results": sum(1 for p in trace.input.packets if p.kind == "tool_result")
            + sum(1 for m in replaced if m.role == "tool"),
            "tools": len(trace.input.tools),
            "media": sum(len(m.metadata.get("media") or []) for m in messages),
            "thinking": sum(len(m.metadata.get("thinking") or []) for m in messages),
            "compactions": sum(1 for m in messages if m.metadata.get("compaction")),
        }
    )


def describe_trace(trace: Trace, *, several: bool) -> list[str]:
    """``describe``'s lines for one trace: it is named by session and turn when the import
    holds ``several`` traces, else it is the "source"."""
    meta = trace.metadata.get("import") if isinstance(trace.metadata, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("source"), dict):
        return []
    src: dict[str, int] = meta["source"]
    got = imported_counts(trace)
    parts = []
    for key in TALLIED:
        a, b = int(src.get(key, 0)), got.get(key, 0)
        if a or b:
            parts.append(f"{a} {LABELS[key]}" if a == b else f"{LABELS[key]} {a} → {b}")
    where = f"{trace.session_id} turn {trace.turn}" if several else "source"
    lines = [f"  {where} ({meta.get('format')}): " + (", ".join(parts) or "empty")]
    for path in meta.get("kept_as_text") or []:
        lines.append(f"    kept as JSON text (a part this importer does not know): {path}")
    more = int(meta.get("kept_as_text_total", 0) or 0) - len(meta.get("kept_as_text") or [])
    if more > 0:
        lines.append(f"    … and {more} more part(s) kept as JSON text")
    for error in meta.get("skipped") or []:  # broken records of the same file
        lines.append(f"    not imported: {error}")
    return lines


def describe(traces: list[Trace]) -> list[str]:
    """Lines for ``ctxscope import``: per format, source counts against what came through,
    and every part kept only as text."""
    return [line for t in traces for line in describe_trace(t, several=len(traces) > 1)]


__all__ = [
    "COMPACTION_KIND",
    "COUNTED",
    "LABELS",
    "OPTIONAL",
    "TALLIED",
    "Tally",
    "describe",
    "describe_trace",
    "imported_counts",
    "source_counts",
]
