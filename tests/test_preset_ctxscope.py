"""The ``ctxscope`` preset end to end, with the real tokenizer and real corpus text."""

from __future__ import annotations

import itertools
import random
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ctxcore.errors import BudgetError, InputError
from ctxcore.models import CapturedInput, Config, Decision, Message, Packet, Reason, Status
from ctxcore.pipeline import build, knobs, resolve_config
from ctxcore.tokens import get_counter

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from corpus_input import corpus_input  # noqa: E402

NOW = datetime(2026, 1, 24, 14, 0, tzinfo=UTC)
IN = (Status.KEPT, Status.TRUNCATED, Status.SUMMARIZED)


def _read(corpus: Path, name: str) -> str:
    return (corpus / name).read_bytes().decode("utf-8")


def _p(pid: str, kind: str, content: str, hours: float = 1.0, **kw: object) -> Packet:
    return Packet(id=pid, kind=kind, content=content, timestamp=NOW - timedelta(hours=hours), **kw)


def _inp(query: str, packets: list[Packet], **kw: object) -> CapturedInput:
    return CapturedInput(query=query, now=NOW, packets=packets, **kw)


def _by_id(decisions: list[Decision]) -> dict[str, Decision]:
    return {d.packet_id: d for d in decisions}


@pytest.fixture(scope="module")
def big() -> CapturedInput:
    return corpus_input(150)


# --------------------------------------------------------------------------- config


def test_resolve_fills_every_knob() -> None:
    cfg = resolve_config(Config(), _inp("q", [], window=16000))
    assert all(getattr(cfg, k) is not None for k in knobs("ctxscope"))
    assert cfg.max_tokens == 16000
    assert cfg.output_reserve == round(0.15 * 16000)
    assert cfg.tokenizer == "cl100k_base" and cfg.fill == "skip"
    assert set(cfg.partition_budgets or {}) == {
        "[Role & Policies]", "[Task]", "[State]", "[Evidence]", "[Context]", "[Output]",
    }  # fmt: skip
    assert resolve_config(Config(), _inp("q", [], output_reserve=500)).output_reserve == 500
    assert resolve_config(Config(), _inp("q", [])).max_tokens == 8000


@pytest.mark.parametrize(
    ("cfg", "knob"),
    [
        (Config(degrade=["noise", "shrink"]), "degrade"),
        (Config(max_tokens=1000, output_reserve=1000), "output_reserve"),
        (Config(max_tokens=1000, output_reserve=500, safety_margin=600), "safety_margin"),
        (Config(tokenizer="gpt-17"), "tokenizer"),
    ],
)
def test_resolve_errors_name_the_knob(cfg: Config, knob: str) -> None:
    with pytest.raises(InputError, match=knob):
        resolve_config(cfg, _inp("q", []))


def test_packet_ids_of_builder_packets_are_reserved() -> None:
    inp = _inp(
        "q", [_p("builder:history:0", "note", "x")], history=[Message(role="user", content="hi")]
    )
    with pytest.raises(InputError, match=r"packets\[0\]\.id 'builder:history:0'"):
        build(inp)


# --------------------------------------------------------------------------- budget


def test_prompt_token_count_is_exactly_the_charged_total(big: CapturedInput) -> None:
    r = build(big, Config(max_tokens=9000))
    counter = get_counter("cl100k_base")
    assert counter.count(r.prompt) == r.totals.used <= r.totals.available
    assert r.totals.available == 9000 - r.totals.output_reserve - r.totals.safety_margin
    assert sum(p.used for p in r.partitions) == r.totals.used  # headers + output charged
    assert r.prompt.startswith("[Role & Policies]\n")
    assert "[Task]\n## builder:query\n" + big.query in r.prompt and "[Output]\n" in r.prompt


@pytest.mark.parametrize("tokenizer", ["cl100k_base", "o200k_base"])
def test_counts_stay_exact_when_text_starts_with_a_slash(corpus: Path, tokenizer: str) -> None:
    # o200k glues "/..." to a preceding "]\n"; every segment starts with "## " to prevent it
    inp = _inp(
        "/usr/bin/env python: why does //x fail",
        [_p("tool:x", "tool_result", "/usr/bin/env: python: not found\n//x fails")],
        system_instructions="/// You are a shell expert.",
    )
    r = build(inp, Config(tokenizer=tokenizer))
    assert get_counter(tokenizer).count(r.prompt) == r.totals.used


