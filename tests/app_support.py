"""Real traces for the app tests: sessions built by the real pipeline over corpus text.

Each session's turns see a growing prefix of one deterministic captured input from the
corpus (``bench/corpus_input.py``), so packet ids repeat across turns as they do for a
real agent, and a clock that moves one minute per turn.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from ctxapp.pages import PageSpec
from ctxcore.models import Config, Trace
from ctxcore.pipeline import build_trace
from ctxcore.settings import DEFAULT_PRESET
from ctxcore.store import TraceStore

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "bench") not in sys.path:
    sys.path.insert(0, str(ROOT / "bench"))

from corpus_input import corpus_input  # noqa: E402


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
        cfg = Config(preset=preset or DEFAULT_PRESET, **(config or {}))  # type: ignore[arg-type]
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


EVIL = "<script>alert(1)</script>"
EVIL_IMG = "<img src=x onerror=alert(1)>"
EVIL_LINK = "[click me](javascript:alert(1))"


def hostile_trace(session_id: str = "sess-evil") -> Trace:
    """A real build whose packet ids, kinds and content carry script, img and js-link bait."""
    from ctxcore.models import Packet

    base = corpus_input(12, seed=0)
    bait = [
        Packet(id=f"tool:{EVIL}", kind=EVIL_IMG, content=f"{EVIL} {EVIL_IMG} {EVIL_LINK}"),
        Packet(id=f"note:{EVIL_LINK}", kind="note", content=EVIL_LINK * 3, must_keep=True),
    ]
    inp = base.model_copy(update={"packets": [*base.packets, *bait], "query": f"{EVIL} why?"})
    return build_trace(
        inp,
        Config(preset=DEFAULT_PRESET),
        trace_id=f"evil-{EVIL_IMG}",
        session_id=session_id,
        turn=0,
        tags=[EVIL_LINK],
    )


#: Strings markdown would make a link or bold (GFM autolinks the first even when escaped).
LINKS = ("https://evil.example/x", "[click](https://evil.example)", "**bold**", "<b>x</b>")


def link_trace() -> Trace:
    """A real build whose session id, tags, packet ids and metadata values are ``LINKS``."""
    from ctxcore.models import Packet

    base = corpus_input(12, seed=0)
    bait = [Packet(id=s, kind="note", content=f"mentions {s}", must_keep=True) for s in LINKS]
    return build_trace(
        base.model_copy(update={"packets": [*base.packets, *bait]}),
        Config(preset=DEFAULT_PRESET),
        trace_id="link-probe",
        session_id=LINKS[0],
        turn=0,
        tags=list(LINKS),
        metadata={f"m{i}": s for i, s in enumerate(LINKS)},
    )


APP = str(ROOT / "ctxapp" / "app.py")


def open_page(page: str, *, timeout: float = 120, **params: str) -> Any:
    """The real app through Streamlit's AppTest, on ``page`` (``traces`` is the home page)
    with ``params`` as its query parameters; the app raised nothing on the way."""
    from streamlit.testing.v1 import AppTest

    at = rerun(AppTest.from_file(APP, default_timeout=timeout))
    return rerun(at, page if page != "traces" else None, **params)


def opening(spec: PageSpec, trace: str = "", session: str = "") -> dict[str, str]:
    """The query parameters that open the registry page ``spec`` on ``trace`` / ``session``
    (its ``opens``), as ``open_page`` takes them."""
    return dict(parse_qsl(spec.opens.format(t=trace, s=session)))


def rerun(at: Any, page: str | None = None, **params: str) -> Any:
    """``at`` run again (on ``page``, if given, with ``params`` as query parameters); the app
    raised nothing."""
    if page is not None:
        at.switch_page(f"pages/{page}.py")
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at
