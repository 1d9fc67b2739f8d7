"""A team store tried as a new user would (issue "A team's traces in one place", Done when):
two proxies and one OTLP receiver writing into one PostgreSQL at once, two apps reading it.

Real parts only: the throwaway cluster of ``tests/pg_cluster.py``, ``ctxscope migrate`` and
``ctxscope token add`` as the README's "A team store" says, two ``ctxscope proxy --db URL``
processes (each its own folder, as on two machines) forwarding to the fake upstream that
replays a recorded OpenAI reply, one ``ctxscope collect --db URL`` fed a recorded OTLP
export, and two ``streamlit run`` servers of the app on the same URL with a token, each in
Chromium. Both apps list every call of every writer, the Live box counts each writer's calls
by source, and a call made while the pages are open appears in both without a reload.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

from . import ROOT, exceptions_text, goto, new_page, screenshot, start_server
from .test_live_capture import _span

sys.path.insert(0, str(ROOT / "tests"))
from proxy_support import FIXTURES, Proc, send, start, start_upstream  # noqa: E402

from ctxcore.cli import main  # noqa: E402
from ctxcore.formats.otlp import traces_from_otlp  # noqa: E402
from ctxcore.store.pgaccess import add_token  # noqa: E402

STEM = "openai-chat/otel-contrib-tool-calls-turn1"
OTLP = FIXTURES / "otlp-json/openai-v2-latest-span-only.otlp.jsonl"


def _proxy(url: str, folder: Path, upstream: Proc) -> Proc:
    up = f"http://127.0.0.1:{upstream.port}"
    cmd = [sys.executable, "-m", "ctxcore", "proxy", "--port", "0", "--traces", str(folder)]
    cmd += ["--db", url, "--upstream-openai", up, "--upstream-anthropic", up]
    return start(cmd, r"listening on http://127\.0\.0\.1:(\d+)")


def _call(proxy: Proc, source: str) -> None:
    """One recorded chat call through ``proxy``, its source named by the path prefix."""
    headers = [
        ("Authorization", "Bearer sk-test-team-trial-0123456789abcdef"),
        ("Content-Type", "application/json"),
        ("x-test-scenario", f"json:{STEM}.response.json"),
    ]
    body = (FIXTURES / f"{STEM}.request.json").read_bytes()
    reply = send(proxy.port, "POST", f"/{source}/v1/chat/completions", headers, body)
    assert reply.status == 200, reply


def _post_otlp(collector: Proc, body: bytes) -> int:
    """One OTLP/JSON export request to the receiver; how many traces it holds."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{collector.port}/v1/traces",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
    return len(traces_from_otlp(json.loads(body)))


def _live_text(page: Any) -> str:
    box = page.locator(".st-key-live_box")
    return str(box.inner_text()) if box.count() else ""


def _wait_live(page: Any, *needles: str) -> str:
    """The Live box's text once it holds every needle (the page refreshes on its own)."""
    cond = " && ".join(f"t.includes({json.dumps(n)})" for n in needles)
    try:
        page.wait_for_function(
            "() => { const b = document.querySelector('.st-key-live_box');"
            f" const t = b ? b.innerText : ''; return {cond}; }}",
            timeout=60_000,
            polling=200,
        )
    except Exception as e:  # the box as it stood, in the failure
        screenshot(page, "team-store-live-timeout")
        raise AssertionError(f"Live box never held {needles}: {_live_text(page)!r}") from e
    return _live_text(page)


def test_two_proxies_and_a_receiver_write_one_team_store_two_apps_read_it(
    pg_server: Any, chromium: Any, tmp_path: Path
) -> None:
    url = str(pg_server.new_database())
    assert main(["migrate", "--db", url]) == 0
    token = add_token(url, "alice")
    upstream = start_upstream(tmp_path / "upstream")
    writers: list[Proc] = []
    apps = []
    try:
        a = _proxy(url, tmp_path / "machine-a", upstream)
        writers.append(a)
        b = _proxy(url, tmp_path / "machine-b", upstream)
        writers.append(b)
        cmd = [sys.executable, "-m", "ctxcore", "collect", "--port", "0"]
        cmd += ["--traces", str(tmp_path / "machine-c"), "--db", url]
        collector = start(cmd, r"OTLP/HTTP on http://127\.0\.0\.1:(\d+)")
        writers.append(collector)
        for _ in range(2):
            _call(a, "team-a")
            _call(b, "team-b")
        # a recorded export (its spans' times are the recording's, before the Live box's
        # ten minutes) and a span of now
        spans = _post_otlp(collector, OTLP.read_text().splitlines()[0].encode())
        spans += _post_otlp(collector, _span("team-c-otel-session"))

        for _ in range(2):
            apps.append(
                start_server(
                    url,  # type: ignore[arg-type]  # the app takes a URL where a path goes
                    tmp_path / "app-traces",
                    tmp_path,
                    extra_env={"CTXSCOPE_TOKEN": token},
                )
            )
        pages = [new_page(chromium) for _ in apps]
        for k, (app, page) in enumerate(zip(apps, pages, strict=True)):
            goto(page, app.url + "/")
            assert exceptions_text(page) == [], app.log_tail()
            text = _wait_live(page, "team-a 2", "team-b 2", "otlp 1")
            assert "5 calls/min" in text, text  # every writer's calls of the last minute
            screenshot(page, f"team-store-app-{k + 1}")
        # a call made while both pages are open reaches both without a reload
        _call(b, "team-b")
        for page in pages:
            assert "team-b 3" in _wait_live(page, "team-b 3")
            assert exceptions_text(page) == []
    finally:
        for app in apps:
            app.stop()
        for w in writers:
            w.stop()
        upstream.stop()
    said = "\n".join(line for w in writers for line in w.lines)
    assert "sk-test-team-trial" not in said
    # every call stored once, whichever writer brought it
    from ctxcore.store.engines import read_store
    from ctxcore.store.records import TraceFilter

    with read_store(url) as store:
        rows = store.list_traces(TraceFilter(), limit=1000).rows
    ids = [r.trace_id for r in rows]
    assert len(ids) == len(set(ids)) == 5 + spans
    sources = sorted(t for r in rows for t in r.tags if t.startswith("source:"))
    assert sources.count("source:team-a") == 2 and sources.count("source:team-b") == 3
    # the two proxies' calls open alike but are two sessions, each numbering its turns
    turns = {(r.session_id, r.turn) for r in rows if "live" in r.tags and r.session_id}
    assert len(turns) == len([r for r in rows if "live" in r.tags and r.session_id]), turns