def test_never_exceeds_budget_over_random_configs(big: CapturedInput) -> None:
    rng = random.Random(7)
    counters = {name: get_counter(name) for name in ("cl100k_base", "o200k_base")}
    for k in range(36):
        tokenizer = "o200k_base" if k % 6 == 0 else "cl100k_base"
        cfg = Config(
            tokenizer=tokenizer,
            max_tokens=rng.randint(4500, 30000),
            output_reserve=rng.choice([None, rng.randint(0, 1500)]),
            min_relevance=round(rng.uniform(0, 0.4), 3),
            relevance_weight=round(rng.random(), 2),
            recency_weight=round(rng.random(), 2),
            priority_weight=round(rng.random(), 2),
            fill=rng.choice(["skip", "break", "optimal"]),
            history_limit=rng.randint(0, 30),
            partition_budgets={"[Evidence]": round(rng.uniform(0.1, 1), 2)},
            degrade=rng.choice([None, ["noise", "tool_results"], ["recent", "history"], []]),
        )
        try:
            r = build(big, cfg)
        except BudgetError:
            continue  # must-keep items alone overflow a tiny budget: a loud error is right
        real = counters[tokenizer].count(r.prompt)
        assert real == r.totals.used <= r.totals.available, cfg


def test_estimator_tokenizer_is_kept_under_budget_by_compress(big: CapturedInput) -> None:
    r = build(big, Config(tokenizer="len/4", max_tokens=9000))
    assert get_counter("len/4").count(r.prompt) <= r.totals.available
    assert r.totals.tokenizer == "len/4"


# --------------------------------------------------------------------------- decisions


def test_every_candidate_has_a_decision_with_reasons(big: CapturedInput) -> None:
    r = build(big)
    ids = [d.packet_id for d in r.decisions]
    expected = {p.id for p in big.packets} | {"builder:instructions", "builder:tools"}
    expected |= {f"builder:history:{k}" for k in range(len(big.history))}
    assert expected <= set(ids)
    assert len(ids) == len(set(ids))
    for d in r.decisions:
        assert d.reason_text and d.tokens_before >= d.tokens_after >= 0
        assert Decision.model_validate(d.model_dump()) == d  # the fast path builds valid ones
        if d.status in IN:
            assert d.tokens_after > 0 or d.packet_id.startswith("builder:history")
    for d in r.decisions:
        if d.reason == Reason.NO_ROOM:
            need, left = (
                int(x.replace(",", "")) for x in re.findall(r"\d[\d,]*", d.reason_text)[:2]
            )
            assert need > left == d.budget_left
    assert r.report.budget == r.totals.available
    assert set(r.report.mustKeep) >= {"builder:instructions", "task:issue-1867", "state:plan"}


def test_determinism_identical_json_except_timings(big: CapturedInput) -> None:
    a = build(big)
    copy = CapturedInput.model_validate_json(big.model_dump_json())
    b = build(copy)
    assert a.model_dump_json(exclude={"timings"}) == b.model_dump_json(exclude={"timings"})


# --------------------------------------------------------------------------- relevance


def test_english_query_ranks_the_matching_log_first(corpus: Path) -> None:
    pip = _read(corpus, "d05_pip_install_editable_marshmallow.log")
    tsc = _read(corpus, "d09_tsc_output_first1500_of_18741_errors.txt")[:3000]
    r = build(
        _inp(
            "why did pip install marshmallow editable",
            [_p("tool:pip", "tool_result", pip), _p("tool:tsc", "tool_result", tsc)],
        )
    )
    d = _by_id(r.decisions)
    assert d["tool:pip"].relevance > 0.3 > d["tool:tsc"].relevance  # type: ignore[operator]
    assert d["tool:pip"].status == Status.KEPT
    # "why did" are stop words: nothing of the query is in the tsc dump; but it is the
    # latest error output and the last tool result: fresh evidence is placed first, not
    # filtered (issue 13)
    assert d["tool:tsc"].relevance == 0.0
    assert d["tool:tsc"].status == Status.KEPT and d["tool:tsc"].rank == 1
    assert "fresh evidence: placed ahead of the ranked fill" in d["tool:tsc"].notes
    assert d["tool:pip"].rank == 2


