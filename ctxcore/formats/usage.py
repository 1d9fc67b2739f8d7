"""A provider's token usage read into ``TokenUsage``, the counts with one meaning.

Each importer keeps the provider's own counters as it recorded them (``Outcome.usage``,
nested keys joined with ``.``) and names the mapping that reads them; ``normalize`` applies
it. The mappings (docs/design.md, "The trace contract", the table there says the same):

- ``anthropic`` (Messages API, Claude Code, Pi): ``input_tokens`` excludes the cache, so
  the prompt is ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``;
  ``cache_creation.ephemeral_5m_input_tokens`` / ``ephemeral_1h_input_tokens`` split the
  write.
- ``bedrock`` (Converse): ``inputTokens`` excludes ``cacheReadInputTokens`` and
  ``cacheWriteInputTokens`` as Anthropic's does.
- ``openai-chat`` (Chat Completions, LiteLLM, OpenHands, mini-SWE-agent): ``prompt_tokens``
  includes ``prompt_tokens_details.cached_tokens`` (LiteLLM also writes
  ``cache_read_input_tokens``) and LiteLLM's ``cache_creation_input_tokens``;
  ``completion_tokens`` includes ``completion_tokens_details.reasoning_tokens``.
- ``openai-responses`` (Responses API, OpenAI Agents SDK): ``input_tokens`` includes
  ``input_tokens_details.cached_tokens`` (and ``cache_write_tokens`` where a gateway
  writes it); ``output_tokens`` includes ``output_tokens_details.reasoning_tokens``.
- ``codex``: ``input_tokens`` includes ``cached_input_tokens``, ``output_tokens`` includes
  ``reasoning_output_tokens``.
- ``gemini``: ``promptTokenCount`` includes ``cachedContentTokenCount``; the tool-use
  prompt (``toolUsePromptTokenCount``) is input besides it; ``thoughtsTokenCount`` is
  billed as output beside ``candidatesTokenCount``, so output is their sum.
- ``otel-genai`` (the GenAI semantic conventions): ``input_tokens`` includes
  ``cache_read.input_tokens`` and ``cache_creation.input_tokens``.
- ``openinference`` and ``vercel-ai`` (their readers rename the attributes):
  ``input_tokens`` includes ``cache_read_tokens`` / ``cache_write_tokens``,
  ``output_tokens`` includes ``reasoning_tokens``.
- ``langchain`` (``usage_metadata``): ``input_tokens`` includes
  ``input_token_details.cache_read`` / ``cache_creation`` (and the Anthropic TTL split
  ``ephemeral_5m_input_tokens`` / ``ephemeral_1h_input_tokens``); ``output_tokens`` includes
  ``output_token_details.reasoning``.
- ``aider`` (its ``Tokens:`` line): ``sent`` includes the cache hit and write it reports.
- ``opencode``: ``input`` leaves out ``cache.read`` and ``cache.write`` (OpenCode takes them
  off whatever the provider), so the prompt is the three; ``reasoning`` is billed as output
  beside ``output`` in the OpenCode versions that record a ``total`` equal to all of them
  (``output`` holds it when the total leaves it out), and is unknown without a ``total``.
- ``langfuse`` and ``inspect``: whether ``input`` holds the cached tokens depends on the
  provider behind them; the recorded total decides (``input + output`` or ``input + output
  + cache``), and a cached call whose total says neither has an unknown input.

A count the source does not give stays ``None``; an absent cache count adds nothing to the
prompt (a provider that caches reports its cache counts). No counter at all gives ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ctxcore.models import TokenUsage

Counts = Mapping[str, int]
Fields = dict[str, int | None]


def _first(usage: Counts, *keys: str) -> int | None:
    """The first of ``keys`` the usage holds."""
    for key in keys:
        value = usage.get(key)
        if value is not None:
            return value
    return None


def _sum(*values: int | None) -> int | None:
    """The sum of the counts given, ``None`` when none is."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _plus(base: int | None, *parts: int | None) -> int | None:
    """``base`` with the parts it leaves out added (absent parts add nothing)."""
    return None if base is None else base + sum(p for p in parts if p is not None)


