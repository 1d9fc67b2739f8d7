"""``ctxscope cost`` and the cost findings (issue 32 items 6 and 7) on real session logs.

The sessions are the Claude Code fixtures (tests/fixtures/imports/claude-code), read as
``ctxscope import`` reads them; a stuck loop and a lapsed cache are made from the /init
session by editing its lines as Claude Code would have written them. Costs are checked
against figures computed here by hand from the shipped price table's row.
"""

from __future__ import annotations

import copy
import io
import json
from contextlib import redirect_stderr, redirect_stdout
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import tiktoken

from ctxcore.cli import main
from ctxcore.cost import SHIPPED, price_table
from ctxcore.costing import costs, session_totals, thinking_turn, tool_costs
from ctxcore.formats.load import iter_traces, write_jsonl
from ctxcore.store.engines import open_store

ROOT = Path(__file__).resolve().parent.parent
CC = ROOT / "tests" / "fixtures" / "imports" / "claude-code"
INIT = CC / "ccviewer-init-session.jsonl"
SIDE = CC / "ccviewer-task-sidechain-session.jsonl"
FIELDS = {
    "session_id",
    "turn",
    "trace_id",
    "model",
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_tokens",
    "cost_usd",
    "cost_source",
    "recorded",
    "cache_break",
}
RECORDED = {
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_tokens",
    "reasoning_tokens",
}


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(list(args))
    return rc, out.getvalue(), err.getvalue()


def calls_json(*args: str) -> list[dict[str, Any]]:
    rc, out, err = run("cost", *args, "--json")
    assert rc == 0, err
    return [json.loads(line) for line in out.splitlines()]


def sonnet_row() -> dict[str, Any]:
    """The shipped row of claude-sonnet-4-20250514 (Sonnet 4.0), read from the file."""
    rows = json.loads(SHIPPED.read_text())["models"]
    row: dict[str, Any] = next(r for r in rows if r["model"] == "claude-sonnet-4-0")
    assert price_table().price("claude-sonnet-4-20250514").model == "claude-sonnet-4-0"  # type: ignore[union-attr]
    return row


