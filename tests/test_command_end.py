"""What a command costs before and after its work (docs/design.md, "Capture, import, export,
redaction"): ``import -o`` of a long log ends at once (its counting process's sending thread
is gone by then), a file written whole or nothing goes to the disk while it is written
(``output._Syncer``), and the parser makes only the command it is given."""

from __future__ import annotations

import argparse
import errno
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxcore import cli, counting, output
from ctxcore.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

#: Runs ``ctxscope`` as the console script does (``cli.run``), and writes to the file its
#: first argument names whether the command ended without the interpreter's teardown.
_RECORDING_RUN = """
import sys
from ctxcore import cli
said = sys.argv.pop(1)
ends = cli._ends_at_once
def recorded(args):
    got = ends(args)
    with open(said, "w") as fh:
        fh.write(str(got))
    return got
cli._ends_at_once = recorded
sys.argv[0] = "ctxscope"
cli.run()
"""


def test_an_import_o_of_a_long_log_ends_at_once(tmp_path: Path) -> None:
    # the counting process runs beside it (a log of 1 MiB or more): its sending thread
    # must be gone by the end, or the command pays the interpreter's teardown
    from bench_import import build

    log = tmp_path / "long.jsonl"
    build(log, 300, 3.0, 150_000)
    assert log.stat().st_size >= 1 << 20
    said = tmp_path / "said.txt"
    out = tmp_path / "out.jsonl"
    for _ in range(3):  # the thread's end raced the check: once right was not enough
        done = subprocess.run(
            [sys.executable, "-c", _RECORDING_RUN, str(said), "import", str(log), "-o", str(out)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=180,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert said.read_text() == "True"
        assert f"-> {out}" in done.stdout
        assert len(out.read_text().splitlines()) > 10


def test_killing_the_counting_process_ends_its_sending_thread() -> None:
    proc = counting.CountingProcess.start()
    try:
        assert proc.backend("cl100k_base").process is proc
        number = proc.ask("cl100k_base", ["hello there", "x" * 100_000])
        assert len(proc.answer(number)) == 2
        assert proc._sender.is_alive()
    finally:
        proc.kill()
    assert not proc._sender.is_alive()
    assert proc.proc.returncode is not None


def _chunks(n: int, size: int) -> list[bytes]:
    return [bytes([97 + k % 26]) * (size - 1) + b"\n" for k in range(n)]


def _slowly(chunks: list[bytes]) -> Iterator[bytes]:
    """The chunks as traces come: the thread has time to sync between them."""
    for chunk in chunks:
        time.sleep(0.02)
        yield chunk


def test_a_long_file_goes_to_the_disk_while_it_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[tuple[int, str]] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        synced.append((os.fstat(fd).st_size, threading.current_thread().name))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(output, "SYNC_BYTES", 64 * 1024)
    target = tmp_path / "out.jsonl"
    chunks = _chunks(40, 10_000)  # a sync every 64 KB or so, all before the end
    output.write_output(target, _slowly(chunks))
    assert target.read_bytes() == b"".join(chunks)
    assert len(synced) >= 2
    assert all(name == "ctxscope-sync" for _, name in synced)
    assert all(size < len(b"".join(chunks)) for size, _ in synced[:-1])
    assert [t for t in threading.enumerate() if t.name == "ctxscope-sync"] == []


def test_a_short_file_starts_no_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []
    real_start = threading.Thread.start

    def start(self: threading.Thread) -> None:
        started.append(self.name)
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    target = tmp_path / "small.jsonl"
    output.write_output(target, _chunks(3, 100))
    assert target.read_bytes() == b"".join(_chunks(3, 100))
    assert "ctxscope-sync" not in started


def test_a_sync_that_fails_leaves_nothing_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fdatasync(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(output, "SYNC_BYTES", 4096)
    target = tmp_path / "out.jsonl"
    target.write_text("what was there\n")
    with pytest.raises(InputError, match=r"out\.jsonl: cannot write \(Input/output error\)"):
        output.write_output(target, _slowly(_chunks(20, 1000)))
    assert target.read_text() == "what was there\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]
    assert [t for t in threading.enumerate() if t.name == "ctxscope-sync"] == []


def test_chunks_that_fail_midway_end_the_sync_thread_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(output, "SYNC_BYTES", 4096)

    def failing() -> Iterator[bytes]:
        yield from _slowly(_chunks(20, 1000))
        raise ValueError("the traces stopped")

    target = tmp_path / "out.jsonl"
    with pytest.raises(ValueError, match="the traces stopped"):
        output.write_output(target, failing())
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []
    assert [t for t in threading.enumerate() if t.name == "ctxscope-sync"] == []


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_the_parser_makes_only_the_command_it_is_given() -> None:
    every = _subparsers(cli.make_parser())
    assert sorted(every) == sorted(cli.SUBCOMMANDS)
    for name in cli.SUBCOMMANDS:
        one = _subparsers(cli.make_parser([name, "--anything"]))
        assert list(one) == [name]
        assert one[name].format_help() == every[name].format_help()


def test_a_command_line_without_a_command_gets_every_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for argv in ([], ["--help"], ["--version"], ["nosuch"], ["-h", "import"]):
        assert sorted(_subparsers(cli.make_parser(argv))) == sorted(cli.SUBCOMMANDS)
    with pytest.raises(SystemExit) as stop:
        cli.main(["nosuch"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nosuch'" in err
    assert all(f"'{name}'" in err for name in cli.SUBCOMMANDS)


def test_main_reads_the_command_line_when_given_none(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["ctxscope", "import", "--help"])
    with pytest.raises(SystemExit) as stop:
        cli.main()
    assert stop.value.code == 0
    assert "usage: ctxscope import" in capsys.readouterr().out
