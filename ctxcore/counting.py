"""Exact token counts made in a process of their own, beside a long ``ctxscope import -o``.

docs/design.md, "Capture, import, export, redaction". Loading a tokenizer costs ~0.4 s of CPU,
most of it holding the GIL (toktok's import, tiktoken's rank file, the self-check), and
counting a long session log's texts as much again: in the importing process that time is
taken from the reading and the writing, even on a machine with a second core. A
``CountingProcess`` is a small interpreter started before the command's own imports
(``python -m ctxcore.counting``, which imports ``ctxcore.tokens`` only). It starts loading
the default encoding at once, while the importer imports and reads, and counts the texts the
importer sends it, with the backend ``tokens.get_backend`` gives in any process (the same
counts as in the importer: the texts, exactly, go down a pipe as UTF-8 and come back as
counts, in order). The importer keeps its ``TokenCounter``'s cache as ever; only what it
would have counted goes across.

While one is running, ``tokens.get_backend`` answers with its ``ProcessBackend``: counting
starts by sending the texts (a thread of this process writes them, so a reader never waits
for the other process to read) and ``result()`` reads the counts back. A process that stops
(killed, crashed, its tokenizer failing to load) is the count's error, naming it; a count is
never made up. Ctrl-C stops the command and this process kills the other; the other process
is in a process group of its own (a terminal's Ctrl-C reaches the importer only) and stops
by itself when the importer goes away (its requests end); at the end of an import it is
killed, its answers all taken.

The wire, both ways little-endian: a request is ``C``, the encoding's name (1 byte of length,
then ASCII), the number of texts (u32), their UTF-8 byte lengths (u32 each) and the bytes
(lone surrogates passed through as they are); or ``L`` and a name, which starts loading that
encoding and is not answered. An answer is ``K``, the number of counts (u32) and the counts
(i64 each), or ``E``, a length (u32) and the error's message as UTF-8.
"""

from __future__ import annotations

import contextlib
import os
import queue
import select
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from ctxcore.threads import helper_thread

#: How big the pipes are asked to be (Linux ``F_SETPIPE_SZ``; the system's cap applies).
PIPE_BYTES = 1024 * 1024
#: How long ``kill`` waits for the sending thread to end (it ends at once: its pipe's reader
#: is gone), so that a stuck write cannot hold the command's exit.
SENDER_JOIN_S = 5.0
_F_SETPIPE_SZ = 1031
_U32 = struct.Struct("<I")
_HEAD = struct.Struct("<cI")


