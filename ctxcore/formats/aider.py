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
from ctxcore.formats.sessions.calls import Call, Segment, prepare
from ctxcore.formats.sessions.lines import log_time
from ctxcore.loading import decode_line, open_stream

LLM_HISTORY = "aider-llm-history"
CHAT = "aider-chat"
TO_LLM = re.compile(r"^TO LLM (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S*)\s*$")
RESPONSE = re.compile(r"^LLM RESPONSE (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S*)\s*$")
ROLE_LINE = re.compile(r"^(SYSTEM|USER|ASSISTANT|TOOL|FUNCTION)(?: (.*))?$")
CHAT_START = re.compile(r"^# aider chat started at (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\s*$")
#: The runs of lines of a chat history that are not the assistant's: what the user typed
#: (``####``), aider's terminal output (``>``), the start of a session. Each is found by the
#: newline before it (searched in the text with a newline put first: a pattern that begins
#: with a literal is scanned for fast, one that begins with ``^`` is tried at every
#: character), and leaves the newline that ends it for the run after it.
SPECIAL_RUN = re.compile(
    r"\n(?:(?P<user>####(?: [^\n]*)?(?:\n####(?: [^\n]*)?)*)"
    r"|(?P<tool>>(?: [^\n]*)?(?:\n>(?: [^\n]*)?)*)"
    r"|# aider chat started at (?P<start>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[ \t]*)(?=\n)"
)
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


def _time(text: str) -> datetime | None:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    # aider writes its local time without a zone: read as UTC, and said so in the trace
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


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


#: A prompt's message lines: the role, then the line (``format_content``).
_PREFIXES = frozenset({"SYSTEM", "USER", "ASSISTANT", "TOOL", "FUNCTION"})


def _response(rest: str) -> tuple[int, int, datetime | None] | None:
    """Where a block's ``LLM RESPONSE <time>`` line begins and ends, and its time."""
    pos = 0
    while (at := rest.find("LLM RESPONSE ", pos)) >= 0:
        if at == 0 or rest[at - 1] == "\n":
            end = rest.find("\n", at)
            end = len(rest) if end < 0 else end
            m = RESPONSE.match(rest[at:end])
            if m:
                return at, end, _time(m.group(1))
        pos = at + 1
    return None


_ROLES = {"system": "system", "user": "user", "assistant": "assistant"}
_ROLES.update({"tool": "tool", "function": "tool"})


def _raw_blocks(chunks: Iterable[bytes]) -> Iterator[tuple[int, list[bytes]]]:
    """The file's ``TO LLM`` blocks as bytes (one or more pieces), with the number of each
    block's first line (what comes before the first block too), found in the file's chunks
    as they are read: memory holds one block and one chunk."""
    line, buf = 1, b""
    held: list[bytes] = []
    for chunk in chunks:
        buf, scan, start = buf + chunk, max(0, len(buf) - 7), 0
        while (at := buf.find(b"\nTO LLM ", scan)) >= 0:
            block = [*held, buf[start : at + 1]]
            if any(block):
                yield line, block
                line += sum(b.count(b"\n") for b in block)
            held, start, scan = [], at + 1, at + 1
        if len(buf) - start > 7:  # all but the tail a boundary may begin in
            held.append(buf[start:-7])
            buf = buf[-7:]
        else:
            buf = buf[start:]
    block = [*held, buf]
    if any(block):
        yield line, block


@dataclass(eq=False)
class _Piece:
    """A message of a block: its role, the number of its first line, its text."""

    role: str
    line: int
    text: str


