"""A large, deterministic captured input built from the real corpus, for benches and tests.

Speed targets (issue 2) are stated "on a captured input of 1,000 packets, about 300k tokens
of real text". Every bench imports :func:`corpus_input` so that all of them measure the same
thing: tool outputs from real agent trajectories (a01, b01, b02, b03), the raw d0x logs, the
aider repo map (d10) cut into per-file chunks, Chinese sessions and tool-use chats (b05, c01,
c02), with realistic kinds, stable ids, timestamps spread over hours before ``now``, some
caller relevances and a few must-keep items.

Nothing here counts tokens (that would warm the shared counter cache and falsify the "cold"
bench); sizes are steered by characters. ``corpus_input()`` is pure: same arguments, same
input, byte for byte.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

from ctxcore import settings
from ctxcore.models import CapturedInput, Message, Packet, ToolDef

CORPUS = settings.corpus_dir(Path(__file__).resolve().parent.parent / "corpus")

NOW = datetime(2026, 1, 24, 14, 0, 0, tzinfo=UTC)
QUERY = (
    "Fix the TimeDelta serialization precision bug in marshmallow fields.py so that "
    "test_timedelta_field passes; 保持向后兼容，不要修改公共 API"
)
#: one piece of text is cut at a line boundary past this many characters
_MAX_PIECE_CHARS = 2800


@dataclass(frozen=True)
class _Piece:
    id: str
    kind: str
    content: str
    metadata: tuple[tuple[str, Any], ...] = ()


def _read(name: str) -> str:
    return (CORPUS / name).read_text(encoding="utf-8", errors="replace")


def _cut(text: str, limit: int = _MAX_PIECE_CHARS) -> list[str]:
    """Split ``text`` into chunks of at most ~``limit`` characters at line boundaries."""
    if len(text) <= limit:
        return [text]
    chunks: list[str] = []
    cur: list[str] = []
    size = 0
    for line in text.splitlines(keepends=True):
        if size + len(line) > limit and cur:
            chunks.append("".join(cur))
            cur, size = [], 0
        cur.append(line[:limit])
        size += len(cur[-1])
    if cur:
        chunks.append("".join(cur))
    return chunks


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-/]+", "-", text).strip("-")[:60] or "x"


def _traj_observations(name: str, tag: str) -> list[_Piece]:
    data = json.loads(_read(name))
    out: list[_Piece] = []
    msgs = data.get("messages") or data.get("history") or []
    for i, m in enumerate(msgs):
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        if not isinstance(content, str) or not content.strip() or i < 2:
            continue
        role = m.get("role")
        if role == "tool":
            call = m.get("tool_call_ids") or [m.get("tool_call_id") or f"{tag}_{i}"]
            base = f"tool:{call[0] if isinstance(call, list) else call}"
            kind = "tool_result"
        elif role == "user":
            base, kind = f"tool:{tag}_obs_{i}", "tool_result"
        elif role == "assistant":
            base, kind = f"note:{tag}_thought_{i}", "note"
        else:
            continue
        for j, chunk in enumerate(_cut(content)):
            out.append(_Piece(base if j == 0 else f"{base}#{j}", kind, chunk))
    return out


def _logs() -> list[_Piece]:
    out: list[_Piece] = []
    for path in sorted(CORPUS.glob("d*")):
        if path.name.startswith("d10"):
            continue
        text = _read(path.name)
        stem = path.name.split("_")[0]
        failed = stem in ("d01", "d02", "d06", "d07", "d09", "d12")
        for j, chunk in enumerate(_cut(text)):
            meta: tuple[tuple[str, Any], ...] = (("source", path.name),)
            if failed:
                meta += (("exit_code", 1),)
            out.append(
                _Piece(f"tool:log_{stem}" + (f"#{j}" if j else ""), "tool_result", chunk, meta)
            )
    return out


def _repo_map() -> list[_Piece]:
    text = _read("d10_aider_repo_map_show-repo_2024-08-05.md")
    out = [_Piece("repo_map:aider", "repo_map", text[: _MAX_PIECE_CHARS * 2])]
    seen: set[str] = set()
    for para in re.split(r"\n\s*\n", text):
        head = para.strip().splitlines()[0] if para.strip() else ""
        if not head.endswith(":") or "/" not in head and "." not in head:
            continue
        path = head[:-1].strip()
        if path in seen:
            continue
        seen.add(path)
        out.append(_Piece(f"file:{_slug(path)}", "file", para.strip() + "\n"))
    return out


def _sections(name: str, tag: str, kinds: tuple[str, ...]) -> list[_Piece]:
    text = _read(name)
    out: list[_Piece] = []
    for i, sec in enumerate(re.split(r"\n---\n", text)):
        sec = sec.strip()
        if len(sec) < 40:
            continue
        kind = kinds[i % len(kinds)]
        for j, chunk in enumerate(_cut(sec)):
            out.append(_Piece(f"{kind}:{tag}-{i}" + (f"#{j}" if j else ""), kind, chunk))
    return out


def _zh_chats() -> tuple[list[_Piece], list[ToolDef]]:
    data = json.loads(_read("c02_llamafactory_glaive_toolcall_zh_demo.json"))
    out: list[_Piece] = []
    tools: dict[str, ToolDef] = {}
    kinds = ("retrieval", "memory", "knowledge", "evidence")
    for i, conv in enumerate(data):
        lines = [f"{t['from']}: {t['value']}" for t in conv["conversations"]]
        out.append(_Piece(f"{kinds[i % 4]}:c02-{i}", kinds[i % 4], "\n".join(lines)))
        if len(tools) < 4:
            for t in json.loads(conv.get("tools") or "[]"):
                if isinstance(t, dict) and "name" in t and t["name"] not in tools:
                    tools[t["name"]] = ToolDef(
                        name=t["name"],
                        description=t.get("description", ""),
                        parameters=t.get("parameters", {}),
                    )
    return out, list(tools.values())[:4]


def _aider_turns() -> list[_Piece]:
    text = _read("b04_aider_chat_session_2024-08-13_1342.md")
    out: list[_Piece] = []
    for i, turn in enumerate(re.split(r"\n(?=#### )", text)):
        if len(turn.strip()) >= 40:
            for j, chunk in enumerate(_cut(turn.strip())):
                out.append(
                    _Piece(f"history:aider-turn-{i}" + (f"#{j}" if j else ""), "history", chunk)
                )
    return out


@lru_cache(maxsize=2)
def _pool() -> tuple[tuple[_Piece, ...], tuple[ToolDef, ...], tuple[Message, ...], str]:
    pieces: list[_Piece] = []
    pieces += _traj_observations("a01_sweagent_marshmallow-1867_function-calling.traj.json", "a01")
    pieces += _traj_observations("b01_mswea_gemini3pro_pytest-dev__pytest-7571.traj.json", "b01")
    pieces += _traj_observations("b02_mswea_gemini3pro_django__django-16560.traj.json", "b02")
    pieces += _traj_observations("b03_sweagent_pydicom-1458.traj.json", "b03")
    pieces += _logs()
    pieces += _repo_map()
    pieces += _sections("b05_zh_opencode_session_ses_4119.md", "b05", ("note", "memory", "history"))
    pieces += _sections(
        "c01_zh_opencode_session_ses_4398.md", "c01", ("memory", "note", "retrieval")
    )
    chats, tools = _zh_chats()
    pieces += chats
    pieces += _aider_turns()
    # ids must be unique; a repeated id (same tool call quoted twice) keeps its first piece
    uniq: dict[str, _Piece] = {}
    for p in pieces:
        uniq.setdefault(p.id, p)

    a01 = json.loads(_read("a01_sweagent_marshmallow-1867_function-calling.traj.json"))
    hist = a01["history"]
    system = str(hist[0]["content"])
    messages: list[Message] = []
    for i, m in enumerate(hist[1:]):
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        role = str(m.get("role"))
        messages.append(
            Message(
                role=role,
                content=str(content),
                id=f"a01-{i + 1}",
                timestamp=NOW - timedelta(minutes=2 * (len(hist) - i)),
            )
        )
    return tuple(uniq.values()), tuple(tools), tuple(messages), system


def corpus_input(n_packets: int = 1000, seed: int = 0) -> CapturedInput:
    """A captured input of ``n_packets`` real corpus packets (~300 tokens each on average).

    Deterministic in (``n_packets``, ``seed``). About 15 % of packets carry a caller
    relevance, priorities vary, and four items are must-keep: the issue text, a plan, a
    user constraint and the latest failing test log.
    """
    pieces, tools, messages, system = _pool()
    rng = random.Random(seed)
    pool = list(pieces)
    rng.shuffle(pool)
    chosen = pool[: max(0, n_packets - 4)]
    packets: list[Packet] = []
    for i, p in enumerate(chosen):
        age_h = rng.uniform(0.05, 8.0)
        rel = round(rng.uniform(0.05, 0.95), 3) if rng.random() < 0.15 else None
        pri = rng.choice((0, 0, 0, 1, 2, 5))
        packets.append(
            Packet(
                id=p.id,
                kind=p.kind,
                content=p.content,
                timestamp=NOW - timedelta(hours=round(age_h, 4)),
                relevance=rel,
                priority=pri,
                metadata=dict(p.metadata) | {"order": i},
            )
        )
    # The must-keep items of a real agent turn, all from real text.
    issue = messages[0].content if messages else QUERY
    packets.append(
        Packet(
            id="task:issue-1867",
            kind="task",
            content=issue[:3000],
            timestamp=NOW - timedelta(hours=8),
            must_keep=True,
        )
    )
    packets.append(
        Packet(
            id="state:plan",
            kind="state",
            content=(
                "Active plan:\n1. reproduce the rounding with a script (done)\n"
                "2. fix fields.TimeDelta._serialize to round instead of truncate\n"
                "3. run tests/test_fields.py and tests/test_serialization.py\n"
                "4. submit"
            ),
            timestamp=NOW - timedelta(minutes=5),
            must_keep=True,
            metadata={"active": True},
        )
    )
    packets.append(
        Packet(
            id="note:constraint-compat",
            kind="constraint",
            content=(
                "User constraint: 保持向后兼容，不要修改公共 API (keep the public API unchanged)."
            ),
            timestamp=NOW - timedelta(hours=7, minutes=50),
            must_keep=True,
        )
    )
    d06 = _read("d06_jest_failure_zh_xresolver.log")
    packets.append(
        Packet(
            id="tool:latest_failure",
            kind="tool_result",
            content=d06,
            timestamp=NOW - timedelta(minutes=1),
            must_keep=True,
            metadata={"exit_code": 1, "source": "d06_jest_failure_zh_xresolver.log"},
        )
    )
    return CapturedInput(
        query=QUERY,
        now=NOW,
        system_instructions=system,
        history=list(messages[1:]),
        packets=packets[:n_packets] if n_packets < 4 else packets,
        tools=list(tools),
        window=16000,
        output_reserve=None,
    )


def total_chars(inp: CapturedInput) -> int:
    return sum(len(p.content) for p in inp.packets) + sum(len(m.content) for m in inp.history)


if __name__ == "__main__":  # a quick look: python bench/corpus_input.py
    inp = corpus_input()
    from collections import Counter

    from ctxcore.tokens import get_encoding

    enc = get_encoding("cl100k_base")
    toks = sum(len(x) for x in enc.encode_ordinary_batch([p.content for p in inp.packets]))
    print(f"packets={len(inp.packets)} history={len(inp.history)} tools={len(inp.tools)}")
    print(f"chars={total_chars(inp):,} packet tokens={toks:,}")
    print(Counter(p.kind for p in inp.packets).most_common())
