"""The ``hello-agents-book`` preset against the listing (docs/design.md, "hello-agents-book").

Expected numbers are worked out by hand in each test from the listing's rules (CJK chars +
1.3 × words, Jaccard at exactly 0.5, exp(-0.1 × age_h / 24) clipped to [0.1, 1], break fill,
block-level compression with the 50-token floor and the marker), never by calling the code
under test. Tests that only need a count use a 10-line re-statement of the estimator.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ctxcore.errors import InputError
from ctxcore.models import CapturedInput, Config, Status
from ctxcore.pipeline import build, resolve_config

NOW = datetime(2026, 1, 24, 14, 0, tzinfo=UTC)
OUTPUT = "[Output]\n请基于以上信息,提供准确、有据的回答。"
MARKER = "\n[... 内容已压缩 ...]"


def est(text: str) -> int:
    """The listing's estimate, restated: U+4E00–U+9FFF chars + 1.3 × whitespace words."""
    return int(sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff") + len(text.split()) * 1.3)


def _input(**kw: Any) -> CapturedInput:
    return CapturedInput.model_validate({"now": NOW.isoformat(), "query": "", **kw})


def _run(inp: CapturedInput, **cfg: Any) -> Any:
    return build(inp, Config(preset="hello-agents-book", **cfg))


def _by_id(res: Any) -> dict[str, Any]:
    return {d.packet_id: d for d in res.decisions}


# --------------------------------------------------------------------------- config


def test_defaults_and_tokenizer() -> None:
    cfg = resolve_config(Config(preset="hello-agents-book"), _input())
    assert (cfg.max_tokens, cfg.reserve_ratio, cfg.min_relevance) == (3000, 0.2, 0.1)
    assert (cfg.relevance_weight, cfg.recency_weight) == (0.7, 0.3)
    assert cfg.enable_compression is True and cfg.history_limit == 5
    assert cfg.tokenizer == "book-heuristic"


def test_weights_not_summing_to_one_are_an_error_naming_both_values() -> None:
    with pytest.raises(InputError) as exc:
        resolve_config(
            Config(preset="hello-agents-book", relevance_weight=0.6, recency_weight=0.3),
            _input(),
        )
    msg = str(exc.value)
    assert "relevance_weight 0.6" in msg and "recency_weight 0.3" in msg and "= 0.9;" in msg
    assert "sum to 1" in msg


def test_one_weight_given_takes_the_complement() -> None:
    cfg = resolve_config(Config(preset="hello-agents-book", relevance_weight=0.25), _input())
    assert cfg.recency_weight == 0.75


def test_knobs_the_listing_lacks_are_an_error() -> None:
    with pytest.raises(InputError, match="fill"):
        resolve_config(Config(preset="hello-agents-book", fill="skip"), _input())


# --------------------------------------------------------------------------- gather


def test_estimator_counts_cjk_twice_inside_words_and_ignores_kana() -> None:
    # "修复bug" is one word (1.3) plus 2 CJK chars; "かな" is one word, kana not counted.
    inp = _input(packets=[{"id": "p", "kind": "note", "content": "修复bug かな"}])
    d = _by_id(_run(inp))
    assert d["p"].tokens_before == int(2 + 2 * 1.3) == 4


def test_last_five_messages_become_one_packet_each_with_relevance_06() -> None:
    history = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"cache step {i} done"}
        for i in range(8)
    ]
    history[1]["id"] = "m1"
    res = _run(_input(query="cache", history=history), min_relevance=0.0)
    d = _by_id(res)
    cut = [x for x in res.decisions if x.reason == "HISTORY_LIMIT"]
    assert [x.packet_id for x in cut] == ["history:0", "m1", "history:2"]
    for k in range(5):
        x = d[f"builder:history:{k}"]
        msg = history[3 + k]
        assert x.kind == "conversation_history" and x.relevance == 0.6
        # counted without the "user: " prefix: 4 words -> int(5.2) = 5
        assert x.tokens_before == int(4 * 1.3) == 5
        assert f"{msg['role']}: {msg['content']}" in res.prompt
    assert "cache step 2 done" not in res.prompt


