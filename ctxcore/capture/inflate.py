"""A ``Content-Encoding`` undone with a bound on what it unpacks to (docs/design.md, "Live
capture").

A compressed body is small on the wire and may be huge unpacked (a 1 MB gzip of zeros is
1 GB). Everything live capture unpacks that it did not make itself (an OTLP export, a reply
the proxy copied) goes through ``Inflater``: a piece at a time, each step asked for at most
one byte more than the limit still allows, so the moment the output passes the limit is
noticed without ever holding more than the limit. gzip (one member or several), zlib-wrapped
deflate and raw deflate are undone; other codings (br, zstd) need packages ctxscope does not
depend on and are never unpacked at all.
"""

from __future__ import annotations

import zlib

from ctxcore.errors import CtxscopeError

#: gzip or zlib, told apart by their header.
_AUTO = zlib.MAX_WBITS | 32
_RAW = -zlib.MAX_WBITS
_GZIP_MAGIC = b"\x1f\x8b"
#: The codings ``Inflater`` undoes.
CODINGS = frozenset({"gzip", "x-gzip", "deflate"})


class TooBig(CtxscopeError):
    """The body unpacks past the limit (it was stopped there)."""

    def __init__(self, coding: str, limit: int) -> None:
        super().__init__(f"the {coding} body unpacks past {limit:,} bytes (the limit)")
        self.limit = limit


class Broken(CtxscopeError):
    """The body is not valid data of its coding."""


class Inflater:
    """One coding undone as pieces arrive; ``feed`` raises ``TooBig`` as soon as the output
    passes ``limit`` bytes, and ``Broken`` for data that is not that coding."""

    def __init__(self, coding: str, limit: int) -> None:
        if coding not in CODINGS:
            raise ValueError(f"cannot unpack {coding!r}")
        self.coding = coding
        self.limit = limit
        self.size = 0
        self._d = zlib.decompressobj(_AUTO)
        self._fed = False
        self._raw = False

    @property
    def complete(self) -> bool:
        """Whether the data so far ends where its coding says it ends."""
        return self._d.eof

    def feed(self, data: bytes) -> bytes:
        out: list[bytes] = []
        first = not self._fed
        self._fed = True
        while data:
            if self._d.eof:
                # another gzip member follows (gzip -c a b); anything else after the end
                # is padding some servers leave, and ignored as zlib and gzip readers do
                if self.coding == "deflate" or not data.startswith(_GZIP_MAGIC):
                    break
                self._d = zlib.decompressobj(_AUTO)
            try:
                piece = self._d.decompress(data, self.limit - self.size + 1)
            except zlib.error as exc:
                if first and not self._raw and self.size == 0:
                    # raw deflate without the zlib header, as some servers send "deflate"
                    self._raw = True
                    self._d = zlib.decompressobj(_RAW)
                    continue
                raise Broken(f"the {self.coding} body does not unpack ({exc})") from exc
            self.size += len(piece)
            if self.size > self.limit:
                raise TooBig(self.coding, self.limit)
            out.append(piece)
            data = self._d.unused_data if self._d.eof else self._d.unconsumed_tail
        return b"".join(out)


def inflate(raw: bytes, coding: str, limit: int) -> bytes:
    """``raw`` unpacked whole (see ``Inflater``); a body cut short gives what it holds."""
    return Inflater(coding, limit).feed(raw)


__all__ = ["CODINGS", "Broken", "Inflater", "TooBig", "inflate"]