def test_chinese_query_matches_chinese_content(corpus: Path) -> None:
    zh = _read(corpus, "c01_zh_opencode_session_ses_4398.md")
    jest = _read(corpus, "d06_jest_failure_zh_xresolver.log")
    r = build(
        _inp(
            "分析这个项目的架构",
            [
                _p("note:arch", "note", zh[:2500]),
                _p("tool:jest", "tool_result", jest),
                _p("note:en", "note", "Unrelated English text only."),
            ],
        )
    )
    d = _by_id(r.decisions)
    assert d["note:arch"].relevance > 0  # type: ignore[operator]
    assert d["note:arch"].status in IN
    assert d["note:en"].relevance == 0 and d["note:en"].status == Status.FILTERED


def test_mixed_query_uses_both_scripts(corpus: Path) -> None:
    jest = _read(corpus, "d06_jest_failure_zh_xresolver.log")
    pip = _read(corpus, "d05_pip_install_editable_marshmallow.log")
    r = build(
        _inp(
            "jest 测试失败 xresolver",
            [_p("tool:jest", "tool_result", jest), _p("tool:pip", "tool_result", pip)],
        )
    )
    d = _by_id(r.decisions)
    assert d["tool:jest"].relevance > d["tool:pip"].relevance  # type: ignore[operator]
    assert d["tool:jest"].status in IN


def test_caller_relevance_is_respected(corpus: Path) -> None:
    pip = _read(corpus, "d05_pip_install_editable_marshmallow.log")
    r = build(
        _inp("marshmallow install", [
            _p("mem:boss", "memory", "Deploys happen on Fridays.", relevance=0.9),
            _p("tool:pip", "tool_result", pip, relevance=0.0),
        ])
    )  # fmt: skip
    d = _by_id(r.decisions)
    assert d["mem:boss"].relevance == 0.9 and d["mem:boss"].status == Status.KEPT
    assert any("caller relevance 0.9" in n for n in d["mem:boss"].notes)
    assert d["tool:pip"].relevance == 0.0
    assert d["tool:pip"].reason == Reason.BELOW_MIN_RELEVANCE


def test_empty_query_warns_and_ranks_by_recency(corpus: Path) -> None:
    log = _read(corpus, "d11_nextjs_dev-server.log")
    r = build(
        _inp(
            "",
            [
                _p("tool:old", "tool_result", log, hours=20),
                _p("note:new", "note", "fresh note", hours=0.1),
            ],
        ),
        # the log is this turn's only tool result: without its signals' weight, recency ranks
        Config(current_turn_weight=0.0, error_weight=0.0),
    )
    assert any("no searchable terms" in w for w in r.warnings)
    d = _by_id(r.decisions)
    assert d["note:new"].score > d["tool:old"].score  # type: ignore[operator]
    assert d["tool:old"].status in IN


# --------------------------------------------------------------------------- must-keep


def test_must_keep_overflow_names_the_items(corpus: Path) -> None:
    rst = _read(corpus, "d01_pytest_reportingdemo_44_failures.rst")
    inp = _inp(
        "q",
        [
            _p("note:a", "note", rst[:6000], must_keep=True),
            _p("note:b", "constraint", rst[6000:12000]),
            _p("note:c", "note", "small and optional"),
        ],
    )
    with pytest.raises(BudgetError) as err:
        build(inp, Config(max_tokens=2000))
    msg = str(err.value)
    assert "note:a" in msg and "note:b" in msg and "note:c" not in msg
    assert err.value.packet_ids == ["note:a", "note:b"]
    assert "max_tokens" in msg