class LlmHistoryReader:
    """Reads an LLM history block by block; each block is one call. A block is parsed as a
    whole (its separators and role prefixes found by regular expressions); only a message
    with a line that breaks the layout is gone through line by line, to name that line."""

    def __init__(self, name: str, session: str, now: datetime) -> None:
        self.name, self.session, self.now = name, session, now
        self.errors: list[str] = []
        self.turns = 0
        self.reported = 0

    def calls(self, source: Iterable[bytes]) -> Iterator[Call]:
        """The calls, one per ``TO LLM`` block, in file order (``source``: the file's bytes,
        in chunks)."""
        for line, raw in _raw_blocks(source):
            text = self._decode(line, raw)
            head, _, rest = text.partition("\n")
            start = TO_LLM.match(head)
            if start is None:
                if text.strip():
                    self._bad(line, "text before the first 'TO LLM <time>' line")
                continue
            call = self._block(line, _time(start.group(1)), rest)
            if call is not None:
                yield call

    def _bad(self, n: int, why: str) -> None:
        self.errors.append(f"{self.name}:{n}: {why}")

    def _decode(self, line: int, raw: list[bytes]) -> str:
        """A block's text; a line that is not UTF-8 is its error, and is left blank."""
        joined = b"".join(raw)
        try:
            text = joined.decode("utf-8")
        except UnicodeDecodeError:
            kept = []
            for n, one in enumerate(joined.split(b"\n"), start=line):
                try:
                    kept.append(decode_line(one.rstrip(b"\r"), f"{self.name}:{n}") + "\n")
                except CtxscopeError as exc:
                    self.errors.append(str(exc))
                    kept.append("\n")  # the line keeps its place: the numbers stay right
            text = "".join(kept)
        return text.replace("\r\n", "\n").removeprefix("\ufeff")

    def _block(self, line: int, sent: datetime | None, rest: str) -> Call | None:
        """The call a block is: its messages, then its reply."""
        reply: str | None = None
        log: dict[str, Any] = {"file": self.name, "line": line}
        found = _response(rest)
        if found is not None:
            begin, end, when = found
            at = line + 1 + rest.count("\n", 0, begin)
            log["response_line"] = at
            if when is not None:
                log["replied_at"] = when.isoformat()
            body = rest[end + 1 :]
            reply = "\n".join(p.text for p in self._pieces(body, at + 1, reply=True)) or None
            rest = rest[:begin]
        context = self._context(rest, line)
        if not context:
            self._bad(line, "a 'TO LLM' block with no message")
            return None
        call = Call(
            session_id=self.session,
            turn=self.turns,
            key=f"line-{line}",
            context=context,
            created_at=sent or self.now,
            output=reply,
            metadata={"session_log": log},
            recorded=["messages", "system prompt"],
            reconstructed=["model", "usage"],
            warnings=[LLM_WARNING],
            skipped=self.errors[self.reported :],
        )
        self.reported = len(self.errors)
        self.turns += 1
        return call

    def _context(self, rest: str, line: int) -> list[Segment]:
        """A block's messages, as one segment (aider sends its whole prompt every time, and
        what it sends changes from call to call: the files, the reminder it appends to the
        last message). A message the trace contract refuses is its line's error."""
        tally = Tally(LLM_HISTORY)
        msgs = [
            _message(_ROLES[p.role], [p.text], p.line, tally) for p in self._pieces(rest, line + 1)
        ]
        if not msgs:
            return []
        seg = Segment(label=f"line {line}", norm=msgs, counts=dict(tally.counts))
        for _, exc in prepare([seg]):
            self._bad(line, str(exc))
            return []
        return [seg]

    def _pieces(self, text: str, line: int, *, reply: bool = False) -> Iterator[_Piece]:
        """The messages of a block's text starting at ``line`` (each after a ``-------``
        line; a reply's lines are one message), their role prefixes taken off. Every line
        aider writes is ``ROLE `` and the text (an empty one too): a message whose lines all
        start with its first line's role is taken whole, with string operations only."""
        chunks = [text] if reply else ("\n" + text).split("\n-------\n")
        for k, chunk in enumerate(chunks):
            body = chunk.removeprefix("\n") if k == 0 else chunk
            body = body.removesuffix("\n")
            role = body[: body.find(" ")] if " " in body[:10] else ""
            prefix = role + " "
            newlines = body.count("\n")
            whole = None
            if role in _PREFIXES and body.startswith(prefix):
                # every line starts with the prefix when taking it off after each newline
                # shortens the text by one prefix per newline (one pass, not a count too)
                whole = body[len(prefix) :].replace("\n" + prefix, "\n")
                if len(body) - len(whole) != len(prefix) * (newlines + 1):
                    whole = None
            if whole is not None:
                yield _Piece(role.lower(), line, whole)
            elif body.strip():
                yield from self._lines(body, line)
            # the chunk's lines, then the separator line after it: the split took the
            # separator's line and the newline before it (the first chunk has its own)
            line += newlines + (len(chunk) - len(body)) + (1 if k == 0 else 2)

    def _lines(self, body: str, line: int) -> Iterator[_Piece]:
        """A message whose lines break the layout, line by line: a line with no role is its
        error, a change of role starts another message."""
        cur: _Piece | None = None
        for n, text in enumerate(body.split("\n"), start=line):
            m = ROLE_LINE.match(text)
            if m is None:
                if text.strip():
                    self._bad(
                        n,
                        "not a line of aider's LLM history (ROLE text, '-------', "
                        "'TO LLM <time>' or 'LLM RESPONSE <time>')",
                    )
                continue
            role, rest = m.group(1).lower(), m.group(2) or ""
            if cur is not None and cur.role != role:
                yield cur
                cur = None
            if cur is None:
                cur = _Piece(role, n, rest)
            else:
                cur.text += "\n" + rest
        if cur is not None:
            yield cur


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
        self.errors: list[str] = []
        self.session: _Session | None = None
        self.pending: Call | None = None
        self.run: _Run | None = None
        self.line = 1  # the number of the next line
        self.reported = 0

    def calls(self, source: Iterable[bytes]) -> Iterator[Call]:
        """The calls, one per reply, in file order (``source``: the file's bytes, in
        chunks). Each chunk's whole lines are classified at once: a regular expression
        finds the ``####``, ``>`` and session lines, the reply lines are what lies between."""
        for text in self._texts(source):
            pos = 0
            # in "\n" + text a match's start is its line's place in text, its end the place
            # after the newline that ends the run
            for m in SPECIAL_RUN.finditer("\n" + text):
                if m.start() > pos:
                    yield from self._add("assistant", [text[pos : m.start() - 1]])
                user, tool, start = m.group("user", "tool", "start")
                if start is not None:
                    yield from self._start(start)
                elif user is not None:
                    lines = user.split("\n")
                    yield from self._add("user", [ln[5:].removesuffix("  ") for ln in lines])
                else:
                    lines = tool.split("\n")
                    yield from self._add("tool", [ln[2:].removesuffix("  ") for ln in lines])
                pos = m.end()
            if pos < len(text):
                yield from self._add("assistant", [text[pos:-1]])
        if self.run is not None:
            yield from self._end(self.run)
        yield from self._flush()

    def _texts(self, source: Iterable[bytes]) -> Iterator[str]:
        """The file's whole lines, a chunk at a time, as text ending with a newline; a line
        that is not UTF-8 is its error and is left blank."""
        rest = b""
        for chunk in source:
            data = rest + chunk
            cut = data.rfind(b"\n") + 1
            rest = data[cut:]
            if cut:
                yield self._decode(data[:cut])
        if rest:
            yield self._decode(rest + b"\n")

    def _decode(self, data: bytes) -> str:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            kept = []
            for n, one in enumerate(data.split(b"\n")[:-1], start=self.line):
                try:
                    kept.append(decode_line(one.rstrip(b"\r"), f"{self.name}:{n}"))
                except CtxscopeError as exc:
                    self.errors.append(str(exc))
                    kept.append("")  # the line keeps its place: the numbers stay right
            text = "\n".join(kept) + "\n"
        if self.line == 1:
            text = text.removeprefix("\ufeff")
        return text.replace("\r\n", "\n")

    def _add(self, kind: str, lines: list[str]) -> Iterator[Call]:
        """Lines of one kind (a reply's lines come as one text): they go on the run of that
        kind, or end the run before them and start one."""
        if self.run is not None and self.run.kind != kind:
            yield from self._end(self.run)
            self.run = None
        if self.run is None:
            self.run = _Run(kind, self.line)
        self.run.lines.extend(lines)
        self.line += len(lines) if kind != "assistant" else lines[0].count("\n") + 1

    def _start(self, stamp: str) -> Iterator[Call]:
        """A ``# aider chat started at`` line: the run and the call before it end, a session
        starts."""
        if self.run is not None:
            yield from self._end(self.run)
            self.run = None
        yield from self._flush()
        started = _time(stamp)
        self.session = _Session(f"{self.stem}@{stamp.replace(' ', 'T')}", started)
        self.line += 1

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
            if not text.startswith(("Tokens:", "Model", "Main model")):
                continue
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
        call.usage_mapping = "aider"
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
    now = log_time(p, default_now)
    session = p.name.lstrip(".").split(".")[0] or "aider"
    if fmt == LLM_HISTORY:
        llm = LlmHistoryReader(str(p), session, now)
        return SessionImport(fmt, lambda: llm.calls(_chunks(p)), llm, window=window, model=model)
    if fmt == CHAT:
        chat = ChatReader(str(p), session, now)
        return SessionImport(fmt, lambda: chat.calls(_chunks(p)), chat, window=window, model=model)
    raise ImportFormatError(f"{fmt!r} is not an aider format ({LLM_HISTORY}, {CHAT})")


def _chunks(p: Path) -> Iterator[bytes]:
    """A file's bytes, a megabyte at a time (gunzipped on the fly)."""
    with open_stream(p) as f:
        while chunk := f.read(1 << 20):
            yield chunk


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
        if isinstance(reader, LlmHistoryReader):
            llm = reader
            traces = SessionImport(fmt, lambda: llm.calls([data.encode()]), llm).collect()
        else:
            chat = reader
            traces = SessionImport(fmt, lambda: chat.calls([data.encode()]), chat).collect()
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
