"""Shared traces: a trace line that names content an earlier line of its file carried.

docs/design.md, "Shared traces". An agent's call N repeats calls
1..N-1 and adds a little; written whole, a session's traces grow with the square of its
length. A shared line holds the parts it adds and names the rest::

    {"share":"ctxscope.share/1",
     "parts":{"<id>":<JSON value>, ...},
     "trace":{<a ctxscope.trace/1 object, where some values are part ids>}}

- A part is a JSON value under an id; ctxscope writes the id as a hash of the value's JSON
  bytes (content-addressed), so two writers appending to one file never disagree. An id the
  file defined before may be defined again only with the same bytes.
- In ``trace``, an item of ``input.history``, ``input.packets``, ``input.tools``,
  ``result.messages`` or ``result.decisions`` that is a JSON string is the id of the part
  holding that item (a whole item is always an object, so a string cannot be one).
  ``input.query``, ``input.system_instructions`` and ``result.prompt`` may be a list of
  ids of parts that are strings: the text is their concatenation (a prompt that grows each
  call names the earlier call's pieces and adds one).
- A line names only parts its own line or a line before it defines: the file stays
  self-contained, and a cut file keeps every trace whose parts it holds.

``PartTable.expand`` turns a shared line into the bytes of the whole trace (exactly the
JSON ``Trace.to_json`` wrote, when ctxscope wrote the line) and passes any other line
through; every reader of trace files calls it line by line, so each sees the same traces.
``ShareWriter`` writes traces in this form, serializing only what is new: it knows the
items it already wrote by identity (a session log's importer shares one object between
all the calls that hold it) and by content.
"""

from __future__ import annotations

import mmap
import os
import re
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from operator import eq, is_
from typing import Any

import msgspec
from pydantic import BaseModel, TypeAdapter
from xxhash import xxh3_64_hexdigest

from ctxcore import settings
from ctxcore.errors import InputError
from ctxcore.loading import GZIP_ERRORS, iter_lines, open_stream, too_deep
from ctxcore.models import Config, Decision, Message, Packet, Report, ToolDef, Trace
from ctxcore.settings import MAX_LINE_BYTES

#: The shared form ctxscope writes, /1 with runs of list parts; the reader takes both
#: (docs/design.md, "Shared traces").
SHARE_SCHEMA = "ctxscope.share/2"
SHARE_SCHEMAS = ("ctxscope.share/1", SHARE_SCHEMA)
#: The start of a shared line as ctxscope writes it; ``is_shared`` also takes whitespace.
MARKER = b'{"share":'
_SHARED = re.compile(rb'\s*\{\s*"share"\s*:')
#: A shared line whose keys were sorted (``jq -S``, ``sort_keys``) starts with ``made`` or
#: ``parts``;
#: it is one when it names the schema (as a JSON string: never inside another string).
_SORTED = re.compile(rb'\s*\{\s*"(?:made|parts)"\s*:')
#: What every shared line holds, as a JSON string: the schema's name up to its version
#: (``_names_schema`` checks the version and the closing quote).
SCHEMA_HEAD = b'"ctxscope.share/'
_TAILS = tuple(s.encode().removeprefix(SCHEMA_HEAD[1:]) + b'"' for s in SHARE_SCHEMAS)
#: Fields whose items may be part ids, by the object that holds them.
LIST_FIELDS: dict[str, tuple[str, ...]] = {
    "input": ("history", "packets", "tools"),
    "result": ("messages", "decisions"),
}
#: Fields whose text may be a list of part ids (string parts, concatenated).
TEXT_FIELDS: dict[str, tuple[str, ...]] = {
    "input": ("query", "system_instructions"),
    "result": ("prompt",),
}
#: ``result.report``'s lists (of packet ids), which a /2 line may write with runs.
REPORT_LISTS = ("mustKeep", "included", "summarized", "dropped")
#: A text shorter than this is written as it is, not as parts.
MIN_SHARED_TEXT = 512
#: A list shorter than this is written as it is, not as a list part.
MIN_RUN = 64
#: List parts a run may go through (a list part whose runs name list parts, ...), and the
#: depth at which the writer starts a session's list afresh (its whole items again).
MAX_RUN_DEPTH = 160
RUN_DEPTH = 128
#: Items a list may hold once its runs are read, and the items of expanded list parts a
#: ``PartTable`` keeps for the next line's runs (the least recent let go first).
MAX_LIST_ITEMS = 1 << 22
RUN_CACHE_ITEMS = 1 << 22
#: Sessions whose last lists and texts the writer keeps (the most recent ones).
MAX_SESSIONS = 32
#: Bytes a ``PartTable`` spends on a part beside its id's and JSON's characters: the two
#: objects' headers and the dict's slot (measured: 135 bytes a part for a million parts
#: of a few bytes under 16-character ids).
PART_OVERHEAD = 112


class _Envelope(msgspec.Struct, forbid_unknown_fields=True):
    share: str
    trace: msgspec.Raw
    parts: dict[str, msgspec.Raw] = {}
    made: dict[str, msgspec.Raw] = {}


_ENVELOPE = msgspec.json.Decoder(_Envelope)
_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])
_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_IDS = msgspec.json.Decoder(list[str])
_STR = msgspec.json.Decoder(str)
_RUN = msgspec.json.Decoder(list[Any])
_MADE = msgspec.json.Decoder(tuple[dict[str, msgspec.Raw], str])
_encode = msgspec.json.encode


def is_shared(raw: bytes) -> bool:
    """Whether a line is a shared trace: its first key is ``share``, or (its keys sorted)
    ``parts``, in a line that names the schema."""
    if raw[:3] == b"\xef\xbb\xbf":
        raw = raw[3:]
    if raw.startswith(MARKER) or _SHARED.match(raw) is not None:
        return True
    return _SORTED.match(raw) is not None and names_schema(raw)


def starts_shared(text: str) -> bool:
    """``is_shared`` for a decoded text (a one-document file, a line): its start, and for
    its sorted-keys form the schema anywhere in it (without encoding all of it)."""
    head = text[:64].encode("utf-8", "surrogatepass")
    if is_shared(head):
        return True
    return _SORTED.match(head.removeprefix(b"\xef\xbb\xbf")) is not None and any(
        f'"{schema}"' in text for schema in SHARE_SCHEMAS
    )


def names_schema(buf: bytes | mmap.mmap, end: int | None = None) -> bool:
    """Whether ``buf`` (before ``end``) holds a shared schema's name as a JSON string,
    ``"ctxscope.share/1"`` or ``/2``: one search for what they start with, each hit's
    version and closing quote then checked (inside another string the quotes are escaped,
    so a whole trace holds it only as the value of such a string)."""
    stop = len(buf) if end is None else end
    at = buf.find(SCHEMA_HEAD, 0, stop)
    while at >= 0:
        tail = at + len(SCHEMA_HEAD)
        if tail + 2 <= stop and buf[tail : tail + 2] in _TAILS:
            return True
        at = buf.find(SCHEMA_HEAD, tail, stop)
    return False


