"""ctxcore's public API: ``__all__`` is explicit, sorted, and every name resolves."""

from __future__ import annotations

import subprocess
import sys

import ctxcore


def test_all_is_sorted_and_resolves() -> None:
    names = ctxcore.__all__
    assert names == sorted(names, key=lambda n: (not n.isupper(), n)), "keep __all__ sorted"
    for name in names:
        assert getattr(ctxcore, name) is not None, name


def test_public_names_are_the_real_objects() -> None:
    from ctxcore.diagnostics import diagnose
    from ctxcore.pipeline import build
    from ctxcore.store import Store, TraceStore, open_store

    assert ctxcore.build is build
    assert ctxcore.TraceStore is TraceStore
    assert ctxcore.Store is Store and ctxcore.open_store is open_store
    assert ctxcore.diagnose is diagnose


def test_importing_ctxcore_does_not_import_streamlit_or_duckdb() -> None:
    code = (
        "import sys, ctxcore; print(sorted(m for m in ('streamlit', 'duckdb') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
