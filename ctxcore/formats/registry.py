"""The import formats: one table the rest of ctxscope reads (docs/design.md, "Formats").

Each ``Format`` names a format (``ctxscope import --format NAME``), says in one line what it
is, and points at the functions that detect it, read it, and (for an API the proxy records)
convert a live call. ``FORMATS`` is ordered by detection priority: ``detect`` asks each
detector in turn and the first that says yes names the format, so a more specific shape comes
before a more general one that also matches it (a LangGraph state holds ``messages`` as a chat
request does; an Anthropic request is a chat request with more). ``openai`` comes last and is
also what a value nothing recognises is read as (its error then lists what was tried).

The functions are named as ``"module:attribute"`` and imported on first use: the command line
reads the names and descriptions without importing a reader (``ctxscope --help`` stays fast).

Adding a format is one module (its detector, its reader, for a request API a
``request.RequestFormat``) and one entry here; docs/design.md, "How to add a format".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from importlib import import_module
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    from pathlib import Path

    from ctxcore.formats.request import Incremental
    from ctxcore.models import Trace

#: What ``--format`` takes besides a format's name: detect it from the file.
AUTO = "auto"
#: A format name, or ``auto`` (what ``ctxscope import --format`` and ``load`` accept).
FormatName = str


class Reader(Protocol):
    """Turns one parsed JSON value of a format into traces."""

    def __call__(
        self, data: Any, *, where: str, session_id: str, default_now: datetime | None
    ) -> list[Trace]: ...


class StreamReader(Protocol):
    """Reads a JSONL session log as a stream (``sessions.iter_file``)."""

    def __call__(
        self,
        path: Path,
        fmt: str,
        *,
        default_now: datetime | None,
        window: int | None,
        model: str | None,
    ) -> Any: ...


@dataclass(frozen=True)
class LiveConverter:
    """What a request format adds for a call the proxy recorded (``capture.calls``): the
    trace of the request and its reply, the reply as text lines, the usage summary of
    ``metadata.capture``, what a conversation keeps the same (its session fingerprint), and
    the session a request names itself, if its API has a field for it. ``trace`` takes the
    session's ``request.Incremental`` last (what its previous call derived)."""

    trace: Callable[
        [dict[str, Any], dict[str, Any] | None, str, datetime, Incremental | None], Trace
    ]
    reply: Callable[[dict[str, Any]], list[str]]
    usage: Callable[[dict[str, int]], dict[str, int]]
    conversation: Callable[[dict[str, Any]], list[Any]]
    session: Callable[[dict[str, Any]], tuple[str, str] | None] = lambda _request: None
    #: the API's requests name the response they continue (``previous_response_id``)
    continues: bool = False


@dataclass(frozen=True)
class Live:
    """A format the proxy records: the API's name in ``metadata.capture.api``, the request
    path recorded, which upstream serves it, how a streamed reply is put back together
    (``capture.sse``) and the format's ``LiveConverter``."""

    api: str
    path: bytes
    upstream: str
    assemble: str
    converter: str


@dataclass(frozen=True)
class Format:
    """One import format (see the module docstring)."""

    name: str
    #: one line for ``ctxscope import --help`` and the docs
    summary: str
    #: ``"module:function"``: whether a parsed JSON value is this format
    detector: str
    #: ``"module:function"``: a ``Reader``
    reader: str
    #: a JSONL file of requests holds one call of a conversation per line: turns in file order
    one_per_line: bool = False
    #: a JSONL session log read line by line (``"module:function"``, a ``StreamReader``)
    stream: str | None = None
    live: Live | None = None
    #: detection falls back to this format when no detector says yes
    fallback: bool = False
    #: a file that is not JSON (a text log, a zip): ``"module:function"`` telling from its
    #: name and first bytes whether it is this format; ``stream`` then reads the file
    sniff: str | None = None
    #: what a value of this format is known by: the fields of its object, of its items or
    #: of its lines (JSON), or the markers of its text (a ``sniff`` format); ``closest``
    #: measures a value nothing claims against them
    keys: tuple[str, ...] = ()

    def detects(self, data: Any) -> bool:
        """Whether this format's detector says ``data`` is of it."""
        return bool(cast(Callable[[Any], bool], resolve(self.detector))(data))

    def read(
        self,
        data: Any,
        *,
        where: str = "",
        session_id: str = "import",
        default_now: datetime | None = None,
    ) -> list[Trace]:
        """The traces ``data`` holds, read as this format."""
        reader = cast(Reader, resolve(self.reader))
        return reader(data, where=where, session_id=session_id, default_now=default_now)

    def converter(self) -> LiveConverter:
        """The format's live converter (only for a format with ``live``)."""
        if self.live is None:
            raise ValueError(f"{self.name}: the proxy records no calls of this format")
        return cast(LiveConverter, resolve(self.live.converter))

    def assembler(self) -> Callable[[str], Any]:
        """How a streamed reply of this format is put back together (only with ``live``)."""
        if self.live is None:
            raise ValueError(f"{self.name}: the proxy records no calls of this format")
        return cast(Callable[[str], Any], resolve(self.live.assemble))


