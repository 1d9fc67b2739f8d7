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
"""

from __future__ import annotations

from typing import Any

import msgspec
from pydantic import BaseModel

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


class SharedTraces:
    """Makes ``Trace`` objects of stored traces, each part made once (see the module)."""

    def __init__(self, max_bytes: int = MAX_KEPT_BYTES) -> None:
        self.max_bytes = max_bytes
        #: part id -> the object made of it (a model, or a text)
        self.made: dict[str, Any] = {}
        self.kept_bytes = 0

    def trace(self, packed: PackedTrace) -> Trace:
        """The trace ``packed`` holds (as ``Trace.model_validate_json(packed.json())``)."""
        blob = packed.data
        if blob[:1] != JOINED:  # stored whole
            return Trace.model_validate_json(packed.json())
        ids = part_ids(blob)
        body, parts = _body_and_parts(blob)  # the body names the k-th part "k"
        data = _DECODE.decode(body)
        for name, fields in LIST_FIELDS.items():
            obj = data.get(name)
            if not isinstance(obj, dict):
                continue
            for field in fields:
                items = obj.get(field)
                if isinstance(items, list):
                    model = ITEM_MODELS[field]
                    obj[field] = [
                        self._part(ids[int(k)], parts[k], model) if type(k) is str else k
                        for k in items
                    ]
        for name, fields in TEXT_FIELDS.items():
            obj = data.get(name)
            if not isinstance(obj, dict):
                continue
            for field in fields:
                pieces = obj.get(field)
                if isinstance(pieces, list):
                    obj[field] = "".join(self._part(ids[int(k)], parts[k], str) for k in pieces)
        return Trace.model_validate(data)

    def _part(self, pid: str, raw: bytes, kind: type[Any]) -> Any:
        got = self.made.get(pid)
        if got is not None and type(got) is kind:
            return got
        made = _STR.decode(raw) if kind is str else kind.model_validate_json(raw)
        if self.kept_bytes + len(raw) > self.max_bytes:
            self.made, self.kept_bytes = {}, 0
        self.made[pid] = made
        self.kept_bytes += len(raw)
        return made
