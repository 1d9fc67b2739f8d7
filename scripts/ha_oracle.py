"""Run the real hello-agents 0.2.8 ContextBuilder on captured inputs (the oracle).

Runs INSIDE the oracle venv (``.oracle-venv/bin/python scripts/ha_oracle.py < cases.json``)
and imports only hello_agents, tiktoken and the standard library, so it sees exactly what a
user of the package sees. stdin: ``{"cases": [{"name", "input", "config"}], "repeat": N}``
where ``input`` is a ctxscope captured input (JSON) and ``config`` holds max_tokens,
reserve_ratio, min_relevance, enable_compression. stdout: ``{"package": ..., "results":
[{"name", "prompt", "printed", "seconds", "build_seconds"}]}``.

Time is frozen: the builder module's ``datetime`` is replaced by a subclass whose ``now()``
returns the case's ``now`` as naive UTC, and packets the builder creates itself get that
time as their default timestamp (in live use they get the wall clock a few microseconds
before the recency is computed). Packet timestamps are converted to naive UTC, which is
what the package's naive comparison amounts to. TIKTOKEN_CACHE_DIR must hold cl100k_base.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from datetime import UTC, datetime
from typing import Any

import hello_agents.context.builder as builder_mod
from hello_agents.context.builder import ContextBuilder, ContextConfig, ContextPacket
from hello_agents.core.message import Message

try:
    from importlib.metadata import version

    PACKAGE = f"hello-agents=={version('hello-agents')}"
except Exception:  # pragma: no cover - metadata missing in odd installs
    PACKAGE = "hello-agents"

_REAL_DATETIME = builder_mod.datetime


class _Frozen(_REAL_DATETIME):  # type: ignore[misc,valid-type]
    frozen: datetime | None = None

    @classmethod
    def now(cls, tz: Any = None) -> datetime:  # noqa: ARG003 - same signature as datetime
        assert cls.frozen is not None
        return cls.frozen


builder_mod.datetime = _Frozen  # type: ignore[misc]
_orig_init = ContextPacket.__init__


def _init(self: ContextPacket, *args: Any, **kwargs: Any) -> None:
    # The dataclass default_factory was bound to the real datetime.now at import time.
    if len(args) < 2 and "timestamp" not in kwargs:
        kwargs["timestamp"] = _Frozen.now()
    _orig_init(self, *args, **kwargs)


ContextPacket.__init__ = _init  # type: ignore[method-assign]


def naive_utc(text: str | None, default: datetime) -> datetime:
    if text is None:
        return default
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        raise SystemExit(f"naive timestamp {text!r} in a case; cases use tz-aware times")
    return dt.astimezone(UTC).replace(tzinfo=None)


def message(m: dict[str, Any], now: datetime) -> Message:
    ts = naive_utc(m.get("timestamp"), now)
    try:
        return Message(m["content"], m["role"], timestamp=ts)
    except Exception:
        # Roles outside the package's Literal: the builder only reads .role/.content.
        return Message.model_construct(content=m["content"], role=m["role"], timestamp=ts)


def run_case(case: dict[str, Any], repeat: int) -> dict[str, Any]:
    inp = case["input"]
    cfg = case.get("config") or {}
    now = naive_utc(inp["now"], datetime(1970, 1, 1))
    _Frozen.frozen = now
    config = ContextConfig(
        max_tokens=cfg.get("max_tokens", 8000),
        reserve_ratio=cfg.get("reserve_ratio", 0.15),
        min_relevance=cfg.get("min_relevance", 0.3),
        enable_compression=cfg.get("enable_compression", True),
    )
    best_total = best_build = float("inf")
    prompt = printed = ""
    for _ in range(max(repeat, 1)):
        t0 = time.perf_counter()
        history = [message(m, now) for m in inp.get("history", [])]
        packets = [
            ContextPacket(
                content=p["content"],
                timestamp=naive_utc(p.get("timestamp"), now),
                metadata={"type": p["kind"]},
                token_count=p.get("tokens") or 0,
                relevance_score=p.get("relevance") or 0.0,
            )
            for p in inp.get("packets", [])
        ]
        b = ContextBuilder(config=config)
        out = io.StringIO()
        t1 = time.perf_counter()
        with contextlib.redirect_stdout(out):
            prompt = b.build(
                user_query=inp["query"],
                conversation_history=history,
                system_instructions=inp.get("system_instructions") or None,
                additional_packets=packets,
            )
        t2 = time.perf_counter()
        printed = out.getvalue()
        best_total = min(best_total, t2 - t0)
        best_build = min(best_build, t2 - t1)
    return {
        "name": case.get("name", ""),
        "prompt": prompt,
        "printed": printed,
        "seconds": best_total,
        "build_seconds": best_build,
    }


def main() -> int:
    data = json.load(sys.stdin)
    repeat = int(data.get("repeat", 1))
    results = [run_case(c, repeat) for c in data["cases"]]
    json.dump({"package": PACKAGE, "results": results}, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
