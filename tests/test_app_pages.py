"""The debugger's pages through AppTest on a real DuckDB store of real builds.

Each test opens the real ``app.py`` (its ``st.navigation`` and the page files), changes
what a user would change, and asserts on what the user would then see.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import app_support as data
import pytest
from app_support import open_page as _open_page
from streamlit.testing.v1 import AppTest

from ctxapp.pages import PAGES, PageSpec
from ctxapp.ui import views
from ctxcore.models import Status, Trace

APP = str(Path(__file__).resolve().parent.parent / "ctxapp" / "app.py")


def open_page(page: str, **params: str) -> AppTest:
    at: AppTest = _open_page(page, timeout=60, **params)
    return at


#: every page of the registry (``ctxapp.pages.PAGES``), by its name
PAGE = pytest.mark.parametrize("spec", PAGES, ids=[p.name for p in PAGES])


@pytest.fixture(scope="module")
def built() -> dict[str, list[Trace]]:
    return {
        "a": data.session("sess-a", 3),
        "b": data.session("sess-b", 2, first=30, tags=["nightly"]),
        "evil": [data.hostile_trace()],
    }


@pytest.fixture
def db(built: dict[str, list[Trace]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    path = tmp_path / "ctxscope.duckdb"  # the conftest points CTXSCOPE_DB here
    data.fill(path, [t for ts in built.values() for t in ts])
    return path


def frame_with(at: AppTest, column: str):
    """The first dataframe on the page that has ``column``."""
    return next(d.value for d in at.dataframe if column in d.value.columns)


def shown_text(at: AppTest) -> list[str]:
    """Every markdown-rendered string on the page (where HTML or links could form)."""
    out = []
    for kind in (
        "markdown",
        "caption",
        "warning",
        "error",
        "info",
        "success",
        "title",
        "subheader",
        "header",
    ):
        out += [str(e.value) for e in getattr(at, kind)]
    return out


@PAGE
def test_every_page_renders(db: Path, spec: PageSpec) -> None:
    at = open_page(spec.name)
    assert at.title[0].value == spec.title
    assert not at.error, [e.value for e in at.error]


@PAGE
def test_every_page_opens_on_what_its_link_names(db: Path, built, spec: PageSpec) -> None:
    """Opened as the registry's ``opens`` says, on a trace and its session, a page raises
    nothing and shows no error."""
    t = built["b"][1]
    at = open_page(spec.name, **data.opening(spec, trace=t.trace_id, session=t.session_id))
    assert at.title[0].value == spec.title
    assert not at.error, [e.value for e in at.error]
    if spec.opens:
        shown = [str(b.value) for b in at.selectbox] + [str(c.value) for c in at.caption]
        named = t.session_id if "{s}" in spec.opens else t.trace_id
        assert any(named in s for s in shown), (spec.name, shown)


def test_traces_session_filter_narrows_the_list(db: Path, built) -> None:
    at = open_page("traces")
    total = sum(len(v) for v in built.values())
    assert at.dataframe[0].value.shape[0] == total
    at.selectbox(key="tr_session").set_value("sess-b").run()
    frame = at.dataframe[0].value
    assert set(frame["session"]) == {"sess-b"}
    assert len(frame) == len(built["b"])
    assert any(m.value.startswith(f"**{len(built['b'])}** matching") for m in at.markdown)
    assert at.query_params["session"] == "sess-b"  # shareable


def test_traces_full_text_search_finds_packet_content(db: Path, built) -> None:
    # A word that only the packets sess-b saw (it saw 30+ packets, sess-a at most 20).
    seen_a = " ".join(p.content for t in built["a"] for p in t.input.packets)
    seen_a += " ".join(p.content for p in built["evil"][0].input.packets)
    only_b = next(
        w
        for p in built["b"][0].input.packets
        for w in re.findall(r"[A-Za-z_]{9,}", p.content)
        if w not in seen_a
    )
    at = open_page("traces")
    at.text_input(key="tr_search").input(only_b).run()
    frame = at.dataframe[0].value
    assert len(frame) > 0 and set(frame["session"]) == {"sess-b"}


def test_traces_tag_filter_and_open_in_inspect(db: Path, built) -> None:
    at = open_page("traces")
    at.multiselect(key="tr_tags").set_value(["nightly"]).run()
    assert set(at.dataframe[0].value["trace_id"]) == {t.trace_id for t in built["b"]}
    at.selectbox(key="tr_open_id").set_value("sess-b-t1").run()
    at.button(key="tr_open").click().run()
    assert at.title[0].value == "Inspect"
    assert at.query_params["trace"] == "sess-b-t1"


def test_inspect_shows_every_decision_and_filters_by_status(db: Path, built) -> None:
    t = built["a"][1]
    at = open_page("inspect", trace=t.trace_id)
    frame = frame_with(at, "reason_text")
    assert len(frame) == len(t.result.decisions)
    assert list(frame["packet_id"]) == [d.packet_id for d in t.result.decisions]
    status = next(
        s
        for s in (Status.FILTERED, Status.SUMMARIZED, Status.DROPPED)
        if any(d.status == s for d in t.result.decisions)
    )
    at.multiselect(key="in_f_status").set_value([status.value]).run()
    frame = frame_with(at, "reason_text")
    assert len(frame) == sum(d.status == status for d in t.result.decisions)
    assert set(frame["status"]) == {status.value}
    # the score scatter: one legend entry per status, counted like the decisions
    at.session_state["in_section"] = "Scores"
    at.run()
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    scatter = next(s for s in specs if s["layout"]["title"]["text"] == "Packet scores")
    names = {d["name"] for d in scatter["data"] if d.get("mode") == "markers"}
    # the marker-shape legend (strongest signal, ctxscope preset) has no points of its own
    names = {n for n in names if not n.startswith("strongest signal: ")}
    scored = [d for d in t.result.decisions if d.relevance is not None and d.recency is not None]
    want = {f"{s.value} ({sum(d.status == s for d in scored)})" for s in {d.status for d in scored}}
    assert names == want
    # the prompt is shown as code, partitions marked
    at.session_state["in_section"] = "Prompt"
    at.run()
    code = "\n".join(c.value for c in at.code)
    assert "──────── [Task]" in code
    assert [m.label for m in at.metric][:2] == ["budget", "used"]
    assert at.metric[1].value == f"{t.result.totals.used:,}"


def test_inspect_unknown_trace_is_a_message_not_a_crash(db: Path) -> None:
    at = open_page("inspect", trace="no-such-trace")
    assert any("No trace with id" in w.value for w in at.warning)


#: an inline code span (inert: its text is shown as typed); not one opened by an escaped "`"
_CODE_SPAN = re.compile(r"(?<![`\\])(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)


def outside_code(s: str) -> str:
    return _CODE_SPAN.sub(" ", s)


@pytest.mark.slow
def test_hostile_packets_stay_text(db: Path, built) -> None:
    evil = built["evil"][0]
    for spec in PAGES:
        opened = data.opening(spec, trace=evil.trace_id, session=evil.session_id)
        at = open_page(spec.name, **opened)
        for s in map(outside_code, shown_text(at)):
            assert "<script" not in s and "<img" not in s and "](javascript" not in s, (spec, s)
    at = open_page("inspect", trace=evil.trace_id)
    at.session_state["in_section"] = "Prompt"
    at.run()
    assert data.EVIL in "\n".join(c.value for c in at.code)  # verbatim, as text
    at.session_state["in_section"] = "Decisions"
    at.run()
    frame = frame_with(at, "reason_text")
    assert f"tool:{data.EVIL}" in set(frame["packet_id"])  # shown, verbatim, as data


@pytest.mark.slow
def test_ids_and_tags_never_form_links_or_bold(db: Path) -> None:
    """Markdown (captions, alerts) shows ids and tags in code spans, or escaped with the
    autolinks broken; ``www``/``://``/``**`` never reach the renderer as they were."""
    probe = data.link_trace()
    data.fill(db, [probe])
    url = data.LINKS[0]
    opened = [
        (spec.name, data.opening(spec, trace=probe.trace_id, session=probe.session_id))
        for spec in PAGES
    ] + [
        ("traces", {"session": url}),
        ("inspect", {"trace": url}),  # unknown: the id is echoed in a warning
    ]
    for page, params in opened:
        at = open_page(page, **params)
        for s in map(outside_code, shown_text(at)):
            for bad in ("**bold**", "<b>", "[click]"):  # escaped, these have backslashes
                assert bad not in s, (page, bad, s)
            # what GFM autolinks is looked for in the text as shown (escapes resolved)
            assert not re.search(r"(?i)[a-z0-9]://|www\.", re.sub(r"\\(.)", r"\1", s)), s
        if page == "inspect" and params["trace"] == probe.trace_id:
            caption = next(c.value for c in at.caption if c.value.startswith("session"))
            assert all(views.code(p) in caption for p in data.LINKS), caption


