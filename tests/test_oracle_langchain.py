"""The LangChain policies against the real langchain / langchain-core packages.

Every multi-turn session that imports from corpus/ and tests/fixtures/imports/ (its last
call: the longest message list it sent) is run through each policy at several knob settings,
by ctxscope and by the real package in its own venv (``.oracle-langchain``, ``make oracle``;
``scripts/lc_oracle.py``), and the message lists out must be the same: roles, contents, ids,
tool call ids, names and arguments, order. Both sides count tokens with the same function
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
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from ctxcore.formats.load import load_file
from ctxcore.models import CapturedInput
from ctxcore.pipeline.common import INSTRUCTIONS_ID
from ctxcore.pipeline.langchain_policies import (
    ChatMsg,
    ClearToolUses,
    MessageCounter,
    Summarization,
    Trim,
    clear_tool_uses,
    from_parts,
    summarize,
    trim,
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
    input: CapturedInput


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
            last = max(ts, key=lambda t: t.turn)
            assert last.result is not None
            rel = path.relative_to(ROOT)
            out.append(Session(f"{rel}#{sid}", last.input))
    return tuple(out)


def recorded_messages(inp: CapturedInput) -> list[ChatMsg]:
    """The recorded request as LangChain messages: the system prompt, then the conversation."""
    conv = conversation(inp)
    head = [ChatMsg("system", conv.system, INSTRUCTIONS_ID)] if conv.system else []
    return head + from_parts(conv.parts)


def _split_system(msgs: list[ChatMsg]) -> tuple[ChatMsg | None, list[ChatMsg]]:
    if msgs and msgs[0].role == "system":
        return msgs[0], msgs[1:]
    return None, msgs


def _most_used_tool(msgs: list[ChatMsg]) -> str:
    names = Counter(c.name for m in msgs for c in m.tool_calls)
    return names.most_common(1)[0][0] if names else "none"


def _context_editing_cases(s: Session, msgs: list[ChatMsg], total: int) -> list[dict[str, Any]]:
    settings = [
        {"trigger": total // 2},
        {"trigger": total // 4, "keep": 1, "clear_at_least": max(total // 10, 1)},
        {"trigger": total // 3, "keep": 0, "clear_tool_inputs": True},
        {
            "trigger": total // 5,
            "keep": 2,
            "exclude_tools": [_most_used_tool(msgs)],
            "placeholder": "[output cleared]",
        },
        {"trigger": total},  # at the trigger: nothing happens
    ]
    return [{"policy": "context-editing", "params": p, "encoding": "cl100k_base"} for p in settings]


def _summarization_cases(total: int, n: int) -> list[dict[str, Any]]:
    settings = [
        {"trigger": ["tokens", max(total // 2, 1)], "keep": ["messages", 5]},
        {"trigger": ["messages", max(n // 2, 1)], "keep": ["tokens", max(total // 3, 1)]},
        {"trigger": ["tokens", max(total // 3, 1)], "keep": ["tokens", max(total // 5, 1)]},
        {"trigger": ["tokens", 4000], "keep": ["messages", 20]},
        {"trigger": ["messages", n + 1], "keep": ["messages", 2]},  # not reached
    ]
    return [{"policy": "summarization", "params": p, "encoding": "cl100k_base"} for p in settings]


def _trim_cases(total: int) -> list[dict[str, Any]]:
    half, third = max(total // 2, 1), max(total // 3, 1)
    settings: list[tuple[dict[str, Any], str]] = [
        (
            {"max_tokens": half, "strategy": "last", "include_system": True, "start_on": "human"},
            "cl100k_base",
        ),
        ({"max_tokens": third, "strategy": "last", "allow_partial": True}, "cl100k_base"),
        (
            {"max_tokens": half, "strategy": "first", "allow_partial": True, "end_on": "ai"},
            "o200k_base",
        ),
        (
            {
                "max_tokens": 6,
                "strategy": "last",
                "include_system": True,
                "start_on": "human",
                "end_on": ["human", "tool"][0],
            },
            "len",
        ),
        (
            {
                "max_tokens": max(total // 7, 1),
                "strategy": "last",
                "include_system": True,
                "allow_partial": True,
                "end_on": "tool",
            },
            "cl100k_base",
        ),
    ]
    return [{"policy": "trim", "params": p, "encoding": e} for p, e in settings]


def _counter(encoding: str) -> MessageCounter:
    return MessageCounter(None if encoding == "len" else get_counter(encoding))


def ctxscope_side(case: dict[str, Any], msgs: list[ChatMsg]) -> dict[str, Any]:
    """What ctxscope's port does with a case: the messages out (and the stand-in's input and
    text for the oracle's summary model)."""
    count = _counter(case["encoding"])
    p = case["params"]
    if case["policy"] == "trim":
        spec = Trim(**{**p, "end_on": p.get("end_on"), "start_on": p.get("start_on")})
        return {"messages": trim(msgs, spec, count)}
    system, rest = _split_system(msgs)
    head = [system] if system is not None else []
    if case["policy"] == "context-editing":
        edit = ClearToolUses(**{**p, "exclude_tools": tuple(p.get("exclude_tools", ()))})
        out, _ = clear_tool_uses(rest, edit, count)
        return {"messages": head + out}
    run = summarize(
        rest,
        Summarization(tuple(p["trigger"]), tuple(p["keep"])),  # type: ignore[arg-type]
        count,
        default_summarizer(),
    )
    return {
        "messages": head + run.messages,
        "summary": run.stand_in_text,
        "summary_input": run.summary_input,
    }


def all_cases() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(oracle case, ctxscope's result) for every session × policy × setting."""
    out = []
    for s in sessions():
        msgs = recorded_messages(s.input)
        _, rest = _split_system(msgs)
        total = MessageCounter(get_counter("cl100k_base"))(rest)
        cases = [
            *_context_editing_cases(s, msgs, total),
            *_summarization_cases(total, len(rest)),
            *_trim_cases(total),
        ]
        for k, case in enumerate(cases):
            mine = ctxscope_side(case, msgs)
            case = {
                **case,
                "name": f"{s.name}:{case['policy']}:{k}",
                "messages": [m.as_json() for m in msgs],
                "summary": mine.get("summary"),
                "summary_input": (
                    [m.as_json() for m in mine["summary_input"]]
                    if mine.get("summary_input") is not None
                    else None
                ),
            }
            out.append((case, mine))
    return out


def run_oracle(cases: list[dict[str, Any]]) -> dict[str, Any]:
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


def test_every_multi_turn_session_and_setting_agrees_with_the_package() -> None:
    _need_oracle()
    pairs = all_cases()
    out = run_oracle([c for c, _ in pairs])
    for name, want in PACKAGES.items():
        assert out["package"][name] == want
    bad = []
    for (case, mine), res in zip(pairs, out["results"], strict=True):
        ours = [m.as_json() for m in mine["messages"]]
        if ours != res["messages"]:
            bad.append(case["name"])
        if case["policy"] == "summarization":
            assert res["summary_calls"] == (1 if mine["summary_input"] else 0), case["name"]
            if mine["summary_input"]:
                assert res["prompt_matches"] is True, case["name"]
    assert not bad, f"{len(bad)} of {len(pairs)} cases differ: {bad[:10]}"