def part_id(raw: bytes) -> str:
    """The id ctxscope gives a part: a hash of its JSON bytes (XXH3, 64 bits, as hex: the
    hash ``import -o`` spends least on; docs/design.md, "Shared traces")."""
    return xxh3_64_hexdigest(raw)


def line_pieces(raw: bytes) -> list[bytes]:
    """The JSON values a shared line brings: its trace's body, and each part and made part
    it defines. Every string of the whole trace lies in one of these or in one an earlier
    line of its file brought (a part is put in whole; a list part's items, a made part's
    object and its text are parts; a list of plain values is written again, its strings'
    content the same). A line that is not a shared envelope is its own one piece."""
    try:
        env = _ENVELOPE.decode(raw.removeprefix(b"\xef\xbb\xbf"))
    except (msgspec.MsgspecError, RecursionError):
        return [raw]
    return [bytes(env.trace), *map(bytes, env.parts.values()), *map(bytes, env.made.values())]


class PartTable:
    """The parts of one file read so far, by id; ``expand`` reads the next line."""

    def __init__(self) -> None:
        #: a part's JSON; a made part as (its JSON before its text, its text's part id,
        #: after it): held so, never joined, a line of a few bytes naming a long text
        #: again and again holds no copy of it
        self.parts: dict[str, bytes | _Made] = {}
        #: bytes the parts take in memory, their ids and the table's own per part included
        #: (``PartTables`` keeps tables of watched files up to a size: a file of millions
        #: of tiny parts holds far more than its parts' JSON)
        self.size = 0
        #: the longest part's JSON (``_trace``: a trace of few pieces is not measured)
        self.biggest = 0
        #: whether the line being read may hold runs (a /2 line)
        self.runs = False
        #: list part id -> its items, runs read (the most recent, at most
        #: RUN_CACHE_ITEMS items: a session's next line runs through its last lists)
        self.lists: dict[str, tuple[Any, ...]] = {}
        self.list_items = 0
        #: whether every part defined so far came on a line its reader cleared (no
        #: redaction rule can match it: ingest's ``FileRun.shared_clean``), and on a
        #: line its reader found plain (``store.fastdecode.plain``)
        self.cleared = True
        self.plain = True

    def expand(
        self, raw: bytes, where: str = "", cleared: bool = False, plain: bool = False
    ) -> bytes:
        """The whole trace's JSON bytes of a shared line (its parts are now known), or
        ``raw`` itself when it is not one. A part named and not defined on this line or an
        earlier one, or an envelope that is not one, is an ``InputError`` naming ``where``
        (``file:line``) and the field. ``cleared``, ``plain``: what the caller found of the
        line (else a part it defines makes the table not ``cleared``, not ``plain``)."""
        if not is_shared(raw):
            return raw
        try:
            env = _ENVELOPE.decode(raw.removeprefix(b"\xef\xbb\xbf"))
        except msgspec.ValidationError as exc:
            # a later form may add keys: its version is what to say, not the key
            raise InputError(f"{_at(where)}{_newer(raw) or _envelope_error(str(exc))}") from exc
        except msgspec.DecodeError as exc:
            raise InputError(f"{_at(where)}{_malformed(str(exc))}") from exc
        except RecursionError:  # nested past the decoder's stack: that line's error
            raise too_deep(where) from None
        if env.share not in SHARE_SCHEMAS:
            raise InputError(f"{_at(where)}{_not_read(env.share)}")
        self._define(env.parts, where, _made(env, where), cleared, plain)
        self.runs = env.share != SHARE_SCHEMAS[0]
        return self._trace(bytes(env.trace), where)

    def learn(self, raw: bytes, where: str = "") -> None:
        """Only the parts a line defines (a reader resuming a file part-way learns the
        lines before its offset); a line that is not shared, or not JSON, defines none."""
        if not is_shared(raw):
            return
        try:  # the envelope as ``expand`` reads it: a line it refuses before its parts
            env = _ENVELOPE.decode(raw.removeprefix(b"\xef\xbb\xbf"))
        except (msgspec.MsgspecError, RecursionError):
            return  # read past before: its error was said then
        if env.share not in SHARE_SCHEMAS:
            return
        try:
            self._define(env.parts, where, _made(env, where))
        except InputError:
            return

    def _define(
        self,
        parts: dict[str, msgspec.Raw],
        where: str,
        made: dict[str, msgspec.Raw],
        cleared: bool = False,
        plain: bool = False,
    ) -> None:
        """A line's parts, all or none: a line that defines an id again with other bytes
        defines none of its parts (it contradicts the file: nothing of it is trusted).
        A made part (``made``) is defined by its bytes, made from the parts before it."""
        new: dict[str, bytes | _Made] = {}
        for pid, value in parts.items():
            self._new(pid, bytes(value), new, where, "parts")
        for pid, value in made.items():
            self._new(pid, self._make(pid, value, new, where), new, where, "made")
        if new:
            sizes = list(map(_held, new.values()))
            size = self.size + sum(sizes) + sum(map(len, new)) + PART_OVERHEAD * len(new)
            if size > settings.MAX_SHARED_PARTS_BYTES:
                raise InputError(
                    f"{_at(where)}field 'parts': this line's parts would take the file's "
                    f"shared parts past {settings.LIMITS['MAX_SHARED_PARTS_BYTES'][0]} "
                    "(MAX_SHARED_PARTS_BYTES), all held while the file is read; its trace is "
                    "not read, and later lines that define parts are refused the same way "
                    "(write it again from its source in parts, or each trace whole: "
                    "ctxscope import LOG --whole -o FILE)"
                )
            self.parts.update(new)
            self.size = size
            self.biggest = max(self.biggest, *sizes)
            self.cleared = self.cleared and cleared
            self.plain = self.plain and plain

    def _new(
        self, pid: str, data: bytes | _Made, new: dict[str, bytes | _Made], where: str, key: str
    ) -> None:
        old = new.get(pid) or self.parts.get(pid)
        if old is None:
            new[pid] = data
        elif old != data and self._bytes(old, new) != self._bytes(data, new):
            raise InputError(
                f"{_at(where)}field '{key}.{pid}': the part {pid!r} was defined on an "
                "earlier line with other content; a part's id names one content"
            )

    def _bytes(self, data: bytes | _Made, new: dict[str, bytes | _Made]) -> bytes:
        """A part's JSON, a made part's joined (only to compare two definitions of one id)."""
        if isinstance(data, bytes):
            return data
        text = new.get(data[1]) or self.parts[data[1]]
        return data[0] + self._bytes(text, new) + data[2]

    def _make(
        self, pid: str, value: msgspec.Raw, new: dict[str, bytes | _Made], where: str
    ) -> _Made:
        """A made part: ``[object, key]`` is ``object`` whose ``key`` holds, instead of its
        text, the id of the string part that holds it (a text that several items hold is
        written once); held as its JSON before and after the text, and the text's id."""
        field = f"made.{pid}"
        try:
            obj, key = _MADE.decode(value)
            raw = obj[key]
            text = _STR.decode(raw)
        except (msgspec.MsgspecError, KeyError) as exc:
            raise InputError(
                f"{_at(where)}field {field!r}: a made part is [an object, the key of its "
                "field that names a string part by id]"
            ) from exc
        data = new.get(text) or self.parts.get(text)
        if not isinstance(data, bytes) or data[:1] != b'"':
            raise InputError(
                f"{_at(where)}field '{field}[0].{key}': the part {text!r} is "
                + ("not a string" if data else "not defined on this line or an earlier one")
            )
        before: list[Any] = []
        after: list[Any] = []
        out = before
        sep = b"{"
        for name, item in obj.items():
            out += (sep, _encode(name), b":")
            if name == key:
                out = after
            else:
                out.append(item)
            sep = b","
        after.append(b"}")
        return (b"".join(before), text, b"".join(after))

    def _part(self, pid: str, where: str, field: str) -> bytes | _Made:
        data = self.parts.get(pid)
        if data is None:
            raise InputError(
                f"{_at(where)}field {field!r}: the part {pid!r} is not defined on this line "
                "or an earlier one of this file (a shared trace names only parts its file "
                "defined before it: the line that defines it is missing, cut off or later)"
            )
        return data

    def _trace(self, body: bytes, where: str) -> bytes:
        """The whole trace's JSON: its pieces gathered in one list and joined once (a
        trace is as long as its context; each concatenation on the way would copy it)."""
        try:
            top = _OBJECT.decode(body)
        except msgspec.MsgspecError as exc:
            raise InputError(f"{_at(where)}field 'trace': a trace must be a JSON object") from exc
        out: list[Any] = []
        self._fields(top, out, where, "")
        # As a whole line, no more than MAX_LINE_BYTES: a line naming one big part again
        # and again is refused before it is joined (``out`` holds the parts, not copies;
        # they are measured only when as many of the longest part could pass the limit).
        if len(out) * self.biggest + len(body) > MAX_LINE_BYTES:
            if sum(map(len, out)) > MAX_LINE_BYTES:
                raise self._too_big(top, where)
        return b"".join(out)

    def _too_big(self, top: dict[str, msgspec.Raw], where: str) -> InputError:
        """The error of a trace that passes MAX_LINE_BYTES, naming the field in which it
        does (each made again alone: the rare path)."""
        total = 0
        for key, value in top.items():
            nested = key in LIST_FIELDS and bytes(memoryview(value)[:1]) == b"{"
            inner = _OBJECT.decode(value) if nested else {}
            for name, fields in [(key, {k: v}) for k, v in inner.items()] or [("", {key: value})]:
                out: list[Any] = []
                self._fields(fields, out, where, name)
                total += sum(map(len, out))
                if total > MAX_LINE_BYTES:
                    return _too_big(where, f"{name}.{next(iter(fields))}" if name else key)
        return _too_big(where, "trace")

    def _fields(self, obj: dict[str, msgspec.Raw], out: list[Any], where: str, name: str) -> None:
        """An object's JSON into ``out``: ``input``'s and ``result``'s items and texts put
        back (``name`` is the object's field; "" for the trace itself)."""
        lists, texts = LIST_FIELDS.get(name, ()), TEXT_FIELDS.get(name, ())
        values = REPORT_LISTS if name == "result.report" else ()
        sep = b"{"
        for key, value in obj.items():
            out += (sep, _encode(key), b":")
            sep = b","
            first = bytes(memoryview(value)[:1])
            if not name and key in LIST_FIELDS and first == b"{":
                self._fields(_OBJECT.decode(value), out, where, key)
            elif key in lists and first == b"[":
                self._items(value, out, where, f"{name}.{key}")
            elif key in texts and first == b"[":
                out.append(self._text(value, where, f"{name}.{key}"))
            elif self.runs and name == "result" and key == "report" and first == b"{":
                self._fields(_OBJECT.decode(value), out, where, "result.report")
            elif key in values and first == b"[":
                self._values(value, out, where, f"{name}.{key}")
            else:
                out.append(value)
        out.append(b"}" if obj else b"{}")

    def _items(self, body: msgspec.Raw, out: list[Any], where: str, field: str) -> None:
        sep = b"["
        parts = self.parts
        items, ran = self._flat(body, where, field)
        for i, item in enumerate(items):
            out.append(sep)
            sep = b","
            if type(item) is str:  # a part's id
                data = parts.get(item) or self._part(item, where, _nth(field, i, ran))
                if type(data) is tuple:  # a made part: its text in place
                    out += (data[0], parts[data[1]], data[2])
                else:
                    out.append(data)
            else:
                out.append(item)
        out.append(b"]" if sep == b"," else b"[]")

    def _values(self, body: msgspec.Raw, out: list[Any], where: str, field: str) -> None:
        """A list of plain values (the report's packet ids) with its runs read: a string
        written again as the models write it (so as ctxscope wrote it)."""
        items = self._flat(body, where, field)[0]
        raws = [_str_json(x) if type(x) is str else x for x in items]
        out += (b"[", b",".join(raws), b"]")

    def _flat(
        self, body: msgspec.Raw | bytes, where: str, field: str
    ) -> tuple[Sequence[Any], bool]:
        """A list's items, each string decoded (an id), each run (a /2 line's ``[id]`` or
        ``[id, n]``: all or the first n items of the list part ``id``) replaced by the
        items it names, anything else as its JSON; and whether it had runs."""
        items = _LIST.decode(body)
        if self.runs and len(items) == 1 and bytes(memoryview(items[0])[:1]) == b"[":
            return self._run(items[0], where, f"{field}[0]", 1), True  # the usual: one run
        return self._elements(items, where, field, 0)

    def _elements(
        self, items: list[msgspec.Raw], where: str, field: str, depth: int
    ) -> tuple[list[Any], bool]:
        """``items`` read (``_flat``); ``depth`` list parts deep (0: the line's own)."""
        flat: list[Any] = []
        ran = False
        for i, item in enumerate(items):
            first = bytes(memoryview(item)[:1])
            if first == b'"':
                flat.append(_STR.decode(item))
            elif first == b"[" and self.runs:
                at = f"{field}[{i}]" if not depth else field
                flat += self._run(item, where, at, depth + 1)
                ran = True
                if len(flat) > MAX_LIST_ITEMS:
                    raise _too_long(where, field)
            else:
                flat.append(item)
        return flat, ran

    def _run(self, item: Any, where: str, field: str, depth: int) -> tuple[Any, ...]:
        """The items a run names: all or the first n of a list part's, its runs read."""
        try:
            run = _RUN.decode(item)
        except msgspec.MsgspecError:
            run = None
        if not run or len(run) > 2 or not isinstance(run[0], str) or not _count(run[1:]):
            raise InputError(
                f"{_at(where)}field {field!r}: a list's item that is a list is a run, "
                "[list part id] or [list part id, how many of its items], not "
                f"{bytes(item)[:80].decode('utf-8', 'replace')}"
            )
        pid = run[0]
        items = self._list_part(pid, where, field, depth)
        if len(run) == 1:
            return items
        if run[1] > len(items):
            raise InputError(
                f"{_at(where)}field {field!r}: the run takes {run[1]:,} items of the list part "
                f"{pid!r}, which holds {len(items):,}"
            )
        return items[: run[1]]

    def _list_part(self, pid: str, where: str, field: str, depth: int) -> tuple[Any, ...]:
        """A list part's items, read as ``_flat`` reads a list (kept for the next line's
        runs: a session's lists are read from its last line's, not again)."""
        held = self.lists.pop(pid, None)
        if held is not None:
            self.lists[pid] = held  # the most recent now
            return held
        if depth > MAX_RUN_DEPTH:
            raise InputError(
                f"{_at(where)}field {field!r}: its runs go through more than "
                f"{MAX_RUN_DEPTH} list parts, each naming the next (the most a reader follows)"
            )
        data = self._part(pid, where, field)
        if not isinstance(data, bytes) or data[:1] != b"[":
            raise InputError(
                f"{_at(where)}field {field!r}: the part {pid!r} is not a list, and a run "
                "names a list part"
            )
        flat = self._elements(_LIST.decode(data), where, f"{field} (list part {pid!r})", depth)[0]
        items = tuple(flat)
        self.lists[pid] = items
        self.list_items += len(items)
        while self.list_items > RUN_CACHE_ITEMS and len(self.lists) > 1:
            self.list_items -= len(self.lists.pop(next(iter(self.lists))))
        return items

    def _text(self, body: msgspec.Raw, where: str, field: str) -> bytes:
        ran = False
        try:
            ids = _IDS.decode(body)
        except msgspec.MsgspecError as exc:
            if not self.runs:
                raise _not_pieces(where, field, exc) from exc
            ids, ran = self._piece_ids(body, where, field)  # its pieces: what its runs name
        pieces = []
        size = 0
        parts = self.parts
        for i, pid in enumerate(ids):
            data = parts.get(pid) or self._part(pid, where, _nth(field, i, ran))
            if not isinstance(data, bytes) or data[:1] != b'"':
                raise InputError(
                    f"{_at(where)}field {_nth(field, i, ran)!r}: the part {pid!r} is not a string, "
                    "and a text is made of strings"
                )
            size += len(data)
            if size > MAX_LINE_BYTES:  # before each piece is copied out of its quotes
                raise _too_big(where, field)
            pieces.append(data[1:-1])
        return b'"' + b"".join(pieces) + b'"'

    def _piece_ids(self, body: msgspec.Raw, where: str, field: str) -> tuple[list[str], bool]:
        """The piece ids of a text written with runs (each item a string)."""
        items, ran = self._flat(body, where, field)
        for i, item in enumerate(items):
            if type(item) is not str:
                try:
                    _STR.decode(item)
                except msgspec.MsgspecError as exc:
                    raise _not_pieces(where, _nth(field, i, ran), exc) from exc
        return list(items), ran


