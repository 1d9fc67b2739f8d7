"""A session's traces diagnosed one after the other, each paying for its new text only,
give the findings each trace gets diagnosed from scratch (docs/design.md, "Diagnostics":
the detectors' per-text work is remembered per text, and a prompt that grows the previous
call's is normalized on its new end only, ``text.Grown``).

The sessions are every multi-call session of the import fixtures (real logs of real
agents); the prompts compared are theirs and texts built to cut at every awkward place.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from ctxcore.diagnostics import INGEST_OPTIONS, diagnose
from ctxcore.diagnostics.text import Grown, _lowered_ws_whole, clear_memos, lowered_ws
from ctxcore.errors import ImportFormatError
from ctxcore.formats.load import load_file
from ctxcore.models import Trace

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "imports"
#: a session log whose prompts grow call after call past ``Grown``'s shortest text
GROWING = FIXTURES / "gemini-cli" / "aim-matrix-pro.json"


def _sessions() -> list[list[Trace]]:
    """Each multi-call session of the fixtures, its traces in turn order (a file that is
    one half of a pair, such as a response without its request, does not load alone)."""
    out: list[list[Trace]] = []
    for path in sorted(p for p in FIXTURES.rglob("*") if p.is_file()):
        if path.suffix == ".md" or path.name == "EXPECTED.json":
            continue
        try:
            traces = load_file(path)
        except ImportFormatError:
            continue
        by_session: dict[str, list[Trace]] = defaultdict(list)
        for t in traces:
            if t.result is not None:
                by_session[t.session_id].append(t)
        out.extend(
            sorted(ts, key=lambda t: (t.turn, t.created_at))
            for ts in by_session.values()
            if len(ts) > 1
        )
    return out


def _dumped(trace: Trace) -> list[dict[str, object]]:
    return [f.model_dump(mode="json") for f in diagnose(trace, options=INGEST_OPTIONS)]


def test_fixture_sessions_give_the_same_findings_as_from_scratch() -> None:
    sessions = _sessions()
    assert len(sessions) >= 30, "the fixtures hold fewer multi-call sessions than expected"
    compared = 0
    for traces in sessions:
        clear_memos()
        in_turn = [_dumped(t) for t in traces]  # each call after the ones before it
        for t, got in zip(traces, in_turn, strict=True):
            clear_memos()  # nothing remembered from another trace
            assert got == _dumped(t), f"{t.trace_id} (turn {t.turn}) of {t.session_id}"
            compared += 1
    assert compared >= 100


def test_grown_prompts_normalize_as_whole_texts() -> None:
    prompts = [t.result.prompt for t in load_file(GROWING) if t.result is not None]
    grown = Grown(min_len=1_000)
    from_earlier = 0
    for p in prompts:
        from_earlier += grown._longest_start(p) is not None
        assert grown(p) == _lowered_ws_whole(p)
    # most calls carry the previous call's prompt on; the test must see that path taken
    assert len(prompts) >= 10
    assert from_earlier >= len(prompts) // 2


@pytest.mark.parametrize(
    ("first", "added"),
    [
        ("ΟΔΟΣ ΚΑΙ ΛΟΓΟΣ", "Σ ΑΛΛΟΣ"),  # final sigma: its context ends at whitespace only
        ("ΟΔΟΣ ΚΑΙ ΛΟΓΟΣ ", "Α"),
        ("word one two", "three four"),  # the last word of the earlier text goes on
        ("word one two\n", "\n\tthree  four "),
        ("  \n\t ", "x y"),  # an earlier text of whitespace only
        ("İstanbul Straße ǅemal", " Σ'Σ.Σ"),  # lower-casing that changes the length
        ("a\x1cb\u3000c\u2028", "d\x1fe\x85"),  # whitespace str.split knows beyond ASCII
        ("nospacesatallhere", "stillnone"),
    ],
)
def test_grown_at_awkward_cuts(first: str, added: str) -> None:
    grown = Grown(min_len=1)
    grown(first)
    for text in (first + added, first + added + added, first + added + added):
        assert grown(text) == _lowered_ws_whole(text)  # the last: the same text again


def test_lowered_ws_takes_a_grown_prompt_from_the_earlier_one() -> None:
    clear_memos()
    words = " ".join(f"Word{i}" for i in range(6_000))  # past Grown's shortest text
    assert lowered_ws(words) == _lowered_ws_whole(words)
    longer = words + " And MORE"
    assert lowered_ws(longer) == _lowered_ws_whole(longer)
    from ctxcore.diagnostics import text

    assert text._grown._longest_start(longer + " x") is not None
