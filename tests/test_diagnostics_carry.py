"""What the findings at insert carry from one call of a session to the next gives the same
answers as computing each call from scratch (docs/design.md, "Diagnostics": bulk work pays
for the new text only): the near-duplicate pairs (``text.SessionNearDuplicates``) and the
cost summaries' prompt reader kept across insert batches (``store.rows``).
"""

from __future__ import annotations

import random
from pathlib import Path

from ctxcore.cache import PromptReader
from ctxcore.costing import encode_summary, summarize, summary_version
from ctxcore.diagnostics.text import SessionNearDuplicates, near_duplicate_pairs, shingles
from ctxcore.errors import ImportFormatError
from ctxcore.formats.load import load_file
from ctxcore.models import Trace
from ctxcore.store import rows
from ctxcore.store.rows import RowBatch, pack_summary

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "imports"
#: a Claude Code session of several calls whose messages carry on from call to call
SESSION = FIXTURES / "claude-code" / "ccviewer-init-session.jsonl"


def _texts() -> list[str]:
    """Real packet texts of the import fixtures, and near copies of some (a few words
    changed), each copy somewhere after its original."""
    texts: list[str] = []
    for path in sorted(p for p in FIXTURES.rglob("*") if p.is_file()):
        if path.suffix == ".md" or path.name == "EXPECTED.json":
            continue
        try:
            traces = load_file(path)
        except ImportFormatError:
            continue  # one half of a pair, which does not load alone
        for t in traces:
            texts.extend(p.content for p in t.input.packets if len(p.content.split()) >= 20)
    texts = list(dict.fromkeys(texts))[:120]
    rng = random.Random(7)
    near = [" ".join(w if rng.random() > 0.04 else "zz" for w in x.split()) for x in texts[:40]]
    for k, x in enumerate(near):
        texts.insert(rng.randrange(k + 1, len(texts) + 1), x)
    return texts


def _calls(texts: list[str], rng: random.Random) -> list[list[str]]:
    """The packets of a session's calls: each call the one before it with a text or two
    more, now and then one dropped, the order shuffled a little, a text given twice."""
    calls: list[list[str]] = []
    now: list[str] = []
    for x in texts:
        now = [*now, x]
        if rng.random() < 0.2 and len(now) > 3:
            now.pop(rng.randrange(len(now)))
        if rng.random() < 0.2:
            i, j = rng.randrange(len(now)), rng.randrange(len(now))
            now[i], now[j] = now[j], now[i]
        call = list(now)
        if rng.random() < 0.2:
            call.insert(rng.randrange(len(call) + 1), rng.choice(call))
        calls.append(call)
    return calls


def test_session_near_duplicates_are_the_pairs_from_scratch() -> None:
    texts = _texts()
    assert len(texts) >= 100
    rng = random.Random(3)
    one, two = _calls(texts, rng), _calls(texts[::-1], rng)
    carried = SessionNearDuplicates()
    across_calls = 0
    for k in range(max(len(one), len(two))):
        # two sessions interleaved, as a bulk import of two logs may give them
        for session, calls in (("a", one), ("b", two)):
            if k >= len(calls):
                continue
            sets = [shingles(x) for x in calls[k]]
            for threshold in (0.5, 0.8):
                got = carried(session, sets, threshold)
                assert got == near_duplicate_pairs(sets, threshold), (session, k, threshold)
                # a near pair whose texts came at different calls: found by the carry
                across_calls += sum(1 for _, j, s in got if s < 1.0 and j == len(sets) - 1)
    assert across_calls > 0


def test_a_call_seen_again_verifies_no_pair_again() -> None:
    texts = _texts()
    sets = [shingles(x) for x in texts]
    # a near copy (not the same set) of an earlier text comes at the second call only
    j = next(j for _, j, s in near_duplicate_pairs(sets, 0.8) if s < 1.0)
    before = sets[:j] + sets[j + 1 :]
    carried = SessionNearDuplicates()
    assert carried("s", before, 0.8) == near_duplicate_pairs(before, 0.8)
    (held,) = carried._data.values()
    verified = dict(held.verified)
    assert verified
    # the next call: the same sets and the copy; only the copy's pairs are checked
    assert carried("s", sets, 0.8) == near_duplicate_pairs(sets, 0.8)
    new = set(held.verified) - set(verified)
    assert new and all(p == len(held.sets) - 1 for _, p in new)
    assert held.verified.items() >= verified.items()
    # and the call again: nothing more
    known = dict(held.verified)
    assert carried("s", sets, 0.8) == near_duplicate_pairs(sets, 0.8)
    assert held.verified == known


def test_a_session_past_its_bound_starts_over_with_the_same_pairs() -> None:
    sets = [shingles(x) for x in _texts()]
    carried = SessionNearDuplicates(keep=1, max_shingles=2_000)
    for k in range(5, len(sets), 7):
        assert carried("s", sets[:k], 0.8) == near_duplicate_pairs(sets[:k], 0.8)
        assert carried("t", sets[k // 2 : k], 0.8) == near_duplicate_pairs(sets[k // 2 : k], 0.8)
    assert len(carried._data) == 1
    (held,) = carried._data.values()
    # started over when past the bound: what it holds beyond it is the last call's sets
    last = sets[k // 2 : k]
    assert held.shingles <= 2_000 + sum(map(len, last)) < sum(map(len, set(sets)))


def _summaries(batch: RowBatch) -> list[bytes]:
    return [blob for _, blob in batch._summaries]


def test_the_prompt_reader_goes_on_from_one_insert_batch_to_the_next() -> None:
    traces: list[Trace] = [t for t in load_file(SESSION) if t.result is not None]
    assert len(traces) >= 3
    expected = [
        pack_summary(encode_summary(summarize(t, PromptReader()), summary_version()))
        for t in traces
    ]
    rows._READERS.reader = reader = PromptReader()
    got: list[bytes] = []
    for t in traces:  # one trace a batch: each batch's trace follows the one before
        batch = RowBatch(diagnose=False)
        assert batch._reader is reader  # the thread's reader, not one per batch
        batch.add_summary(t, 0)
        got.extend(_summaries(batch))
    assert got == expected
    # the reader holds the last call's blocks: the next batch's first trace extends them
    assert reader._last


def test_strip_noise_asks_the_spinner_pattern_about_every_line_it_could_match() -> None:
    """``strip_noise`` tries the spinner pattern only on a line of one character stripped
    or holding a "%": every line the pattern matches is one of those."""
    from ctxcore.diagnostics.text import _SPINNER_LINE, _strip_noise_of

    shapes = [" | ", "-", "\\", "/", "\u00a0|\u2003", "\x1c-\x1f", "||", " - x", "[=====>   ] 45%"]
    shapes += ["abc 50 %", "#### 100.0 %", "..........  7%", "done 100%", "x", "plain text line"]
    lines = [a + b for a in shapes for b in ("", " ", "\t", "%")]
    matching = [ln for ln in lines if _SPINNER_LINE.search(ln)]
    assert len(matching) >= 10
    text = "\n".join(lines)
    assert _strip_noise_of(text).spinner_lines == len(matching)