def _nth(field: str, i: int, ran: bool) -> str:
    """The name of a list's i-th item: ``field[i]``, or with its runs read, which one."""
    return f"{field} (item {i} with its runs read)" if ran else f"{field}[{i}]"


#: a made part as a ``PartTable`` holds it: its JSON before its text, the text's part id,
#: its JSON after it
_Made = tuple[bytes, str, bytes]


def _held(data: bytes | _Made) -> int:
    """Bytes a part's JSON takes in a table (a made part: its own, not its text's)."""
    return len(data) if isinstance(data, bytes) else len(data[0]) + len(data[1]) + len(data[2])


def _not_read(share: str) -> str:
    return (
        f"field 'share': {share!r} is not {' or '.join(map(repr, SHARE_SCHEMAS))}, the "
        "shared forms this ctxscope reads; upgrade ctxscope"
    )


class _Version(msgspec.Struct):
    share: str


_VERSION = msgspec.json.Decoder(_Version)


def _newer(raw: bytes) -> str | None:
    """The error of a line of a shared form this ctxscope does not read (whatever else
    its envelope holds), or None."""
    try:
        share = _VERSION.decode(raw.removeprefix(b"\xef\xbb\xbf")).share
    except msgspec.MsgspecError:
        return None
    return _not_read(share) if share not in SHARE_SCHEMAS else None


