"""Export and share: snapshot round trips, offline and escaped HTML, OTLP round trips, CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from ctxcore.cli import main
from ctxcore.formats.load import load_file
from ctxcore.formats.openai import trace_from_request
from ctxcore.formats.otlp import traces_from_otlp
from ctxcore.formats.share import html_report, otlp_export, script_json, snapshot_json
from ctxcore.models import Trace

ROOT = Path(__file__).resolve().parent.parent
NOW = datetime(2025, 2, 3, 4, 5, 6, tzinfo=UTC)
XSS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "[click me](javascript:alert(1))",
    "</script><!--<script>alert(2)</script>-->",
]


def _session(corpus: Path, n: int = 4) -> list[Trace]:
    """A few real conversations (c02, Chinese tool chats) as one session."""
    traces = load_file(corpus / "c02_llamafactory_glaive_toolcall_zh_demo.json")[:n]
    return [t.model_copy(update={"session_id": "s-zh"}) for t in traces]


def _built(corpus: Path) -> list[Trace]:
    """Traces the real pipeline built (every preset) on a01, plus a captured input only."""
    from ctxcore.models import Config
    from ctxcore.pipeline import PRESET_NAMES, build_trace

    imp = load_file(corpus / "a01_sweagent_marshmallow-1867_function-calling.traj.json")[-1]
    out = [
        build_trace(imp.input, Config(preset=p), session_id="built", turn=i, trace_id=f"b-{p}")  # type: ignore[arg-type]
        for i, p in enumerate(n for n in PRESET_NAMES if n != "auto-compact")  # it needs a window
    ]
    out.append(imp.model_copy(update={"trace_id": "input-only", "result": None, "outcome": None}))
    return out


def _xss_trace() -> Trace:
    request = {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": f"sys {XSS[0]}"},
            {"role": "user", "content": f"goal {XSS[1]}"},
            {
                "role": "assistant",
                "content": XSS[2],
                "tool_calls": [
                    {
                        "id": "call_<b>x</b>",
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps({"cmd": XSS[3]})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_<b>x</b>", "content": "\n".join(XSS)},
            {"role": "user", "content": f"now {XSS[0]}"},
        ],
        "tools": [{"type": "function", "function": {"name": "bash", "description": XSS[1]}}],
    }
    t = trace_from_request(request, now=NOW, session_id=XSS[0])
    return t.model_copy(update={"tags": [XSS[1]]})


# --------------------------------------------------------------------------- snapshot


def test_snapshot_round_trip_is_byte_identical(corpus: Path, tmp_path: Path) -> None:
    traces = _session(corpus) + _built(corpus)
    first = snapshot_json(traces)
    assert json.loads(first)["format"] == "ctxscope.snapshot/1"
    path = tmp_path / "snap.json"
    path.write_text(first, encoding="utf-8")
    again = load_file(path)
    assert again == traces
    assert snapshot_json(again) == first


def test_cli_export_import_export_identical_with_redaction(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0fGh3iJk6lMn9oPq2rSt5uVw8xYz"
    req = {
        "messages": [{"role": "system", "content": f"key={key}"}, {"role": "user", "content": "hi"}]
    }
    src = tmp_path / "in.jsonl"
    src.write_text(
        "\n".join(t.to_json() for t in [*_session(corpus, 2), trace_from_request(req, now=NOW)])
        + "\n",
        encoding="utf-8",
    )
    snap1, back, snap2 = tmp_path / "1.json", tmp_path / "back.jsonl", tmp_path / "2.json"
    assert main(["export", str(src), "-o", str(snap1)]) == 0
    assert "redacted 3 secret(s) (openai_key: 3)" in capsys.readouterr().err
    assert main(["import", str(snap1), "-o", str(back)]) == 0
    assert main(["export", str(back), "-o", str(snap2)]) == 0
    assert snap1.read_bytes() == snap2.read_bytes()
    text = snap1.read_text(encoding="utf-8")
    assert key not in text and "[REDACTED:openai_key]" in text
    exported = load_file(snap1)
    assert exported[-1].redactions == {"openai_key": 3}  # system, prompt, result.messages
    # --no-redact keeps the key
    raw = tmp_path / "raw.json"
    assert main(["export", str(src), "--no-redact", "-o", str(raw)]) == 0
    assert key in raw.read_text(encoding="utf-8")


def test_build_accepts_an_exported_snapshot(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces = _turns(corpus, 2)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(t.to_json() + "\n" for t in traces), encoding="utf-8")
    one, both = tmp_path / "one.json", tmp_path / "both.json"
    assert main(["export", str(src), "-o", str(both)]) == 0
    only = tmp_path / "only.jsonl"
    only.write_text(traces[0].to_json() + "\n", encoding="utf-8")
    assert main(["export", str(only), "-o", str(one)]) == 0
    capsys.readouterr()
    # one trace: built as it is, a variant of it
    assert main(["build", str(one), "--set", "max_tokens=3000"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["source_trace_id"] == traces[0].trace_id and out["config"]["max_tokens"] == 3000
    # several: --trace picks one; without it, an error naming the ids
    assert main(["build", str(both), "--trace", traces[1].trace_id]) == 0
    assert json.loads(capsys.readouterr().out)["source_trace_id"] == traces[1].trace_id
    assert main(["build", str(both)]) != 0
    err = capsys.readouterr().err
    assert "pick one with --trace" in err and traces[0].trace_id in err


# --------------------------------------------------------------------------- HTML


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _without_plotly_lib(doc: str) -> str:
    """The report runs no script at all (inline SVG charts): there is no library to cut."""
    assert "<script" not in doc.lower(), "the report carries a script"
    return doc


def test_html_report_escapes_every_payload() -> None:
    trace = _xss_trace()
    doc = html_report([trace])
    rest = _without_plotly_lib(doc)
    for payload in XSS:
        if "<" in payload:
            assert payload not in rest
    # the markdown link has nothing to escape: it must stay inert text inside <pre>/<td>
    assert "[click me](javascript:alert(1))" in rest
    assert "<b>x</b>" not in rest
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in rest  # shown, as text
    assert "&lt;img src=x onerror=alert(1)&gt;" in rest
    parser = _Tags()
    parser.feed(rest)
    tags = [t for t, _ in parser.tags]
    # no element came from content: no links, images, frames or event handlers
    ours = {
        "html",
        "head",
        "meta",
        "title",
        "style",
        "body",
        "h1",
        "h2",
        "h3",
        "p",
        "b",
        "br",
        "table",
        "tr",
        "th",
        "td",
        "span",
        "ul",
        "li",
        "details",
        "summary",
        "pre",
        "div",
        "section",
        # the charts: inline SVG drawn from numbers, names in <title>/<text> escaped
        "svg",
        "rect",
        "text",
        "i",
    }
    assert set(tags) <= ours, set(tags) - ours
    assert all(not k.startswith("on") for _, attrs in parser.tags for k in attrs)
    assert not re.search(r"(href|src)\s*=\s*[\"']?javascript:", rest, re.I)
    # no script at all, and the CSP forbids any (no script-src: default-src 'none')
    assert not [t for t, _ in parser.tags if t == "script"]
    assert "default-src 'none'" in rest and "script-src" not in rest
    # no network: nothing is loaded from elsewhere
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", rest)


def test_script_json_cannot_break_out() -> None:
    value = {"a": XSS[3], "b": "x]]>y & <!-- z", "c": "\u2028"}
    text = script_json(value)
    for bad in ("</", "<!--", "]]>", "<script", "&", "\u2028"):
        assert bad not in text
    assert json.loads(text) == value


def test_html_report_of_built_and_input_only_traces(corpus: Path) -> None:
    built = _built(corpus)
    doc = _without_plotly_lib(html_report(built))
    # two charts per built trace, and the session's usage per turn (they share "built")
    assert doc.count('class="fig"') == 2 * (len(built) - 1) + 1
    assert "Captured input only" in doc
    for t in built:
        assert f"Trace {t.trace_id}" in doc
        for d in t.result.decisions if t.result else []:
            assert f"<td>{d.packet_id}</td>" in doc


def test_html_report_figures_carry_the_trace_numbers(corpus: Path) -> None:
    trace = load_file(corpus / "a02_sweagent_function_calling_simple.traj.json")[-1]
    doc = html_report([trace])
    rest = _without_plotly_lib(doc)
    assert rest.count('class="fig"') == 2
    assert trace.result is not None
    assert f"{trace.result.totals.used:,}" in rest
    for d in trace.result.decisions:
        assert f"<td>{d.packet_id}</td>" in rest


def _turns(corpus: Path, n: int) -> list[Trace]:
    return [t.model_copy(update={"turn": i + 1}) for i, t in enumerate(_session(corpus, n))]


def test_html_report_carries_the_why_and_stays_small(corpus: Path) -> None:
    traces = _turns(corpus, 3)
    one = html_report(traces[-1:])
    # findings and the searched counterfactual knobs of the trace, offline and small
    assert "<h3>Findings</h3>" in one and "What would have kept it?" in one
    assert "Searched knobs: " in one
    assert len(one.encode()) <= 1_500_000
    assert 'id="session"' not in one  # one trace: no session view
    doc = html_report(traces)
    # a session: usage per turn and the timeline of statuses, once, before the traces
    assert doc.count('id="session"') == 1
    assert doc.index('id="session"') < doc.index('id="trace-0"')
    assert "Tokens used per turn" in doc and "Timeline: packets per status" in doc
    for t in traces:
        assert f'<a href="#turn-{t.turn}">turn {t.turn}</a>' in doc
        assert f'id="turn-{t.turn}"' in doc


def test_html_report_marks_gaps_between_turns(corpus: Path) -> None:
    traces = _turns(corpus, 3)
    gapped = [traces[0], traces[2]]
    doc = html_report(gapped, findings=[[], []], fixes=[[], []])
    assert f"turns {traces[0].turn + 1}–{traces[2].turn - 1} not in this export" in doc


# --------------------------------------------------------------------------- OTLP


def test_otlp_export_round_trip_and_namespaced_decisions(corpus: Path) -> None:
    traces = [*_session(corpus, 3), _xss_trace(), *_built(corpus)]
    assert any(d.notes for t in traces if t.result for d in t.result.decisions)
    assert any(d.score is not None for t in traces if t.result for d in t.result.decisions)
    data = otlp_export(traces)
    spans = data["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert len(spans) == len(traces)
    keys = {kv["key"]: kv["value"] for kv in spans[0]["attributes"]}
    res = traces[0].result
    assert res is not None
    assert keys["ctxscope.decision.count"] == {"intValue": str(len(res.decisions))}
    for i, d in enumerate(res.decisions):
        assert keys[f"ctxscope.decision.{i}.packet_id"] == {"stringValue": d.packet_id}
        assert keys[f"ctxscope.decision.{i}.status"] == {"stringValue": d.status.value}
        assert keys[f"ctxscope.decision.{i}.tokens_after"] == {"intValue": str(d.tokens_after)}
    assert "gen_ai.input.messages" in keys and "gen_ai.tool.definitions" in keys
    # through JSON text, as a backend would store it
    back = traces_from_otlp(json.loads(json.dumps(data)))  # in span start-time order
    assert sorted(back, key=lambda t: t.trace_id) == sorted(traces, key=lambda t: t.trace_id)


def test_otlp_export_readable_as_plain_genai(corpus: Path) -> None:
    """Without the ctxscope.* attributes, the GenAI ones alone rebuild the same input."""
    # the trajectory's last model call: the whole conversation up to it
    orig = load_file(corpus / "a01_sweagent_marshmallow-1867_function-calling.traj.json")[-1]
    data = otlp_export([orig])
    span = data["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["attributes"] = [kv for kv in span["attributes"] if not kv["key"].startswith("ctxscope.")]
    (plain,) = traces_from_otlp(data)
    assert plain.builder.name == "import/otlp"
    assert plain.input.query == orig.input.query
    assert plain.input.system_instructions == orig.input.system_instructions
    assert [(p.id, p.content) for p in plain.input.packets] == [
        (p.id, p.content) for p in orig.input.packets
    ]
    assert [m.content for m in plain.input.history] == [m.content for m in orig.input.history]
    assert plain.result is not None and orig.result is not None
    assert plain.result.totals.used == orig.result.totals.used


# --------------------------------------------------------------------------- CLI + store


def _store_with(db: Path, traces: list[Trace]) -> None:
    from ctxcore.store import TraceStore

    with TraceStore(db) as store:
        store.add_traces(traces)


def test_cli_export_session_from_store_all_formats(corpus: Path, tmp_path: Path) -> None:
    traces = _session(corpus, 3)
    db = tmp_path / "s.duckdb"
    _store_with(db, traces)
    out = tmp_path / "sess.json"
    assert main(["export", "--session", "s-zh", "--db", str(db), "-o", str(out)]) == 0
    assert load_file(out) == sorted(traces, key=lambda t: t.turn)
    html_out = tmp_path / "one.html"
    rc = main(
        ["export", traces[1].trace_id, "--db", str(db), "--format", "html", "-o", str(html_out)]
    )
    assert rc == 0 and traces[1].trace_id in html_out.read_text(encoding="utf-8")
    otlp_out = tmp_path / "one.otlp.json"
    rc = main(
        ["export", traces[1].trace_id, "--db", str(db), "--format", "otlp", "-o", str(otlp_out)]
    )
    assert rc == 0 and load_file(otlp_out) == [traces[1]]


def test_snapshot_is_ingestible(corpus: Path, tmp_path: Path) -> None:
    from ctxcore.store import TraceStore
    from ctxcore.store.ingest import ingest_paths

    traces = _session(corpus, 3)
    snap = tmp_path / "shared.json"
    snap.write_text(snapshot_json(traces), encoding="utf-8")
    with TraceStore(tmp_path / "g.duckdb") as store:
        counts = ingest_paths(store, [snap])
        assert counts.traces_added == 3 and counts.errors == 0
        assert [store.get_trace(t.trace_id) for t in traces] == traces


def test_cli_export_unknown_trace_is_one_line(tmp_path: Path, capsys: Any) -> None:
    db = tmp_path / "e.duckdb"
    _store_with(db, [])
    assert main(["export", "nope", "--db", str(db)]) == 2
    err = capsys.readouterr().err.strip()
    assert "trace 'nope' not found" in err and "\n" not in err
    assert main(["export", "--db", str(db)]) == 2
    assert "exactly one of TRACE_ID or --session" in capsys.readouterr().err


def test_cli_import_into_store_is_idempotent(corpus: Path, tmp_path: Path, capsys: Any) -> None:
    db = tmp_path / "i.duckdb"
    src = corpus / "a03_mini-swe-agent_github_issue.traj.json"
    n = len(load_file(src))  # one trace per model call of the trajectory
    assert n > 1
    assert main(["import", str(src), "--db", str(db)]) == 0
    assert f"{n} new, 0 already there" in capsys.readouterr().out
    assert main(["import", str(src), "--db", str(db)]) == 0
    assert f"0 new, {n} already there" in capsys.readouterr().out
    from ctxcore.store import TraceStore

    with TraceStore(db, read_only=True) as store:
        assert store.count() == n


def _hold_store(db: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys,time; from ctxcore.store import TraceStore; s=TraceStore(sys.argv[1]);"
            "print('ready', flush=True); time.sleep(60)",
            str(db),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
    return holder


@pytest.mark.slow
def test_import_while_the_app_holds_the_store_goes_to_its_folder(
    corpus: Path, tmp_path: Path
) -> None:
    from ctxcore.cli.app import write_note

    db = tmp_path / "locked.duckdb"
    _store_with(db, [])
    folder = tmp_path / "watched"
    folder.mkdir()
    holder = _hold_store(db)
    # what `ctxscope app` leaves beside the store while it runs: its pid and its folder
    write_note(db.resolve(), folder, holder.pid)
    try:
        # CTXSCOPE_TRACES points elsewhere: the note, not the environment, says where to go
        env = dict(os.environ, CTXSCOPE_TRACES=str(tmp_path / "nobody-watches-this"))
        src = corpus / "a02_sweagent_function_calling_simple.traj.json"
        proc = subprocess.run(
            [sys.executable, "-m", "ctxcore", "import", str(src), "--db", str(db)],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert "the folder that app watches" in proc.stderr
        files = list(folder.glob("import-*.jsonl"))
        assert len(files) == 1
        assert not (tmp_path / "nobody-watches-this").exists()
        assert load_file(files[0])[0].input == load_file(src)[0].input
        # export finds it there too while the store is held
        out = tmp_path / "x.json"
        tid = load_file(files[0])[0].trace_id
        proc = subprocess.run(
            [sys.executable, "-m", "ctxcore", "export", tid, "--db", str(db), "-o", str(out)],
            capture_output=True,
            text=True,
            env=dict(env, CTXSCOPE_TRACES=str(folder)),
            cwd=ROOT,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert load_file(out)[0].trace_id == tid
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_import_into_a_store_held_by_another_process_is_an_error(
    corpus: Path, tmp_path: Path
) -> None:
    db = tmp_path / "locked.duckdb"
    _store_with(db, [])
    folder = tmp_path / "traces"
    holder = _hold_store(db)
    try:
        src = corpus / "a02_sweagent_function_calling_simple.traj.json"
        proc = subprocess.run(
            [sys.executable, "-m", "ctxcore", "import", str(src), "--db", str(db)],
            capture_output=True,
            text=True,
            env=dict(os.environ, CTXSCOPE_TRACES=str(folder)),
            cwd=tmp_path,
            timeout=120,
        )
        assert proc.returncode == 2
        [line] = proc.stderr.strip().splitlines()
        assert "no ctxscope app is serving this store" in line and "-o FILE" in line
        assert not folder.exists() and list(tmp_path.rglob("import-*.jsonl")) == []
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_export_to_a_full_disk_leaves_no_file(corpus: Path, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tiny tmpfs needs root (CI runs as root)")
    db = tmp_path / "s.duckdb"
    src = corpus / "a02_sweagent_function_calling_simple.traj.json"
    traces = load_file(src)
    _store_with(db, traces)
    full = tmp_path / "full"
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(full)], check=True)
    try:
        out = full / "report.html"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "ctxcore",
                "export",
                traces[0].trace_id,
                "--format",
                "html",
                "--db",
                str(db),
                "-o",
                str(out),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert proc.returncode == 2
        [line] = proc.stderr.strip().splitlines()
        assert "No space left on device" in line and "nothing was written" in line
        assert list(full.iterdir()) == []
    finally:
        subprocess.run(["umount", str(full)], check=False)
