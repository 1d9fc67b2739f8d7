"""Every output onto what it names: a file whole or nothing, anything else written in place.

A rename over the target used to replace a device, FIFO or socket with a regular file (run as
root, ``-o /dev/null`` replaced the machine's null device). Each command that writes a file is
run for real onto each kind of target: a character device made with ``mknod`` in a temporary
folder (as root), a FIFO with a reader, a Unix socket with a listener, a symbolic link, a
regular file, standard output and a folder.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ctxcore.capture.recorder import Recorder, RecorderWarning, append_line
from ctxcore.errors import InputError
from ctxcore.models import Trace
from ctxcore.output import write_output
from ctxcore.sharing import PartTable

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = (
    ROOT
    / "tests"
    / "fixtures"
    / "imports"
    / "openai-chat"
    / ("openinference-tool-calls.request.json")
)
SESSION = ROOT / "corpus" / "a02_sweagent_function_calling_simple.traj.json"
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxcore", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=180,
    )


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One imported trace in a file, for ``export FILE``."""
    out = tmp_path_factory.mktemp("src") / "one.jsonl"
    r = _run("import", str(FIXTURE), "-o", str(out))
    assert r.returncode == 0, r.stderr
    return out


def _command(kind: str, trace_file: Path, target: Path | str) -> list[str]:
    if kind == "import":
        return ["import", str(FIXTURE), "-o", str(target)]
    if kind == "export":
        return ["export", str(trace_file), "--format", "json", "-o", str(target)]
    assert kind == "tune"
    return [
        "tune",
        str(SESSION),
        "--rounds",
        "1",
        "--max-steps",
        "2",
        "--budget",
        "2000",
        "-o",
        str(target),
    ]


COMMANDS = ["import", "export", "tune"]


def _check_text(kind: str, text: str) -> None:
    """What each command writes, read back from wherever it went."""
    if kind == "import":
        lines = [line for line in text.encode().splitlines() if line]
        table = PartTable()  # the shared form (docs/design.md, "Shared traces")
        assert lines and all(Trace.model_validate_json(table.expand(ln)) for ln in lines)
    elif kind == "export":
        assert json.loads(text)["format"].startswith("ctxscope")
    else:
        assert json.loads(text)["max_tokens"] == 2000


class _Reader:
    """Reads a FIFO or accepts one connection on a Unix socket, in a thread, until EOF."""

    def __init__(self, opener: Callable[[], Iterator[bytes]]) -> None:
        self.data = b""
        self._opener = opener
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for chunk in self._opener():
            self.data += chunk

    def text(self) -> str:
        self._thread.join(timeout=60)
        assert not self._thread.is_alive(), "the writer never closed its end"
        return self.data.decode("utf-8")


def _fifo_reader(path: Path) -> _Reader:
    def chunks() -> Iterator[bytes]:
        with open(path, "rb") as fh:
            while block := fh.read(65536):
                yield block

    return _Reader(chunks)


def _socket_reader(path: Path) -> _Reader:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def chunks() -> Iterator[bytes]:
        with server:
            conn, _ = server.accept()
            with conn:
                while block := conn.recv(65536):
                    yield block

    return _Reader(chunks)


@pytest.fixture
def place(tmp_path: Path) -> Path:
    """An empty folder of the test's own (tmp_path also holds the tiktoken cache)."""
    d = tmp_path / "place"
    d.mkdir()
    return d


# --------------------------------------------------------------------------- the commands


@as_root
@pytest.mark.parametrize("kind", COMMANDS)
def test_a_character_device_is_written_through_and_stays_a_device(
    kind: str, trace_file: Path, place: Path
) -> None:
    null = place / "fakenull"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # the null device's numbers
    r = _run(*_command(kind, trace_file, null))
    assert r.returncode == 0, r.stderr
    st = os.lstat(null)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
    assert [p.name for p in place.iterdir()] == ["fakenull"]  # no temporary file left


@pytest.mark.parametrize("kind", COMMANDS)
def test_a_fifo_gets_the_output_and_stays_a_fifo(kind: str, trace_file: Path, place: Path) -> None:
    fifo = place / "pipe"
    os.mkfifo(fifo)
    reader = _fifo_reader(fifo)
    r = _run(*_command(kind, trace_file, fifo))
    assert r.returncode == 0, r.stderr
    _check_text(kind, reader.text())
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("kind", COMMANDS)
def test_a_unix_socket_gets_the_output_and_stays_a_socket(
    kind: str, trace_file: Path, place: Path
) -> None:
    sock = place / "s"
    reader = _socket_reader(sock)
    r = _run(*_command(kind, trace_file, sock))
    assert r.returncode == 0, r.stderr
    _check_text(kind, reader.text())
    assert stat.S_ISSOCK(os.lstat(sock).st_mode)


@pytest.mark.parametrize("kind", COMMANDS)
def test_a_symlink_is_followed_its_target_replaced_whole_and_the_link_kept(
    kind: str, trace_file: Path, place: Path
) -> None:
    real = place / "data" / "out.json"
    real.parent.mkdir()
    real.write_text("old\n")
    os.chmod(real, 0o600)
    link = place / "link.json"
    link.symlink_to(real)
    r = _run(*_command(kind, trace_file, link))
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and os.readlink(link) == str(real)
    _check_text(kind, real.read_text())
    assert stat.S_IMODE(os.stat(real).st_mode) == 0o600  # the file kept its permissions
    assert sorted(p.name for p in real.parent.iterdir()) == ["out.json"]


