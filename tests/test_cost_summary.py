"""A call's cost summary (``costing.summarize``: what the simulated cache and the cost need of
a trace), kept in the store beside the trace, costs a session exactly as its traces do
(docs/design.md, "Cost and prices", Summaries).

On every fixture session of more than one call (each file read as ``ctxscope import``
reads it): each trace summarized alone, encoded and decoded, costs the session as
``session_costs`` over the traces, to the byte of ``cost --json``; stored in DuckDB and in
PostgreSQL, the store's summaries do the same. A summary missing (a store of before
migration 9) or made by other code is made again from the trace; a field of the summary
that the encoding dropped fails ``test_no_field_is_dropped``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from ctxcore.cache import Block, Prompt
from ctxcore.cost import price_table
from ctxcore.costing import (
    CallCost,
    CallSummary,
    cache_group,
    cost_calls,
    decode_summaries,
    encode_summary,
    session_costs,
    stored_calls,
    summarize,
    summary_version,
)
from ctxcore.errors import CtxscopeError
from ctxcore.formats.load import iter_traces
from ctxcore.models import TokenUsage, Trace
from ctxcore.store.engines import open_store
from ctxcore.store.protocol import Store
from ctxcore.store.records import TraceFilter

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "imports"
VERSION = "test-version"


def _sessions(path: Path) -> list[list[Trace]]:
    """The sessions of a fixture file (a side chain with its parent: one cache), as
    ``ctxscope import`` reads it; none for a file that does not import alone."""
    try:
        traces = list(iter_traces(path))
    except CtxscopeError:
        return []
    groups: dict[str, list[Trace]] = {}
    for t in traces:
        groups.setdefault(cache_group(t), []).append(t)
    return list(groups.values())


def _fixture_files() -> list[Path]:
    files = sorted(p for p in FIXTURES.rglob("*") if p.is_file())
    return [p for p in files if p.name not in ("EXPECTED.json", "SOURCES.md")]


#: the fixture sessions of more than one call, by file
SESSIONS: dict[str, list[list[Trace]]] = {}
for _path in _fixture_files():
    _multi = [s for s in _sessions(_path) if len(s) > 1]
    if _multi:
        SESSIONS[_path.relative_to(FIXTURES).as_posix()] = _multi


def _as_json(calls: list[CallCost]) -> list[str]:
    return [json.dumps(c.as_json()) for c in calls]


def test_the_fixtures_hold_multi_call_sessions_of_many_formats() -> None:
    formats = {name.split("/")[0] for name in SESSIONS}
    assert len(formats) >= 8, formats
    assert {"claude-code", "codex", "gemini-cli", "pi"} <= formats


@pytest.mark.parametrize("name", sorted(SESSIONS))
def test_summaries_cost_each_fixture_session_as_its_traces(name: str) -> None:
    prices = price_table(env="")
    for traces in SESSIONS[name]:
        # each trace alone (no session state), as the store's writer makes them
        raws = [encode_summary(summarize(t), VERSION) for t in traces]
        calls = decode_summaries(raws, VERSION)
        assert calls == [summarize(t) for t in traces]
        assert all(c is not None for c in calls)
        want = session_costs(traces, prices)
        got = cost_calls([c for c in calls if c is not None], prices)
        assert got == want
        assert _as_json(got) == _as_json(want)


@pytest.fixture(params=["duckdb", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "postgresql":
        target = request.getfixturevalue("pg_server").new_database()
    else:
        target = str(tmp_path / "summaries.duckdb")
    with open_store(target, diagnose=False) as s:
        yield s


def _stored_costs(store: Store, trace_ids: list[str]) -> list[CallCost]:
    """Calls costed as the app costs a session: from the store's summaries, a trace read
    only where its summary is missing (here: never)."""

    def load(missing: list[str]) -> list[Trace]:
        raise AssertionError(f"traces read although their summaries are stored: {missing}")

    calls = stored_calls(trace_ids, store.cost_summaries(trace_ids), summary_version(), load)
    return cost_calls(calls, price_table(env=""))


def test_the_stores_summaries_cost_every_fixture_session(store: Store) -> None:
    """Every multi-call fixture session stored (the writer summarizes each trace), then
    costed from the store's summaries alone, side chains with their parent: the same calls
    as from its traces."""
    kept: dict[str, Trace] = {}
    sessions: list[list[Trace]] = []
    for traces in (s for groups in SESSIONS.values() for s in groups):
        # a fixture that is a variant of another (same ids, other content) is left out
        if any(kept.get(t.trace_id, t) != t for t in traces):
            continue
        kept.update({t.trace_id: t for t in traces})
        sessions.append(traces)
    store.add_traces(list(kept.values()))
    prices = price_table(env="")
    for traces in sessions:
        ids = [t.trace_id for t in traces]
        assert _stored_costs(store, ids) == session_costs(traces, prices)
    # the session listing reads them back by session too (the app's way in)
    first = sessions[0][0].session_id
    rows = store.list_traces(TraceFilter(session_id=first), sort="turn", limit=1000).rows
    assert sorted(store.cost_summaries([r.trace_id for r in rows])) == sorted(
        r.trace_id for r in rows
    )
    assert len(sessions) >= 10


def test_a_summary_missing_or_of_other_code_is_made_from_the_trace(tmp_path: Path) -> None:
    """A store of before migration 9 has no summaries: its traces are read and summarized
    (``stored_calls``' ``load``), with the same costs; so is a summary made by other code."""
    [traces] = SESSIONS["claude-code/claude-code-log-compact-after-rewind.jsonl"][:1]
    db = tmp_path / "old.duckdb"
    with open_store(str(db)) as s:
        s.add_traces(traces)
    with duckdb.connect(str(db)) as con:  # the store as migration 8 left it
        con.execute("DROP TABLE cost_parts")
        con.execute("DELETE FROM schema_migrations WHERE version = 9")
    prices = price_table(env="")
    want = session_costs(traces, prices)
    with open_store(str(db)) as s:  # migration 9 runs again: an empty cost_parts
        ids = [t.trace_id for t in traces]
        assert s.cost_summaries(ids) == {}
        asked: list[list[str]] = []

        def load(missing: list[str]) -> list[Trace]:
            asked.append(missing)
            return [Trace.model_validate_json(raw) for _, raw in s.traces_json(missing)]

        calls = stored_calls(ids, s.cost_summaries(ids), summary_version(), load)
        assert asked == [ids]
        assert cost_calls(calls, prices) == want
        # stored again by this code: read from the store, except one of another version
        s.add_traces([t.model_copy(update={"trace_id": t.trace_id + "-again"}) for t in traces])
        again = [i + "-again" for i in ids]
        stored = dict(s.cost_summaries(again))
        assert sorted(stored) == sorted(again)
        stored[again[1]] = encode_summary(summarize(traces[1]), "other code")
        asked.clear()
        calls = stored_calls(again, stored, summary_version(), load)
        assert asked == [[again[1]]]
        assert len(calls) == len(traces)


# --------------------------------------------------------------------------- no field dropped


def _other(value: Any, name: str) -> Any:
    """A value of the same kind as ``value`` that differs from it."""
    if name in ("at", "prompt_at"):
        return value + timedelta(seconds=7)
    if name == "recorded":
        return TokenUsage(mapping="anthropic", input_tokens=11, cache_read_tokens=3)
    if name == "tools":
        return (("Read", "k1"), ("Edit", "k2"))
    if name == "breakpoint":
        return "1h"
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 13
    return f"{value}-changed"


def _a_summary() -> CallSummary:
    """A real call's summary (a Claude Code log's: recorded usage, marks, a system block)."""
    traces = SESSIONS["claude-code/claude-code-log-compact-after-rewind.jsonl"][0]
    return summarize(traces[-1])


def _roundtrip(call: CallSummary) -> CallSummary:
    [back] = decode_summaries([encode_summary(call, VERSION)], VERSION)
    assert back is not None
    return back


def test_no_field_is_dropped() -> None:
    """Each field of the summary, its prompt and a block, changed alone, comes back changed:
    a field the encoding leaves out (one added later, say) fails here."""
    call = _a_summary()
    assert _roundtrip(call) == call
    for f in dataclasses.fields(CallSummary):
        if f.name == "prompt":
            continue
        changed = dataclasses.replace(call, **{f.name: _other(getattr(call, f.name), f.name)})
        assert _roundtrip(changed) == changed, f.name
    prompt = call.prompt
    for f in dataclasses.fields(Prompt):
        if f.name == "blocks":
            continue
        value = getattr(prompt, f.name)
        new = _other(value if value is not None else "x", f.name)
        changed = dataclasses.replace(call, prompt=dataclasses.replace(prompt, **{f.name: new}))
        assert _roundtrip(changed) == changed, f"prompt.{f.name}"
    block = prompt.blocks[0]
    for f in dataclasses.fields(Block):
        value = getattr(block, f.name)
        new = _other(value if value is not None else "x", f.name)
        blocks = (dataclasses.replace(block, **{f.name: new}), *prompt.blocks[1:])
        changed = dataclasses.replace(call, prompt=dataclasses.replace(prompt, blocks=blocks))
        assert _roundtrip(changed) == changed, f"block.{f.name}"


# --------------------------------------------------------------------------- the version


def test_the_summary_version_covers_the_code_that_makes_a_summary() -> None:
    """Every ctxcore function that runs while the fixtures' sessions are summarized, encoded
    and decoded lives in ``SUMMARY_MODULES``: a change to any other module cannot change a
    summary, so the stored ones stay valid across it."""
    import sys

    from ctxcore.cache import PromptReader
    from ctxcore.costing import SUMMARY_MODULES

    sessions = [s for name in sorted(SESSIONS) for s in SESSIONS[name]]
    ran: set[str] = set()

    def watch(frame: Any, event: str, arg: Any) -> None:
        name = frame.f_code.co_filename
        if "/ctxcore/" in name:
            ran.add(name.rsplit("/ctxcore/", 1)[1])

    sys.setprofile(watch)
    try:
        for traces in sessions:
            reader = PromptReader()
            encoded = [encode_summary(summarize(t, reader), "v") for t in traces]
            decode_summaries(encoded, "v")
    finally:
        sys.setprofile(None)
    assert "cache/prompts.py" in ran and "costing.py" in ran
    assert ran <= set(SUMMARY_MODULES), sorted(ran - set(SUMMARY_MODULES))


def test_the_version_moves_with_the_summary_code_only(tmp_path: Path) -> None:
    """A copy of the package: editing a page-side module keeps the version, editing the
    prompt reader changes it."""
    import shutil

    import ctxcore
    from ctxcore.costing import SUMMARY_MODULES
    from ctxcore.fingerprints import source_fingerprint

    root = tmp_path / "ctxcore"
    shutil.copytree(Path(ctxcore.__file__).parent, root)
    computed = source_fingerprint.__wrapped__  # not the remembered value
    before = computed(root, SUMMARY_MODULES)
    with (root / "ledger.py").open("a") as fh:
        fh.write("\n# another change\n")
    assert computed(root, SUMMARY_MODULES) == before
    assert computed(root) != source_fingerprint(Path(ctxcore.__file__).parent)
    with (root / "cache" / "prompts.py").open("a") as fh:
        fh.write("\n# a change to the summary's code\n")
    assert computed(root, SUMMARY_MODULES) != before
    assert summary_version() == source_fingerprint(Path(ctxcore.__file__).parent, SUMMARY_MODULES)
