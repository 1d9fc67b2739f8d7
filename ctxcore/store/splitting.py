"""A trace's JSON split into the shared form the store keeps (docs/design.md, "Store").

An agent's call N repeats calls 1..N-1: stored whole, a session's traces grow with the
square of its length. The store keeps each trace as the body of a ``ctxscope.share/1``
line instead (docs/design.md, "Shared traces"): every item of ``input.history``,
``input.packets``, ``input.tools``, ``result.messages`` and ``result.decisions`` is a part
named by its id, and ``input.query``, ``input.system_instructions`` and ``result.prompt``
(when long) are lists of string parts, so that each distinct item and piece of text is
stored once (``shared_parts``) however many traces hold it.

The split works on the JSON bytes as given, never re-serializing a value: an item is the
exact bytes it was in the trace, a text piece the exact bytes of a stretch of the string.
What the store hands back is therefore byte for byte what it was given; a trace whose bytes
the shared form cannot rebuild exactly (spaces between tokens, a key written with another
escaping) is stored whole, as before.

A part's id is a digest of its bytes (16 bytes of blake2b, as hex); the body names a part by
its place among the parts it names (``"0"``, ``"1"``, …: the ids are listed once, beside the
body, ``codec.pack_shared``), so a long context's body stays short. A ``Splitter`` knows the
previous trace of each recent session: an item at the same place with the same bytes keeps
its id without being hashed again, and a text is cut where the previous trace's pieces of
that field end (a prompt that grows each call names the earlier call's pieces and adds one).

``Splitter.split_trace`` splits a trace model without writing it whole first (``ctxscope
import`` into a store): the trace is serialized with its list fields empty, and each item
of those lists on its own; an item that is the same object as the one at its place in the
session's last trace (a session log's importer shares one object between all the calls
that hold it) takes that one's bytes and id, unserialized and unhashed. The whole JSON is
the same bytes ``Trace.to_json_bytes`` gives (tests/test_store_splitting.py compares them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import msgspec
from pydantic import BaseModel, TypeAdapter

from ctxcore.models import Decision, Message, Packet, ToolDef, Trace
from ctxcore.sharing import LIST_FIELDS, MIN_SHARED_TEXT, TEXT_FIELDS

#: sessions whose last trace a ``Splitter`` keeps (the most recent ones)
MAX_SESSIONS = 32

_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])
_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_encode = msgspec.json.encode
#: the list fields' items serialized together, by their model
_ADAPTERS: dict[type, TypeAdapter[Any]] = {
    m: TypeAdapter(list[m])  # type: ignore[valid-type]
    for m in (Message, Packet, ToolDef, Decision)
}


#: by the object's field ("" for the trace): its keys that may hold parts, True for a list
#: field (``LIST_FIELDS``), False for a text (``TEXT_FIELDS``); the trace's own are the
#: objects that hold them
_SPECIAL: dict[str, dict[str, bool]] = {
    "": dict.fromkeys(LIST_FIELDS, True),
    **{
        name: {**dict.fromkeys(TEXT_FIELDS.get(name, ()), False), **dict.fromkeys(fields, True)}
        for name, fields in LIST_FIELDS.items()
    },
}
#: an object's first key and colon (``{"key":``), and any other's (``,"key":``), by key
_FIRST: dict[str, bytes] = {}
_NEXT: dict[str, bytes] = {}
#: the first byte of a JSON object (an item must be one)
_OPEN = frozenset(b"{")
_first_byte = itemgetter(0)


def _head(heads: dict[str, bytes], key: str) -> bytes:
    """A key's head in an object (``_FIRST`` or ``_NEXT``), made and kept the first time
    (a trace names the same few hundred keys, the cache stays small; a key never seen
    before is written as msgspec writes it)."""
    head = (b"{" if heads is _FIRST else b",") + _encode(key) + b":"
    if len(heads) < 4096:
        heads[key] = head
    return head


def part_id(data: bytes) -> str:
    """The id the store gives a part: a digest of its JSON bytes, as 32 hex digits."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@dataclass
