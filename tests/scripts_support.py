"""The repository's scripts as modules, for the tests that check what they write (the
README's tables) or call their functions (the golden prompts)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def script(name: str) -> ModuleType:
    """``scripts/<name>.py`` loaded as a module of its own (each script puts what it imports
    on the path itself)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def readme() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")
