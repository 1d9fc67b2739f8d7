"""All of the app's Streamlit caching, session state and query-parameter handling.

Pages never call ``st.cache_*`` or touch ``st.session_state``/``st.query_params``
directly; they call the functions here with plain values. That keeps the invalidation
rules in one place:

- the store and the folder watcher are resources, one per (db, folder) for the process;
- a trace is immutable once stored (ingest is idempotent on ``trace_id``), so traces and
  what is derived from them are cached per ``trace_id`` without expiry;
- list queries are cached per (filter, page, ``store.latest_change()``), so a new trace
  (from the watcher or a saved variant) changes the key and the next run sees it;
- re-runs of the pipeline are cached per (trace_id, config), so moving a slider back to a
  value seen before costs nothing.
"""

from __future__ import annotations

import atexit
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import streamlit as st

from ctxcore import settings
from ctxcore.cli import app as cli_app
from ctxcore.cost import PriceTable, price_table
from ctxcore.costing import CallCost, CallSummary, cost_calls, stored_calls, summary_version
from ctxcore.diagnostics import (
    INGEST_OPTIONS,
    Counterfactual,
    SessionDiagnosis,
    diagnose,
    diagnose_session,
    fingerprint,
)
from ctxcore.diagnostics import counterfactuals as search_counterfactuals
from ctxcore.diagnostics.counterfactual import searched_knobs
from ctxcore.errors import CtxscopeError, StoreError, StoreLockedError
from ctxcore.models import BuildResult, Config, Finding, Trace
from ctxcore.pipeline import build
from ctxcore.pipeline.sweep import SweepGrid
from ctxcore.pipeline.sweep import sweep as run_sweep
from ctxcore.replay import ReplayReport
from ctxcore.replay import replay as run_replay
from ctxcore.settings import SortKey
from ctxcore.store.engines import is_server, open_store, read_store, shown
from ctxcore.store.ingest import ingest_paths
from ctxcore.store.protocol import Store
from ctxcore.store.records import (
    FailingFile,
    FindingPage,
    IngestErrorRow,
    LiveCalls,
    SessionRow,
    TraceFilter,
    TracePage,
    TraceRow,
    UsageRow,
)
from ctxcore.store.watch import Watcher

T = TypeVar("T")

# --------------------------------------------------------------------------- paths


def db_path() -> str:
    """The store the app shows: ``$CTXSCOPE_DB``, a DuckDB file (its absolute path) or a team
    store's URL as given (docs/design.md, "Store")."""
    target = settings.db_target()
    return target if is_server(target) else str(Path(target).resolve())


def db_shown() -> str:
    """The store for the pages: a file's path, a team store's URL without its password."""
    return shown(db_path())


def team_store() -> bool:
    """Whether the app shows a team store (a server's): it only reads it, and watches no
    folder (its writers are ``ctxscope ingest``, ``proxy``, ``collect`` …)."""
    return is_server(db_path())


def traces_dir() -> str:
    return str(settings.traces_dir().resolve())


# --------------------------------------------------------------------------- errors


@contextmanager
def guard() -> Iterator[None]:
    """Show our own errors as one short message; anything else is a bug and propagates."""
    try:
        yield
    except CtxscopeError as exc:
        from ctxapp.ui.views import md

        st.error(md(exc), icon=":material/error:")


# --------------------------------------------------------------------------- resources


@dataclass
class _Opened:
    """The app's store, and why it is read-only when it is: another process (another app, an
    ingest) holds the file, and this app reads a copy of it (``store.reading``)."""

    store: Store
    held: str | None = None
    #: a team store (a server's), which this app reads only and feeds from no folder
    team: bool = False


@st.cache_resource(show_spinner="Opening the trace store…")
def _open_store(path: str, demo_dir: str) -> _Opened:
    if is_server(path):
        # a team store: read as it is while its writers write, as its read-only role
        # (docs/design.md, "Store", access); no demo traces go into it
        from ctxcore.store.pgaccess import as_reader

        return _Opened(open_store(as_reader(path), read_only=True), team=True)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        store = open_store(path)
    except StoreLockedError as exc:
        return _read_only(path, exc)
    if store.count() == 0 and Path(demo_dir).is_dir():
        ingest_paths(store, [Path(demo_dir)])
    return _Opened(store)


