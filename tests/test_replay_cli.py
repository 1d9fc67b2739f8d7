"""``ctxscope replay``: selection from files or the store, the table and JSON reports,
``--fail-on`` exit codes, and ``--save`` adding variants without touching recorded traces.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_replay import HELLO, load, with_traceback

from ctxcore.cli import main
from ctxcore.models import Trace
from ctxcore.replay import REPLAY_TAG, variant_id
from ctxcore.store import TraceFilter, TraceStore

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def hello() -> list[Trace]:
    return load(HELLO)


@pytest.fixture
def trace_file(tmp_path: Path, hello: list[Trace]) -> Path:
    path = tmp_path / "hello.jsonl"
    path.write_text("".join(t.to_json() + "\n" for t in hello), encoding="utf-8")
    return path


@pytest.fixture
def traceback_file(tmp_path: Path, hello: list[Trace]) -> Path:
    """The session with error evidence in tool:call_7 (a smaller budget drops it at turn 11)."""
    path = tmp_path / "traceback.jsonl"
    traces = with_traceback(hello, "tool:call_7")
    path.write_text("".join(t.to_json() + "\n" for t in traces), encoding="utf-8")
    return path


@pytest.fixture
def db(tmp_path: Path, hello: list[Trace]) -> Path:
    path = tmp_path / "replay.duckdb"
    with TraceStore(path, diagnose=False) as store:
        store.add_traces(hello)
    return path


def test_exit_codes_follow_fail_on(
    trace_file: Path, traceback_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    smaller = ["replay", str(traceback_file), "--set", "max_tokens=2000", "--no-findings"]
    assert main([*smaller, "--fail-on", "error"]) == 1  # error evidence lost at turn 11
    assert main([*smaller, "--fail-on", "never"]) == 0
    err = capsys.readouterr().err
    assert "loss(es) at error or above" in err
    larger = ["replay", str(trace_file), "--set", "max_tokens=8000", "--no-findings"]
    assert main([*larger, "--fail-on", "info"]) == 0
    same = ["replay", str(trace_file), "--no-findings", "--fail-on", "info"]
    assert main(same) == 0


def test_a_change_with_only_warnings_passes_error_and_fails_warning(trace_file: Path) -> None:
    args = ["replay", str(trace_file), "--set", "max_tokens=2000", "--no-findings"]
    assert main([*args, "--fail-on", "error"]) == 0
    assert main([*args, "--fail-on", "warning"]) == 1


@pytest.mark.slow
def test_bad_input_exits_2_through_the_real_command(
    tmp_path: Path, trace_file: Path, traceback_file: Path
) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ctxcore", "replay", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )

    nothing = run("--db", str(tmp_path / "none.duckdb"))
    assert nothing.returncode == 2
    assert "choose what to replay" in nothing.stderr
    bad = run(str(trace_file), "--set", "max_tokens=-1")
    assert bad.returncode == 2 and "replay settings" in bad.stderr
    lost = run(str(traceback_file), "--set", "max_tokens=2000", "--no-findings")
    assert lost.returncode == 1, lost.stderr
    assert "error    tool:call_7: kept → dropped error evidence" in lost.stdout


def test_json_report_and_against(trace_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "replay",
            str(trace_file),
            "--set",
            "max_tokens=8000",
            "--against-set",
            "max_tokens=2000",
            "--format",
            "json",
        ]
    )
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["before"] == '{"max_tokens": 2000}'
    assert data["after"] == '{"max_tokens": 8000}'
    assert len(data["turns"]) == 15
    assert sum(t["used_after"] - t["used_before"] for t in data["turns"]) > 0
    assert data["findings_compared"] is True
    assert "variants" not in data


@pytest.mark.slow
def test_replay_a_stored_session_and_save_the_variants(
    db: Path, hello: list[Trace], capsys: pytest.CaptureFixture[str]
) -> None:
    sid = hello[0].session_id
    args = ["replay", "--session", sid, "--db", str(db), "--set", "max_tokens=3000"]
    assert main([*args, "--no-findings", "--fail-on", "never", "--save"]) == 0
    out = capsys.readouterr()
    assert f"{len(hello)} turn(s)" in out.out
    assert f"saved {len(hello)} new variant(s)" in out.err
    assert main([*args, "--no-findings", "--fail-on", "never", "--save"]) == 0
    assert f"saved 0 new variant(s) tagged 'replay' ({len(hello)} already" in (
        capsys.readouterr().err
    )
    with TraceStore(db, read_only=True) as store:
        saved = store.list_traces(TraceFilter(tags=(REPLAY_TAG,)), limit=100).rows
        assert len(saved) == len(hello)
        for t in hello:
            assert store.get_trace(t.trace_id) == t  # the recording is untouched
            v = store.get_trace(variant_id(t.trace_id, {"max_tokens": 3000}))
            assert v is not None and v.source_trace_id == t.trace_id
            assert v.config.max_tokens == 3000
    # the variants are not replayed as recordings by --all, only when asked for by tag
    assert main(["replay", "--all", "--db", str(db), "--no-findings"]) == 0
    assert f"{len(hello)} turn(s)" in capsys.readouterr().out
    assert main(["replay", "--tag", REPLAY_TAG, "--db", str(db), "--no-findings"]) == 0
    assert f"{len(hello)} turn(s), 0 changed" in capsys.readouterr().out


def test_an_unknown_session_is_an_error(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--session", "nope", "--db", str(db)]) == 2
    assert "no traces in session 'nope'" in capsys.readouterr().err


#: Holds a store open for writing, as the app does: adds a trace (left in the write-ahead
#: log: a reader's copy must carry it), leaves an app note naming its folder, then adds a
#: trace for every line it reads, until its stdin closes.
HOLDER = """
import os, sys
from pathlib import Path
from ctxcore.cli.app import write_note
from ctxcore.models import Trace
from ctxcore.store import TraceStore