@cache
def resolve(ref: str) -> Any:
    """What a ``"module:attribute"`` reference names (``attribute`` may be dotted:
    ``REQUESTS.read``)."""
    module, _, attr = ref.partition(":")
    obj: Any = import_module(module)
    for name in attr.split("."):
        obj = getattr(obj, name)
    return obj


_F = "ctxcore.formats."
_SESSIONS = _F + "sessions"

#: Every import format, in detection priority (see the module docstring).
FORMATS: tuple[Format, ...] = (
    Format(
        "trace",
        "ctxscope traces: a trace, a list or JSONL of them, or an exported snapshot",
        _F + "load:looks_like_trace",
        _F + "load:read_traces",
        keys=(
            "schema",
            "trace_id",
            "session_id",
            "turn",
            "input",
            "config",
            "result",
            "outcome",
            "traces",
        ),
    ),
    Format(
        "otlp",
        "OpenTelemetry traces and logs of model calls: OTLP JSON or protobuf, spans, attributes",
        _F + "otlp:looks_like",
        _F + "otlp:traces_from_otlp",
        keys=(
            "resourceSpans",
            "resourceLogs",
            "scopeSpans",
            "scopeLogs",
            "spans",
            "logRecords",
            "traceId",
            "spanId",
            "attributes",
        ),
    ),
    Format(
        "claude-code",
        "a Claude Code session log (JSONL): one trace per model call",
        _SESSIONS + ":looks_like_claude_code",
        _SESSIONS + ":read_claude_code",
        keys=(
            "type",
            "uuid",
            "parentUuid",
            "sessionId",
            "message",
            "isSidechain",
            "leafUuid",
            "userType",
            "cwd",
        ),
        stream=_SESSIONS + ":iter_file",
    ),
    Format(
        "codex",
        "an OpenAI Codex CLI rollout (JSONL): one trace per model call",
        _SESSIONS + ":looks_like_codex",
        _SESSIONS + ":read_codex",
        keys=("type", "payload", "timestamp"),
        stream=_SESSIONS + ":iter_file",
    ),
    Format(
        "pi",
        "a Pi coding agent session (JSONL, badlogic/pi-mono): one trace per model call",
        _SESSIONS + ":looks_like_pi",
        _SESSIONS + ":read_pi",
        keys=("type", "id", "parentId", "cwd", "message", "role", "content"),
        stream=_SESSIONS + ":iter_file",
    ),
    Format(
        "aider-llm-history",
        "aider's .aider.llm.history (text): one trace per 'TO LLM' block, its reply the outcome",
        _F + "aider:looks_like_llm_history",
        _F + "aider:read_llm_history",
        keys=("TO LLM", "LLM RESPONSE"),
        stream=_F + "aider:iter_file",
        sniff=_F + "aider:sniff_llm_history",
    ),
    Format(
        "aider-chat",
        "aider's .aider.chat.history.md (markdown): one trace per reply, a session per start",
        _F + "aider:looks_like_chat",
        _F + "aider:read_chat",
        keys=("# aider chat started at", "#### ", "> Tokens:"),
        stream=_F + "aider:iter_file",
        sniff=_F + "aider:sniff_chat",
    ),
    Format(
        "inspect",
        "an Inspect AI eval log (.eval zip or .json): one trace per model event",
        _F + "inspect_ai:looks_like",
        _F + "inspect_ai:read",
        keys=("version", "status", "eval", "plan", "results", "stats", "samples"),
        stream=_F + "inspect_ai:iter_file",
        sniff=_F + "inspect_ai:sniff",
    ),
    Format(
        "gemini-cli",
        "a Gemini CLI chat file (chats/session-*.json): one trace per model reply",
        _F + "gemini_cli:looks_like",
        _F + "gemini_cli:read",
        keys=(
            "sessionId",
            "projectHash",
            "startTime",
            "lastUpdated",
            "messages",
            "type",
            "content",
            "thoughts",
            "toolCalls",
            "tokens",
        ),
    ),
    Format(
        "opencode",
        "an OpenCode session (an export, a message list or recorded events): one trace per step",
        _F + "opencode:looks_like",
        _F + "opencode:read",
        keys=(
            "info",
            "parts",
            "properties",
            "sessionID",
            "messageID",
            "modelID",
            "providerID",
            "callID",
            "tokens",
        ),
    ),
    Format(
        "openhands",
        "an OpenHands trajectory (its event list): one trace per model call",
        _SESSIONS + ".openhands:looks_like",
        _SESSIONS + ":read_openhands",
        keys=(
            "id",
            "timestamp",
            "source",
            "action",
            "observation",
            "args",
            "tool_call_metadata",
            "llm_metrics",
        ),
    ),
    Format(
        "swe-agent",
        "a SWE-agent trajectory (.traj): one trace per model call",
        _SESSIONS + ".trajectories:is_swe_agent",
        _SESSIONS + ":read_swe_agent",
        keys=(
            "trajectory",
            "history",
            "info",
            "environment",
            "action",
            "observation",
            "thought",
            "response",
        ),
    ),
    Format(
        "mini-swe-agent",
        "a mini-swe-agent trajectory: one trace per model call",
        _SESSIONS + ".trajectories:is_mini_swe_agent",
        _SESSIONS + ":read_mini_swe_agent",
        keys=("messages", "info", "trajectory_format", "role", "content"),
    ),
    Format(
        "langchain",
        "serialized LangChain messages, or a LangGraph state holding them",
        _F + "langchain:looks_like",
        _F + "langchain:read",
        keys=("lc", "type", "id", "kwargs", "messages", "content", "additional_kwargs"),
    ),
    Format(
        "langfuse",
        "a Langfuse trace export (its observations): one trace per GENERATION",
        _F + "langfuse:looks_like",
        _F + "langfuse:read",
        keys=("traceId", "observations", "input", "output", "usageDetails", "startTime", "model"),
    ),
    Format(
        "litellm",
        "LiteLLM standard logging payloads (messages, response, usage, cost): one trace each",
        _F + "litellm:detects",
        _F + "litellm:read",
        keys=(
            "call_type",
            "messages",
            "response",
            "model",
            "response_cost",
            "startTime",
            "endTime",
            "trace_id",
        ),
        one_per_line=True,
    ),
    Format(
        "openai-agents",
        "an OpenAI Agents SDK trace export (traces and spans): one trace per model call",
        _F + "openai_agents:looks_like",
        _F + "openai_agents:read",
        keys=("object", "trace_id", "span_id", "span_data", "data", "workflow_name"),
    ),
    Format(
        "bedrock-converse",
        "an Amazon Bedrock Converse request (or request/response pairs)",
        _F + "bedrock:REQUESTS.detects",
        _F + "bedrock:REQUESTS.read",
        keys=(
            "modelId",
            "messages",
            "system",
            "inferenceConfig",
            "toolConfig",
            "role",
            "content",
            "output",
            "stopReason",
        ),
        one_per_line=True,
    ),
    Format(
        "gemini",
        "a Gemini generateContent request (or request/response pairs, or a bare contents list)",
        _F + "gemini:REQUESTS.detects",
        _F + "gemini:REQUESTS.read",
        keys=(
            "contents",
            "systemInstruction",
            "generationConfig",
            "tools",
            "role",
            "parts",
            "candidates",
            "usageMetadata",
        ),
        one_per_line=True,
    ),
    Format(
        "openai-responses",
        "an OpenAI Responses API request (or request/response pairs)",
        _F + "responses:REQUESTS.detects",
        _F + "responses:REQUESTS.read",
        keys=(
            "input",
            "instructions",
            "model",
            "tools",
            "previous_response_id",
            "output",
            "reasoning",
        ),
        one_per_line=True,
        live=Live(
            "openai.responses",
            b"/v1/responses",
            "openai",
            "ctxcore.capture.sse:responses",
            _F + "responses:LIVE",
        ),
    ),
    Format(
        "anthropic",
        "an Anthropic Messages request (or request/response pairs, or a bare message list)",
        _F + "anthropic:REQUESTS.detects",
        _F + "anthropic:REQUESTS.read",
        keys=(
            "messages",
            "system",
            "model",
            "max_tokens",
            "tools",
            "role",
            "content",
            "stop_reason",
            "usage",
        ),
        live=Live(
            "anthropic.messages",
            b"/v1/messages",
            "anthropic",
            "ctxcore.capture.sse:anthropic_message",
            _F + "anthropic:LIVE",
        ),
    ),
    Format(
        "openai",
        "an OpenAI chat request, a message list, a SWE-agent history or ShareGPT records",
        _F + "openai:looks_like",
        _F + "openai:read",
        keys=(
            "messages",
            "model",
            "tools",
            "role",
            "content",
            "tool_calls",
            "choices",
            "conversations",
            "from",
            "value",
        ),
        one_per_line=True,
        live=Live(
            "openai.chat",
            b"/v1/chat/completions",
            "openai",
            "ctxcore.capture.sse:chat_completion",
            _F + "openai:LIVE",
        ),
        fallback=True,
    ),
)

