"""The compaction ledger (docs/design.md, "Compaction ledger"): for every compaction a session
recorded, what its summary kept and what it lost of the items that mattered before it, and
the turn where a lost item was next needed.

A compaction is where the importers mark one: a session log's call whose
``metadata.import.compaction`` differs from the call's before it (Claude Code
``compact_boundary``/``isCompactSummary``, Codex ``compacted``), or an Anthropic request's
``compaction`` summary packet (``metadata.compaction``). What came before it is the last call
before it (its prompt and its reply) and the messages it replaced that the trace still
holds; what the compaction carried on is the first call after it: its system text, history
and packets (the summary and what the agent kept), less the messages it replaced, and its
query only if that query is the one before it (Codex keeps the user's messages; Claude
Code's next query is new).

The items are those the recall measure and the diagnostics read: file paths and test names
(``summarize.targets_of``' patterns), function names (``def f``, ``f(``) and other code
identifiers (``snake_case``, ``camelCase``), error lines (``summarize.error_evidence``, at
least 12 characters) and the user's constraints (``summarize.constraint_sentences`` on the
user's messages, as ``must_have_lost`` finds them). An item is kept when its text (case and
spacing aside) is in what the compaction carried on, else lost; a lost item is next needed at
the first call from the compaction on whose reply names it (the model used it) or whose
prompt holds it again (a tool read it again, the user said it again).

A policy's own compactions (``policy_ledger``) follow the same rules on its rebuild of each
recorded call (``Rebuilt``, made by ``ctxcore.replay.compactions``): a compaction is a call
whose rebuild summarized recorded parts with a summary the call before's rebuild did not
send; what came before it is the text of the parts it summarized, what it carried on the
prompt it sent; a lost item is next needed at the first call from it on whose recorded reply
names it or whose rebuilt prompt holds it again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxcore.models import Trace
from ctxcore.summarize import _USED_PATH, _USED_TEST, constraint_sentences, error_evidence

#: the kinds of item, in the order the ledger lists them
KINDS = ("path", "identifier", "error", "constraint")

#: a function name (``def f``, ``function f``, ``f(``) or a code identifier with a lower-case
#: letter in it: ``snake_case`` or ``camelCase`` (``REDACTED_TEXT`` is not one)
_FUNCTION = re.compile(
    r"\b(?:def|function|fn|func|class)\s+([A-Za-z_]\w{2,})|\b([A-Za-z_]\w{2,})\("
)
_IDENTIFIER = re.compile(r"\b(?=\w*[a-z])(?:[A-Za-z]\w*_\w*[A-Za-z0-9]|[a-z]+[A-Z]\w*)\b")


@dataclass(frozen=True)
class Item:
    """One thing that mattered before a compaction: kept or lost, and where a lost one was
    next needed (``needed_turn`` the call's turn, ``needed_in`` ``reply`` or ``prompt``)."""

    kind: str
    text: str
    kept: bool
    needed_turn: int | None = None
    needed_in: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "text": self.text,
            "kept": self.kept,
            "needed_turn": self.needed_turn,
            "needed_in": self.needed_in,
        }


@dataclass(frozen=True)
class Entry:
    """One compaction of a session: where (the first call after it, the last before it),
    what it is (the importer's label) and the items."""

    session_id: str
    turn: int
    before_turn: int | None
    label: str
    items: list[Item] = field(default_factory=list)
    #: the policy that made it (its preset and knobs); None for a compaction the log recorded
    policy: str | None = None

    @property
    def kept(self) -> list[Item]:
        return [i for i in self.items if i.kept]

    @property
    def lost(self) -> list[Item]:
        return [i for i in self.items if not i.kept]

    def as_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "turn": self.turn,
            "before_turn": self.before_turn,
            "compaction": self.label,
            "policy": self.policy,
            "kept": len(self.kept),
            "lost": len(self.lost),
            "items": [i.as_json() for i in self.items],
        }


def _low(text: str) -> str:
    """Lower-cased, runs of white space made one space: how items are looked for."""
    return " ".join(text.split()).lower()


def prompt_text(t: Trace) -> str:
    """Everything a call's prompt held, as text: system, history, packets, query."""
    inp = t.input
    parts = [inp.system_instructions, *(m.content for m in inp.history)]
    parts.extend(p.content for p in inp.packets)
    parts.append(inp.query)
    return "\n".join(parts)


def _reply(t: Trace) -> str:
    return (t.outcome.output or "") if t.outcome is not None else ""


def _user_text(t: Trace) -> str:
    """The user's messages a call's prompt held (history and query)."""
    msgs = [m.content for m in t.input.history if m.role == "user"]
    return "\n".join([*msgs, t.input.query])