def _made(env: _Envelope, where: str) -> dict[str, msgspec.Raw]:
    """A line's made parts; a /1 line has none (that form did not have them)."""
    if env.made and env.share == SHARE_SCHEMAS[0]:
        raise InputError(f"{_at(where)}field 'made': unknown in {SHARE_SCHEMAS[0]!r} ({_FIELDS})")
    return env.made


def _count(rest: list[Any]) -> bool:
    """Whether a run's rest is nothing or a count (a whole number, not true or false)."""
    return not rest or (type(rest[0]) is int and rest[0] >= 0)


def _not_pieces(where: str, field: str, exc: Exception) -> InputError:
    """A text's pieces that are not all part ids: the field of the first that is not."""
    m = _EXPECTED.fullmatch(str(exc).replace("`$[", "`$.["))
    at, got = (f"{field}{m[3] or ''}", f", not {_a(m[2])}") if m else (field, "")
    return InputError(
        f"{_at(where)}field {at!r}: a shared text is a list of part ids (strings){got}"
    )


def _too_long(where: str, field: str) -> InputError:
    return InputError(
        f"{_at(where)}field {field!r}: with its runs read, the list holds more than "
        f"{MAX_LIST_ITEMS:,} items (the most a list of one trace may)"
    )


def _at(where: str) -> str:
    return f"{where}: " if where else ""


def _too_big(where: str, field: str) -> InputError:
    return InputError(
        f"{_at(where)}field {field!r}: the whole trace would be over {MAX_LINE_BYTES:,} "
        "bytes, the limit for one trace line (the parts it names, with what it holds itself)"
    )


_TYPE_ERROR = re.compile(r"Expected `(.*)`, got `(.*)` - at `\$\.(.*)`")
_EXPECTED = re.compile(r"Expected `(.*?)`, got `(.*?)`(?: - at `\$\.(.*)`)?")
_FIELD_ERROR = re.compile(r"Object (missing required|contains unknown) field `(.*)`")
_FIELDS = "a shared line is an object of 'share', 'parts', 'made' (from /2) and 'trace'"


