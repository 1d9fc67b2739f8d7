"""``ctxcore.replay`` is a package: the name on the root is the package whatever was imported
first, the function is ``ctxcore.replay.replay``, and the worker-pool module stays light
(docs/design.md, "Parts and allowed imports")."""

from __future__ import annotations

import subprocess
import sys


def run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return out.stdout.strip()


def test_ctxcore_replay_is_the_package_in_either_import_order() -> None:
    # the root first: its lazy attribute imports the package
    first = run(
        "import ctxcore, types; r = ctxcore.replay; "
        "print(isinstance(r, types.ModuleType), r.__name__, r.replay.__module__, "
        "ctxcore.ReplayReport is r.ReplayReport)"
    )
    assert first == "True ctxcore.replay ctxcore.replay.run True"
    # the package first (as ctxcore.testing and the CLI import it): the same objects
    second = run(
        "from ctxcore.replay import replay; import ctxcore, ctxcore.replay.jobs; "
        "print(ctxcore.replay.replay is replay, ctxcore.replay.__name__)"
    )
    assert second == "True ctxcore.replay"


def test_the_worker_pool_module_imports_nothing_heavy() -> None:
    """``ctxscope replay --all`` starts the workers' server from ``ctxcore.replay.pool``
    before the replay's own imports, which the server's then overlap: importing the pool
    (and with it the package) loads neither the models nor the replay itself."""
    heavy = ("pydantic", "numpy", "ctxcore.models", "ctxcore.replay.jobs", "ctxcore.replay.run")
    loaded = run(
        f"import sys, ctxcore.replay.pool; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    assert loaded == "[]"
    # and a public name then loads its module
    names = run(
        "import sys, ctxcore.replay as r; r.TraceJson; "
        "print('ctxcore.replay.stored' in sys.modules, 'ctxcore.replay.jobs' in sys.modules)"
    )
    assert names == "True False"
