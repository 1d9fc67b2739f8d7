"""Counterfactual fixes: the smallest single change that keeps a packet, verified by re-running.

Expected values are derived independently of the search (from the preset's documented
budget formula, or by solving the score inequality by hand), and every returned patch is
re-built here to check it keeps the packet while one step less does not.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ctxcore.diagnostics import counterfactuals, rebuild, smallest_fix
from ctxcore.diagnostics.counterfactual import searched_knobs
from ctxcore.errors import InputError
from ctxcore.models import CapturedInput, Config, Packet, Status, Trace
from ctxcore.pipeline import build_trace
from ctxcore.tokens import book_estimate, get_counter

NOW = datetime(2026, 1, 16, 12, 0, tzinfo=UTC)
QUERY = "fix qualname autodoc failure"


def corpus_text(corpus: Path, name: str, limit: int) -> str:
    return (corpus / name).read_text(encoding="utf-8")[:limit]


def trace_of(packets: list[Packet], **cfg: object) -> Trace:
    inp = CapturedInput(query=QUERY, now=NOW, packets=packets)
    return build_trace(inp, Config(**cfg), trace_id="cf")  # type: ignore[arg-type]


def status_with(trace: Trace, patch: dict[str, object], pid: str) -> Status:
    result = rebuild(trace, patch)
    assert result is not None
    return next(d.status for d in result.decisions if d.packet_id == pid)


def pk(pid: str, content: str, hours_ago: float = 0, **kw: object) -> Packet:
    return Packet(
        id=pid,
        kind="tool_result",
        content=content,
        timestamp=NOW - timedelta(hours=hours_ago),
        **kw,  # type: ignore[arg-type]
    )


# --------------------------------------------------------------------------- hello-agents


def _grep_and_pytest(corpus: Path) -> list[Packet]:
    grep = QUERY + "\n" + corpus_text(corpus, "d04_grep_r_qualname_sphinx.txt", 6000)
    failure = "fix qualname\n" + corpus_text(
        corpus, "d01_pytest_reportingdemo_44_failures.rst", 3000
    )
    return [pk("tool:grep", grep), pk("tool:pytest", failure, 0.5)]


def test_max_tokens_fix_is_the_smallest_that_fits(corpus: Path) -> None:
    packets = _grep_and_pytest(corpus)
    t = trace_of(packets, preset="hello-agents", max_tokens=2500)
    assert status_with(t, {}, "tool:pytest") == Status.DROPPED
    counter = get_counter("cl100k_base")
    needed = sum(counter.count(p.content) for p in packets)
    # hello-agents 0.2.8: budget = int(max_tokens × (1 − 0.15)); smallest max_tokens that fits both
    expected = next(m for m in range(2500, 20_000) if int(m * 0.85) >= needed)
    found = {cf.knob: cf for cf in counterfactuals(t, "tool:pytest")}
    cf = found["max_tokens"]
    assert cf.new == expected and cf.patch == {"max_tokens": expected}
    assert cf.label == f"max_tokens +{expected - 2500:,}"
    assert status_with(t, cf.patch, "tool:pytest") == Status.KEPT
    assert status_with(t, {"max_tokens": expected - 1}, "tool:pytest") != Status.KEPT
    assert "tool:pytest" in cf.sentence and "verified" in cf.sentence


def test_reserve_ratio_fix(corpus: Path) -> None:
    packets = _grep_and_pytest(corpus)
    counter = get_counter("cl100k_base")
    needed = sum(counter.count(p.content) for p in packets)
    max_tokens = math.ceil(needed / 0.9)  # fits with a reserve of 10%, not with 15%
    t = trace_of(packets, preset="hello-agents", max_tokens=max_tokens)
    assert status_with(t, {}, "tool:pytest") == Status.DROPPED
    expected = max(r for r in range(15) if int(max_tokens * (1 - r / 100)) >= needed) / 100
    cf = {c.knob: c for c in counterfactuals(t, "tool:pytest")}["reserve_ratio"]
    assert cf.new == expected and cf.label == f"reserve_ratio ≤ {expected:.2f}"
    assert status_with(t, cf.patch, "tool:pytest") == Status.KEPT


def test_min_relevance_fix_for_a_filtered_packet(corpus: Path) -> None:
    log = corpus_text(corpus, "d12_npm-debug.log", 2000)
    # one of the four query words: relevance 0.25 under hello-agents, below its 0.3 default
    t = trace_of([pk("tool:npm", "autodoc\n" + log)], preset="hello-agents")
    assert status_with(t, {}, "tool:npm") == Status.FILTERED
    fix = smallest_fix(t, "tool:npm")
    assert fix is not None and fix.knob == "min_relevance"
    assert fix.patch == {"min_relevance": 0.25} and fix.label == "min_relevance ≤ 0.25"
    assert status_with(t, fix.patch, "tool:npm") == Status.KEPT
    assert status_with(t, {"min_relevance": 0.26}, "tool:npm") == Status.FILTERED


def test_a_kept_packet_needs_no_fix(corpus: Path) -> None:
    t = trace_of(_grep_and_pytest(corpus), preset="hello-agents", max_tokens=20_000)
    assert counterfactuals(t, "tool:pytest") == []


def test_unknown_packet_and_knob_are_input_errors(corpus: Path) -> None:
    t = trace_of(_grep_and_pytest(corpus), preset="hello-agents", max_tokens=2500)
    with pytest.raises(InputError, match="no decision for packet 'tool:nope'"):
        counterfactuals(t, "tool:nope")
    with pytest.raises(InputError, match="unknown knob"):
        counterfactuals(t, "tool:pytest", knobs=["temperature"])


def test_a_trace_the_preset_does_not_reproduce_gets_no_fix(corpus: Path) -> None:
    t = trace_of(_grep_and_pytest(corpus), preset="hello-agents", max_tokens=20_000)
    assert t.result is not None
    # an imported trace whose recorded decision our re-run does not reproduce
    edited = [
        d.model_copy(update={"status": Status.DROPPED}) if d.packet_id == "tool:pytest" else d
        for d in t.result.decisions
    ]
    odd = t.model_copy(update={"result": t.result.model_copy(update={"decisions": edited})})
    assert counterfactuals(odd, "tool:pytest") == []


# --------------------------------------------------------------------------- hello-agents-book


def _words(n: int, seed: str) -> str:
    return " ".join(f"{seed}{i}" for i in range(n))


def test_relevance_weight_fix_keeps_the_sum_the_book_requires() -> None:
    # T: fresh but barely relevant; C: highly relevant but old (recency clipped to 0.1).
    # Only one fits. T outranks C when 0.2w + (1 − w) > 0.9w + 0.1(1 − w), i.e. w < 0.5625.
    t_pkt = pk("note:fresh", _words(100, "t"), 0, relevance=0.2)
    c_pkt = pk("note:old", _words(100, "c"), 24 * 400, relevance=0.9)
    t = trace_of([c_pkt, t_pkt], preset="hello-agents-book", max_tokens=200)
    assert status_with(t, {}, "note:fresh") != Status.KEPT
    found = {cf.knob: cf for cf in counterfactuals(t, "note:fresh")}
    cf = found["relevance_weight"]
    assert cf.new == 0.56 and cf.label == "relevance_weight ≤ 0.56"
    assert cf.patch == {"relevance_weight": 0.56, "recency_weight": 0.44}
    assert status_with(t, cf.patch, "note:fresh") == Status.KEPT
    assert (
        status_with(t, {"relevance_weight": 0.57, "recency_weight": 0.43}, "note:fresh")
        != Status.KEPT
    )
    # the book's budget is max_tokens itself: both packets need their two estimates
    mt = found["max_tokens"]
    assert mt.new >= book_estimate(t_pkt.content) + book_estimate(c_pkt.content)
    assert status_with(t, mt.patch, "note:fresh") == Status.KEPT
    assert status_with(t, {"max_tokens": int(mt.new) - 1}, "note:fresh") != Status.KEPT
    # reserve_ratio is declared by the listing but used by no code: no verified fix from it
    assert "reserve_ratio" not in found


def test_fixes_are_sorted_smallest_first() -> None:
    t_pkt = pk("note:fresh", _words(100, "t"), 0, relevance=0.2)
    c_pkt = pk("note:old", _words(100, "c"), 24 * 400, relevance=0.9)
    t = trace_of([c_pkt, t_pkt], preset="hello-agents-book", max_tokens=200)
    found = counterfactuals(t, "note:fresh")
    assert [c.size for c in found] == sorted(c.size for c in found)
    best = smallest_fix(t, "note:fresh")
    assert best is not None and best == found[0]


# --------------------------------------------------------------------------- ctxscope


def test_ctxscope_budget_knobs_agree(corpus: Path) -> None:
    # available = max_tokens − output_reserve − safety_margin (both resolved in the trace),
    # so raising max_tokens and lowering output_reserve by the same amount are the same fix
    packets = [
        pk(
            "tool:big",
            corpus_text(corpus, "d01_pytest_reportingdemo_44_failures.rst", 9000),
            relevance=0.9,
        ),
        pk("tool:a", corpus_text(corpus, "d12_npm-debug.log", 1500), relevance=0.5),
        pk("tool:b", corpus_text(corpus, "d11_nextjs_dev-server.log", 1500), relevance=0.4),
    ]
    t = trace_of(packets, max_tokens=3000, fill="break", degrade=[])
    assert status_with(t, {}, "tool:a") != Status.KEPT
    found = {cf.knob: cf for cf in counterfactuals(t, "tool:a")}
    up, down = found["max_tokens"], found["output_reserve"]
    assert up.new - up.old == down.old - down.new > 0
    assert up.label == f"max_tokens +{int(up.new - up.old):,}"
    assert down.label == f"output_reserve −{int(down.old - down.new):,}"
    for cf in (up, down):
        assert status_with(t, cf.patch, "tool:a") == Status.KEPT
    assert status_with(t, {"max_tokens": int(up.new) - 1}, "tool:a") != Status.KEPT
    assert status_with(t, {"output_reserve": int(down.new) + 1}, "tool:a") != Status.KEPT
    # the ctxscope preset resolved reserve_ratio into output_reserve: it has no effect any more
    assert "reserve_ratio" not in found


# --------------------------------------------------------------------------- every knob


def test_history_limit_fix_reaches_back_to_a_lost_message() -> None:
    from ctxcore.models import Message

    history = [
        Message(
            role="user" if k % 2 == 0 else "assistant", content=f"{QUERY} step {k} " * 3, id=f"m{k}"
        )
        for k in range(14)
    ]
    inp = CapturedInput(query=QUERY, now=NOW, packets=[pk("tool:x", "x " * 20)], history=history)
    t = build_trace(inp, Config(preset="hello-agents"), trace_id="cf-hist")
    assert status_with(t, {}, "m1") == Status.DROPPED  # older than the last 10
    # the detectors' quick set cannot keep it; the full set can, by exactly 13 messages
    assert counterfactuals(t, "m1") == []
    found = counterfactuals(t, "m1", knobs=searched_knobs(t))
    assert "history_limit" in searched_knobs(t)
    cf = {c.knob: c for c in found}["history_limit"]
    assert cf.patch == {"history_limit": 13} and cf.label == "history_limit +3"
    # the message is now inside the one builder:history packet, which is kept
    result = rebuild(t, cf.patch)
    assert result is not None
    assert "m1" not in {d.packet_id for d in result.decisions}
    assert "step 1 " in result.prompt
    assert "step 1 " not in (rebuild(t, {"history_limit": 12}) or result).prompt


def test_partition_budget_fix(corpus: Path) -> None:
    packets = [
        pk("tool:big", corpus_text(corpus, "d01_pytest_reportingdemo_44_failures.rst", 4000)),
        pk("tool:a", "fix qualname " + corpus_text(corpus, "d12_npm-debug.log", 1500)),
    ]
    t = trace_of(packets, max_tokens=6000, degrade=[], partition_budgets={"[Evidence]": 0.2})
    assert t.result is not None
    d = next(x for x in t.result.decisions if x.packet_id == "tool:big")
    assert (d.status, d.reason.value, d.partition) == (
        Status.DROPPED,
        "PARTITION_FULL",
        "[Evidence]",
    )
    knobs = searched_knobs(t)
    assert knobs[0] == "max_tokens" and "partition_budgets" in knobs
    found = {c.knob: c for c in counterfactuals(t, "tool:big", knobs=knobs)}
    for cf in found.values():  # every answer was re-run and keeps the packet
        assert status_with(t, cf.patch, "tool:big") == Status.KEPT
    cf = found["partition_budgets[[Evidence]]"]
    budgets = cf.patch["partition_budgets"]
    assert budgets == {**t.config.partition_budgets, "[Evidence]": budgets["[Evidence]"]}
    assert cf.old == 0.2 < cf.new and cf.label == f"partition_budgets[[Evidence]] ≥ {cf.new:.2f}"
    lower = {**budgets, "[Evidence]": round(cf.new - 0.01, 2)}
    assert status_with(t, {"partition_budgets": lower}, "tool:big") != Status.KEPT


def test_a_pair_of_changes_when_no_single_one_keeps_it(corpus: Path) -> None:
    # filtered (1 of 4 query words: relevance 0.25) AND too big for the budget: lowering
    # min_relevance alone lets it in only to be dropped; a bigger budget alone keeps it out
    log = corpus_text(corpus, "d11_nextjs_dev-server.log", 6000)
    t = trace_of(
        [pk("tool:big", "autodoc\n" + log), pk("tool:ok", QUERY + " ok")],
        preset="hello-agents",
        max_tokens=1500,
    )
    assert status_with(t, {}, "tool:big") == Status.FILTERED
    assert status_with(t, {"min_relevance": 0.25}, "tool:big") != Status.KEPT
    knobs = searched_knobs(t)
    assert counterfactuals(t, "tool:big", knobs=knobs) == []
    pairs = counterfactuals(t, "tool:big", knobs=knobs, pairs=True)
    assert pairs, "a pair (min_relevance and max_tokens) keeps it"
    best = pairs[0]
    assert set(best.patch) == {"min_relevance", "max_tokens"}
    assert status_with(t, best.patch, "tool:big") == Status.KEPT
    # both halves are needed, and the budget is the smallest the pair allows
    assert status_with(t, {"min_relevance": best.patch["min_relevance"]}, "tool:big") != (
        Status.KEPT
    )
    tighter = {**best.patch, "max_tokens": best.patch["max_tokens"] - 1}
    assert status_with(t, tighter, "tool:big") != Status.KEPT
    assert "together would have kept tool:big" in best.sentence
    assert [c.size for c in pairs] == sorted(c.size for c in pairs)