_BY_NAME = {f.name: f for f in FORMATS}
_BY_API = {f.live.api: f for f in FORMATS if f.live is not None}
#: What ``ctxscope import --format`` accepts, ``auto`` first.
NAMES: tuple[str, ...] = (AUTO, *(f.name for f in FORMATS))


def get(name: str) -> Format:
    """The format of that name (``KeyError`` for an unknown one: the callers validate)."""
    return _BY_NAME[name]


def detect(data: Any) -> Format:
    """The format of a parsed JSON value: the first whose detector says yes, else the
    fallback."""
    for f in FORMATS:
        if not f.fallback and f.detects(data):
            return f
    return next(f for f in FORMATS if f.fallback)


#: How many bytes of a file ``sniff_file`` shows the sniffers.
SNIFF_BYTES = 4096


def sniffing() -> tuple[Format, ...]:
    """The formats of files that are not JSON (text logs, archives), in table order."""
    return tuple(f for f in FORMATS if f.sniff is not None)


def sniff_file(name: str, head: bytes) -> Format | None:
    """The format of a file that is not JSON, from its name and first ``SNIFF_BYTES``
    (None: no such format claims it)."""
    for f in sniffing():
        assert f.sniff is not None
        if cast(Callable[[str, bytes], bool], resolve(f.sniff))(name, head):
            return f
    return None


