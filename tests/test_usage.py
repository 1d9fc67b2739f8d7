"""Normalized usage (``outcome.tokens``): every importer and both live paths.

The hand counts in ``fixtures/imports/EXPECTED.json`` keep each provider's semantics; the
mapping the design documents (docs/design.md, "The trace contract", Usage) is applied to
them here, by hand, and compared with what the importers give. The live paths run as real
processes (the proxy against the fake upstream, the OTLP receiver).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from proxy_support import (
    FIXTURES,
    Proc,
    send,
    start_collector,
    start_proxy,
    start_upstream,
    wait_traces,
)

from ctxcore.formats.load import load_file, traces_from_value
from ctxcore.formats.usage import normalize
from ctxcore.models import TokenUsage, Trace

EXPECTED: dict[str, dict[str, Any]] = json.loads((FIXTURES / "EXPECTED.json").read_text())["files"]
Hand = dict[str, int | None]


def _anthropic(u: Hand) -> Hand:
    """Anthropic's input leaves the cache out: the prompt is all three."""
    parts = [u.get("input_tokens"), u.get("cache_read_tokens"), u.get("cache_creation_tokens")]
    return {
        "input_tokens": sum(p or 0 for p in parts),
        "cache_read_tokens": u.get("cache_read_tokens"),
        "cache_write_tokens": u.get("cache_creation_tokens"),
        "output_tokens": u.get("output_tokens"),
    }


def _inclusive(u: Hand) -> Hand:
    """OpenAI, Codex, OTLP, LangChain, Bedrock without cache: the input holds the cache."""
    return {
        "input_tokens": u.get("input_tokens"),
        "cache_read_tokens": u.get("cache_read_tokens", u.get("input_tokens_cache_read")),
        "cache_write_tokens": u.get("cache_creation_tokens"),
        "output_tokens": u.get("output_tokens"),
        "reasoning_tokens": u.get("reasoning_tokens"),
    }


def _gemini(u: Hand) -> Hand:
    """Gemini bills thoughts as output beside the candidates."""
    out = {**_inclusive(u)}
    out["output_tokens"] = (u.get("output_tokens") or 0) + (u.get("reasoning_tokens") or 0)
    return out


def _gemini_cli(u: Hand) -> Hand:
    """Gemini CLI's counts keep usageMetadata's names."""
    return {
        "input_tokens": (u["promptTokenCount"] or 0) + (u.get("toolUsePromptTokenCount") or 0),
        "cache_read_tokens": u.get("cachedContentTokenCount"),
        "output_tokens": (u["candidatesTokenCount"] or 0) + (u.get("thoughtsTokenCount") or 0),
        "reasoning_tokens": u.get("thoughtsTokenCount"),
    }


#: the format's hand counts read by its documented mapping
BY_FORMAT: dict[str, Callable[[Hand], Hand]] = {
    "anthropic-messages": _anthropic,
    "claude-code": _anthropic,
    "pi": _anthropic,
    "gemini": _gemini,
    "gemini-cli": _gemini_cli,
    "opencode": _anthropic,  # OpenCode's input leaves the cache out, as Anthropic's does
}


def _traces(name: str) -> list[Trace]:
    exp = EXPECTED[name]
    if not name.endswith(".response.json"):
        return list(load_file(FIXTURES / name))
    stem = name.removesuffix(".response.json")
    req = json.loads((FIXTURES / f"{stem}.request.json").read_text())
    resp = json.loads((FIXTURES / name).read_text())
    pair = {**req, "response": resp} if exp["format"] == "openai-chat" else {"request": req}
    if exp["format"] != "openai-chat":
        pair["response"] = resp
    return traces_from_value(pair)


def _with_usage() -> list[str]:
    """Files whose hand counts give usage on each call's outcome (LangChain's calls are in a
    state's metadata: ``test_langchain_calls_carry_tokens_from_usage_metadata``)."""
    return [
        n
        for n, e in EXPECTED.items()
        if e.get("usage")
        and _reported(e["usage"])
        and e["format"] != "langchain"
        and "refusal_names" not in e  # a file refused as a whole (its calls carry no input)
    ]


def _reported(usage: Hand) -> bool:
    """Whether the hand counts say the file reports usage (all zeros: it reports none)."""
    return any(v for v in usage.values())


