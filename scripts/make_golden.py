"""Write the hello-agents golden prompts from the real package (and, with --cases, the cases).

    .venv/bin/python scripts/make_golden.py [--oracle .oracle-venv/bin/python] [--cases]

``--cases`` regenerates tests/cases/ha_*.json from the hand-written inputs below and slices
of corpus/ (deterministic: same corpus, same cases). Then every case is run through the
real hello-agents 0.2.8 ContextBuilder (scripts/ha_oracle.py inside the oracle venv) and
tests/golden/hello_agents/<case>.json records the prompt it returned. Tests compare our
``hello-agents`` preset against these files, and re-run the oracle when its venv exists.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "cases"
GOLDEN = ROOT / "tests" / "golden" / "hello_agents"
CORPUS = Path(os.environ.get("CTXSCOPE_CORPUS", ROOT / "corpus"))
DEFAULT_ORACLE = ROOT / ".oracle-venv" / "bin" / "python"
NOW = "2026-01-24T14:00:00Z"


# --------------------------------------------------------------------------- oracle


def run_oracle(
    cases: list[dict[str, Any]], python: str | os.PathLike[str], repeat: int = 1
) -> dict[str, Any]:
    """Run scripts/ha_oracle.py in the oracle venv on ``cases``; its parsed JSON output."""
    sys.path.insert(0, str(ROOT))
    from ctxcore.tokens import seed_tiktoken_cache

    with tempfile.TemporaryDirectory(prefix="ha-oracle-") as tmp:
        cache = seed_tiktoken_cache(os.path.join(tmp, "tiktoken"))
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["TIKTOKEN_CACHE_DIR"] = cache
        env["PYTHONIOENCODING"] = "utf-8"
        proc = subprocess.run(
            [str(python), str(ROOT / "scripts" / "ha_oracle.py")],
            input=json.dumps({"cases": cases, "repeat": repeat}, ensure_ascii=False),
            capture_output=True,
            text=True,
            encoding="utf-8",
            env=env,
            check=False,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"the oracle failed (exit {proc.returncode}):\n{proc.stderr}")
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def load_cases() -> list[dict[str, Any]]:
    return [json.loads(p.read_text("utf-8")) for p in sorted(CASES.glob("ha_*.json"))]


# --------------------------------------------------------------------------- cases


def _msg(role: str, content: str, ts: str | None = None, id: str | None = None) -> dict[str, Any]:
    m: dict[str, Any] = {"role": role, "content": content}
    if ts:
        m["timestamp"] = ts
    if id:
        m["id"] = id
    return m


def _pkt(id: str, kind: str, content: str, ts: str | None = None, **kw: Any) -> dict[str, Any]:
    p: dict[str, Any] = {"id": id, "kind": kind, "content": content}
    if ts:
        p["timestamp"] = ts
    p.update(kw)
    return p


def _case(name: str, description: str, input: dict[str, Any], **config: Any) -> dict[str, Any]:
    input = {"now": NOW, **input}
    return {"name": name, "description": description, "input": input, "config": config}


def _read(name: str) -> str:
    return (CORPUS / name).read_text("utf-8", errors="replace")


def _md_messages(text: str, limit: int) -> list[tuple[str, str]]:
    """Split an opencode session export into (role, content) on its ## User/Assistant heads."""
    out: list[tuple[str, str]] = []
    role, buf = "", []
    for line in text.splitlines():
        m = re.match(r"^## (User|Assistant)\b", line)
        if m:
            if role and "".join(buf).strip():
                out.append((role, "\n".join(buf).strip()[:limit]))
            role, buf = m.group(1).lower(), []
        elif role:
            buf.append(line)
    if role and "".join(buf).strip():
        out.append((role, "\n".join(buf).strip()[:limit]))
    return out


