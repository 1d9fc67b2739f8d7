"""Redaction that reads each text once, however many traces of a session repeat it.

An agent's call N repeats the messages of calls 1..N-1: the proxy's converter, the OTLP
receiver and ``ctxscope import`` with redaction see the same texts again in every trace of a
session (its history, its packets, its decisions' ids and reasons).
``formats.redact.redact_trace`` reads every string of every trace; here ``redact_text``'s
answer for a text (the text as redacted and what it found) is kept by content, so a
session's earlier texts cost one dict lookup and only what is new is read by the rules.

A rendered prompt is new every call but grows: call N's is call N-1's and a few more blocks
(``[role]`` and the message). Its redaction is kept up to its last block, and a prompt that
starts with one kept has the rules read only the blocks after it (``Growing``; why the
result is the whole text's, in that class).

``redact_text`` is a function of its text alone, so the traces are the ones
``redact_trace`` gives, byte for byte (tests/test_redact_memo.py compares them). The memory
is bounded like the token counter's cache: at most ``max_chars`` characters of text, then
it starts over (docs/design.md, "Capture, import, export, redaction").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from ctxcore.formats.redact import may_hold_secret, redact_text
from ctxcore.models import Trace

#: How many characters of text the memory holds before it starts over.
MAX_CHARS = 64_000_000
#: What a text with no secret is remembered as (its redaction is itself, nothing found).
_CLEAN: dict[str, int] = {}
#: A text at least this long that holds a block boundary is redacted as a growing text.
GROWING_MIN = 4096
#: Growing texts kept (the most recent), and the characters of them kept at most.
GROWING_KEPT = 64
GROWING_MAX_CHARS = 8_000_000
#: A clean JSON value this long or longer is remembered by its bytes (shorter ones cost
#: less to take apart than to hash and keep).
_MIN_KEPT_RAW = 64
#: Bytes of clean JSON values remembered at most, then it starts over (a running session's
#: parts are its context: far less; the decisions of a call whose budget moved are new).
MAX_CLEAN_BYTES = 16_000_000
#: How deep in a trace a clean JSON value is remembered: ``input.history[k]`` is 3 deep.
_KEPT_DEPTH = 3
#: A clean JSON list this long or longer is remembered (up to its last item) so that the
#: same list grown by a later call has only its new items read (``Redactor._grown_from``);
#: lists are found by their first ``_LIST_HEAD`` bytes, ``_LISTS_PER_HEAD`` (the most recent)
#: a head, at most ``MAX_LIST_BYTES`` in all, then it starts over.
_MIN_GROWN_LIST = 1024
_LIST_HEAD = 256
_LISTS_PER_HEAD = 8
MAX_LIST_BYTES = 32_000_000
_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])
_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_STR = msgspec.json.Decoder(str)
#: Where a rendered prompt's block begins (``[role]`` after a line end): the cut.
CUT = "\n["
#: The one text a rule can span a cut with (a PEM block's ``.*?``): a head holding it is
#: never cut after.
_SPANS_CUTS = "private key"


#: A text this long or longer is first read by ``may_hold_secret`` (as a JSON string): most
#: long texts (tool output, a prompt's new blocks) name a word a rule's guard names, and the
#: rules' regexes then read them at a few MB/s, where the check reads tens of MB/s and
#: clears nine in ten. A shorter text costs the rules less than the check's own set-up.
CHECK_MIN = 1024
_encode = msgspec.json.encode


def _read(text: str) -> tuple[str, dict[str, int]]:
    """``redact_text(text)``; a long text no rule can match (``may_hold_secret``, whose
    answer for a trace holding the text as a string is False only when no rule can match
    any of its strings) is itself, unread by the rules."""
    if len(text) >= CHECK_MIN:
        try:
            quoted = _encode(text)
        except UnicodeEncodeError:  # a lone surrogate: the rules read it
            return redact_text(text)
        if not may_hold_secret(quoted):
            return text, _CLEAN
    return redact_text(text)


def _add(total: dict[str, int], found: dict[str, int]) -> dict[str, int]:
    if not found:
        return total
    out = dict(total)
    for k, v in found.items():
        out[k] = out.get(k, 0) + v
    return out


@dataclass(frozen=True, slots=True)
class _Head:
    """A text up to a cut (``raw`` ends with a line end and the text went on with ``[``),
    its redaction and what it found."""

    raw: str
    red: str
    found: dict[str, int]


class Growing:
    """``redact_text`` of texts that grow by blocks, reading only what is new.

    A cut is a place between a line end and a ``[`` (where a rendered prompt's blocks
    begin). No rule matches across one: every rule's match is made of characters of
    classes that hold no white space, or of white space (``\\s*``) followed by a
    character that is never ``[`` (``:``, ``=``, a quote, a key's character), and none
    starts with ``[`` or ends with a line end; the rules' look-arounds read one character
    of a class that holds neither side of a cut. So ``redact_text(a + b)`` is
    ``redact_text(a)`` followed by ``redact_text(b)`` when ``a`` ends and ``b`` begins
    at a cut, rule after rule (each rule's matches, and its guard, lie in one of the two).
    The exception is a private-key block (``-----BEGIN … PRIVATE KEY-----`` up to its
    END, across anything): a head holding ``private key`` is never cut after, so such a
    block is read whole. tests/test_redact_memo.py checks the results against
    ``redact_text`` of the whole texts, with secrets on both sides of cuts and across them.
    """

    def __init__(self, kept: int = GROWING_KEPT, max_chars: int = GROWING_MAX_CHARS) -> None:
        self.kept = kept
        self.max_chars = max_chars
        self._heads: list[_Head] = []  # most recent last
        #: characters the rules read (the rest came from a kept head)
        self.read = 0

    def _head_of(self, text: str) -> _Head | None:
        """The longest kept head ``text`` starts with and goes on from at a cut."""
        best: _Head | None = None
        for head in self._heads:
            n = len(head.raw)
            if (
                (best is None or n > len(best.raw))
                and text.startswith("[", n)
                and text.startswith(head.raw)
            ):
                best = head
        return best

    def _keep(self, head: _Head) -> None:
        heads = self._heads
        heads.append(head)
        while len(heads) > self.kept or (
            len(heads) > 1 and sum(len(h.raw) for h in heads) > self.max_chars
        ):
            del heads[0]

    def redact(self, text: str) -> tuple[str, dict[str, int]]:
        """``redact_text(text)``, the rules reading only what a kept head does not hold."""
        cut = text.rfind(CUT) + 1
        head = self._head_of(text)
        start = len(head.raw) if head is not None else 0
        if cut <= start:  # nothing new before the last cut
            return self._join(head, text, start, _read(text[start:]))
        middle = text[start:cut]
        self.read += len(text) - start
        if _SPANS_CUTS in middle.lower():  # read whole from the head on; no new head
            return self._join(head, text, start, _read(text[start:]))
        mid, mid_found = _read(middle)
        tail, tail_found = _read(text[cut:])
        found = _add(head.found if head is not None else _CLEAN, mid_found)
        if not found and not tail_found:
            raw = text[:cut] if start else middle
            self._keep(_Head(raw, raw, _CLEAN))
            return text, _CLEAN
        red_head = (head.red if head is not None else "") + mid
        self._keep(_Head(text[:cut], red_head, found))
        return red_head + tail, _add(found, tail_found)

    @staticmethod
    def _join(
        head: _Head | None, text: str, start: int, rest: tuple[str, dict[str, int]]
    ) -> tuple[str, dict[str, int]]:
        if head is None:
            return rest
        found = _add(head.found, rest[1])
        if not found:
            return text, _CLEAN
        return head.red + rest[0], found


class Redactor:
    """``redact_trace`` with a memory of the texts it has redacted (see the module)."""

    def __init__(self, max_chars: int = MAX_CHARS) -> None:
        self.max_chars = max_chars
        self._seen: dict[str, tuple[str, dict[str, int]]] = {}
        self._chars = 0
        #: texts read by the rules (the others were known)
        self.misses = 0
        self.growing = Growing()
        #: JSON values (as bytes) found clean: at least ``_MIN_KEPT_RAW`` bytes each, at
        #: most ``MAX_CLEAN_BYTES`` of them, then it starts over
        self._clean_raw: set[bytes] = set()
        self._raw_bytes = 0
        #: clean lists and where their items end, by their head (most recent last)
        self._lists: dict[bytes, list[tuple[bytes, list[int]]]] = {}
        self._list_bytes = 0

    def text(self, text: str) -> tuple[str, dict[str, int]]:
        """``redact_text(text)``, read once per distinct text (a growing one: its new
        blocks only, and not kept whole)."""
        known = self._seen.get(text)
        if known is not None:
            return known
        self.misses += 1
        if len(text) >= GROWING_MIN and CUT in text:
            return self.growing.redact(text)
        got = _read(text)
        if self._chars + len(text) > self.max_chars:
            self._seen = {}
            self._chars = 0
        if len(text) <= self.max_chars:
            self._seen[text] = got if got[1] else (got[0], _CLEAN)
            self._chars += len(text)
        return got

    def clean_json(self, raw: bytes) -> bool:
        """Whether ``redact_text`` finds nothing in any string of the JSON value ``raw``
        (keys included), each string read once however many values hold it."""
        return self._clean(raw, 0)

    def _clean(self, raw: bytes, depth: int) -> bool:
        """Whether no string of the JSON value ``raw`` (keys included) holds a secret. A
        value whose bytes were found clean before (a session's earlier messages, packets
        and decisions, as the previous calls' traces wrote them) is one set look-up; any
        other is taken apart and its strings looked up in the memory, nothing built. Only
        values ``_KEPT_DEPTH`` deep are remembered (the items of a trace's lists: what the
        next call repeats; the lists themselves and the trace are new every call)."""
        if raw in self._clean_raw:
            return True
        first = raw[:1]
        if first == b"{":
            obj = _OBJECT.decode(raw)
            ok = all(not (self._seen.get(k) or self.text(k))[1] for k in obj) and all(
                self._clean(bytes(v), depth + 1) for v in obj.values()
            )
        elif first == b"[":
            ok = self._list_clean(raw, depth)
        elif first == b'"':
            value = _STR.decode(raw)
            ok = not (self._seen.get(value) or self.text(value))[1]
        else:
            return True  # a number, true, false or null
        if ok and depth >= _KEPT_DEPTH and len(raw) >= _MIN_KEPT_RAW:
            if self._raw_bytes + len(raw) > MAX_CLEAN_BYTES:
                self._clean_raw = set()
                self._raw_bytes = 0
            self._clean_raw.add(raw)
            self._raw_bytes += len(raw)
        return ok

    def _list_clean(self, raw: bytes, depth: int) -> bool:
        """``_clean`` of a JSON list. A session's list repeats the earlier calls' items: of a
        list that starts with a clean one's first items (the same bytes), only the items
        after them are read, and of those only the ones not known clean are looked at."""
        start, ends = 0, list[int]()
        if len(raw) >= _MIN_GROWN_LIST:
            start, ends = self._grown_from(raw)
            if start == len(raw):
                return True
        body = b"[" + raw[start:] if start else raw
        items = [bytes(v) for v in _LIST.decode(body)]
        known = self._clean_raw
        ok = all(self._clean(v, depth + 1) for v in items if v not in known)
        if ok and len(raw) >= _MIN_GROWN_LIST:
            self._remember_list(raw, start, ends, items)
        return ok

    def _grown_from(self, raw: bytes) -> tuple[int, list[int]]:
        """Where the items of ``raw`` that no remembered clean list holds begin (after the
        comma that follows the last item they share; ``len(raw)`` when a clean list holds
        them all; 0 when none shares its first item), and where each shared item ends. Up
        to the end of a shared item the bytes are the clean list's, and a JSON reader is in
        the same place after them: between two items of the list."""
        best, best_ends = 0, []
        view = memoryview(raw)
        for kept, ends in self._lists.get(raw[:_LIST_HEAD], ()):
            kv = memoryview(kept)
            lo, hi = 0, len(ends)  # ends[:lo] shared; ends[hi:] not
            while lo < hi:
                mid = (lo + hi) // 2
                if raw.startswith(kv[: ends[mid]]):
                    lo = mid + 1
                else:
                    hi = mid
            while lo and view[ends[lo - 1]] not in (0x2C, 0x5D):  # a number's digits go on
                lo -= 1
            if lo and ends[lo - 1] + 1 > best:
                best, best_ends = ends[lo - 1] + 1, ends[:lo]
        if best and view[best - 1] == 0x5D:  # "]": every item of raw is a clean list's
            return len(raw), best_ends
        return best, best_ends

    def _remember_list(self, raw: bytes, start: int, ends: list[int], items: list[bytes]) -> None:
        """Remember the clean list ``raw`` (its items after ``start``, ``items``, each
        followed by one byte) with where each item ends, for the lists that go on from it; a
        list written with white space between its items is not remembered."""
        at, ends = start or 1, list(ends)
        for v in items:
            at += len(v)
            ends.append(at)
            at += 1
        if not ends or at != len(raw):
            return
        if self._list_bytes + len(raw) > MAX_LIST_BYTES:
            self._lists = {}
            self._list_bytes = 0
        kept = self._lists.setdefault(raw[:_LIST_HEAD], [])
        kept.append((raw, ends))
        self._list_bytes += len(raw)
        if len(kept) > _LISTS_PER_HEAD:
            self._list_bytes -= len(kept.pop(0)[0])

    def _trace_clean(self, line: bytes) -> bool:
        """Whether the trace whose JSON is ``line`` holds no secret (its ``redactions``
        aside: the counts of an earlier pass, which ``redact_trace`` does not read)."""
        top = _OBJECT.decode(line)
        top.pop("redactions", None)
        return all(
            not (self._seen.get(k) or self.text(k))[1] and self._clean(bytes(v), 1)
            for k, v in top.items()
        )

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

    def line(self, trace: Trace) -> tuple[str, dict[str, int]]:
        """The JSON of ``redact_trace(trace)``'s trace (``to_json``) and what it found."""
        line = trace.to_json()
        if self._trace_clean(line.encode("utf-8", "surrogatepass")):
            return line, {}
        red, counts = self._redacted(trace)
        return red.to_json(), counts

    def trace(self, trace: Trace) -> tuple[Trace, dict[str, int]]:
        """What ``formats.redact.redact_trace(trace)`` returns, from the memory where it can."""
        if self._trace_clean(trace.to_json().encode("utf-8", "surrogatepass")):
            return trace, {}
        return self._redacted(trace)

    def _redacted(self, trace: Trace) -> tuple[Trace, dict[str, int]]:
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


__all__ = ["GROWING_MIN", "MAX_CHARS", "MAX_CLEAN_BYTES", "Growing", "Redactor"]
