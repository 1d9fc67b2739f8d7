"""aider's own logs, two text formats, one trace per model call (docs/design.md, "Formats").

- ``aider-llm-history`` (``.aider.llm.history``, ``--llm-history-file``): every request aider
  sent, whole. A block starts with ``TO LLM <time>`` and lists the messages, each after a
  ``-------`` line, every line of a message prefixed with its role (``SYSTEM``, ``USER``,
  ``ASSISTANT``: aider's ``format_messages``); the reply follows as ``LLM RESPONSE <time>``
  and its ``ASSISTANT`` lines. One block is one call: its messages are the whole prompt (the
  system prompt, the repo map and files aider put in user messages, the conversation); the
  reply is the call's outcome. The log records neither the model nor the usage.
- ``aider-chat`` (``.aider.chat.history.md``): the chat as markdown. ``# aider chat started
  at <time>`` starts a session; ``#### `` lines are what the user typed (``#### /cmd`` a
  command aider ran itself, never sent); ``> `` lines are aider's terminal output (the
  command line, the model, ``Tokens: … sent, … received``, applied edits); every other line
  is the assistant's reply. This is how aider reads the file back itself
  (``split_chat_history_markdown``). Each run of reply lines is one call; its context is the
  session's messages before it. aider sends more than the chat records (its system prompt,
  the files and repo map, a lint or test error it reflects back): each trace says so. The
  ``Tokens:`` line after a reply is the call's usage when it gives whole numbers
  (``11,140 sent``; ``2.3k`` is rounded and kept as text).

Both are read line by line: a line that cannot be read (invalid UTF-8, a history line with
no role) is one error naming ``file:line``, and the rest of the file is imported.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ctxcore.errors import CtxscopeError, ImportFormatError
from ctxcore.formats.accounting import Tally
from ctxcore.formats.norm import NormMessage
from ctxcore.formats.sessions import SessionImport
from ctxcore.formats.sessions.calls import Call, Segment
from ctxcore.loading import decode_line, iter_lines

LLM_HISTORY = "aider-llm-history"
CHAT = "aider-chat"
TO_LLM = re.compile(r"^TO LLM (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S*)\s*$")
RESPONSE = re.compile(r"^LLM RESPONSE (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S*)\s*$")
SEPARATOR = "-------"
ROLE_LINE = re.compile(r"^(SYSTEM|USER|ASSISTANT|TOOL|FUNCTION)(?: (.*))?$")
CHAT_START = re.compile(r"^# aider chat started at (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\s*$")
MODEL_LINE = re.compile(r"^(?:Main model|Models?): (\S+)")
TOKENS_LINE = re.compile(
    r"^Tokens: ([\d,.]+k?) sent(?:, ([\d,.]+k?) cache write)?(?:, ([\d,.]+k?) cache hit)?"
    r", ([\d,.]+k?) received\."
)
COST = re.compile(r"Cost: \$([\d.]+) message|Cost: \$([\d.]+) request")
#: What the markdown chat does not record of a call's prompt.
CHAT_MISSING = ("system prompt", "files and repo map", "messages aider added itself")
CHAT_WARNING = (
    "reconstructed from aider's chat history, which records what the user typed and the "
    "replies, not aider's system prompt, the files and repo map it sends, nor the messages "
    "it adds itself (a lint or test error it reflects back): this input lacks them"
)
LLM_WARNING = "aider's LLM history does not record the model or the usage of its calls"


def _head_line(head: bytes) -> str:
    """The first non-blank line of a file's first bytes, as text."""
    text = head.removeprefix(b"\xef\xbb\xbf").decode("utf-8", "replace")
    return next((ln for ln in text.splitlines() if ln.strip()), "")


def sniff_llm_history(name: str, head: bytes) -> bool:
    """Whether a file is an aider LLM history: it starts with a ``TO LLM <time>`` line."""
    return bool(TO_LLM.match(_head_line(head)))


def sniff_chat(name: str, head: bytes) -> bool:
    """Whether a file is an aider chat history: it starts with ``# aider chat started at``."""
    return bool(CHAT_START.match(_head_line(head)))


def looks_like_llm_history(data: Any) -> bool:
    """The registry's detector: a text (not a parsed JSON value) that is an LLM history."""
    return isinstance(data, str) and sniff_llm_history("", data[:4096].encode())


def looks_like_chat(data: Any) -> bool:
    """The registry's detector: a text (not a parsed JSON value) that is a chat history."""
    return isinstance(data, str) and sniff_chat("", data[:4096].encode())


def _time(text: str, fmt: str | None = None) -> datetime | None:
    try:
        when = datetime.strptime(text, fmt) if fmt else datetime.fromisoformat(text)
    except ValueError:
        return None
    # aider writes its local time without a zone: read as UTC, and said so in the trace
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