@pytest.mark.parametrize("kind", COMMANDS)
def test_a_dangling_symlink_makes_its_target(kind: str, trace_file: Path, place: Path) -> None:
    link = place / "link.json"
    link.symlink_to(place / "made.json")
    r = _run(*_command(kind, trace_file, link))
    assert r.returncode == 0, r.stderr
    assert link.is_symlink()
    _check_text(kind, (place / "made.json").read_text())


@pytest.mark.parametrize("kind", COMMANDS)
def test_dash_writes_standard_output_and_says_the_rest_on_stderr(
    kind: str, trace_file: Path, place: Path
) -> None:
    r = _run(*_command(kind, trace_file, "-"), cwd=place)
    assert r.returncode == 0, r.stderr
    _check_text(kind, r.stdout)  # nothing but the output: no summary lines mixed in
    if kind != "export":  # export says nothing on stdout either way
        assert r.stderr.strip()  # what was done is still said
    assert list(place.iterdir()) == []  # no file named "-"


@pytest.mark.parametrize("kind", COMMANDS)
def test_a_folder_is_refused_in_one_line(kind: str, trace_file: Path, place: Path) -> None:
    r = _run(*_command(kind, trace_file, place))
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert f"{place}: is a folder" in r.stderr
    assert list(place.iterdir()) == []


@as_root
def test_demo_out_writes_through_a_device_standing_at_a_sessions_file(tmp_path: Path) -> None:
    from ctxcore.demo.build import generate, sessions

    first = next(iter(sessions(ROOT / "corpus")))
    null = tmp_path / f"{first.id}.jsonl"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    written = generate(ROOT / "corpus", tmp_path)
    assert null in written
    assert stat.S_ISCHR(os.lstat(null).st_mode)
    others = [p for p in written if p != null]
    assert others and all(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in others)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# --------------------------------------------------------------------------- the library


def test_a_regular_file_is_still_written_whole_or_not_at_all(place: Path) -> None:
    out = place / "out.jsonl"
    out.write_text("before\n")

    def failing() -> Iterator[str]:
        yield "half"
        raise RuntimeError("the stream broke")

    with pytest.raises(RuntimeError):
        write_output(out, failing())
    assert out.read_text() == "before\n"
    assert [p.name for p in place.iterdir()] == ["out.jsonl"]


def test_an_unwritable_target_says_what_and_where(place: Path) -> None:
    fifo_dir = place / "ro"
    fifo_dir.mkdir()
    target = fifo_dir / "missing" / "x.json"
    (fifo_dir / "missing").write_text("a file where a folder should be")
    with pytest.raises(InputError, match=r"x\.json: cannot write .*nothing was written"):
        write_output(target, ["x"])


# --------------------------------------------------------------------------- live writers


@as_root
def test_the_recorder_writes_through_a_device_at_its_file(tmp_path: Path) -> None:
    rec = Recorder(tmp_path, session_id="s", file_name="s.jsonl")
    os.mknod(rec.path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rec.write(Trace.model_validate_json(_one_trace_line()))
    assert stat.S_ISCHR(os.lstat(rec.path).st_mode)


def test_the_recorder_writes_into_a_fifo_with_a_reader(tmp_path: Path) -> None:
    rec = Recorder(tmp_path, session_id="s", file_name="s.jsonl")
    os.mkfifo(rec.path)
    reader = os.open(rec.path, os.O_RDONLY | os.O_NONBLOCK)  # a reader, there before the call
    try:
        trace = Trace.model_validate_json(_one_trace_line())
        assert rec.write(trace)
        got = os.read(reader, 1 << 20).decode("utf-8")
    finally:
        os.close(reader)
    assert Trace.model_validate_json(got.splitlines()[0]).trace_id == trace.trace_id
    assert stat.S_ISFIFO(os.lstat(rec.path).st_mode)


def test_the_recorder_does_not_hang_on_a_fifo_nobody_reads(tmp_path: Path) -> None:
    rec = Recorder(tmp_path, session_id="s", file_name="s.jsonl")
    os.mkfifo(rec.path)
    with pytest.warns(RecorderWarning, match="could not record"):
        assert not rec.write(Trace.model_validate_json(_one_trace_line()))
    assert rec.failures == 1 and stat.S_ISFIFO(os.lstat(rec.path).st_mode)


def test_append_line_onto_a_symlink_appends_to_its_target(tmp_path: Path) -> None:
    real = tmp_path / "real.jsonl"
    real.write_text("a\n")
    link = tmp_path / "live.jsonl"
    link.symlink_to(real)
    append_line(link, b"b\n")
    assert link.is_symlink() and real.read_text() == "a\nb\n"


_LINE: list[str] = []


def _one_trace_line() -> str:
    if not _LINE:
        r = _run("import", str(FIXTURE), "--whole", "-o", "-")
        assert r.returncode == 0, r.stderr
        _LINE.append(r.stdout.splitlines()[0])
    return _LINE[0]
