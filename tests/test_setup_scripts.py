"""scripts/setup_browser.sh and scripts/setup_postgresql.sh (run by `make test`) wait while
another apt holds apt's locks (scripts/apt_install.sh, which both source).

apt-get, id and sleep are stand-ins on PATH: the real ones would need root, a missing package
and another apt holding the lock. The stand-in apt-get answers the way apt 2.6 does when the
lists lock is held (checked on Debian 12: `apt-get update` fails at once, whatever
`DPkg::Lock::Timeout` says).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "setup_browser.sh"
POSTGRESQL = ROOT / "scripts" / "setup_postgresql.sh"

FAKE_APT = """#!/usr/bin/env bash
echo "$*" >> "{log}"
n=$(grep -c . "{log}")
if [ "$n" -le {busy} ]; then
  echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)" >&2
  echo "E: Unable to lock directory /var/lib/apt/lists/" >&2
  exit 100
fi
echo "Reading package lists..."
"""


def run_setup(
    tmp_path: Path, busy: int, wait_s: int = 600, script: Path = SCRIPT
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apt.log"
    log.touch()
    stand_ins = {
        "apt-get": FAKE_APT.format(log=log, busy=busy),
        "id": "#!/usr/bin/env bash\necho 0\n",
        "sleep": "#!/usr/bin/env bash\nexit 0\n",  # no real waiting in a test
    }
    for name, text in stand_ins.items():
        (bin_dir / name).write_text(text, encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    env["CTXSCOPE_CHROMIUM"] = str(tmp_path / "no-chromium")
    env["APT_LOCK_WAIT_S"] = str(wait_s)
    env["PG_LIB"] = str(tmp_path / "no-postgresql")
    proc = subprocess.run(
        ["bash", str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    return proc, log.read_text(encoding="utf-8").splitlines()


def test_waits_for_the_apt_lock_and_says_so(tmp_path: Path) -> None:
    proc, calls = run_setup(tmp_path, busy=3)
    assert proc.returncode == 0, proc.stderr
    # update fails three times on the lock, then runs; then the install
    assert [c.split()[1] for c in calls] == ["update"] * 4 + ["install"]
    assert "chromium" in calls[-1].split()
    waiting = [ln for ln in proc.stderr.splitlines() if "waiting for apt's lock" in ln]
    assert len(waiting) == 1, proc.stderr  # said once, with what holds it
    assert "/var/lib/apt/lists/lock" in waiting[0] and "process 4242" in waiting[0]
    assert "installed chromium" in proc.stdout


def test_gives_up_after_the_wait_with_one_line(tmp_path: Path) -> None:
    proc, calls = run_setup(tmp_path, busy=1000, wait_s=20)
    assert proc.returncode != 0
    assert len(calls) == 5  # tried at 0, 5, 10, 15 and 20 s
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("setup_browser: gave up after 20 s waiting for apt's lock")
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_postgresql_setup_waits_for_the_apt_lock_too(tmp_path: Path) -> None:
    proc, calls = run_setup(tmp_path, busy=2, script=POSTGRESQL)
    assert proc.returncode == 0, proc.stderr
    assert [c.split()[1] for c in calls] == ["update"] * 3 + ["install"]
    assert "postgresql" in calls[-1].split()
    waiting = [ln for ln in proc.stderr.splitlines() if "waiting for apt's lock" in ln]
    assert len(waiting) == 1 and waiting[0].startswith("setup_postgresql: "), proc.stderr
    assert "installed postgresql" in proc.stdout


def test_postgresql_setup_gives_up_with_one_line(tmp_path: Path) -> None:
    proc, calls = run_setup(tmp_path, busy=1000, wait_s=10, script=POSTGRESQL)
    assert proc.returncode != 0
    assert len(calls) == 3  # tried at 0, 5 and 10 s
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("setup_postgresql: gave up after 10 s waiting for apt's lock")
    assert "run 'make postgresql' again" in last
