"""The app's pure view helpers (ui/views.py): prompt marks, flips, permalinks, escaping,
uploads."""

from __future__ import annotations

import gzip
import io
import re
import tracemalloc
from pathlib import Path

import app_support as data
import pytest

from ctxapp.ui import views
from ctxcore.errors import InputError
from ctxcore.loading import config_from_obj
from ctxcore.models import Config
from ctxcore.pipeline import build, resolve_config


@pytest.fixture(scope="module")
def trace():
    return data.session("views", 2, first=24)[1]


def test_prompt_segments_follow_partition_headers(trace) -> None:
    prompt = trace.result.prompt
    segs = views.prompt_segments(prompt)
    names = [s.partition for s in segs]
    rendered = [p.name for p in trace.result.partitions if p.items or p.name in ("[Task]",)]
    assert set(rendered) <= set(names)
    # the segments are the prompt, cut at the headers, nothing lost or added
    assert "\n".join(s.text for s in segs).replace("\n", "") == prompt.replace("\n", "")
    for s in segs:
        assert prompt.split("\n")[s.start_line - 1].strip() in (s.partition, "")


def test_marked_prompt_shows_cut_points(trace) -> None:
    small = build(
        trace.input,
        trace.config.model_copy(
            update={"max_tokens": 5000, "output_reserve": 600, "safety_margin": 100}
        ),
    )
    cut_lines = [i for i, ln in enumerate(small.prompt.split("\n"), 1) if "[… " in ln]
    assert cut_lines, "a 5k budget must make the ctxscope preset cut or summarize something"
    marked = views.marked_prompt(small.prompt)
    for n in cut_lines:
        assert f"cut/summary above (line {n})" in marked
    assert marked.count("──────── [") == len(views.prompt_segments(small.prompt))


def test_flipped_lists_exactly_the_changed_packets(trace) -> None:
    variant = build(trace.input, trace.config.model_copy(update={"min_relevance": 0.6}))
    frame = views.flipped(trace.result, variant)
    before = {d.packet_id: d for d in trace.result.decisions}
    after = {d.packet_id: d for d in variant.decisions}
    changed = {
        p
        for p in after
        if p in before
        and (before[p].status, before[p].tokens_after, before[p].rank)
        != (after[p].status, after[p].tokens_after, after[p].rank)
    }
    changed |= set(before) ^ set(after)
    assert set(frame["packet_id"]) == changed
    assert views.flipped(trace.result, trace.result).empty


def test_config_params_round_trip(trace) -> None:
    cfg = trace.config.model_copy(
        update={"fill": "optimal", "min_relevance": 0.125, "degrade": ["noise", "history"]}
    )
    params = views.config_to_params(cfg)
    assert all(isinstance(v, str) for v in params.values())
    back = config_from_obj(views.params_to_config_dict(params))
    assert back == cfg
    assert resolve_config(back, trace.input) == resolve_config(cfg, trace.input)


def test_bad_link_parameter_names_itself() -> None:
    with pytest.raises(InputError, match=r"enable_compression='maybe'"):
        views.params_to_config_dict({"enable_compression": "maybe"})
    with pytest.raises(InputError, match=r"pb_task='x'"):
        views.params_to_config_dict({"pb_task": "x"})
    # page parameters are not config
    assert views.params_to_config_dict({"trace": "t1", "session": "s"}) == {}
    assert Config.model_validate(views.params_to_config_dict({"preset": "hello-agents"}))


@pytest.mark.parametrize(
    "text",
    [
        data.EVIL,
        data.EVIL_IMG,
        data.EVIL_LINK,
        ":red[big] :material/home: **bold** `x`",
        "![img](http://x/a.png) <b>&amp;</b>",
    ],
)
def test_md_escapes_markdown_and_html(text: str) -> None:
    out = views.md(text)
    # every character that could start a link, image, tag, entity, emphasis, code span or a
    # Streamlit directive (:red[...], :material/...:) is backslash-escaped
    for i, ch in enumerate(out):
        if ch in "<>[]()!:*`&_#|~$" and (i == 0 or out[i - 1] != "\\"):
            raise AssertionError(f"unescaped {ch!r} at {i} in {out!r}")
    shown = re.sub(r"\\(.)", r"\1", out).replace(views.WORD_JOINER, "")
    assert shown == text  # what is shown is the original text