@dataclass(eq=False)
class _Lines:
    """A text file's lines as ``(number, text)``; a line that cannot be decoded is its
    error (``file:line: why``) in ``errors``, and is left out."""

    name: str
    errors: list[str] = field(default_factory=list)

    def read(self, source: Iterable[tuple[int, bytes]]) -> Iterator[tuple[int, str]]:
        for n, raw in source:
            try:
                yield n, decode_line(raw.removesuffix(b"\r"), f"{self.name}:{n}")
            except CtxscopeError as exc:
                self.errors.append(str(exc))


def _message(
    role: str, lines: list[str], line: int, tally: Tally, *, count: bool = True
) -> NormMessage:
    """One message of a prompt: a system part, or a conversation message counted as one."""
    text = "\n".join(lines)
    if role == "system":
        tally.add("system_parts")
        return NormMessage(index=line, role="system", text=text, id=f"system-{line}")
    if count:
        tally.add("messages")
    return NormMessage(index=line, role=role, text=text, id=f"msg-{line}")


def _segment(label: str, msgs: list[NormMessage], tally: Tally) -> Segment:
    seg = Segment(label=label, norm=msgs, counts=dict(tally.counts))
    seg.entries()  # a message the trace contract refuses is this place's error
    return seg


# --------------------------------------------------------------------------- LLM history


@dataclass(eq=False)
class _Block:
    """One ``TO LLM`` block being read: its messages, then its reply."""

    line: int
    sent: datetime | None
    messages: list[tuple[str, int, list[str]]] = field(default_factory=list)
    reply: list[str] | None = None
    reply_line: int | None = None
    replied: datetime | None = None


class LlmHistoryReader:
    """Reads an LLM history block by block; each block is one call."""

    def __init__(self, name: str, session: str, now: datetime) -> None:
        self.name, self.session, self.now = name, session, now
        self.lines = _Lines(name)
        self.turns = 0
        self.reported = 0

    @property
    def errors(self) -> list[str]:
        """Every line that could not be read (``file:line: why``)."""
        return self.lines.errors

    def calls(self, source: Iterable[tuple[int, bytes]]) -> Iterator[Call]:
        """The calls, one per ``TO LLM`` block, in file order."""
        block: _Block | None = None
        for n, text in self.lines.read(source):
            start = TO_LLM.match(text)
            if start:
                if block is not None:
                    yield from self._call(block)
                block = _Block(n, _time(start.group(1)))
            elif block is None:
                if text.strip():
                    self._bad(n, "text before the first 'TO LLM <time>' line")
            else:
                self._line(block, n, text)
        if block is not None:
            yield from self._call(block)

    def _bad(self, n: int, why: str) -> None:
        self.errors.append(f"{self.name}:{n}: {why}")

    def _line(self, block: _Block, n: int, text: str) -> None:
        """One line inside a block: a separator, the reply's start, or a message line."""
        reply = RESPONSE.match(text)
        if reply:
            block.reply, block.reply_line = [], n
            block.replied = _time(reply.group(1))
            return
        if text == SEPARATOR and block.reply is None:
            block.messages.append(("", n + 1, []))
            return
        m = ROLE_LINE.match(text)
        if m is None:
            if text.strip():
                self._bad(
                    n,
                    "not a line of aider's LLM history (ROLE text, '-------', "
                    "'TO LLM <time>' or 'LLM RESPONSE <time>')",
                )
            return
        role, body = m.group(1).lower(), m.group(2) or ""
        if block.reply is not None:
            block.reply.append(body)
            return
        if not block.messages or (block.messages[-1][0] and block.messages[-1][0] != role):
            block.messages.append((role, n, []))
        last = block.messages[-1]
        if not last[0]:
            block.messages[-1] = (role, last[1], last[2])
        block.messages[-1][2].append(body)

    def _call(self, block: _Block) -> Iterator[Call]:
        """The call a block is (none for a block with no message: its error)."""
        tally = Tally(LLM_HISTORY)
        role_of = {"function": "tool", "tool": "tool"}
        msgs = [
            _message(role_of.get(role, role), body, line, tally)
            for role, line, body in block.messages
            if role
        ]
        if not msgs:
            self._bad(block.line, "a 'TO LLM' block with no message")
            return
        try:
            seg = _segment(f"line {block.line}", msgs, tally)
        except ImportFormatError as exc:
            self._bad(block.line, str(exc))
            return
        log: dict[str, Any] = {"file": self.name, "line": block.line}
        if block.reply_line is not None:
            log["response_line"] = block.reply_line
        if block.replied is not None:
            log["replied_at"] = block.replied.isoformat()
        call = Call(
            session_id=self.session,
            turn=self.turns,
            key=f"line-{block.line}",
            context=[seg],
            created_at=block.sent or self.now,
            output="\n".join(block.reply) if block.reply else None,
            metadata={"session_log": log},
            recorded=["messages", "system prompt"],
            reconstructed=["model", "usage"],
            warnings=[LLM_WARNING],
            skipped=self.errors[self.reported :],
        )
        self.reported = len(self.errors)
        self.turns += 1
        yield call


