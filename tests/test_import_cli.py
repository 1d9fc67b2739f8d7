"""``ctxscope import`` as a user runs it: windows that carry into builds, folders, bad files."""

from __future__ import annotations

import copy
import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxcore.cli import main
from ctxcore.diagnostics import diagnose
from ctxcore.formats.load import load_file
from ctxcore.models import Status, Trace
from ctxcore.sharing import PartTable

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "imports"
TOOL_USE = FIXTURES / "anthropic-messages" / "openinference-tool-use-in-input.request.json"
MB = 1 << 20


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxcore", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=180,
    )


def _traces(path: Path) -> list[Trace]:
    return load_file(path, "trace")


def test_a_known_models_window_reaches_the_config_that_builds_use() -> None:
    req = json.loads(TOOL_USE.read_text())
    assert "claude" in req["model"] and "window" not in req
    [trace] = load_file(TOOL_USE)
    assert trace.input.window == 200_000
    assert trace.config.max_tokens == 200_000
    assert "model table" in trace.metadata["import"]["window_source"]


def test_an_unknown_window_is_unknown_and_nothing_measures_against_it(tmp_path: Path) -> None:
    req: dict[str, Any] = json.loads(TOOL_USE.read_text())
    req["model"] = "some-private-model"
    big = "x " * 3000
    req["messages"][0]["content"] = big  # one message is nearly the whole prompt
    path = tmp_path / "req.json"
    path.write_text(json.dumps(req))
    [trace] = load_file(path)
    assert trace.input.window is None
    assert trace.metadata["import"]["window_known"] is False
    assert any("window is unknown" in w for w in trace.result.warnings)  # type: ignore[union-attr]
    assert [f for f in diagnose(trace) if f.detector == "budget_flooded"] == []