@pytest.mark.parametrize(
    "text",
    [
        "https://evil.example/x",
        "see HTTP://evil.example and ftp://x.y/z",
        "www.evil.example/x",
        "WWW.evil.example",
        "mail me: a.b+c@evil.example",
        "mailto:a@evil.example",
    ],
)
def test_md_breaks_autolinks(text: str) -> None:
    # GFM autolinks text after escapes are resolved: the shown text itself must not match.
    shown = re.sub(r"\\(.)", r"\1", views.md(text))
    assert shown.replace(views.WORD_JOINER, "") == text
    assert not re.search(r"(?i)[a-z0-9]://|www\.|@[-\w]", shown), shown


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("https://evil.example/x", "` https://evil.example/x `"),
        ("**bold** <b>x</b>", "` **bold** <b>x</b> `"),
        ("a`b``c", "``` a`b``c ```"),
        ("`edge`", "`` `edge` ``"),
        ("two\nlines", "` two lines `"),
        ("", ""),
    ],
)
def test_code_is_an_exact_code_span(text: str, want: str) -> None:
    assert views.code(text) == want


def test_start_up_warm_up_runs_the_real_figures() -> None:
    """The background warm-up (ui.state) swallows its errors so it can never take the app
    down; run its body directly so a broken warm-up fails here instead of going quiet."""
    from ctxapp.ui import state
    from ctxcore import tokens

    state._warm_figures()
    assert {"cl100k_base", "o200k_base"} <= set(tokens._encodings)


def test_start_up_reads_what_a_first_open_of_traces_and_inspect_reads(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The warm-up's store reads (``_warm_reads``) fill the very cache entries the first
    open of Traces and of Inspect reads: after it, opening both pages queries neither the
    store's trace list (a session's own list, which Inspect's ledger reads, is not warmed),
    the facets nor the sessions."""
    from ctxapp.ui import state
    from ctxcore.store import TraceFilter, TraceStore

    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    traces = data.session("warm-a", 4) + data.session("warm-b", 3)
    data.fill(tmp_path / "ctxscope.duckdb", traces)  # the conftest points CTXSCOPE_DB here
    state._warm_reads()
    asked: list[str] = []
    for name in ("list_traces", "facets", "sessions"):
        real = getattr(TraceStore, name)

        def counted(self: TraceStore, *a: object, _n: str = name, _f=real, **k: object):  # type: ignore[no-untyped-def]
            if _n != "list_traces" or (a[0] if a else k.get("flt")) in (None, TraceFilter()):
                asked.append(_n)
            return _f(self, *a, **k)

        monkeypatch.setattr(TraceStore, name, counted)
    at = data.open_page("traces")
    assert at.markdown[0].value.startswith(f"**{len(traces):,}** matching traces")
    data.rerun(at, "inspect", trace=traces[-1].trace_id)
    assert at.title[0].value == "Inspect"
    assert asked == []


# --------------------------------------------------------------------------- uploads

MB = 1 << 20


def _gz(chunks: int, chunk: bytes = b" " * MB) -> io.BytesIO:
    """``chunks`` MB of ``chunk`` gzipped, written piece by piece (the bomb stays small)."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb") as gz:
        for _ in range(chunks):
            gz.write(chunk)
    buf.seek(0)
    return buf


def test_upload_is_copied_under_its_bare_name(tmp_path: Path) -> None:
    body = b'{"messages": []}'
    path = views.saved_upload(io.BytesIO(body), "../../etc/req.json", tmp_path, MB)
    assert path == tmp_path / "req.json" and path.read_bytes() == body
    for name in ("..", ".", ""):
        assert views.saved_upload(io.BytesIO(body), name, tmp_path, MB) == tmp_path / "upload"