def _anthropic(usage: Counts) -> Fields:
    read = usage.get("cache_read_input_tokens")
    five = usage.get("cache_creation.ephemeral_5m_input_tokens")
    hour = usage.get("cache_creation.ephemeral_1h_input_tokens")
    write = _first(usage, "cache_creation_input_tokens")
    write = write if write is not None else _sum(five, hour)
    return {
        "input_tokens": _plus(usage.get("input_tokens"), read, write),
        "cache_read_tokens": read,
        "cache_write_tokens": write,
        "cache_write_5m_tokens": five,
        "cache_write_1h_tokens": hour,
        "output_tokens": usage.get("output_tokens"),
    }


def _bedrock(usage: Counts) -> Fields:
    read = usage.get("cacheReadInputTokens")
    write = usage.get("cacheWriteInputTokens")
    return {
        "input_tokens": _plus(usage.get("inputTokens"), read, write),
        "cache_read_tokens": read,
        "cache_write_tokens": write,
        "output_tokens": usage.get("outputTokens"),
    }


def _openai_chat(usage: Counts) -> Fields:
    return {
        "input_tokens": usage.get("prompt_tokens"),
        "cache_read_tokens": _first(
            usage, "prompt_tokens_details.cached_tokens", "cache_read_input_tokens"
        ),
        "cache_write_tokens": _first(
            usage, "cache_creation_input_tokens", "prompt_tokens_details.cache_write_tokens"
        ),
        "output_tokens": usage.get("completion_tokens"),
        "reasoning_tokens": usage.get("completion_tokens_details.reasoning_tokens"),
    }


def _openai_responses(usage: Counts) -> Fields:
    return {
        "input_tokens": usage.get("input_tokens"),
        "cache_read_tokens": usage.get("input_tokens_details.cached_tokens"),
        "cache_write_tokens": usage.get("input_tokens_details.cache_write_tokens"),
        "output_tokens": usage.get("output_tokens"),
        "reasoning_tokens": usage.get("output_tokens_details.reasoning_tokens"),
    }


def _codex(usage: Counts) -> Fields:
    return {
        "input_tokens": usage.get("input_tokens"),
        "cache_read_tokens": usage.get("cached_input_tokens"),
        "output_tokens": usage.get("output_tokens"),
        "reasoning_tokens": usage.get("reasoning_output_tokens"),
    }


def _gemini(usage: Counts) -> Fields:
    thoughts = _first(usage, "thoughtsTokenCount", "thoughts_token_count")
    candidates = _first(usage, "candidatesTokenCount", "candidates_token_count")
    prompt = _first(usage, "promptTokenCount", "prompt_token_count")
    tool_use = _first(usage, "toolUsePromptTokenCount", "tool_use_prompt_token_count")
    return {
        "input_tokens": _plus(prompt, tool_use),
        "cache_read_tokens": _first(usage, "cachedContentTokenCount", "cached_content_token_count"),
        "output_tokens": _sum(candidates, thoughts),
        "reasoning_tokens": thoughts,
    }


def _keyed(**keys: str) -> Callable[[Counts], Fields]:
    """A reader of a flat usage whose counts sit under these keys (field = key)."""

    def read(usage: Counts) -> Fields:
        return {field: usage.get(key) for field, key in keys.items()}

    return read


_otel_genai = _keyed(
    input_tokens="input_tokens",
    cache_read_tokens="cache_read.input_tokens",
    cache_write_tokens="cache_creation.input_tokens",
    output_tokens="output_tokens",
)
#: the keys the OpenInference and AI SDK readers write (their own names renamed)
_RENAMED = ("input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens")
_renamed = _keyed(**{f: f for f in (*_RENAMED, "reasoning_tokens")})
_langchain = _keyed(
    input_tokens="input_tokens",
    cache_read_tokens="input_token_details.cache_read",
    cache_write_tokens="input_token_details.cache_creation",
    cache_write_5m_tokens="input_token_details.ephemeral_5m_input_tokens",
    cache_write_1h_tokens="input_token_details.ephemeral_1h_input_tokens",
    output_tokens="output_tokens",
    reasoning_tokens="output_token_details.reasoning",
)
_aider = _keyed(
    input_tokens="input_tokens",
    cache_read_tokens="cache_read_input_tokens",
    cache_write_tokens="cache_creation_input_tokens",
    output_tokens="output_tokens",
)


