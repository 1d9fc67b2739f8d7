"""Import speed per format: each reader against the plain JSON decode of the same file.

For every sample of the formats asked (default: every folder of ``tests/fixtures/imports``
whose format has a session-log stream reader), three rates over the file's bytes:

- decode: ``json.loads`` of each line (a JSONL log) or of the whole file;
- reader: the format's reader up to its model calls (``sessions.iter_file``'s calls: parsing,
  normalising, the calls' contexts), without counting tokens; for a JSON format in
  ``MAPPINGS``, the decode and its mapping onto normalised messages;
- import: ``load_file``, the whole import (traces with every text counted).

Each is repeated until it has run half a second, and the best run is kept; times are the
process's CPU time, so other work on the machine does not skew the rates. The issue's bar
is the reader within 2x of the decode (ratio = decode MB/s / reader MB/s <= 2).

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
    registry,
    sessions,
)
from ctxcore.formats.accounting import Tally  # noqa: E402
from ctxcore.formats.load import load_file  # noqa: E402
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


def _reader(path: Path, fmt: str) -> None:
    if fmt in sessions.LOG_FORMATS:
        stream = sessions.iter_file(path, fmt)
        reader = stream._reader  # the format's reader, without the trace building
        for _ in reader.calls(read_lines(path)):
            pass
        return
    # another stream format (a text log, an archive): its calls, without the trace building
    read = registry.resolve(registry.get(fmt).stream or "")
    for _ in read(path, fmt, default_now=None, window=None, model=None)._calls():
        pass


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


#: format -> its mapping of a decoded document to normalised messages (the reader without
#: the trace building and token counting every format shares), for the JSON formats
def _gemini_cli(value: Any) -> None:
    gemini_cli.Reader("x", "x", datetime.now(UTC)).calls(value)


MAPPINGS: dict[str, Callable[[Any], None]] = {
    "langfuse": _langfuse,
    "litellm": _litellm,
    "openai-agents": _agents,
    "gemini-cli": _gemini_cli,
}


def _mapped(path: Path, fmt: str) -> None:
    MAPPINGS[fmt](json.loads(path.read_text(encoding="utf-8")))


def measure(path: Path, fmt: str) -> dict[str, float]:
    mb = path.stat().st_size / 1e6
    decode = _best(lambda: _decode(path, fmt))
    out = {"mb": mb, "decode": mb / decode}
    if registry.get(fmt).stream is not None:
        out["reader"] = mb / _best(lambda: _reader(path, fmt))
    elif fmt in MAPPINGS:
        out["reader"] = mb / _best(lambda: _mapped(path, fmt))
    try:
        out["import"] = mb / _best(lambda: load_file(path), budget=1.0)
    except ImportFormatError:  # refused: the file holds no call to import
        out["import"] = float("nan")
    return out


def _samples(formats: list[str], files: list[Path]) -> list[tuple[Path, str]]:
    if files:
        return [(f, sessions.sniff(f) or "auto") for f in files]
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
    for path, fmt in _samples(args.formats.split(","), args.files):
        m = measure(path, fmt)
        reader = m.get("reader")
        ratio = m["decode"] / reader if reader else float("nan")
        rows.append(
            f"| {fmt} | {path.name} | {m['mb']:.2f} | {m['decode']:.0f} | "
            f"{reader or float('nan'):.0f} | {m['import']:.1f} | {ratio:.2f} |"
        )
    print("| format | file | MB | decode MB/s | reader MB/s | import MB/s | decode/reader |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