class CountingProcess:
    """The other process and this side of its pipes (see the module's docstring).

    ``backend(name)`` is the ``CountingBackend`` that counts ``name`` there; ``close()`` and
    ``kill()`` stop it at once (its answers taken, it has nothing left to do; its exit
    would free the tokenizer's tables one object at a time). Made with ``start()``."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        assert proc.stdin is not None and proc.stdout is not None
        self._out: IO[bytes] = proc.stdin
        self._in: IO[bytes] = proc.stdout
        #: requests waiting for the sending thread (bytes; None ends it)
        self._sending: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._send_error: BaseException | None = None
        self._sender = helper_thread(self._send, "ctxscope-count-send", daemon=True)
        self._sender.start()
        #: answers read and not yet taken, by request number; the next request's number and
        #: the next answer's
        self._answers: dict[int, list[int] | str] = {}
        self._asked = 0
        self._read = 0
        self._lock = threading.Lock()
        self._backends: dict[str, ProcessBackend] = {}
        self._stopped: str | None = None

    @classmethod
    def start(cls) -> CountingProcess:
        """Start the other process (it starts loading the default encoding at once)."""
        package_root = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_root, env.get("PYTHONPATH", "")) if p
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "ctxcore.counting"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            bufsize=0,  # unbuffered: what select() says is readable is all there is
            close_fds=True,
            process_group=0,
        )
        assert proc.stdin is not None and proc.stdout is not None
        for pipe in (proc.stdin, proc.stdout):
            _widen(pipe)
        return cls(proc)

    # ------------------------------------------------------------------ this side

    def backend(self, name: str) -> ProcessBackend:
        """The backend counting ``name`` there; the first ask starts its load there."""
        backend = self._backends.get(name)
        if backend is None:
            with self._lock:
                backend = self._backends.get(name)
                if backend is None:
                    raw = name.encode("ascii")
                    self._sending.put(b"L" + bytes([len(raw)]) + raw)
                    backend = self._backends[name] = ProcessBackend(self, name)
        return backend

    def ask(self, name: str, texts: Sequence[str]) -> int:
        """Send ``texts`` to be counted with ``name``; the request's number (``answer``)."""
        data = [t.encode("utf-8", "surrogatepass") for t in texts]
        raw = name.encode("ascii")
        lengths = struct.pack(f"<{len(data)}I", *map(len, data))
        request = b"".join((b"C", bytes([len(raw)]), raw, _U32.pack(len(data)), lengths, *data))
        with self._lock:
            number = self._asked
            self._asked += 1
            self._sending.put(request)
        return number

    def answer(self, number: int) -> list[int]:
        """The counts of request ``number`` (waiting for them), or its error raised."""
        from ctxcore.errors import TokenizerError

        with self._lock:
            while number not in self._answers:
                if self._stopped is not None:
                    raise TokenizerError(self._stopped)
                got = self._read_answer()
                if got is None:
                    self._stopped = self._why_stopped()
                    raise TokenizerError(self._stopped)
                self._answers[self._read] = got
                self._read += 1
            got = self._answers.pop(number)
        if isinstance(got, str):
            raise TokenizerError(got)
        return got

    def has_answer(self, number: int) -> bool:
        """Whether ``answer(number)`` would return (or raise) without waiting: its answer,
        or the end of the pipe, is here (answers before it are read on the way)."""
        with self._lock:
            while number not in self._answers and self._stopped is None:
                if not select.select([self._in], [], [], 0)[0]:
                    return False
                got = self._read_answer()
                if got is None:
                    self._stopped = self._why_stopped()
                else:
                    self._answers[self._read] = got
                    self._read += 1
        return True

    def _read_answer(self) -> list[int] | str | None:
        """The next answer on the pipe; None when the other process is gone."""
        head = _read_exactly(self._in, _HEAD.size)
        if head is None:
            return None
        kind, n = _HEAD.unpack(head)
        if kind == b"K":
            body = _read_exactly(self._in, 8 * n)
            return None if body is None else list(struct.unpack(f"<{n}q", body))
        body = _read_exactly(self._in, n)
        return None if body is None else body.decode("utf-8", "replace")

    def _why_stopped(self) -> str:
        """What to say of the other process now that its answers ended."""
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        said = b""
        if self.proc.stderr is not None:
            with contextlib.suppress(OSError, ValueError):
                said = self.proc.stderr.read()[-2000:]
        last = said.decode("utf-8", "replace").strip().splitlines()
        because = f": {last[-1]}" if last else ""
        return (
            f"the token-counting process (pid {self.proc.pid}) stopped (exit code {code}) "
            f"before it answered{because}; no count was made up, nothing was written"
        )

    def _send(self) -> None:
        """The sending thread: each request written whole, in order (the write waits for the
        other process to read, without the GIL)."""
        while True:
            request = self._sending.get()
            if request is None:
                break
            view = memoryview(request)
            try:
                while view:
                    view = view[os.write(self._out.fileno(), view) :]
            except OSError as exc:  # it went away: the answers say so
                self._send_error = exc
                return
        with contextlib.suppress(OSError):
            self._out.close()

    def close(self) -> None:
        """End it once its answers are all taken (``kill``: 0.1 s sooner than its exit)."""
        self.kill()

    def kill(self) -> None:
        """Stop the other process now and reap it, and end the sending thread (its pipe's
        reader is gone: a write it is in fails at once). No thread is then left behind:
        ``import -o`` ends without the interpreter's teardown only when none is (``cli.run``)."""
        with contextlib.suppress(OSError):
            self.proc.kill()
        self.proc.wait()
        self._sending.put(None)
        if self._sender is not threading.current_thread():
            self._sender.join(timeout=SENDER_JOIN_S)
        self._close_pipes()

    def _close_pipes(self) -> None:
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