db, first, folder = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
trace = Trace.model_validate_json(first.read_text(encoding="utf-8"))
store = TraceStore(db, diagnose=False)
store.add_traces([trace])
write_note(db, folder, os.getpid())
print("ready", flush=True)
for k, _ in enumerate(sys.stdin):
    store.add_traces([trace.model_copy(update={"trace_id": f"held-more-{k}"})])
    print(store.count(), flush=True)
store.close()
"""


@pytest.mark.slow
def test_replay_and_export_read_the_store_while_another_process_writes_it(
    tmp_path: Path, db: Path, hello: list[Trace]
) -> None:
    """The app holds its store's write lock all the time it runs: reading must not need it."""
    import signal

    first = tmp_path / "held.json"
    first.write_text(
        hello[3].model_copy(update={"trace_id": "held-0", "session_id": "held"}).to_json(),
        encoding="utf-8",
    )
    folder = tmp_path / "watched"
    folder.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT), CTXSCOPE_TRACES=str(tmp_path / "no-files"))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db), str(first), str(folder)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline() == "ready\n"

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "ctxcore", *args, "--db", str(db)],
                capture_output=True, text=True, env=env, timeout=300,
            )  # fmt: skip

        sid = hello[0].session_id
        rep = run("replay", "--session", sid, "--set", "max_tokens=3000", "--fail-on", "error")
        assert rep.returncode == 0, rep.stderr
        assert f"{len(hello)} turn(s)" in rep.stdout
        assert "open for writing in another process; reading a copy" in rep.stderr
        assert "Traceback" not in rep.stderr and "drop your trace files" not in rep.stderr
        # the trace the holder committed and has not checkpointed is read (no files to fall
        # back to: CTXSCOPE_TRACES is an empty place)
        out = tmp_path / "held-export.json"
        exp = run("export", "--session", "held", "--format", "json", "-o", str(out))
        assert exp.returncode == 0, exp.stderr
        assert "held-0" in out.read_text(encoding="utf-8")
        # --save while the app holds the store: the variants go to the folder it watches
        saved = run("replay", "--session", sid, "--set", "max_tokens=3000", "--no-findings",
                    "--save")  # fmt: skip
        assert saved.returncode == 0, saved.stderr
        dropped = list(folder.glob("replay-*.jsonl"))
        assert len(dropped) == 1, saved.stderr
        lines = dropped[0].read_text(encoding="utf-8").splitlines()
        assert len(lines) == len(hello)
        assert {Trace.model_validate_json(x).source_trace_id for x in lines} == {
            t.trace_id for t in hello
        }
        # the writer was never disturbed, and the copies are gone
        holder.stdin.write("one more\n")
        holder.stdin.flush()
        assert holder.stdout.readline() == f"{len(hello) + 2}\n"
        assert sorted(p.name for p in tmp_path.iterdir() if ".read-" in p.name) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