class Split:
    """A trace in the shared form: the body (``ctxscope.share/1``'s ``trace``, naming the
    k-th part it names, in order of first use, as ``"k"``) and every part it names (id ->
    JSON, in that order)."""

    body: bytes
    parts: dict[str, bytes]


#: the body's name of its k-th part (``"k"``), made once for the first few thousand
_REFS = [b'"%d"' % k for k in range(4096)]


def _ref(k: int) -> bytes:
    return _REFS[k] if k < len(_REFS) else b'"%d"' % k


class _Parts:
    """The parts one trace names, in order of first use, and how its body names each."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.refs: dict[str, bytes] = {}

    def ref(self, pid: str, data: bytes) -> bytes:
        """The body's name of a part (its place, as a JSON string), added if new."""
        got = self.refs.get(pid)
        if got is None:
            got = self.refs[pid] = _ref(len(self.data))
            self.data[pid] = data
        return got

    def refs_of(self, pids: Sequence[str], datas: Sequence[bytes]) -> list[bytes]:
        """``ref`` of each part of a list, in order (one loop, not a call a part)."""
        refs, data = self.refs, self.data
        out: list[bytes] = []
        for pid, item in zip(pids, datas, strict=True):
            got = refs.get(pid)
            if got is None:
                got = refs[pid] = _ref(len(data))
                data[pid] = item
            out.append(got)
        return out


class _NotShareable(Exception):
    """The trace's bytes cannot be rebuilt from the shared form: it is stored whole."""


class SplitJSON(bytes):
    """A trace's whole JSON bytes that carry their split (``shared``: None when it is
    stored whole), made by ``Splitter.split_trace``: a store that is given these takes the
    split rather than splitting the bytes again."""

    shared: Split | None


def _emptied(trace: Trace) -> Trace:
    """``trace`` with its list fields (``LIST_FIELDS``) empty: the rest of its JSON."""
    update: dict[str, Any] = {}
    for name, fields in LIST_FIELDS.items():
        value = getattr(trace, name)
        if value is not None:
            empty: dict[str, list[Any]] = {f: [] for f in fields if getattr(value, f) is not None}
            update[name] = value.model_copy(update=empty)
    return trace.model_copy(update=update)


def _items_json(objs: Sequence[Any]) -> list[bytes]:
    """Each item's JSON, as the trace's JSON holds it."""
    adapter = _ADAPTERS.get(type(objs[0]))
    if adapter is not None and all(type(o) is type(objs[0]) for o in objs):
        return [bytes(r) for r in _LIST.decode(adapter.dump_json(list(objs), by_alias=True))]
    return [
        o.__pydantic_serializer__.to_json(o, by_alias=True)
        if isinstance(o, BaseModel)
        else _encode(o)
        for o in objs
    ]