def _read_only(path: str, exc: StoreLockedError) -> _Opened:
    """A second app on a store another process holds: it shows a copy taken now, read-only
    (DuckDB lets no other process open a file one holds for writing, not even to read)."""
    stack = ExitStack()
    copy = stack.enter_context(read_store(path))
    atexit.register(stack.close)  # the copy goes with the process
    held = (
        f"Read-only: {path} is held by {cli_app.holder(exc)}, so this app shows a copy of it as of "
        f"{datetime.now():%H:%M:%S}; nothing is ingested or saved here. Use the app that "
        "holds it, or stop that one and reload this page."
    )
    return _Opened(copy, held)


def store() -> Store:
    """The process-wide store on ``$CTXSCOPE_DB`` (demo traces loaded into an empty one); a
    read-only copy when another process holds it (``held``)."""
    opened = _open_store(db_path(), str(Path(traces_dir()) / settings.DEMO_SUBDIR))
    if opened.held is None and not opened.team:
        _start_watcher(db_path(), traces_dir())
    _warm_up()
    return opened.store


@st.cache_data(ttl=5, max_entries=256, show_spinner=False)
def _token_holder(db: str, token: str) -> str | None:
    from ctxcore.store.pgaccess import as_reader, token_holder

    return token_holder(as_reader(db), token)


def token_holder(token: str) -> str | None:
    """Whose live token of the team store ``token`` is (None: unknown or revoked); asked of
    the store at most every 5 s per token, so a revoked token is refused within 5 s."""
    return _token_holder(db_path(), token)


def held() -> str | None:
    """One line when this app shows a read-only copy of a store another process holds."""
    return _open_store(db_path(), str(Path(traces_dir()) / settings.DEMO_SUBDIR)).held


def _warm_figures() -> None:
    """One-time costs of the first Inspect or Playground, paid at start-up in the
    background: plotly imports a validator module per trace type and attribute on first
    use, tiktoken reads its encoding files, the pipeline and pandas import their modules.
    A tiny real build goes through the very figures and tables Inspect draws."""
    from datetime import UTC, datetime

    import plotly.graph_objects as go
    import plotly.io as pio

    from ctxapp.ui import views
    from ctxcore import figures
    from ctxcore.models import CapturedInput, Config, Packet
    from ctxcore.pipeline import build_trace
    from ctxcore.tokens import get_encoding

    for name in ("cl100k_base", "o200k_base"):
        get_encoding(name)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    packets = [
        Packet(id=f"tool:warm_{k}", kind="tool_result", content=f"warm-up {k} " * 40)
        for k in range(6)
    ]
    inp = CapturedInput(query="warm up", now=now, packets=packets)
    trace = build_trace(inp, Config(max_tokens=400), trace_id="warm-up", created_at=now)
    assert trace.result is not None
    figs = [
        figures.window_bar(trace),
        figures.partition_budgets(trace),
        figures.score_scatter(trace),
        figures.tokenizer_drift(
            views.partition_token_rows(trace.result.prompt, "cl100k_base"), "cl100k_base"
        ),
        go.Figure(go.Heatmap(z=[[1]])),
    ]
    for fig in figs:
        pio.to_json(fig, validate=False)
    views.decisions_frame(trace.result.decisions).to_json()
    _warm_timeline(trace)


#: a grid the size of none but shaped like a long session's: more rows than a short chart
#: has (the turns labelled below too), more turns than keep their gaps, one turn missing
_WARM_ROWS, _WARM_TURNS = 30, 110