@pytest.mark.slow
def test_window_and_model_options_and_set_window_on_build(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    proc = _run("import", str(TOOL_USE), "--window", "50000", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    [t] = _traces(out)
    assert (t.input.window, t.config.max_tokens) == (50_000, 50_000)
    proc = _run("import", str(TOOL_USE), "--model", "gpt-4o", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    [t] = _traces(out)
    assert (t.input.window, t.config.max_tokens) == (128_000, 128_000)
    built = _run("build", str(out), "--set", "window=30000")
    assert built.returncode == 0, built.stderr
    rebuilt = Trace.model_validate_json(built.stdout)
    assert rebuilt.input.window == 30_000 and rebuilt.config.max_tokens == 30_000


def test_usage_reported_beside_counted(tmp_path: Path) -> None:
    req = json.loads(TOOL_USE.read_text())
    resp = json.loads(TOOL_USE.with_name(TOOL_USE.name.replace("request", "response")).read_text())
    path = tmp_path / "pair.json"
    path.write_text(json.dumps({"request": req, "response": resp}))
    [t] = load_file(path)
    tokens = t.metadata["import"]["prompt_tokens"]
    usage = resp["usage"]
    reported = (
        usage["input_tokens"]
        + (usage.get("cache_read_input_tokens") or 0)
        + (usage.get("cache_creation_input_tokens") or 0)
    )
    assert tokens["reported"] == reported
    assert tokens["counted"] == t.result.totals.used  # type: ignore[union-attr]
    assert tokens["difference"] == tokens["counted"] - reported


@pytest.mark.slow
def test_a_folder_imports_every_file_and_says_which_failed(tmp_path: Path) -> None:
    folder = FIXTURES / "anthropic-messages"
    requests = sorted(folder.glob("*.request.json"))
    responses = sorted(folder.glob("*.response.json"))
    out = tmp_path / "all.jsonl"
    proc = _run("import", str(folder), "-o", str(out))
    # a response alone is not a request: each such file is one error line, the rest imported
    assert proc.returncode == 1
    errors = [
        line for line in proc.stderr.splitlines() if line.startswith("ctxscope import: error")
    ]
    assert len(errors) == len(responses)
    assert all("matches no format" in line and ".response.json" in line for line in errors)
    assert len(_traces(out)) == len(requests)
    # a quoted glob is expanded by us
    proc = _run("import", str(folder / "*.request.json"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert len(_traces(out)) == len(requests)


# --------------------------------------------------------------------------- streaming

COMPACTED = FIXTURES / "claude-code" / "claude-code-log-compact-after-rewind.jsonl"
INIT_SESSION = FIXTURES / "claude-code" / "ccviewer-init-session.jsonl"


def _untimed(t: Trace) -> dict[str, Any]:
    d = t.to_dict()
    return {**d, "result": {**d["result"], "timings": {}}}


def _summarized(t: Trace) -> list[str]:
    assert t.result is not None
    return [d.packet_id for d in t.result.decisions if d.status == Status.SUMMARIZED]


def test_window_on_a_session_log_keeps_its_compaction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--window``/``--model`` on a Claude Code log reach its reader: the compaction's
    summarized messages stay (re-deriving each trace from its messages loses them)."""
    own = load_file(COMPACTED)
    lost = _summarized(own[4])
    assert lost == [f"msg-{n}" for n in (1, 2, 5, 6, 7, 8)]  # the log's own decisions
    out = tmp_path / "w.jsonl"
    assert main(["import", str(COMPACTED), "--window", "50000", "-o", str(out)]) == 0
    traces = _traces(out)
    assert [t.trace_id for t in traces] == [t.trace_id for t in own]
    for t in traces:
        assert t.result is not None
        assert (t.input.window, t.result.totals.window, t.config.max_tokens) == (50_000,) * 3
        assert t.metadata["import"]["window_source"] == "--window"
    assert _summarized(traces[4]) == lost
    assert [_summarized(t) for t in traces[:4]] == [[], [], [], []]
    decisions = [d for d in traces[4].result.decisions if d.packet_id in lost]  # type: ignore[union-attr]
    assert all("compaction at line 9" in d.reason_text for d in decisions)
    assert traces[4].metadata["import"]["compaction"]["preTokens"] == 150_000
    # --model: the model's window and tokenizer, the same decisions
    assert main(["import", str(COMPACTED), "--model", "gpt-4o", "-o", str(out)]) == 0
    gpt = _traces(out)
    assert {t.result.totals.window for t in gpt} == {128_000}  # type: ignore[union-attr]
    assert {t.result.totals.tokenizer for t in gpt} == {"o200k_base"}  # type: ignore[union-attr]
    assert _summarized(gpt[4]) == lost
    # into the store: the Timeline's rows show the compaction at 50,000
    from ctxcore.store import TraceStore

    db = tmp_path / "s.duckdb"
    capsys.readouterr()
    assert main(["import", str(COMPACTED), "--window", "50000", "--db", str(db)]) == 0
    assert "5 new, 0 already there" in capsys.readouterr().out
    with TraceStore(db, read_only=True) as store:
        statuses = {(r["packet_id"], r["turn"]): r["status"] for r in store.session_statuses("s1")}
        stored = store.get_trace(traces[4].trace_id)
    assert statuses[("msg-2", 3)] == "kept" and statuses[("msg-2", 4)] == "summarized"
    assert stored is not None and stored.result is not None
    assert stored.result.totals.window == 50_000


def test_a_log_cut_part_way_keeps_what_was_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A session log whose .gz is cut: the traces of the calls before the damage are
    imported, the file's error names it and says how many came through; the exit code is 1.
    Another file in the same import is imported whole."""
    log = tmp_path / "log.jsonl"
    _big_log(log, 1)
    whole = load_file(log)
    data = gzip.compress(log.read_bytes())
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(data[: len(data) * 3 // 4])
    out = tmp_path / "o.jsonl"
    assert main(["import", str(cut), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    [line] = [x for x in err.splitlines() if x.startswith("ctxscope import: error:")]
    got = _traces(out)
    assert 0 < len(got) < len(whole)
    assert f"{cut}: cannot read past line" in line
    assert f"({len(got)} trace(s) read before this are imported)" in line
    # the calls before the cut are the same calls as in the whole log
    assert [t.input for t in got] == [t.input for t in whole[: len(got)]]
    # with a good file beside it: both, the good one whole
    assert main(["import", str(cut), str(COMPACTED), "-o", str(out)]) == 1
    assert len(_traces(out)) == len(got) + len(load_file(COMPACTED))


def test_the_store_takes_an_import_in_batches_and_transactions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small batches and transactions (as a big log gets): every trace stored once, a second
    import finds them all there; a trace_id stored with other content stops the import with
    the traces committed before it stored, and says so."""
    from ctxcore.cli import exchange
    from ctxcore.store import TraceStore

    monkeypatch.setattr(exchange, "BATCH_TRACES", 2)
    name = "claude-code/ccviewer-task-sidechain-session.jsonl"
    src = FIXTURES / name
    expected = load_file(src)
    db = tmp_path / "s.duckdb"
    sizes = [len(t.to_json().encode()) for t in expected]
    monkeypatch.setattr(exchange, "TX_BYTES", sum(sizes[:3]))  # a commit every 3-4 traces
    assert main(["import", str(src), "--db", str(db)]) == 0
    printed = capsys.readouterr().out
    assert f"{len(expected)} new, 0 already there" in printed
    with TraceStore(db, read_only=True) as store:
        assert store.count() == len(expected)
        stored = [store.get_trace(t.trace_id) for t in expected]
    # the same traces, but for the stage timings (measurements of each import)
    assert [_untimed(t) for t in stored if t is not None] == [_untimed(t) for t in expected]
    assert main(["import", str(src), "--db", str(db)]) == 0
    assert f"0 new, {len(expected)} already there" in capsys.readouterr().out
    # a file of traces, the 8th with an id stored with other content
    other = expected[0].model_copy(update={"metadata": {**expected[0].metadata, "n": 1}})
    fresh = [t.model_copy(update={"trace_id": f"fresh-{k}"}) for k, t in enumerate(expected)]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(t.to_json() + "\n" for t in [*fresh[:7], other, *fresh[7:]]))
    assert main(["import", str(bad), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert f"trace_id {expected[0].trace_id!r} is already stored" in err
    with TraceStore(db, read_only=True) as store:
        kept = store.count() - len(expected)
        assert 0 < kept <= 7  # the transactions committed before the conflict
        assert [store.get_trace(f"fresh-{k}") is not None for k in range(len(fresh))] == [
            k < kept for k in range(len(fresh))
        ]
    assert f"the first {kept} trace(s) of this import were stored, nothing after" in err
    # below one transaction's size nothing of a refused import is stored
    monkeypatch.setattr(exchange, "TX_BYTES", 1 << 40)
    bad.write_text("".join(t.to_json() + "\n" for t in [*fresh[kept:], other]))
    assert main(["import", str(bad), "--db", str(db)]) == 2
    assert "nothing was stored" in capsys.readouterr().err
    with TraceStore(db, read_only=True) as store:
        assert store.count() == len(expected) + kept


def test_redaction_on_ingest_applies_to_each_imported_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-proj-" + "Q3tW9xYb2LmN8vR4kP7sZ1aD6fG0hJ5c"
    rows = [json.loads(x) for x in INIT_SESSION.read_text().splitlines() if x.strip()]
    rows[4]["message"]["content"][0]["content"] += f"\nOPENAI_API_KEY={key}"  # a tool result
    path = tmp_path / "secret.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "o.jsonl"
    monkeypatch.setenv("CTXSCOPE_REDACT_ON_INGEST", "1")
    assert main(["import", str(path), "-o", str(out)]) == 0
    text = out.read_text()
    assert key not in text and "[REDACTED:" in text
    traces = _traces(out)
    assert all(t.redactions for t in traces[1:]) and not traces[0].redactions
    monkeypatch.delenv("CTXSCOPE_REDACT_ON_INGEST")
    assert main(["import", str(path), "-o", str(out)]) == 0
    assert key in out.read_text()


# A Claude Code session log of LOG_MB, made of the real lines of INIT_SESSION repeated with
# fresh ids (every repetition a new conversation, as after /clear), each tool result followed
# by real tool output from corpus/ (d* files) so the file reaches its size.
LOG_MB = 40


def _fresh(ids: dict[str, str], old: str, rep: int) -> str:
    """A new id for ``old`` in repetition ``rep`` (the same one each time it is asked)."""
    if old not in ids:
        ids[old] = f"{old[:24]}{rep:06d}{len(ids):06d}"
    return ids[old]


def _big_log(path: Path, mb: float, pad: int = 40_000) -> int:
    """Write the log (``pad`` characters of tool output added to each tool result); returns
    how many repetitions of INIT_SESSION it holds."""
    rows = [json.loads(x) for x in INIT_SESSION.read_text().splitlines() if x.strip()]
    corpus = "\n".join(p.read_text(errors="replace") for p in sorted((ROOT / "corpus").glob("d*")))
    written = rep = 0
    with path.open("w", encoding="utf-8") as fh:
        while written < mb * 1e6:
            ids: dict[str, str] = {}
            for row in rows:
                obj = copy.deepcopy(row)
                obj["uuid"] = _fresh(ids, obj["uuid"], rep)
                if obj.get("parentUuid"):
                    obj["parentUuid"] = _fresh(ids, obj["parentUuid"], rep)
                obj["sessionId"] = f"big-session-{rep:06d}"
                msg = obj.get("message") or {}
                if obj["type"] == "assistant":
                    msg["id"] = _fresh(ids, msg["id"], rep)
                content = msg.get("content")
                for block in content if isinstance(content, list) else []:
                    if block.get("type") == "tool_use":
                        block["id"] = _fresh(ids, block["id"], rep)
                    elif block.get("type") == "tool_result":
                        block["tool_use_id"] = _fresh(ids, block["tool_use_id"], rep)
                        start = (rep * 7919 + len(ids) * 104_729) % (len(corpus) - pad)
                        block["content"] = f"{block['content']}\n{corpus[start : start + pad]}"
                line = json.dumps(obj, ensure_ascii=False) + "\n"
                fh.write(line)
                written += len(line.encode())
            rep += 1
    return rep


@pytest.mark.slow
def test_a_big_session_log_imports_in_bounded_memory(tmp_path: Path) -> None:
    """``ctxscope import`` streams a session log into its output: the peak memory of a 40 MB
    log's import (532 calls, 480 MB of trace JSON) stays far below what holding its traces
    takes. Measured on this log: the list version peaked at 1,073 MB, the stream at 315 MB."""
    log = tmp_path / "big.jsonl"
    reps = _big_log(log, LOG_MB)
    calls = sum(1 for t in load_file(INIT_SESSION))
    out = tmp_path / "big-traces.jsonl"
    # whole traces, each repeating its context: the output is what holding them would take
    peak, stdout = _peak_of_import(log, "--whole", "-o", str(out))
    assert f"imported {reps * calls} trace(s) from {log}" in stdout
    assert f"… and {reps * calls - 20} more trace(s)" in stdout
    # every trace written, in order (read back line by line)
    n = 0
    size = out.stat().st_size
    table = PartTable()
    with out.open("rb") as fh:
        for n, line in enumerate(fh, start=1):
            whole = table.expand(line.rstrip(b"\n"))
            if n in (1, reps * calls):
                t = Trace.model_validate_json(whole)
                assert t.turn == n - 1
    assert n == reps * calls
    # Holding every trace takes more than the JSON they make; the stream holds a few.
    assert size > 400 * MB
    assert peak < 640 * MB, f"import peaked at {peak / MB:,.0f} MB for {size / MB:,.0f} MB"


def _long_session(path: Path, mb: float, pad: int = 30_000) -> int:
    """One long Claude Code session of about ``mb`` MB: a chain of tool calls whose results
    are real tool output from corpus/ (``pad`` characters each, every one different), the
    output repeated in ``toolUseResult`` as Claude Code writes it, and an auto-compaction
    whenever the context passes about 500,000 characters (a full window); returns the calls."""
    corpus = "\n".join(p.read_text(errors="replace") for p in sorted((ROOT / "corpus").glob("d*")))
    written = calls = context = 0
    parent: str | None = None
    n = 0

    def line(obj: dict[str, Any]) -> str:
        nonlocal parent, n
        n += 1
        uid = f"00000000-0000-4000-8000-{n:012d}"
        sec = n * 7
        when = f"2025-09-03T{sec // 3600 % 24:02d}:{sec // 60 % 60:02d}:{sec % 60:02d}Z"
        obj.setdefault("parentUuid", parent)
        obj.update(uuid=uid, sessionId="long-session", timestamp=when, isSidechain=False)
        parent = uid
        return json.dumps(obj, ensure_ascii=False) + "\n"

    with path.open("w", encoding="utf-8") as fh:
        while written < mb * 1e6:
            out: list[str] = []
            if calls == 0:
                out.append(line({"type": "user", "message": {"role": "user", "content": "Fix it"}}))
            elif context > 500_000:
                boundary = {
                    "type": "system",
                    "subtype": "compact_boundary",
                    "parentUuid": None,
                    "logicalParentUuid": parent,
                    "content": "Conversation compacted",
                    "compactMetadata": {"trigger": "auto", "preTokens": context // 4},
                }
                text = f"Summary {calls}: " + corpus[calls * 131 % 50_000 :][:4_000]
                summary = {"role": "user", "content": text}
                out.append(line(boundary))
                out.append(line({"type": "user", "isCompactSummary": True, "message": summary}))
                context = len(text)
            else:
                start = (calls * 7919) % (len(corpus) - pad)
                output = f"[{calls}] " + corpus[start : start + pad]
                result = {
                    "type": "tool_result",
                    "tool_use_id": f"toolu_{calls - 1:08d}",
                    "content": output,
                }
                asked = {"role": "user", "content": [result]}
                ran = {"stdout": output, "stderr": ""}
                out.append(line({"type": "user", "message": asked, "toolUseResult": ran}))
                context += len(output)
            use = {
                "type": "tool_use",
                "id": f"toolu_{calls:08d}",
                "name": "Bash",
                "input": {"command": f"pytest -x tests/test_{calls}.py"},
            }
            usage = {
                "input_tokens": 3,
                "output_tokens": 40,
                "cache_read_input_tokens": context // 4,
            }
            reply = {
                "id": f"msg_{calls:08d}",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": f"Running check {calls}."}, use],
                "stop_reason": "tool_use",
                "usage": usage,
            }
            out.append(line({"type": "assistant", "message": reply}))
            context += 200
            calls += 1
            for text in out:
                fh.write(text)
                written += len(text.encode())
    return calls


def _peak_of_import(log: Path, *args: str) -> tuple[int, str]:
    """``ctxscope import LOG ARGS`` in a child process: its peak RSS (bytes) and output."""
    peak_script = (
        "import resource, subprocess, sys\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "sys.stdout.write(p.stdout); sys.stderr.write(p.stderr)\n"
        "print(f'@@peak {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}',"
        " file=sys.stderr)\n"
        "sys.exit(p.returncode)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", peak_script, sys.executable, "-m", "ctxcore", "import", str(log)]
        + list(args),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=1800,
    )
    err, _, peak_text = proc.stderr.rpartition("@@peak ")
    assert proc.returncode == 0, err[-2000:]
    return int(peak_text), proc.stdout


def test_the_watched_folder_file_is_named_before_a_trace_is_read(tmp_path: Path) -> None:
    """The detour's file name comes from the sources (path, size, mtime) and the options: the
    same import again replaces its file; a changed source or other options make another."""
    import argparse
    import os

    from ctxcore.cli.exchange import _drop_name

    src = tmp_path / "session.jsonl"
    src.write_bytes(COMPACTED.read_bytes())
    opts = argparse.Namespace(input_format="auto", window=None, model=None)
    name = _drop_name([src], opts)
    assert name.startswith("import-session-") and name.endswith(".jsonl")
    assert _drop_name([src], argparse.Namespace(**vars(opts))) == name
    assert (
        _drop_name([src], argparse.Namespace(input_format="auto", window=50_000, model=None))
        != name
    )
    assert _drop_name([src, TOOL_USE], opts).startswith("import-2-files-")
    st = src.stat()
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert _drop_name([src], opts) != name


def test_the_printed_summary_is_the_lists_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Counted as the traces stream past, the summary says what the whole list said: the
    first 20 traces against their source, how many more, the store's new / already there,
    the first three ids and the traces with warnings."""
    from ctxcore.formats.accounting import describe

    log = tmp_path / "log.jsonl"
    _big_log(log, 0.2, pad=2_000)
    traces = load_file(log)
    assert len(traces) > 20
    out = tmp_path / "o.jsonl"
    assert main(["import", str(log), "-o", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    # after the traces, the file's counts against them (tests/test_import_summary.py)
    k = printed.index(f"  … and {len(traces) - 20} more trace(s)") + 1
    assert printed.pop(k).startswith(f"  {log} (claude-code, {len(traces)} trace(s)): in the")
    assert printed == [
        *describe(traces[:20]),
        f"  … and {len(traces) - 20} more trace(s)",
        f"imported {len(traces)} trace(s) from {log} -> {out}",
    ]
    db = tmp_path / "s.duckdb"
    assert main(["import", str(log), "--db", str(db)]) == 0
    warned = sum(1 for t in traces if t.result and t.result.warnings)
    assert warned > 0
    printed = capsys.readouterr().out.splitlines()
    printed.pop(printed.index(f"  … and {len(traces) - 20} more trace(s)") + 1)
    assert printed == [
        *describe(traces[:20]),
        f"  … and {len(traces) - 20} more trace(s)",
        f"imported {len(traces)} trace(s) from {log} into {db}: {len(traces)} new, 0 already there",
        *[f"  {t.trace_id}  (session {t.session_id}, turn {t.turn})" for t in traces[:3]],
        f"  ... and {len(traces) - 3} more",
        f"{warned} trace(s) carry warnings; open them in the app to see why",
    ]
    # one trace: it is "source"
    assert main(["import", str(TOOL_USE), "-o", str(out)]) == 0
    [line, done] = capsys.readouterr().out.splitlines()
    assert line == describe(load_file(TOOL_USE))[0] and line.startswith("  source (")
    assert done == f"imported 1 trace(s) from {TOOL_USE} -> {out}"


@pytest.mark.slow
def test_a_long_session_imports_into_a_store_in_short_values(tmp_path: Path) -> None:
    """``ctxscope import --db`` of one long session (every call's context up to a full
    window): no stored value is longer than PART_BYTES (a checkpoint then reads back only
    what it writes: docs/design.md, "Store"), a text the calls share is stored once, every
    trace reads back whole, and the import's peak memory stays under 1 GB."""
    import duckdb

    from ctxcore.store import TraceFilter, TraceStore
    from ctxcore.store.rows import PART_BYTES

    log = tmp_path / "long.jsonl"
    calls = _long_session(log, 30)
    db = tmp_path / "long.duckdb"
    peak, stdout = _peak_of_import(log, "--db", str(db))
    assert f"imported {calls} trace(s)" in stdout
    con = duckdb.connect(str(db), read_only=True)
    [(n, json_bytes)] = con.execute("SELECT count(*), sum(json_bytes) FROM traces").fetchall()
    [(longest_part, longest_text)] = con.execute(
        "SELECT (SELECT max(octet_length(data)) FROM trace_parts), "
        "(SELECT max(strlen(text)) FROM contents)"
    ).fetchall()
    [(decisions, texts, distinct)] = con.execute(
        "SELECT count(*), count(cid), count(DISTINCT cid) FROM decisions"
    ).fetchall()
    con.close()
    assert n == calls and json_bytes > 200 * MB
    assert longest_part <= PART_BYTES and longest_text <= PART_BYTES
    assert texts > 5 * distinct  # each call repeats its context's texts: stored once
    with open(log, encoding="utf-8") as fh:
        last = ""
        for line in fh:
            if '"tool_result"' in line:
                last = line
    expected = json.loads(last)["message"]["content"][0]["content"]
    with TraceStore(db, read_only=True) as store:
        rows = store.list_traces(limit=calls).rows
        newest = max(rows, key=lambda r: r.turn)
        trace = store.get_trace(newest.trace_id)
        assert trace is not None
        held = [p for p in trace.input.packets if p.content == expected]
        assert held, "the last tool output is in the last call's packets"
        assert store.packet_content(newest.trace_id, held[0].id) == expected
        marker = expected.split()[0]  # "[N]": the call's own output
        assert store.list_traces(TraceFilter(search=marker)).total >= 1
    assert peak < 1024 * MB, f"import --db peaked at {peak / MB:,.0f} MB"


def test_build_reads_a_shared_file_of_one_trace_and_refuses_one_of_several(
    tmp_path: Path,
) -> None:
    """``import -o`` writes shared lines; ``build`` reads the one trace such a file holds
    whole, and of several the one ``--trace`` names (docs/design.md, "Shared traces")."""
    one = tmp_path / "one.jsonl"
    assert _run("import", str(TOOL_USE), "-o", str(one)).returncode == 0
    assert one.read_bytes().startswith(b'{"share"')
    built = _run("build", str(one))
    assert built.returncode == 0, built.stderr
    [t] = _traces(one)
    assert Trace.model_validate_json(built.stdout).input == t.input
    several = tmp_path / "several.jsonl"
    session = FIXTURES / "claude-code" / "ccviewer-init-session.jsonl"
    assert _run("import", str(session), "-o", str(several)).returncode == 0
    refused = _run("build", str(several))
    assert refused.returncode != 0
    picked = _traces(several)
    assert f"{several} is a file of {len(picked)} traces; pick one with --trace" in refused.stderr
    chosen = _run("build", str(several), "--trace", picked[3].trace_id)
    assert chosen.returncode == 0, chosen.stderr
    assert Trace.model_validate_json(chosen.stdout).input == picked[3].input