def test_must_keep_items_first_and_latest_failure_detected(corpus: Path) -> None:
    d02 = _read(corpus, "d02_pytest_requests_157_errors_truncated.txt")
    d06 = _read(corpus, "d06_jest_failure_zh_xresolver.log")
    inp = _inp(
        "why do the tests fail",
        [
            _p("tool:old_fail", "tool_result", d02, hours=3, metadata={"exit_code": 1}),
            _p("tool:new_fail", "tool_result", d06, hours=0.5, metadata={"exit_code": 1}),
            _p("plan:1", "plan", "1. reproduce 2. fix"),
            _p("task:1", "task", "make the suite green"),
        ],
        system_instructions="You are a careful engineer.",
    )
    r = build(inp)
    d = _by_id(r.decisions)
    for pid, why in [
        ("tool:new_fail", "latest failure"),
        ("plan:1", "active plan"),
        ("task:1", "current task"),
        ("builder:instructions", "system"),
    ]:
        assert d[pid].reason == Reason.MUST_KEEP and why in d[pid].reason_text
    assert d["tool:old_fail"].reason != Reason.MUST_KEEP
    assert r.prompt.index("[State]") < r.prompt.index("## plan:1")
    # a caller flag names the latest failure explicitly; error flags count as failures
    flagged = inp.model_copy(
        update={
            "packets": [
                _p("tool:a", "tool_result", d02, hours=3, metadata={"latest_failure": True}),
                _p("tool:b", "tool_result", d06, hours=0.5, metadata={"is_error": True}),
            ]
        }
    )
    d = _by_id(build(flagged).decisions)
    assert d["tool:a"].reason == Reason.MUST_KEEP and d["tool:b"].reason != Reason.MUST_KEEP
    no_flag = flagged.model_copy(
        update={"packets": [flagged.packets[0].model_copy(update={"metadata": {}}),
                            flagged.packets[1]]}
    )  # fmt: skip
    d = _by_id(build(no_flag).decisions)
    assert d["tool:b"].reason == Reason.MUST_KEEP


def test_must_keep_logs_are_summarized_in_ladder_order(corpus: Path) -> None:
    log = _read(corpus, "d09_tsc_output_first1500_of_18741_errors.txt")[:12000]
    code = _read(corpus, "d10_aider_repo_map_show-repo_2024-08-05.md")[:12000]
    packets = [
        _p("tool:tsc", "tool_result", log, must_keep=True),
        _p("file:map.md", "file", code, must_keep=True),
    ]
    counter = get_counter("cl100k_base")
    sizes = counter.count_many([log, code])
    # room for one of the two at full size, not both
    budget = int(sum(sizes) * 0.8)
    base = Config(max_tokens=budget + 400, output_reserve=0, safety_margin=0)

    r = build(_inp("q", packets), base)
    d = _by_id(r.decisions)
    assert d["tool:tsc"].status == Status.SUMMARIZED
    assert "degrade step 3: tool_results" in d["tool:tsc"].reason_text
    assert d["file:map.md"].status == Status.KEPT  # stopped as soon as it fit
    assert "source id tool:tsc" in r.prompt

    files_first = base.model_copy(
        update={"degrade": ["noise", "history", "files", "tool_results", "repo_map", "recent"]}
    )
    r2 = build(_inp("q", packets), files_first)
    d2 = _by_id(r2.decisions)
    assert d2["file:map.md"].status == Status.SUMMARIZED
    assert "degrade step 3: files" in d2["file:map.md"].reason_text
    assert d2["tool:tsc"].status == Status.KEPT
    for res in (r, r2):
        assert counter.count(res.prompt) == res.totals.used <= res.totals.available


# --------------------------------------------------------------------------- degrade


def test_big_tool_log_is_summarized_before_it_would_be_dropped(corpus: Path) -> None:
    d09 = _read(corpus, "d09_tsc_output_first1500_of_18741_errors.txt")
    d11 = _read(corpus, "d11_nextjs_dev-server.log")
    inp = _inp(
        "tsc error TS1005 page.tsx",
        [_p("tool:tsc", "tool_result", d09[:30000]), _p("tool:next", "tool_result", d11)],
    )
    r = build(inp, Config(max_tokens=6000))
    d = _by_id(r.decisions)
    tsc = d["tool:tsc"]
    assert tsc.status == Status.SUMMARIZED and tsc.reason == Reason.DEGRADED
    assert re.match(r"needs [\d,]+ tokens, [\d,]+ left; tool log summarized to", tsc.reason_text)
    assert tsc.tokens_after < tsc.tokens_before
    marker = f"[… {tsc.tokens_before:,} tokens of tool:tsc summarized; source id tool:tsc …]"
    assert marker in r.prompt
    assert "error TS1005" in r.prompt
    assert "tool:tsc" in r.report.summarized


