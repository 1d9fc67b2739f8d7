"""``ctxscope import -o``'s fast path (issue 34; docs/design.md, "Shared traces" and
"Capture, import, export, redaction"): what it makes incrementally is what the whole
computation makes, on every session log of the fixtures.

- a call's prompt rendered from its session's previous one is ``render_prompt`` of its messages;
- the tally's counts made from the previous trace of a session are ``imported_counts``;
- a file written as bytes (``write_jsonl``) reads back as each trace's ``to_json``;
- the tokenizer's load starts on a thread and is what ``get_backend`` then returns.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ctxcore.cli.exchange import _Reached, big_buffers_mapped
from ctxcore.formats.accounting import imported_counts
from ctxcore.formats.derive import tools_text
from ctxcore.formats.load import iter_traces, jsonl_lines, write_jsonl
from ctxcore.formats.sessions.calls import CallTraces, _Item
from ctxcore.models import Message, Packet, Trace
from ctxcore.pipeline.recorded import AFTER_QUERY, render_prompt
from ctxcore.sharing import PartTable

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "imports"
LOGS = sorted(
    p
    for kind in ("claude-code", "codex", "pi", "gemini-cli", "openhands")
    for p in (FIXTURES / kind).glob("*")
    if p.is_file()
)


def test_the_fixtures_hold_session_logs() -> None:
    assert len(LOGS) >= 12
    assert {p.parent.name for p in LOGS} >= {"claude-code", "codex", "pi"}


@pytest.mark.parametrize("src", LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_prompt_is_its_messages_rendered(src: Path) -> None:
    """``CallTraces._prompt`` renders a call from the previous call of its session; the
    prompt must be what its messages render to, whatever path made it."""
    traces = list(iter_traces(src))
    assert traces
    for t in traces:
        assert t.result is not None and t.result.messages is not None
        tools = tools_text(t.input.tools) if t.input.tools else ""
        assert t.result.prompt == render_prompt(t.result.messages, tools), t.trace_id


@pytest.mark.parametrize("src", LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_tallys_counts_are_imported_counts(src: Path) -> None:
    reached = _Reached()
    traces = list(iter_traces(src))
    for t in traces:
        assert reached.counts(t) == imported_counts(t), t.trace_id


def test_most_logs_take_the_incremental_paths() -> None:
    """A session's later call starts with its earlier one (the paths the two tests above
    check are taken), in most fixture logs."""
    several = [p for p in LOGS if len({t.session_id for t in iter_traces(p)}) < _calls(p)]
    assert len(several) >= len(LOGS) // 2


def _timeless(data: bytes) -> bytes:
    return re.sub(rb'"timings":\{[^}]*\}', b'"timings":{}', data)


def _calls(path: Path) -> int:
    return sum(1 for _ in iter_traces(path))


@pytest.mark.parametrize("shared", [True, False], ids=["shared", "whole"])
def test_a_file_written_as_bytes_reads_back_as_each_traces_json(
    shared: bool, tmp_path: Path
) -> None:
    src = FIXTURES / "claude-code" / "ccviewer-task-sidechain-session.jsonl"
    traces = list(iter_traces(src))
    out = tmp_path / "out.jsonl"
    write_jsonl(iter(traces), out, shared=shared)
    data = out.read_bytes()
    # the text lines (``ctxscope export --shared``, ``-o -``) of the same import are the
    # same lines, but for the time each build took (an import says how it made each
    # prompt, ``sharing.grew``, to the writer that takes it: a second import, here)
    again = "".join(jsonl_lines(list(iter_traces(src)), shared=shared)).encode()
    assert _timeless(data) == _timeless(again)
    table = PartTable()
    lines = data.splitlines()
    assert len(lines) == len(traces)
    for n, (raw, t) in enumerate(zip(lines, traces, strict=True), 1):
        got = json.loads(table.expand(raw, f"line {n}"))
        want = json.loads(t.to_json())
        got["result"]["timings"] = want["result"]["timings"] = {}
        assert got == want


def test_the_tokenizer_loads_on_a_thread_and_is_the_backend(tmp_path: Path) -> None:
    """In a fresh interpreter: ``preload`` returns while its thread is still loading
    (``loading``), the thread builds the backend, and ``get_backend`` then returns that one
    (not a second load)."""
    code = """