def _envelope_error(why: str) -> str:
    """The decoder's word on a shared line's envelope, as the one line that names the field
    (``field 'parts': expected an object, not an array``)."""
    m = _TYPE_ERROR.fullmatch(why)
    if m is not None:
        want, got, field = m.groups()
        return f"field {field!r}: expected {_a(want)}, not {_a(got)} ({_FIELDS})"
    m = _FIELD_ERROR.fullmatch(why)
    if m is not None:
        kind, field = m.groups()
        said = "missing" if kind == "missing required" else "unknown"
        return f"field {field!r}: {said} ({_FIELDS})"
    return f"a shared trace line: {why}"


#: the decoder's names of JSON's kinds of value, as the messages say them
_KINDS = {"str": "a string", "int": "a number", "float": "a number", "bool": "true or false"}


def _a(kind: str) -> str:
    return _KINDS.get(kind) or (f"an {kind}" if kind[:1] in "aeiou" else f"a {kind}")


_SURROGATE = re.compile(
    r".*(?:unexpected end of hex escape|invalid utf-16 surrogate pair) (\(byte \d+\))"
)


def _malformed(why: str) -> str:
    """A shared line that is not JSON: the decoder's reason, a lone surrogate said as one
    (the whole-line reader refuses it as no valid string)."""
    m = _SURROGATE.fullmatch(why)
    if m is not None:
        return (
            f"malformed JSON {m[1]}: a \\u escape of half a UTF-16 surrogate pair without its "
            "other half (a lone surrogate), which is no character a text can hold"
        )
    return f"malformed JSON ({why})"


def expand_lines(lines: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, bytes | InputError]]:
    """(line number, whole line) of a trace file's lines (``loading.iter_lines``), shared
    lines expanded with one table for the file; a line that cannot be comes as its error."""
    table = PartTable()
    for n, raw in lines:
        try:
            yield n, table.expand(raw, f"line {n}")
        except InputError as exc:
            yield n, exc


# --------------------------------------------------------------------------- files


def may_hold_shared(path: str, gz: bool, end: int | None = None) -> bool:
    """Whether a file may hold shared lines (before byte ``end``, if given): then its lines
    are read in order with one part table, never split among worker processes. A plain
    file is searched for a schema's name (``names_schema``: every shared line holds it,
    whatever the order of its keys), a .gz in its first MiB (a shared file's first line is one)."""
    try:
        with open_stream(path) as f:
            if gz:
                return names_schema(f.read(1024 * 1024))
            if os.fstat(f.fileno()).st_size == 0:
                return False
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return names_schema(mm, end)
    except (OSError, ValueError, *GZIP_ERRORS):
        return False  # the reader says why


class PartTables:
    """The part tables of files being tailed (``store.ingest``, the watcher): a file read
    on from its offset needs the parts of the lines before it. A table is kept while its
    file's inode and offset match (at most ``MAX_HELD`` bytes of parts over all files, the
    oldest let go first); otherwise the lines before the offset are read again for their
    parts alone."""

    MAX_HELD = 256 * 1024 * 1024

    def __init__(self) -> None:
        self.tables: dict[str, tuple[int, int, PartTable]] = {}

    def get(self, key: str, inode: int, offset: int, gz: bool) -> PartTable:
        """The table of ``key`` holding the parts of its lines before byte ``offset``."""
        held = self.tables.pop(key, None)
        if offset <= 0:
            return PartTable()
        if held is not None and held[0] == inode and held[1] == offset:
            return held[2]
        table = PartTable()
        if not may_hold_shared(key, gz, offset):
            return table  # no shared line before the offset: nothing to learn
        done = 0
        try:
            for n, raw in iter_lines(key):
                if done >= offset:
                    break
                done += len(raw) + 1
                table.learn(raw, f"line {n}")
        except InputError:
            pass  # an unreadable line or file: its reader says so
        return table

    def keep(self, key: str, inode: int, offset: int, table: PartTable) -> None:
        """``table`` holds the parts of ``key`` up to ``offset``: kept for the next read."""
        self.tables.pop(key, None)
        if not table.parts:
            return
        self.tables[key] = (inode, offset, table)
        while sum(t.size for _, _, t in self.tables.values()) > self.MAX_HELD:
            del self.tables[next(iter(self.tables))]


# --------------------------------------------------------------------------- writing


#: The serializers of the items a shared line names by id (each model's own: one call an
#: item, its JSON as ``Model.model_dump_json`` writes it).
_SERIALIZERS: dict[type, Any] = {
    m: m.__pydantic_serializer__ for m in (Message, Packet, ToolDef, Decision)
}
#: The fields a shared line writes itself (items as part ids, texts as pieces), by the
#: object holding them: left out of pydantic's one dump of the trace, put back in place.
_OWN: dict[str, dict[str, bool]] = {
    name: {**dict.fromkeys(LIST_FIELDS[name], True), **dict.fromkeys(TEXT_FIELDS[name], False)}
    for name in LIST_FIELDS
}
_EXCLUDE = {name: set(fields) for name, fields in _OWN.items()}
_TRACE_JSON = Trace.__pydantic_serializer__
_CONFIG_JSON = Config.__pydantic_serializer__
#: ``config`` is left out of the trace's dump and put back after this key (its JSON is
#: the same object's, call after call: ``ShareWriter._config_json``)
_TRACE_KEYS = [info.alias or name for name, info in Trace.model_fields.items()]
_BEFORE_CONFIG = _TRACE_KEYS[_TRACE_KEYS.index("config") - 1]
_EXCLUDE_CONFIG: dict[str, Any] = {**_EXCLUDE, "config": True}
_NO_LIST: tuple[list[Any], list[str]] = ([], [])
_NO_TEXT: tuple[str, list[tuple[str, int]]] = ("", [])
#: the report's lists, each with the field a writer keeps its chain under
_REPORT_KEYS = [(name, f"result.report.{name}") for name in REPORT_LISTS]
#: Texts made by appending to another (``grew``): id -> (the text, its head, the pieces
#: appended); the most recent ``GREW_KEPT``, each let go when a writer takes it.
_GREW: dict[int, tuple[str, str, list[str]]] = {}
_GREW_LOCK = threading.Lock()
GREW_KEPT = 4


def grew(text: str, head: str, pieces: list[str] | None = None) -> None:
    """Say that ``text`` was made as ``head`` and more (``pieces``, joined, if given): a
    ``ShareWriter`` writing it after ``head`` (a session's prompt, megabytes, grows each
    call) then knows that it starts with ``head`` without comparing the two, and names a
    piece that is an item's long text by that text's part."""
    with _GREW_LOCK:
        _GREW[id(text)] = (text, head, pieces or [])
        while len(_GREW) > GREW_KEPT:
            del _GREW[next(iter(_GREW))]


