"""aider's two text logs imported as one trace per model call (``formats/aider.py``).

The samples in ``tests/fixtures/imports/aider-*`` are real aider logs (``SOURCES.md``): the
LLM history of jkassemi/friendly_names and aider's own chat history; ``EXPECTED.json`` holds
their hand counts. Both go through ``ctxscope import`` (the CLI) or ``load_file``, the path a
user takes.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from test_import_sessions import EXPECTED, FIXTURES, LOSS_ONLY, _check_sums

from ctxcore.cli import main
from ctxcore.diagnostics import diagnose
from ctxcore.errors import ImportFormatError
from ctxcore.formats import aider
from ctxcore.formats.accounting import imported_counts
from ctxcore.formats.load import load_file
from ctxcore.models import Trace

LLM = sorted(n for n in EXPECTED if n.startswith("aider-llm-history/"))
CHAT = sorted(n for n in EXPECTED if n.startswith("aider-chat/"))


def _usage_sum(traces: list[Trace], key: str) -> int:
    return sum(int(t.outcome.usage.get(key, 0)) for t in traces if t.outcome is not None)


def _common(t: Trace, fmt: str) -> None:
    """What every aider trace holds: counts equal on both sides, nothing kept as text, the
    real tokenizer's sums, no ``import_loss`` finding."""
    meta = t.metadata["import"]
    assert meta["format"] == fmt
    assert meta["source"] == imported_counts(t)
    assert "kept_as_text" not in meta and "skipped" not in meta
    assert t.builder.name == f"import/{fmt}"
    _check_sums(t)
    assert not diagnose(t, options=LOSS_ONLY)


@pytest.mark.parametrize("name", LLM)
def test_llm_history_one_trace_per_block_the_prompt_whole(name: str) -> None:
    exp = EXPECTED[name]
    path = FIXTURES / name
    traces = load_file(path)
    assert len(traces) == exp["model_calls"]
    assert [t.turn for t in traces] == list(range(len(traces)))
    assert len({t.session_id for t in traces}) == 1
    for t, n in zip(traces, exp["messages_per_call"], strict=True):
        _common(t, "aider-llm-history")
        assert t.metadata["import"]["source"]["messages"] == n
        assert t.metadata["import"]["source"]["system_parts"] == 1
        assert t.input.system_instructions.startswith("Act as an expert")
        assert t.outcome is not None and t.outcome.output  # the LLM RESPONSE block
        assert t.outcome.usage == {} and "model" not in t.metadata  # absent stays absent
        assert set(t.metadata["import"]["reconstructed"]) == {"model", "usage"}
    sources = [t.metadata["import"]["source"] for t in traces]
    assert sum(s["messages"] for s in sources) == exp["messages"]["total"]
    assert sum(s["system_parts"] for s in sources) == exp["system_parts"]
    # each call's time is its TO LLM line's; its reply's is kept beside it
    text = path.read_text(encoding="utf-8").splitlines()
    starts = [ln for ln in text if ln.startswith("TO LLM ")]
    assert [t.created_at.strftime("TO LLM %Y-%m-%dT%H:%M:%S") for t in traces] == starts
    assert all(t.metadata["session_log"]["replied_at"] for t in traces)


@pytest.mark.parametrize("name", CHAT)
def test_chat_history_one_trace_per_reply_a_session_per_start(name: str) -> None:
    exp = EXPECTED[name]
    traces = load_file(FIXTURES / name)
    assert len(traces) == exp["model_calls"]
    sessions: dict[str, list[int]] = {}
    for t in traces:
        sessions.setdefault(t.session_id, []).append(t.turn)
        _common(t, "aider-chat")
        assert t.metadata["model"] == exp["model"]
        assert set(t.metadata["import"]["reconstructed"]) >= {"system prompt"}
        assert t.input.query  # what the user typed last
        assert not t.input.query.startswith("/")  # a command is never sent
    assert len(sessions) == exp["sessions"]
    assert all(turns == list(range(len(turns))) for turns in sessions.values())
    # every session's last call saw all its messages but its own reply
    last = [t for t in traces if t.turn == len(sessions[t.session_id]) - 1]
    seen = sum(t.metadata["import"]["source"]["messages"] for t in last)
    assert seen + len(last) == exp["messages"]["total"]
    assert _usage_sum(traces, "input_tokens") == exp["usage"]["input_tokens"]
    assert _usage_sum(traces, "output_tokens") == exp["usage"]["output_tokens"]
    assert (
        len([t for t in traces if "tokens_line" in t.metadata["session_log"]])
        == exp["tokens_lines"]
    )


