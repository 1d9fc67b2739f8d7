"""Import speed per format: each reader against the plain JSON decode of the same file.

For every sample of the formats asked (default: every folder of ``tests/fixtures/imports``
whose format has a reader measured here), three rates over the file's bytes:

- decode: ``json.loads`` of each line (a JSONL log) or of the whole file;
- reader: the format's reader up to its model calls (``sessions.iter_file``'s calls: parsing,
  normalising, the calls' contexts), without counting tokens; for a JSON format in
  ``MAPPINGS``, the decode and its mapping onto normalised messages;
- import: ``load_file``, the whole import (traces with every text counted).

Each is repeated until it has run half a second, and the best run is kept; times are the
process's CPU time, so other work on the machine does not skew the rates. The issue's bar
is the reader within 2x of the decode (ratio = decode MB/s / reader MB/s <= 2).

The last column is the same ratio without the trace contract's share of the reader: the
entries of the calls' segments made again (``Segment.entries``: each message a validated
``Message``, each tool result a ``Packet``, their metadata checked as free JSON), timed on
their own and taken off. That share is the same for every format, about 10 µs a message on
a quiet machine, and is what holds a reader of short messages above 2x: a JSON decode costs
about 2.5 µs a KB, so at 4 KB a message the contract alone is as long as the decode.

    .venv/bin/python bench/bench_import_formats.py [--formats pi,codex] [FILE ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import zipfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ctxcore.errors import ImportFormatError  # noqa: E402
from ctxcore.formats import (  # noqa: E402
    gemini_cli,
    langfuse,
    litellm,
    openai_agents,
    opencode,
    registry,
    sessions,
)
from ctxcore.formats.accounting import Tally  # noqa: E402
from ctxcore.formats.load import load_file  # noqa: E402
from ctxcore.formats.sessions.calls import Segment  # noqa: E402
from ctxcore.formats.sessions.lines import read_lines  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "imports"
#: fixture folder -> format, for the folders whose name is not the format's
FOLDER_FORMAT = {
    "claude-code": "claude-code",
    "codex": "codex",
    "pi": "pi",
    "langfuse": "langfuse",
    "litellm": "litellm",
    "openai-agents": "openai-agents",
    "aider-llm-history": "aider-llm-history",
    "aider-chat": "aider-chat",
    "gemini-cli": "gemini-cli",
    "inspect": "inspect",
    "opencode": "opencode",
}


def _best(run: Callable[[], object], budget: float = 0.5) -> float:
    """The fastest of repeated runs (CPU seconds of the process, all its threads: a machine
    shared with other work slows the wall clock, not this), repeated until ``budget``."""
    best = float("inf")
    spent = 0.0
    while spent < budget or best == float("inf"):
        t0 = time.process_time()
        run()
        dt = time.process_time() - t0
        best = min(best, dt)
        spent += dt
    return best


def _decode(path: Path, fmt: str) -> None:
    if zipfile.is_zipfile(path):  # an Inspect .eval: each member unzipped and decoded
        with zipfile.ZipFile(path) as zf:
            for name in zf.namelist():
                if name.endswith(".json"):
                    json.loads(zf.read(name))
        return
    text = path.read_text(encoding="utf-8")
    if registry.get(fmt).sniff is not None and not path.name.endswith(".json"):
        text.splitlines()  # a text log has no JSON: its baseline is reading its lines
    elif path.suffix == ".jsonl":
        for line in text.splitlines():
            if line.strip():
                json.loads(line)
    else:
        json.loads(text)


def _reader(path: Path, fmt: str) -> list[Any]:
    """The format's calls (a session log's, a text log's, an archive's), without the trace
    building."""
    if fmt in sessions.LOG_FORMATS:
        stream = sessions.iter_file(path, fmt)
        return list(stream._reader.calls(read_lines(path)))
    read = registry.resolve(registry.get(fmt).stream or "")
    return list(read(path, fmt, default_now=None, window=None, model=None)._calls())


def _langfuse(value: Any) -> None:
    for o in value["observations"]:
        if o["type"] == "GENERATION":
            raw = o.get("input")
            langfuse.normalize_input(json.loads(raw) if isinstance(raw, str) else raw, Tally("x"))
            langfuse.output_text(o.get("output"))


def _litellm(value: Any) -> None:
    litellm.PAYLOADS.normalize(litellm.request_of(value), Tally("x"))


def _agents(value: Any) -> None:
    openai_agents.refusal(value["data"])


def _gemini_cli(value: Any) -> list[Any]:
    return gemini_cli.Reader("x", "x", datetime.now(UTC)).calls(value)


def _opencode(value: Any) -> list[Any]:
    return opencode.Reader("x", "x", datetime.now(UTC)).calls(opencode.messages_of(value, "x"))


#: format -> its mapping of a decoded document to normalised messages (the reader without
#: the trace building and token counting every format shares), for the JSON formats; a
#: session format's mapping returns its calls
MAPPINGS: dict[str, Callable[[Any], object]] = {
    "langfuse": _langfuse,
    "litellm": _litellm,
    "openai-agents": _agents,
    "gemini-cli": _gemini_cli,
    "opencode": _opencode,
}


def _mapped(path: Path, fmt: str) -> object:
    return MAPPINGS[fmt](json.loads(path.read_text(encoding="utf-8")))


def _segments(calls: object) -> list[Segment]:
    """The distinct segments of a reader's calls (a call's context shares those of the
    calls before it)."""
    found: dict[int, Segment] = {}
    for call in calls if isinstance(calls, list) else []:
        for seg in call.context:
            found.setdefault(id(seg), seg)
    return list(found.values())


def _contract(segs: list[Segment]) -> None:
    """The trace contract's share of a reader: its segments' entries made again (each
    message a validated ``Message``, each tool result a ``Packet``)."""
    for seg in segs:
        seg._entries = None
        seg.entries()


def measure(path: Path, fmt: str) -> dict[str, float]:
    mb = path.stat().st_size / 1e6
    decode = _best(lambda: _decode(path, fmt))
    out = {"mb": mb, "decode": mb / decode}
    run: Callable[[], object] | None = None
    if registry.get(fmt).stream is not None:
        run = lambda: _reader(path, fmt)  # noqa: E731
    elif fmt in MAPPINGS:
        run = lambda: _mapped(path, fmt)  # noqa: E731
    if run is not None:
        reader = _best(run)
        out["reader"] = mb / reader
        segs = _segments(run())
        if segs:
            out["own"] = mb / (reader - _best(lambda: _contract(segs)))
    try:
        out["import"] = mb / _best(lambda: load_file(path), budget=1.0)
    except ImportFormatError:  # refused: the file holds no call to import
        out["import"] = float("nan")
    return out


def _format_of(path: Path) -> str:
    """A file's format as import detects it: a session log's, a file that is not JSON by its
    sniffer, else the JSON value's."""
    found = sessions.sniff(path) or registry.sniff_file(path.name, path.read_bytes()[:4096])
    if isinstance(found, str):
        return found
    if found is not None:
        return found.name
    return registry.detect(json.loads(path.read_text(encoding="utf-8"))).name


