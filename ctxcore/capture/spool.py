"""The spool: captured calls on disk between the proxy and the process that writes traces.

Forwarding a call must cost the agent nothing, but turning it into a trace does cost: the
importer counts every token and redaction reads every string (milliseconds per call). So the
proxy only appends each finished call to a spool file, on a thread of its own, and a
converter process (``run_converter``) turns spooled calls into trace lines in the watched
folder. Under a burst the converter falls behind and catches up later; the backlog waits on
disk, so neither process grows, and no call is lost if either one stops: a converter that
starts picks up what an earlier one left, from the offset it had reached.

A spool file holds records one after the other, each a JSON header line (the ``CallRecord``
and the two body lengths) followed by the request and the response bytes. The proxy writes
``<pid>-<seq>.open`` and renames it ``.spool`` when it moves on to the next (every 64 MB,
after a second without calls, and at exit); the converter deletes a ``.spool`` file it has
read to the end. The folder is hidden and private (0700): request bodies may hold what the
redaction is there to remove, so they stay there only until their traces are written.

A call that cannot become a trace (its request is no API's request, its conversion fails)
becomes one line in ``failed.jsonl`` beside the spool files: its record (no headers, no
bodies) and why; its bodies go with the spool file. A call whose conversion stops the
converter itself (killed, out of memory) must not stop every converter after it: before a
batch is converted, ``<file>.trying`` says where, so the next converter takes that stretch
one call at a time, and the call that was being converted alone when a converter stopped is
the one moved to ``failed.jsonl`` (docs/design.md, "Live capture").
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ctxcore import settings
from ctxcore.capture.calls import CallError, CallRecord, Sessions, trace_from_call
from ctxcore.capture.recorder import append_line, safe_file_stem
from ctxcore.formats.redact_memo import Redactor
from ctxcore.processes import pid_alive

log = logging.getLogger("ctxscope.capture")

#: The spool folder's name inside the watched folder (hidden: ingest skips it).
SPOOL_DIR = ".ctxscope-spool"
#: A spool file is closed and a new one begun past this size.
ROTATE_BYTES = 64 * 1024 * 1024
#: How many records the converter turns into traces before it writes them out.
BATCH = 256
#: After this many seconds without a call, the current spool file is handed over.
IDLE_S = 1.0
#: On the way out, the converter writes what is spooled for at most this long.
DRAIN_S = 60.0
#: Buffers handed to one ``os.writev`` (Linux and macOS take up to 1024).
_IOV_MAX = 512
#: Calls no trace could be written for, one JSON line each (the quarantine).
FAILED_FILE = "failed.jsonl"


def spool_dir(traces_dir: Path) -> Path:
    return traces_dir / SPOOL_DIR


def live_file(traces_dir: Path, source: str) -> Path:
    """The trace file captured calls of one source go to: ``live/<source>.jsonl``."""
    return traces_dir / settings.LIVE_SUBDIR / f"{safe_file_stem(source)}.jsonl"


# --------------------------------------------------------------------------- writing


class SpoolWriter:
    """Append captured calls to this process's spool files from a thread of its own;
    ``put`` only queues, so the event loop never waits for the disk."""

    def __init__(self, folder: Path, rotate_bytes: int = ROTATE_BYTES) -> None:
        self.folder = folder
        self.rotate_bytes = rotate_bytes
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._queue: queue.SimpleQueue[tuple[CallRecord, bytes, bytes] | None] = queue.SimpleQueue()
        self._seq = 0
        self._fd: int | None = None
        self._size = 0
        self._path: Path | None = None
        self.written = 0
        self.failures = 0
        self._thread = threading.Thread(target=self._run, name="ctxscope-spool", daemon=True)
        self._thread.start()

    def put(self, record: CallRecord, request: bytes, response: bytes) -> None:
        self._queue.put((record, request, response))

    def close(self) -> None:
        """Write what is queued, close the current file and hand it to the converter."""
        self._queue.put(None)
        self._thread.join()

    def _open(self) -> None:
        self._seq += 1
        self._path = self.folder / f"{os.getpid()}-{self._seq:06d}.open"
        self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._size = 0

    def _finish(self) -> None:
        if self._fd is None or self._path is None:
            return
        os.close(self._fd)
        os.replace(self._path, self._path.with_suffix(".spool"))
        self._fd = None
        self._path = None

    def _run(self) -> None:
        stopping = False
        while not stopping:
            try:
                item = self._queue.get(timeout=IDLE_S)
            except queue.Empty:
                # idle: hand the file over, so that the converter deletes it once read and
                # request bodies do not stay on disk longer than it takes to write traces
                self._close_quietly()
                continue
            batch: list[tuple[CallRecord, bytes, bytes]] = []
            while item is not None:
                batch.append(item)
                if len(batch) >= BATCH:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            stopping = item is None
            if batch:
                self._write(batch)
        self._close_quietly()

    def _close_quietly(self) -> None:
        try:
            self._finish()
        except OSError as exc:
            log.warning("ctxscope proxy: could not close the spool file: %s", exc)

    def _write(self, batch: list[tuple[CallRecord, bytes, bytes]]) -> None:
        parts: list[memoryview] = []
        for record, request, response in batch:
            head = asdict(record)
            head["req"], head["resp"] = len(request), len(response)
            parts += [
                memoryview(json.dumps(head, separators=(",", ":")).encode() + b"\n"),
                memoryview(request),
                memoryview(response),
            ]
        size = sum(map(len, parts))
        try:
            if self._fd is None:
                self._open()
            assert self._fd is not None
            # written from the bodies as they are (no joined copy: a request may be 64 MB)
            parts = [p for p in parts if p]
            while parts:
                n = os.writev(self._fd, parts[:_IOV_MAX])
                while parts and n >= len(parts[0]):
                    n -= len(parts.pop(0))
                if n:
                    parts[0] = parts[0][n:]
            self._size += size
            if self._size >= self.rotate_bytes:
                self._finish()
        except OSError as exc:
            # the calls went through; only their traces are lost, and the log says so
            self.failures += len(batch)
            log.warning("ctxscope proxy: %d call(s) not recorded: %s", len(batch), exc)
            return
        self.written += len(batch)


# --------------------------------------------------------------------------- reading


def _pid_of(path: Path) -> int:
    try:
        return int(path.name.split("-", 1)[0])
    except ValueError:
        return -1


@dataclass
class Records:
    """Complete records read from one spool file, and the offset after the last one."""

    items: list[tuple[CallRecord, bytes, bytes]] = field(default_factory=list)
    offset: int = 0
    bad: int = 0


def read_records(path: Path, offset: int, limit: int = BATCH) -> Records:
    """Up to ``limit`` complete records from ``offset``; a record still being written is
    left for the next read."""
    out = Records(offset=offset)
    with open(path, "rb") as fh:
        fh.seek(offset)
        while len(out.items) < limit:
            line = fh.readline()
            if not line.endswith(b"\n"):
                break
            try:
                head = json.loads(line)
                req, resp = int(head.pop("req")), int(head.pop("resp"))
                record = CallRecord.from_obj(head)
            except (ValueError, KeyError, TypeError):
                # not ours or damaged: nothing after it can be framed, so give the file up
                out.bad += 1
                out.offset = path.stat().st_size
                break
            body = fh.read(req + resp)
            if len(body) < req + resp:
                break
            out.items.append((record, body[:req], body[req:]))
            out.offset = fh.tell()
    return out


class Converter:
    """Turn spooled calls into trace lines, file by file, oldest first."""

    def __init__(self, traces_dir: Path, *, redact: bool = True) -> None:
        self.traces_dir = traces_dir
        self.folder = spool_dir(traces_dir)
        self.redact = redact
        self.sessions = Sessions()
        #: what the earlier calls' texts redacted to (a session repeats them every call)
        self.redactor = Redactor()
        self.written = 0
        self.failed = 0

    def _offset_file(self, path: Path) -> Path:
        return path.with_suffix(".offset")

    def _offset(self, path: Path) -> int:
        try:
            return int(self._offset_file(path).read_text())
        except (OSError, ValueError):
            return 0

    def _files(self) -> list[Path]:
        files = [p for p in self.folder.glob("*-*.*") if p.suffix in (".open", ".spool")]
        return sorted(files, key=lambda p: (p.stat().st_mtime, p.name))

    def backlog(self) -> int:
        """How many calls wait in the spool (counted by reading their headers)."""
        left = 0
        for path in self._files() if self.folder.is_dir() else []:
            offset = self._offset(path)
            while True:
                got = read_records(path, offset, limit=BATCH)
                left += len(got.items)
                if len(got.items) < BATCH:
                    break
                offset = got.offset
        return left

    def _marker(self, path: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(path.with_suffix(".trying").read_text())
            return {
                "at": int(data["at"]),
                "alone": bool(data["alone"]),
                "until": int(data["until"]),
            }
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _write_small(self, target: Path, text: str) -> None:
        tmp = target.with_name(target.name + "-tmp")
        tmp.write_text(text)
        os.replace(tmp, target)

    def step(self, until: float | None = None) -> int:
        """Convert what is there now (or until the monotonic time ``until``); the number
        of records read."""
        if not self.folder.is_dir():
            return 0
        done = 0
        for path in self._files():
            if until is not None and time.monotonic() >= until:
                break
            closed = path.suffix == ".spool" or not pid_alive(_pid_of(path))
            read, offset = self._drain(path, until)
            done += read
            try:
                finished = closed and offset >= path.stat().st_size
            except FileNotFoundError:
                finished = False
            if finished:
                path.unlink(missing_ok=True)
                self._offset_file(path).unlink(missing_ok=True)
                path.with_suffix(".trying").unlink(missing_ok=True)
        return done

    def _drain(self, path: Path, until: float | None) -> tuple[int, int]:
        """Read and convert one spool file from its offset, batch after batch, until what
        is there is read (or ``until``); the number of records read and the offset after
        the last batch read."""
        done = 0
        got = Records()
        while True:
            try:
                offset = self._offset(path)
                mark = self._marker(path)
                if mark is not None and mark["until"] <= offset:
                    mark = None
                # inside a stretch a converter stopped in: one call at a time
                got = read_records(path, offset, limit=1 if mark else BATCH)
                self._take(path, offset, mark, got)
            except FileNotFoundError:
                break  # renamed from .open to .spool meanwhile: read on the next pass
            if got.bad:
                log.warning(
                    "ctxscope: %s is damaged at byte %d; the calls after it are dropped",
                    path,
                    offset,
                )
            done += len(got.items)
            if got.offset != offset:
                self._write_small(self._offset_file(path), str(got.offset))
            mark = self._marker(path)
            if mark is not None and mark["until"] <= got.offset:
                path.with_suffix(".trying").unlink(missing_ok=True)
            if len(got.items) < (1 if mark else BATCH) or (
                until is not None and time.monotonic() >= until
            ):
                break
        return done, got.offset

    def _take(self, path: Path, offset: int, mark: dict[str, Any] | None, got: Records) -> None:
        """Convert the calls read at ``offset``, first marking the stretch they are in
        (``.trying``: a converter that stops inside it is not given it whole again); the
        call a converter stopped on, converted alone, is a failed call instead."""
        if mark is not None and mark["at"] == offset and mark["alone"]:
            # this call, converted alone, was in hand when a converter stopped
            for record, _, _ in got.items:
                self._failed(record, "converting it stopped the converter")
        elif got.items:
            stretch = max(got.offset, mark["until"] if mark else 0)
            self._write_small(
                path.with_suffix(".trying"),
                json.dumps({"at": offset, "alone": bool(mark), "until": stretch}),
            )
            self._convert(got.items)

    def _failed(self, record: CallRecord, why: str) -> None:
        """One call no trace is written for: one log line, one line in ``failed.jsonl``."""
        self.failed += 1
        log.warning("ctxscope: no trace for call %s to %s: %s", record.id, record.path, why)
        line = json.dumps({**asdict(record), "why": why}, separators=(",", ":"))
        try:
            append_line(self.folder / FAILED_FILE, line.encode("utf-8") + b"\n")
        except OSError as exc:
            log.warning("ctxscope: could not note it in %s: %s", self.folder / FAILED_FILE, exc)

    def _convert(self, items: list[tuple[CallRecord, bytes, bytes]]) -> None:
        lines: dict[Path, list[bytes]] = {}
        for record, request, response in items:
            try:
                trace = trace_from_call(record, request, response, self.sessions)
                text = self.redactor.line(trace)[0] if self.redact else trace.to_json()
                line = text.encode("utf-8") + b"\n"
            except CallError as exc:
                self._failed(record, str(exc).split(": ", 1)[-1])
                continue
            except Exception as exc:  # noqa: BLE001 - one call's failure never costs the others
                self._failed(record, f"converting it failed ({type(exc).__name__}: {exc})")
                continue
            target = live_file(self.traces_dir, record.source or "proxy")
            lines.setdefault(target, []).append(line)
        for target, chunk in lines.items():
            target.parent.mkdir(parents=True, exist_ok=True)
            append_line(target, b"".join(chunk))
            self.written += len(chunk)


def run_converter(
    traces_dir: Path,
    should_stop: Callable[[], bool],
    *,
    redact: bool = True,
    poll: float = 0.05,
    drain_s: float = DRAIN_S,
) -> Converter:
    """Convert until ``should_stop()``, then what is left for up to ``drain_s`` seconds;
    whatever is still spooled then waits for the next converter (and the log says so)."""
    conv = Converter(traces_dir, redact=redact)
    deadline: float | None = None
    while True:
        if deadline is None and should_stop():
            deadline = time.monotonic() + drain_s
        try:
            n = conv.step(until=deadline)
        except OSError as exc:
            log.warning("ctxscope: reading the spool failed (%s); retrying", exc)
            n = 0
        if deadline is not None and (n == 0 or time.monotonic() >= deadline):
            left = conv.backlog()
            if left:
                log.warning(
                    "ctxscope: %d call(s) not yet written as traces stay in %s; the next "
                    "ctxscope proxy on this folder writes them",
                    left,
                    conv.folder,
                )
            return conv
        if n == 0:
            time.sleep(poll)


def converter_main(traces_dir: str, parent_pid: int, stop: Any, redact: bool) -> None:
    """The converter process: runs until ``stop`` (a multiprocessing event) is set or the
    process that started it is gone, then drains the spool. It runs at a lower priority:
    forwarding calls matters more than how soon their traces appear."""
    try:
        os.nice(10)
    except OSError:
        pass
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    run_converter(
        Path(traces_dir),
        lambda: bool(stop.is_set()) or os.getppid() != parent_pid,
        redact=redact,
    )


__all__ = [
    "BATCH",
    "Converter",
    "FAILED_FILE",
    "ROTATE_BYTES",
    "SPOOL_DIR",
    "SpoolWriter",
    "converter_main",
    "live_file",
    "read_records",
    "run_converter",
    "spool_dir",
]