def _said_of(text: str) -> tuple[str, list[str]] | None:
    """What ``grew`` said ``text`` was made of: its head and the pieces after it (that
    word is then let go), or None if it said nothing of it."""
    with _GREW_LOCK:
        said = _GREW.pop(id(text), None)
    return (said[1], said[2]) if said is not None and said[0] is text else None


class ShareWriter:
    """Traces as shared lines (module doc), each part written once per file.

    Only new content is serialized: an item the writer wrote before is known by identity
    (objects shared between a session's calls; a list whose first items are the previous
    call's is checked at C speed, and its ids' JSON is the previous call's plus the new
    ones) or, failing that, by the hash of its JSON; a text is the previous call's pieces
    of that session and field that it starts with, plus the rest. The rest of a trace is
    one pydantic dump (docs/design.md, "Shared traces")."""

    def __init__(self) -> None:
        self.written: set[str] = set()
        #: id(object) -> (a weak reference to it, its part id): an entry goes with its
        #: object, so the writer holds no item the importer let go of
        self.known: dict[int, tuple[weakref.ref[Any], str]] = {}
        #: (session, field) -> the last list written there and its part ids
        self.lists: dict[tuple[str, str], tuple[list[Any], list[str]]] = {}
        #: (session, field) -> the last text written there and its pieces (id, length)
        self.texts: dict[tuple[str, str], tuple[str, list[tuple[str, int]]]] = {}
        #: (session, field) -> the list part of the last list written there when it was
        #: written as one (long enough): its id, length, depth of runs and the field's
        #: JSON that names it
        self.chains: dict[tuple[str, str], tuple[str, int, int, bytes]] = {}
        #: the sessions those three hold, least recent first (at most MAX_SESSIONS)
        self.sessions: dict[str, None] = {}
        #: the last config written and its JSON
        self.config: tuple[Config | None, bytes] = (None, b"")
        #: id(text) -> (the text, its string part's id): the long texts of the items
        #: written lately (at most MAX_HELD_CHARS characters, the least recent let go),
        #: so that another item or a prompt holding the same string names that part
        self.held: dict[int, tuple[str, str]] = {}
        self.held_chars = 0
        #: the made parts of the line being written
        self.made: dict[str, bytes] = {}

    def line(self, trace: Trace) -> str:
        """One shared line (with its newline) for ``trace``."""
        return self.line_bytes(trace).decode("utf-8", "surrogatepass")

    def line_bytes(self, trace: Trace) -> bytes:
        """``line`` as UTF-8 bytes (what a file gets: the parts are bytes already)."""
        self._session(trace.session_id)
        new: dict[str, bytes] = {}
        self.made = {}
        body = self._body(trace, new)
        out = [b'{"share":"', SHARE_SCHEMA.encode(), b'","parts":{']
        sep = b'"'
        for pid, data in new.items():
            out += (sep, pid.encode(), b'":', data)
            sep = b',"'
        if self.made:
            out.append(b'},"made":{')
            sep = b'"'
            for pid, data in self.made.items():
                out += (sep, pid.encode(), b'":', data)
                sep = b',"'
        out += (b'},"trace":', body, b"}\n")
        return b"".join(out)

    def _session(self, session: str) -> None:
        """``session`` is the most recent; the lists and texts of the least recent one
        beyond MAX_SESSIONS are let go (its items are still known by identity)."""
        self.sessions.pop(session, None)
        self.sessions[session] = None
        if len(self.sessions) > MAX_SESSIONS:
            old = next(iter(self.sessions))
            del self.sessions[old]
            for table in (self.lists, self.texts, self.chains):
                for key in [k for k in table if k[0] == old]:
                    del table[key]

    def lines(self, traces: Iterator[Trace]) -> Iterator[str]:
        for t in traces:
            yield self.line(t)

    def byte_lines(self, traces: Iterator[Trace]) -> Iterator[bytes]:
        for t in traces:
            yield self.line_bytes(t)

    def _body(self, trace: Trace, new: dict[str, bytes]) -> bytes:
        """The trace's JSON with parts: pydantic dumps it once without the fields holding
        parts (``_OWN``), and those are put back at their places in ``input`` and
        ``result``, in field order (the order their new parts are defined in)."""
        dumped = _TRACE_JSON.to_json(
            trace, by_alias=True, exclude_none=False, exclude=_EXCLUDE_CONFIG
        )
        out: list[bytes] = []
        sep = b"{"
        for key, raw in _OBJECT.decode(dumped).items():
            out += (sep, _encode(key), b":")
            sep = b","
            value = getattr(trace, key) if key in _OWN else None
            out.append(raw if value is None else self._object(trace, key, value, raw, new))
            if key == _BEFORE_CONFIG:
                out += (b',"config":', self._config_json(trace.config))
        out.append(b"}" if out else b"{}")
        return b"".join(out)

    def _config_json(self, config: Config) -> bytes:
        """The config's JSON: a session's calls share one object, dumped once."""
        if self.config[0] is not config:
            self.config = (config, _CONFIG_JSON.to_json(config, by_alias=True))
        return self.config[1]

    def _object(
        self, trace: Trace, name: str, model: BaseModel, raw: bytes, new: dict[str, bytes]
    ) -> bytes:
        """``input``'s or ``result``'s JSON: ``raw`` (pydantic's, without the fields of
        ``_OWN[name]``) with those fields written as parts, each in its place."""
        dumped = _OBJECT.decode(raw)
        out: list[Any] = []
        sep = b"{"
        first: dict[str, bytes] = {}
        messages = getattr(model, "messages", None) if name == "result" else None
        if messages is not None:  # before the prompt, which names their long texts
            first["messages"] = self._list((trace.session_id, "result.messages"), messages, new)
        for field, key, head, kind in _fields(type(model), name):
            data: bytes | msgspec.Raw | None
            if field in first:
                data = first[field]
            elif kind is None:
                data = dumped.pop(key, None)
                if data is None:
                    continue
                if key == "report" and name == "result":
                    data = self._report(trace.session_id, getattr(model, field), data, new)
            else:
                value = getattr(model, field)
                where = (trace.session_id, f"{name}.{field}")
                if kind:
                    data = b"null" if value is None else self._list(where, value, new)
                elif len(value) >= MIN_SHARED_TEXT:
                    data = self._pieces(where, value, new)
                else:
                    data = _str_json(value)
            out += (sep, head, data)
            sep = b","
        for key, data in dumped.items():  # any the model's fields do not name
            out += (sep, _encode(key), b":", data)
            sep = b","
        out.append(b"}" if out else b"{}")
        return b"".join(out)

    def _add(self, data: bytes, new: dict[str, bytes]) -> str:
        """The id of the part whose JSON is ``data``; new to the file, it goes in ``new``."""
        pid = part_id(data)
        if pid not in self.written:
            self.written.add(pid)
            new[pid] = data
        return pid

    def _list(self, key: tuple[str, str], items: list[Any], new: dict[str, bytes]) -> bytes:
        """The JSON list of ``items``' part ids. The items that are the previous list's at
        the same place (found at C speed: a call's list is the previous call's, but for the
        item a call marks and the new ones at the end) keep their ids; the others are known
        by identity or serialized."""
        prev, prev_ids = self.lists.get(key, _NO_LIST)
        n = min(len(prev), len(items))
        ids = prev_ids[:n] + [""] * (len(items) - n)
        same = list(map(is_, items[:n], prev))
        other = [k for k in _falses(same)]
        other += range(n, len(items))
        unknown: list[int] = []
        for k in other:
            hit = self.known.get(id(items[k]))
            if hit is not None and hit[0]() is items[k]:
                ids[k] = hit[1]
            else:
                unknown.append(k)
        if unknown:
            self._serialize([items[k] for k in unknown], unknown, ids, new)
        self.lists[key] = (items, ids)
        try:
            kept = same.index(False)  # the items the previous list's run gives
        except ValueError:
            kept = n
        if kept < n and ids[kept] == prev_ids[kept]:
            # not the same objects but the same content (a part id is its JSON's hash):
            # traces read back from a store or a file, each its own objects, still run on
            kept = _common(ids, prev_ids)
        return self._chain(key, len(ids), kept, lambda i: _ids_items(ids[i:]), new)

    def _chain(
        self,
        key: tuple[str, str],
        n: int,
        kept: int,
        items_json: Callable[[int], bytes],
        new: dict[str, bytes],
    ) -> bytes:
        """A list field's JSON, its ``n`` items written by ``items_json(from)`` (their JSON,
        comma-separated). A long list is a list part, named by a run: its first ``kept``
        items (the previous list's of ``key``) a run of the previous list part, the rest
        written; a session's list then costs what it adds, not its length each call."""
        if n < MIN_RUN:
            self.chains.pop(key, None)
            return b"[" + items_json(0) + b"]"
        prev = self.chains.get(key)
        if prev is not None and kept == prev[1] == n:
            return prev[3]  # the same list again
        if prev is not None and kept >= MIN_RUN and prev[2] < RUN_DEPTH:
            count = b"" if kept == prev[1] else b"," + str(kept).encode()
            rest = b"," + items_json(kept) if n > kept else b""
            body = b'[["' + prev[0].encode() + b'"' + count + b"]" + rest + b"]"
            depth = prev[2] + 1
        else:
            body, depth = b"[" + items_json(0) + b"]", 1
        lid = self._add(body, new)
        named = b'[["' + lid.encode() + b'"]]'
        self.chains[key] = (lid, n, depth, named)
        return named

    def _report(self, session: str, report: Report, raw: bytes, new: dict[str, bytes]) -> bytes:
        """The report's JSON (pydantic's, ``raw``), its long lists of packet ids written as
        list parts (``_chain``): a session's report lists every packet it kept, each call."""
        chains = self.chains
        long = []
        for name, field in _REPORT_KEYS:
            now = getattr(report, name)
            key = (session, field)
            if len(now) >= MIN_RUN or key in chains:
                long.append((name, key, now))
        if not long:
            return raw  # as pydantic wrote it
        obj: dict[str, Any] = _OBJECT.decode(raw)
        for name, key, now in long:
            before = self.lists.get(key, _NO_LIST)[0]
            self.lists[key] = (now, _NO_LIST[1])
            if now[: len(before)] == before:  # the usual call: the previous list and more
                kept = len(before)
            else:
                kept = _common(now, before)
            obj[name] = self._chain(key, len(now), kept, partial(_strs_json, now), new)
        out: list[Any] = []
        sep = b"{"
        for name, data in obj.items():
            out += (sep, _encode(name), b":", data)
            sep = b","
        out.append(b"}" if out else b"{}")
        return b"".join(out)

    def _serialize(
        self, objs: list[Any], where: list[int], ids: list[str], new: dict[str, bytes]
    ) -> None:
        """Part ids of items not known yet: their JSON (one serializer call each), hashed."""
        kind = type(objs[0])
        serializer = _SERIALIZERS.get(kind)
        if serializer is not None and all(type(o) is kind for o in objs):
            if kind in _TEXT_ITEMS:  # a long text is a part, the item a made part
                for k, obj in zip(where, objs, strict=True):
                    if len(obj.content) >= MIN_SHARED_TEXT:
                        pid = self._made(obj, serializer, new)
                    else:
                        pid = self._add(serializer.to_json(obj), new)
                    ids[k] = pid
                    self._know(obj, pid)
                return
            raws = list(map(serializer.to_json, objs))
        else:
            raws = [_model_json(o).encode("utf-8", "surrogatepass") for o in objs]
        for k, obj, data in zip(where, objs, raws, strict=True):
            pid = self._add(data, new)
            ids[k] = pid
            self._know(obj, pid)

    def _made(self, obj: Message | Packet, serializer: Any, new: dict[str, bytes]) -> str:
        """The id of a made part for an item with a long text: ``[the item with its text's
        part id in place of the text, "content"]`` (the text written once, as a part,
        whichever items and prompts hold it)."""
        tid = self._text(obj.content, new)
        rest = serializer.to_json(obj, exclude=_CONTENT)
        # the text's place: before the key that follows it (only strings come before it,
        # and a string holds no unescaped quote, so the first such key is that one)
        at = rest.find(_AFTER_CONTENT[type(obj)])
        if at < 0:
            raise ValueError(f"no {_AFTER_CONTENT[type(obj)]!r} in {type(obj).__name__}'s JSON")
        made = b"".join(
            (b"[", rest[:at], b',"content":"', tid.encode(), b'"', rest[at:], b',"content"]')
        )
        mid = part_id(made)
        if mid not in self.written:
            self.written.add(mid)
            self.made[mid] = made
        return mid

    def _text(self, text: str, new: dict[str, bytes]) -> str:
        """The id of the string part holding ``text`` (known by identity when written
        lately, as each history item's text is again its message's and its prompt's)."""
        hit = self.held.get(id(text))
        if hit is not None and hit[0] is text:
            return hit[1]
        tid = self._add(_str_json(text), new)
        self.held[id(text)] = (text, tid)
        self.held_chars += len(text)
        while self.held_chars > MAX_HELD_CHARS and len(self.held) > 1:
            self.held_chars -= len(self.held.pop(next(iter(self.held)))[0])
        return tid

    def _know(self, obj: Any, pid: str) -> None:
        """Remember ``obj`` by identity for as long as it lives."""
        key = id(obj)
        known = self.known

        def gone(ref: weakref.ref[Any]) -> None:
            if known.get(key, (None,))[0] is ref:
                del known[key]

        try:
            known[key] = (weakref.ref(obj, gone), pid)
        except TypeError:
            pass  # not weakly referable (a plain value): known by its content only

    def _pieces(self, key: tuple[str, str], text: str, new: dict[str, bytes]) -> bytes:
        """The ids of ``text``'s pieces (``_chain``): the previous text's of this session and
        field that it starts with, then the rest as one new piece."""
        prev, prev_pieces = self.texts.get(key, _NO_TEXT)
        said = _said_of(text)
        tail: list[str] = []
        # the usual case: made from the previous text (``grew``), or one comparison
        if said is not None and said[0] is prev:
            pieces, pos, tail = prev_pieces[:], len(prev), said[1]
        elif said is not None and not said[0]:  # made whole, of these pieces
            pieces, pos, tail = [], 0, said[1]
        elif text is prev or text.startswith(prev):
            pieces, pos = prev_pieces[:], len(prev)
        else:
            pieces, pos = _common_pieces(text, prev, prev_pieces)
        kept = len(pieces)
        if tail and sum(map(len, tail)) == len(text) - pos:
            pos = self._said(tail, pos, pieces, new)
        if pos < len(text) or not pieces:
            pid = self._add(_str_json(text[pos:]), new)
            pieces.append((pid, len(text) - pos))
        self.texts[key] = (text, pieces)
        return self._chain(
            key, len(pieces), kept, lambda i: _ids_items([pid for pid, _ in pieces[i:]]), new
        )

    def _said(
        self, said: list[str], pos: int, pieces: list[tuple[str, int]], new: dict[str, bytes]
    ) -> int:
        """A text's new end as ``grew`` said it was made: each long piece as its string
        part (an item's text, the same part as the item's: ``_text``), the pieces between
        joined as one; where the text's end then is."""
        between: list[str] = []
        for piece in said:
            if len(piece) < MIN_SHARED_TEXT:
                between.append(piece)
                continue
            if between:
                pos = self._piece("".join(between), pos, pieces, new)
                between = []
            pieces.append((self._text(piece, new), len(piece)))
            pos += len(piece)
        if between:
            pos = self._piece("".join(between), pos, pieces, new)
        return pos

    def _piece(
        self, text: str, pos: int, pieces: list[tuple[str, int]], new: dict[str, bytes]
    ) -> int:
        pieces.append((self._add(_str_json(text), new), len(text)))
        return pos + len(text)