# --------------------------------------------------------------------------- chat markdown


@dataclass(eq=False)
class _Session:
    """One ``# aider chat started at`` section: its messages so far, as segments."""

    id: str
    started: datetime | None
    model: str | None = None
    context: list[Segment] = field(default_factory=list)
    turns: int = 0
    commands: int = 0


@dataclass(eq=False)
class _Run:
    """A run of lines of one kind: ``user`` (``####``), ``tool`` (``>``) or ``assistant``."""

    kind: str
    line: int
    lines: list[str] = field(default_factory=list)


class ChatReader:
    """Reads a chat history run by run: each run of reply lines is one call, finished when
    the terminal output after it (its ``Tokens:`` line) has been read."""

    def __init__(self, name: str, session: str, now: datetime) -> None:
        self.name, self.stem, self.now = name, session, now
        self.lines = _Lines(name)
        self.session: _Session | None = None
        self.pending: Call | None = None
        self.reported = 0

    @property
    def errors(self) -> list[str]:
        """Every line that could not be read (``file:line: why``)."""
        return self.lines.errors

    def calls(self, source: Iterable[tuple[int, bytes]]) -> Iterator[Call]:
        """The calls, one per reply, in file order."""
        run: _Run | None = None
        for n, text in self.lines.read(source):
            start = CHAT_START.match(text)
            kind = "start" if start else _kind(text)
            if run is not None and kind != run.kind:
                yield from self._end(run)
                run = None
            if start:
                yield from self._flush()
                stamp = start.group(1)
                started = _time(stamp, "%Y-%m-%d %H:%M:%S")
                self.session = _Session(f"{self.stem}@{stamp.replace(' ', 'T')}", started)
                continue
            if run is None:
                run = _Run(kind, n)
            run.lines.append(_strip(text, kind))
        if run is not None:
            yield from self._end(run)
        yield from self._flush()

    def _flush(self) -> Iterator[Call]:
        if self.pending is not None:
            yield self.pending
            self.pending = None

    def _current(self) -> _Session:
        if self.session is None:  # a file cut before its first header
            self.session = _Session(self.stem, None)
        return self.session

    def _end(self, run: _Run) -> Iterator[Call]:
        """A finished run: a reply is a call (the one before it is then done), a user run
        the messages it adds, terminal output what it says about the pending call."""
        sess = self._current()
        if run.kind == "tool":
            self._terminal(sess, run)
            return
        text = "\n".join(run.lines).strip()
        if not text:
            return
        if run.kind == "user":
            self._user(sess, run)
            return
        yield from self._flush()
        self.pending = self._reply(sess, run, text)

    def _terminal(self, sess: _Session, run: _Run) -> None:
        for text in run.lines:
            model = MODEL_LINE.match(text)
            if model and sess.model is None:
                sess.model = model.group(1)
            tokens = TOKENS_LINE.match(text)
            if tokens and self.pending is not None:
                _usage(self.pending, tokens, text)
        if self.pending is not None:
            self.pending.metadata["session_log"]["terminal_lines"] += len(run.lines)

    def _user(self, sess: _Session, run: _Run) -> None:
        """What the user typed: one message per input (a blank line ends one), a ``/``
        command left out (aider runs it; the model never sees it)."""
        for group in _inputs(run.lines):
            if group[0].startswith("/"):
                sess.commands += 1
                continue
            tally = Tally(CHAT)
            msg = _message("user", group, run.line, tally)
            msg.id = f"msg-{run.line}"
            try:
                sess.context.append(_segment(f"line {run.line}", [msg], tally))
            except ImportFormatError as exc:
                self.errors.append(f"{self.name}:{run.line}: {exc}")

    def _reply(self, sess: _Session, run: _Run, text: str) -> Call:
        tally = Tally(CHAT)
        msg = _message("assistant", [text], run.line, tally)
        log: dict[str, Any] = {
            "file": self.name,
            "line": run.line,
            "aider_session": sess.id,
            "terminal_lines": 0,
            "commands_before": sess.commands,
        }
        call = Call(
            session_id=sess.id,
            turn=sess.turns,
            key=f"line-{run.line}",
            context=list(sess.context),
            created_at=sess.started or self.now,
            model=sess.model,
            output=text,
            metadata={"session_log": log},
            recorded=["messages"],
            reconstructed=list(CHAT_MISSING),
            warnings=[CHAT_WARNING],
            skipped=self.errors[self.reported :],
        )
        self.reported = len(self.errors)
        sess.turns += 1
        try:
            sess.context.append(_segment(f"line {run.line}", [msg], tally))
        except ImportFormatError as exc:
            self.errors.append(f"{self.name}:{run.line}: {exc}")
        return call