def test_gz_upload_is_unpacked_to_a_file(tmp_path: Path) -> None:
    line = b'{"schema": "ctxscope.trace/1"}\n'
    path = views.saved_upload(_gz(1, line * 100), "s.jsonl.gz", tmp_path, MB)
    assert path == tmp_path / "s.jsonl" and path.read_bytes() == line * 100


def test_gz_bomb_stops_at_the_limit_in_bounded_memory(tmp_path: Path) -> None:
    bomb = _gz(256)  # 256 MB unpacked from a few hundred KB
    assert len(bomb.getvalue()) < 2 * MB
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match=r"bomb\.json\.gz unpacks to more than 8 MB"):
            views.saved_upload(bomb, "bomb.json.gz", tmp_path, 8 * MB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * MB, f"unpacking held {peak / MB:.0f} MB at once"
    assert (tmp_path / "bomb.json").stat().st_size <= 8 * MB + MB


def test_gz_inside_gz_is_not_unpacked_again(tmp_path: Path) -> None:
    inner = _gz(64).getvalue()  # would be 64 MB if unpacked once more
    outer = io.BytesIO(gzip.compress(inner))
    path = views.saved_upload(outer, "x.json.gz.gz", tmp_path, MB)
    assert path == tmp_path / "x.json" and path.read_bytes() == inner


def test_broken_gz_is_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a valid gzip file"):
        views.saved_upload(io.BytesIO(b"not gzip at all"), "t.jsonl.gz", tmp_path, MB)


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("browser-t1", "browser-t1"),
        ("https://evil.example/../x", "https_evil.example_.._x"),
        ("会话-1", "会话-1"),
        ("..", "ctxscope"),
        ("<b>x</b>", "b_x_b"),
    ],
)
def test_file_stem_names_no_folder(name: str, want: str) -> None:
    assert views.file_stem(name) == want


def test_flipped_matches_history_across_presets(trace) -> None:
    """The same history message under two presets' names is one row, not two."""
    other = resolve_config(Config(preset="hello-agents-book"), trace.input)
    variant = build(trace.input, other)
    history = trace.input.history
    assert history, "the fixture has a history"
    keys_a = views.history_keys(trace.result.decisions, history)
    keys_b = views.history_keys(variant.decisions, history)
    shared = set(keys_a.values()) & set(keys_b.values())
    frame = views.flipped(trace.result, variant, history)
    plain = views.flipped(trace.result, variant)
    for row in frame.itertuples():
        if row.id_now:  # matched through the message it holds
            assert keys_a[row.packet_id] == keys_b[row.id_now]
            assert row.status_before != "—" and row.status_now != "—"
    assert len(frame) <= len(plain)
    if shared - {k for k in keys_a.values() if k in keys_b.values() and False}:
        assert "None" not in frame.astype(str).to_string().replace("<NA>", "")
    assert list(frame.columns[:5]) == [
        "packet_id",
        "status_before",
        "status_now",
        "reason_before",
        "reason_now",
    ]


def test_no_effect_note_says_why(trace) -> None:
    cfg = trace.config
    assert views.no_effect_note(cfg, cfg, trace.result, trace.result) is None
    if cfg.relevance_weight is not None:
        moved = cfg.model_copy(update={"relevance_weight": round(1 - cfg.relevance_weight, 2)})
        note = views.no_effect_note(cfg, moved, trace.result, trace.result)
        assert note is not None and note.startswith("relevance_weight changed;")
        assert "weights only" in note
    if cfg.min_relevance is not None:
        rel = [d.relevance for d in trace.result.decisions if d.relevance is not None]
        hi = round(max(rel) + 0.05, 2)
        lo = round(max(rel) + 0.01, 2)
        a = cfg.model_copy(update={"min_relevance": lo})
        b = cfg.model_copy(update={"min_relevance": hi})
        note = views.no_effect_note(a, b, trace.result, trace.result)
        assert note is not None and "no candidate's relevance lies between" in note