def _warm_timeline(trace: Trace) -> None:
    """One-time costs of a first Timeline open, paid at start-up (docs/design.md, "The
    app"): its modules (the page imports the ledger and the cost tables, which Inspect and
    Traces do not), the code version its cost summaries are checked against, and a small
    grid and cost chart made as a long session's are (plotly imports the validators of
    each property on first use); what stays is the session's own reads and figures."""
    import plotly.io as pio

    from ctxapp.ui import costs, ledger  # noqa: F401 - imported for the page
    from ctxcore import figures
    from ctxcore.costing import summarize

    summary_version()
    rows = [
        {"turn": t, "packet_id": f"warm:{k}", "kind": "tool_result", "status": status,
         "reason": "FITS", "tokens_after": k}
        for t in range(_WARM_TURNS + 1) if t != 1
        for k, status in enumerate(figures.STATUS_ORDER * (_WARM_ROWS // 6))
    ]  # fmt: skip
    calls = cost_calls([summarize(trace)], prices())
    for fig in (figures.timeline_heatmap(rows, legend=False), figures.turns_figure(calls)):
        pio.to_json(fig.to_dict(), validate=False)


#: the Traces page's first page and the trace pickers' recent list (``recent_trace_rows``),
#: as a first open with no filter asks for them
_FIRST_LISTS: tuple[tuple[int, SortKey], ...] = ((50, "created_at"), (200, "created_at"))


def _warm_reads() -> None:
    """The store reads every first open of Traces or Inspect makes, made at start-up in the
    background into the caches the pages read: the filters' facets, the newest traces
    (Traces' first page, the pickers' recent list) and the sessions. On 100,000 traces
    each is a query of tens to hundreds of milliseconds that the first open paid."""
    db, ver = db_path(), latest_change()
    _facets(db, ver)
    _sessions(db, ver)
    for limit, sort in _FIRST_LISTS:
        _list(db, TraceFilter(), sort, True, limit, 0, ver)


def _warm_figures_safely() -> None:
    try:
        _warm_reads()
        _warm_figures()
    except Exception:  # noqa: BLE001 - a warm-up must never take the app down
        logging.getLogger("ctxscope.app").exception("warm-up failed (the app still works)")


@st.cache_resource(show_spinner=False)
def _warm_up() -> threading.Thread:
    t = threading.Thread(target=_warm_figures_safely, name="ctxscope-warm-up", daemon=True)
    t.start()
    return t


@st.cache_resource(show_spinner=False)
def _start_watcher(path: str, folder: str) -> Watcher | None:
    # One watcher per (store, folder) for the app process: traces dropped into the folder
    # are ingested by it, and pages notice through store.latest_change().
    if settings.watch_disabled():
        return None
    w = Watcher(_open_store(path, str(Path(folder) / settings.DEMO_SUBDIR)).store, Path(folder))
    w.start()
    # Stop the watcher thread (and its DuckDB cursor) before the interpreter tears down.
    atexit.register(w.stop)
    return w


def latest_change() -> int:
    return int(store().latest_change())


# --------------------------------------------------------------------------- queries


@st.cache_data(max_entries=64, show_spinner=False)
def _list(
    db: str, flt: TraceFilter, sort: SortKey, descending: bool, limit: int, offset: int, ver: int
) -> TracePage:
    # Streamlit hashes a dataclass argument by its fields: equal filters share an entry.
    return store().list_traces(flt, sort=sort, descending=descending, limit=limit, offset=offset)


def list_traces(
    flt: TraceFilter,
    *,
    sort: SortKey = "created_at",
    descending: bool = True,
    limit: int = 50,
    offset: int = 0,
) -> TracePage:
    return _list(db_path(), flt, sort, descending, limit, offset, latest_change())


@st.cache_data(max_entries=32, show_spinner=False)
def _findings(db: str, flt: TraceFilter, limit: int, offset: int, ver: int) -> FindingPage:
    return store().list_findings(flt, limit=limit, offset=offset)


def list_findings(flt: TraceFilter, *, limit: int = 50, offset: int = 0) -> FindingPage:
    """The findings of the traces ``flt`` matches, newest first, one page of them."""
    return _findings(db_path(), flt, limit, offset, latest_change())


@st.cache_data(max_entries=4, show_spinner=False)
def _live_calls(db: str, since: datetime, ver: int) -> LiveCalls:
    return store().live_calls(since)


def live_calls(window: timedelta) -> LiveCalls:
    """Live-captured calls of the last ``window`` (a minute more: the query is cached per
    minute and per store change; callers count against the exact now)."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    return _live_calls(db_path(), now - window - timedelta(minutes=1), latest_change())


def app_note() -> dict[str, object] | None:
    """What ``ctxscope app`` noted beside the store when it started this app (None when the
    app was started otherwise, e.g. ``streamlit run app.py``)."""
    if team_store():
        return None  # the note lies beside a store's file; a team store has none
    return cli_app.app_note(Path(db_path()))


@st.cache_data(max_entries=16, show_spinner=False)
def _facets(db: str, ver: int) -> dict[str, list[str]]:
    return store().facets()


def facets() -> dict[str, list[str]]:
    return _facets(db_path(), latest_change())


@st.cache_data(max_entries=16, show_spinner=False)
def _sessions(db: str, ver: int) -> list[SessionRow]:
    return store().sessions()


def sessions() -> list[SessionRow]:
    return _sessions(db_path(), latest_change())


# cache_resource, not cache_data: a long session's statuses are ~43,000 rows (500 turns),
# which cache_data pickles on the way in and unpickles at every read; the Timeline reads
# them only to build what it caches per store version, and never changes them
@st.cache_resource(max_entries=8, show_spinner=False)
def _session_statuses(db: str, session_id: str, ver: int) -> list[dict[str, Any]]:
    return store().session_statuses(session_id)


def session_statuses(session_id: str) -> list[dict[str, Any]]:
    """A session's decisions, one row each (``Store.session_statuses``): shared, read only."""
    return _session_statuses(db_path(), session_id, latest_change())


@st.cache_resource(max_entries=8, show_spinner=False)
def _session_partitions(db: str, session_id: str, ver: int) -> list[dict[str, Any]]:
    return store().session_partitions(session_id)


def session_partitions(session_id: str) -> list[dict[str, Any]]:
    """A session's partitions per turn (``Store.session_partitions``): shared, read only."""
    return _session_partitions(db_path(), session_id, latest_change())


@st.cache_resource(max_entries=48, show_spinner=False)
def _trace(db: str, trace_id: str) -> Trace | None:
    return store().get_trace(trace_id)


def get_trace(trace_id: str) -> Trace | None:
    """A stored trace (immutable, so cached without expiry), or None if unknown."""
    t = _trace(db_path(), trace_id)
    if t is None:
        _trace.clear()  # do not remember a miss: the watcher may bring it in a second
    return t


def recent_trace_ids(limit: int = 200) -> list[str]:
    return [r.trace_id for r in recent_trace_rows(limit)]


def recent_trace_rows(limit: int = 200) -> list[TraceRow]:
    """The newest stored traces with what the pickers show of them (session, turn, …)."""
    return list_traces(TraceFilter(), limit=limit).rows


# --------------------------------------------------------------------------- derived


@st.cache_resource(max_entries=16, show_spinner=False)
def _derived(db: str, kind: str, trace_id: str, key: str, _make: Callable[[], T]) -> T:
    return _make()


def derived(kind: str, trace_id: str, key: str, make: Callable[[], T]) -> T:
    """Something expensive computed from one immutable trace (figures, frames, counts).

    ``make`` is not hashed: (store, kind, trace_id, key) identifies the value.
    """
    return _derived(db_path(), kind, trace_id, key, make)


@st.cache_resource(max_entries=64, show_spinner=False)
def _rebuild(db: str, trace_id: str, cfg_json: str, _trace: Trace, _cfg: Config) -> BuildResult:
    return build(_trace.input, _cfg)


def rebuild(trace: Trace, cfg: Config, cfg_json: str) -> BuildResult:
    """The pipeline re-run on a trace's captured input with ``cfg`` (cached per config)."""
    return _rebuild(db_path(), trace.trace_id, cfg_json, trace, cfg)


# --------------------------------------------------------------------------- writing


def add_traces(traces: list[Trace], source: str) -> int:
    """Store new traces and drop exactly the caches a write makes stale."""
    if team_store():
        raise StoreError(
            f"Not saved: this app reads the team store {db_shown()} only; save the variant "
            "to a file (Export) and ingest it with `ctxscope ingest FILE --db …`"
        )
    if held() is not None:
        raise StoreError(
            f"Not saved: this app shows {db_path()} read-only (another process holds it); "
            "save from the app that holds it, or drop the trace file into its folder"
        )
    n = store().add_traces(traces, source=source)
    # Listing caches are keyed by latest_change() and refresh by themselves; only a
    # remembered miss of one of these ids could be stale.
    _trace.clear()
    return n


# --------------------------------------------------------------------------- session


def ss_get(key: str, default: Any = None) -> Any:
    return st.session_state.get(key, default)


def ss_set(key: str, value: Any) -> None:
    st.session_state[key] = value


def ss_default(key: str, value: Any) -> None:
    if key not in st.session_state:
        st.session_state[key] = value


def ss_has(key: str) -> bool:
    return key in st.session_state


def ss_pop(key: str) -> None:
    st.session_state.pop(key, None)


def qp_get(name: str, default: str | None = None) -> str | None:
    v = st.query_params.get(name)
    return v if v is not None else default


def qp_all() -> dict[str, str]:
    return {k: st.query_params[k] for k in st.query_params}


def qp_pop(name: str) -> str | None:
    """Remove one query parameter from the URL (the browser's address bar too)."""
    v = qp_get(name)
    if v is not None:
        del st.query_params[name]
    return v


def qp_set(params: Mapping[str, str | None]) -> None:
    """Make the URL carry exactly ``params`` (None values are left out)."""
    want = {k: str(v) for k, v in params.items() if v not in (None, "")}
    if qp_all() != want:
        st.query_params.from_dict(want)


def switch(page: str, **params: str) -> None:
    """Open another page (a file under pages/) with query parameters."""
    st.switch_page(f"pages/{page}.py", query_params={k: v for k, v in params.items() if v})


@st.cache_resource(max_entries=8, show_spinner="Running the sweep…")
def _sweep(
    db: str,
    trace_id: str,
    cfg_json: str,
    x: str,
    xs: tuple[float, ...],
    y: str,
    ys: tuple[float, ...],
    watch: str | None,
    _trace: Trace,
    _cfg: Config,
) -> SweepGrid:
    return run_sweep(_trace.input, _cfg, x, list(xs), y, list(ys), watch_packet=watch)


def sweep(
    t: Trace,
    cfg: Config,
    x: str,
    xs: tuple[float, ...],
    y: str,
    ys: tuple[float, ...],
    watch: str | None,
) -> SweepGrid:
    """A sweep grid over two knobs of ``cfg`` on a trace's input (cached per grid)."""
    return _sweep(db_path(), t.trace_id, cfg.model_dump_json(), x, xs, y, ys, watch, t, cfg)


@st.cache_resource(max_entries=4, show_spinner="Loading the session…")
def _session_traces(db: str, session_id: str, limit: int, ver: int) -> list[Trace]:
    page = list_traces(
        TraceFilter(session_id=session_id), sort="turn", descending=False, limit=limit
    )
    # one query for the session's JSON: per trace, the per-id cache (48 entries) thrashed
    # on a long session and every reader of it loaded it again
    stored = store().traces_json([r.trace_id for r in page.rows])
    return [Trace.model_validate_json(raw) for _, raw in stored]


def session_traces(session_id: str, limit: int = 500) -> list[Trace]:
    """Every stored trace of one session, in turn order (cached per session and store
    version: the Timeline's diagnostics and costs, Inspect's findings read the same list)."""
    return _session_traces(db_path(), session_id, limit, latest_change())


@st.cache_resource(max_entries=8, show_spinner="Replaying the session…")
def _replay(
    db: str, session_id: str, ver: int, settings: str, against: str | None, findings: bool
) -> ReplayReport | None:
    traces = [t for t in session_traces(session_id) if "replay" not in t.tags]
    if not traces:
        return None
    return run_replay(
        traces,
        json.loads(settings),
        against=None if against is None else json.loads(against),
        findings=findings,
        workers=1,  # one session is faster in this process than through a pool
        keep_variants=True,
    )


def replay(
    session_id: str, settings: str, against: str | None, findings: bool
) -> ReplayReport | None:
    """A session replayed with ``settings`` (JSON of a config patch) against the recording or
    ``against``, cached per (session, settings, store version): a knob moved back costs nothing.
    """
    return _replay(db_path(), session_id, latest_change(), settings, against, findings)


@st.cache_data(max_entries=4, show_spinner=False)
def _ingest_errors(db: str, ver: int) -> list[IngestErrorRow]:
    return store().ingest_errors()


def ingest_errors() -> list[IngestErrorRow]:
    return _ingest_errors(db_path(), latest_change())


@st.cache_data(max_entries=4, ttl=5, show_spinner=False)
def _failing_files(db: str, ver: int) -> list[FailingFile]:
    return store().failing_files()


def failing_files() -> list[FailingFile]:
    """Files in the watched folder that ingest could not read (retried when they change)."""
    return _failing_files(db_path(), latest_change())


# --------------------------------------------------------------------------- cost


@st.cache_data(max_entries=32, show_spinner=False)
def _session_usage(db: str, session_ids: tuple[str, ...], ver: int) -> list[UsageRow]:
    return store().session_usage(list(session_ids))


def session_usage(session_ids: Sequence[str]) -> list[UsageRow]:
    """The stored model and usage of every call of these sessions (store columns only)."""
    return _session_usage(db_path(), tuple(sorted(set(session_ids))), latest_change())


def prices() -> PriceTable:
    """The price table in effect (``CTXSCOPE_PRICES`` over the shipped rows)."""
    return price_table()


@st.cache_resource(max_entries=8, show_spinner="Costing the session…")
def _session_costs(db: str, session_id: str, ver: int) -> list[CallCost]:
    calls = session_summaries(session_id)
    if not calls:
        return []
    if calls[0].group != session_id:  # a side chain shares its parent session's cache
        calls = session_summaries(calls[0].group) + calls
    return [c for c in cost_calls(calls, prices()) if c.session_id == session_id]


@st.cache_resource(max_entries=8, show_spinner=False)
def _session_summaries(db: str, session_id: str, ver: int) -> list[CallSummary]:
    return _cost_summaries(session_id)


def session_summaries(session_id: str) -> list[CallSummary]:
    """A session's cost summaries in turn order (cached per session and store version: the
    Timeline's costs and its compaction marks read the same list)."""
    return _session_summaries(db_path(), session_id, latest_change())


def _cost_summaries(session_id: str, limit: int = 500) -> list[CallSummary]:
    """A session's cost summaries as the store keeps them, in turn order, without reading
    its traces (a trace stored without one is read and summarized)."""
    page = list_traces(
        TraceFilter(session_id=session_id), sort="turn", descending=False, limit=limit
    )
    ids = [r.trace_id for r in page.rows]

    def load(missing: list[str]) -> list[Trace]:
        return [Trace.model_validate_json(raw) for _, raw in store().traces_json(missing)]

    return stored_calls(ids, store().cost_summaries(ids), summary_version(), load)


def session_call_costs(session_id: str) -> list[CallCost]:
    """Each call of a session costed, with the simulated cache and its breaks
    (``ctxcore.costing.session_costs``), in the order they were sent."""
    return _session_costs(db_path(), session_id, latest_change())


# --------------------------------------------------------------------------- diagnostics


@st.cache_data(max_entries=16, show_spinner="Diagnosing the session…")
def _session_diagnosis(db: str, session_id: str, ver: int) -> SessionDiagnosis | None:
    traces = session_traces(session_id)
    if not traces:
        return None
    # the findings the store computed at insert, by this code, stand in for the detectors
    # that read one trace (docs/design.md, "Diagnostics")
    stored = store().stored_findings([t.trace_id for t in traces], fingerprint())
    return diagnose_session(traces, options=INGEST_OPTIONS, alone=stored)


def session_diagnosis(session_id: str) -> SessionDiagnosis | None:
    """Findings per turn and the first turn each item was lost (no fix search: bulk)."""
    return _session_diagnosis(db_path(), session_id, latest_change())


def trace_findings(t: Trace) -> list[Finding]:
    """Findings of one trace with the earlier turns of its session and verified fixes."""

    def make() -> list[Finding]:
        earlier = [s for s in session_traces(t.session_id) if s.turn < t.turn]
        return diagnose(t, session_traces=earlier)

    return derived("diagnose", t.trace_id, "full", make)


def counterfactuals(t: Trace, packet_id: str) -> list[Counterfactual]:
    """Every verified single change over every knob the preset has (``searched_knobs``)
    that would have kept ``packet_id``, smallest first; pairs when no single one does."""
    return derived(
        "counterfactual",
        t.trace_id,
        packet_id,
        lambda: search_counterfactuals(
            t, packet_id, knobs=searched_knobs(t), pairs=True, max_builds=160
        ),
    )
