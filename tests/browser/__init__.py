"""Drive the real app in Debian's Chromium: the harness shared by the browser tests and bench.

AppTest runs the script in-process and never renders anything, so it cannot see what a user
sees: HTML that a packet smuggled into the page, a download button that hands out a broken
file, a permalink that loses its settings, a page that takes seconds to paint. These helpers
start ``streamlit run app.py`` on a free port against a store pre-filled with real traces,
launch /usr/bin/chromium through Playwright (``playwright install`` cannot download browsers
here) and wait for the app to *settle*: connected, the script no longer running, and no stale
elements left from the previous run.

``bench/bench_app.py`` imports this module too (``tests.browser``), so the benchmark measures
exactly what the tests exercise.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ctxcore import settings

ROOT = Path(__file__).resolve().parents[2]
CORPUS = settings.corpus_dir(ROOT / "corpus")
CHROMIUM = os.environ.get("CTXSCOPE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
ARTIFACTS = ROOT / "test-artifacts"
SCREENSHOTS = ARTIFACTS / "screenshots"

#: Generous: the CI box and the shared dev box are both slow and noisy.
SERVER_START_TIMEOUT_S = 90.0
SETTLE_TIMEOUT_MS = 45_000

XSS_SCRIPT = "<script>alert(1)</script>"
XSS_IMG = "<img src=x onerror=alert(1)>"
XSS_LINK = "[click](javascript:alert(1))"
XSS_TRACE_ID = "xss-probe"
#: Strings that markdown or autolinking would turn into links or bold text; the link probe
#: trace carries them as its session id, tags, packet ids and metadata values.
LINK_PAYLOADS = ("https://evil.example/x", "[click](https://evil.example)", "**bold**", "<b>x</b>")
LINK_TRACE_ID = "link-probe"
LINK_SESSION = LINK_PAYLOADS[0]
BROWSER_SESSION = "browser-session"

_SETTLED_JS = """
() => {
  const app = document.querySelector('[data-testid="stApp"]');
  if (!app) return false;
  if (app.getAttribute('data-test-connection-state') !== 'CONNECTED') return false;
  if (app.getAttribute('data-test-script-state') !== 'notRunning') return false;
  if (document.querySelector('[data-stale="true"]')) return false;
  // Lazy-loaded elements (plotly, dataframes) show a skeleton until their code arrives.
  if (document.querySelector('[data-testid$="Skeleton"]')) return false;
  const w = document.querySelector('[data-testid="stStatusWidget"]');
  if (w && /Running/i.test(w.innerText || '')) return false;
  return true;
}
"""


# --------------------------------------------------------------------------- availability


def browser_missing_reason() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if not Path(CHROMIUM).exists():
        return (
            f"Chromium not found at {CHROMIUM}: run `bash scripts/setup_browser.sh` as root "
            "(or `sudo apt-get install -y chromium`), or point CTXSCOPE_CHROMIUM at a Chromium"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed: run `make install`"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# --------------------------------------------------------------------------- data


def _corpus_chunks(limit_chars: int = 1400) -> list[tuple[str, str, str]]:
    """(id, kind, text) pieces of real tool output and retrieved context from the corpus."""
    picks = [
        ("d01_pytest_reportingdemo_44_failures.rst", "tool_output"),
        ("d02_pytest_requests_157_errors_truncated.txt", "tool_output"),
        ("d03_django_runtests_admin_inlines.txt", "tool_output"),
        ("d04_grep_r_qualname_sphinx.txt", "tool_output"),
        ("d05_pip_install_editable_marshmallow.log", "tool_output"),
        ("d06_jest_failure_zh_xresolver.log", "tool_output"),
        ("d07_npm_run_verify_tsc_jest_pack.log", "tool_output"),
        ("d08_find_grep_sigpipe_spam.log", "tool_output"),
        ("d09_tsc_output_first1500_of_18741_errors.txt", "tool_output"),
        ("d10_aider_repo_map_show-repo_2024-08-05.md", "retrieved"),
        ("d11_nextjs_dev-server.log", "tool_output"),
        ("d12_npm-debug.log", "tool_output"),
        ("c01_zh_opencode_session_ses_4398.md", "note"),
        ("b04_aider_chat_session_2024-08-13_1342.md", "note"),
    ]
    out: list[tuple[str, str, str]] = []
    for name, kind in picks:
        text = (CORPUS / name).read_text(encoding="utf-8", errors="replace")
        for j, start in enumerate((0, len(text) // 2)):
            piece = text[start : start + limit_chars]
            out.append((f"{name.split('_', 1)[0]}:{j}", kind, piece))
    return out


def corpus_input(now: datetime, *, turn: int = 0, extra_packets: Iterable[Any] = ()) -> Any:
    """A captured input of ~28 real corpus packets; later turns see more, newer evidence."""
    from ctxcore.models import CapturedInput, Message, Packet

    chunks = _corpus_chunks()
    packets = []
    for i, (pid, kind, text) in enumerate(chunks[: 20 + 4 * turn]):
        packets.append(
            Packet(
                id=pid,
                kind=kind,
                content=text,
                timestamp=now - timedelta(minutes=7 * (len(chunks) - i)),
                relevance=round(0.15 + (i * 37 % 80) / 100, 2),
                priority=1 if i % 5 == 0 else 0,
                must_keep=(i == 3),
            )
        )
    packets.extend(extra_packets)
    return CapturedInput(
        query=(
            "Fix the TimeDelta serialization precision bug in marshmallow fields.py so that "
            "test_timedelta_field passes"
        ),
        now=now,
        system_instructions="You are a careful software engineer. Explain, then patch.",
        history=[
            Message(role="user", content="The CI is red on the serialization tests."),
            Message(role="assistant", content="I will run pytest and read the failures."),
        ],
        packets=packets,
    )


def xss_packets(now: datetime) -> list[Any]:
    """Packets carrying HTML/JS payloads; must_keep so they reach the prompt the app shows."""
    from ctxcore.models import Packet

    payloads = [
        ("xss:script", f"tool said {XSS_SCRIPT} then exited 0"),
        ("xss:img", f"rendered preview {XSS_IMG} end"),
        ("xss:link", f"see {XSS_LINK} for details"),
        # The id is shown in tables, hover text and figure labels, not only the content.
        (f"xss:id{XSS_IMG}", "a packet whose id carries the payload"),
    ]
    return [
        Packet(
            id=pid,
            kind="tool_output",
            content=text,
            timestamp=now - timedelta(minutes=1),
            relevance=0.99,
            priority=5,
            must_keep=True,
        )
        for pid, text in payloads
    ]


def link_probe_trace(now: datetime) -> Any:
    """A real build whose session id, tags, packet ids and metadata are ``LINK_PAYLOADS``.

    A day older than the other browser traces, so that no page picks it by default."""
    from ctxcore.models import Config, Packet
    from ctxcore.pipeline import build_trace

    when = now - timedelta(days=1)
    bait = [
        Packet(
            id=payload,
            kind="tool_output",
            content=f"output mentioning {payload} once",
            timestamp=when - timedelta(minutes=1),
            relevance=0.99,
            priority=5,
            must_keep=True,
        )
        for payload in LINK_PAYLOADS
    ]
    return build_trace(
        corpus_input(when, extra_packets=bait),
        Config(preset=default_preset(), max_tokens=6000),
        trace_id=LINK_TRACE_ID,
        session_id=LINK_SESSION,
        turn=0,
        tags=list(LINK_PAYLOADS),
        metadata={f"m{i}": payload for i, payload in enumerate(LINK_PAYLOADS)},
    )


def default_preset() -> str:
    """The preset the browser traces are built with: ``ctxscope`` (the default);
    ``CTXSCOPE_BROWSER_PRESET`` overrides it, e.g. to run the app tests on another preset."""
    return os.environ.get("CTXSCOPE_BROWSER_PRESET") or "ctxscope"


def make_traces(now: datetime | None = None) -> list[Any]:
    """Real builds (``default_preset()``) over corpus inputs: a 3-turn session and the XSS probe."""
    from ctxcore.models import Config
    from ctxcore.pipeline import build_trace

    now = now or datetime(2026, 1, 24, 14, 0, tzinfo=UTC)
    cfg = Config(preset=default_preset(), max_tokens=6000)
    traces = [
        build_trace(
            corpus_input(now + timedelta(minutes=10 * t), turn=t),
            cfg,
            trace_id=f"browser-t{t}",
            session_id=BROWSER_SESSION,
            turn=t,
            tags=["browser", "corpus"],
        )
        for t in range(3)
    ]
    traces.append(
        build_trace(
            corpus_input(now + timedelta(minutes=40), extra_packets=xss_packets(now)).model_copy(
                # The query is shown as text on Inspect whatever the preset keeps.
                update={"query": f"Why did the preview print {XSS_SCRIPT} {XSS_IMG} {XSS_LINK}?"}
            ),
            cfg,
            trace_id=XSS_TRACE_ID,
            session_id="xss-session",
            turn=0,
            tags=["xss"],
        )
    )
    return traces


def write_jsonl(traces: Iterable[Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for t in traces:
            fh.write(t.to_json() + "\n")
    return path


def demo_trace_files() -> list[Path]:
    demo = ROOT / "ctxcore" / "data" / "demo"
    if not demo.is_dir():
        return []
    return sorted(p for p in demo.iterdir() if p.suffix in (".jsonl", ".json", ".gz"))


def fill_store(db: Path, files: list[Path]) -> None:
    """Ingest trace files into a fresh store (before the server opens it: DuckDB locks)."""
    from ctxcore.store import TraceStore
    from ctxcore.store.ingest import ingest_paths

    with TraceStore(db) as store:
        counts = ingest_paths(store, [str(f) for f in files])
        if counts.errors:
            msgs = "; ".join(f"{e.file}:{e.line}: {e.message}" for e in counts.error_rows[:3])
            raise RuntimeError(f"ingesting browser fixtures failed: {msgs}")


# --------------------------------------------------------------------------- server


@dataclass
class AppServer:
    """A running ``streamlit run app.py``; ``url`` is its base URL (no trailing slash)."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Path
    env: dict[str, str] = field(default_factory=dict)

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        # The server runs in its own process group; end exactly that group.
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=15)


