"""Watch a folder and ingest new and appended trace files as agents write them.

Runs inside the process that owns the store (the app, on a background thread with its own
cursor) or stand-alone as ``ctxscope watch DIR``. watchdog reports creations, writes,
closes and renames (writers that write a temp file and rename it land in ``on_moved``);
events are debounced per file so that an agent appending line by line costs one ingest
per burst, not one per line, but never waits longer than ``max_wait`` while writes go on.
A slow rescan of the whole folder catches anything the OS did not report.

The watcher never wedges on a bad file: ingest turns a file it cannot read into an error
row and a failed offset row (``Store.failing_files``, for the app's banner), reads
the other files, and does not try that file again until it changes. A failure of the
store itself (a full disk) is logged and kept in ``last_error``; the next event or rescan
tries again (a store DuckDB gave up on after a failed checkpoint is opened again first).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from ctxcore.errors import CtxscopeError
from ctxcore.store.ingest import ingest_paths
from ctxcore.store.protocol import Store
from ctxcore.store.readers import is_trace_file
from ctxcore.store.records import IngestCounts

log = logging.getLogger("ctxscope.watch")

OnIngest = Callable[[IngestCounts], None]


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        paths = [event.src_path]
        dest = getattr(event, "dest_path", "")
        if dest:
            paths.append(dest)
        for p in paths:
            path = p.decode() if isinstance(p, bytes) else str(p)
            if event.is_directory:
                self.watcher.request_rescan()
            elif is_trace_file(path):
                self.watcher.touch(Path(path))


class Watcher:
    """Ingest ``folder`` (recursively) into ``store`` whenever files appear or grow."""

    def __init__(
        self,
        store: Store,
        folder: str | Path,
        *,
        debounce: float = 0.2,
        max_wait: float = 1.0,
        rescan_every: float = 10.0,
        on_ingest: OnIngest | None = None,
    ) -> None:
        self.store = store
        self.folder = Path(folder)
        self.debounce = debounce
        self.max_wait = max_wait
        self.rescan_every = rescan_every
        self.on_ingest = on_ingest
        self.totals = IngestCounts()
        self.last_error: str | None = None
        self._pending: dict[Path, tuple[float, float]] = {}  # path -> (first, last) event
        self._mutex = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._rescan = True
        self._observer: Observer | None = None  # type: ignore[valid-type]
        self._thread: threading.Thread | None = None

    # ---- events (watchdog's thread)
    def touch(self, path: Path) -> None:
        now = time.monotonic()
        with self._mutex:
            first, _ = self._pending.get(path, (now, now))
            self._pending[path] = (first, now)
        self._wake.set()

    def request_rescan(self) -> None:
        self._rescan = True
        self._wake.set()

    # ---- lifecycle
    def start(self) -> Watcher:
        if self._thread is not None:
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        self._stop.clear()
        self._rescan = True
        observer = Observer()
        observer.schedule(_Handler(self), str(self.folder), recursive=True)
        observer.daemon = True
        observer.start()
        self._observer = observer
        self._thread = threading.Thread(target=self._run, name="ctxscope-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout)
            self._observer = None
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> Watcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- the ingest thread
    def _due(self) -> list[Path]:
        now = time.monotonic()
        with self._mutex:
            ready = [
                p
                for p, (first, last) in self._pending.items()
                if now - last >= self.debounce or now - first >= self.max_wait
            ]
            for p in ready:
                del self._pending[p]
        return ready

    def _run(self) -> None:
        last_scan = last_diag = 0.0
        while not self._stop.is_set():
            self._wake.wait(timeout=min(0.1, self.debounce / 2 or 0.05))
            self._wake.clear()
            if self._stop.is_set():
                break
            now = time.monotonic()
            if self._rescan or now - last_scan >= self.rescan_every:
                self._rescan = False
                last_scan = now
                with self._mutex:
                    self._pending.clear()
                self._ingest([self.folder])
                continue
            # a FIFO or a device in the folder is reported by the rescan (once), not here
            due = [p for p in self._due() if p.is_file()]
            if due:
                self._ingest(due)
            elif now - last_diag >= 2.0:
                last_diag = now
                self._diagnose()

    def _diagnose(self) -> None:
        # Traces stored with deferred diagnostics get their findings while nothing arrives.
        try:
            self.store.diagnose_pending(50)
        except CtxscopeError as exc:
            self._store_failed(exc)
        except Exception as exc:  # a bug: keep watching, but loudly
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("ctxscope watch: diagnostics failed")

    def _store_failed(self, exc: CtxscopeError) -> None:
        """A failure of the store (a full disk): said once, not at every idle moment or
        rescan while it lasts; and the store opened again if DuckDB gave up on it (a failed
        checkpoint), so that the next rescan, once there is room, ingests what this one
        could not (the files' offsets were not advanced: nothing is skipped)."""
        if str(exc) != self.last_error:
            log.warning("ctxscope watch: %s", exc)
        self.last_error = str(exc)
        try:
            self.store.reopen_if_invalidated()
        except CtxscopeError as again:
            if str(again) != self.last_error:
                log.warning("ctxscope watch: %s", again)
            self.last_error = str(again)

    def _ingest(self, paths: list[Path]) -> None:
        try:
            counts = ingest_paths(self.store, paths)
        except CtxscopeError as exc:
            self._store_failed(exc)
            return
        except Exception as exc:  # a bug: keep watching, but loudly
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("ctxscope watch: ingest of %s failed", paths)
            return
        self.last_error = None
        t = self.totals
        t.files += counts.files
        t.traces_added += counts.traces_added
        t.traces_skipped += counts.traces_skipped
        t.errors += counts.errors
        t.error_rows = (t.error_rows + counts.error_rows)[-200:]
        if self.on_ingest is not None and (counts.traces_added or counts.errors):
            self.on_ingest(counts)
