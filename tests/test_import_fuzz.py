"""Importers under type-swapped input: one clear line, never a traceback.

Real requests (corpus trajectories, an OpenAI chat request with tool calls, OTLP GenAI spans)
are mutated one field at a time: every value at every path (up to a budget per seed) is swapped
for a value of each other JSON type. Each mutant must either import or raise our own error
(``CtxscopeError``) with a one-line message; any other exception is an importer bug.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_import_otlp import otlp, span

from ctxcore.errors import CtxscopeError
from ctxcore.formats.load import traces_from_value
from ctxcore.formats.registry import NAMES

SWAPS: list[Any] = [None, 0, -1, 2**70, 1.5, "", "x", True, [], [1, "a"], {}, {"k": "v"}]
PATHS_PER_SEED = 160


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node[:6]):
            yield from _paths(v, (*prefix, i))


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    out = copy.deepcopy(doc)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def _openai_request() -> dict[str, Any]:
    return {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "You fix bugs."},
            {"role": "user", "content": [{"type": "text", "text": "why does test_login fail?"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"cmd": "pytest -x"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "FAILED tests/test_api.py"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {"name": "bash", "parameters": {"type": "object"}},
            }
        ],
        "max_tokens": 512,
    }


def _otlp_doc() -> dict[str, Any]:
    msgs = [
        {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
        {"role": "user", "parts": [{"type": "text", "content": "weather in Paris?"}]},
        {
            "role": "assistant",
            "parts": [
                {"type": "tool_call", "id": "c1", "name": "weather", "arguments": {"q": "P"}}
            ],
        },
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "rain"}]},
    ]
    return otlp(
        span(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.input.messages": json.dumps(msgs),
                "gen_ai.usage.input_tokens": 40,
            }
        )
    )


def _seeds() -> list[tuple[str, Any]]:
    corpus = Path(__file__).resolve().parent.parent / "corpus"
    a02 = json.loads((corpus / "a02_sweagent_function_calling_simple.traj.json").read_text())
    fixtures = Path(__file__).resolve().parent / "fixtures" / "imports"
    anthropic = json.loads(
        (fixtures / "anthropic-messages/openinference-tool-use-in-input.request.json").read_text()
    )
    # one real request per request format, named by its --format (and tried with it)
    requests = [
        (fmt, json.loads((fixtures / fmt / stem).read_text()))
        for fmt, stem in (
            ("openai-responses", "openllmetry-agents-function-call.request.json"),
            ("gemini", "openinference-automatic-tool-calling.request.json"),
            ("bedrock-converse", "openinference-converse-stream-tool-result.request.json"),
            ("langchain", "vercel-ai-langgraph-response-2.state.json"),
        )
    ]
    return [
        ("openai-request", _openai_request()),
        ("otlp-spans", _otlp_doc()),
        *_otlp_seeds(fixtures),
        ("swe-agent", a02),
        ("anthropic-messages", anthropic),
        *requests,
        *_session_seeds(fixtures, corpus),
    ]


def _session_seeds(fixtures: Path, corpus: Path) -> list[tuple[str, Any]]:
    """One real sample per session format, named by its --format. A JSONL log is given as
    the list of its events (what the importer reads line by line)."""

    def lines(name: str) -> list[Any]:
        return [json.loads(x) for x in (fixtures / name).read_text().splitlines() if x.strip()]

    return [
        ("claude-code", lines("claude-code/claude-code-log-compact-after-rewind.jsonl")),
        ("codex", lines("codex/localpush-rollout-1319-unfinished.jsonl")),
        (
            "openhands",
            json.loads((fixtures / "openhands/runtime-traj-wrong-initial-state.json").read_text()),
        ),
        (
            "mini-swe-agent",
            json.loads((corpus / "a03_mini-swe-agent_github_issue.traj.json").read_text()),
        ),
    ]


def _otlp_seeds(fixtures: Path) -> list[tuple[str, Any]]:
    """One real sample per OpenTelemetry variant (the protobuf files decode to the same JSON
    and are fuzzed byte by byte in test_import_otlp_variants)."""

    def lines(name: str) -> list[Any]:
        return [json.loads(x) for x in (fixtures / name).read_text().splitlines() if x.strip()]

    traces, logs = lines("otlp-logs/openai-v2-events.otlp.jsonl")
    return [
        ("otlp-logs", {**traces, **logs}),  # spans and their log records in one export
        ("otlp-span-events", lines("otlp-span-events/openai-v2-span-events.otlp.jsonl")[0]),
        (
            "otlp-attributes",
            json.loads(
                (
                    fixtures / "otlp-traces/openinference-genai-otel-client-span-tool-calls"
                    ".attributes.json"
                ).read_text()
            ),
        ),
        (
            "openinference",
            json.loads(
                (
                    fixtures / "openinference/openinference-genai-client-span-tool-calls"
                    ".attributes.json"
                ).read_text()
            ),
        ),
        (
            "vercel-ai",
            json.loads(
                (
                    fixtures / "vercel-ai/vercel-otel-snapshot-streamText-two-steps.spans.json"
                ).read_text()
            ),
        ),
    ]


def _mutants(doc: Any, seed: int) -> Iterator[tuple[str, Any]]:
    paths = list(_paths(doc))
    rng = random.Random(seed)
    if len(paths) > PATHS_PER_SEED:
        paths = [paths[0], *rng.sample(paths[1:], PATHS_PER_SEED - 1)]
    for path in paths:
        for value in SWAPS:
            yield f"{'/'.join(map(str, path)) or '<root>'} = {value!r}", _set(doc, path, value)


@pytest.mark.parametrize(("name", "seed_doc"), _seeds(), ids=[s[0] for s in _seeds()])
@pytest.mark.slow
def test_type_swapped_fields_give_one_line_errors_only(name: str, seed_doc: Any) -> None:
    traces_from_value(seed_doc, "auto")  # the seed itself imports
    bugs: list[str] = []
    tried = 0
    for label, doc in _mutants(seed_doc, seed=hash(name) & 0xFFFF):
        for fmt in ("auto", "openai", "otlp", "trace", *([name] if name in NAMES else [])):
            tried += 1
            try:
                traces_from_value(doc, fmt)  # type: ignore[arg-type]
            except CtxscopeError as exc:
                if "\n" in str(exc).strip():
                    bugs.append(f"{fmt} {label}: multi-line error {str(exc)[:200]!r}")
            except Exception as exc:  # noqa: BLE001 - any other exception is the bug we hunt
                bugs.append(f"{fmt} {label}: {type(exc).__name__}: {str(exc)[:160]}")
    assert tried > 500
    assert bugs == [], f"{len(bugs)} of {tried} mutants raised a traceback:\n" + "\n".join(
        bugs[:25]
    )