def test_old_history_folds_into_a_structured_summary(corpus: Path) -> None:
    msgs = [
        Message(role="user", content="Fix TimeDelta rounding. Do not change the public API."),
        Message(role="assistant", content="I will open src/marshmallow/fields.py first."),
    ] + [
        Message(role="assistant" if k % 2 else "user", content=f"step {k}: looked at fields.py")
        for k in range(8)
    ]
    inp = _inp("TimeDelta rounding", [], history=msgs)
    r = build(inp, Config(history_limit=4))
    d = _by_id(r.decisions)
    summary = d["builder:history:summary"]
    assert summary.status == Status.KEPT and summary.reason == Reason.DEGRADED
    for k in range(6):
        assert d[f"builder:history:{k}"].status == Status.SUMMARIZED
        assert "degrade step 2: history" in d[f"builder:history:{k}"].reason_text
    for k in range(6, 10):
        assert d[f"builder:history:{k}"].status == Status.KEPT
    assert "Range covered: builder:history:0 … builder:history:5" in r.prompt
    assert "Do not change the public API" in r.prompt  # the user constraint survives
    assert "source ids builder:history:0 … builder:history:5" in r.prompt
    # chronological: the summary comes before the recent messages
    assert r.prompt.index("builder:history:summary") < r.prompt.index("## builder:history:6")
    # the default summarizer reads the old history while tokens are counted (prefetch);
    # the same summarizer without that hook, on a fresh gather, writes the same summary
    from ctxcore.pipeline.gather import PREPARED
    from ctxcore.summarize import ExtractiveSummarizer, _history_notes

    PREPARED.clear()
    _history_notes.cache_clear()
    plain = ExtractiveSummarizer()
    again = build(inp, Config(history_limit=4), summarizer=lambda k, c, t: plain(k, c, t))
    assert again.prompt == r.prompt


def test_recent_message_shortened_with_marker(corpus: Path) -> None:
    d09 = _read(corpus, "d09_tsc_output_first1500_of_18741_errors.txt")[:20000]
    inp = _inp("tsc errors", [], history=[Message(role="tool", content=d09)])
    r = build(inp, Config(max_tokens=3000, degrade=["noise", "recent"]))
    d = _by_id(r.decisions)["builder:history:0"]
    assert d.status == Status.TRUNCATED and "degrade step 2: recent" in d.reason_text
    assert "tokens of builder:history:0 cut; source id builder:history:0" in r.prompt


def test_noise_duplicates_and_empties_dropped(corpus: Path) -> None:
    log = _read(corpus, "d11_nextjs_dev-server.log")
    r = build(
        _inp(
            "next dev compile",
            [
                _p("tool:a", "tool_result", log),
                _p("tool:b", "tool_result", log),
                _p("note:e", "note", "  \n "),
            ],
        )
    )
    d = _by_id(r.decisions)
    assert d["tool:b"].reason == Reason.DUPLICATE and "tool:a" in d["tool:b"].reason_text
    assert d["note:e"].reason == Reason.EMPTY
    assert d["tool:a"].status == Status.KEPT


# --------------------------------------------------------------------------- partitions


def test_partition_caps_limit_evidence_but_not_context(corpus: Path) -> None:
    texts = [
        _read(corpus, n)
        for n in (
            "d11_nextjs_dev-server.log",
            "d12_npm-debug.log",
            "d05_pip_install_editable_marshmallow.log",
        )
    ]
    packets = [_p(f"tool:{k}", "tool_result", t) for k, t in enumerate(texts)]
    packets += [_p(f"note:{k}", "note", f"copied into a note:\n{t}") for k, t in enumerate(texts)]
    packets = [p.model_copy(update={"relevance": 0.9}) for p in packets]
    cfg = Config(max_tokens=30000, partition_budgets={"[Evidence]": 0.1}, degrade=["noise"])
    r = build(_inp("npm", packets), cfg)
    parts = {p.name: p for p in r.partitions}
    ev = parts["[Evidence]"]
    assert ev.budget == int(0.1 * r.totals.available) and ev.used <= ev.budget
    d = _by_id(r.decisions)
    assert any(d[f"tool:{k}"].reason == Reason.PARTITION_FULL for k in range(3))
    assert all(d[f"note:{k}"].status == Status.KEPT for k in range(3))
    assert parts["[Context]"].items == 3