def test_timeline_turn_opens_inspect(db: Path, built) -> None:
    at = open_page("timeline", session="sess-a")
    assert at.selectbox(key="tl_session").value == "sess-a"
    turns = at.selectbox(key="tl_turn").options
    assert len(turns) == len(built["a"])
    heat = next(
        s for s in (json.loads(c.proto.spec) for c in at.get("plotly_chart"))
        if s["data"] and s["data"][0]["type"] == "heatmap"
    )["data"][0]  # fmt: skip
    at.session_state["tl_view"] = "Partition usage"  # the usage chart's view
    at.run()
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    usage = next(
        s for s in specs if s["layout"].get("title", {}).get("text") == "Partition usage per turn"
    )
    line = next(d for d in usage["data"] if d["type"] == "scatter")
    assert line["y"] == [t.result.totals.available for t in built["a"]]
    assert heat["x"] == [str(t.turn) for t in built["a"]]
    at.selectbox(key="tl_turn").set_value(2).run()
    at.button(key="tl_open").click().run()
    assert at.title[0].value == "Inspect"
    assert at.query_params["trace"] == built["a"][2].trace_id


def test_compare_decision_diff_matches_the_traces(db: Path, built) -> None:
    a, b = built["a"][0], built["a"][2]
    at = open_page("compare", a=a.trace_id, b=b.trace_id)
    before = {d.packet_id: d for d in a.result.decisions}
    after = {d.packet_id: d for d in b.result.decisions}
    changed = {
        p
        for p in set(before) | set(after)
        if (
            before.get(p) and before[p].status,
            before.get(p) and before[p].tokens_after,
            before.get(p) and before[p].rank,
        )
        != (
            after.get(p) and after[p].status,
            after.get(p) and after[p].tokens_after,
            after.get(p) and after[p].rank,
        )
    }
    frame = frame_with(at, "status_A")
    assert set(frame["packet_id"]) == changed
    assert "--- A" in at.code[-1].value  # the prompt diff, as text


