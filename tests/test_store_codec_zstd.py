"""The store's zstd frames (docs/design.md, "Store"): ``pack_json`` packs with a compressor
kept a thread; every frame it makes is read by Arrow's codec as before, and a frame Arrow's
codec made (every store written so far) is read as before."""

from __future__ import annotations

import threading

import pyarrow as pa

from ctxcore.store.codec import _unpack, pack_json, pack_parts, unpack_json

TEXTS = [b"", b"{}", b'{"a":"' + b"x" * 5000 + b'"}', bytes(range(256)) * 40, "é😀".encode() * 300]


def test_frames_read_by_either_codec() -> None:
    for raw in TEXTS:
        frame = pack_json(raw)
        assert pa.decompress(frame, decompressed_size=len(raw), codec="zstd", asbytes=True) == raw
        assert unpack_json(frame, len(raw)) == raw
        old = pa.compress(raw, codec="zstd", asbytes=True)
        assert unpack_json(old, len(raw)) == raw
    packed, starts = pack_parts(TEXTS)
    assert _unpack(packed, sum(map(len, TEXTS))) == b"".join(TEXTS)
    assert starts == [sum(map(len, TEXTS[:k])) for k in range(len(TEXTS))]


def test_threads_pack_at_once() -> None:
    """A compressor is one thread's: threads packing at once each get their frames right."""
    out: dict[int, list[bytes]] = {}

    def pack(k: int) -> None:
        out[k] = [pack_json(raw + str(k).encode() * i) for i in range(200) for raw in TEXTS]

    threads = [threading.Thread(target=pack, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, frames in out.items():
        raws = [raw + str(k).encode() * i for i in range(200) for raw in TEXTS]
        assert [unpack_json(f, len(r)) for f, r in zip(frames, raws, strict=True)] == raws
