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
#: The demo traces, shipped in the package: ``ctxscope app`` copies them into ``<traces>/demo``
#: on a first start in an empty folder, and ``ctxscope demo`` regenerates them here.
DEMO_DIR = Path(__file__).resolve().parent / "data" / "demo"
#: Where the app looks for demo traces to load into an empty store: ``<traces>/demo``.
DEMO_SUBDIR = "demo"
#: The app binds loopback on this port unless told otherwise.
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8501

# --------------------------------------------------------------------------- live capture

#: ``ctxscope proxy`` (and ``ctxscope run``) listen on 127.0.0.1 at this port.
DEFAULT_PROXY_PORT = 4040
#: ``ctxscope collect`` listens on 127.0.0.1 at this port: the OTLP/HTTP default.
DEFAULT_OTLP_PORT = 4318
#: Where the proxy forwards model calls (scheme and host; the request's ``/v1/...`` path is kept).
DEFAULT_UPSTREAM_OPENAI = "https://api.openai.com"
DEFAULT_UPSTREAM_ANTHROPIC = "https://api.anthropic.com"
#: The variables the OpenAI and Anthropic SDKs read their base URL from; ``ctxscope run``
#: points them at the proxy for the command it runs.
ENV_OPENAI_BASE_URL = "OPENAI_BASE_URL"
ENV_ANTHROPIC_BASE_URL = "ANTHROPIC_BASE_URL"
#: The subfolder of the watched folder that captured calls are appended to.
LIVE_SUBDIR = "live"
#: how an imported trace's builder name starts (``import/claude-code``, ``import/openai``...):
#: its prompt is what another system sent, not a build of a ctxscope preset
IMPORT_BUILDER_PREFIX = "import/"

# --------------------------------------------------------------------------- environment

ENV_DB = "CTXSCOPE_DB"
ENV_TRACES = "CTXSCOPE_TRACES"
ENV_DB_MEMORY = "CTXSCOPE_DB_MEMORY"
ENV_REDACT_ON_INGEST = "CTXSCOPE_REDACT_ON_INGEST"
ENV_NO_WATCH = "CTXSCOPE_NO_WATCH"
ENV_CORPUS = "CTXSCOPE_CORPUS"
ENV_TOKEN = "CTXSCOPE_TOKEN"
ENV_PRICES = "CTXSCOPE_PRICES"

#: name -> (default, meaning). The README's configuration table says the same.
ENVIRONMENT: dict[str, tuple[str, str]] = {
    ENV_DB: (str(DEFAULT_DB), "the DuckDB store the app and the commands use"),
    ENV_TRACES: (str(DEFAULT_TRACES_DIR), "the folder the app watches and the Recorder writes to"),
    ENV_DB_MEMORY: ("256MB", "DuckDB's memory limit; past it, DuckDB spills to disk"),
    ENV_REDACT_ON_INGEST: ("0", "1: redact secrets on ingest and import too, not only on export"),
    ENV_NO_WATCH: ("0", "1: the app does not watch its folder (tests and benches)"),
    ENV_CORPUS: ("corpus", "the transcripts the demo, golden files and benches are built from"),
    ENV_TOKEN: ("", "the app's access token; required when it binds a non-loopback --host"),
    ENV_PRICES: ("", "a price table (JSON) whose rows replace the shipped ones per model"),
}

_TRUE = frozenset({"1", "true", "yes", "on"})


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


def db_path() -> Path:
    """The store: ``$CTXSCOPE_DB``, else ``traces/ctxscope.duckdb``."""
    return Path(_env(ENV_DB) or DEFAULT_DB)


def db_target() -> str:
    """``--db``'s default: ``$CTXSCOPE_DB`` as given when it is a URL (a team store,
    ``postgresql://…``: a ``Path`` would fold its ``//``), else ``db_path()``."""
    value = _env(ENV_DB)
    return value if "://" in value else str(db_path())


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


# --------------------------------------------------------------------------- limits

# What ctxscope refuses, and why each limit sits where it does: a hostile or broken file
# costs one error line and bounded memory, never the file, the store or the process. The
# README's "Limits" table says the same (a test keeps the two in step).