import threading
from ctxcore import tokens
tokens.preload("cl100k_base")
tokens.preload("cl100k_base")  # a second call starts no second load
loads = [t for t in threading.enumerate() if t.name == "load-cl100k_base"]
assert len(loads) == 1, loads
assert tokens.loading("cl100k_base") and not tokens.loading("o200k_base")
loads[0].join()
assert not tokens.loading("cl100k_base")  # a session log's reader counts from now on
assert "cl100k_base" in tokens._backends
backend = tokens._backends["cl100k_base"]
assert tokens.get_backend("cl100k_base") is backend
assert tokens.get_counter("cl100k_base").count("hello world") == 2
tokens.preload("no-such-encoding")  # not one ctxscope ships: nothing to load
assert not [t for t in threading.enumerate() if t.name.startswith("load-no-such")]
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_output_allocator_settings_take() -> None:
    assert big_buffers_mapped(4 * 1024 * 1024, 32 * 1024 * 1024)
    assert big_buffers_mapped()  # and back to the import's default


def _items(*roles: str) -> list[_Item]:
    """Items of a session's context whose messages have these roles (what ``_prompt`` reads)."""
    return [
        _Item(entry=None, kind="history", item_id=f"m{k}", packet=None, flat=m)  # type: ignore[arg-type]
        for k, role in enumerate(roles)
        for m in [Message(role=role, content=f"{role} text {k}", id=f"m{k}")]
    ]


@pytest.mark.parametrize(
    ("first", "then"),
    [
        (("user", "assistant"), ("tool", "user")),
        (("user", "system"), ("developer", "user")),  # a system run across the two calls
        (("system",), ("system", "user")),
        (("user", "developer"), ("assistant",)),
        (("user",), ()),
    ],
)
def test_a_prompt_made_from_the_previous_calls_is_the_whole_render(
    first: tuple[str, ...], then: tuple[str, ...]
) -> None:
    """The session's next call renders as a render of all its items, where a run of
    system/developer messages spans the two calls too (then it is one block)."""
    items = _items(*first, *then)
    old, new = items[: len(first)], items
    made = CallTraces(fmt="claude-code", builder="import/claude-code")
    assert made._prompt("s", old, "") == _rendered(old, "")
    assert made._prompt("s", new, "") == _rendered(new, "")
    # other tools: the whole render again
    assert made._prompt("s", new, '[{"name":"t"}]') == _rendered(new, '[{"name":"t"}]')


def _rendered(items: list[_Item], tools: str) -> str:
    """The items' prompt as ``derive.render_prompt`` renders their messages."""
    return render_prompt([it.flat for it in items], tools)


def test_a_long_import_o_imports_no_tokenizer_numpy_nor_the_presets_stages(
    tmp_path: Path,
) -> None:
    """``import -o`` of a long log counts in the counting process (``ctxcore.counting``) and
    resolves each call's config with ``pipeline.ctxscope_config``: its own process imports
    neither tokenizer, nor numpy, nor the ``ctxscope`` preset's stages (~0.6 s of CPU
    together, docs/design.md "Capture, import, export, redaction")."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_import import build

    log = tmp_path / "long.jsonl"
    build(log, 400, 3.0, 150_000)
    code = (
        "import sys\n"
        "from ctxcore.cli import main\n"
        "rc = main(['import', sys.argv[1], '-o', sys.argv[2]])\n"
        "heavy = ('numpy', 'tiktoken', 'toktok', 'ctxcore.pipeline.ctxscope',\n"
        "         'ctxcore.pipeline.select', 'ctxcore.pipeline.gather')\n"
        "print(rc, sorted(m for m in sys.modules if m in heavy))\n"
        "print('ctxcore.pipeline.ctxscope_config' in sys.modules)\n"
    )
    out = tmp_path / "out.jsonl"
    got = subprocess.run(
        [sys.executable, "-c", code, str(log), str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    rc_line, config_line = got.stdout.strip().splitlines()[-2:]
    assert rc_line == "0 []", got.stderr[-2000:]
    assert config_line == "True"
    assert sum(1 for _ in iter_traces(out)) > 10


def _marked(t: Trace) -> list[Packet | Message]:
    """The parts of a trace's input marked as the first after the query."""
    parts: list[Packet | Message] = [*t.input.packets, *t.input.history]
    return [p for p in parts if p.metadata.get(AFTER_QUERY)]


def test_the_part_after_the_query_is_one_object_for_the_calls_of_a_turn() -> None:
    """The calls of one turn share their query, so the part after it is marked the same in
    each: it is made once (``_Item.after_query``), and the shared writer knows it by
    identity instead of serializing and hashing it again each call."""
    shared = 0
    for src in LOGS:
        last: dict[str, Packet | Message] = {}
        for t in iter_traces(src):
            for part in _marked(t):
                key = f"{t.session_id}/{type(part).__name__}"
                before = last.get(key)
                if before is not None and before.model_dump() == part.model_dump():
                    assert part is before, (src.name, t.trace_id, key)
                    shared += 1
                last[key] = part
    assert shared >= 20