def _samples(formats: list[str], files: list[Path]) -> list[tuple[Path, str]]:
    if files:
        return [(f, _format_of(f)) for f in files]
    out = []
    for folder, fmt in FOLDER_FORMAT.items():
        if fmt in formats:
            # a session log's JSONL lines, or a format's JSON documents
            stream = registry.get(fmt).sniff is not None  # its files are not all JSON
            out.extend(
                (p, fmt) for p in sorted((FIXTURES / folder).glob("*" if stream else "*.json*"))
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--formats", default=",".join(FOLDER_FORMAT.values()))
    ap.add_argument("files", nargs="*", type=Path)
    args = ap.parse_args()
    rows = []
    nan = float("nan")
    for path, fmt in _samples(args.formats.split(","), args.files):
        m = measure(path, fmt)
        reader, own = m.get("reader"), m.get("own")
        rows.append(
            f"| {fmt} | {path.name} | {m['mb']:.2f} | {m['decode']:.0f} | {reader or nan:.0f} | "
            f"{m['import']:.1f} | {m['decode'] / reader if reader else nan:.2f} | "
            f"{m['decode'] / own if own else nan:.2f} |"
        )
    print(
        "| format | file | MB | decode MB/s | reader MB/s | import MB/s | decode/reader "
        "| without the contract |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