class ProcessBackend:
    """A ``tokens.CountingBackend`` whose counts the ``CountingProcess`` makes."""

    def __init__(self, process: CountingProcess, name: str) -> None:
        self.process = process
        self.name = name
        self.label = f"the counting process (pid {process.proc.pid})"

    def start(self, texts: Sequence[str], threads: int) -> _Answer:
        return _Answer(self.process, self.process.ask(self.name, texts))

    def head(self, text: str, max_tokens: int) -> tuple[str, int] | None:
        return None


class _Answer:
    """The counts of one request (``tokens.Pending``)."""

    def __init__(self, process: CountingProcess, number: int) -> None:
        self._process = process
        self._number = number
        self._counts: list[int] | None = None

    def result(self) -> list[int]:
        if self._counts is None:
            self._counts = self._process.answer(self._number)
        return self._counts

    def ready(self) -> bool:
        return self._counts is not None or self._process.has_answer(self._number)


def _widen(pipe: IO[bytes]) -> None:
    """Ask for a bigger pipe (fewer, larger reads and writes); where that is refused the
    pipe stays as it is."""
    if sys.platform.startswith("linux"):
        import fcntl

        with contextlib.suppress(OSError):
            fcntl.fcntl(pipe.fileno(), _F_SETPIPE_SZ, PIPE_BYTES)


def _read_exactly(fh: IO[bytes], n: int) -> bytes | None:
    """``n`` bytes from ``fh``, or None if it ends first."""
    if n == 0:
        return b""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = fh.readinto(view[got:])  # type: ignore[attr-defined]
        if not k:
            return None
        got += k
    return bytes(buf)


# --------------------------------------------------------------------------- the other side


def serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    """The counting process: load the default encoding, then answer ``requests`` until they
    end (a tokenizer that cannot load is each of its requests' error, said as its message)."""
    from ctxcore.errors import CtxscopeError
    from ctxcore.settings import DEFAULT_ENCODING
    from ctxcore.tokens import COUNT_THREADS, get_backend, preload

    # the importer takes a CPU: counting on all of them slowed it more than it saved
    threads = max(1, COUNT_THREADS - 1)

    preload(DEFAULT_ENCODING)
    while True:
        kind = _read_exactly(requests, 1)
        if kind is None:
            return
        size = _read_exactly(requests, 1)
        name = (_read_exactly(requests, size[0]) or b"").decode("ascii") if size else ""
        if kind == b"L":
            preload(name)
            continue
        head = _read_exactly(requests, 4)
        if head is None:
            return
        (n,) = _U32.unpack(head)
        lengths = struct.unpack(f"<{n}I", _read_exactly(requests, 4 * n) or b"")
        body = _read_exactly(requests, sum(lengths))
        if body is None:
            return
        texts: list[str] = []
        at = 0
        for k in lengths:
            texts.append(body[at : at + k].decode("utf-8", "surrogatepass"))
            at += k
        try:
            counts = get_backend(name).start(texts, threads).result()
        except CtxscopeError as exc:
            message = str(exc).encode("utf-8", "replace")
            answers.write(_HEAD.pack(b"E", len(message)) + message)
        else:
            answers.write(_HEAD.pack(b"K", len(counts)) + struct.pack(f"<{len(counts)}q", *counts))
        answers.flush()


def _main() -> None:
    # the importer says when to stop (its requests end); a terminal's Ctrl-C is its to take
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    _main()


__all__ = ["CountingProcess", "ProcessBackend"]