def _falses(flags: list[bool]) -> Iterator[int]:
    """Where ``flags`` is False (each found by ``list.index``, at C speed)."""
    k = -1
    while True:
        try:
            k = flags.index(False, k + 1)
        except ValueError:
            return
        yield k


_PLANS: dict[type, list[tuple[str, str, bytes, bool | None]]] = {}
#: items whose long ``content`` a shared line writes as a string part of its own
_TEXT_ITEMS = (Message, Packet)
_CONTENT = {"content"}


def _after_content(model: type[BaseModel]) -> bytes:
    """``,"key":`` of the field after ``content`` in ``model``'s JSON, where every field
    before ``content`` is a string (``ShareWriter._made`` puts the text back before it)."""
    names = list(model.model_fields)
    at = names.index("content")
    if not all(model.model_fields[n].annotation is str for n in names[:at]):
        raise TypeError(f"{model.__name__}: a field before 'content' is not a string")
    info = model.model_fields[names[at + 1]]
    return b"," + _encode(info.alias or names[at + 1]) + b":"


_AFTER_CONTENT = {m: _after_content(m) for m in _TEXT_ITEMS}
#: characters of texts a ``ShareWriter`` keeps to know them by identity
MAX_HELD_CHARS = 64 * 1024 * 1024


def _fields(model: type[BaseModel], name: str) -> list[tuple[str, str, bytes, bool | None]]:
    """``model``'s fields in order, each as (field, JSON key, ``"key":``, whether the
    writer writes it as a list of parts (True), as a text's pieces (False), or not (None))."""
    plan = _PLANS.get(model)
    if plan is None:
        own = _OWN[name]
        plan = _PLANS[model] = [
            (field, key, _encode(key) + b":", own.get(field))
            for field, info in model.model_fields.items()
            for key in [info.alias or field]
        ]
    return plan


