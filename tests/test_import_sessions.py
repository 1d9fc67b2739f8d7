"""Session logs, one trace per model call: Claude Code, Codex CLI, OpenHands, on real samples.

The samples in ``tests/fixtures/imports/{claude-code,codex,openhands}`` come from public
repositories (``SOURCES.md``); ``EXPECTED.json`` holds their hand counts (model calls, usage,
tool calls and results). For each log: one trace per model call, turns in order per session,
each call's usage equal to the log's (read here from the file, independently of the importer),
the tool calls and results equal to the hand counts, and nothing lost (the counts the import
prints for each call's context are the counts read back from its trace). Then: sub-agents as
their own sessions, compactions seen on the Timeline, broken lines reported with the rest
imported, and each call's trace equal to what the request importers' path
(``captured_input_from_norm`` + ``make_trace``) derives for the same context.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ctxcore.cli import main
from ctxcore.diagnostics import INGEST_OPTIONS, DiagnosticsOptions, diagnose, diagnose_session
from ctxcore.errors import ImportFormatError
from ctxcore.formats import sessions
from ctxcore.formats.accounting import describe, imported_counts
from ctxcore.formats.derive import make_trace
from ctxcore.formats.load import detect_format, load_file, traces_from_value
from ctxcore.formats.norm import captured_input_from_norm
from ctxcore.formats.sessions import claude_code, codex, openhands, trajectories
from ctxcore.formats.sessions.calls import Call, CallTraces
from ctxcore.formats.sessions.lines import read_lines
from ctxcore.models import CapturedInput, Status, Trace
from ctxcore.pipeline.recorded import REPLACED
from ctxcore.tokens import get_counter

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "imports"
CORPUS = Path(__file__).resolve().parent.parent / "corpus"
TRAJECTORIES = [
    "a01_sweagent_marshmallow-1867_function-calling.traj.json",
    "a03_mini-swe-agent_github_issue.traj.json",
    "b03_sweagent_pydicom-1458.traj.json",
]
EXPECTED: dict[str, dict[str, Any]] = json.loads((FIXTURES / "EXPECTED.json").read_text())["files"]
LOGS = sorted(n for n in EXPECTED if n.split("/")[0] in ("claude-code", "codex", "openhands"))
NOW = datetime(2025, 6, 1, tzinfo=UTC)
LOSS_ONLY = DiagnosticsOptions(enabled=frozenset({"import_loss"}), rerun=False)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _flat(usage: dict[str, Any]) -> dict[str, int]:
    """A usage object as ``usage_from_obj`` flattens it (nested counters as ``a.b``)."""
    out: dict[str, int] = {}
    for k, v in usage.items():
        if isinstance(v, int) and not isinstance(v, bool):
            out[k] = v
        elif isinstance(v, dict):
            out.update({f"{k}.{s}": x for s, x in v.items() if isinstance(x, int)})
    return out


def _claude_usages(path: Path) -> dict[str, dict[str, int]]:
    """message.id -> the usage on its last line (output_tokens grows line by line)."""
    out: dict[str, dict[str, int]] = {}
    for obj in _lines(path):
        msg = obj.get("message")
        if obj.get("type") == "assistant" and isinstance(msg, dict):
            out[msg["id"]] = _flat(msg.get("usage") or {})
    return out


def _codex_usages(path: Path) -> list[dict[str, int]]:
    """Each call's ``last_token_usage``. A call is a reply: a run of reasoning, assistant
    messages and tool calls, ended by any other item, a turn_context or its usage; its usage
    is the first token_count whose cumulative total is new (the one right after a
    turn_context repeats the last call), ``{}`` if the next reply comes first."""
    out: list[dict[str, int]] = []
    total: Any = None
    replying = fed = waiting = False
    for obj in _lines(path):
        p = obj["payload"]
        if obj["type"] == "response_item":
            if p.get("type") in ("reasoning", "function_call", "custom_tool_call") or (
                p.get("role") == "assistant"
            ):
                if not replying or fed:
                    out.append({})
                    waiting, replying, fed = True, True, False
            elif replying:
                fed = True
        elif obj["type"] in ("turn_context", "compacted"):
            replying = False
        elif obj["type"] == "event_msg" and p.get("type") == "token_count" and p.get("info"):
            new = p["info"]["total_token_usage"] != total
            total = p["info"]["total_token_usage"]
            if new and waiting:
                out[-1] = _flat(p["info"]["last_token_usage"])
                waiting = replying = False
    return out


def _sum(traces: list[Trace], key: str) -> int:
    return sum(int((t.outcome.usage if t.outcome else {}).get(key, 0)) for t in traces)


def _check_sums(trace: Trace) -> None:
    """Decisions counted with the real tokenizer add up to the totals and the partitions."""
    assert trace.result is not None
    counter = get_counter(trace.result.totals.tokenizer)
    decisions = {d.packet_id: d for d in trace.result.decisions}
    assert len(decisions) == len(trace.result.decisions)
    assert sum(d.tokens_after for d in decisions.values()) == trace.result.totals.used
    assert sum(p.used for p in trace.result.partitions) == trace.result.totals.used
    for p in trace.input.packets:
        assert decisions[p.id].tokens_before == counter.count(p.content)
    for m in trace.input.history:
        assert decisions[m.id or ""].tokens_before == counter.count(m.content)
    assert decisions["builder:task"].tokens_before == counter.count(trace.input.query)
    assert [d.rank for d in trace.result.decisions] == list(range(len(decisions)))


# --------------------------------------------------------------------------- every log


@pytest.mark.parametrize("name", LOGS)
def test_one_trace_per_model_call_in_order_nothing_lost(name: str) -> None:
    path = FIXTURES / name
    exp = EXPECTED[name]
    traces = load_file(path)
    assert len(traces) == exp["model_calls"]
    turns: dict[str, list[int]] = {}
    for t in traces:
        turns.setdefault(t.session_id, []).append(t.turn)
    assert all(ts == list(range(len(ts))) for ts in turns.values())
    assert len(turns) == 1 + exp.get("subagent_runs", 0)
    for t in traces:
        meta = t.metadata["import"]
        assert meta["format"] == exp["format"]
        assert meta["source"] == imported_counts(t)
        assert "kept_as_text" not in meta and "skipped" not in meta
        assert meta["reconstructed"]  # every log here lacks something: it says what
        assert any("reconstructed from" in w for w in t.result.warnings)  # type: ignore[union-attr]
        assert t.builder.name == f"import/{exp['format']}"
        _check_sums(t)
        assert not diagnose(t, options=LOSS_ONLY)
    # re-importing gives the same ids (a no-op in the store)
    assert [t.trace_id for t in load_file(path)] == [t.trace_id for t in traces]


@pytest.mark.parametrize("name", LOGS)
def test_tool_calls_and_results_match_the_hand_counts(name: str) -> None:
    exp = EXPECTED[name]
    traces = load_file(FIXTURES / name)
    calls = [c for t in traces for c in t.metadata["session_log"].get("tool_calls", [])]
    assert len(calls) == exp["tool_calls"]
    if "tool_calls_by_name" in exp:
        assert Counter(c["name"] for c in calls) == exp["tool_calls_by_name"]
    results = {p.id for t in traces for p in t.input.packets if p.kind == "tool_result"}
    # a result a compaction replaced before any call saw it is among its summarized items
    results |= {
        d.packet_id
        for t in traces
        for d in t.result.decisions  # type: ignore[union-attr]
        if d.kind == "tool_result" and d.status == Status.SUMMARIZED
    }
    # a result after the last call reached no call's context: the last trace counts it
    after = sum(
        t.metadata["session_log"].get("after_last_call", {}).get("tool_results", 0) for t in traces
    )
    assert len(results) + after == exp["tool_results"]
    # every result answers a call the log made
    assert results <= {f"tool:{c['id']}" for c in calls}


@pytest.mark.parametrize("name", [n for n in LOGS if n.startswith("claude-code/")])
def test_claude_code_usage_is_each_replys_last_line(name: str) -> None:
    path = FIXTURES / name
    exp = EXPECTED[name]
    traces = load_file(path)
    usages = _claude_usages(path)
    assert [t.metadata["session_log"]["message_id"] for t in traces] == [
        k for k in usages if k in {t.metadata["session_log"]["message_id"] for t in traces}
    ] or len(usages) == len(traces)
    for t in traces:
        assert t.outcome is not None
        assert t.outcome.usage == usages[t.metadata["session_log"]["message_id"]]
    for key, ours in (
        ("input_tokens", "input_tokens"),
        ("output_tokens", "output_tokens"),
        ("cache_read_tokens", "cache_read_input_tokens"),
        ("cache_creation_tokens", "cache_creation_input_tokens"),
    ):
        if key in exp["usage"]:
            assert _sum(traces, ours) == exp["usage"][key], key
    # the provider's whole prompt (input + cache reads + writes) is kept beside our count
    first = traces[0].metadata["import"]["prompt_tokens"]
    u = traces[0].outcome.usage  # type: ignore[union-attr]
    assert first["reported"] == u["input_tokens"] + u.get("cache_read_input_tokens", 0) + u.get(
        "cache_creation_input_tokens", 0
    )


@pytest.mark.parametrize("name", [n for n in LOGS if n.startswith("codex/")])
def test_codex_usage_is_each_calls_own_not_the_repeats(name: str) -> None:
    path = FIXTURES / name
    exp = EXPECTED[name]
    traces = load_file(path)
    assert [t.outcome.usage if t.outcome else {} for t in traces] == _codex_usages(path)
    usage = exp.get("usage_in_window") or exp["usage"]
    assert _sum(traces, "input_tokens") == usage["input_tokens"]
    assert _sum(traces, "output_tokens") == usage["output_tokens"]
    assert _sum(traces, "cached_input_tokens") == usage["cache_read_tokens"]
    assert _sum(traces, "reasoning_output_tokens") == usage["reasoning_tokens"]
    # the base instructions are recorded: the system prompt is there, the tools are not
    for t in traces:
        assert t.input.system_instructions.startswith(
            exp.get("system_prefix", "[REDACTED_TEXT len=13131")
        )
        assert t.metadata["import"]["reconstructed"] == ["tool definitions"]
        # the window the rollout records (token_count, task_started), if any line does
        if exp.get("model_context_window", 258_400) is not None:
            assert t.input.window == 258_400


@pytest.mark.parametrize("name", [n for n in LOGS if n.startswith("openhands/")])
def test_openhands_usage_per_distinct_response(name: str) -> None:
    exp = EXPECTED[name]
    traces = load_file(FIXTURES / name)
    assert len([t for t in traces if t.outcome and t.outcome.usage]) == exp.get(
        "model_calls_with_recorded_response", exp["model_calls"]
    )
    assert _sum(traces, "prompt_tokens") == exp["usage"]["input_tokens"]
    assert _sum(traces, "completion_tokens") == exp["usage"]["output_tokens"]
    if "cache_creation_tokens" in exp["usage"]:
        assert _sum(traces, "cache_read_input_tokens") == exp["usage"]["cache_read_tokens"]
        assert _sum(traces, "cache_creation_input_tokens") == exp["usage"]["cache_creation_tokens"]
    # each call's context is what came before it: the last one holds every earlier result
    last = traces[-1]
    assert len(last.input.packets) == exp["tool_results"]


def test_session_logs_are_detected_and_their_formats_named() -> None:
    for name in LOGS:
        path = FIXTURES / name
        fmt = EXPECTED[name]["format"]
        if name.endswith(".jsonl"):
            assert sessions.sniff(path) == fmt
            assert detect_format(_lines(path)) == fmt  # a log's events as one JSON list
        else:
            assert detect_format(json.loads(path.read_text())) == fmt


# --------------------------------------------------------------------------- sub-agents


def test_claude_code_sidechains_are_their_own_sessions_linked_to_the_task_call() -> None:
    name = "claude-code/ccviewer-task-sidechain-session.jsonl"
    exp = EXPECTED[name]
    traces = load_file(FIXTURES / name)
    main_id = _lines(FIXTURES / name)[0]["sessionId"]
    main_traces = [t for t in traces if t.session_id == main_id]
    side = [t for t in traces if t.session_id != main_id]
    assert len(main_traces) == exp["model_calls_main"]
    assert len(side) == exp["model_calls_sidechain"]
    tasks = {
        c["id"]: t.metadata["session_log"]["line"]
        for t in main_traces
        for c in t.metadata["session_log"].get("tool_calls", [])
        if c["name"] == "Task"
    }
    assert len(tasks) == exp["task_tool_calls"]
    agents = {t.session_id for t in side}
    assert len(agents) == exp["subagent_runs"]
    for t in side:
        parent = t.metadata["session_log"]["parent"]
        assert parent["session"] == main_id
        assert t.session_id == f"{main_id}/{parent['tool_use_id']}"
        assert parent["tool_use_id"] in tasks
    # the first Task call failed validation: no sidechain answers it
    assert "toolu_018t5jce2ZNoGr2ADsHGQife" not in {
        t.metadata["session_log"]["parent"]["tool_use_id"] for t in side
    }
    for part, group in (("usage_main", main_traces), ("usage_sidechain", side)):
        assert _sum(group, "output_tokens") == exp[part]["output_tokens"]
        assert _sum(group, "cache_read_input_tokens") == exp[part]["cache_read_tokens"]
    # a sub-agent starts from its prompt, not from the main conversation
    first = min(side, key=lambda t: t.turn)
    assert first.input.history == [] and first.input.query.startswith(("Examine", "Analyze"))


# --------------------------------------------------------------------------- compaction


def test_claude_code_compaction_is_summarized_and_a_rewind_left_out() -> None:
    path = FIXTURES / "claude-code/claude-code-log-compact-after-rewind.jsonl"
    traces = load_file(path)
    assert [t.input.query for t in traces] == [
        "Start",
        "First attempt",
        "Second attempt",
        "Keep going",
        "After compaction",
    ]
    # the rewind: the call after it sees the branch it continues, not the abandoned one
    assert [m.content for m in traces[2].input.history] == ["Start", "Ready"]
    assert traces[2].metadata["session_log"]["fork"] == {"from_line": 2, "left_out_lines": [3]}
    after = traces[4]
    assert [m.content for m in after.input.history] == [
        "This session is being continued from a previous conversation that ran out of "
        "context. Summary: the user asked for a plan."
    ]
    summarized = [d for d in after.result.decisions if d.status == Status.SUMMARIZED]  # type: ignore[union-attr]
    # the active path before the compaction (lines 1, 2, 5-8), not the abandoned branch
    assert [d.packet_id for d in summarized] == [f"msg-{n}" for n in (1, 2, 5, 6, 7, 8)]
    assert all(d.reason.value == "DEGRADED" and d.tokens_after == 0 for d in summarized)
    assert all("compaction at line 9 (auto, 150,000 tokens" in d.reason_text for d in summarized)
    assert after.metadata["import"]["compaction"]["preTokens"] == 150_000
    summary = next(d for d in after.result.decisions if d.packet_id == "msg-10")  # type: ignore[union-attr]
    assert summary.status == Status.KEPT and "summary a compaction wrote" in summary.notes[0]
    # the Timeline's "lost at turn": every summarized message, at the compaction's turn
    diag = diagnose_session(traces, options=INGEST_OPTIONS)
    lost = {x.item: x for x in diag.lost}
    seen = {m.id for t in traces[:4] for m in t.input.history}  # the query is builder:task
    assert seen & {d.packet_id for d in summarized} == {"msg-1", "msg-2", "msg-5", "msg-6"}
    for pid in seen & {d.packet_id for d in summarized}:
        assert lost[pid].status == "summarized" and lost[pid].lost_turn == 4


def test_claude_code_compaction_on_the_timeline(tmp_path: Path) -> None:
    from ctxcore.store import TraceStore

    traces = load_file(FIXTURES / "claude-code/claude-code-log-compact-after-rewind.jsonl")
    with TraceStore(tmp_path / "s.duckdb") as store:
        store.add_traces(traces)
        rows = store.session_statuses("s1")
    by_packet: dict[str, dict[int, str]] = {}
    for r in rows:
        by_packet.setdefault(r["packet_id"], {})[r["turn"]] = r["status"]
    # one message, one row: kept while it was in the context, summarized at the compaction
    assert by_packet["msg-2"] == {1: "kept", 2: "kept", 3: "kept", 4: "summarized"}
    assert by_packet["msg-10"] == {4: "kept"}


@pytest.mark.parametrize(
    "name",
    [
        "codex/wakatime-0119-turn-context-first.subset.jsonl",
        "codex/wakatime-0119-no-token-count.subset.jsonl",
    ],
)
def test_codex_the_call_that_answers_a_prompt_holds_it(name: str) -> None:
    # 0.119 writes each turn's turn_context before the user's message, and a rollout
    # without token_count events has nothing but the replies to mark its calls: the calls
    # are the replies, each with every item before it
    exp = EXPECTED[name]
    traces = load_file(FIXTURES / name)
    assert [t.metadata["session_log"]["line"] for t in traces] == exp["call_lines"]
    assert [len(t.metadata["session_log"].get("tool_calls", [])) for t in traces] == exp[
        "tool_calls_per_call"
    ]
    # the user's second message (same turn, no turn_context of its own) is held by the
    # replies after it, the first by every reply before it
    first, second = exp["prompts"]
    assert [t.input.query for t in traces] == [
        first if line < exp["prompt_lines"][1] else second for line in exp["call_lines"]
    ]
    answer = next(t for t in traces if t.input.query == second)
    assert answer.input.history[-1].content == "The homepage overflow is fixed."


def test_codex_a_log_cut_before_any_reply_says_so(tmp_path: Path) -> None:
    src = FIXTURES / "codex/wakatime-0119-turn-context-first.subset.jsonl"
    cut = tmp_path / "cut.jsonl"
    # the session, the turn_context, the user's message and two token_counts: no reply yet
    cut.write_text("".join(src.read_text(encoding="utf-8").splitlines(True)[:6]))
    reader = codex.Reader(str(cut), "s", NOW)
    assert list(reader.calls(read_lines(cut))) == []
    assert reader.errors == [
        f"{cut}: no model reply in the log (no reasoning, assistant message or tool call): "
        "1 messages and 0 other items belong to no call"
    ]


def test_codex_compaction_replaces_the_history() -> None:
    name = "codex/localpush-rollout-compaction-turn.subset.jsonl"
    exp = EXPECTED[name]["compaction"]
    traces = load_file(FIXTURES / name)
    with_summary = [t for t in traces if t.result and t.result.report.summarized]
    assert len(with_summary) == 1  # the first call after it shows what it replaced
    first = with_summary[0]
    before = traces[first.turn - 1]
    replaced = {d.packet_id for d in first.result.decisions if d.status == Status.SUMMARIZED}  # type: ignore[union-attr]
    kept_before = {
        d.packet_id
        for d in before.result.decisions  # type: ignore[union-attr]
        if d.kind in ("history", "tool_result")
    }
    assert kept_before <= replaced
    assert (
        first.metadata["import"]["compaction"]["replacement_items"]
        == (exp["replacement_history_items"])
    )
    # after it, the context is the replacement history (its messages, ids msg-<line>-<k>)
    ids = [m.id for m in first.input.history]
    assert ids and all(i.startswith("msg-58-") for i in ids)
    later = traces[-1]
    assert later.metadata["import"]["compaction"]["line"] == 58
    assert not later.result.report.summarized  # type: ignore[union-attr]


# --------------------------------------------------------------------------- broken input


def test_a_broken_line_is_reported_and_the_rest_imported(tmp_path: Path) -> None:
    src = FIXTURES / "claude-code/ccviewer-init-session.jsonl"
    lines = src.read_text(encoding="utf-8").splitlines()
    lines[10] = lines[10][: len(lines[10]) // 2]  # line 11 (a tool result) cut in the middle
    path = tmp_path / "broken.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    traces = load_file(path)
    assert len(traces) == EXPECTED["claude-code/ccviewer-init-session.jsonl"]["model_calls"]
    skipped = [s for t in traces for s in t.metadata["import"].get("skipped", [])]
    assert skipped[0].startswith(f"{path}:11: not a JSON line")
    # line 12 lost its parent: it goes on from the line before, and says so
    assert any(s.startswith(f"{path}:12: its parent line") for s in skipped)
    assert len(skipped) == 2  # each reported once
    carrier = next(t for t in traces if t.metadata["import"].get("skipped"))
    assert any("could not be read" in w for w in carrier.result.warnings)  # type: ignore[union-attr]
    # the calls after it still see everything else
    whole = load_file(src)
    lost = {p.id for p in whole[-1].input.packets} - {p.id for p in traces[-1].input.packets}
    assert lost == {"tool:toolu_01MEJ7TRMeoTyDi6EZLHM2zY"}
    assert any("not imported: " in line and ":11:" in line for line in describe(traces))


def test_a_broken_record_of_each_format(tmp_path: Path) -> None:
    # codex: an event with a wrong payload type in the middle
    rows = _lines(FIXTURES / "codex/localpush-rollout-2034.jsonl")
    rows[25]["payload"] = ["not", "an", "object"]  # line 26: a function_call
    path = tmp_path / "rollout.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    traces = load_file(path)
    assert len(traces) == 6
    skipped = [s for t in traces for s in t.metadata["import"].get("skipped", [])]
    assert skipped == [f"{path}:26: not a rollout event ({{type, payload}})"]
    # openhands: one event of the list that is not an event
    events = json.loads((FIXTURES / "openhands/runtime-traj-wrong-initial-state.json").read_text())
    events[2]["tool_call_metadata"] = {"tool_call_id": 7, "model_response": "x"}
    events[4] = [events[4]]
    out = traces_from_value(events, "openhands", where="traj.json")
    assert len(out) == 4
    skipped = [s for t in out for s in t.metadata["import"].get("skipped", [])]
    assert skipped == ["traj.json: events[4]: an event is an object, got list"]


def test_a_log_with_nothing_readable_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "empty-log.jsonl"
    path.write_text('{"type":"summary","summary":"t","leafUuid":"x"}\n{"type":"user"' + "\n")
    with pytest.raises(ImportFormatError, match="a claude-code log with no call") as err:
        load_file(path)
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- same path


def _calls(name: str) -> list[Call]:
    path = FIXTURES / name
    if name.startswith("claude-code/"):
        return list(claude_code.Reader(str(path), "s", NOW).calls(read_lines(path)))
    if name.startswith("codex/"):
        return list(codex.Reader(str(path), "s", NOW).calls(read_lines(path)))
    if name.startswith("openhands/"):
        return openhands.calls(json.loads(path.read_text()), name, "s", NOW)
    data = json.loads((CORPUS / name).read_text())
    kind = trajectories.detect(data)
    assert kind is not None
    return trajectories.calls(data, kind, name, "s", NOW)


def _without_replaced(inp: CapturedInput) -> CapturedInput:
    """``inp`` without the ``REPLACED`` mark of a first call after a compaction."""

    def strip(meta: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in meta.items() if k != REPLACED}

    return inp.model_copy(
        update={
            "history": [m.model_copy(update={"metadata": strip(m.metadata)}) for m in inp.history],
            "packets": [p.model_copy(update={"metadata": strip(p.metadata)}) for p in inp.packets],
        }
    )


@pytest.mark.parametrize("name", LOGS + TRAJECTORIES)
def test_each_call_is_what_the_request_importers_path_gives(name: str) -> None:
    """The context of a call, all its normalised messages through captured_input_from_norm
    and make_trace at once, gives the same input, prompt, totals, partitions and items as
    the session import, which builds each message once and shares it between calls."""
    calls = _calls(name)
    traces = list(CallTraces(fmt="x", builder="import/x").traces(calls))
    assert len(traces) == len(calls)
    for call, t in zip(calls, traces, strict=True):
        assert t.result is not None
        norm = [copy.deepcopy(m) for seg in call.context for m in seg.norm]
        seen: set[int] = set()
        for m in norm:  # captured_input_from_norm finds the query by index: one per message
            if m.role == "user" and m.index in seen:
                m.id, m.index = m.id or f"msg-{m.index}", 10**9 + len(seen)
            seen.add(m.index)
        inp, flat = captured_input_from_norm(
            norm,
            tools=call.tools,
            now=t.input.now,
            window=t.input.window,
            output_reserve=t.input.output_reserve,
        )
        # the first call after a compaction marks what it replaced (REPLACED, for the
        # recorded preset): a fact of the call that the request path does not know
        assert inp == _without_replaced(t.input)
        assert flat == t.result.messages
        ref = make_trace(
            inp,
            flat,
            builder="import/x",
            model=call.model,
            trace_id=t.trace_id,
            session_id=t.session_id,
            turn=t.turn,
            created_at=t.created_at,
            usage=call.usage,
            output=call.output,
        )
        assert ref.result is not None
        assert ref.result.prompt == t.result.prompt
        assert ref.result.totals == t.result.totals
        assert ref.result.partitions == t.result.partitions
        assert ref.config == t.config
        assert set(ref.result.warnings) <= set(t.result.warnings)

        def items(decisions: Any) -> Counter[tuple[Any, ...]]:
            return Counter(
                (d.kind, d.partition, d.tokens_before, d.tokens_after, d.status, d.reason_text)
                for d in decisions
                if d.status == Status.KEPT
            )

        assert items(ref.result.decisions) == items(t.result.decisions)


# --------------------------------------------------------------------------- the command


def test_cli_imports_a_session_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = "claude-code/ccviewer-task-sidechain-session.jsonl"
    out = tmp_path / "out.jsonl"
    assert main(["import", str(FIXTURES / name), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"{EXPECTED[name]['model_calls']} trace(s)" in printed
    assert "turn 0 (claude-code)" in printed
    again = load_file(out, "trace")
    assert len(again) == EXPECTED[name]["model_calls"]
    assert main(["import", str(FIXTURES / name), "--format", "claude-code", "-o", str(out)]) == 0


def test_window_and_model_given_for_what_the_log_does_not_say() -> None:
    path = FIXTURES / "claude-code/claude-code-log-compact-after-rewind.jsonl"
    traces = sessions.iter_file(path, "claude-code", window=50_000).collect()
    assert {t.result.totals.window for t in traces} == {50_000}  # type: ignore[union-attr]
    assert {t.metadata["import"]["window_source"] for t in traces} == {"--window"}
    # still the session's own decisions: the compaction's summarized messages are there
    assert traces[-1].result.report.summarized  # type: ignore[union-attr]
    gpt = sessions.iter_file(path, "claude-code", model="gpt-4o").collect()
    assert {t.result.totals.window for t in gpt} == {128_000}  # type: ignore[union-attr]
    assert {t.result.totals.tokenizer for t in gpt} == {"o200k_base"}  # type: ignore[union-attr]


def test_a_message_too_large_to_import_is_its_lines_error(tmp_path: Path) -> None:
    from ctxcore.models import MAX_CONTENT_CHARS

    rows = _lines(FIXTURES / "claude-code/ccviewer-init-session.jsonl")
    rows[10]["message"]["content"][0]["content"] = "x" * (MAX_CONTENT_CHARS + 1)  # line 11
    path = tmp_path / "huge.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    traces = load_file(path)
    assert len(traces) == 7
    [skipped] = [s for t in traces for s in t.metadata["import"].get("skipped", [])]
    assert skipped.startswith(f"{path}:11: ") and "10,485,76" in skipped
    # the other results of that call are there, that one is not
    ids = {p.id for p in traces[-1].input.packets}
    assert "tool:toolu_01MEJ7TRMeoTyDi6EZLHM2zY" not in ids
    assert "tool:toolu_0164LbCjQenEQzr3pHHs81PK" in ids


# --------------------------------------------------------------------------- bounded memory


def _branching_log(path: Path, turns: int = 240) -> None:
    """A Claude Code log of ``turns`` calls with tool results, a compaction every 60 calls
    and, every 17 calls, a rewind to an earlier reply (before the last compaction too)."""
    corpus = "\n".join(p.read_text(errors="replace") for p in sorted(CORPUS.glob("d*")))
    rows: list[dict[str, Any]] = []
    replies: list[str] = []
    parent: str | None = None
    logical: str | None = None

    def add(obj: dict[str, Any]) -> str:
        uid = f"00000000-0000-4000-8000-{len(rows) + 1:012d}"
        obj.update(
            uuid=uid,
            sessionId="branching",
            timestamp=f"2025-09-03T00:{len(rows) // 60 % 60:02d}:{len(rows) % 60:02d}Z",
        )
        rows.append(obj)
        return uid

    for k in range(turns):
        if k and k % 60 == 0:
            logical = parent
            boundary = {
                "type": "system",
                "subtype": "compact_boundary",
                "parentUuid": None,
                "logicalParentUuid": logical,
                "content": "Conversation compacted",
                "compactMetadata": {"trigger": "auto", "preTokens": 9_000},
            }
            summary = {"role": "user", "content": f"Summary {k}: the plan."}
            parent = add(boundary)
            parent = add(
                {"type": "user", "parentUuid": parent, "isCompactSummary": True, "message": summary}
            )
        elif k % 17 == 16 and len(replies) > 30:
            parent = replies[(k * 7919) % (len(replies) - 5)]  # a rewind
        text = corpus[(k * 104_729) % 50_000 :][:3_000]
        result = {"type": "tool_result", "tool_use_id": f"toolu_{k - 1}", "content": text}
        asked = {"role": "user", "content": [result] if k else f"Task {k}"}
        parent = add({"type": "user", "parentUuid": parent, "message": asked})
        call = {"type": "tool_use", "id": f"toolu_{k}", "name": "Bash", "input": {"cmd": f"t{k}"}}
        reply = {
            "id": f"msg_{k}",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": f"Step {k}"}, call],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
        parent = add({"type": "assistant", "parentUuid": parent, "message": reply})
        replies.append(parent)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _comparable(traces: list[Trace]) -> list[str]:
    out = []
    for t in traces:
        assert t.result is not None
        out.append(
            t.model_copy(update={"result": t.result.model_copy(update={"timings": {}})}).to_json()
        )
    return out


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_a_log_read_in_bounded_memory_gives_the_same_traces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    """The Claude Code reader holds the messages of the current chain and at most
    HELD_CHARS characters of the other lines: a rewind to a line it let go reads that line
    again from the file (a .gz too). Every trace is the one the reader holding everything
    makes; the messages held off the chain stay within the budget all along."""
    import gzip

    path = tmp_path / f"branching{suffix}"
    _branching_log(tmp_path / "plain.jsonl")
    data = (tmp_path / "plain.jsonl").read_bytes()
    path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    monkeypatch.setattr(claude_code, "HELD_CHARS", 10**12)
    whole = sessions.iter_file(path, "claude-code").collect()
    assert len(whole) == 240 and sum(1 for t in whole if t.metadata["session_log"].get("fork")) >= 8
    assert sum(1 for t in whole if t.result and t.result.report.summarized) >= 3

    reads: list[int] = []
    real = sessions.values_at

    def values_at(p: Path, offsets: list[int]) -> dict[int, Any]:
        reads.extend(offsets)
        return real(p, offsets)

    monkeypatch.setattr(sessions, "values_at", values_at)
    monkeypatch.setattr(claude_code, "HELD_CHARS", 20_000)
    imp = sessions.iter_file(path, "claude-code")
    reader = imp._reader
    held: list[int] = []
    bounded = []
    for t in imp.stream():
        held.append(reader._off_chars)
        bounded.append(t)
    assert _comparable(bounded) == _comparable(whole)
    assert max(held) <= 20_000 and len(reads) > 50  # let go, and read again for the rewinds
    kept = sum(1 for n in reader.nodes.values() if n.norm is not None)
    assert kept < len(reader.nodes) // 4


@pytest.mark.parametrize("name", LOGS)
def test_imported_decisions_are_the_decisions_pydantic_validates(name: str) -> None:
    """The import sets its decisions without pydantic's validation (``calls._decision``):
    each must be what validating its values gives (same values, same types, same JSON), the
    summarized ones of a compaction included (made once, shared by the calls after it)."""
    from ctxcore.models import Decision

    traces = load_file(FIXTURES / name)
    decisions = [d for t in traces if t.result is not None for d in t.result.decisions]
    assert decisions
    for d in decisions:
        again = Decision.model_validate(d.model_dump())
        assert d == again and d.model_dump_json() == again.model_dump_json()
        assert type(d.status) is Status and all(type(n) is str for n in d.notes)
        assert d.model_fields_set == set(Decision.model_fields)
    if EXPECTED[name].get("compactions"):
        assert any(d.status == Status.SUMMARIZED for d in decisions)
    from ctxcore.models import PartitionUsage

    for t in traces:  # the inputs and traces are set the same way (``calls._input``, ``_trace``)
        again_t = Trace.model_validate_json(t.to_json())
        assert t == again_t and t.to_json() == again_t.to_json()
        assert t.input == CapturedInput.model_validate(t.input.model_dump())
        assert t.input.model_fields_set == set(CapturedInput.model_fields)
        unset = {"schema_", "source_trace_id", "redactions"}
        assert t.model_fields_set == set(Trace.model_fields) - unset
        assert t.input.history is not t.input.packets and type(t.input.tools) is list
    usages = [u for t in traces if t.result is not None for u in t.result.partitions]
    assert usages
    for u in usages:
        again = PartitionUsage.model_validate(u.model_dump())
        assert u == again and u.model_dump_json() == again.model_dump_json()
        assert u.model_fields_set == set(PartitionUsage.model_fields)


def test_an_input_or_trace_pydantic_would_refuse_is_refused_as_pydantic_words_it() -> None:
    """The checked fast path of ``calls._input`` / ``calls._trace`` falls back to pydantic
    for what it does not accept: the error is pydantic's."""
    from pydantic import ValidationError

    from ctxcore.formats.sessions.calls import _input, _trace
    from ctxcore.models import Packet

    ok = _input("q", NOW, "", [], [], [], None, None)
    assert ok == CapturedInput(query="q", now=NOW)
    twice = [Packet(id="a", kind="note", content="x"), Packet(id="a", kind="note", content="y")]
    with pytest.raises(ValidationError, match="duplicate packet id 'a'"):
        _input("q", NOW, "", [], twice, [], None, None)
    with pytest.raises(ValidationError, match="timezone"):
        _input("q", NOW.replace(tzinfo=None), "", [], [], [], None, None)
    with pytest.raises(ValidationError, match="window"):
        _input("q", NOW, "", [], [], [], 0, None)
    trace = load_file(FIXTURES / LOGS[0])[0]
    given = {k: getattr(trace, k) for k in trace.model_fields_set}
    assert _trace(given) == trace
    with pytest.raises(ValidationError, match="free_json|surrogate"):
        _trace({**given, "metadata": {"x": "\ud800"}})
    with pytest.raises(ValidationError, match="trace_id"):
        _trace({**given, "trace_id": ""})


def test_a_decision_out_of_the_models_bounds_is_refused_as_pydantic_refuses_it() -> None:
    from pydantic import ValidationError

    from ctxcore.formats.sessions.calls import _kept
    from ctxcore.settings import MAX_TOKENS

    assert _kept("m1", "history", 3, 10, 20).tokens_before == 10
    with pytest.raises(ValidationError, match="tokens_before"):
        _kept("m1", "history", 3, MAX_TOKENS + 1, 20)
    from ctxcore.formats.sessions.calls import _usage

    assert _usage("history", 5, 2).used == 5
    with pytest.raises(ValidationError, match="used"):
        _usage("history", MAX_TOKENS + 1, 2)