def _found(text: str) -> list[tuple[str, str]]:
    """The items of ``text`` but constraints (``(kind, text)``, first seen first): paths and
    test names, function names and identifiers, error lines."""
    found: dict[tuple[str, str], None] = {}
    for pat in (_USED_PATH, _USED_TEST):
        for m in pat.findall(text):
            if len(m) >= 5:
                found.setdefault(("path" if pat is _USED_PATH else "identifier", m), None)
    for m in _FUNCTION.finditer(text):
        found.setdefault(("identifier", m.group(1) or m.group(2)), None)
    for m in _IDENTIFIER.finditer(text):
        found.setdefault(("identifier", m.group(0)), None)
    for line in error_evidence(text):
        if len(line) >= 12:
            found.setdefault(("error", line[:200]), None)
    return list(found)


def _finished(found: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """``found`` without repeats, without an identifier that is part of a path found (an
    identifier has no new line, so it is in one path exactly when it is in them joined),
    by kind in ``KINDS`` order."""
    unique = dict.fromkeys(found)
    paths = "\n".join(t for k, t in unique if k == "path")
    out = [(k, t) for k, t in unique if not (k == "identifier" and t in paths)]
    return sorted(out, key=lambda kt: KINDS.index(kt[0]))


def items_of(text: str, user_text: str) -> list[tuple[str, str]]:
    """The items of ``text`` (``(kind, text)``, first seen first, no repeats): paths and test
    names, function names and identifiers, error lines; constraints from ``user_text``."""
    said = [("constraint", sent) for sent in constraint_sentences(user_text)]
    return _finished([*_found(text), *said])


class _Later:
    """A session's calls as the search for where a lost item was next needed reads them: each
    call's turn, reply and prompt, lower-cased once. The first call found for an item is
    remembered, so the entries of a session (in turn order) do not search again."""

    def __init__(self, turns: list[int], replies: list[str], prompts: list[str]) -> None:
        self.turns = turns
        self.replies = [_low(r) for r in replies]
        self.prompts = [_low(p) for p in prompts]
        self._found: dict[str, tuple[int, int | None, str | None]] = {}

    def first(self, item: str, start: int) -> tuple[int | None, str | None]:
        """The turn of the first call from index ``start`` on whose reply names ``item``, or
        whose prompt holds it, and which of the two (None, None: never again)."""
        needle = _low(item)
        seen = self._found.get(needle)
        if seen is not None and seen[0] <= start and (seen[1] is None or seen[1] >= start):
            at, where = seen[1], seen[2]
        else:
            at, where = None, None
            for k in range(start, len(self.turns)):
                if needle in self.replies[k]:
                    at, where = k, "reply"
                    break
                if needle in self.prompts[k]:
                    at, where = k, "prompt"
                    break
            self._found[needle] = (start, at, where)
        return (self.turns[at], where) if at is not None else (None, None)


def _weighed(found: list[tuple[str, str]], carried: str, later: _Later, k: int) -> list[Item]:
    """Each item kept (in ``carried``, case and spacing aside) or lost, a lost one with the
    call that next needed it from index ``k`` on."""
    low_carried = _low(carried)
    items: list[Item] = []
    for kind, text in found:
        if _low(text) in low_carried:
            items.append(Item(kind, text, True))
        else:
            turn, where = later.first(text, k)
            items.append(Item(kind, text, False, turn, where))
    return items


def _replaced_ids(t: Trace) -> tuple[list[str], str]:
    """The ids an Anthropic compaction packet of ``t`` replaced, and its summary's text."""
    for p in t.input.packets:
        comp = p.metadata.get("compaction")
        if isinstance(comp, dict):
            ids = comp.get("replaced_ids")
            return [str(i) for i in ids] if isinstance(ids, list) else [], p.content
    return [], ""


def _carried(t: Trace, replaced: set[str], before: Trace | None) -> tuple[str, str]:
    """What the first call after a compaction carried on (its text), and its replaced
    messages that it still holds (their text)."""
    inp = t.input
    kept = [inp.system_instructions]
    gone: list[str] = []
    for m in inp.history:
        (gone if m.id in replaced else kept).append(m.content)
    for p in inp.packets:
        (gone if p.id in replaced else kept).append(p.content)
    if before is not None and inp.query == before.input.query:
        kept.append(inp.query)
    return "\n".join(kept), "\n".join(gone)


def _import_mark(t: Trace) -> dict[str, Any] | None:
    mark = t.metadata.get("import", {}).get("compaction")
    return mark if isinstance(mark, dict) else None


def compaction_starts(traces: Sequence[Trace]) -> list[int]:
    """The indexes of ``traces`` (one session, in turn order) where a compaction took effect:
    an import mark differing from the call's before, or an Anthropic compaction packet."""
    out: list[int] = []
    for k, t in enumerate(traces):
        mark = _import_mark(t)
        new_mark = mark is not None and (k == 0 or _import_mark(traces[k - 1]) != mark)
        if new_mark or _replaced_ids(t)[1]:
            out.append(k)
    return out


def _entry(traces: Sequence[Trace], k: int, later: _Later) -> Entry:
    """The ledger of the compaction that took effect at ``traces[k]``."""
    t = traces[k]
    before = traces[k - 1] if k > 0 else None
    ids = _replaced_ids(t)[0]
    mark = _import_mark(t) or {}
    label = str(mark.get("at") or f"a compaction packet replacing {len(ids)} message(s)")
    carried, gone = _carried(t, set(ids), before)
    pre = [gone]
    user = []
    if before is not None:
        pre += [prompt_text(before), _reply(before)]
        user.append(_user_text(before))
    user += [m.content for m in t.input.history if m.id in set(ids) and m.role == "user"]
    return Entry(
        session_id=t.session_id,
        turn=t.turn,
        before_turn=before.turn if before is not None else None,
        label=label,
        items=_weighed(items_of("\n".join(pre), "\n".join(user)), carried, later, k),
    )


def _sessions(traces: Iterable[Trace]) -> list[list[Trace]]:
    """``traces`` by session, each session's calls in turn order."""
    sessions: dict[str, list[Trace]] = {}
    for t in traces:
        sessions.setdefault(t.session_id, []).append(t)
    for calls in sessions.values():
        calls.sort(key=lambda t: t.turn)
    return list(sessions.values())


def ledger(traces: Iterable[Trace]) -> list[Entry]:
    """The compaction ledger of ``traces``: one entry per compaction, per session (a
    session's calls taken in turn order)."""
    out: list[Entry] = []
    for calls in _sessions(traces):
        starts = compaction_starts(calls)
        if not starts:
            continue
        later = _Later(
            [t.turn for t in calls], [_reply(t) for t in calls], [prompt_text(t) for t in calls]
        )
        out.extend(_entry(calls, k, later) for k in starts)
    return out


@dataclass(frozen=True)
class Rebuilt:
    """A policy's rebuild of one recorded call as the ledger reads it: the prompt it sent,
    the texts of the recorded parts its summary replaced (not those a compaction the log
    recorded replaced), the user's among them, and its summaries' text."""

    prompt: str
    replaced: tuple[str, ...] = ()
    replaced_user: tuple[str, ...] = ()
    summary: str = ""


class _PartItems:
    """The items of replaced parts, each part's read once: a policy that summarizes at every
    call from its trigger on (a stateless one) replaces the same parts again and again."""

    def __init__(self) -> None:
        self._found: dict[str, list[tuple[str, str]]] = {}
        self._said: dict[str, list[tuple[str, str]]] = {}

    def of(self, r: Rebuilt) -> list[tuple[str, str]]:
        """The items of what ``r`` replaced, as ``items_of`` finds them, part by part."""
        found: list[tuple[str, str]] = []
        for text in r.replaced:
            if text not in self._found:
                self._found[text] = _found(text)
            found += self._found[text]
        for text in r.replaced_user:
            if text not in self._said:
                self._said[text] = [("constraint", c) for c in constraint_sentences(text)]
            found += self._said[text]
        return _finished(found)


def _policy_entry(
    calls: Sequence[tuple[Trace, Rebuilt | None]],
    k: int,
    policy: str,
    found: list[tuple[str, str]],
    later: _Later,
) -> Entry:
    """The ledger of the compaction ``policy`` made building ``calls[k]``; ``found`` the
    items of what it replaced."""
    t, r = calls[k]
    assert r is not None
    return Entry(
        session_id=t.session_id,
        turn=t.turn,
        before_turn=calls[k - 1][0].turn if k > 0 else None,
        label=f"{policy}: {len(r.replaced)} recorded part(s) summarized",
        items=_weighed(found, r.prompt, later, k),
        policy=policy,
    )


def policy_ledger(calls: Iterable[tuple[Trace, Rebuilt | None]], policy: str) -> list[Entry]:
    """The ledger of ``policy``'s own compactions: each recorded call with the policy's
    rebuild of it (None: not rebuilt), per session in turn order. A compaction is a call
    whose rebuild summarized recorded parts with a summary the call before's did not send."""
    by_session: dict[str, list[tuple[Trace, Rebuilt | None]]] = {}
    parts = _PartItems()
    for t, r in calls:
        by_session.setdefault(t.session_id, []).append((t, r))
    out: list[Entry] = []
    for rows in by_session.values():
        rows.sort(key=lambda tr: tr[0].turn)
        summaries = [r.summary if r is not None else "" for _, r in rows]
        starts = [
            k
            for k, (_, r) in enumerate(rows)
            if r is not None and r.replaced and (k == 0 or summaries[k - 1] != r.summary)
        ]
        if not starts:
            continue
        later = _Later(
            [t.turn for t, _ in rows],
            [_reply(t) for t, _ in rows],
            [r.prompt if r is not None else "" for _, r in rows],
        )
        for k in starts:
            r = rows[k][1]
            assert r is not None
            out.append(_policy_entry(rows, k, policy, parts.of(r), later))
    return out


__all__ = [
    "KINDS",
    "Entry",
    "Item",
    "Rebuilt",
    "compaction_starts",
    "items_of",
    "ledger",
    "policy_ledger",
    "prompt_text",
]