def by_hand(row: dict[str, Any], inp: int, read: int, w5: int, w1: int, out: int) -> float:
    """USD of a call, from a price row in USD per million tokens."""
    uncached = inp - read - w5 - w1
    return (
        float(
            uncached * row["input"]
            + read * row["cache_read"]
            + w5 * row["cache_write_5m"]
            + w1 * row["cache_write_1h"]
            + out * row["output"]
        )
        / 1e6
    )


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def write(path: Path, objs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    return path


# --------------------------------------------------------------------------- the JSON


def test_json_has_the_issues_fields_and_the_recorded_cost_by_hand() -> None:
    got = calls_json(str(INIT))
    raw = [o for o in lines(INIT) if o.get("type") == "assistant"]
    assert len(got) == 7 and all(set(c) == FIELDS for c in got)
    assert [c["turn"] for c in got] == list(range(7))
    row = sonnet_row()
    for c in got:
        rec = c["recorded"]
        assert set(rec) == RECORDED and c["cost_source"] == "recorded"
        w5 = rec["cache_write_tokens"]  # the fixture writes 5-minute entries only
        want = by_hand(
            row, rec["input_tokens"], rec["cache_read_tokens"], w5, 0, rec["output_tokens"]
        )
        assert c["cost_usd"] == pytest.approx(want, rel=1e-12)
        # the simulation's prompt is the recorded prompt, cut into read, written, uncached
        assert c["input_tokens"] == rec["input_tokens"]
        assert c["cache_read_tokens"] + c["cache_write_tokens"] <= c["input_tokens"]
    # the first call's recorded usage, as the log's line says it
    usage = next(
        o["message"]["usage"] for o in raw if o["message"]["id"].startswith("msg_01TqDZoU")
    )
    first = got[0]["recorded"]
    assert first["cache_read_tokens"] == usage["cache_read_input_tokens"] == 4734
    assert first["input_tokens"] == (
        usage["input_tokens"]
        + usage["cache_read_input_tokens"]
        + usage["cache_creation_input_tokens"]
    )


def test_a_call_without_recorded_usage_is_priced_from_the_simulation(tmp_path: Path) -> None:
    objs = lines(INIT)
    for o in objs:
        if o.get("type") == "assistant":
            o["message"].pop("usage", None)
    got = calls_json(str(write(tmp_path / "no-usage.jsonl", objs)))
    row = sonnet_row()
    assert len(got) == 7
    for c in got:
        assert c["recorded"] is None and c["cost_source"] == "simulated"
        w = c["cache_write_tokens"]
        want = by_hand(row, c["input_tokens"], c["cache_read_tokens"], w, 0, c["output_tokens"])
        assert c["cost_usd"] == pytest.approx(want, rel=1e-12)
    # nothing recorded: the prompt is our count, the reply's tokens our count of its text
    enc = tiktoken.get_encoding("cl100k_base")
    traces = list(iter_traces(tmp_path / "no-usage.jsonl"))
    last = traces[-1]
    assert got[-1]["output_tokens"] == len(enc.encode(last.outcome.output or ""))  # type: ignore[union-attr]


def test_an_unknown_model_costs_null_never_zero(tmp_path: Path) -> None:
    objs = lines(INIT)
    for o in objs:
        if o.get("type") == "assistant":
            o["message"]["model"] = "acme-lm-7"
    path = write(tmp_path / "acme.jsonl", objs)
    got = calls_json(str(path))
    assert got and all(c["cost_usd"] is None and c["model"] == "acme-lm-7" for c in got)
    rc, out, _ = run("cost", str(path))
    assert rc == 0 and "7 call(s) of unknown cost not in it" in out
    row = next(x for x in out.splitlines() if x.strip().startswith("0 "))
    assert row.split()[8] == "?"


def _prices_file(path: Path, factor: float) -> Path:
    row = dict(sonnet_row())
    for k in ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h"):
        row[k] = row[k] * factor
    path.write_text(json.dumps({"models": [row]}))
    return path


def test_prices_file_and_environment_replace_the_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = calls_json(str(INIT))
    doubled = calls_json(str(INIT), "--prices", str(_prices_file(tmp_path / "x2.json", 2)))
    assert [c["cost_usd"] for c in doubled] == pytest.approx([2 * c["cost_usd"] for c in base])
    monkeypatch.setenv("CTXSCOPE_PRICES", str(_prices_file(tmp_path / "x3.json", 3)))
    tripled = calls_json(str(INIT))
    assert [c["cost_usd"] for c in tripled] == pytest.approx([3 * c["cost_usd"] for c in base])
    # --prices comes after the environment's file
    again = calls_json(str(INIT), "--prices", str(tmp_path / "x2.json"))
    assert [c["cost_usd"] for c in again] == pytest.approx([c["cost_usd"] for c in doubled])


def test_bad_input_is_one_line_naming_what_and_where(tmp_path: Path) -> None:
    bad = tmp_path / "prices.json"
    bad.write_text(json.dumps({"models": [{**sonnet_row(), "input": "three"}]}))
    rc, out, err = run("cost", str(INIT), "--prices", str(bad))
    assert rc == 2 and not out
    assert err.count("\n") == 1 and f"{bad}: models[0].input" in err
    rc, _, err = run("cost", str(tmp_path / "missing.jsonl"))
    assert rc == 2 and err.count("\n") == 1 and "missing.jsonl" in err
    rc, _, err = run("cost", str(INIT), "--all")
    assert rc == 2 and "exactly one" in err
    rc, _, err = run("check", str(INIT), "--prices", str(bad))
    assert rc == 2 and f"{bad}: models[0].input" in err


# --------------------------------------------------------------------------- the table


def test_the_table_has_a_row_per_call_totals_and_the_side_chains_apart() -> None:
    rc, out, _ = run("cost", str(SIDE))
    assert rc == 0
    got = calls_json(str(SIDE))
    sessions = {c["session_id"] for c in got}
    assert len(sessions) == 3  # the main chain and two Task agents
    for s in sessions:
        mine = [c for c in got if c["session_id"] == s]
        assert f"session {s}: {len(mine)} call(s)" in out
        total = sum(c["cost_usd"] for c in mine)
        head = out.index(f"session {s}:")
        line = next(x for x in out[head:].splitlines() if x.startswith("total"))
        assert f"{total:.4f}" in line.split()
        assert f"{sum(c['input_tokens'] for c in mine):,}" in line.split()
    assert out.count("\ntotal ") == 3


def test_side_chains_share_their_parents_cache() -> None:
    """The second Task agent's first call reads the system prompt the first agent wrote
    (tests/test_cache_sim.py): only one cache for the log makes that read."""
    got = calls_json(str(SIDE))
    side = [c for c in got if "/" in c["session_id"]]
    second = next(c for c in side if c["recorded"]["cache_read_tokens"] == 11454)
    assert second["turn"] == 0 and second["cache_read_tokens"] > 0


# --------------------------------------------------------------------------- the store


def test_session_and_all_read_the_store(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    with open_store(db) as store:
        store.add_traces(iter_traces(SIDE))
        store.add_traces(iter_traces(INIT))
    from_files = {c["trace_id"]: c for c in calls_json(str(INIT), str(SIDE))}
    every = calls_json("--all", "--db", str(db))
    assert {c["trace_id"]: c for c in every} == from_files
    parent = "5c0375b4-57a5-4f26-b12d-d022ee4e51b7"
    one = calls_json("--session", parent, "--db", str(db))
    assert {c["trace_id"] for c in one} == {
        t for t, c in from_files.items() if c["session_id"].startswith(parent)
    }
    assert {c["trace_id"]: c for c in one} == {c["trace_id"]: c for c in calls_json(str(SIDE))}
    rc, _, err = run("cost", "--session", "nope", "--db", str(db), "--json")
    assert rc == 2 and "--session 'nope'" in err


# --------------------------------------------------------------------------- breaks


def _lapsed(tmp_path: Path) -> Path:
    """The /init session with the user away for 10 minutes before its fifth reply: the
    5-minute cache entry has lapsed when the call is made."""
    objs = lines(INIT)
    cut = next(i for i, o in enumerate(objs) if o.get("uuid", "").startswith("7ad4ff12"))
    for o in objs[cut:]:
        if "timestamp" in o:
            at = datetime.fromisoformat(o["timestamp"].replace("Z", "+00:00"))
            o["timestamp"] = (at + timedelta(minutes=10)).isoformat().replace("+00:00", "Z")
    return write(tmp_path / "lapsed.jsonl", objs)


def test_a_lapsed_cache_is_a_break_with_its_reason_tokens_and_cost(tmp_path: Path) -> None:
    got = calls_json(str(_lapsed(tmp_path)))
    broken = [c for c in got if c["cache_break"] is not None]
    assert [c["turn"] for c in broken] == [3]  # the reply after the 10 minutes away
    brk = broken[0]["cache_break"]
    assert brk["block"] == "expired" and brk["reason"] and brk["fix"]
    # it read nothing and wrote all again: what the previous call had cached is lost
    assert (
        got[3]["cache_read_tokens"] == 0 and got[3]["cache_write_tokens"] == got[3]["input_tokens"]
    )
    # the previous prompt, as far as it is a prefix of this one (block counts are fitted
    # per call to its recorded total, so within 1 %)
    assert brk["tokens"] <= got[3]["input_tokens"]
    assert brk["tokens"] == pytest.approx(got[2]["input_tokens"], rel=0.01)
    row = sonnet_row()
    assert brk["cost_usd"] == pytest.approx(
        brk["tokens"] * (row["cache_write_5m"] - row["cache_read"]) / 1e6
    )
    rc, out, _ = run("cost", str(_lapsed(tmp_path)))
    assert "1 break(s)" in out and brk["kind"] in out
    base = calls_json(str(INIT))
    assert all(c["cache_break"] is None for c in base)


def test_check_reports_the_cache_break_and_its_price(tmp_path: Path) -> None:
    traces = tmp_path / "lapsed-traces.jsonl"
    write_jsonl(iter_traces(_lapsed(tmp_path)), traces)
    rc, out, _ = run("check", str(traces))
    found = [x for x in out.splitlines() if " cache_break: " in x]
    assert len(found) == 1 and "expired" in found[0] and "fix: " in found[0]
    brk = calls_json(str(_lapsed(tmp_path)))[3]["cache_break"]
    assert f"{brk['tokens']:,} tokens written again" in found[0]
    assert f"${brk['cost_usd']:.4f}" in found[0]
    x2 = _prices_file(tmp_path / "x2.json", 2)
    rc, out2, _ = run("check", str(traces), "--prices", str(x2))
    again = next(x for x in out2.splitlines() if " cache_break: " in x)
    assert f"${2 * brk['cost_usd']:.4f}" in again
    plain = tmp_path / "init-traces.jsonl"
    write_jsonl(iter_traces(INIT), plain)
    _, out3, _ = run("check", str(plain))
    assert " cache_break: " not in out3


# --------------------------------------------------------------------------- repeated calls


def _stuck(tmp_path: Path) -> Path:
    """The /init session where the agent runs ``ls -la`` a second time after reading its
    output, and gets the same listing (new ids, as Claude Code writes a new call)."""
    objs = lines(INIT)
    at = {o["uuid"][:8]: i for i, o in enumerate(objs) if "uuid" in o}
    call, nxt = objs[at["2e5c522c"]], at["7ad4ff12"]
    assert call["message"]["content"][0]["input"]["command"] == "ls -la"
    result = next(
        o
        for o in objs
        if o.get("type") == "user"
        and isinstance(o["message"]["content"], list)
        and o["message"]["content"][0].get("tool_use_id") == call["message"]["content"][0]["id"]
    )
    again = copy.deepcopy(call)
    again["uuid"], again["parentUuid"] = (
        "11111111-aaaa-4aaa-8aaa-000000000001",
        objs[nxt - 1]["uuid"],
    )
    again["message"]["id"] = "msg_01STUCKSTUCKSTUCKSTUCK1"
    again["message"]["content"][0]["id"] = "toolu_01STUCKSTUCKSTUCKSTUCK1"
    again["timestamp"] = "2025-09-03T00:47:35.000Z"
    answer = copy.deepcopy(result)
    answer["uuid"], answer["parentUuid"] = "11111111-aaaa-4aaa-8aaa-000000000002", again["uuid"]
    answer["message"]["content"][0]["tool_use_id"] = "toolu_01STUCKSTUCKSTUCKSTUCK1"
    answer["timestamp"] = "2025-09-03T00:47:35.100Z"
    objs[nxt]["parentUuid"] = answer["uuid"]
    return write(tmp_path / "stuck.jsonl", [*objs[:nxt], again, answer, *objs[nxt:]])


def test_check_reports_a_repeated_tool_call_once(tmp_path: Path) -> None:
    traces = tmp_path / "stuck-traces.jsonl"
    write_jsonl(iter_traces(_stuck(tmp_path)), traces)
    rc, out, _ = run("check", str(traces))
    found = [x for x in out.splitlines() if " repeated_tool_call: " in x]
    assert len(found) == 1, out
    assert "Bash(" in found[0] and "ls -la" in found[0] and "2 times" in found[0]
    assert found[0].endswith("[tool:toolu_01STUCKSTUCKSTUCKSTUCK1]")
    plain = tmp_path / "init-traces.jsonl"
    write_jsonl(iter_traces(INIT), plain)
    _, out2, _ = run("check", str(plain))
    assert " repeated_tool_call: " not in out2


def test_a_repeat_with_another_result_is_no_loop(tmp_path: Path) -> None:
    objs = lines(_stuck(tmp_path))
    answer = next(o for o in objs if o.get("uuid", "").endswith("000000000002"))
    block = answer["message"]["content"][0]
    block["content"] = str(block["content"]) + "\n-rw-r--r--  1 user  staff  0 new-file"
    traces = tmp_path / "changed.jsonl"
    write_jsonl(iter_traces(write(tmp_path / "changed-log.jsonl", objs)), traces)
    _, out, _ = run("check", str(traces))
    assert " repeated_tool_call: " not in out


# --------------------------------------------------------------------------- waste


LANGGRAPH = (
    ROOT
    / "tests/fixtures/imports/langchain/vercel-ai-langgraph-react-agent-tool-calling.state.json"
)


def test_tool_definitions_tokens_and_use_per_tool_and_mcp_server(tmp_path: Path) -> None:
    enc = tiktoken.get_encoding("cl100k_base")
    traces = list(iter_traces(LANGGRAPH))
    tally = tool_costs(traces)
    tools = {t.name: t for t in tally.tools()}
    (trace,) = traces
    for d in trace.input.tools:
        text = json.dumps(d.model_dump(), sort_keys=True)
        assert tools[d.name].tokens == len(enc.encode(text))
        assert tools[d.name].offered == 1
    assert {n for n, t in tools.items() if t.unused} == {"wiki_search", "image_generation"}
    assert tools["get_weather"].used >= 1 and tools["get_datetime"].used >= 1
    # the same tools as one MCP server's (mcp__server__tool)
    renamed = json.loads(LANGGRAPH.read_text().replace('"wiki_search"', '"mcp__wiki__search"'))
    text = json.dumps(renamed).replace('"image_generation"', '"mcp__wiki__image"')
    path = tmp_path / "mcp.state.json"
    path.write_text(text)
    servers = tool_costs(iter_traces(path)).servers()
    assert [(s.server, s.tools, s.tools_used, s.used) for s in servers] == [("wiki", 2, 0, 0)]
    rc, out, _ = run("cost", str(path))
    assert rc == 0 and "mcp__wiki__search" in out and "never used" in out
    assert "wiki" in out.split("MCP servers")[1]


def test_thinking_per_turn() -> None:
    codex = ROOT / "tests/fixtures/imports/codex/localpush-rollout-2034.jsonl"
    traces = list(iter_traces(codex))
    turns = [thinking_turn(t) for t in traces]
    assert [t.reasoning_tokens for t in turns] == [
        t.outcome.tokens.reasoning_tokens  # type: ignore[union-attr]
        for t in traces
    ]
    assert turns[-1].reasoning_tokens == 96
    # each earlier reply's reasoning stays in the prompt
    assert [t.carried_parts for t in turns] == list(range(len(traces)))
    rc, out, _ = run("cost", str(codex))
    section = out.split("thinking per turn")[1]
    assert f"turn {traces[-1].turn:>5}" in section and "96" in section
    # --json is one object per call, nothing else
    assert len(calls_json(str(codex))) == len(traces)


def test_totals_add_up() -> None:
    got = list(costs(iter_traces(INIT), price_table()))
    total = session_totals(got)
    assert total.calls == 7 and total.unknown_cost == 0
    assert total.cost_usd == pytest.approx(sum(c.cost_usd or 0 for c in got))
    assert total.recorded_read == sum(
        c.recorded.cache_read_tokens or 0 for c in got if c.recorded is not None
    )


def test_openai_writes_are_billed_as_input_when_priced_from_the_simulation() -> None:
    """An Inspect gpt-4o-mini session with its usage taken out: priced from the simulation,
    and OpenAI charges nothing to write its cache, so the written tokens cost the input
    price."""
    log = ROOT / "tests/fixtures/imports/inspect/browser-gpt-4o-mini-tools.json"
    traces = [
        t.model_copy(update={"outcome": t.outcome.model_copy(update={"tokens": None})})  # type: ignore[union-attr]
        for t in iter_traces(log)
    ]
    rows = json.loads(SHIPPED.read_text())["models"]
    row = next(r for r in rows if r["model"] == "gpt-4o-mini")
    assert row["cache_write_5m"] is None and row["cache_read"] is not None
    got = list(costs(traces, price_table(env="")))
    assert any(c.cache_write_tokens for c in got) and any(c.cache_read_tokens for c in got)
    for c in got:
        assert c.recorded is None and c.cost_source == "simulated"
        assert c.output_tokens is not None
        want = (
            (c.input_tokens - c.cache_read_tokens) * row["input"]
            + c.cache_read_tokens * row["cache_read"]
            + c.output_tokens * row["output"]
        ) / 1e6
        assert c.cost_usd == pytest.approx(want, rel=1e-12)