def _ids_items(ids: list[str]) -> bytes:
    """Part ids as a JSON list's items (no brackets)."""
    return ('"' + '","'.join(ids) + '"').encode() if ids else b""


def _strs_json(values: list[str], start: int) -> bytes:
    """Strings from ``start`` as a JSON list's items (no brackets), as pydantic writes them."""
    return b",".join(map(_str_json, values[start:]))


def _common(now: list[Any], before: list[Any]) -> int:
    """How many items ``now`` starts with that ``before`` has at the same places."""
    same = list(map(eq, now, before))
    try:
        return same.index(False)
    except ValueError:
        return len(same)


def _common_pieces(
    text: str, prev: str, pieces: list[tuple[str, int]]
) -> tuple[list[tuple[str, int]], int]:
    """The leading pieces of ``prev`` (``(id, length)``, in order) that ``text`` starts
    with, and where they end in it."""
    kept: list[tuple[str, int]] = []
    pos = 0
    for pid, n in pieces:
        if text[pos : pos + n] != prev[pos : pos + n]:
            break
        kept.append((pid, n))
        pos += n
    return kept, pos


def _model_json(obj: Any) -> str:
    if isinstance(obj, BaseModel):
        return obj.model_dump_json()
    return (_str_json(obj) if isinstance(obj, str) else _encode(obj)).decode("utf-8")


_STR_ADAPTER: TypeAdapter[str] = TypeAdapter(str)
_STR_JSON = _STR_ADAPTER.serializer.to_json


def _str_json(text: str) -> bytes:
    """A string's JSON as the models write it (pydantic's escaping)."""
    return _STR_JSON(text)


def whole_lines(traces: Iterator[Trace]) -> Iterator[str]:
    """Each trace whole, as ``ctxscope.trace/1`` has always been written."""
    for t in traces:
        yield t.to_json() + "\n"


def whole_byte_lines(traces: Iterator[Trace]) -> Iterator[bytes]:
    """``whole_lines`` as UTF-8 bytes, straight from the serializer."""
    for t in traces:
        yield t.to_json_bytes() + b"\n"


__all__ = [
    "MARKER",
    "SHARE_SCHEMA",
    "PartTable",
    "PartTables",
    "may_hold_shared",
    "ShareWriter",
    "expand_lines",
    "grew",
    "is_shared",
    "line_pieces",
    "part_id",
    "whole_byte_lines",
    "whole_lines",
]