def test_relevance_recomputed_only_at_exactly_half() -> None:
    query = "disk full error"
    content = "error: disk is full"  # words {error:, disk, is, full}
    inp = _input(
        query=query,
        packets=[
            {"id": "none", "kind": "note", "content": content},
            {"id": "half", "kind": "note", "content": content, "relevance": 0.5},
            {"id": "other", "kind": "note", "content": content, "relevance": 0.51},
            {"id": "big", "kind": "note", "content": content, "relevance": 1.7},
        ],
    )
    d = _by_id(_run(inp))
    # Jaccard: {disk, full} of the union {disk, full, error, error:, is} = 2 / 5
    assert d["none"].relevance == d["half"].relevance == 2 / 5
    assert any("default 0.5" in n for n in d["none"].notes)
    assert any("equals the default" in n for n in d["half"].notes)
    assert d["other"].relevance == 0.51 and d["other"].notes == []
    assert d["big"].relevance == 1.0
    assert any("clipped to 1" in n for n in d["big"].notes)


def test_empty_query_gives_zero_relevance_and_filters() -> None:
    inp = _input(query="  ", packets=[{"id": "p", "kind": "note", "content": "x"}])
    d = _by_id(_run(inp))
    assert d["p"].relevance == 0.0 and d["p"].status == Status.FILTERED


# --------------------------------------------------------------------------- score


def test_recency_decays_per_day_and_is_clipped() -> None:
    inp = _input(
        packets=[
            {
                "id": "h48",
                "kind": "n",
                "content": "a",
                "relevance": 0.9,
                "timestamp": (NOW - timedelta(hours=48)).isoformat(),
            },
            {
                "id": "old",
                "kind": "n",
                "content": "a",
                "relevance": 0.9,
                "timestamp": (NOW - timedelta(days=100)).isoformat(),
            },
            {
                "id": "fut",
                "kind": "n",
                "content": "a",
                "relevance": 0.9,
                "timestamp": (NOW + timedelta(hours=5)).isoformat(),
            },
        ]
    )
    d = _by_id(_run(inp))
    assert d["h48"].recency == pytest.approx(math.exp(-0.2), rel=1e-15)
    assert d["old"].recency == 0.1  # exp(-0.1 * 2400 / 24) = exp(-10) < 0.1
    assert d["fut"].recency == 1.0
    assert d["h48"].score == pytest.approx(0.7 * 0.9 + 0.3 * math.exp(-0.2), rel=1e-15)


# --------------------------------------------------------------------------- select


def test_fill_breaks_at_the_first_packet_that_does_not_fit() -> None:
    inp = _input(
        packets=[
            {"id": "a", "kind": "note", "content": "a", "relevance": 0.9, "tokens": 50},
            {"id": "big", "kind": "note", "content": "b", "relevance": 0.8, "tokens": 80},
            {"id": "small", "kind": "note", "content": "c", "relevance": 0.7, "tokens": 5},
        ]
    )
    d = _by_id(_run(inp, max_tokens=100, enable_compression=False))
    assert d["a"].status == Status.KEPT and d["a"].budget_left == 50
    assert d["big"].status == Status.DROPPED and d["big"].reason == "NO_ROOM"
    assert "needs 80 tokens, 50 left" in d["big"].reason_text
    # 5 tokens would fit in the 50 left, but the listing breaks.
    assert d["small"].status == Status.DROPPED and d["small"].reason == "AFTER_BREAK"
    assert [d[k].rank for k in ("a", "big", "small")] == [1, 2, 3]


def test_system_instructions_that_fill_the_budget_leave_nothing_else() -> None:
    instr = " ".join(["rule"] * 100)  # 130 tokens
    inp = _input(
        query="q",
        system_instructions=instr,
        packets=[{"id": "p", "kind": "note", "content": "q", "relevance": 1.0}],
    )
    res = _run(inp, max_tokens=100, enable_compression=False)
    d = _by_id(res)
    assert d["builder:instructions"].status == Status.KEPT
    assert d["builder:instructions"].reason == "MUST_KEEP"
    assert d["builder:instructions"].tokens_before == 130
    assert d["p"].status == Status.DROPPED and d["p"].reason == "BUDGET_EXHAUSTED_BY_SYSTEM"
    assert res.prompt == f"[Role & Policies]\n{instr}\n\n[Task]\nq\n\n{OUTPUT}"
    assert any("exceed the budget" in w for w in res.warnings)
    assert res.report.mustKeep == ["builder:instructions"]