def test_all_six_partitions_render_in_order(corpus: Path) -> None:
    inp = _inp(
        "fix the failing test",
        [
            _p("state:s", "state", "branch fix-1 checked out"),
            _p("ev:e", "evidence", "the failing test is test_timedelta"),
            _p("note:n", "note", "the failing test started on Monday"),
        ],
        system_instructions="Be brief.",
    )
    r = build(inp)
    heads = ["[Role & Policies]", "[Task]", "[State]", "[Evidence]", "[Context]", "[Output]"]
    pos = [r.prompt.index(h + "\n") for h in heads]
    assert pos == sorted(pos)


# --------------------------------------------------------------------------- fill


def _fill_input(corpus: Path) -> CapturedInput:
    names = [
        "d02_pytest_requests_157_errors_truncated.txt",
        "d11_nextjs_dev-server.log",
        "d12_npm-debug.log",
        "d06_jest_failure_zh_xresolver.log",
        "d05_pip_install_editable_marshmallow.log",
        "d08_find_grep_sigpipe_spam.log",
    ]
    packets = []
    for k, n in enumerate(names):
        text = _read(corpus, n)
        for j, cut in enumerate((len(text), len(text) // 3, len(text) // 9)):
            rel = {"ev:5-0": 0.99, "ev:2-0": 0.95}.get(f"ev:{k}-{j}", 0.2 + 0.07 * ((k + j) % 9))
            packets.append(
                _p(f"ev:{k}-{j}", "evidence", text[:cut] + f"\nvariant {j}", relevance=rel)
            )
    return _inp("q", packets)


def _total_score(r: object) -> float:
    return sum(
        d.score or 0.0
        for d in r.decisions  # type: ignore[attr-defined]
        if d.status == Status.KEPT and d.reason == Reason.FITS
    )


def test_skip_break_optimal(corpus: Path) -> None:
    inp = _fill_input(corpus)
    base = dict(max_tokens=7000, degrade=["noise"], partition_budgets={"[Evidence]": 1.0})
    res = {m: build(inp, Config(fill=m, **base)) for m in ("skip", "break", "optimal")}  # type: ignore[arg-type]
    kept = {m: {d.packet_id for d in r.decisions if d.status == Status.KEPT}
            for m, r in res.items()}  # fmt: skip
    assert kept["break"] < kept["skip"]  # break stops; skip keeps trying smaller ones
    assert any(d.reason == Reason.AFTER_BREAK for d in res["break"].decisions)
    assert _total_score(res["optimal"]) >= _total_score(res["skip"])
    for r in res.values():
        assert r.totals.used <= r.totals.available


def test_optimal_matches_brute_force_on_a_small_input(corpus: Path) -> None:
    inp = _fill_input(corpus)
    inp = inp.model_copy(update={"packets": inp.packets[:10]})
    cfg = Config(max_tokens=5000, output_reserve=0, safety_margin=0, fill="optimal",
                 degrade=[], partition_budgets={"[Evidence]": 1.0}, min_relevance=0.0)  # fmt: skip
    r = build(inp, cfg)
    avail = r.totals.available
    fixed = sum(p.used for p in r.partitions if p.name in ("[Task]", "[Output]"))
    head = get_counter("cl100k_base").count("[Evidence]\n")
    items = [(d.tokens_before, d.score or 0.0) for d in r.decisions]
    best = 0.0
    for n in range(len(items) + 1):
        for combo in itertools.combinations(items, n):
            size = sum(t for t, _ in combo) + (head if combo else 0)
            if fixed + size <= avail:
                best = max(best, sum(s for _, s in combo))
    assert _total_score(r) == pytest.approx(best, abs=0.002)


# --------------------------------------------------------------------------- caching


def test_rerun_counts_nothing_new_and_equal_copies_share_the_gather(big: CapturedInput) -> None:
    from ctxcore.pipeline.gather import prepare
    from ctxcore.tokens import TokenCounter

    counter = TokenCounter("cl100k_base")  # a fresh cache
    # no ladder: degraded versions are new texts and would be counted (once) too
    first = build(big, Config(max_tokens=7000, degrade=["noise"]), counter=counter)
    misses = counter.misses
    assert misses > len(big.packets) // 2  # every distinct segment was counted once
    again = build(
        big, Config(max_tokens=9000, relevance_weight=0.2, degrade=["noise"]), counter=counter
    )
    assert counter.misses == misses  # a re-run with other knobs counts nothing new
    assert again.totals.used != first.totals.used
    copy = CapturedInput.model_validate_json(big.model_dump_json())
    assert prepare(copy, counter) is prepare(big, counter)
    changed = copy.model_copy(update={"query": "something else"})
    assert prepare(changed, counter) is not prepare(big, counter)
    # same query, time and sizes (its content is hashed up front), one packet different
    packets = list(copy.packets)
    packets[7] = packets[7].model_copy(update={"content": packets[7].content + " (edited)"})
    edited = copy.model_copy(update={"packets": packets})
    assert prepare(edited, counter) is not prepare(big, counter)
    prep = prepare(edited, counter)
    assert prep.items[prep.index_of[packets[7].id]].text.endswith("(edited)")
    # and an equal copy of the edited one, made after it was cached, finds it
    assert prepare(edited.model_copy(deep=True), counter) is prepare(edited, counter)


def test_a_pluggable_summarizer_is_used_with_the_source_marker(corpus: Path) -> None:
    d09 = _read(corpus, "d09_tsc_output_first1500_of_18741_errors.txt")[:30000]
    calls: list[tuple[str, int]] = []

    def llm_like(kind: str, content: str, target: int) -> str:
        calls.append((kind, target))
        return f"SUMMARY({kind}): {content.count(chr(10)) + 1} lines of tsc errors"

    r = build(_inp("error TS1005", [_p("tool:tsc", "tool_result", d09)]),
              Config(max_tokens=3000), summarizer=llm_like)  # fmt: skip
    d = _by_id(r.decisions)["tool:tsc"]
    assert d.status == Status.SUMMARIZED
    assert calls and calls[0][0] == "tool_result" and calls[0][1] > 0
    assert "SUMMARY(tool_result): " in r.prompt
    assert "source id tool:tsc" in r.prompt


def test_decisions_copy_with_updates_like_validated_ones() -> None:
    """Decisions are built without re-validation for speed; they still behave as models."""
    import app_support as data

    from ctxcore.models import Decision

    trace = data.session("copy-s", 1)[0]
    assert trace.result is not None
    d = trace.result.decisions[0]
    moved = d.model_copy(update={"reason": "changed"})
    assert moved.reason == "changed" and d.reason != "changed"
    assert Decision.model_validate(d.model_dump()) == d


def test_outcome_is_what_run_decides() -> None:
    """``ctxscope.outcome`` (the plan alone, for the diagnostics' re-runs) lists the same ids,
    statuses and scores in the same order, the same tokens used and the same prompt, as a
    full build."""
    from ctxcore.models import Trace
    from ctxcore.pipeline import ctxscope
    from ctxcore.pipeline.gather import HISTORY_SUMMARY_ID

    demo = Path(__file__).resolve().parent.parent / "ctxcore" / "data" / "demo"
    counter = get_counter("cl100k_base")
    cases = 0
    summaries = 0
    for name in ("swe-pytest-7571.jsonl", "zh-opencode-codesummary-ctxscope.jsonl"):
        lines = (demo / name).read_text(encoding="utf-8").splitlines()
        for line in lines[::5]:
            t = Trace.model_validate_json(line)
            for patch in ({}, {"fill": "optimal"}, {"fill": "break"}, {"history_limit": 2}):
                cfg = resolve_config(t.config.model_copy(update=patch), t.input)
                full = ctxscope.run(t.input, cfg, counter, reasons=False)
                got = ctxscope.outcome(t.input, cfg, counter, prompt=True)
                assert got.prompt == full.prompt
                assert ctxscope.outcome(t.input, cfg, counter).prompt is None
                assert got.ids == [d.packet_id for d in full.decisions]
                assert got.statuses == [d.status for d in full.decisions]
                assert got.scores == [d.score for d in full.decisions]
                assert got.used == full.totals.used
                cases += 1
                summaries += HISTORY_SUMMARY_ID in got.ids
    assert cases >= 40 and summaries >= 5  # the history summary's place is covered
    with pytest.raises(ValueError, match="exact tokenizer"):
        ctxscope.outcome(t.input, cfg, get_counter("len/4"))
