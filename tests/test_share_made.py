"""Made parts in shared traces (docs/design.md, "Shared traces" → made parts): an item's long
text is a string part of its own, and the history item, packet and message that hold it are
made parts naming it, as is the prompt's piece; so each text is written once in a file,
however many items and prompts hold it. Every reader sees the same whole traces; a bad made
part is its line's error, naming the field, and the other lines are read."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxcore.errors import InputError
from ctxcore.formats.load import iter_traces
from ctxcore.models import Trace
from ctxcore.sharing import SHARE_SCHEMA, SHARE_SCHEMAS, PartTable, ShareWriter

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Trace], list[bytes]]:
    """A compacted Claude Code log (``bench_import``'s generator over the corpus), its traces
    and their shared lines, all of one import (the importer says how it made each prompt)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_import import build

    log = tmp_path_factory.mktemp("made") / "log.jsonl"
    build(log, 600, 1.5, 40_000)
    writer = ShareWriter()
    traces, lines = [], []
    for t in iter_traces(log):  # each written as it comes, as ``import -o`` does
        traces.append(t)
        lines.append(writer.line_bytes(t))
    return log, traces, lines


def _env(line: bytes) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(line)
    return out


def test_each_long_text_is_written_once_and_reads_back_byte_for_byte(
    session: tuple[Path, list[Trace], list[bytes]],
) -> None:
    _, traces, lines = session
    table = PartTable()
    assert [table.expand(ln.rstrip(b"\n")) for ln in lines] == [t.to_json_bytes() for t in traces]
    data = b"".join(lines)
    replies = {t.outcome.output for t in traces if t.outcome is not None}
    texts = {
        json.dumps(m.content, ensure_ascii=False)[1:-1].encode()
        for t in traces
        for m in (t.result.messages or [] if t.result else [])
        if len(m.content) >= 2000 and m.content not in replies
    }
    assert len(texts) > 20
    # each long text once (a history item, a packet, a message and a prompt hold it; a
    # call's reply, its outcome, is written with the call)
    assert all(data.count(text) == 1 for text in texts)
    whole = sum(len(t.to_json_bytes()) for t in traces)
    assert len(data) < whole / 10


def test_messages_and_prompts_name_the_items_text_part(
    session: tuple[Path, list[Trace], list[bytes]],
) -> None:
    """A message holding a packet's text is a made part naming the same string part as
    the packet's, and the prompt's pieces name it too."""
    _, _, lines = session
    parts: dict[str, Any] = {}
    made: dict[str, Any] = {}
    named_by_prompts: set[str] = set()
    for ln in lines:
        env = _env(ln)
        parts.update(env["parts"])
        made.update(env.get("made", {}))
        prompt = env["trace"]["result"]["prompt"]
        if isinstance(prompt, list):
            named_by_prompts.update(p for p in prompt if isinstance(p, str))
            for p in prompt:  # a run of the prompt's list part
                if isinstance(p, list):
                    named_by_prompts.update(x for x in parts[p[0]] if isinstance(x, str))
    by_kind: dict[str, set[str]] = {"message": set(), "packet": set()}
    for obj, key in made.values():
        assert key == "content" and isinstance(parts[obj["content"]], str)
        by_kind["packet" if "kind" in obj else "message"].add(obj["content"])
    shared = by_kind["packet"] & by_kind["message"]
    assert len(shared) > 20
    assert len(shared & named_by_prompts) > 20


def _line(parts: dict[str, Any], made: dict[str, Any], history: list[Any]) -> bytes:
    env = {
        "share": SHARE_SCHEMA,
        "parts": parts,
        "made": made,
        "trace": {"input": {"history": history}},
    }
    return json.dumps(env).encode()


TEXT = {"t": "a long text", "n": 3}
GOOD = [{"role": "user", "content": "t", "id": None}, "content"]


@pytest.mark.parametrize(
    ("made", "why"),
    [
        (
            {"m": [{"role": "user"}, "content"]},
            "field 'made.m': a made part is [an object, the key",
        ),
        ({"m": [1, "content"]}, "field 'made.m': a made part is"),
        ({"m": [{"content": "t"}]}, "field 'made.m': a made part is"),
        ({"m": [{"content": 3}, "content"]}, "field 'made.m': a made part is"),
        (
            {"m": [{"content": "x"}, "content"]},
            "field 'made.m[0].content': the part 'x' is not defined",
        ),
        (
            {"m": [{"content": "n"}, "content"]},
            "field 'made.m[0].content': the part 'n' is not a string",
        ),
    ],
)
def test_a_bad_made_part_is_that_lines_error_and_the_next_line_reads(
    made: dict[str, Any], why: str
) -> None:
    table = PartTable()
    table.expand(_line(TEXT, {}, []), "f:1")
    with pytest.raises(InputError) as err:
        table.expand(_line({}, made, ["m"]), "f:2")
    assert str(err.value).startswith(f"f:2: {why}"), str(err.value)
    assert "m" not in table.parts  # the line defines nothing
    got = json.loads(table.expand(_line({}, {"g": GOOD}, ["g"]), "f:3"))
    assert got == {"input": {"history": [{"role": "user", "content": "a long text", "id": None}]}}


def test_a_made_part_names_a_part_of_its_own_line_and_keeps_the_objects_order() -> None:
    made = {"g": [{"z": 1, "content": "t", "a": [1, {"b": 2}]}, "content"]}
    raw = PartTable().expand(_line(TEXT, made, ["g"]))
    assert raw == (b'{"input":{"history":[{"z":1,"content":"a long text","a":[1, {"b": 2}]}]}}')


def test_a_made_part_defined_again_otherwise_is_refused_and_the_same_again_is_not() -> None:
    table = PartTable()
    table.expand(_line({**TEXT, "u": "other"}, {"g": GOOD}, ["g"]), "f:1")
    table.expand(_line({}, {"g": GOOD}, ["g"]), "f:2")  # the same bytes again
    other = [{"role": "user", "content": "u", "id": None}, "content"]
    with pytest.raises(InputError, match=r"^f:3: field 'made.g': the part 'g' was defined"):
        table.expand(_line({}, {"g": other}, ["g"]), "f:3")


def test_made_parts_are_no_part_of_the_first_form() -> None:
    env = json.loads(_line(TEXT, {"g": GOOD}, ["g"]))
    env["share"] = SHARE_SCHEMAS[0]
    with pytest.raises(InputError, match=r"^f:1: field 'made': unknown in 'ctxscope.share/1'"):
        PartTable().expand(json.dumps(env).encode(), "f:1")


def test_made_parts_hold_no_copy_of_their_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """A made part is held as the JSON around its text, never joined with it: a line of a
    few hundred kilobytes naming one 1 MB text in 10,000 made parts takes about its own
    size in the table, not 10 GB, and a trace naming them all is refused by the trace's
    size limit before its pieces are joined."""
    from ctxcore import sharing

    table = PartTable()
    table.expand(_line({"big": "x" * 1_000_000}, {}, []), "f:1")
    made = {f"m{k}": [{"role": "user", "content": "big"}, "content"] for k in range(10_000)}
    before = table.size
    table.expand(_line({}, made, []), "f:2")
    assert table.size - before < 2_000_000
    monkeypatch.setattr(sharing, "MAX_LINE_BYTES", 50_000_000)
    with pytest.raises(InputError, match="f:3: field 'input.history'"):
        table.expand(_line({}, {}, [f"m{k}" for k in range(100)]), "f:3")
    got = json.loads(table.expand(_line({}, {}, ["m1", "m2"]), "f:4"))
    assert got["input"]["history"] == [{"role": "user", "content": "x" * 1_000_000}] * 2