# --------------------------------------------------------------------------- structure


def test_sections_and_no_state_section() -> None:
    inp = _input(
        query="deploy",
        system_instructions="Be exact.",
        packets=[
            {"id": "r1", "kind": "rag_result", "content": "deploy doc one", "relevance": 0.9},
            {"id": "k1", "kind": "knowledge", "content": "deploy fact two", "relevance": 0.8},
            {"id": "s1", "kind": "task_state", "content": "state: deploying", "relevance": 0.7},
            {"id": "t1", "kind": "tool_result", "content": "deploy ok", "relevance": 0.6},
        ],
    )
    res = _run(inp)
    expected = (
        "[Role & Policies]\nBe exact.\n\n[Task]\ndeploy\n\n"
        "[Evidence]\ndeploy doc one\n---\ndeploy fact two\n\n"
        "[Context]\nstate: deploying\ndeploy ok\n\n" + OUTPUT
    )
    assert res.prompt == expected
    d = _by_id(res)
    assert d["s1"].partition == "[Context]" and d["r1"].partition == "[Evidence]"
    assert {p.name: p.used for p in res.partitions}["[State]"] == 0


# --------------------------------------------------------------------------- compress


def _compress_input() -> CapturedInput:
    # Selected with a caller count of 10, rendered it is "w " × 100: 100 words.
    return _input(
        query="alpha",
        packets=[
            {"id": "n", "kind": "note", "content": "w " * 100, "relevance": 0.9, "tokens": 10}
        ],
    )


def test_compression_cuts_a_block_by_chars_per_token_and_can_exceed_the_budget() -> None:
    res = _run(_compress_input(), max_tokens=60)
    # Blocks: "[Task]\nalpha" = 2 words -> 2 tokens; "[Context]\n" + "w "*100 = 101 words
    # -> 131 tokens and 210 chars; 58 left > 50 -> int(58 * 210/131) = 92 chars kept.
    assert int(58 * (210 / 131)) == 92
    expected = "[Task]\nalpha\n\n[Context]\n" + "w " * 41 + MARKER
    assert res.prompt == expected
    d = _by_id(res)["n"]
    assert d.status == Status.TRUNCATED and d.reason == "TRUNCATED_BY_COMPRESS"
    assert d.tokens_after == int(41 * 1.3) == 53
    # Final: 47 words + 5 CJK chars = int(66.1) = 66 tokens > 60.
    assert res.totals.used == est(expected) == 66
    assert any("over the budget of 60" in w for w in res.warnings)
    assert any("[Output]" in w for w in res.warnings)


def test_compression_below_the_50_token_floor_drops_the_rest_without_marker() -> None:
    res = _run(_compress_input(), max_tokens=40)
    # 38 left after [Task] is not more than 50: nothing of the block is kept.
    assert res.prompt == "[Task]\nalpha"
    d = _by_id(res)["n"]
    assert d.status == Status.DROPPED and d.reason == "REMOVED_BY_COMPRESS"
    assert d.budget_left == 38


def test_no_compression_returns_the_whole_prompt() -> None:
    res = _run(_compress_input(), max_tokens=60, enable_compression=False)
    assert res.prompt == "[Task]\nalpha\n\n[Context]\n" + "w " * 100 + "\n\n" + OUTPUT
    assert res.totals.used == est(res.prompt) == 152


def test_same_input_gives_identical_result_except_timings() -> None:
    a = _run(_compress_input(), max_tokens=60).model_dump(mode="json")
    b = _run(_compress_input(), max_tokens=60).model_dump(mode="json")
    a.pop("timings")
    b.pop("timings")
    assert a == b


def test_tool_definitions_are_not_in_the_prompt_and_say_so() -> None:
    inp = _input(query="q", tools=[{"name": "grep", "description": "search files"}])
    res = _run(inp)
    assert "grep" not in res.prompt
    assert any("1 tool definition(s)" in w for w in res.warnings)