#: Characters of one text (a packet's or message's content, the query, the instructions).
MAX_CONTENT_CHARS = 10 * 1024 * 1024
#: Bytes of one line of a JSONL trace file. A longer line is refused while it is read
#: (one error line; it is never held in memory whole).
MAX_LINE_BYTES = 128 * 1024 * 1024
#: Bytes of a single-document JSON file (``.json``, or what a ``.gz`` unpacks to), which is
#: parsed whole: JSONL has no such limit.
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024
#: Levels of nesting of free JSON (metadata, tool parameters): deeper values cannot be read
#: back by every JSON reader ctxscope uses.
MAX_JSON_DEPTH = 64
#: Token counts, budgets and windows: far beyond any model, and their sums over every
#: packet of a trace still fit the store's 64-bit columns.
MAX_TOKENS = 2**40
#: Turns, ranks and item counts: the store keeps them in 32-bit columns (any other integer
#: of a trace is a signed 64-bit one).
MAX_INT32 = 2**31 - 1
#: Error rows recorded (and printed) per file and ingest run; the rest are counted in one
#: more row.
MAX_ERRORS_PER_FILE = 1000
#: Bytes of the shared parts of one file held while it is read (``sharing.PartTable``: any
#: later line may name any of them). Past it, a line that defines parts is refused (one
#: error line each); lines naming only parts already held are read. A shared file of a
#: 170 MB session log holds ~0.3 GB of parts.
MAX_SHARED_PARTS_BYTES = 2 * 1024**3

#: name -> (value as the README writes it, what it limits). The README's table says the same.
LIMITS: dict[str, tuple[str, str]] = {
    "MAX_CONTENT_CHARS": ("10 M characters", "one packet's or message's text, the query"),
    "MAX_LINE_BYTES": ("128 MiB", "one line of a JSONL trace file (refused while it is read)"),
    "MAX_DOCUMENT_BYTES": ("64 MiB", "a single-document .json file (unpacked)"),
    "MAX_JSON_DEPTH": ("64 levels", "nesting of metadata and tool parameters"),
    "MAX_TOKENS": ("2^40", "token counts, budgets and windows"),
    "MAX_INT32": ("2^31 - 1", "turns, ranks and item counts (other integers: 64-bit)"),
    "MAX_ERRORS_PER_FILE": ("1,000", "error rows stored and printed per file and run"),
    "MAX_SHARED_PARTS_BYTES": ("2 GiB", "the shared parts of one file held while it is read"),
}

# --------------------------------------------------------------------------- names

PresetName = Literal[
    "ctxscope",
    "hello-agents",
    "hello-agents-book",
    "recorded",
    "langchain-context-editing",
    "langchain-summarization",
    "langchain-trim",
    "anthropic-context-editing",
    "auto-compact",
    "swe-agent-masking",
    "openhands-observation-masking",
    "openhands-recent-events",
    "openhands-conversation-window",
    "openhands-summarizing",
    "masking-summary-hybrid",
]
#: The presets, the default first.
PRESET_NAMES: tuple[str, ...] = get_args(PresetName)
DEFAULT_PRESET: PresetName = "ctxscope"

#: The tiktoken encodings ctxscope ships (loaded offline from ``ctxcore/data/encodings``).
ENCODINGS: tuple[str, ...] = ("cl100k_base", "o200k_base")
#: The encoding used when a trace names none (the hello-agents package's own).
DEFAULT_ENCODING = "cl100k_base"

SortKey = Literal["created_at", "turn", "used", "budget", "dropped", "summarized", "session_id"]
#: The columns the trace list can be sorted by, the default first.
SORT_KEYS: tuple[str, ...] = get_args(SortKey)

__all__ = [
    "DEFAULT_DB",
    "DEMO_DIR",
    "DEMO_SUBDIR",
    "DEFAULT_ENCODING",
    "DEFAULT_HOST",
    "DEFAULT_OTLP_PORT",
    "DEFAULT_PORT",
    "DEFAULT_PRESET",
    "DEFAULT_PROXY_PORT",
    "DEFAULT_TRACES_DIR",
    "DEFAULT_UPSTREAM_ANTHROPIC",
    "DEFAULT_UPSTREAM_OPENAI",
    "ENCODINGS",
    "ENVIRONMENT",
    "ENV_ANTHROPIC_BASE_URL",
    "ENV_CORPUS",
    "ENV_DB",
    "ENV_DB_MEMORY",
    "ENV_NO_WATCH",
    "ENV_OPENAI_BASE_URL",
    "ENV_REDACT_ON_INGEST",
    "ENV_TOKEN",
    "ENV_TRACES",
    "LIMITS",
    "LIVE_SUBDIR",
    "MAX_CONTENT_CHARS",
    "MAX_DOCUMENT_BYTES",
    "MAX_ERRORS_PER_FILE",
    "MAX_INT32",
    "MAX_JSON_DEPTH",
    "MAX_LINE_BYTES",
    "MAX_SHARED_PARTS_BYTES",
    "MAX_TOKENS",
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