def test_share_exports_snapshot_and_imports_pasted_request(db: Path, built) -> None:
    t = built["a"][0]
    at = open_page("share", trace=t.trace_id)
    labels = [b.label for b in at.get("download_button")]
    assert "Download snapshot (.json)" in labels and "Download HTML report" in labels
    at.text_area(key="sh_paste").input(
        '{"model": "gpt-4o", "messages": [{"role": "system", "content": "Be brief."},'
        ' {"role": "user", "content": "Why does test_timedelta_field fail?"}]}'
    ).run()
    at.button(key="sh_import").click().run()
    assert not at.exception
    assert any("Imported 1 trace(s), 1 new." in s.value for s in at.success)
    new_id = at.selectbox(key="sh_imported_pick").value
    at.button(key="sh_open").click().run()
    assert at.title[0].value == "Inspect" and at.query_params["trace"] == new_id


def test_share_import_shows_what_came_through_and_what_was_kept_as_text(db: Path) -> None:
    fixture = Path(__file__).resolve().parent / "fixtures" / "imports" / "anthropic-messages"
    req = json.loads((fixture / "openinference-tool-use-in-input.request.json").read_text())
    req["messages"][0] = {
        "role": "user",
        "content": [
            {"type": "text", "text": req["messages"][0]["content"]},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
        ],
    }
    at = open_page("share")
    at.text_area(key="sh_paste").input(json.dumps(req)).run()
    at.button(key="sh_import").click().run()
    assert not at.exception
    shown = "\n".join(t.value for t in at.text)
    assert "(anthropic-messages): 3 messages, 1 tool calls, 1 tool results" in shown
    assert "messages[0].content[1].type='server_tool_use'" in shown


def test_share_bad_paste_is_one_line_error(db: Path) -> None:
    at = open_page("share")
    at.text_area(key="sh_paste").input('{"messages": [').run()
    at.button(key="sh_import").click().run()
    assert not at.exception
    assert any("malformed JSON" in e.value for e in at.error)


