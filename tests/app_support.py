"""Real traces for the app tests: sessions built by the real pipeline over corpus text.

Each session's turns see a growing prefix of one deterministic captured input from the
corpus (``bench/corpus_input.py``), so packet ids repeat across turns as they do for a
real agent, and a clock that moves one minute per turn.
"""

from __future__ import annotations

import importlib.util
import sys
from datetime import timedelta
from pathlib import Path

from ctxcore.models import Config, Trace
from ctxcore.pipeline import build_trace
from ctxcore.store import TraceStore

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "bench") not in sys.path:
    sys.path.insert(0, str(ROOT / "bench"))

from corpus_input import corpus_input  # noqa: E402


def available_presets() -> list[str]:
    mods = {
        "ctxscope": "ctxcore.pipeline.ctxscope",
        "hello-agents": "ctxcore.pipeline.hello_agents",
        "hello-agents-book": "ctxcore.pipeline.hello_agents_book",
    }
    return [p for p, m in mods.items() if importlib.util.find_spec(m) is not None]


def default_preset() -> str:
    presets = available_presets()
    return "ctxscope" if "ctxscope" in presets else presets[0]


def session(
    session_id: str,
    turns: int = 3,
    *,
    preset: str | None = None,
    first: int = 12,
    step: int = 4,
    pool: int = 60,
    config: dict | None = None,
    tags: list[str] | None = None,
) -> list[Trace]:
    base = corpus_input(pool, seed=0)
    out = []
    for k in range(turns):
        inp = base.model_copy(
            update={
                "packets": base.packets[: first + step * k],
                "now": base.now + timedelta(minutes=k),
            }
        )
        cfg = Config(preset=preset or default_preset(), **(config or {}))  # type: ignore[arg-type]
        out.append(
            build_trace(
                inp,
                cfg,
                trace_id=f"{session_id}-t{k}",
                session_id=session_id,
                turn=k,
                tags=list(tags or []),
            )
        )
    return out


def fill(db: Path, traces: list[Trace]) -> None:
    with TraceStore(db) as store:
        store.add_traces(traces, source="tests")