def start_server(
    db: Path, traces_dir: Path, workdir: Path, extra_env: dict[str, str] | None = None
) -> AppServer:
    """Start the app on a free port and wait for /_stcore/health; raise with the log if not.

    ``extra_env`` is added to the server's environment (e.g. ``CTXSCOPE_TOKEN``)."""
    port = free_port()
    env = dict(os.environ)
    env.pop("CTXSCOPE_TOKEN", None)  # a token only when a test asks for one
    env.update(
        CTXSCOPE_DB=str(db),
        CTXSCOPE_TRACES=str(traces_dir),
        TIKTOKEN_CACHE_DIR=str(workdir / "tiktoken-cache"),
        STREAMLIT_BROWSER_GATHER_USAGE_STATS="false",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra_env or {})
    log = workdir / f"streamlit-{port}.log"
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(ROOT / "ctxapp" / "app.py"),
        "--server.address",
        "127.0.0.1",
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
    ]
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = AppServer(url=f"http://127.0.0.1:{port}", proc=proc, log=log, env=env)
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}:\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(f"{server.url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return server
        except OSError:
            pass
        time.sleep(0.25)
    server.stop()
    raise RuntimeError(
        f"streamlit did not become healthy in {SERVER_START_TIMEOUT_S:.0f}s:\n{server.log_tail()}"
    )


# --------------------------------------------------------------------------- browser


@contextmanager
def launch_browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class RunCounter:
    """Counts the script runs the server reports finished, read off the app's websocket.

    The DOM's "running" state can flip running -> notRunning inside one React batch when a
    run is fast, so watching it misses runs; the server's ``script_finished`` message cannot
    be missed. A test waits for "the rerun caused by *this* click has finished" with it.
    """

    def __init__(self) -> None:
        self.finished = 0  # whole-script runs
        self.fragments = 0  # st.fragment runs (e.g. a page's live-refresh timer)
        self.recording: list[tuple[int, Any]] | None = None  # (size, ForwardMsg) while recording

    def on_websocket(self, ws: Any) -> None:
        ws.on("framereceived", self._on_frame)

    def _on_frame(self, payload: Any) -> None:
        if not isinstance(payload, bytes | bytearray):
            return
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        msg = ForwardMsg()
        try:
            msg.ParseFromString(bytes(payload))
        except Exception:  # not a ForwardMsg (should not happen); never break the page
            return
        if self.recording is not None:
            self.recording.append((len(payload), msg))
        if msg.WhichOneof("type") != "script_finished":
            return
        if msg.script_finished == ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY:
            self.fragments += 1
        elif msg.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:
            self.finished += 1


_COUNTERS: dict[int, RunCounter] = {}


def new_page(browser: Any, *, width: int = 1400, height: int = 900) -> Any:
    ctx = browser.new_context(viewport={"width": width, "height": height}, accept_downloads=True)
    ctx.set_default_timeout(SETTLE_TIMEOUT_MS)
    page = ctx.new_page()
    page.add_init_script(_TEXT_HOOK_JS)  # for table_cuts: tables draw their text on canvases
    counter = RunCounter()
    _COUNTERS[id(page)] = counter
    page.on("websocket", counter.on_websocket)
    page.on("close", lambda _p: _COUNTERS.pop(id(page), None))
    return page


def settle(page: Any, timeout_ms: int = SETTLE_TIMEOUT_MS) -> None:
    """Wait until the app is connected, not running, and shows no stale elements."""
    page.wait_for_function(_SETTLED_JS, timeout=timeout_ms, polling=50)


def runs(page: Any) -> int:
    """How many whole-script runs of this page's session have finished so far.

    Fragment runs are not counted: a page's timer-driven fragment must not pass for the
    rerun a click caused."""
    return _COUNTERS[id(page)].finished


def fragment_runs(page: Any) -> int:
    """How many fragment runs (``st.fragment``) of this page's session have finished."""
    return _COUNTERS[id(page)].fragments


@contextmanager
def recording(page: Any) -> Iterator[list[tuple[int, Any]]]:
    """The messages the server sends this page meanwhile, each with its size on the wire:
    ``(bytes, ForwardMsg)``, in order."""
    counter = _COUNTERS[id(page)]
    got: list[tuple[int, Any]] = []
    counter.recording = got
    try:
        yield got
    finally:
        counter.recording = None


def wait_runs(
    page: Any, above: int, timeout_ms: int = SETTLE_TIMEOUT_MS, *, fragment: bool = False
) -> None:
    """Wait until more than ``above`` runs (fragment runs with ``fragment``) have finished
    (events are pumped while waiting)."""
    count = fragment_runs if fragment else runs
    deadline = time.monotonic() + timeout_ms / 1000
    while count(page) <= above:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no script run finished within {timeout_ms} ms")
        page.wait_for_timeout(10)


def rerun_and_settle(
    page: Any,
    action: Callable[[], object],
    timeout_ms: int = SETTLE_TIMEOUT_MS,
    *,
    fragment: bool = False,
) -> None:
    """Do ``action`` (a click, a key press) and wait for the rerun it starts to finish;
    ``fragment=True`` when the action reruns one fragment (a Playground knob), not the page."""
    before = fragment_runs(page) if fragment else runs(page)
    action()
    wait_runs(page, before, timeout_ms, fragment=fragment)
    settle(page, timeout_ms)


def goto(page: Any, url: str) -> None:
    """Load ``url`` and wait for its first script run to finish and the page to settle.

    Right after connecting, the app reports "not running" before the first run has even
    started, so waiting on the DOM state alone returns before anything is drawn.
    """
    before = runs(page)
    page.goto(url, wait_until="domcontentloaded")
    wait_runs(page, before)
    settle(page)
    dialog = page.get_by_role("dialog").filter(has_text="Page not found")
    if dialog.count():
        raise AssertionError(f"{url}: Streamlit says 'Page not found'")


def exceptions_text(page: Any) -> list[str]:
    loc = page.locator('[data-testid="stException"]')
    texts: list[str] = loc.all_inner_texts()
    return texts


def nav_links(page: Any) -> list[tuple[str, str]]:
    """(label, href) of every page in the sidebar or top navigation."""
    links = page.locator('[data-testid="stSidebarNavLink"], [data-testid="stTopNavLink"]')
    out: list[tuple[str, str]] = []
    for i in range(links.count()):
        a = links.nth(i)
        href = a.get_attribute("href") or ""
        label = " ".join(a.inner_text().split())
        if href and (label, href) not in out:
            out.append((label, href))
    return out


def slug(label: str) -> str:
    s = "".join(c.lower() if c.isalnum() else "-" for c in label)
    return "-".join(p for p in s.split("-") if p) or "home"


_CONTENT_HEIGHT_JS = """
() => {
  const el = document.querySelector('[data-testid="stMain"]')
    || document.querySelector('[data-testid="stAppViewContainer"]');
  const inner = document.querySelector('[data-testid="stMainBlockContainer"]');
  const h = Math.max(el ? el.scrollHeight : 0, inner ? inner.scrollHeight + 120 : 0,
                     document.documentElement.scrollHeight);
  return Math.ceil(h);
}
"""


def screenshot(page: Any, name: str, *, max_height: int = 12_000) -> Path:
    """A full-page PNG in test-artifacts/screenshots/<name>.png.

    Streamlit scrolls inside its main container, not the document, so Playwright's
    ``full_page`` alone captures one viewport; grow the viewport to the content first.
    """
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{slug(name)}.png"
    size = page.viewport_size or {"width": 1400, "height": 900}
    height = min(max(int(page.evaluate(_CONTENT_HEIGHT_JS)), size["height"]), max_height)
    try:
        if height > size["height"]:
            page.set_viewport_size({"width": size["width"], "height": height})
            settle(page)
        page.screenshot(path=str(path), full_page=True)
    finally:
        page.set_viewport_size(size)
    return path


def copy_into(files: Iterable[Path], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for f in files:
        dst = folder / f.name
        shutil.copyfile(f, dst)
        out.append(dst)
    return out


#: metric labels and values whose text overflows their box (drawn cut, with an ellipsis)
_CUT_METRICS_JS = """
() => Array.from(document.querySelectorAll('[data-testid="stMetric"]'))
  .filter(m => {
    const parts = ['stMetricValue', 'stMetricLabel']
      .map(id => m.querySelector(`[data-testid="${id}"]`)).filter(Boolean);
    return parts.some(e => [e, ...e.querySelectorAll('*')]
      .some(x => x.scrollWidth > x.clientWidth + 1));
  })
  .map(m => m.innerText.replace(/\\s+/g, ' ').trim())
"""


def cut_metrics(page: Any) -> list[str]:
    """The metrics on the page whose label or value is cut ("3,…", "summari…")."""
    found: list[str] = page.evaluate(_CUT_METRICS_JS)
    return found


#: the text of every plotly chart on the page that a reader cannot read whole: a label cut by
#: the chart's edge, or two labels (tick labels, legend entries or the legend's box, titles,
#: annotations) drawn over each other, by their bounding boxes (an overlap of more than 15 %
#: of the smaller box; a legend's own entries and box go together)
_LABEL_CLASHES_JS = r"""
() => {
  const out = [];
  const inter = (a, b) =>
    Math.max(0, Math.min(a.right, b.right) - Math.max(a.left, b.left)) *
    Math.max(0, Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top));
  const legendish = g => g === 'legend entry' || g === 'legend box';
  document.querySelectorAll('.js-plotly-plot').forEach((plot, k) => {
    const svg = plot.querySelector('svg.main-svg');
    if (!svg) return;
    const name = ((plot.querySelector('.gtitle') || {}).textContent || `chart ${k + 1}`).trim();
    const edge = svg.getBoundingClientRect();
    const groups = {
      'x tick': '.xtick text, .x2tick text',
      'y tick': '.ytick text, .y2tick text',
      'legend entry': '.legendtext',
      'legend box': '.legend > .bg',
      'title': '.gtitle, .g-gtitle text, .g-xtitle text, .g-ytitle text, .g-x2title text',
      'annotation': '.annotation-text',
    };
    const items = [];
    for (const [g, sel] of Object.entries(groups)) {
      plot.querySelectorAll(sel).forEach(el => {
        const r = el.getBoundingClientRect();
        if (r.width >= 1 && r.height >= 1)
          items.push({g, r, t: el.textContent.trim().slice(0, 40)});
      });
    }
    for (const it of items) {
      const r = it.r;
      if (r.left < edge.left - 1 || r.right > edge.right + 1 ||
          r.top < edge.top - 1 || r.bottom > edge.bottom + 1)
        out.push(`${name}: ${it.g} '${it.t}' is cut by the chart's edge`);
    }
    for (let i = 0; i < items.length; i++) {
      for (let j = i + 1; j < items.length; j++) {
        const a = items[i], b = items[j];
        if (legendish(a.g) && legendish(b.g)) continue;
        const small = Math.min(a.r.width * a.r.height, b.r.width * b.r.height);
        if (inter(a.r, b.r) > 0.15 * small)
          out.push(`${name}: ${a.g} '${a.t}' overlaps ${b.g} '${b.t}'`);
      }
    }
  });
  return out;
}
"""


def label_clashes(page: Any) -> list[str]:
    """Chart labels on the page that are cut or drawn over each other ("Context window: x
    tick '1000 tok' overlaps legend box ''"), measured by their bounding boxes."""
    found: list[str] = page.evaluate(_LABEL_CLASHES_JS)
    return found


# --------------------------------------------------------------------------- tables

#: Streamlit's tables (glide-data-grid) draw on canvases: no DOM element holds a cell's text.
#: Installed before any page script (``new_page``), this records every text a canvas draws,
#: where (in CSS pixels, the canvas's transform applied) and how wide, the last draw at each
#: spot winning; ``table_cuts`` reads a table's header and cells from it.
_TEXT_HOOK_JS = r"""
(() => {
  const P = CanvasRenderingContext2D.prototype;
  const fill = P.fillText;
  const drawn = new WeakMap();
  window.__ctxscopeDrawn = c => drawn.get(c);
  P.fillText = function (text, x, y, maxWidth) {
    try {
      const m = this.getTransform(), dpr = window.devicePixelRatio || 1;
      const s = String(text);
      const w = this.measureText(s).width * m.a / dpr;
      const X = (m.a * x + m.c * y + m.e) / dpr, Y = (m.b * x + m.d * y + m.f) / dpr;
      let at = drawn.get(this.canvas);
      if (!at) { at = new Map(); drawn.set(this.canvas, at); }
      at.set(`${Math.round(X)}:${Math.round(Y)}`, {t: s, x: X, y: Y, w, align: this.textAlign});
    } catch (e) { /* never break the page's drawing */ }
    return fill.apply(this, arguments);
  };
})();
"""

#: Per table on the page: its name (the ``tbl_<key>`` container of ``widgets.readable_table``
#: and the pages), the grid's visible width, whether it scrolls sideways, its header labels
#: as drawn (text span, whether the grid's edge cuts them) and the cells whose text runs past
#: their column (the grid clips it, with no ellipsis): column label, the whole text, and the
#: height of its row's middle in the grid.
_TABLE_CUTS_JS = r"""
() => {
  const PAD = 8;  // glide's cell padding: a header's text starts this far into its column
  const span = r => (r.align === 'right' || r.align === 'end') ? [r.x - r.w, r.x]
    : (r.align === 'center' ? [r.x - r.w / 2, r.x + r.w / 2] : [r.x, r.x + r.w]);
  return Array.from(document.querySelectorAll('[data-testid="stDataFrame"]')).map((df, k) => {
    const keyed = df.closest('[class*="st-key-tbl_"]');
    const m = keyed && keyed.className.match(/st-key-tbl_(\S+)/);
    const grid = df.querySelector('canvas[data-testid="data-grid-canvas"]');
    const head = Array.from(df.querySelectorAll('canvas')).find(c => c !== grid);
    const scroller = df.querySelector('.dvn-scroller');
    const W = grid ? grid.clientWidth : 0;
    const rec = c => (c && window.__ctxscopeDrawn && window.__ctxscopeDrawn(c)) || new Map();
    const headers = Array.from(rec(head).values())
      .map(r => ({t: r.t, a: span(r)[0], b: span(r)[1], align: r.align}))
      .sort((p, q) => p.a - q.a);
    // column i spans [lo[i], hi[i]): its neighbour's text start less the padding, or its
    // own right-aligned text's end plus the padding
    const lo = [], hi = [];
    headers.forEach((h, i) => {
      const right = h.align === 'right' || h.align === 'end';
      lo.push(right ? (i ? hi[i - 1] : 0) : h.a - PAD);
      const next = headers[i + 1];
      hi.push(next ? ((next.align === 'right' || next.align === 'end') ? h.b + PAD
        : next.a - PAD) : W);
    });
    const cut = [];
    for (const r of rec(grid).values()) {
      const [a, b] = span(r);
      const i = headers.findIndex((h, j) => a >= lo[j] - 1 && a < hi[j]);
      if (i < 0) continue;  // the row markers' column
      if (b > Math.min(hi[i], W) + 0.5) cut.push([headers[i].t, r.t, r.y]);
    }
    return {
      name: m ? m[1] : null,
      k, W,
      scrolls: scroller ? scroller.scrollWidth > scroller.clientWidth + 1 : false,
      headers: headers.map(h => [h.t, h.b > W + 0.5]),
      cut,
    };
  });
}
"""

#: What each table must show on screen whole, at 1024 × 768 and at 1440 × 900: which
#: item, what happened to it and why (the columns to its right scroll into view).
TABLE_WHY: dict[str, tuple[str, ...]] = {
    "in_decisions": ("packet id", "status", "reason"),
    "pg_decisions": ("packet id", "status", "reason"),
    "pg_flipped": ("packet id", "before", "now", "reason now"),
    "cmp_decisions": ("packet id", "A", "B", "reason B"),
    "cmp_budgets": ("partition", "budget_A", "used_A", "budget_B", "used_B"),
    "tl_lost": ("item", "lost at turn", "status", "reason"),
    "tl_findings_list": ("turn", "severity", "detector", "message"),
    "tr_findings": ("turn", "severity", "detector", "message"),
    "tr_table": ("session", "turn", "verdict"),
    "in_signals": ("packet", "status", "strongest signal"),
    "sh_errors": ("message", "file"),
    "in_cache": ("tokens", "simulated", "recorded"),
    "tl_cost": ("turn", "$", "cached", "written", "uncached"),
    "rp_lab_table": ("policy", "$ with the cache", "recall"),
}
#: Columns of short words (a status, a code, a turn) that must never be cut: there is no
#: more to read in them than what the cell holds.
WHOLE_CELLS = frozenset(
    {"status", "before", "now", "A", "B", "code", "severity", "verdict", "turn", "lost at turn"}
)
#: Tables whose longer cells (a reason, an id, a message) may run past their column: the
#: selected row is shown whole beneath the table (``widgets.readable_table``), or opens where
#: it is shown whole (a finding, a trace in Inspect).
READ_WHOLE_ELSEWHERE = frozenset(
    {
        "in_decisions",
        "pg_decisions",
        "pg_flipped",
        "cmp_decisions",
        "tl_lost",
        "in_signals",
        "sh_errors",
        "tl_findings_list",
        "tr_findings",
        "tr_table",
        "tl_cost",
        "rp_lab_table",
    }
)


def tables(page: Any) -> list[dict[str, Any]]:
    """What ``_TABLE_CUTS_JS`` reads of every table on the page."""
    found: list[dict[str, Any]] = page.evaluate(_TABLE_CUTS_JS)
    return found


def table_cuts(page: Any) -> list[str]:
    """Every way a table on the page hides the why: a table no check names; a column it must
    show (``TABLE_WHY``) off-screen or its header cut; a cell of a short column cut; a longer
    cell cut in a table that offers no way to read it whole."""
    out: list[str] = []
    for t in tables(page):
        name = t["name"] or f"table {t['k'] + 1} ({', '.join(h for h, _ in t['headers'][:4])})"
        shown = {label: cut for label, cut in t["headers"]}
        if t["name"] not in TABLE_WHY:
            out.append(f"{name}: not named by the layout checks (tests/browser TABLE_WHY)")
        for label in TABLE_WHY.get(t["name"], ()):
            if label not in shown:
                out.append(f"{name}: column {label!r} is off-screen ({t['W']:.0f} px wide)")
            elif shown[label]:
                out.append(f"{name}: the grid's edge cuts column {label!r}")
        for label, text, _y in t["cut"]:
            if label in WHOLE_CELLS:
                out.append(f"{name}: {label!r} cut: {text[:60]!r}")
            elif t["name"] not in READ_WHOLE_ELSEWHERE:
                out.append(f"{name}: {label!r} cut with no way to read it whole: {text[:60]!r}")
    return out