def test_findings_frames_name_the_turn_and_count_the_packets_left_out(trace) -> None:
    import dataclasses
    from datetime import UTC, datetime

    from ctxcore.diagnostics import INGEST_OPTIONS, diagnose_session
    from ctxcore.store.records import FindingRow

    ids = tuple(f"tool:call_{k}" for k in range(views.FINDING_PACKETS + 3))
    row = FindingRow(
        trace_id="t-9",
        session_id="s",
        turn=9,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        preset="ctxscope",
        detector="budget_flooded",
        severity="warning",
        message="m",
        packet_ids=ids,
    )
    frame = views.findings_frame([row, dataclasses.replace(row, packet_ids=())])
    assert list(frame.columns) == views.FINDING_COLUMNS
    assert frame["packets"][0] == ", ".join(ids[: views.FINDING_PACKETS]) + " … 3 more"
    assert frame["packets"][1] == ""  # no packet: an empty cell, never "None"
    assert list(frame["turn"]) == [9, 9] and frame["turn"].dtype.kind == "i"
    # a session's findings: every finding once, the latest turn first, each with its trace
    turns = data.session("views-findings", 3, preset="hello-agents-book")
    diag = diagnose_session(turns, options=INGEST_OPTIONS)
    frame = views.session_findings_frame("views-findings", diag.turns)
    want = [(t.turn, t.trace_id, f.message) for t in reversed(diag.turns) for f in t.findings]
    assert (
        want and list(zip(frame["turn"], frame["trace_id"], frame["message"], strict=True)) == want
    )
    assert views.session_findings_frame("x", []).empty


def test_decisions_frame_is_the_frame_built_row_by_row() -> None:
    import pandas as pd

    def by_rows(decisions: list) -> pd.DataFrame:
        rows = [
            {
                "rank": d.rank,
                "packet_id": d.packet_id,
                "kind": d.kind,
                "status": d.status.value,
                "reason": d.reason.value,
                "reason_text": d.reason_text,
                "partition": d.partition or "",
                "tokens_before": d.tokens_before,
                "tokens_after": d.tokens_after,
                "relevance": d.relevance,
                "recency": d.recency,
                "score": d.score,
                "budget_left": d.budget_left,
                "notes": "; ".join(d.notes),
            }
            for d in decisions
        ]
        frame = pd.DataFrame(rows, columns=views.DECISION_COLUMNS)
        frame["rank"] = frame["rank"].astype("Int64")
        frame["budget_left"] = frame["budget_left"].astype("Int64")
        return frame

    from ctxcore.loading import parse_json, trace_from_obj

    demo = Path(__file__).resolve().parent.parent / "ctxcore" / "data" / "demo"
    lines = [ln for f in sorted(demo.glob("*.jsonl")) for ln in f.read_text("utf-8").splitlines()]
    traces = [trace_from_obj(parse_json(ln)) for ln in lines if ln.strip()]
    presets = {t.config.preset for t in traces}
    assert {"ctxscope", "hello-agents", "hello-agents-book"} <= presets
    gaps = 0
    for t in traces:
        assert t.result is not None
        got = views.decisions_frame(t.result.decisions)
        pd.testing.assert_frame_equal(got, by_rows(t.result.decisions), check_exact=True)
        gaps += int(got["rank"].isna().sum() + got["relevance"].isna().sum())
    assert gaps  # missing ranks and scores are in there
    empty = views.decisions_frame([])
    pd.testing.assert_frame_equal(empty, by_rows([]), check_exact=True)
    assert list(empty.columns) == views.DECISION_COLUMNS


def _demo_traces() -> list:
    from ctxcore.loading import parse_json, trace_from_obj

    demo = Path(__file__).resolve().parent.parent / "ctxcore" / "data" / "demo"
    lines = [ln for f in sorted(demo.glob("*.jsonl")) for ln in f.read_text("utf-8").splitlines()]
    return [trace_from_obj(parse_json(ln)) for ln in lines if ln.strip()]


