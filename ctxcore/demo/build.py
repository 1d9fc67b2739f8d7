"""The demo sessions: real agent transcripts from the corpus, rebuilt turn by turn.

A fresh ctxscope must show something real on first run, so ``traces/demo/*.jsonl`` ships
traces generated here from the vendored corpus: one trace per model call (turn = step
index), each the context a builder assembles from the conversation so far. The sessions
are chosen for the problems they show (a failing test log dropped, a user constraint
summarized away, tool dumps flooding the budget, Chinese text that whitespace relevance
cannot see), built with several presets and tight budgets so that decisions matter.

What is real and what is added is said in every trace's ``metadata``: the messages, tool
calls and outputs come from the corpus byte for byte; the packets a harness would add on
top (the pinned task, the agent's plan, logs from a sibling session) are listed under
``metadata.demo.enrichment``; the clock is the source's own where it has one, else a
fixed synthetic start plus one minute per turn. The outcome output is what the real agent
answered at that step; its verdict and note are ours.

Generation is deterministic: trace ids derive from session and turn, ``created_at`` from
the clock, and the per-stage timings (the one measured field) are dropped, so running
``ctxscope demo`` twice gives byte-identical files. Regenerate the committed files whenever
a preset changes (``tests/test_demo.py`` checks that they match).
"""

from __future__ import annotations

from pathlib import Path

from ctxcore import settings
from ctxcore.demo.sessions import all_sessions
from ctxcore.demo.turns import DemoTurn, Session, trace_id_for
from ctxcore.errors import InputError
from ctxcore.models import Outcome, Trace
from ctxcore.output import write_output
from ctxcore.pipeline import build_trace

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "corpus"
DEFAULT_OUT = settings.DEMO_DIR
GENERATOR = "ctxcore.demo/1"


def sessions(corpus: Path) -> list[Session]:
    """Every demo session, in the order the files are written (see ``sessions``)."""
    return all_sessions(corpus)


def _trace(session: Session, turn: DemoTurn) -> Trace:
    meta = {
        "demo": {
            "generator": GENERATOR,
            "session_title": session.title,
            "source": f"corpus/{session.source}",
            "step": turn.step,
            "clock": session.clock,
            "enrichment": list(turn.enrichment),
            **turn.facts,
            "timings": "dropped so that regenerated files are byte-identical",
        }
    }
    trace = build_trace(
        turn.input,
        turn.config,
        trace_id=trace_id_for(session.id, turn.step),
        session_id=session.id,
        turn=turn.step,
        created_at=turn.input.now,
        tags=["demo", *turn.tags],
        metadata=meta,
    )
    assert trace.result is not None
    trace = trace.model_copy(update={"result": trace.result.model_copy(update={"timings": {}})})
    verdict, note = turn.verdict, turn.note
    if session.judge is not None:
        verdict, note = session.judge(turn, trace)
    outcome = Outcome(verdict=verdict, note=note, output=turn.output)
    return trace.model_copy(update={"outcome": outcome})


def render_session(session: Session) -> str:
    """The JSONL text of one session's traces."""
    return "".join(_trace(session, t).to_json() + "\n" for t in session.turns)


def generate(corpus_dir: Path | None = None, out_dir: Path | None = None) -> list[Path]:
    """Build every demo session from the corpus and write one JSONL file per session."""
    corpus = Path(corpus_dir) if corpus_dir is not None else DEFAULT_CORPUS
    out = Path(out_dir) if out_dir is not None else DEFAULT_OUT
    if not corpus.is_dir():
        raise InputError(
            f"corpus folder {corpus} not found; pass --corpus pointing at the corpus/ "
            "folder of a ctxscope checkout"
        )
    written: list[Path] = []
    for session in sessions(corpus):
        path = out / f"{session.id}.jsonl"
        # 0o644: these are shared, committed files
        write_output(path, [render_session(session)], mode=0o644)
        written.append(path)
    return written


__all__ = ["DEFAULT_CORPUS", "DEFAULT_OUT", "generate", "render_session", "sessions"]
