"""Signals: what a turn is about, beyond the words it shares with the query.

BM25 over the query's words misses most of what an agent's next step needs: "fix the
failing test" shares no word with ``FAILED tests/test_api.py::test_login``, and the tool
result the agent just asked for ("50 degrees and raining") shares none with "what is the
weather?". These signals look at where a candidate came from and what it holds
(docs/design.md, "ctxscope"):

- ``current_turn`` — a tool result produced after the last user message, or the result of the
  last tool call;
- ``error`` — failing test lines, tracebacks, compiler errors (``summarize.error_evidence``),
  or a file named in a stack frame (``file.py:123``) of such output;
- ``mention`` — paths, symbols, test names, ids and quoted strings of the query and the last
  user message found in the candidate;
- ``reference`` — the same for the last assistant message and its tool calls (the file it
  just opened, the command it ran);
- ``metadata`` — ``search_hits``, ``modified_at``, ``linked_test`` in a packet's metadata,
  and a test file linked to its module (``test_x.py`` ↔ ``x.py``) by a mention or a frame;
- ``lexical`` — the share of the query's words found once identifiers are split (snake_case,
  camelCase, paths, dotted names) and word forms are matched by their stem (fail, failing,
  failed and FAILED are one); CJK text is left to BM25.

Each signal has a strength in [0, 1] per item, and a weight knob (``<name>_weight``) adds
``weight × strength`` to the score. Everything here depends only on the input, so it is
computed once per ``Prepared`` and shared by every build and sweep cell over it.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from ctxcore.knobs import number
from ctxcore.models import CapturedInput, Message
from ctxcore.scoring import STOPWORDS
from ctxcore.summarize import TOOL_KINDS, error_evidence

SIGNALS: tuple[str, ...] = ("current_turn", "error", "mention", "reference", "metadata", "lexical")
#: the weight knob of each signal in ``Config``
WEIGHT_KNOBS: dict[str, str] = {s: f"{s}_weight" for s in SIGNALS}
#: the ctxscope preset's default weights, declared with each weight knob in ``ctxcore.knobs``
DEFAULT_WEIGHTS: dict[str, float] = {s: number(WEIGHT_KNOBS[s], "ctxscope") for s in SIGNALS}
#: the signals that exempt a packet from ``min_relevance`` (their columns in ``strength``)
_FLOORED = [SIGNALS.index(s) for s in ("current_turn", "error", "mention", "reference")]
#: how a signal is named in a decision's reason text
LABELS: dict[str, str] = {
    "current_turn": "current turn",
    "error": "error evidence",
    "mention": "mentioned by the user",
    "reference": "referenced by the last step",
    "metadata": "metadata",
    "lexical": "word match",
}
#: lexical overlap below this does not count as the signal firing (one stray common word)
LEXICAL_MIN = 0.25

_EXT = (
    r"py|pyi|ts|tsx|js|jsx|mjs|json|md|rst|rs|go|java|kt|rb|c|h|cc|cpp|hpp|cs|php|swift|"
    r"toml|yaml|yml|txt|cfg|ini|sh|html|css|sql|lock|log|xml"
)
_PATH = re.compile(rf"(?:[\w.\-]+/)+[\w.\-]+|\b[\w\-]+\.(?:{_EXT})\b")
_TEST = re.compile(r"\b[\w/.\-]*::[\w:\[\]\-.]+|\btest_\w+|\b\w+_test\b")
_SYMBOL = re.compile(
    r"\b[A-Za-z_]\w*_\w+\b|\b[a-z]+[A-Z]\w*\b|\b[A-Z][a-z0-9]+[A-Z]\w*\b|\b\w+(?:\.\w+)+\b"
)
_IDS = re.compile(
    r"#\d+\b|\b[A-Z][A-Z0-9]+-\d+\b|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"
)
_QUOTED = re.compile(r"\"([^\"\n]{3,80})\"|'([^'\n]{3,80})'|`([^`\n]{2,80})`")
_FRAME = re.compile(r"([\w./\\-]+\.(?:" + _EXT + r"))(?::\d+|\", line \d+|\(\d+)")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_SPLIT = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_SUFFIXES = ("ations", "ation", "ings", "ing", "edly", "ed", "ies", "es", "ers", "er", "s", "ly")
#: runs of the characters a ``_PATH`` match or ``_FRAME``'s file name is made of: every
#: ``_PATH`` match lies inside one run and a run's edges are not word characters, so
#: ``_PATH.findall`` of a line is that of its runs holding a ``.`` or a ``/`` (these, found
#: where a run starts), one after the other
_DOTTED_RUN = re.compile(r"(?<![\w./\\-])[\w\\-]*[./][\w./\\-]*")
#: a run's characters, matched on the reversed text: how far a run reaches back from a point
_RUN_BEFORE = re.compile(r"[\w./\\-]*")
#: the end of a ``_FRAME`` match: its file name ends where its run does (``:``, ``"`` and
#: ``(`` are not run characters), at this extension (found by its ``.``, fast); the empty
#: group marks where the name ends
_FRAME_END = re.compile(r"\.(?:" + _EXT + r")()(?::\d+|\", line \d+|\(\d+)")


def stem(word: str) -> str:
    """A crude stem: enough to make fail/failing/failed/fails, test/tests/testing meet."""
    w = word.lower()
    for suf in _SUFFIXES:
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            w = w[: -len(suf)]
            break
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "lsz":
        w = w[:-1]  # running → runn → run
    return w


def word_parts(text: str) -> list[str]:
    """Latin words of ``text`` with identifiers split: ``test_login`` → test, login;
    ``getUserName`` → get, User, Name; ``a/b.py`` → a, b, py."""
    out: list[str] = []
    for w in _WORD.findall(text):
        out.extend(_SPLIT.findall(w) if not w.islower() else [w])
    return out


def query_stems(text: str) -> tuple[str, ...]:
    """The distinct stems of the query's Latin words (stop words and stems under 3 letters
    left out)."""
    seen: dict[str, None] = {}
    for w in word_parts(text):
        low = w.lower()
        if low in STOPWORDS:
            continue
        s = stem(low)
        if len(s) >= 3:
            seen.setdefault(s, None)
    return tuple(seen)


def _starts_a_part(text: str, low: str, s: str) -> bool:
    """Does ``s`` (lower case) start a word part of ``text``: after a character that is not
    an ASCII letter or digit (so ``_``, ``.``, ``/`` split identifiers), in any case, or at a
    camelCase hump (``testLogin``)? ``low`` is ``text.lower()`` (same length for ASCII)."""
    i = low.find(s)
    while i >= 0:
        if i == 0:
            return True
        prev = text[i - 1]
        if not (prev.isascii() and prev.isalnum()):
            return True
        if prev.islower() and text[i].isupper():
            return True
        i = low.find(s, i + 1)
    return False


def lexical_lower(text: str) -> str:
    """``text`` lower-cased character for character (the same length: a character whose
    lower case is longer, such as ``İ``, is kept), so that offsets in it are offsets in
    ``text``."""
    low = text.lower()
    if len(low) != len(text):  # a few characters change length when lower-cased
        low = "".join(c.lower() if len(c.lower()) == 1 else c for c in text)
    return low


class _Joined:
    """Texts joined by newlines, so that a needle is looked for in all of them with one
    ``str.find`` (in C) instead of one per text; found offsets map back to their text."""

    __slots__ = ("big", "n", "starts")

    def __init__(self, texts: Sequence[str]) -> None:
        self.big = "\n".join(texts)
        self.n = len(texts)
        self.starts = [0] * self.n
        pos = 0
        for k, t in enumerate(texts):
            self.starts[k] = pos
            pos += len(t) + 1

    def holding(self, needle: str) -> list[int]:
        """The texts holding ``needle`` (which holds no newline), in order."""
        out: list[int] = []
        big, starts, n = self.big, self.starts, self.n
        i = big.find(needle) if n else -1
        while i >= 0:
            k = bisect.bisect_right(starts, i) - 1
            out.append(k)
            if k + 1 == n:
                break
            i = big.find(needle, starts[k + 1])
        return out


def lexical_overlap(
    stems: Sequence[str],
    texts: Sequence[str],
    lows: Sequence[str] | None = None,
    joined: _Joined | None = None,
) -> npt.NDArray[np.float64]:
    """The share of ``stems`` each text contains as the start of a word part (``lows``:
    the texts' ``lexical_lower`` when the caller has them, ``joined`` those joined)."""
    out = np.zeros(len(texts), dtype=np.float64)
    if not stems or not texts:
        return out
    if lows is None:
        lows = [lexical_lower(t) for t in texts]
    if any("\n" in s for s in stems):  # cannot be found across texts joined by newlines
        for k, (text, low) in enumerate(zip(texts, lows, strict=True)):
            hits = sum(1 for s in stems if s in low and _starts_a_part(text, low, s))
            out[k] = hits / len(stems)
        return out
    # every stem is looked for once in all texts joined, its occurrences mapped back to
    # their text: the same test as ``_starts_a_part``
    j = joined if joined is not None else _Joined(lows)
    big_low, starts, n = j.big, j.starts, j.n
    found = [0] * n
    for s in stems:
        i = big_low.find(s)
        while i >= 0:
            k = bisect.bisect_right(starts, i) - 1
            at = i - starts[k]
            text = texts[k]
            if at == 0:
                ok = True
            else:
                prev = text[at - 1]
                ok = not (prev.isascii() and prev.isalnum()) or (
                    prev.islower() and text[at].isupper()
                )
            if ok:
                found[k] += 1
                if k + 1 == n:
                    break
                i = big_low.find(s, starts[k + 1])
            else:
                i = big_low.find(s, i + 1)
    for k, h in enumerate(found):
        if h:
            out[k] = h / len(stems)
    return out


def entities(text: str) -> set[str]:
    """Paths, test names, symbols, ids and quoted strings in ``text`` (lower-cased; a path
    also gives its file name)."""
    found: set[str] = set()
    for pat in (_PATH, _TEST, _SYMBOL, _IDS):
        found.update(pat.findall(text))
    for m in _QUOTED.finditer(text):
        found.add(next(g for g in m.groups() if g))
    out: set[str] = set()
    for e in found:
        e = e.strip().strip(".,:;()[]{}").lower()
        if len(e) < 4 or e in STOPWORDS:
            continue
        out.add(e)
        if "/" in e:
            base = e.rsplit("/", 1)[1]
            if len(base) >= 4:
                out.add(base)
        if "::" in e:
            out.update(p for p in e.split("::") if len(p) >= 4)
    return out


def _strength(n_hits: int) -> float:
    """1 hit 0.5, 2 hits 0.75, 3 hits 0.875: more named things, more certainly about it."""
    return 1.0 - 0.5**n_hits


def _last(history: Sequence[Message], role: str) -> Message | None:
    return next((m for m in reversed(history) if m.role == role), None)


def _calls_text(msg: Message | None) -> str:
    """The tool calls of an assistant message (their names and arguments) as text."""
    if msg is None:
        return ""
    calls = msg.metadata.get("tool_calls")
    if not isinstance(calls, list):
        return ""
    parts = []
    for c in calls:
        if isinstance(c, dict):
            parts.append(f"{c.get('name', '')} {c.get('arguments', '')}")
    return "\n".join(parts)


def _path_of(meta: dict[str, Any], pid: str) -> str:
    for key in ("path", "file", "filename"):
        v = meta.get(key)
        if isinstance(v, str) and v:
            return v.lower()
    if pid.startswith("file:"):
        return pid[5:].lower()
    return ""


def _linked(path: str, hot: list[str]) -> str | None:
    """The hot file this path is the test of, or the module of (``test_x.py`` ↔ ``x.py``)."""
    base = path.rsplit("/", 1)[-1]
    if not base.endswith(".py"):
        return None
    stem_ = base[:-3]
    if stem_.startswith("test_"):
        other = stem_[5:] + ".py"
    elif stem_.endswith("_test"):
        other = stem_[:-5] + ".py"
    else:
        other = f"test_{base}"
    for h in hot:  # sorted by the caller: one answer when several files match
        if h == other or h.endswith("/" + other):
            return h
    return None


def _modified_strength(value: Any, now: datetime) -> float:
    """1.0 for a file modified within the hour, decaying over a day; 0.5 for a timestamp
    we cannot read."""
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return 0.5
        if when.tzinfo is None:
            return 0.5
        hours = max((now - when).total_seconds(), 0.0) / 3600.0
        return float(min(1.0, math.exp(-max(hours - 1.0, 0.0) / 24.0)))
    return 0.5 if value else 0.0


@dataclass(frozen=True)
class Signals:
    """Each item's signal strengths (items × ``SIGNALS``), why each fired, and which items
    the floors protect."""

    strength: npt.NDArray[np.float64]
    why: list[dict[str, str]]
    #: items exempt from ``min_relevance``: this turn's tool results, error evidence, items
    #: the user or the last step named
    exempt: npt.NDArray[np.bool_]
    #: fresh evidence placed ahead of the ranked fill: the result of the last tool call and
    #: the latest error output (item indexes, in placement order)
    floor: tuple[int, ...]
    lexical: npt.NDArray[np.float64]

    def fired(self, i: int) -> list[str]:
        return [s for k, s in enumerate(SIGNALS) if self.strength[i, k] > 0]


@dataclass(frozen=True)
class Source:
    """What the signals read of one candidate (an item of gather, or a packet of a trace)."""

    id: str
    kind: str
    text: str
    metadata: dict[str, Any]
    timestamp: datetime | None
    is_packet: bool
    #: the caller's own relevance judgement: it keeps the floors off (the caller decided)
    caller_relevance: float | None = None


def current_turn(input: CapturedInput, sources: Sequence[Source]) -> dict[int, str]:
    """Index → why, for the tool results of the current turn: after the last user message
    of the history (all of them when the history holds no user message: the query is the
    turn's user message), flagged ``current_turn`` by the caller, or the last tool result."""
    tools = [k for k, s in enumerate(sources) if s.is_packet and s.kind in TOOL_KINDS]
    out: dict[int, str] = {}
    if not tools:
        return out
    last_user = _last(input.history, "user")
    for k in tools:
        s = sources[k]
        if s.metadata.get("current_turn") is True:
            out[k] = "flagged current_turn"
        elif last_user is None:
            out[k] = "after the last user message"
        elif (
            last_user.timestamp is not None
            and s.timestamp is not None
            and s.timestamp >= last_user.timestamp
        ):
            out[k] = "after the last user message"
    stamped = [k for k in tools if sources[k].timestamp is not None]
    last = max(stamped, key=lambda k: (sources[k].timestamp, k)) if stamped else tools[-1]
    out[last] = "result of the last tool call"
    return out


def compute(
    input: CapturedInput, sources: Sequence[Source], lows: Sequence[str] | None = None
) -> Signals:
    """Every signal for every candidate (history messages get only the lexical one).

    ``lows``: the sources' texts lower-cased, when the caller has them (gather does: BM25
    reads them too). Each entity and stem is looked for once in all the texts joined
    (``_Joined``: ``_Named``, ``lexical_overlap``); the file names of error output are read
    once per distinct line, run by run (``_frame_names``)."""
    if lows is None:
        lows = [s.text.lower() for s in sources]
    fire = _Fired(len(sources))
    fresh = current_turn(input, sources)
    for k, reason in fresh.items():
        fire(k, "current_turn", 1.0 if reason.startswith("result") else 0.7, reason)
    mentioned, referenced = _turn_entities(input, sources, fresh)
    packets = [k for k, s in enumerate(sources) if s.is_packet]
    errors: dict[int, list[str]] = {}
    for k in packets:
        lines = error_evidence(sources[k].text, lows[k])
        if lines:
            errors[k] = lines
            fire(k, "error", 1.0, lines[0][:80])
    all_lows = _Joined(lows)
    _name_signals(input, sources, packets, lows, all_lows, (mentioned, referenced), errors, fire)
    lex = _lexical(input.query, sources, lows, all_lows)
    for k in np.flatnonzero(lex >= LEXICAL_MIN).tolist():
        fire(k, "lexical", float(lex[k]), f"{lex[k]:.0%} of the query's words")
    strength = np.ascontiguousarray(np.array([fire.cols[s] for s in SIGNALS], dtype=np.float64).T)
    # exempt: a packet without a caller's relevance that is fresh, error evidence, or named
    own = np.array([s.is_packet and s.caller_relevance is None for s in sources], dtype=bool)
    exempt = own & (strength[:, _FLOORED] > 0).any(axis=1)
    return Signals(strength, fire.why, exempt, _floor(sources, errors, fresh), lex)


class _Fired:
    """The signals fired so far: per signal, each item's strongest value, and why it fired
    (the first reason given for that value)."""

    def __init__(self, n: int) -> None:
        self.cols: dict[str, list[float]] = {s: [0.0] * n for s in SIGNALS}
        self.why: list[dict[str, str]] = [{} for _ in range(n)]

    def __call__(self, i: int, name: str, value: float, text: str) -> None:
        col = self.cols[name]
        if value > col[i]:
            col[i] = value
            self.why[i][name] = text


def _turn_entities(
    input: CapturedInput, sources: Sequence[Source], fresh: dict[int, str]
) -> tuple[set[str], set[str]]:
    """The entities the user mentioned (the query and the last user message) and those the
    last step referenced and the user did not (the last assistant message, its tool calls,
    and the last tool call's own command when the caller recorded it)."""
    last_user = _last(input.history, "user")
    last_asst = _last(input.history, "assistant")
    said = input.query + ("\n" + last_user.content if last_user is not None else "")
    mentioned = entities(said)
    done = (last_asst.content if last_asst is not None else "") + "\n" + _calls_text(last_asst)
    referenced = entities(done) - mentioned
    for k, reason in fresh.items():
        cmd = sources[k].metadata.get("command")
        if reason.startswith("result") and isinstance(cmd, str):
            referenced |= entities(cmd) - mentioned
    return mentioned, referenced


def _name_signals(
    input: CapturedInput,
    sources: Sequence[Source],
    packets: list[int],
    lows: Sequence[str],
    all_lows: _Joined,
    turn: tuple[set[str], set[str]],
    errors: dict[int, list[str]],
    fire: _Fired,
) -> None:
    """The signals of what names a packet: error output naming its file, the user's and the
    last step's entities (``turn``: mentioned, referenced) in its text, path or id, and its
    metadata (a path linked to a named file, search hits, recency)."""
    mentioned, referenced = turn
    paths = [_path_of(sources[k].metadata, sources[k].id) for k in packets]
    # the files error output names matter only to packets that have a path
    frames = _frame_names(errors.values()) if any(paths) else set()
    by_frame = sorted(frames)
    hot = sorted(mentioned | referenced | frames)
    linked: dict[str, str | None] = {}

    def linked_to(path: str) -> str | None:
        if path not in linked:
            linked[path] = _linked(path, hot)
        return linked[path]

    named = _Named(packets, lows, paths, [sources[k].id.lower() for k in packets], all_lows)
    said_in, done_in = named.holding(mentioned), named.holding(referenced)
    for j, k in enumerate(packets):
        s = sources[k]
        path = paths[j]
        if k not in errors and path:
            hit = next((f for f in by_frame if path.endswith(f) or f.endswith(path)), None)
            if hit is not None:
                fire(k, "error", 0.5, f"named in error output ({hit})")
        m = _by_length(said_in[j])
        if m:
            fire(k, "mention", _strength(len(m)), ", ".join(m[:2]))
        r = _by_length(done_in[j])
        if r:
            fire(k, "reference", _strength(len(r)), ", ".join(r[:2]))
        if path or not s.metadata.keys().isdisjoint(_METADATA_KEYS):
            _metadata(s, path, linked_to, input.now, fire, k)


def _lexical(
    query: str, sources: Sequence[Source], lows: Sequence[str], all_lows: _Joined
) -> npt.NDArray[np.float64]:
    """Per source, the share of the query's words its text holds (``lexical_overlap``); 0
    where the caller gave its own relevance (it replaces ours, word matches included)."""
    stems = query_stems(query)
    texts = [s.text for s in sources]
    lex_lows: list[str] | None = None
    if stems:
        lex_lows = [
            low if len(low) == len(t) else lexical_lower(t)
            for t, low in zip(texts, lows, strict=True)
        ]
    # a text whose lower case is longer is joined again, as lexical reads it
    same = lex_lows is None or all(a is b for a, b in zip(lex_lows, lows, strict=True))
    lex = lexical_overlap(stems, texts, lex_lows, all_lows if same else None)
    for k, s in enumerate(sources):
        if s.caller_relevance is not None:
            lex[k] = 0.0
    return lex


def _floor(
    sources: Sequence[Source], errors: dict[int, list[str]], fresh: dict[int, str]
) -> tuple[int, ...]:
    """``Signals.floor``: the latest error output and the result of the last tool call, of
    the packets without a caller's relevance."""
    floor: list[int] = []
    errors = {k: v for k, v in errors.items() if sources[k].caller_relevance is None}
    if errors:
        stamped = [k for k in errors if sources[k].timestamp is not None]
        latest = max(stamped, key=lambda k: (sources[k].timestamp, k)) if stamped else max(errors)
        floor.append(latest)
    last_result = next((k for k, r in fresh.items() if r.startswith("result")), None)
    if (
        last_result is not None
        and last_result not in floor
        and sources[last_result].caller_relevance is None
    ):
        floor.append(last_result)
    return tuple(floor)


class _Named:
    """What ``entities`` a packet names: in its text, its path or its id (the packets' texts
    are looked up in all the candidates' texts, joined)."""

    def __init__(
        self,
        packets: list[int],
        lows: Sequence[str],
        paths: list[str],
        ids: list[str],
        joined: _Joined,
    ) -> None:
        self.packets, self.lows, self.paths, self.ids = packets, lows, paths, ids
        self.joined = joined
        self.tails = _Joined([f"{p}\n{i}" for p, i in zip(paths, ids, strict=True)])
        self.pos = {k: j for j, k in enumerate(packets)}

    def holding(self, ents: Iterable[str]) -> list[list[str]]:
        """Per packet, the entities found in its text, path or id (any order)."""
        found: list[list[str]] = [[] for _ in self.packets]
        pos = self.pos
        for e in ents:
            if "\n" in e:  # entities hold none; it could span a text and its path
                for j, k in enumerate(self.packets):
                    if e in f"{self.lows[k]}\n{self.paths[j]}\n{self.ids[j]}":
                        found[j].append(e)
                continue
            for k in self.joined.holding(e):
                at = pos.get(k)
                if at is not None:
                    found[at].append(e)
            for j in self.tails.holding(e):
                if not found[j] or found[j][-1] != e:
                    found[j].append(e)
        return found


def _by_length(found: list[str]) -> list[str]:
    """Entities found, longest first (then alphabetically)."""
    return sorted(found, key=lambda e: (-len(e), e)) if found else found


#: per error line: the names ``_names_by_line`` found in it; the same lines come back turn
#: after turn of a session (bounded as ``summarize``'s error-line memo)
_LINE_NAMES: dict[str, tuple[tuple[int, int, str], ...]] = {}


def _frame_names(errors: Iterable[list[str]]) -> set[str]:
    """The files named by stack frames and paths in error lines, lower-cased, without a
    leading ``./``: ``_FRAME``'s file names then ``_PATH``'s matches of each line, in
    order. Each distinct line is read once (a repeated one adds nothing), and remembered."""
    lines = list(dict.fromkeys(ln for group in errors for ln in group))
    frames: set[str] = set()
    if not lines:
        return frames
    have = {ln: _LINE_NAMES.get(ln) for ln in lines}
    todo = [ln for ln, got in have.items() if got is None]
    if todo:
        new = _names_by_line(todo)
        have.update(new)
        if len(_LINE_NAMES) + len(new) > 20_000:
            _LINE_NAMES.clear()
        _LINE_NAMES.update(new)
    # (line, 0 for a frame's file name or 1 for a path, offset) orders them as the lines do
    found = [(k, *f) for k, ln in enumerate(lines) for f in have[ln] or ()]
    found.sort(key=lambda f: f[:3])  # stable: a run's paths keep their order
    names = dict.fromkeys(f[3] for f in found)
    # a set's order is that of the first insertion of each member: one per distinct name
    frames.update({x: x.lower().lstrip("./") for x in names}.values())
    return frames


def _names_by_line(lines: list[str]) -> dict[str, tuple[tuple[int, int, str], ...]]:
    """Per line: (0 for a frame's file name or 1 for a path, offset in the line, name), in
    that order. All the lines are read at once, joined by newlines (no match spans one)."""
    big = "\n".join(lines)
    starts = [0] * len(lines)
    pos = 0
    for k, ln in enumerate(lines):
        starts[k] = pos
        pos += len(ln) + 1
    found: list[tuple[int, int, int, str]] = []
    for at, name in _frame_files(big):
        line = bisect.bisect_right(starts, at) - 1
        found.append((line, 0, at - starts[line], name))
    runs: dict[str, list[str]] = {}
    for m in _DOTTED_RUN.finditer(big):
        run = m.group()
        hit = runs.get(run)
        if hit is None:
            hit = runs[run] = _PATH.findall(run)
        if hit:
            line = bisect.bisect_right(starts, m.start()) - 1
            at = m.start() - starts[line]
            found.extend((line, 1, at, p) for p in hit)
    found.sort(key=lambda f: f[:3])  # stable: a run's paths keep their order
    out: dict[str, list[tuple[int, int, str]]] = {ln: [] for ln in lines}
    for line, kind, at, name in found:
        out[lines[line]].append((kind, at, name))
    return {ln: tuple(v) for ln, v in out.items()}


def _frame_files(text: str) -> list[tuple[int, str]]:
    """``(m.start(), m.group(1)) for m in _FRAME.finditer(text)``, found from their ends.

    Where ``_FRAME`` can match inside a run it can at the run's start, so a match starts
    at its run's start, or where the previous match ended when its line number ran into
    the run; its file name needs a character before the extension's ``.``."""
    out: list[tuple[int, str]] = []
    rev = text[::-1]
    n = len(text)
    done = 0  # where the previous match ended
    for m in _FRAME_END.finditer(text):
        dot = m.start()
        run = _RUN_BEFORE.match(rev, n - dot)
        assert run is not None
        start = max(dot - (run.end() - (n - dot)), done)
        if dot > start:
            out.append((start, text[start : m.start(1)]))
            done = m.end()
    return out


#: the metadata keys ``_metadata`` reads (a packet with none of them and no path: nothing fires)
_METADATA_KEYS = ("search_hits", "modified_at", "linked_test")


def _metadata(
    s: Source, path: str, linked_to: Callable[[str], str | None], now: datetime, fire: Any, k: int
) -> None:
    """The metadata signal of one packet (``linked_to``: ``_linked`` of a path)."""
    meta = s.metadata
    hits = meta.get("search_hits")
    if (
        hits is not None
        and isinstance(hits, bool | int | float | list)
        and not isinstance(hits, str)
        and hits
    ):
        n_hits = len(hits) if isinstance(hits, list) else int(hits) if hits is not True else 1
        fire(k, "metadata", _strength(max(n_hits, 1)), f"search_hits {n_hits}")
    if "modified_at" in meta:
        value = _modified_strength(meta["modified_at"], now)
        if value > 0:
            fire(k, "metadata", value, "recently modified")
    linked = meta.get("linked_test")
    if linked:
        fire(
            k,
            "metadata",
            1.0,
            f"linked_test {linked}" if isinstance(linked, str) else "linked_test",
        )
    if path:
        other = linked_to(path)
        if other is not None:
            fire(k, "metadata", 0.75, f"test ↔ module of {other}")


def weighted(
    strength: npt.NDArray[np.float64], weights: Sequence[float]
) -> npt.NDArray[np.float64]:
    """Σ weight × strength per item: what the signals add to the score."""
    if strength.size == 0:
        return np.zeros(strength.shape[0], dtype=np.float64)
    out: npt.NDArray[np.float64] = strength @ np.asarray(weights, dtype=np.float64)
    return out


def describe(sig: Signals, i: int, weights: Sequence[float]) -> tuple[str, list[str]]:
    """The reason-text suffix and the ``signal:<name>`` notes of item ``i``, strongest
    (largest weighted contribution) first."""
    fired = [
        (weights[k] * float(sig.strength[i, k]), s)
        for k, s in enumerate(SIGNALS)
        if sig.strength[i, k] > 0
    ]
    if not fired:
        return "", []
    fired.sort(key=lambda t: (-t[0], SIGNALS.index(t[1])))
    words = [f"{LABELS[s]} ({sig.why[i][s]})" for _, s in fired]
    return "; signals: " + ", ".join(words), [f"signal:{s}" for _, s in fired]


def strongest(notes: Iterable[str]) -> str | None:
    """The strongest signal a decision's notes record (the first ``signal:`` note)."""
    return next((n[7:] for n in notes if n.startswith("signal:")), None)


__all__ = [
    "DEFAULT_WEIGHTS",
    "LABELS",
    "SIGNALS",
    "WEIGHT_KNOBS",
    "Signals",
    "Source",
    "compute",
    "current_turn",
    "describe",
    "entities",
    "lexical_overlap",
    "query_stems",
    "stem",
    "strongest",
    "weighted",
    "word_parts",
]