class Splitter:
    """Splits traces one after another, remembering each recent session's last trace."""

    def __init__(self) -> None:
        #: (session, field) -> the last trace's items there and their ids
        self.lists: dict[tuple[str, str], tuple[list[bytes], list[str]]] = {}
        #: (session, field) -> the last trace's pieces of that text: (bytes, id)
        self.texts: dict[tuple[str, str], list[tuple[bytes, str]]] = {}
        #: (session, field) -> the last trace model's items there, their JSON and ids
        self.models: dict[tuple[str, str], tuple[list[Any], list[bytes], list[str]]] = {}
        self.sessions: dict[str, None] = {}
        #: the items of the trace ``split_trace`` splits, by field ("input.history"...),
        #: and those of its items serialized so far (by identity: the item, JSON, id)
        self._given: dict[str, list[Any]] = {}
        self._fresh: dict[int, tuple[Any, bytes, str]] = {}

    def split(self, raw: bytes, session: str) -> Split | None:
        """``raw`` in the shared form, or None when it cannot be (stored whole)."""
        self._session(session)
        try:
            top = _OBJECT.decode(raw)
        except msgspec.MsgspecError:
            return None
        body: list[bytes] = []
        whole: list[bytes] = []
        parts = _Parts()
        try:
            self._object(top, "", session, body, whole, parts)
        except (_NotShareable, msgspec.MsgspecError):
            return None
        if not parts.data or b"".join(whole) != raw:
            return None
        return Split(b"".join(body), parts.data)

    def split_trace(self, trace: Trace) -> SplitJSON:
        """``trace``'s whole JSON (``Trace.to_json_bytes``) and its split, made from the
        model: the list fields' items serialized only where new (module docstring)."""
        self._session(trace.session_id)
        given: dict[str, list[Any]] = {}
        for name, fields in LIST_FIELDS.items():
            value = getattr(trace, name)
            for f in fields if value is not None else ():
                items = getattr(value, f)
                if items:
                    given[f"{name}.{f}"] = items
        if not given:
            raw = SplitJSON(trace.to_json_bytes())
            raw.shared = self.split(raw, trace.session_id)
            return raw
        top = _OBJECT.decode(_emptied(trace).to_json_bytes())
        body: list[bytes] = []
        whole: list[bytes] = []
        parts = _Parts()
        self._given = given
        try:
            self._object(top, "", trace.session_id, body, whole, parts)
        finally:
            self._given, self._fresh = {}, {}
        raw = SplitJSON(b"".join(whole))
        raw.shared = Split(b"".join(body), parts.data)
        return raw

    def _session(self, session: str) -> None:
        """``session`` is the most recent; the least recent beyond MAX_SESSIONS is let go."""
        self.sessions.pop(session, None)
        self.sessions[session] = None
        if len(self.sessions) > MAX_SESSIONS:
            old = next(iter(self.sessions))
            del self.sessions[old]
            for table in (self.lists, self.texts, self.models):
                for key in [k for k in table if k[0] == old]:
                    del table[key]

    def _object(
        self,
        obj: dict[str, msgspec.Raw],
        name: str,
        session: str,
        body: list[bytes],
        whole: list[bytes],
        parts: _Parts,
    ) -> None:
        """An object's JSON into ``body`` (items and long texts as ids) and ``whole`` (as
        ``sharing.PartTable`` rebuilds it); ``name`` is its field ("" for the trace). A key
        that can hold no part (``_SPECIAL``) is copied as it is, its head written once."""
        special = _SPECIAL[name]
        heads = _FIRST
        for key, value in obj.items():
            head = heads.get(key) or _head(heads, key)
            heads = _NEXT
            body.append(head)
            whole.append(head)
            if key not in special:
                data = bytes(value)
                body.append(data)
                whole.append(data)
                continue
            data = bytes(value)
            first = data[:1]
            if not name:  # an object that holds lists and texts, or else a plain value
                if first == b"{":
                    self._object(_OBJECT.decode(data), key, session, body, whole, parts)
                else:
                    body.append(data)
                    whole.append(data)
            elif special[key] and data == b"[]" and f"{name}.{key}" in self._given:
                field = f"{name}.{key}"
                self._model_items(self._given[field], (session, field), body, whole, parts)
            elif special[key] and first == b"[":
                self._items(data, (session, f"{name}.{key}"), body, whole, parts)
            elif not special[key] and first == b"[":
                raise _NotShareable  # a list here would be read as part ids
            elif not special[key] and first == b'"' and len(data) >= MIN_SHARED_TEXT:
                self._text(data, (session, f"{name}.{key}"), body, whole, parts)
            else:
                body.append(data)
                whole.append(data)
        end = b"}" if obj else b"{}"
        body.append(end)
        whole.append(end)

    def _items(
        self,
        data: bytes,
        key: tuple[str, str],
        body: list[bytes],
        whole: list[bytes],
        parts: _Parts,
    ) -> None:
        """A list field: each item a part (an item at the same place of the session's last
        trace, with the same bytes, keeps its id unhashed)."""
        items = list(map(bytes, _LIST.decode(data)))
        if not _OPEN.issuperset(map(_first_byte, items)):
            raise _NotShareable  # a string item would be read as a part id
        prev, prev_ids = self.lists.get(key, ([], []))
        n = len(prev)
        if items[:n] == prev:  # the last call's list and more (compared at C speed)
            ids = prev_ids + [part_id(i) for i in items[n:]]
        else:
            ids = [
                prev_ids[k] if k < n and prev[k] == item else part_id(item)
                for k, item in enumerate(items)
            ]
        self.lists[key] = (items, ids)
        refs = parts.refs_of(ids, items)
        body.append(b"[" + b",".join(refs) + b"]")
        whole.append(b"[" + b",".join(items) + b"]")

    def _model_items(
        self,
        objs: list[Any],
        key: tuple[str, str],
        body: list[bytes],
        whole: list[bytes],
        parts: _Parts,
    ) -> None:
        """A list field of a trace model: each item a part; an item that is the same object
        as one of the session's last trace there (at its place, or moved) takes that one's
        JSON and id, the others are serialized (together) and hashed."""
        prev, prev_items, prev_ids = self.models.get(key, ([], [], []))
        n = len(prev)
        items, ids = prev_items[: len(objs)], prev_ids[: len(objs)]
        items += [b""] * (len(objs) - len(items))
        ids += [""] * (len(objs) - len(ids))
        moved = [k for k, o in enumerate(objs) if k >= n or o is not prev[k]]
        if moved:  # an item elsewhere in the last trace (one inserted before it) or new
            at = {id(o): k for k, o in enumerate(prev)}
            fresh = []
            for k in moved:
                j = at.get(id(objs[k]))
                if j is None:
                    fresh.append(k)
                else:  # ``prev`` holds the object: its id is not another's
                    items[k], ids[k] = prev_items[j], prev_ids[j]
            self._serialize([objs[k] for k in fresh], fresh, items, ids)
        self.models[key] = (list(objs), items, ids)
        refs = [parts.ref(p, i) for p, i in zip(ids, items, strict=True)]
        body.append(b"[" + b",".join(refs) + b"]")
        whole.append(b"[" + b",".join(items) + b"]")

    def _serialize(
        self, objs: list[Any], where: list[int], items: list[bytes], ids: list[str]
    ) -> None:
        """The JSON and id of the items new to their field (at ``where``); an item another
        field of the same trace serialized already (a call's newest message is in its
        history and in its messages as sent) is taken from there."""
        done = self._fresh
        todo = [o for o in objs if id(o) not in done]
        for o, data in zip(todo, _items_json(todo) if todo else [], strict=True):
            done[id(o)] = (o, data, part_id(data))  # held: its id is no other's
        for k, o in zip(where, objs, strict=True):
            _, items[k], ids[k] = done[id(o)]

    def _text(
        self,
        data: bytes,
        key: tuple[str, str],
        body: list[bytes],
        whole: list[bytes],
        parts: _Parts,
    ) -> None:
        """A long text: the pieces of the session's last trace it starts with, and the
        rest as one new piece (each a JSON string of the exact bytes between the quotes)."""
        content = data[1:-1]
        pieces: list[tuple[bytes, str]] = []
        pos = 0
        for piece, pid in self.texts.get(key, []):
            if not content.startswith(piece, pos):
                break
            pieces.append((piece, pid))
            pos += len(piece)
        if pos < len(content) or not pieces:
            rest = content[pos:]
            pieces.append((rest, part_id(b'"' + rest + b'"')))
        refs = [parts.ref(pid, b'"' + piece + b'"') for piece, pid in pieces]
        self.texts[key] = pieces
        body.append(b"[" + b",".join(refs) + b"]")
        whole.append(data)


def split_all(items: list[tuple[Any, bytes]], splitter: Splitter) -> list[Split | None]:
    """Each (trace, JSON) of a batch split (None: stored whole), in order."""
    return [splitter.split(raw, trace.session_id) for trace, raw in items]


__all__ = ["MAX_SESSIONS", "Split", "SplitJSON", "Splitter", "part_id", "split_all"]
