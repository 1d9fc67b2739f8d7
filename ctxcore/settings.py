"""Settings: every default path, environment variable and fixed name, defined once.

The command line, the app, the store and the recorder all read their defaults from here, so a
path or a variable is spelled in one place. Each environment variable is documented in the
README's "Configuration" section; ``ENVIRONMENT`` below is the same table in code (a test
keeps the two in step).

This module imports nothing from ctxcore: every layer may use it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, get_args

# --------------------------------------------------------------------------- paths

#: The watched folder, and the home of the embedded default store.
DEFAULT_TRACES_DIR = Path("traces")
#: The default DuckDB store.
DEFAULT_DB = DEFAULT_TRACES_DIR / "ctxscope.duckdb"
#: Where ``ctxscope demo`` writes the demo traces.
DEFAULT_DEMO_DIR = DEFAULT_TRACES_DIR / "demo"
#: The app binds loopback on this port unless told otherwise.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8501

# --------------------------------------------------------------------------- environment

ENV_DB = "CTXSCOPE_DB"
ENV_TRACES = "CTXSCOPE_TRACES"
ENV_DB_MEMORY = "CTXSCOPE_DB_MEMORY"
ENV_REDACT_ON_INGEST = "CTXSCOPE_REDACT_ON_INGEST"
ENV_NO_WATCH = "CTXSCOPE_NO_WATCH"
ENV_CORPUS = "CTXSCOPE_CORPUS"
ENV_TOKEN = "CTXSCOPE_TOKEN"

#: name -> (default, meaning). The README's configuration table says the same.
ENVIRONMENT: dict[str, tuple[str, str]] = {
    ENV_DB: (str(DEFAULT_DB), "the DuckDB store the app and the commands use"),
    ENV_TRACES: (str(DEFAULT_TRACES_DIR), "the folder the app watches and the Recorder writes to"),
    ENV_DB_MEMORY: ("256MB", "DuckDB's memory limit; past it, DuckDB spills to disk"),
    ENV_REDACT_ON_INGEST: ("0", "1: redact secrets on ingest and import too, not only on export"),
    ENV_NO_WATCH: ("0", "1: the app does not watch its folder (tests and benches)"),
    ENV_CORPUS: ("corpus", "the transcripts the demo, golden files and benches are built from"),
    ENV_TOKEN: ("", "the app's access token; required when it binds a non-loopback --host"),
}

_TRUE = frozenset({"1", "true", "yes", "on"})


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


def db_path() -> Path:
    """The store: ``$CTXSCOPE_DB``, else ``traces/ctxscope.duckdb``."""
    return Path(_env(ENV_DB) or DEFAULT_DB)


def traces_dir() -> Path:
    """The watched folder: ``$CTXSCOPE_TRACES``, else ``traces/``."""
    return Path(_env(ENV_TRACES) or DEFAULT_TRACES_DIR)


def db_memory_limit() -> str:
    """DuckDB's ``memory_limit`` (``$CTXSCOPE_DB_MEMORY``, default 256MB)."""
    return _env(ENV_DB_MEMORY) or ENVIRONMENT[ENV_DB_MEMORY][0]


def redact_on_ingest() -> bool:
    """Whether ingest and import redact secrets too (``CTXSCOPE_REDACT_ON_INGEST=1``)."""
    return _env(ENV_REDACT_ON_INGEST).lower() in _TRUE


def watch_disabled() -> bool:
    """Whether the app skips its folder watcher (``CTXSCOPE_NO_WATCH=1``)."""
    return _env(ENV_NO_WATCH).lower() in _TRUE


def app_token() -> str:
    """The token the app asks for (``$CTXSCOPE_TOKEN``; empty: no token, loopback only)."""
    return _env(ENV_TOKEN)


def corpus_dir(default: Path) -> Path:
    """The transcript corpus (``$CTXSCOPE_CORPUS``, else ``default``)."""
    return Path(_env(ENV_CORPUS) or default)


# --------------------------------------------------------------------------- names

PresetName = Literal["ctxscope", "hello-agents", "hello-agents-book"]
#: The presets, the default first.
PRESET_NAMES: tuple[str, ...] = get_args(PresetName)
DEFAULT_PRESET: PresetName = "ctxscope"

#: The tiktoken encodings ctxscope ships (loaded offline from ``ctxcore/data/encodings``).
ENCODINGS: tuple[str, ...] = ("cl100k_base", "o200k_base")
#: The encoding used when a trace names none (the hello-agents package's own).
DEFAULT_ENCODING = "cl100k_base"

ImportFormat = Literal["auto", "trace", "openai", "anthropic", "otlp"]
#: What ``ctxscope import --format`` accepts (``auto`` detects it from the file).
IMPORT_FORMATS: tuple[str, ...] = get_args(ImportFormat)

SortKey = Literal["created_at", "turn", "used", "budget", "dropped", "summarized", "session_id"]
#: The columns the trace list can be sorted by, the default first.
SORT_KEYS: tuple[str, ...] = get_args(SortKey)

__all__ = [
    "DEFAULT_DB",
    "DEFAULT_DEMO_DIR",
    "DEFAULT_ENCODING",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DEFAULT_PRESET",
    "DEFAULT_TRACES_DIR",
    "ENCODINGS",
    "ENVIRONMENT",
    "ENV_CORPUS",
    "ENV_DB",
    "ENV_DB_MEMORY",
    "ENV_NO_WATCH",
    "ENV_REDACT_ON_INGEST",
    "ENV_TOKEN",
    "ENV_TRACES",
    "IMPORT_FORMATS",
    "ImportFormat",
    "PRESET_NAMES",
    "SORT_KEYS",
    "PresetName",
    "SortKey",
    "app_token",
    "corpus_dir",
    "db_memory_limit",
    "db_path",
    "redact_on_ingest",
    "traces_dir",
    "watch_disabled",
]