def hand_cases() -> list[dict[str, Any]]:
    eng_history = [
        _msg("user", "The nightly build fails on the parser tests.", "2026-01-24T12:00:00Z"),
        _msg("assistant", "I will run the parser tests and read the failure.", None),
        _msg("user", "Please keep the public API unchanged.", "2026-01-24T13:10:00Z"),
    ]
    eng_packets = [
        _pkt(
            "tool:call_1",
            "tool_result",
            "FAILED tests/test_parser.py::test_unicode - AssertionError: expected 3 tokens, "
            "got 4\n1 failed, 120 passed in 3.2s",
            "2026-01-24T13:55:00Z",
        ),
        _pkt(
            "rag:doc-7",
            "retrieval",
            "The parser splits tokens on unicode whitespace since version 2.1 and the "
            "tests assert the old behaviour.",
            "2026-01-23T14:00:00Z",
        ),
        _pkt(
            "kb:style",
            "knowledge_base",
            "Public API changes need a deprecation cycle of one minor release.",
        ),
        _pkt(
            "state:plan",
            "task_state",
            "Step 2 of 4: reproduce the parser failure. Open: which commit broke the tests.",
            "2026-01-24T13:59:00Z",
        ),
        _pkt(
            "mem:user-pref",
            "related_memory",
            "The user prefers small patches with tests that fail before the fix.",
            "2026-01-20T09:00:00Z",
        ),
        _pkt(
            "tool:future",
            "tool_result",
            "parser tests rerun scheduled; the failure is in test_unicode.",
            "2026-01-24T15:00:00Z",
        ),
        _pkt("note:irrelevant", "tool_result", "Disk usage is 42% on /dev/sda1."),
    ]
    cases = [
        _case(
            "ha_english",
            "English query, history, packets of every rendered type, ages from minutes "
            "to days and one in the future",
            {
                "query": "why do the parser tests fail after the unicode change",
                "system_instructions": "You are a careful coding agent. Never change the "
                "public API without asking.",
                "history": eng_history,
                "packets": eng_packets,
            },
        ),
        _case(
            "ha_chinese",
            "Chinese query and content (words split by whitespace only)",
            {
                "query": "如何 优化 Pandas 的 内存 占用",
                "system_instructions": "你是一位资深的Python数据工程顾问。回答需要具体可行。",
                "history": [
                    _msg("user", "我正在开发一个数据分析工具", "2026-01-24T13:00:00Z"),
                    _msg("assistant", "您计划使用什么技术栈？", "2026-01-24T13:01:00Z"),
                    _msg("user", "我打算使用 Python 和 Pandas 处理 内存 很大的 CSV"),
                ],
                "packets": [
                    _pkt(
                        "kb:pandas-1",
                        "knowledge_base",
                        "Pandas 内存 优化 的 核心 策略：使用 category 代替 object，分块 读取",
                        "2026-01-24T10:00:00Z",
                    ),
                    _pkt(
                        "mem:1",
                        "related_memory",
                        "用户 正在 开发 数据分析 工具，使用 Python 和 Pandas",
                        "2026-01-22T10:00:00Z",
                    ),
                    _pkt(
                        "state:zh",
                        "task_state",
                        "已完成 CSV 读取模块；未决：如何 降低 内存 占用",
                    ),
                    _pkt("tool:zh", "tool_result", "内存 占用 峰值 3.2GB，优化 前"),
                ],
            },
        ),
        _case(
            "ha_mixed",
            "Mixed Chinese/English, min_relevance 0.2",
            {
                "query": "修复 login 接口 的 timeout bug",
                "system_instructions": "You are a backend engineer. 回答用中文。",
                "packets": [
                    _pkt(
                        "tool:log",
                        "tool_result",
                        "ERROR login handler timeout after 30s\n调用 auth 服务 超时",
                        "2026-01-24T13:58:00Z",
                    ),
                    _pkt(
                        "rag:cfg",
                        "retrieval",
                        "The login endpoint uses a 30s timeout configured in settings.py",
                    ),
                    _pkt("rag:other", "retrieval", "部署 文档：使用 docker compose 启动"),
                ],
            },
            min_relevance=0.2,
        ),
        _case(
            "ha_unknown_types",
            "Selected packets of types the package never renders use budget",
            {
                "query": "what does the config loader do",
                "packets": [
                    _pkt("note:1", "note", "the config loader reads yaml files"),
                    _pkt("file:loader.py", "file", "def load(path):  # what does the config do"),
                    _pkt("ev:1", "evidence", "config loader does validation"),
                    _pkt("x:1", "knowledge", "what the loader does is documented here"),
                    _pkt("tool:1", "tool_result", "config loader test passed"),
                ],
            },
        ),
        _case(
            "ha_empty_query",
            "Empty query: relevance is 0 for everything; min_relevance 0 keeps them",
            {
                "query": "",
                "system_instructions": "Be brief.",
                "history": [_msg("user", "hello"), _msg("assistant", "hi")],
                "packets": [
                    _pkt("tool:a", "tool_result", "old result", "2026-01-24T10:00:00Z"),
                    _pkt("tool:b", "tool_result", "new result", "2026-01-24T13:59:00Z"),
                ],
            },
            min_relevance=0.0,
        ),
        _case(
            "ha_empty_query_default",
            "Empty query with the default min_relevance: everything but instructions is filtered",
            {
                "query": "",
                "system_instructions": "Be brief.",
                "packets": [_pkt("tool:a", "tool_result", "result")],
            },
        ),
        _case(
            "ha_long_history",
            "25 messages: the last 10 become one packet, the rest are cut",
            {
                "query": "what did we decide about the cache",
                "history": [
                    _msg(
                        "user" if i % 2 == 0 else "assistant",
                        f"turn {i}: we discussed the cache eviction policy option {i}",
                        f"2026-01-24T{10 + i // 10:02d}:{(i * 2) % 60:02d}:00Z",
                        id=f"msg-{i}" if i % 3 == 0 else None,
                    )
                    for i in range(25)
                ],
            },
        ),
        _case(
            "ha_special_tokens",
            "Text that spells special tokens: tiktoken encode() raises, the package counts len//4",
            {
                "query": "explain the endoftext marker",
                "system_instructions": "Explain tokens. The marker <|endoftext|> ends a document.",
                "history": [_msg("user", "what is <|fim_prefix|> used for in the marker")],
                "packets": [
                    _pkt(
                        "tool:tok",
                        "tool_result",
                        "The marker <|endoftext|> separates documents; explain the marker "
                        "usage " + "x " * 40,
                    ),
                    _pkt("tool:plain", "tool_result", "explain the marker in plain words"),
                ],
            },
        ),
        _case(
            "ha_caller_relevance",
            "Caller relevance is overwritten; tokens 0 is recounted; given tokens are trusted",
            {
                "query": "database migration failed",
                "packets": [
                    _pkt(
                        "rag:high",
                        "retrieval",
                        "unrelated text about colours",
                        relevance=0.95,
                    ),
                    _pkt(
                        "tool:mig",
                        "tool_result",
                        "migration 0042 failed: the database is locked",
                        relevance=0.1,
                        tokens=0,
                    ),
                    _pkt(
                        "tool:given",
                        "tool_result",
                        "database migration failed twice; retry failed too",
                        tokens=3,
                    ),
                ],
            },
        ),
        _case(
            "ha_oversized_instructions",
            "Instructions larger than the budget are silently left out",
            {
                "query": "summarize the error",
                "system_instructions": "Follow these rules carefully. " * 60,
                "packets": [_pkt("tool:e", "tool_result", "summarize the error: disk full")],
            },
            max_tokens=200,
        ),
        _case(
            "ha_overflow_compress",
            "Caller token counts far too low: selection passes, the prompt overflows, "
            "compression cuts lines without a marker and loses [Output]",
            {
                "query": "why does the deploy fail",
                "system_instructions": "You are an SRE. Answer with evidence.",
                "packets": [
                    _pkt(
                        f"tool:log-{i}",
                        "tool_result",
                        "\n".join(
                            f"deploy step {i}.{j}: why does the deploy fail? retrying "
                            f"connection to db-{j}"
                            for j in range(8)
                        ),
                        f"2026-01-24T13:{10 + i:02d}:00Z",
                        tokens=5,
                    )
                    for i in range(6)
                ],
            },
            max_tokens=400,
        ),
        _case(
            "ha_compress_cuts_task",
            "Instructions just under the budget: compression cuts inside them and [Task] is lost",
            {
                "query": "what is next",
                "system_instructions": "\n".join(
                    f"Rule {i}: always check the logs before acting." for i in range(12)
                ),
            },
            max_tokens=135,
            reserve_ratio=0.0,
        ),
        _case(
            "ha_no_compression",
            "Compression disabled: the over-budget prompt is returned whole",
            {
                "query": "why does the deploy fail",
                "packets": [
                    _pkt(
                        "tool:big",
                        "tool_result",
                        "why does the deploy fail: " + "timeout " * 300,
                        tokens=10,
                    )
                ],
            },
            max_tokens=200,
            enable_compression=False,
        ),
        _case(
            "ha_skip_fill",
            "A big packet is skipped and smaller later ones still fit (continue, not break)",
            {
                "query": "cache miss rate",
                "packets": [
                    _pkt("tool:big", "tool_result", "cache miss rate " + "detail " * 400),
                    _pkt("tool:small", "tool_result", "cache miss rate is 12%"),
                    _pkt("rag:small", "retrieval", "cache miss rate target is 5%"),
                ],
            },
            max_tokens=300,
        ),
        _case(
            "ha_no_instructions_no_history",
            "Only packets, including caller packets typed instructions and history",
            {
                "query": "rotate the api keys",
                "packets": [
                    _pkt("pol:1", "instructions", "Never print api keys. rotate keys monthly."),
                    _pkt("hist:old", "history", "[user] rotate the api keys please"),
                    _pkt("tool:k", "tool_result", "keys rotated: 3 api keys"),
                ],
            },
        ),
    ]
    return cases