def _opencode(usage: Counts) -> Fields:
    read, write = usage.get("cache.read"), usage.get("cache.write")
    base, output = usage.get("input"), usage.get("output")
    reasoning, total = usage.get("reasoning"), usage.get("total")
    if not reasoning:
        whole = output
    elif total is not None and base is not None and output is not None:
        cached = (read or 0) + (write or 0)
        beside = total == base + cached + output + reasoning
        whole = (
            output + reasoning if beside else output if total == base + cached + output else None
        )
    else:
        whole = None
    return {
        "input_tokens": _plus(base, read, write),
        "cache_read_tokens": read,
        "cache_write_tokens": write,
        "output_tokens": whole,
        "reasoning_tokens": reasoning,
    }


def input_by_total(
    base: int | None, read: int | None, write: int | None, output: int | None, total: int | None
) -> int | None:
    """The whole prompt when the source's ``input`` may or may not hold the cached tokens:
    ``base`` if nothing was cached; otherwise what the recorded total says (``base +
    output`` means the cache is inside ``base``, ``base + output + cached`` that it is
    not); ``None`` when the total is missing or says neither."""
    cached = (read or 0) + (write or 0)
    if base is None or cached == 0:
        return base
    if total is not None and output is not None:
        if total == base + output + cached:
            return base + cached
        if total == base + output:
            return base
    return None


_LANGFUSE_READ = ("input_cached_tokens", "cache_read_input_tokens", "prompt_details.cache_read")
_LANGFUSE_WRITE = ("cache_creation_input_tokens", "prompt_details.cache_write")
_LANGFUSE_REASONING = ("output_reasoning_tokens", "completion_details.reasoning")


def _langfuse(usage: Counts) -> Fields:
    read = _first(usage, *_LANGFUSE_READ)
    write = _first(usage, *_LANGFUSE_WRITE)
    output = usage.get("output_tokens")
    base = usage.get("input_tokens")
    return {
        "input_tokens": input_by_total(base, read, write, output, usage.get("total_tokens")),
        "cache_read_tokens": read,
        "cache_write_tokens": write,
        "output_tokens": output,
        "reasoning_tokens": _first(usage, *_LANGFUSE_REASONING),
    }


def _inspect(usage: Counts) -> Fields:
    read = usage.get("input_tokens_cache_read")
    write = usage.get("input_tokens_cache_write")
    output = usage.get("output_tokens")
    base = usage.get("input_tokens")
    return {
        "input_tokens": input_by_total(base, read, write, output, usage.get("total_tokens")),
        "cache_read_tokens": read,
        "cache_write_tokens": write,
        "output_tokens": output,
        "reasoning_tokens": usage.get("reasoning_tokens"),
    }


#: mapping name -> how it reads a recorded usage (see the module docstring)
MAPPINGS: dict[str, Callable[[Counts], Fields]] = {
    "anthropic": _anthropic,
    "bedrock": _bedrock,
    "openai-chat": _openai_chat,
    "openai-responses": _openai_responses,
    "codex": _codex,
    "gemini": _gemini,
    "otel-genai": _otel_genai,
    "openinference": _renamed,
    "vercel-ai": _renamed,
    "langchain": _langchain,
    "aider": _aider,
    "opencode": _opencode,
    "langfuse": _langfuse,
    "inspect": _inspect,
}


def normalize(mapping: str, usage: Counts | None) -> TokenUsage | None:
    """The recorded ``usage`` read by ``mapping``; ``None`` when it holds none of the
    counters the mapping reads."""
    fields = MAPPINGS[mapping](usage or {})
    if all(v is None for v in fields.values()):
        return None
    return TokenUsage.model_validate({"mapping": mapping, **fields})


__all__ = ["MAPPINGS", "input_by_total", "normalize"]
