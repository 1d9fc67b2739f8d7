"""Stored traces read as objects that share what they share (``SharedTraces``).

A session's call N holds calls 1..N-1's context. Read one by one, each stored trace is
expanded to its whole JSON and validated whole (``codec.unpack_json``,
``Trace.model_validate_json``): a session of 850 calls that is never compacted is a
gigabyte of JSON, and each trace's items are new objects, so a writer of the shared form
serializes every item of every trace again to know it. Here a shared trace's body is
decoded alone and each part it names (an item, a piece of text) is made once, by its id,
and given to every trace that names it: the traces are the ones ``model_validate_json``
gives (equal, field by field), the items the same objects from one trace to the next, as
an importer's are (docs/design.md, "Shared traces"; ``ctxscope export --session --shared``).

Given a ``Redactor``, it reads each trace as ``formats.redact.redact_trace`` gives it,
each part's secrets looked for once: an item that no rule can match (``may_hold_secret`` of
its JSON) is taken as it is, another is walked string by string once and its redacted copy
shared; the texts made of pieces (the prompt) are redacted joined (a secret may span two
pieces; the ``Redactor`` reads a growing prompt's new end only), and the rest of the trace
string by string. Every string of the trace is read by the same rules as the whole trace's
walk, so the result and the counts are the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
from pydantic import BaseModel

from ctxcore.formats.redact import may_hold_secret
from ctxcore.formats.redact_memo import Redactor
from ctxcore.models import Decision, Message, Packet, ToolDef, Trace
from ctxcore.sharing import LIST_FIELDS, TEXT_FIELDS
from ctxcore.store.codec import JOINED, _body_and_parts, part_ids
from ctxcore.store.records import PackedTrace

#: The model of each field whose items may be parts.
ITEM_MODELS: dict[str, type[BaseModel]] = {
    "history": Message,
    "packets": Packet,
    "tools": ToolDef,
    "messages": Message,
    "decisions": Decision,
}
#: Bytes of parts' JSON whose objects are kept at most, then the memory starts over (the
#: traces read after that make their parts again: the same traces, fewer shared objects).
MAX_KEPT_BYTES = 256 * 1024 * 1024
_DECODE = msgspec.json.Decoder()
_STR = msgspec.json.Decoder(str)


def _fields(
    data: dict[str, Any], table: dict[str, tuple[str, ...]]
) -> Iterator[tuple[dict[str, Any], str, Any]]:
    """Each field of ``table`` the trace ``data`` holds: the object holding it, its name and
    its value."""
    for name, fields in table.items():
        obj = data.get(name)
        if isinstance(obj, dict):
            for field in fields:
                yield obj, field, obj.get(field)


class SharedTraces:
    """Makes ``Trace`` objects of stored traces, each part made once (see the module);
    with ``redactor``, redacted."""

    def __init__(self, max_bytes: int = MAX_KEPT_BYTES, redactor: Redactor | None = None) -> None:
        self.max_bytes = max_bytes
        self.redactor = redactor
        #: part id -> the object made of it (a model, or a text) and, when redacting, the
        #: secrets its redaction found
        self.made: dict[str, tuple[Any, dict[str, int]]] = {}
        self.kept_bytes = 0

    def trace(self, packed: PackedTrace) -> Trace:
        """The trace ``packed`` holds (as ``Trace.model_validate_json(packed.json())``)."""
        return self.read(packed)[0]

    def read(self, packed: PackedTrace) -> tuple[Trace, dict[str, int]]:
        """The trace ``packed`` holds and, with a redactor, redacted and the secrets found
        by type (as ``redact_trace`` returns them)."""
        blob = packed.data
        if blob[:1] != JOINED:  # stored whole
            whole = Trace.model_validate_json(packed.json())
            return self.redactor.trace(whole) if self.redactor is not None else (whole, {})
        ids = part_ids(blob)
        body, parts = _body_and_parts(blob)  # the body names the k-th part "k"
        data = _DECODE.decode(body)
        counts: dict[str, int] = {}
        for obj, field, items in _fields(data, LIST_FIELDS):
            if isinstance(items, list):
                model = ITEM_MODELS[field]
                obj[field] = [
                    self._item(ids[int(k)], parts[k], model, counts)
                    if type(k) is str
                    else self._walk(k, counts)
                    for k in items
                ]
        for obj, field, text in _fields(data, TEXT_FIELDS):
            if isinstance(text, list):
                text = "".join(self._part(ids[int(k)], parts[k], str)[0] for k in text)
            if isinstance(text, str):
                obj[field] = self._text(text, counts)
        if self.redactor is None:
            return Trace.model_validate(data), {}
        # as ``redact_trace``: its own record of redactions is not read, and gains the
        # findings; a trace with none is the trace as stored (every string as it was)
        data = self._rest(data, counts)
        if counts:
            total = dict(data.get("redactions") or {})
            for k, v in counts.items():
                total[k] = total.get(k, 0) + v
            data["redactions"] = dict(sorted(total.items()))
        return Trace.model_validate(data), counts

    def _part(self, pid: str, raw: bytes, kind: type[Any]) -> tuple[Any, dict[str, int]]:
        """The object made of a part, and (redacting) its redacted copy's findings; the
        copy itself is kept as the second made object (``_item``)."""
        got = self.made.get(pid)
        if got is not None and type(got[0]) is kind:
            return got
        made = _STR.decode(raw) if kind is str else kind.model_validate_json(raw)
        if self.kept_bytes + len(raw) > self.max_bytes:
            self.made, self.kept_bytes = {}, 0
        entry: tuple[Any, dict[str, int]] = (made, {})
        self.made[pid] = entry
        self.kept_bytes += len(raw)
        return entry

    def _item(self, pid: str, raw: bytes, model: type[BaseModel], counts: dict[str, int]) -> Any:
        """An item part as the trace holds it: redacted when redacting (once a part: an
        item no rule can match is itself)."""
        made, _ = self._part(pid, raw, model)
        if self.redactor is None:
            return made
        key = pid + "/redacted"
        got = self.made.get(key)
        if got is None or type(got[0]) is not model:
            if not may_hold_secret(raw):
                got = (made, {})
            else:
                found: dict[str, int] = {}
                walked = self._walk(_DECODE.decode(raw), found)
                got = (model.model_validate(walked) if found else made, found)
            self.made[key] = got
        for k, v in got[1].items():
            counts[k] = counts.get(k, 0) + v
        return got[0]

    def _text(self, text: str, counts: dict[str, int]) -> str:
        if self.redactor is None:
            return text
        red, found = self.redactor.text(text)
        for k, v in found.items():
            counts[k] = counts.get(k, 0) + v
        return red

    def _walk(self, node: Any, counts: dict[str, int]) -> Any:
        """Every string of ``node``, keys included, redacted (``formats.redact._walk``)."""
        if self.redactor is None:
            return node
        if isinstance(node, str):
            return self._text(node, counts)
        if isinstance(node, dict):
            return {self._walk(k, counts): self._walk(v, counts) for k, v in node.items()}
        if isinstance(node, list):
            return [self._walk(v, counts) for v in node]
        return node

    def _rest(self, data: dict[str, Any], counts: dict[str, int]) -> dict[str, Any]:
        """The trace's strings outside its parts and texts (already read) and its record
        of redactions, redacted."""
        out: dict[str, Any] = {}
        for key, value in data.items():
            if key == "redactions":
                out[key] = value
                continue
            fields = (*LIST_FIELDS.get(key, ()), *TEXT_FIELDS.get(key, ()))
            if fields and isinstance(value, dict):
                value = {
                    self._walk(k, counts): v if k in fields else self._walk(v, counts)
                    for k, v in value.items()
                }
            else:
                value = self._walk(value, counts)
            out[self._walk(key, counts)] = value
        return out