def corpus_cases() -> list[dict[str, Any]]:
    cases = []
    logs = [
        ("d01_pytest_reportingdemo_44_failures.rst", "tool_result", 6000),
        ("d02_pytest_requests_157_errors_truncated.txt", "tool_result", 5000),
        ("d04_grep_r_qualname_sphinx.txt", "tool_result", 4000),
        ("d06_jest_failure_zh_xresolver.log", "tool_result", 5000),
        ("d08_find_grep_sigpipe_spam.log", "tool_result", 3000),
        ("d10_aider_repo_map_show-repo_2024-08-05.md", "repo_map", 4000),
        ("d05_pip_install_editable_marshmallow.log", "tool_result", 3000),
    ]
    packets = [
        _pkt(
            f"tool:{name.split('_')[0]}",
            kind,
            _read(name)[:size],
            f"2026-01-24T13:{10 + 5 * i:02d}:00Z",
        )
        for i, (name, kind, size) in enumerate(logs)
    ]
    cases.append(
        _case(
            "ha_corpus_tool_logs",
            "Real tool logs d01/d02/d04/d05/d06/d08 and a repo map d10 under a 4k window",
            {
                "query": "which test fails and what is the error in the failing test",
                "system_instructions": "You are a coding agent fixing failing tests.",
                "packets": packets,
            },
            max_tokens=4000,
            min_relevance=0.2,
        )
    )
    zh = _md_messages(_read("c01_zh_opencode_session_ses_4398.md"), 1500)
    zh_tools = _md_messages(_read("b05_zh_opencode_session_ses_4119.md"), 2500)[:12]
    cases.append(
        _case(
            "ha_corpus_zh_session",
            "A Chinese opencode session (c01) as history and b05 turns as tool results",
            {
                "query": "分析 当前 项目 的 功能 和 架构 tsc error",
                "system_instructions": "你是 Sisyphus，一个编码助手。",
                "history": [
                    _msg(role, content, f"2026-01-24T12:{i * 3:02d}:00Z")
                    for i, (role, content) in enumerate(zh)
                ],
                "packets": [
                    _pkt(f"tool:b05-{i}", "tool_result", content, f"2026-01-24T13:{i * 4:02d}:00Z")
                    for i, (_, content) in enumerate(zh_tools)
                ],
            },
            min_relevance=0.1,
        )
    )
    for name, fname, key in (
        (
            "ha_corpus_swe_a01",
            "a01_sweagent_marshmallow-1867_function-calling.traj.json",
            "history",
        ),
        ("ha_corpus_swe_b01", "b01_mswea_gemini3pro_pytest-dev__pytest-7571.traj.json", "messages"),
    ):
        msgs = json.loads(_read(fname))[key]
        system = next(m["content"] for m in msgs if m["role"] == "system")
        rest = [m for m in msgs if m["role"] != "system" and isinstance(m["content"], str)]
        task = rest[0]["content"]
        query = " ".join(re.findall(r"[A-Za-z_]+", task)[20:32]).lower()
        history = [
            _msg(m["role"], m["content"][:3000], f"2026-01-24T12:{i:02d}:00Z")
            for i, m in enumerate(rest[:30])
        ]
        tool_outputs = [m["content"][:4000] for m in rest[30:] if m["role"] in ("tool", "user")][
            :10
        ]
        cases.append(
            _case(
                name,
                f"SWE-agent trajectory {fname}: system prompt, 30 messages of history, later "
                "tool outputs as packets",
                {
                    "query": query,
                    "system_instructions": system[:6000],
                    "history": history,
                    "packets": [
                        _pkt(
                            f"tool:{name[-3:]}-{i}", "tool_result", c, f"2026-01-24T13:{i:02d}:00Z"
                        )
                        for i, c in enumerate(tool_outputs)
                    ],
                },
                max_tokens=6000,
                min_relevance=0.1,
            )
        )
    return cases


def write_cases() -> list[Path]:
    CASES.mkdir(parents=True, exist_ok=True)
    paths = []
    for case in hand_cases() + corpus_cases():
        path = CASES / f"{case['name']}.json"
        path.write_text(json.dumps(case, ensure_ascii=False, indent=1) + "\n", "utf-8")
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--oracle", default=str(DEFAULT_ORACLE), help="the oracle venv's python")
    ap.add_argument("--cases", action="store_true", help="regenerate tests/cases/ha_*.json")
    args = ap.parse_args(argv)
    if args.cases:
        for p in write_cases():
            print(f"wrote {p.relative_to(ROOT)}")
    if not Path(args.oracle).exists():
        print(f"no oracle python at {args.oracle}; run `make oracle` first", file=sys.stderr)
        return 1
    cases = load_cases()
    out = run_oracle(cases, args.oracle)
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for case, res in zip(cases, out["results"], strict=True):
        golden = {
            "name": case["name"],
            "package": out["package"],
            "prompt": res["prompt"],
            "printed": res["printed"],
        }
        path = GOLDEN / f"{case['name']}.json"
        path.write_text(json.dumps(golden, ensure_ascii=False, indent=1) + "\n", "utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
