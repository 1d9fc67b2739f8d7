"""The price table (``ctxcore/data/prices.json``), its overrides and a call's cost.

Costs are computed here by hand from the table's own row (read from the JSON file, not from
``ctxcore.cost``), on real recorded calls of the import fixtures.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from ctxcore.cost import SHIPPED, cost, load_prices, price_table
from ctxcore.errors import PricesError
from ctxcore.formats.anthropic import REQUESTS
from ctxcore.formats.load import load_file
from ctxcore.models import TokenUsage, Trace
from ctxcore.settings import ENV_PRICES

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "imports"
ROWS: list[dict[str, Any]] = json.loads(SHIPPED.read_text())["models"]


def _row(model: str) -> dict[str, Any]:
    return next(r for r in ROWS if r["model"] == model)


def test_every_shipped_row_names_its_page_and_date() -> None:
    rows = load_prices(SHIPPED)
    assert len(rows) == len(ROWS) > 0
    for raw, row in zip(ROWS, rows, strict=True):
        assert raw["source"].startswith("https://") and raw["currency"] == "USD"
        assert row.checked == date.fromisoformat(raw["checked"])
        assert row.input > 0 and row.output > 0


@pytest.mark.parametrize(
    ("model", "row"),
    [
        ("claude-sonnet-4-20250514", "claude-sonnet-4-0"),  # Claude Code's fixture
        ("litellm_proxy/claude-sonnet-4-20250514", "claude-sonnet-4-0"),  # a provider path
        ("claude-opus-4-5", "claude-opus-4-5"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),  # a dated snapshot
        ("claude-3-5-haiku-latest", "claude-3-5-haiku-latest"),
        ("Claude-3-7-Sonnet-20250219", "claude-3-7-sonnet-latest"),
        ("gpt-4o-2024-08-06", "gpt-4o"),  # OpenHands' fixture
        ("openai/gpt-4o-mini", "gpt-4o-mini"),  # Inspect's
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("gpt-4.1-2025-04-14", "gpt-4.1"),
        ("gpt-5-mini-2025-08-07", "gpt-5-mini"),
        ("gpt-5.3-codex", "gpt-5.3-codex"),  # Codex's
        ("gpt-4-0613", "gpt-4"),
        ("gemini-2.5-pro", "gemini-2.5-pro"),  # Gemini CLI's
        ("gemini-3.1-pro-preview", "gemini-3.1-pro-preview"),
    ],
)
def test_models_the_importers_name_find_their_row(model: str, row: str) -> None:
    price = price_table(env="").price(model)
    assert price is not None and price.model == row


@pytest.mark.parametrize(
    "model",
    [
        "gpt-4o-2024-05-13",  # a snapshot priced otherwise than gpt-4o: no prefix takes it
        "gemini-2.0-flash",  # named by a fixture, in no price list read
        "gemini-3-pro-preview",
        "us.anthropic.claude-3-7-sonnet-20250219-v1:0",
        "",
        None,
    ],
)
def test_a_model_the_table_does_not_name_has_an_unknown_cost(model: str | None) -> None:
    usage = TokenUsage(mapping="openai-chat", input_tokens=1000, output_tokens=10)
    assert cost(model, usage, price_table(env="")) is None


def _per_m(n: int, price: float) -> float:
    return n * price / 1_000_000


def test_cost_of_a_recorded_claude_code_call_by_hand() -> None:
    traces = load_file(FIXTURES / "claude-code/ccviewer-task-sidechain-session.jsonl")
    t = next(
        t
        for t in traces
        if t.outcome and t.outcome.tokens and t.outcome.tokens.cache_read_tokens
        and t.outcome.tokens.cache_write_tokens
    )  # fmt: skip
    assert t.outcome is not None and t.outcome.tokens is not None
    u = t.outcome.usage  # the provider's own numbers
    row = _row("claude-sonnet-4-0")
    want = (
        _per_m(u["input_tokens"], row["input"])
        + _per_m(u["cache_read_input_tokens"], row["cache_read"])
        + _per_m(u["cache_creation.ephemeral_5m_input_tokens"], row["cache_write_5m"])
        + _per_m(u["cache_creation.ephemeral_1h_input_tokens"], row["cache_write_1h"])
        + _per_m(u["output_tokens"], row["output"])
    )
    got = cost(t.metadata["model"], t.outcome.tokens, price_table(env=""))
    assert got is not None
    assert got.total_usd == pytest.approx(want, rel=1e-12)
    assert got.input_usd == pytest.approx(_per_m(u["input_tokens"], row["input"]))
    assert got.cache_write_5m_usd is not None and got.cache_write_1h_usd is not None
    assert got.price.source == row["source"]


def _first_cached(path: str) -> Trace:
    return next(
        t
        for t in load_file(FIXTURES / path)
        if t.outcome and t.outcome.tokens and t.outcome.tokens.cache_read_tokens
    )


def test_cost_of_a_recorded_openai_call_by_hand() -> None:
    """OpenHands' Chat Completions call: ``prompt_tokens`` holds the cached part, which is
    billed at the cached-input price; OpenAI charges nothing for writing the cache."""
    t = _first_cached("openhands/runtime-traj-basic-interactions.json")
    assert t.outcome is not None and t.outcome.tokens is not None
    u = t.outcome.usage
    row = _row("gpt-4o")
    assert t.metadata["model"] in row["aliases"]
    cached = u["prompt_tokens_details.cached_tokens"]
    want = (
        _per_m(u["prompt_tokens"] - cached, row["input"])
        + _per_m(cached, row["cache_read"])
        + _per_m(u["completion_tokens"], row["output"])
    )
    got = cost(t.metadata["model"], t.outcome.tokens, price_table(env=""))
    assert got is not None
    assert got.total_usd == pytest.approx(want, rel=1e-12)
    assert got.cache_read_usd == pytest.approx(_per_m(cached, row["cache_read"]))
    assert got.cache_write_usd == 0 and got.price.source == row["source"]


def test_cost_of_a_recorded_gemini_call_by_hand() -> None:
    """Gemini CLI's call: ``promptTokenCount`` holds the implicitly cached part (billed at
    the cached price), thinking is billed as output beside the candidates."""
    t = _first_cached("gemini-cli/ai-sessions-pomodoro-timer.json")
    assert t.outcome is not None and t.outcome.tokens is not None
    u = t.outcome.usage
    row = _row(t.metadata["model"])
    cached = u["cachedContentTokenCount"]
    prompt = u["promptTokenCount"] + u.get("toolUsePromptTokenCount", 0)
    assert prompt <= row["standard_up_to"]
    want = (
        _per_m(prompt - cached, row["input"])
        + _per_m(cached, row["cache_read"])
        + _per_m(u["candidatesTokenCount"] + u["thoughtsTokenCount"], row["output"])
    )
    got = cost(t.metadata["model"], t.outcome.tokens, price_table(env=""))
    assert got is not None
    assert got.total_usd == pytest.approx(want, rel=1e-12)
    assert got.reasoning_usd == pytest.approx(_per_m(u["thoughtsTokenCount"], row["output"]))
    # past the row's standard length the list prices the prompt otherwise: unknown
    longer = TokenUsage(mapping="gemini", input_tokens=row["standard_up_to"] + 1, output_tokens=1)
    assert cost(t.metadata["model"], longer, price_table(env="")) is None


def test_one_hour_writes_cost_the_one_hour_price() -> None:
    row = _row("claude-opus-4-5")
    split = TokenUsage(
        mapping="anthropic",
        input_tokens=3000,
        cache_write_tokens=2000,
        cache_write_5m_tokens=500,
        cache_write_1h_tokens=1500,
        output_tokens=100,
    )
    got = cost("claude-opus-4-5", split, price_table(env=""))
    assert got is not None
    assert got.cache_write_1h_usd == pytest.approx(_per_m(1500, row["cache_write_1h"]))
    assert got.cache_write_5m_usd == pytest.approx(_per_m(500, row["cache_write_5m"]))
    assert got.input_usd == pytest.approx(_per_m(1000, row["input"]))


def test_reasoning_is_billed_as_output() -> None:
    row = _row("claude-haiku-4-5")
    usage = TokenUsage(mapping="x", input_tokens=10, output_tokens=300, reasoning_tokens=200)
    got = cost("claude-haiku-4-5", usage, price_table(env=""))
    assert got is not None
    assert got.output_usd == pytest.approx(_per_m(300, row["output"]))
    assert got.reasoning_usd == pytest.approx(_per_m(200, row["output"]))
    assert got.total_usd == pytest.approx(_per_m(10, row["input"]) + got.output_usd)


@pytest.mark.parametrize(
    ("why", "usage"),
    [
        ("no output count", TokenUsage(mapping="x", input_tokens=10)),
        ("no input count", TokenUsage(mapping="x", output_tokens=10)),
        # a write whose lifetime is unknown, and the 5m and 1h prices differ
        ("split unknown", TokenUsage(mapping="x", input_tokens=900, cache_write_tokens=800,
                                      output_tokens=5)),
        # Anthropic prices prompts over 200K of the 1M-context Sonnet 4 otherwise
        ("long prompt", TokenUsage(mapping="x", input_tokens=250_000, output_tokens=5)),
        ("counts contradict", TokenUsage(mapping="x", input_tokens=10, cache_read_tokens=50,
                                          output_tokens=5)),
    ],
)  # fmt: skip
def test_a_needed_number_unknown_is_an_unknown_cost(why: str, usage: TokenUsage) -> None:
    assert cost("claude-sonnet-4-20250514", usage, price_table(env="")) is None, why


def test_no_usage_is_an_unknown_cost() -> None:
    assert cost("claude-sonnet-4-20250514", None, price_table(env="")) is None


# --------------------------------------------------------------------------- overrides


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"models": rows}))
    return path


def _mine(model: str, input_price: float, **more: Any) -> dict[str, Any]:
    return {
        "model": model,
        "input": input_price,
        "output": 2.0,
        "cache_read": 0.1,
        "currency": "USD",
        "source": "https://example.com/my-contract",
        "checked": "2026-12-01",
        **more,
    }


def test_the_environment_and_prices_file_replace_rows_model_by_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = _write(tmp_path / "env.json", [_mine("gpt-4o", 2.0), _mine("claude-opus-4-5", 9)])
    cli_file = _write(tmp_path / "cli.json", [_mine("gpt-4o", 1.5)])
    monkeypatch.setenv(ENV_PRICES, str(env_file))
    usage = TokenUsage(mapping="openai-chat", input_tokens=1000, output_tokens=100)

    by_env = price_table()
    assert cost("gpt-4o", usage, by_env).total_usd == pytest.approx(  # type: ignore[union-attr]
        _per_m(1000, 2.0) + _per_m(100, 2.0)
    )
    opus = by_env.price("claude-opus-4-5-20251101")  # its prefix went with the shipped row
    assert opus is None
    assert by_env.price("claude-opus-4-5").input == 9  # type: ignore[union-attr]
    sonnet = by_env.price("claude-sonnet-4-20250514")  # rows it does not name stay
    assert sonnet is not None and sonnet.input == _row("claude-sonnet-4-0")["input"]

    by_cli = price_table(cli_file)  # --prices goes over the environment's file
    assert by_cli.price("gpt-4o").input == 1.5  # type: ignore[union-attr]
    assert by_cli.price("claude-opus-4-5").input == 9  # type: ignore[union-attr]
    # a cache write the row has no price for: unknown, not free
    written = TokenUsage(mapping="x", input_tokens=1000, cache_write_tokens=10, output_tokens=1)
    assert cost("gpt-4o", written, by_cli) is None


@pytest.mark.parametrize(
    ("content", "where"),
    [
        ("{not json", "not a JSON price table"),
        ('{"rows": []}', "a 'models' list"),
        (json.dumps({"models": [_mine("m", 1), "x"]}), "models[1]: expected an object"),
        (json.dumps({"models": [_mine("m", -1)]}), "models[0].input: a price cannot be"),
        (json.dumps({"models": [_mine("m", "1.0")]}), "models[0].input: expected a price"),
        (json.dumps({"models": [_mine("m", 1, currency="EUR")]}), "models[0].currency"),
        (json.dumps({"models": [_mine("m", 1, checked="Dec 1")]}), "models[0].checked"),
        (json.dumps({"models": [_mine("m", 1, outptu=3)]}), "models[0].outptu: not a field"),
        (json.dumps({"models": [{k: v for k, v in _mine("m", 1).items() if k != "source"}]}),
         "models[0].source: missing"),
        (json.dumps({"models": [_mine("m", 1, prefixes="m-")]}), "models[0].prefixes"),
    ],
)  # fmt: skip
def test_a_bad_price_file_is_one_error_naming_file_row_and_field(
    tmp_path: Path, content: str, where: str
) -> None:
    path = tmp_path / "prices.json"
    path.write_text(content)
    with pytest.raises(PricesError) as exc:
        price_table(path, env="")
    assert str(exc.value).startswith(str(path)) and where in str(exc.value)


def test_a_missing_price_file_named_by_the_environment_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_PRICES, str(tmp_path / "nowhere.json"))
    with pytest.raises(PricesError, match="nowhere.json: cannot read the price table"):
        price_table()


def _pair(request: dict[str, Any]) -> Trace:
    """The OpenLLMetry prompt-caching cassette's request and its recorded reply, imported as
    one call (the reply reports ``cache_creation_input_tokens`` without a lifetime split)."""
    folder = FIXTURES / "anthropic-messages"
    reply = json.loads(
        (folder / "openllmetry-prompt-caching-system-blocks.response.json").read_text()
    )
    return REQUESTS.traces({"request": request, "response": reply})[0]


def test_a_write_marked_for_five_minutes_costs_the_five_minute_price() -> None:
    request = json.loads(
        (
            FIXTURES / "anthropic-messages/openllmetry-prompt-caching-system-blocks.request.json"
        ).read_text()
    )
    t = _pair(request)
    assert t.outcome is not None and t.outcome.tokens is not None
    u = t.outcome.usage
    assert t.outcome.tokens.cache_write_5m_tokens == u["cache_creation_input_tokens"] > 0
    assert t.outcome.tokens.cache_write_1h_tokens == 0
    row = _row("claude-3-5-sonnet-latest")
    want = (
        _per_m(u["input_tokens"], row["input"])
        + _per_m(u["cache_creation_input_tokens"], row["cache_write_5m"])
        + _per_m(u["output_tokens"], row["output"])
    )
    got = cost(t.metadata["model"], t.outcome.tokens, price_table(env=""))
    assert got is not None and got.total_usd == pytest.approx(want, rel=1e-12)


def test_a_write_with_a_one_hour_mark_keeps_an_unknown_split() -> None:
    request = json.loads(
        (
            FIXTURES / "anthropic-messages/openllmetry-prompt-caching-system-blocks.request.json"
        ).read_text()
    )
    text = json.dumps(request).replace('"type": "ephemeral"', '"type": "ephemeral", "ttl": "1h"')
    assert text != json.dumps(request)
    t = _pair(json.loads(text))
    assert t.outcome is not None and t.outcome.tokens is not None
    assert t.outcome.tokens.cache_write_tokens and t.outcome.tokens.cache_write_5m_tokens is None
    assert cost(t.metadata["model"], t.outcome.tokens, price_table(env="")) is None