def test_chat_history_through_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "aider-chat/aider-2024-08-06-commands-and-edits.subset.chat.history.md"
    out = tmp_path / "t.jsonl"
    assert main(["import", str(FIXTURES / name), "-o", str(out)]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == EXPECTED[name]["model_calls"]
    said = capsys.readouterr()
    assert "(aider-chat)" in said.out + said.err
    assert "malformed JSON" not in said.out + said.err


def test_a_broken_line_is_one_error_naming_it_and_the_rest_imports(tmp_path: Path) -> None:
    name = "aider-llm-history/friendly-names-ask.subset.aider.llm.history"
    lines = (FIXTURES / name).read_bytes().split(b"\n")
    lines[5] = b"SYSTEM \xff broken"  # invalid UTF-8 inside the first block's system prompt
    lines[30] = b"this line has no role"
    p = tmp_path / ".aider.llm.history"
    p.write_bytes(b"\n".join(lines))
    errors: list[str] = []
    traces = load_file(p)
    skipped = [e for t in traces for e in t.metadata["import"].get("skipped", [])]
    errors.extend(skipped)
    assert len(traces) == EXPECTED[name]["model_calls"]
    assert len(errors) == 2
    assert errors[0].startswith(f"{p}:6: invalid UTF-8")
    assert errors[1].startswith(f"{p}:31: not a line of aider's LLM history")


def test_an_unknown_text_file_is_refused_without_claiming_json(tmp_path: Path) -> None:
    p = tmp_path / "notes.md"
    p.write_text("# my notes\n\nnothing an agent wrote\n")
    with pytest.raises(ImportFormatError) as exc:
        load_file(p)
    said = str(exc.value)
    assert "JSON at line" not in said and "malformed" not in said
    assert said.startswith(f"{p}: matches no format ctxscope reads: a text file that is not JSON")
    assert "aider-llm-history" in said and "aider-chat" in said and "--from" in said
    assert "\n" not in said


def test_format_named_reads_a_chat_history_whatever_its_name(tmp_path: Path) -> None:
    name = "aider-chat/aider-2024-08-06-ask.subset.chat.history.md"
    p = tmp_path / "chat.txt"
    p.write_bytes((FIXTURES / name).read_bytes())
    [t] = load_file(p, "aider-chat")
    assert t.outcome is not None and t.outcome.usage == EXPECTED[name]["usage"]


@pytest.mark.parametrize("name", LLM + CHAT)
def test_the_file_read_in_chunks_of_any_size_gives_the_same_calls(name: str) -> None:
    """The readers take the file a chunk at a time (a megabyte): a block, a line or a
    ``TO LLM`` that a chunk's end cuts gives the calls the whole file does."""
    data = (FIXTURES / name).read_bytes()
    when = datetime(2026, 1, 1, tzinfo=UTC)

    def calls(size: int) -> list[tuple[object, ...]]:
        fmt = EXPECTED[name]["format"]
        cls = aider.LlmHistoryReader if fmt == aider.LLM_HISTORY else aider.ChatReader
        reader = cls(name, "s", when)
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        return [
            (c.key, c.output, c.usage, [(m.role, m.id, m.text) for s in c.context for m in s.norm])
            for c in reader.calls(chunks)
        ]

    whole = calls(len(data))
    assert len(whole) == EXPECTED[name]["model_calls"]
    for size in (1, 7, 8, 100, 4093):
        assert calls(size) == whole, size