def test_decision_pages_hold_every_row_once_in_the_order_asked() -> None:
    """A decisions table sends a page at a time: over its pages every matching row is shown
    exactly once, in the order of the sort over all rows (not page by page)."""
    traces = [t for t in _demo_traces() if t.result and len(t.result.decisions) > 150]
    assert traces, "the demo store holds no trace of more than 150 decisions"
    frame = views.decisions_frame(traces[0].result.decisions)
    for by in views.DECISION_SORTS:
        for desc in (False, True):
            shown = views.sort_decisions(frame, by, descending=desc, first=["nope"])
            for size in (7, 50, views.PAGE_ROWS):
                pages = views.page_count(len(shown), size)
                assert (pages - 1) * size < len(shown) <= pages * size
                rows = [views.page_of(shown, p, size) for p in range(1, pages + 1)]
                assert all(0 < len(r) <= size for r in rows)
                joined = [pid for r in rows for pid in r["packet_id"]]
                assert joined == list(shown["packet_id"])
                assert sorted(joined) == sorted(frame["packet_id"])
            # a page past the end is the last one
            assert list(views.page_of(shown, 99, 50).index) == list(
                shown.index[-(len(shown) % 50 or 50) :]
            )
    # a column sorts all rows by value, gaps last in both directions
    score = views.sort_decisions(frame, "score")
    values = [v for v in score["score"] if v == v]
    assert values == sorted(values)
    desc = views.sort_decisions(frame, "score", descending=True)
    assert [v for v in desc["score"] if v == v] == sorted(values, reverse=True)
    for f in (score, desc):
        tail = f["score"].isna().to_numpy()
        assert not tail.any() or tail[tail.argmax() :].all()
    assert list(views.sort_decisions(frame, views.BUILDER_ORDER)["packet_id"]) == list(
        frame["packet_id"]
    )
    assert (
        list(views.sort_decisions(frame, views.BUILDER_ORDER, descending=True)["packet_id"])
        == list(frame["packet_id"])[::-1]
    )
    assert views.page_count(0) == 1 and views.page_of(frame.iloc[:0], 1).empty


def test_changed_first_puts_the_flipped_packets_first_in_their_order() -> None:
    traces = [t for t in _demo_traces() if t.result and len(t.result.decisions) > 150]
    frame = views.decisions_frame(traces[0].result.decisions)
    ids = list(frame["packet_id"])
    first = [ids[-1], ids[len(ids) // 2], "gone-from-this-build", ids[3]]
    shown = list(views.sort_decisions(frame, views.CHANGED_FIRST, first=first)["packet_id"])
    kept = [p for p in first if p in set(ids)]
    assert shown[: len(kept)] == kept
    assert shown[len(kept) :] == [p for p in ids if p not in set(kept)]
    # filtered first, then sorted: the changed rows still lead what matches
    part = frame[frame.index % 2 == 1]
    got = list(views.sort_decisions(part, views.CHANGED_FIRST, first=first)["packet_id"])
    lead = [p for p in kept if p in set(part["packet_id"])]
    assert got[: len(lead)] == lead and sorted(got) == sorted(part["packet_id"])


def test_the_flip_summary_names_the_packets_that_flipped_as_code() -> None:
    import pandas as pd

    flips = pd.DataFrame(
        {
            "packet_id": ["tool:call_4", "tool:call_5", "a", "b", "c", "d", "[x](http://e.vil)"],
            "status_before": ["filtered"] * 6 + ["kept"],  # the last one: other tokens
            "status_now": ["kept", "dropped", "kept", "kept", "kept", "kept", "kept"],
        }
    )
    line = views.flip_summary(flips)
    assert line == (
        "flipped (7): 5 now kept (` tool:call_4 `, ` a `, ` b ` +2), "
        "1 now dropped (` tool:call_5 `), 1 with other tokens or rank"
    )
    hostile = views.flip_summary(flips.iloc[[6]].assign(status_before="filtered"))
    assert hostile == "flipped (1): 1 now kept (` [x](http://e.vil) `)"  # a code span, no link


def test_long_numbers_take_fewer_metric_cards_a_row() -> None:
    from ctxapp.ui.widgets import metrics_per_row

    assert metrics_per_row([5_100, 3_715, 5, None], 4) == 4
    assert metrics_per_row([200_000, 2_108_385, 25], 4) == 3  # "2,108,385" was cut four a row
    assert metrics_per_row([2_000_000_000, 1], 4) == 2
    assert metrics_per_row([2_108_385], 7) == 3 and metrics_per_row([2_108_385], 2) == 2
