"""The LangChain policies against the real langchain / langchain-core packages.

Every multi-turn session that imports from corpus/ and tests/fixtures/imports/ (its last
call: the longest message list it sent) is run through each policy at five knob settings,
and every call of each (every 10th of a session over 20 calls) at one setting per policy,
by ctxscope's preset (``build``) and by the real package in its own venv
(``.oracle-langchain``, ``make oracle``; ``scripts/lc_oracle.py``), and the message lists out
must be the same: roles, contents, tool calls (ids, names, arguments), a tool result's call
id, order. Both sides count tokens with the same function
(``MessageCounter``: tiktoken's cl100k_base or o200k_base, or ``len``). The summary model is
ctxscope's deterministic stand-in on both sides: ctxscope writes the text, the oracle's fake
chat model returns it, and the oracle checks that the prompt its model got is the package's
prompt over exactly the messages ctxscope gave the stand-in.

Under CI=true a missing oracle venv is a failure, not a skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, fields
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from ctxcore.formats.load import load_file
from ctxcore.models import CapturedInput, Config, Message
from ctxcore.pipeline import build, resolve_config
from ctxcore.pipeline import langchain_context_editing as context_editing
from ctxcore.pipeline import langchain_summarization as summarization
from ctxcore.pipeline import langchain_trim as trimming
from ctxcore.pipeline.langchain_policies import (
    ChatMsg,
    MessageCounter,
    chat_message,
    recorded_messages,
    summarize,
)
from ctxcore.pipeline.recorded import conversation
from ctxcore.summarize import default_summarizer
from ctxcore.tokens import get_counter, seed_tiktoken_cache

ROOT = Path(__file__).resolve().parent.parent
ORACLE = Path(
    os.environ.get(
        "CTXSCOPE_LANGCHAIN_ORACLE_PYTHON", ROOT / ".oracle-langchain" / "bin" / "python"
    )
)
PACKAGES = {"langchain": "1.5.2", "langchain-core": "1.8.3"}
#: files that are no session log (logs and notes of the corpus, exports with no prompt)
_NOT_SESSIONS = {"SOURCES.md", "EXPECTED.json"}


@dataclass(frozen=True)
class Session:
    name: str
    input: CapturedInput  # its last call's
    calls: tuple[CapturedInput, ...]  # every call's, in turn order


@cache
def sessions() -> tuple[Session, ...]:
    """Every session of two or more calls that imports from the corpus and the import
    fixtures, as the messages of its last call."""
    files = sorted(p for p in (ROOT / "corpus").iterdir() if p.name not in _NOT_SESSIONS)
    files += sorted(
        p
        for p in (ROOT / "tests" / "fixtures" / "imports").rglob("*")
        if p.is_file() and p.name not in _NOT_SESSIONS and not p.name.endswith(".response.json")
    )
    out: list[Session] = []
    for path in files:
        try:
            traces = load_file(path)
        except Exception:  # noqa: BLE001 - a file no format reads is not a session
            continue
        by_session: dict[str, list[Any]] = defaultdict(list)
        for t in traces:
            by_session[t.session_id].append(t)
        for sid, ts in sorted(by_session.items()):
            if len(ts) < 2:
                continue
            ts.sort(key=lambda t: t.turn)
            rel = path.relative_to(ROOT)
            out.append(Session(f"{rel}#{sid}", ts[-1].input, tuple(t.input for t in ts)))
    return tuple(out)


def _split_system(msgs: list[ChatMsg]) -> tuple[ChatMsg | None, list[ChatMsg]]:
    if msgs and msgs[0].role == "system":
        return msgs[0], msgs[1:]
    return None, msgs


#: what the comparison leaves aside: a part's id is ctxscope's (the package's summary message
#: has none), and a tool result's tool name is passed through unchanged (the recorded result
#: messages do not carry it; what exclude_tools does with it shows in the contents)
_ASIDE = ("id", "name")


def _plain(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k not in _ASIDE}


def lc_view(messages: list[Message]) -> list[dict[str, Any]]:
    """A preset's chat messages as LangChain's (the oracle's form), ``_ASIDE`` aside."""
    sent = [m for m in messages if not m.metadata.get("replaced_by")]
    return [_plain(chat_message(k, "", m, None).as_json()) for k, m in enumerate(sent)]


def _most_used_tool(msgs: list[ChatMsg]) -> str:
    names = Counter(c.name for m in msgs for c in m.tool_calls)
    return names.most_common(1)[0][0] if names else "none"


def settings(preset: str, rest: list[ChatMsg], total: int) -> list[dict[str, Any]]:
    """The knob settings a session is run at, sized from its own tokens so that each policy
    acts (and, in one setting each, does not)."""
    n = len(rest)
    if preset == "langchain-context-editing":
        return [
            {"trigger": total // 2},
            {"trigger": total // 4, "keep": 1, "clear_at_least": max(total // 10, 1)},
            {"trigger": total // 3, "keep": 0, "clear_tool_inputs": True},
            {
                "trigger": total // 5,
                "keep": 2,
                "exclude_tools": [_most_used_tool(rest)],
                "placeholder": "[output cleared]",
            },
            {"trigger": total},  # at the trigger: nothing happens
        ]
    if preset == "langchain-summarization":
        return [
            {"trigger": max(total // 2, 1), "keep": 5},
            {
                "trigger": max(n // 2, 1),
                "trigger_kind": "messages",
                "keep": max(total // 3, 1),
                "keep_kind": "tokens",
            },
            {"trigger": max(total // 3, 1), "keep": max(total // 5, 1), "keep_kind": "tokens"},
            {},  # the defaults: trigger ("tokens", 4000), keep ("messages", 20)
            {"trigger": n + 1, "trigger_kind": "messages", "keep": 2},  # not reached
        ]
    half = max(total // 2, 1)
    return [
        {"max_tokens": half, "include_system": True, "start_on": "human"},
        {"max_tokens": max(total // 3, 1), "allow_partial": True},
        {
            "max_tokens": half,
            "strategy": "first",
            "allow_partial": True,
            "end_on": "ai",
            "tokenizer": "o200k_base",
        },
        {"max_tokens": 6, "token_counter": "len", "include_system": True, "start_on": "human"},
        {
            "max_tokens": max(total // 7, 1),
            "include_system": True,
            "allow_partial": True,
            "end_on": "tool",
        },
    ]


def oracle_params(cfg: Config) -> tuple[str, dict[str, Any]]:
    """The counter and the LangChain parameters a resolved config stands for."""
    encoding = cfg.tokenizer or "cl100k_base"
    if cfg.preset == "langchain-context-editing":
        edit = context_editing.edit_of(cfg)
        params = {f.name: getattr(edit, f.name) for f in fields(edit)}
        return encoding, {**params, "exclude_tools": list(edit.exclude_tools)}
    if cfg.preset == "langchain-summarization":
        spec = summarization.spec_of(cfg)
        return encoding, {"trigger": list(spec.trigger), "keep": list(spec.keep)}
    t = trimming.spec_of(cfg)
    params = {f.name: getattr(t, f.name) for f in fields(t)}
    return ("len" if cfg.token_counter == "len" else encoding), params


POLICIES = {
    "langchain-context-editing": "context-editing",
    "langchain-summarization": "summarization",
    "langchain-trim": "trim",
}


def _case(s: Session, cfg: Config, msgs: list[ChatMsg]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The oracle's case for one session and config, and what ctxscope's preset sent."""
    result = build(s.input, cfg)
    encoding, params = oracle_params(cfg)
    case: dict[str, Any] = {
        "name": f"{s.name}:{cfg.preset}:{json.dumps(params)}",
        "policy": POLICIES[cfg.preset],
        "params": params,
        "encoding": encoding,
        "messages": [m.as_json() for m in msgs],
        "summary": None,
        "summary_input": None,
    }
    mine: dict[str, Any] = {"messages": lc_view(result.messages or []), "summary_input": None}
    if cfg.preset == "langchain-summarization":
        # what the stand-in read and wrote (the function the preset runs)
        _, rest = _split_system(msgs)
        count = MessageCounter(get_counter(encoding))
        run = summarize(rest, summarization.spec_of(cfg), count, default_summarizer())
        case["summary"] = run.stand_in_text
        if run.summary_input is not None:
            case["summary_input"] = [m.as_json() for m in run.summary_input]
            mine["summary_input"] = run.summary_input
    return case, mine


def all_cases() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(oracle case, what ctxscope's preset sent) for every session × policy × setting."""
    out = []
    for s in sessions():
        system, rest = recorded_messages(conversation(s.input))
        msgs = ([system] if system is not None else []) + rest
        total = MessageCounter(get_counter("cl100k_base"))(rest)
        for preset in POLICIES:
            for knobs in settings(preset, rest, total):
                cfg = resolve_config(Config.model_validate({"preset": preset, **knobs}), s.input)
                out.append(_case(s, cfg, msgs))
    return out


def run_oracle(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Run scripts/lc_oracle.py in the LangChain venv on ``cases``; its parsed output."""
    with tempfile.TemporaryDirectory(prefix="lc-oracle-") as tmp:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["TIKTOKEN_CACHE_DIR"] = seed_tiktoken_cache(os.path.join(tmp, "tiktoken"))
        env["PYTHONIOENCODING"] = "utf-8"
        proc = subprocess.run(
            [str(ORACLE), str(ROOT / "scripts" / "lc_oracle.py")],
            input=json.dumps({"cases": cases}, ensure_ascii=False),
            capture_output=True,
            text=True,
            encoding="utf-8",
            env=env,
            check=False,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"the LangChain oracle failed (exit {proc.returncode}):\n{proc.stderr}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _need_oracle() -> None:
    if not ORACLE.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"the LangChain oracle venv is missing ({ORACLE}); run `make oracle`")
        pytest.skip(f"LangChain oracle venv not found at {ORACLE} (run `make oracle`)")


def test_there_is_a_multi_turn_session_of_every_kind() -> None:
    names = [s.name for s in sessions()]
    assert len(names) >= 45
    for kind in ("corpus/a01_sweagent", "corpus/b02_mswea", "claude-code/", "codex/", "pi/"):
        assert any(kind in n for n in names), kind


@pytest.mark.slow
def test_every_session_and_setting_sends_what_the_package_sends() -> None:
    _need_oracle()
    pairs = all_cases()
    out = run_oracle([c for c, _ in pairs])
    for name, want in PACKAGES.items():
        assert out["package"][name] == want
    bad = []
    acted = Counter()
    for (case, mine), res in zip(pairs, out["results"], strict=True):
        theirs = [_plain(m) for m in res["messages"]]
        if mine["messages"] != theirs:
            bad.append(case["name"])
        given = [_plain(m) for m in case["messages"]]
        acted[case["policy"]] += theirs != given
        if case["policy"] == "summarization":
            assert res["summary_calls"] == (1 if mine["summary_input"] else 0), case["name"]
            if mine["summary_input"]:
                assert res["prompt_matches"] is True, case["name"]
    assert not bad, f"{len(bad)} of {len(pairs)} cases differ: {bad[:5]}"
    # the settings make each policy act on most sessions, not only pass them through
    for policy in POLICIES.values():
        assert acted[policy] >= len(sessions()) * 2, (policy, acted)


def every_call_settings(preset: str, total: int) -> dict[str, Any]:
    """One setting per preset, sized from the call's own tokens, for every call of a session."""
    if preset == "langchain-context-editing":
        return {"trigger": total // 3, "keep": 2, "clear_tool_inputs": True}
    if preset == "langchain-summarization":
        return {"trigger": max(total // 2, 1), "keep": 6}
    return {
        "max_tokens": max(total // 2, 1),
        "include_system": True,
        "start_on": "human",
        "allow_partial": True,
    }


def calls_to_check(s: Session) -> list[CapturedInput]:
    """Every call of a session of up to 20 calls; of a longer one every 10th and the last
    (the 300-call sessions would take the oracle minutes)."""
    calls = list(s.calls)
    if len(calls) <= 20:
        return calls
    return calls[::10] + ([calls[-1]] if (len(calls) - 1) % 10 else [])


@pytest.mark.slow
def test_every_call_of_every_session_sends_what_the_package_sends() -> None:
    _need_oracle()
    pairs = []
    for s in sessions():
        for k, inp in enumerate(calls_to_check(s)):
            system, rest = recorded_messages(conversation(inp))
            msgs = ([system] if system is not None else []) + rest
            total = MessageCounter(get_counter("cl100k_base"))(rest)
            for preset in POLICIES:
                knobs = every_call_settings(preset, total)
                cfg = resolve_config(Config.model_validate({"preset": preset, **knobs}), inp)
                pairs.append(_case(Session(f"{s.name}@{k}", inp, (inp,)), cfg, msgs))
    out = run_oracle([c for c, _ in pairs])
    bad = [
        case["name"]
        for (case, mine), res in zip(pairs, out["results"], strict=True)
        if mine["messages"] != [_plain(m) for m in res["messages"]]
        or (case["policy"] == "summarization" and res["prompt_matches"] is False)
    ]
    assert not bad, f"{len(bad)} of {len(pairs)} cases differ: {bad[:5]}"
    assert len(pairs) > 800  # 276 calls × 3 presets