def _sums(tokens: list[TokenUsage]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in tokens:
        for k, v in t.model_dump(exclude_none=True).items():
            if k != "mapping":
                out[k] = out.get(k, 0) + v
    return out


def _tokens(name: str) -> list[TokenUsage]:
    traces = _traces(name)
    return [t.outcome.tokens for t in traces if t.outcome is not None and t.outcome.tokens]


@pytest.mark.parametrize("name", [n for n, e in EXPECTED.items() if e["format"] == "langchain"])
def test_langchain_calls_carry_tokens_from_usage_metadata(name: str) -> None:
    """A call's ``usage_metadata`` (LangChain's own meaning) gives ``tokens``; a call with
    only the provider's raw usage (provider unknown) has none: absent, not guessed."""
    [trace] = _traces(name)
    calls = trace.metadata["model_calls"]
    want = EXPECTED[name]["per_call_usage"]
    assert len(calls) == len(want)
    for call, hand in zip(calls, want, strict=True):
        if "response_metadata" in hand.get("source", ""):
            assert "tokens" not in call
            continue
        tokens = TokenUsage(**call["tokens"])
        assert tokens.mapping == "langchain"
        for key, value in _inclusive(hand).items():
            if value is not None:
                assert getattr(tokens, key) == value, key


@pytest.mark.parametrize("name", _with_usage())
def test_normalized_usage_matches_the_hand_counts(name: str) -> None:
    exp = EXPECTED[name]
    want = BY_FORMAT.get(exp["format"], _inclusive)(exp["usage"])
    got = _sums(_tokens(name))
    for key, value in want.items():
        if value is not None:
            assert got.get(key) == value, (key, got)
    # the whole prompt is never less than what was read from or written to the cache
    for t in _tokens(name):
        assert t.input_tokens is not None
        assert t.input_tokens >= (t.cache_read_tokens or 0) + (t.cache_write_tokens or 0)
        if t.reasoning_tokens is not None:
            assert t.output_tokens is not None and t.output_tokens >= t.reasoning_tokens


@pytest.mark.parametrize(
    ("name", "absent"),
    [
        # Gemini reports no cache count, Claude Code's synthetic log and Bedrock none either
        ("gemini/otel-contrib-vertexai-tool-events.response.json", "cache_read_tokens"),
        ("claude-code/claude-code-log-compact-after-rewind.jsonl", "cache_read_tokens"),
        ("claude-code/claude-code-log-compact-after-rewind.jsonl", "cache_write_5m_tokens"),
        ("bedrock-converse/openllmetry-nova-converse-system.response.json", "cache_write_tokens"),
        ("codex/localpush-rollout-2034.jsonl", "cache_write_tokens"),
        ("anthropic-messages/openllmetry-thinking.response.json", "reasoning_tokens"),
    ],
)
def test_a_count_the_source_does_not_give_stays_absent(name: str, absent: str) -> None:
    tokens = _tokens(name)
    assert tokens and all(getattr(t, absent) is None for t in tokens)


def test_a_log_without_usage_has_no_tokens() -> None:
    """Codex lines without token_count and aider's LLM history record no usage."""
    for name in (
        "codex/wakatime-0119-no-token-count.subset.jsonl",
        "aider-llm-history/friendly-names-ask.subset.aider.llm.history",
    ):
        traces = _traces(name)
        assert traces and all(t.outcome is None or t.outcome.tokens is None for t in traces)


def _raw_claude_usages(name: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for line in (FIXTURES / name).read_text().splitlines():
        rec = json.loads(line)
        msg = rec.get("message")
        if rec.get("type") == "assistant" and isinstance(msg, dict) and msg.get("usage"):
            out[msg["id"]] = msg["usage"]
    return out


def test_claude_code_splits_the_cache_write_by_lifetime_per_call() -> None:
    name = "claude-code/ccviewer-task-sidechain-session.jsonl"
    raw = _raw_claude_usages(name)
    traces = _traces(name)
    assert traces
    for t in traces:
        u = raw[t.metadata["session_log"]["message_id"]]
        tok = t.outcome.tokens  # type: ignore[union-attr]
        assert tok is not None and tok.mapping == "anthropic"
        prompt = u["input_tokens"] + u["cache_read_input_tokens"]
        assert tok.input_tokens == prompt + u["cache_creation_input_tokens"]
        assert tok.cache_write_5m_tokens == u["cache_creation"]["ephemeral_5m_input_tokens"]
        assert tok.cache_write_1h_tokens == u["cache_creation"]["ephemeral_1h_input_tokens"]
        assert tok.cache_write_5m_tokens + tok.cache_write_1h_tokens == tok.cache_write_tokens


def test_the_mappings_read_what_the_design_says() -> None:
    """Each mapping on one usage written the provider's way (the numbers are the test's)."""
    anth = normalize(
        "anthropic",
        {
            "input_tokens": 7,
            "cache_read_input_tokens": 900,
            "cache_creation.ephemeral_1h_input_tokens": 100,
            "output_tokens": 30,
        },
    )
    assert anth is not None and anth.input_tokens == 1007 and anth.cache_write_tokens == 100
    assert anth.cache_write_5m_tokens is None and anth.cache_write_1h_tokens == 100
    bedrock = normalize(
        "bedrock", {"inputTokens": 5, "cacheReadInputTokens": 50, "outputTokens": 2}
    )
    assert bedrock is not None and bedrock.input_tokens == 55 and bedrock.cache_read_tokens == 50
    gem = normalize(
        "gemini",
        {"promptTokenCount": 80, "cachedContentTokenCount": 60, "toolUsePromptTokenCount": 5,
         "candidatesTokenCount": 10, "thoughtsTokenCount": 4},
    )  # fmt: skip
    assert gem is not None and (gem.input_tokens, gem.output_tokens) == (85, 14)
    assert gem.cache_read_tokens == 60 and gem.reasoning_tokens == 4
    # a provider-dependent source: the recorded total says where the cache is
    inside = normalize(
        "inspect",
        {"input_tokens": 100, "input_tokens_cache_read": 80, "output_tokens": 5,
         "total_tokens": 105},
    )  # fmt: skip
    outside = normalize(
        "inspect",
        {"input_tokens": 20, "input_tokens_cache_read": 80, "output_tokens": 5,
         "total_tokens": 105},
    )  # fmt: skip
    unknown = normalize(
        "langfuse", {"input_tokens": 20, "input_cached_tokens": 80, "output_tokens": 5}
    )
    assert inside is not None and inside.input_tokens == 100
    assert outside is not None and outside.input_tokens == 100
    assert unknown is not None and unknown.input_tokens is None and unknown.cache_read_tokens == 80
    assert normalize("openai-chat", {}) is None
    assert normalize("openai-chat", {"total_tokens": 3}) is None


def test_old_traces_load_unchanged_and_round_trip() -> None:
    """A trace written before ``tokens`` (outcome.usage only) loads as it was; one with it
    survives the JSON round trip and the store's fast decoder."""
    from ctxcore.store import fastdecode

    [t] = _traces("anthropic-messages/openllmetry-prompt-caching-system-blocks.response.json")
    assert t.outcome is not None and t.outcome.tokens is not None
    old = t.to_dict()
    del old["outcome"]["tokens"]
    back = Trace.model_validate_json(json.dumps(old))
    assert back.outcome is not None and back.outcome.tokens is None
    assert back.outcome.usage == t.outcome.usage
    again = Trace.model_validate_json(t.to_json())
    assert again == t
    fast = fastdecode.decode(t.to_json().encode())
    assert fast is not None and fast.outcome.tokens.input_tokens == t.outcome.tokens.input_tokens


# --------------------------------------------------------------------------- live paths


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("usage")


@pytest.fixture(scope="module")
def proxy(workdir: Path) -> Iterator[Proc]:
    upstream = start_upstream(workdir / "upstream")
    p = start_proxy(workdir / "traces", upstream.port, "--timeout", "5")
    yield p
    p.stop()
    upstream.stop()


def _auth(api: str) -> list[tuple[str, str]]:
    if api == "anthropic":
        return [("x-api-key", "sk-ant-test"), ("anthropic-version", "2023-06-01")]
    return [("Authorization", "Bearer sk-test")]


#: recorded replies and what their usage says, read off the files by hand
REPLIES: dict[str, tuple[str, dict[str, int | None]]] = {
    "anthropic-messages/openllmetry-prompt-caching-system-blocks": (
        "/v1/messages",
        {"mapping": "anthropic", "input_tokens": 4 + 1163, "cache_write_tokens": 1163,
         "cache_read_tokens": 0, "output_tokens": 187, "reasoning_tokens": None,
         # the reply does not split the write; the request's marks name no ttl: 5 minutes
         "cache_write_5m_tokens": 1163, "cache_write_1h_tokens": 0},
    ),
    "openai-chat/otel-contrib-tool-calls-turn1": (
        "/v1/chat/completions",
        {"mapping": "openai-chat", "input_tokens": 75, "cache_read_tokens": 0,
         "output_tokens": 51, "reasoning_tokens": 0, "cache_write_tokens": None},
    ),
    "openai-responses/openinference-litellm-reasoning-item": (
        "/v1/responses",
        {"mapping": "openai-responses", "input_tokens": 20, "cache_read_tokens": 0,
         "cache_write_tokens": 0, "output_tokens": 82, "reasoning_tokens": 64},
    ),
}  # fmt: skip


@pytest.mark.parametrize("stem", sorted(REPLIES))
def test_the_proxy_carries_normalized_usage(workdir: Path, proxy: Proc, stem: str) -> None:
    path, want = REPLIES[stem]
    api = "anthropic" if stem.startswith("anthropic") else "openai"
    source = "usage-" + stem.split("/")[0]
    reply = send(
        proxy.port,
        "POST",
        f"/{source}{path}",
        [*_auth(api), ("x-test-scenario", f"json:{stem}.response.json")],
        (FIXTURES / f"{stem}.request.json").read_bytes(),
    )
    assert reply.status == 200
    [trace] = wait_traces(workdir / "traces" / "live" / f"{source}.jsonl", 1)
    tokens = trace["outcome"]["tokens"]
    for key, value in want.items():
        assert tokens[key] == value, key
    # the same reading as an import of the recorded usage; a write the reply does not split
    # takes its lifetime from the request's marks (formats/request.py, write_lifetime)
    read = normalize(tokens["mapping"], trace["outcome"]["usage"])
    assert read is not None
    split = {k: tokens[k] for k in ("cache_write_5m_tokens", "cache_write_1h_tokens")}
    assert read.model_copy(update=split) == TokenUsage(**tokens)


def test_a_json_reply_through_the_proxy_keeps_the_5m_and_1h_split(
    workdir: Path, proxy: Proc
) -> None:
    stem = "anthropic-messages/openinference-tool-use-in-input"
    resp = json.loads((FIXTURES / f"{stem}.response.json").read_text())
    source = "usage-json-split"
    reply = send(
        proxy.port,
        "POST",
        f"/{source}/v1/messages",
        [*_auth("anthropic"), ("x-test-scenario", f"json:{stem}.response.json")],
        (FIXTURES / f"{stem}.request.json").read_bytes(),
    )
    assert reply.status == 200
    [trace] = wait_traces(workdir / "traces" / "live" / f"{source}.jsonl", 1)
    tokens = trace["outcome"]["tokens"]
    split = resp["usage"]["cache_creation"]
    assert tokens["cache_write_5m_tokens"] == split["ephemeral_5m_input_tokens"]
    assert tokens["cache_write_1h_tokens"] == split["ephemeral_1h_input_tokens"]
    u = resp["usage"]
    assert tokens["input_tokens"] == (
        u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
    )


def test_the_otlp_receiver_carries_normalized_usage(tmp_path: Path) -> None:
    import urllib.request

    collector = start_collector(tmp_path / "traces")
    try:
        attrs = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "claude-sonnet-4-5",
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": "hello"}]}]
            ),
            "gen_ai.usage.input_tokens": 1200,
            "gen_ai.usage.cache_read.input_tokens": 1000,
            "gen_ai.usage.cache_creation.input_tokens": 150,
            "gen_ai.usage.output_tokens": 40,
        }
        span = {
            "traceId": "5b8aa5a2d2c872e8321cf37308d69df2",
            "spanId": "051581bf3cb55c13",
            "name": "chat claude-sonnet-4-5",
            "startTimeUnixNano": "1796078064712464003",
            "attributes": [
                {
                    "key": k,
                    "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v},
                }
                for k, v in attrs.items()
            ],
        }
        export = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": [span]}]}]}
        req = urllib.request.Request(
            f"http://127.0.0.1:{collector.port}/v1/traces",
            data=json.dumps(export).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 200
        [trace] = wait_traces(tmp_path / "traces" / "live" / "otlp.jsonl", 1)
    finally:
        collector.stop()
    tokens = trace["outcome"]["tokens"]
    assert tokens["mapping"] == "otel-genai"
    assert (tokens["input_tokens"], tokens["cache_read_tokens"]) == (1200, 1000)
    assert (tokens["cache_write_tokens"], tokens["output_tokens"]) == (150, 40)
    assert tokens["reasoning_tokens"] is None