#: How many items of a list (the value, or one of its fields) ``fields_of`` looks into.
FIELD_ITEMS = 20


def fields_of(data: Any) -> set[str]:
    """The field names a JSON value shows: its object's keys and those of the objects its
    lists hold (the value's own items, or a field's: ``{"messages": [{"role": …}]}``), one
    level down, the first ``FIELD_ITEMS`` of a list."""
    objects = [data] if isinstance(data, dict) else []
    if isinstance(data, list):
        objects = [x for x in data[:FIELD_ITEMS] if isinstance(x, dict)]
    found: set[str] = set()
    for obj in objects:
        found.update(str(k) for k in obj)
        for v in obj.values():
            if isinstance(v, list):
                found.update(str(k) for x in v[:FIELD_ITEMS] if isinstance(x, dict) for k in x)
    return found


def _best(shared: Iterator[tuple[Format, list[str]]]) -> tuple[Format, list[str]] | None:
    """The format sharing the most, the first in table order on a tie; None if none shares."""
    best: tuple[Format, list[str]] | None = None
    for f, names in shared:
        if names and (best is None or len(names) > len(best[1])):
            best = (f, names)
    return best


def closest(data: Any) -> tuple[Format, list[str]] | None:
    """For a JSON value no detector claims: the format whose ``keys`` it shares most, with
    the names shared (docs/design.md, "Formats"); None if it shares none."""
    have = fields_of(data)
    return _best((f, sorted(have.intersection(f.keys))) for f in FORMATS)


def closest_text(head: bytes) -> tuple[Format, list[str]] | None:
    """For a text file no sniffer claims: the format whose line markers begin most lines of
    its first bytes, with the markers found; None if none does. A format's markers are its
    ``keys`` that are not field names (``"#### "``, ``"TO LLM"``): a format whose file is
    not text (an Inspect ``.eval`` zip) has none."""
    lines = head.decode("utf-8", "replace").splitlines()
    return _best(
        (f, [k for k in f.keys if not k.isidentifier() and any(ln.startswith(k) for ln in lines)])
        for f in sniffing()
    )


def live_formats() -> Iterator[Format]:
    """The formats the proxy records, in table order."""
    return (f for f in FORMATS if f.live is not None)


def by_api(api: str) -> Format:
    """The format whose live calls carry that API name."""
    return _BY_API[api]


def help_lines() -> str:
    """Each format's name and one line, a line each (``ctxscope import --help``)."""
    width = max(len(f.name) for f in FORMATS) + 2
    return "\n".join(f"  {f.name:<{width}}{f.summary}" for f in FORMATS)


__all__ = [
    "AUTO",
    "FORMATS",
    "Format",
    "FormatName",
    "Live",
    "LiveConverter",
    "NAMES",
    "Reader",
    "StreamReader",
    "by_api",
    "closest",
    "closest_text",
    "detect",
    "fields_of",
    "get",
    "help_lines",
    "live_formats",
    "resolve",
    "sniff_file",
    "sniffing",
]
