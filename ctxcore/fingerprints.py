"""Fingerprints of code: what a stored value computed by ctxcore depends on, as a short hash.

The findings a store keeps are marked with the fingerprint of every ctxcore module
(``diagnostics.fingerprint``), a call's cost summary with that of the modules that make it
(``costing.summary_version``): a value stored under another fingerprint is computed again
(docs/design.md, "Diagnostics" and "Cost and prices").
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import sys
from pathlib import Path


@functools.cache
def source_fingerprint(root: Path, files: tuple[str, ...] | None = None) -> str:
    """The fingerprint of the package whose modules are under ``root`` (of those of its
    ``files`` alone, paths under ``root``, when given), Python's version (its regular
    expressions and Unicode tables) and the versions of the libraries that compute (numpy,
    pydantic, tiktoken, toktok-rs)."""
    digest = hashlib.sha256(sys.version.encode())
    for dist in ("numpy", "pydantic", "pydantic-core", "tiktoken", "toktok-rs"):
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            version = "-"
        digest.update(f"\0{dist}={version}".encode())
    for path in sorted(root.rglob("*.py")) if files is None else [root / f for f in sorted(files)]:
        digest.update(b"\0" + path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:20]


__all__ = ["source_fingerprint"]
