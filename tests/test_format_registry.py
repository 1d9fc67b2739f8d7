"""The import formats registry (docs/design.md, "Formats"): every real sample is detected as
exactly its own format, and the table is what the command line, the loader and the proxy
read.

Every detector is run on every sample, not only the winner. A sample must be claimed by its
own format first (detection asks the formats in table order), and any other format that also
claims it must come later in the table and be one of the overlaps the design accepts:

- ``openai`` (the chat request, the fallback, last) also reads ``{"messages": [...]}`` and
  ``{"history": [...]}``: Anthropic and Converse requests, LangGraph states, SWE-agent and
  mini-swe-agent trajectories have that shape too, with more that only their own detector
  knows;
- ``openai`` also reads a Gemini CLI chat file's ``{"messages": [...]}``; ``gemini-cli``,
  which knows its ``sessionId`` and typed messages, comes before it;
- ``anthropic`` takes a request with a ``system`` list: a Converse request has one as well,
  so ``bedrock-converse`` comes before it.
- a LiteLLM logging payload holds the call's chat ``messages``: ``openai`` reads those too,
  and ``anthropic`` a list whose model is Claude's; ``litellm`` comes before both.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxcore.capture.proxy import CAPTURED, Upstream, route
from ctxcore.cli import make_parser
from ctxcore.errors import ImportFormatError
from ctxcore.formats import registry, sessions
from ctxcore.formats.load import detect_format, iter_traces, load_file
from ctxcore.formats.otlp_proto import exports_from_bytes

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "imports"
#: the recorded streams the proxy replays (each reply, put back together, is its API's format)
STREAM_FIXTURES = ROOT / "tests" / "fixtures" / "streams"
CORPUS = ROOT / "corpus"

#: fixture folder -> the format its files are (a new folder needs its line here).
FOLDERS = {
    "anthropic-messages": "anthropic",
    "bedrock-converse": "bedrock-converse",
    "claude-code": "claude-code",
    "codex": "codex",
    "gemini": "gemini",
    "langchain": "langchain",
    "openai-chat": "openai",
    "openai-responses": "openai-responses",
    "openhands": "openhands",
    "openinference": "otlp",
    "pi": "pi",
    "aider-chat": "aider-chat",
    "aider-llm-history": "aider-llm-history",
    "inspect": "inspect",
    "gemini-cli": "gemini-cli",
    "opencode": "opencode",
    "langfuse": "langfuse",
    "litellm": "litellm",
    "openai-agents": "openai-agents",
    "otlp-json": "otlp",
    "otlp-logs": "otlp",
    "otlp-protobuf": "otlp",
    "otlp-span-events": "otlp",
    "otlp-traces": "otlp",
    "vercel-ai": "otlp",
}
#: the recorded streams of ``tests/fixtures/streams``, by how their names begin
STREAMS = {"anthropic-": "anthropic", "openai-chat-": "openai", "openai-responses-": "openai"}
STREAMS["openai-responses-"] = "openai-responses"
#: the agent trajectories and chat data of the corpus, by what their names hold
CORPUS_SAMPLES = {
    "a01_sweagent_marshmallow-1867_function-calling.traj.json": "swe-agent",
    "a02_sweagent_function_calling_simple.traj.json": "swe-agent",
    "b03_sweagent_pydicom-1458.traj.json": "swe-agent",
    "a03_mini-swe-agent_github_issue.traj.json": "mini-swe-agent",
    "b01_mswea_gemini3pro_pytest-dev__pytest-7571.traj.json": "mini-swe-agent",
    "b02_mswea_gemini3pro_django__django-16560.traj.json": "mini-swe-agent",
    "a04_llamafactory_reason_tool_use_demo_50.jsonl": "openai",
    "c02_llamafactory_glaive_toolcall_zh_demo.json": "openai",
}
#: (the format that wins, a later format that also says yes): the overlaps by design
OVERLAPS = {
    ("gemini-cli", "openai"),
    ("anthropic", "openai"),
    ("bedrock-converse", "openai"),
    ("langchain", "openai"),
    ("swe-agent", "openai"),
    ("mini-swe-agent", "openai"),
    ("bedrock-converse", "anthropic"),
    ("litellm", "openai"),
    ("litellm", "anthropic"),
}
ORDER = [f.name for f in registry.FORMATS]


def _expected(path: Path) -> str:
    if path.parent == CORPUS:
        return CORPUS_SAMPLES[path.name]
    if path.parent == STREAM_FIXTURES:
        return next(fmt for prefix, fmt in STREAMS.items() if path.name.startswith(prefix))
    return FOLDERS[path.relative_to(FIXTURES).parts[0]]


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _lines(path: Path) -> list[Any]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _values(path: Path, fmt: str) -> Iterator[tuple[str, Any]]:
    """What the detectors see of a sample: a document; a session log's events as one list
    (each line of any other JSONL file); each export of a protobuf file; a reply with its
    request as the ``{"request", "response"}`` pair a file may hold (a chat request holds
    its ``response``; a stream is put back together by the format's assembler first)."""
    name = path.name
    if _not_json(path):
        # a text log is seen as its text (an archive has none: only the sniffers see it)
        if not path.read_bytes().startswith(b"PK"):
            yield "text", path.read_text(encoding="utf-8")
    elif name.endswith(".jsonl"):
        if registry.get(fmt).stream is not None:
            yield "events", _lines(path)
        else:
            yield from ((f"line {n}", v) for n, v in enumerate(_lines(path), 1))
    elif name.endswith(".binpb"):
        yield from exports_from_bytes(path.read_bytes(), str(path))
    elif name.endswith((".response.json", ".response.sse")):
        stem = name.removesuffix(".json").removesuffix(".sse").removesuffix(".response")
        request = _json(path.with_name(f"{stem}.request.json"))
        if name.endswith(".sse"):
            response = registry.get(fmt).assembler()(path.read_text(encoding="utf-8")).response
        else:
            response = _json(path)
        if fmt == "openai":  # the chat format reads its reply inside the request
            yield "request with its response", {**request, "response": response}
        else:
            yield "pair", {"request": request, "response": response}
    else:
        yield "document", _json(path)


def _not_json(path: Path) -> bool:
    """Whether a sample is a file of a format that is not JSON (what its sniffer says)."""
    head = path.read_bytes()[: registry.SNIFF_BYTES]
    return registry.sniff_file(path.name, head) is not None


def _samples() -> list[Path]:
    files = [
        p
        for p in [*sorted(FIXTURES.rglob("*")), *sorted(STREAM_FIXTURES.iterdir())]
        if p.is_file() and p.name not in ("EXPECTED.json", "SOURCES.md")
    ]
    return files + [CORPUS / name for name in CORPUS_SAMPLES]


def test_every_fixture_folder_names_its_format() -> None:
    folders = {p.name for p in FIXTURES.iterdir() if p.is_dir()}
    assert folders == set(FOLDERS)
    assert set(FOLDERS.values()) | set(CORPUS_SAMPLES.values()) == set(ORDER) - {"trace"}


@pytest.mark.parametrize("path", _samples(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_sample_is_detected_as_its_own_format_and_no_other(path: Path) -> None:
    fmt = _expected(path)
    for where, value in _values(path, fmt):
        said = [f.name for f in registry.FORMATS if f.detects(value)]
        assert said and said[0] == fmt, (where, said)
        for other in said[1:]:
            assert (fmt, other) in OVERLAPS, (where, said)
            assert ORDER.index(other) > ORDER.index(fmt)
        assert detect_format(value) == fmt, where


@pytest.mark.parametrize("path", _samples(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_file_that_is_not_json_is_sniffed_as_its_own_format_and_no_other(path: Path) -> None:
    fmt = _expected(path)
    head = path.read_bytes()[: registry.SNIFF_BYTES]
    said = [
        f.name
        for f in registry.sniffing()
        if registry.resolve(f.sniff or "")(path.name, head)  # each sniffer, not the first
    ]
    assert said == ([fmt] if registry.get(fmt).sniff is not None and said else [])
    if said:  # the loader streams it as that format
        assert registry.sniff_file(path.name, head) is registry.get(fmt)


@pytest.mark.parametrize("fmt", ["claude-code", "codex"])
def test_a_session_log_file_is_sniffed_as_its_format(fmt: str) -> None:
    folder = FIXTURES / fmt
    assert [sessions.sniff(p) for p in sorted(folder.glob("*.jsonl"))] == [fmt] * len(
        list(folder.glob("*.jsonl"))
    )


def test_a_value_no_detector_claims_falls_back_to_the_chat_format() -> None:
    value = {"contents_of": "nothing anyone writes"}
    assert not any(f.detects(value) for f in registry.FORMATS)
    assert detect_format(value) == next(f.name for f in registry.FORMATS if f.fallback)
    with pytest.raises(ImportFormatError, match=r"matches no format ctxscope reads \(trace, otlp"):
        from ctxcore.formats.load import traces_from_value

        traces_from_value(value, where="x.json")


def test_the_table_names_each_format_once_and_every_function_resolves() -> None:
    assert len(set(ORDER)) == len(ORDER)
    assert registry.NAMES == (registry.AUTO, *ORDER)
    assert [f.name for f in registry.FORMATS if f.fallback] == [ORDER[-1]]
    for f in registry.FORMATS:
        assert f.summary and "\n" not in f.summary
        refs = [f.detector, f.reader, f.stream] + (
            [f.live.assemble, f.live.converter] if f.live else []
        )
        for ref in refs:
            if ref is not None:
                assert callable(registry.resolve(ref)) or isinstance(
                    registry.resolve(ref), registry.LiveConverter
                ), ref


def test_import_help_and_choices_come_from_the_table() -> None:
    parser = make_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    imp = sub.choices["import"]
    fmt = next(a for a in imp._actions if "--format" in a.option_strings)
    assert list(fmt.choices or []) == list(registry.NAMES)
    text = imp.format_help()
    for f in registry.FORMATS:
        assert f.name in text and f.summary in text, f.name


def test_an_unknown_format_name_is_refused_naming_the_ones_there_are(tmp_path: Path) -> None:
    p = tmp_path / "req.json"
    p.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}))
    with pytest.raises(ImportFormatError, match="unknown format 'chatml'.*openai-responses"):
        list(iter_traces(p, "chatml"))
    assert [t.input.query for t in load_file(p, "openai")] == ["hi"]


def test_the_proxy_records_each_live_format_on_its_upstream_only() -> None:
    ups = {
        "openai": Upstream.parse("https://api.openai.com"),
        "anthropic": Upstream.parse("https://api.anthropic.com"),
    }
    live = [f.live for f in registry.live_formats() if f.live is not None]
    assert {x.path for x in live} == set(CAPTURED)
    for x in live:
        headers = [(b"anthropic-version", b"2023-06-01")] if x.upstream == "anthropic" else []
        assert route(x.path, headers, ups).api == x.api
        assert registry.by_api(x.api).live is x
        other = [] if x.upstream == "anthropic" else [(b"anthropic-version", b"2023-06-01")]
        if x.upstream != "anthropic":  # an OpenAI path sent to Anthropic is not recorded
            assert route(x.path, other, ups).api is None
