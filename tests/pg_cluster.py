"""A throwaway PostgreSQL cluster for the tests of the PostgreSQL store: Debian's server
(``make test`` installs it: scripts/setup_postgresql.sh), ``initdb`` into a temporary folder,
a free port on 127.0.0.1 and a unix socket in that folder, stopped (and removed) at the end.

PostgreSQL refuses to run as root, and CI runs as root: the cluster then belongs to the
``postgres`` user Debian's package makes, and its commands run through ``runuser`` (as
Debian's pg_ctlcluster does). Durability is traded for speed (``fsync=off``): a test cluster
lives as long as its test session. One cluster per pytest process: each pytest-xdist worker
starts its own.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg

#: where Debian puts the server's programs (the newest version installed is used)
PG_LIB = Path("/usr/lib/postgresql")
SUPERUSER = "ctxscope"


def bin_dir() -> Path:
    """The newest installed server's bin folder; an error saying how to install one."""
    versions = sorted(
        (p for p in PG_LIB.glob("*/bin") if (p / "initdb").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if not versions:
        raise RuntimeError(
            "no PostgreSQL server under /usr/lib/postgresql: run `make test` (as root it "
            "installs it) or `sudo apt-get install -y postgresql`"
        )
    return versions[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """One running server in a folder of its own, with a database per test."""

    def __init__(self) -> None:
        self.bin = bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="ctxscope-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._as: list[str] = []
        if os.geteuid() == 0:  # the server refuses root: it runs as Debian's postgres user
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self._names = itertools.count(1)

    def _run(self, *args: str) -> None:
        done = subprocess.run(
            [*self._as, *args], capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode:
            raise RuntimeError(f"{args[0]} failed: {done.stderr.strip() or done.stdout.strip()}")

    def start(self) -> None:
        self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-U", SUPERUSER, "-A", "trust",
            "-E", "UTF8", "--locale=C.UTF-8", "--no-sync",
        )  # fmt: skip
        self._pg_ctl("start")

    def _pg_ctl(self, action: str, mode: str = "fast") -> None:
        opts = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        args = ["-D", str(self.data), "-w", "-t", "60", "-m", mode]
        if action != "stop":
            args += ["-o", opts, "-l", str(self.root / "server.log")]
        self._run(str(self.bin / "pg_ctl"), action, *args)

    def restart(self) -> None:
        """Stop the server at once (its clients' connections break) and start it again."""
        self._pg_ctl("restart", mode="immediate")

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError, OSError, subprocess.SubprocessError):
            self._pg_ctl("stop", mode="immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, dbname: str = "postgres", user: str = SUPERUSER, password: str = "") -> str:
        """A URL of this server over TCP (as a team's would be)."""
        secret = f":{password}" if password else ""
        return f"postgresql://{user}{secret}@127.0.0.1:{self.port}/{dbname}"

    def admin(self) -> psycopg.Connection:
        return psycopg.connect(self.url(), autocommit=True)

    def new_database(self) -> str:
        """A new empty database; its URL."""
        name = f"t{os.getpid()}_{next(self._names)}"
        with self.admin() as con:
            con.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


@contextlib.contextmanager
def running() -> Iterator[Cluster]:
    cluster = Cluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
