"""Share / Import in a real browser: the downloads are real files that round-trip.

The snapshot a user downloads must import again as the same trace (through the importer the
CLI uses, and through the page's own uploader); the HTML report of the XSS probe, opened as a
page of its own, must not run the payloads either. Uploads are bounded: past
``server.maxUploadSize`` (64 MB) the uploader refuses the file, and a small ``.gz`` that
unpacks past it is refused by the page instead of filling the app's memory.
"""

from __future__ import annotations

from pathlib import Path

from . import XSS_SCRIPT, XSS_TRACE_ID, exceptions_text, goto, rerun_and_settle, settle
from .test_xss import _INJECTED_JS


def _download(page, label: str, dest: Path) -> Path:
    button = page.get_by_role("button", name=label)
    with page.expect_download() as info:
        button.click()
    download = info.value
    path = dest / download.suggested_filename
    download.save_as(str(path))
    return path


def test_snapshot_download_reimports_as_the_same_trace(tab, browser_data, tmp_path) -> None:
    from ctxcore.formats.load import load_file

    page = tab.page
    original = browser_data.traces[1]
    goto(page, f"{tab.url}/share?trace={original.trace_id}")
    assert exceptions_text(page) == []
    path = _download(page, "Download snapshot (.json)", tmp_path)
    assert path.name.endswith(".json"), path.name
    [back] = load_file(path, "auto")
    assert back.trace_id == original.trace_id
    assert back.session_id == original.session_id and back.turn == original.turn
    assert back.config == original.config
    assert back.result is not None and original.result is not None
    assert [(d.packet_id, d.status) for d in back.result.decisions] == [
        (d.packet_id, d.status) for d in original.result.decisions
    ]
    assert back.result.totals == original.result.totals

    # The page's own uploader takes the file back; the store already has it (same id).
    uploader = page.locator('[data-testid="stFileUploader"] input[type="file"]')
    uploader.set_input_files(str(path))
    # Uploaded (not still in flight): the chip offers "Remove", not "Cancel upload".
    page.get_by_role("button", name=f"Remove {path.name}").wait_for()
    settle(page)
    rerun_and_settle(page, lambda: page.get_by_role("button", name="Import", exact=True).click())
    assert exceptions_text(page) == []
    success = page.locator('[data-testid="stAlert"]').filter(has_text="Imported 1 trace(s)")
    success.wait_for()
    assert success.count() == 1


def test_html_report_of_the_probe_is_inert(tab, chromium, tmp_path) -> None:
    page = tab.page
    goto(page, f"{tab.url}/share?trace={XSS_TRACE_ID}")
    report = _download(page, "Download HTML report", tmp_path)
    html = report.read_text(encoding="utf-8")
    assert XSS_SCRIPT not in html, "the report embeds the <script> payload unescaped"

    viewer = chromium.new_context().new_page()
    dialogs: list[str] = []
    viewer.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    try:
        viewer.goto(report.as_uri(), wait_until="load")
        viewer.wait_for_timeout(300)  # img onerror fires asynchronously
        assert dialogs == [], f"the HTML report ran the payload: {dialogs}"
        assert viewer.evaluate(_INJECTED_JS, False) == []
        assert XSS_SCRIPT in viewer.locator("body").inner_text(), "the payload is not shown"
    finally:
        viewer.context.close()


def _upload(page, path: Path) -> None:
    page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(str(path))


def test_gz_that_unpacks_past_the_limit_is_refused(tab, tmp_path) -> None:
    import gzip

    page = tab.page
    goto(page, f"{tab.url}/share")
    assert "64 MB" in page.locator('[data-testid="stMain"]').inner_text(), "limit not stated"
    bomb = tmp_path / "bomb.jsonl.gz"
    with gzip.open(bomb, "wb") as gz:  # 200 MB of spaces in ~200 KB
        block = b" " * (1 << 20)
        for _ in range(200):
            gz.write(block)
    _upload(page, bomb)
    page.get_by_role("button", name=f"Remove {bomb.name}").wait_for()
    settle(page)
    rerun_and_settle(page, lambda: page.get_by_role("button", name="Import", exact=True).click())
    assert exceptions_text(page) == []
    error = page.locator('[data-testid="stAlert"]').filter(has_text="unpacks to more than 64 MB")
    # the run the click started may finish after one the upload itself started (the wait
    # above can end on that one): wait for the refusal rather than look once
    try:
        error.first.wait_for(timeout=30_000)
    except Exception as exc:  # noqa: BLE001 - playwright's TimeoutError, shown with the page
        raise AssertionError(page.locator('[data-testid="stMain"]').inner_text()[-900:]) from exc
    assert error.count() == 1
    assert exceptions_text(page) == []


def test_file_over_the_upload_limit_is_refused_by_the_uploader(tab, tmp_path) -> None:
    page = tab.page
    goto(page, f"{tab.url}/share")
    big = tmp_path / "big.json"
    with big.open("wb") as fh:
        fh.truncate(65 * (1 << 20))  # sparse: 65 MB without writing them
    _upload(page, big)
    page.get_by_text("File must be 64.0MB or smaller.").wait_for()
    assert exceptions_text(page) == []
