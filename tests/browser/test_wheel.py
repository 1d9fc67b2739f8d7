"""The app ships in the package: a wheel built from the repo, installed (not editable) into a
fresh virtual environment, serves every page of the registry on the bundled demo, started with
``ctxscope app`` from an empty folder (docs/design.md, "The app").

The wheel is built from the files git tracks (and new ones it does not ignore), copied out of
the checkout, so nothing of the working tree (an editable install's finder, ``ctxapp`` on
``sys.path`` because the tests start from the checkout) can stand in for what the wheel holds.
Installing pulls the dependencies from the package index through pip's cache, pinned by
``requirements.lock``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ctxapp.pages import PAGES
from ctxcore import __version__, settings

from . import ROOT, exceptions_text, free_port, goto, new_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]

#: pip builds the wheel and fills the venv; both read pip's cache, but a cold one downloads.
INSTALL_TIMEOUT_S = 1_200
START_TIMEOUT_S = 120.0


@dataclass
class Installed:
    wheel: Path
    venv: Path

    @property
    def bin(self) -> Path:
        return self.venv / "bin"


def _run(
    cmd: list[str],
    *,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = INSTALL_TIMEOUT_S,
) -> str:
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {res.returncode}:\n{res.stderr[-4000:]}")
    return res.stdout


def _clean_env(home: Path) -> dict[str, str]:
    """The environment of a new user: no CTXSCOPE_ setting, no checkout on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXSCOPE_", "PYTHON"))}
    env.pop("VIRTUAL_ENV", None)
    env["TIKTOKEN_CACHE_DIR"] = str(home / "tiktoken-cache")
    env["HOME"] = str(home)
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    tracked = _run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT
    ).split("\0")
    for name in filter(None, tracked):
        if not (ROOT / name).is_file():
            continue  # deleted in the working tree, not yet committed
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    dist = work / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(src)],
        cwd=work,
    )
    (wheel,) = dist.glob("ctxscope-*.whl")
    venv = work / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=work)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    _run([*pip, "-c", str(ROOT / "requirements.lock"), str(wheel)], cwd=work)
    return Installed(wheel, venv)


def test_the_wheel_holds_the_app_its_settings_and_the_demo(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    wanted = {"ctxapp/app.py", "ctxapp/.streamlit/config.toml", "ctxapp/pages/__init__.py"}
    wanted |= {f"ctxapp/pages/{p.file}" for p in PAGES}
    wanted |= {f"ctxcore/data/demo/{f.name}" for f in settings.DEMO_DIR.glob("*.jsonl")}
    assert not wanted - names, f"the wheel lacks {sorted(wanted - names)}"
    assert not [n for n in names if n.startswith(("tests/", "bench/", "scripts/", "corpus/"))]


def test_version_and_imports_come_from_the_installed_package(
    installed: Installed, tmp_path: Path
) -> None:
    env = _clean_env(tmp_path)
    out = _run([str(installed.bin / "ctxscope"), "--version"], cwd=tmp_path, env=env)
    assert out.strip() == f"ctxscope {__version__}"
    code = "import ctxapp, ctxcore, json; print(json.dumps([ctxapp.__file__, ctxcore.__file__]))"
    res = _run([str(installed.bin / "python"), "-c", code], cwd=tmp_path, env=env)
    for path in json.loads(res):
        assert Path(path).is_relative_to(installed.venv), f"{path} is not the installed copy"


@pytest.fixture()
def served(installed: Installed, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``ctxscope app`` of the installed package, started in an empty folder."""
    folder = tmp_path / "empty"
    folder.mkdir()
    port = free_port()
    log = tmp_path / "app.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [str(installed.bin / "ctxscope"), "app", "--port", str(port)],
            cwd=folder,
            env=_clean_env(tmp_path),
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"ctxscope app exited {proc.returncode}:\n{log.read_text()}")
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"ctxscope app did not answer:\n{log.read_text()}")
            time.sleep(0.25)
        yield url, folder
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=20)
    assert "demo trace files are copied" in log.read_text()


def test_ctxscope_app_from_an_empty_folder_serves_every_page_on_the_demo(
    served: tuple[str, Path], chromium: Any
) -> None:
    url, folder = served
    seeded = sorted((folder / "traces" / settings.DEMO_SUBDIR).glob("*.jsonl"))
    assert [f.name for f in seeded] == sorted(f.name for f in settings.DEMO_DIR.glob("*.jsonl"))
    first = json.loads(seeded[0].read_text().splitlines()[0])
    trace, session = first["trace_id"], first["session_id"]
    page = new_page(chromium)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        for spec in PAGES:
            goto(page, f"{url}/{spec.url(trace=trace, session=session)}")
            assert exceptions_text(page) == [], f"{spec.title}: {exceptions_text(page)}"
            body = page.locator('[data-testid="stMainBlockContainer"]').inner_text()
            assert body.strip(), f"{spec.title}: the page is blank"
            if spec.opens:
                shown = body + " ".join(
                    page.locator('[data-testid="stSelectbox"] input').evaluate_all(
                        "els => els.map(e => e.value)"
                    )
                )
                wanted = session if "{s}" in spec.opens else trace
                assert wanted in shown, f"{spec.title}: does not show {wanted!r} of the demo"
    finally:
        page.context.close()
    assert errors == [], f"JavaScript errors: {errors}"
    # the store the app made in the empty folder holds the whole demo
    assert (folder / "traces" / "ctxscope.duckdb").is_file()