def test_traces_pages_through_the_store(tmp_path: Path, built, monkeypatch) -> None:
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    base = built["a"][0]
    many = [
        base.model_copy(
            update={
                "trace_id": f"bulk-{i:03d}",
                "turn": i,
                "created_at": base.created_at + timedelta(minutes=i),
            }
        )
        for i in range(60)
    ]
    data.fill(tmp_path / "ctxscope.duckdb", many)
    at = open_page("traces")
    at.selectbox(key="tr_page_size").set_value(25).run()
    assert at.number_input(key="tr_page").label == "Page (of 3)"
    at.number_input(key="tr_page").set_value(3).run()
    frame = frame_with(at, "trace_id")
    # newest first: page 3 holds the 10 oldest
    assert list(frame["trace_id"]) == [f"bulk-{i:03d}" for i in range(9, -1, -1)]
    assert any("showing 51–60" in m.value for m in at.markdown)


def test_compare_another_preset_keeps_the_window_unless_changed(db: Path, built) -> None:
    a = built["a"][1]
    at = open_page("compare", a=a.trace_id)
    at.radio(key="cmp_b_mode").set_value("same input as A, another preset").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.number_input(key="cmp_b_max_tokens").value == a.config.max_tokens
    assert not [i for i in at.info if "different windows" in i.value]
    at.number_input(key="cmp_b_max_tokens").set_value(a.config.max_tokens * 2).run()
    notes = [i.value for i in at.info if "different windows" in i.value]
    assert notes and f"A {a.result.totals.window:,} tokens" in notes[0]


def test_every_picker_names_session_turn_preset_verdict_findings(db: Path, built) -> None:
    t = built["a"][1]
    for page, key in (
        ("inspect", "in_trace"),
        ("playground", "pg_trace"),
        ("compare", "cmp_a_trace"),
        ("sweep", "sw_trace"),
        ("share", "sh_trace"),
    ):
        at = open_page(page, **({"a": t.trace_id} if page == "compare" else {"trace": t.trace_id}))
        box = at.selectbox(key=key)
        assert box.value == t.trace_id
        label = next(o for o in box.options if o.endswith(t.trace_id))
        assert label.startswith(f"{t.session_id} · turn {t.turn} · {t.config.preset} · ")
        assert "finding" in label, label


def test_a_file_ingest_cannot_read_is_named_on_traces_and_share(db: Path, tmp_path: Path) -> None:
    from ctxcore.store import TraceStore
    from ctxcore.store.ingest import ingest_paths

    bad = tmp_path / "watched" / "broken.jsonl.gz"
    bad.parent.mkdir()
    bad.write_bytes(b"this is not gzip at all")
    with TraceStore(db) as store:
        ingest_paths(store, [bad])
        assert [f.file for f in store.failing_files()] == [str(bad)]
    for page in ("traces", "share"):
        at = open_page(page)
        assert not at.exception
        assert any("could not be read" in w.value for w in at.warning), page
        assert any(str(bad) in t.value for t in at.text), page


def test_inspect_opens_a_crowded_builds_scores_on_ranks_and_switches_to_values(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The demo's 187-packet CJK turn opens its Scores on rank axes (every packet in a place
    of its own); the switch redraws it on the values."""
    from ctxcore.loading import parse_json, trace_from_obj

    path = Path(__file__).resolve().parent.parent / "ctxcore" / "data" / "demo"
    path = path / "zh-opencode-codesummary-ctxscope.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    traces = [trace_from_obj(parse_json(ln, str(path)), str(path)) for ln in lines if ln.strip()]
    t = next(x for x in traces if x.turn == 88)
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    data.fill(tmp_path / "ctxscope.duckdb", [t])
    at = open_page("inspect", trace=t.trace_id)
    at.session_state["in_section"] = "Scores"
    at.run()
    assert not at.exception, [e.value for e in at.exception]

    def scatter() -> dict:
        specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
        return next(s for s in specs if s["layout"]["title"]["text"] == "Packet scores")

    radio = at.radio(key=f"in_axes_{t.trace_id}")
    assert radio.value == "ranks"
    assert scatter()["layout"]["xaxis"]["title"]["text"] == "rank by relevance"
    radio.set_value("values").run()
    assert not at.exception, [e.value for e in at.exception]
    assert scatter()["layout"]["xaxis"]["title"]["text"] == "relevance"