def _kind(text: str) -> str:
    if text.startswith("#### ") or text == "####":
        return "user"
    if text.startswith("> ") or text == ">":
        return "tool"
    return "assistant"


def _strip(text: str, kind: str) -> str:
    """A line without its markdown: the ``#### ``/``> `` prefix and the hard break (two
    trailing spaces) aider ends those lines with."""
    if kind == "user":
        return text[5:].removesuffix("  ")
    if kind == "tool":
        return text[2:].removesuffix("  ")
    return text


def _inputs(lines: list[str]) -> list[list[str]]:
    """The inputs of a user run: aider writes an input's lines one ``####`` line each and
    puts a blank line between two inputs."""
    out: list[list[str]] = [[]]
    for text in lines:
        if text.strip() or out[-1]:
            out[-1].append(text)
    return [g for g in out if "".join(g).strip()]


def _count(text: str) -> int | None:
    """A ``Tokens:`` count aider wrote whole (``11,140``); None for a rounded ``2.3k``."""
    if text.endswith("k") or "." in text:
        return None
    return int(text.replace(",", ""))


def _usage(call: Call, m: re.Match[str], text: str) -> None:
    """The ``Tokens:`` line after a reply: the call's usage when its numbers are whole."""
    sent, write, hit, received = (_count(g) if g else None for g in m.groups())
    log = call.metadata["session_log"]
    log["tokens_line"] = text
    if sent is not None and received is not None:
        call.usage = {"input_tokens": sent, "output_tokens": received}
        if write is not None:
            call.usage["cache_creation_input_tokens"] = write
        if hit is not None:
            call.usage["cache_read_input_tokens"] = hit
        call.recorded = [*call.recorded, "usage", "model"]
    cost = COST.search(text)
    if cost:
        log["cost"] = float(cost.group(1) or cost.group(2))


# --------------------------------------------------------------------------- entry points


def iter_file(
    path: str | Path,
    fmt: str,
    *,
    default_now: datetime | None = None,
    window: int | None = None,
    model: str | None = None,
) -> SessionImport:
    """The traces of an aider log file, read as a stream (the registry's ``StreamReader``)."""
    p = Path(path)
    now = default_now or datetime.fromtimestamp(p.stat().st_mtime, tz=UTC).replace(microsecond=0)
    session = p.name.lstrip(".").split(".")[0] or "aider"
    reader: LlmHistoryReader | ChatReader
    if fmt == LLM_HISTORY:
        reader = LlmHistoryReader(str(p), session, now)
    elif fmt == CHAT:
        reader = ChatReader(str(p), session, now)
    else:
        raise ImportFormatError(f"{fmt!r} is not an aider format ({LLM_HISTORY}, {CHAT})")
    return SessionImport(
        fmt, lambda: reader.calls(iter_lines(p)), reader, window=window, model=model
    )


def _text_reader(fmt: str) -> Any:
    def read(data: Any, *, where: str, session_id: str, default_now: datetime | None) -> list[Any]:
        if not isinstance(data, str):
            raise ImportFormatError(f"{where or 'input'}: {fmt} is a text file, not JSON")
        now = default_now or datetime.now(UTC)
        name = where or "input"
        reader: LlmHistoryReader | ChatReader = (
            LlmHistoryReader(name, session_id, now)
            if fmt == LLM_HISTORY
            else ChatReader(name, session_id, now)
        )
        raw = ((n, line.encode()) for n, line in enumerate(data.splitlines(), start=1))
        traces = SessionImport(fmt, lambda: reader.calls(raw), reader).collect()
        if not traces:
            why = reader.errors[0] if reader.errors else "it records none"
            raise ImportFormatError(f"{name}: an {fmt} file with no model call ({why})")
        return traces

    read.__doc__ = f"The {fmt} reader of a text already read (``registry.Reader``)."
    return read


read_llm_history = _text_reader(LLM_HISTORY)
read_chat = _text_reader(CHAT)

__all__ = [
    "CHAT",
    "LLM_HISTORY",
    "ChatReader",
    "LlmHistoryReader",
    "iter_file",
    "looks_like_chat",
    "looks_like_llm_history",
    "read_chat",
    "read_llm_history",
    "sniff_chat",
    "sniff_llm_history",
]
