"""Inspect AI eval logs (UKGovernmentBEIS/inspect_ai), one trace per model event.

An eval log is the eval's spec (``eval``: task, model, run) and its samples; each sample
records what happened as ``events``. A ``model`` event is one model call, whole: its
``input`` (the chat messages sent), the ``tools`` offered, the ``config``, and its
``output`` (the reply's choices, ``usage``, the time it took). So every model event is one
trace, whatever the solver did between two of them (an agent loop, a sub-task's own
``events``, a scorer calling a model).

- a message's text may be an attachment (``attachment://<hash>``, its text in the sample's
  ``attachments``); newer logs keep each message once, in the sample's ``message_pool``, and a
  model event names its input as ranges of it (``input_refs``: ``[[start, end), ...]``);
- content parts: ``text``, ``reasoning`` (``redacted``: only its size is kept), ``image``,
  ``audio``, ``video`` (what each was, not its bytes); another part is kept as JSON text and
  reported;
- an assistant message's ``tool_calls`` (``function``, ``arguments``) are tool calls, a
  ``tool`` message (``tool_call_id``, ``function``, ``error``) their result.

Two layouts: a ``.json`` log is one JSON document (read whole, as any JSON document); a
``.eval`` log is a zip whose ``samples/<id>_epoch_<n>.json`` members are read one at a time
(memory holds one sample), the eval's spec from ``header.json`` (or ``_journal/start.json``).
A sample that cannot be read, or an event of it, is one error naming the file and the member
or event; the rest is imported. Each sample and epoch is a session of its own.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ctxcore.errors import CtxscopeError, ImportFormatError
from ctxcore.formats.accounting import Tally
from ctxcore.formats.norm import NormMessage, ToolCall, reply_text, usage_from_obj
from ctxcore.formats.openai import parse_tools
from ctxcore.formats.sessions import SessionImport
from ctxcore.formats.sessions.calls import Call, Segment
from ctxcore.formats.sessions.lines import log_time, parse_time, unexpected
from ctxcore.loading import parse_json, read_text
from ctxcore.models import ToolDef
from ctxcore.settings import MAX_DOCUMENT_BYTES

FORMAT = "inspect"
ATTACHMENT = "attachment://"
ZIP_MAGIC = b"PK\x03\x04"
#: the first members Inspect writes into a ``.eval`` zip (a zip names its first member at
#: byte 30 of its first local header)
_FIRST_MEMBERS = (b"_journal/", b"header.json", b"samples/", b"summaries.json")
_MEDIA = frozenset({"image", "audio", "video", "document"})


def looks_like(data: Any) -> bool:
    """Whether a JSON value is an Inspect eval log: a ``version``, an ``eval`` spec naming
    its task and model, and its samples (or the parts a log without them has)."""
    if not isinstance(data, dict) or not isinstance(data.get("eval"), dict):
        return False
    spec = data["eval"]
    return (
        isinstance(data.get("version"), int)
        and isinstance(spec.get("task"), str)
        and isinstance(spec.get("model"), str)
        and any(k in data for k in ("samples", "plan", "results", "stats", "status"))
    )


def sniff(name: str, head: bytes) -> bool:
    """Whether a file is a ``.eval`` log: a zip whose first member is one Inspect writes."""
    if not head.startswith(ZIP_MAGIC):
        return False
    return name.lower().endswith(".eval") or head[30:50].startswith(_FIRST_MEMBERS)


def _text(value: Any, attachments: dict[str, Any]) -> str:
    """A string, its attachment's text when it names one."""
    if isinstance(value, str):
        if value.startswith(ATTACHMENT):
            found = attachments.get(value[len(ATTACHMENT) :])
            return found if isinstance(found, str) else value
        return value
    return "" if value is None else json.dumps(value, ensure_ascii=False)


@dataclass(eq=False)
class _Sample:
    """One sample being read: its attachments and pool, its messages made once (shared by
    every event whose input holds them), and its session."""

    session: str
    attachments: dict[str, Any]
    pool: list[Any]
    where: str
    made: dict[str, tuple[Any, Segment]] = field(default_factory=dict)
    serial: int = 0


def _content(
    msg: NormMessage, content: Any, where: str, tally: Tally, atts: dict[str, Any]
) -> None:
    """A message's content (a string, or a list of parts) onto ``msg``."""
    if not isinstance(content, list):
        msg.text = _text(content, atts)
        return
    texts: list[str] = []
    reasoning: list[str] = []
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            texts.append(_text(part.get("text"), atts))
        elif kind == "reasoning":
            _reasoning(msg, part, reasoning, atts)
        elif kind in _MEDIA:
            assert isinstance(part, dict)
            value = part.get(kind)
            size = len(value) if isinstance(value, str) else None
            msg.media.append({"type": kind, "path": f"{where}.content[{k}]", "chars": size})
            texts.append(f"[{kind}]")
            tally.add("media")
        else:
            texts.append(tally.keep_unknown(f"{where}.content[{k}]", part))
    msg.text = "\n".join(t for t in texts if t)
    msg.reasoning = "\n".join(r for r in reasoning if r)


def _reasoning(
    msg: NormMessage, part: dict[str, Any], out: list[str], atts: dict[str, Any]
) -> None:
    """A reasoning part: its text, or (``redacted``: encrypted) only its size."""
    text = _text(part.get("reasoning"), atts)
    if part.get("redacted"):
        sizes = msg.extra.setdefault("encrypted_reasoning", [])
        sizes.append({"chars": len(text)})
        summary = part.get("summary")
        if isinstance(summary, str) and summary:
            out.append(summary)
        return
    out.append(text)


def _message(raw: Any, where: str, key: str, atts: dict[str, Any]) -> Segment:
    """One Inspect chat message as the segment every call holding it shares."""
    if not isinstance(raw, dict):
        raise ImportFormatError(f"{where}: a message is an object, got {type(raw).__name__}")
    role = raw.get("role")
    if role not in ("system", "user", "assistant", "tool"):
        raise ImportFormatError(f"{where}.role: not an Inspect role ({role!r})")
    tally = Tally(FORMAT)
    if role == "system":
        msg = NormMessage(index=0, role="system", id=f"system-{key}", text="")
        tally.add("system_parts")
    else:
        msg = NormMessage(index=0, role=role, id=f"msg-{key}", text="")
        tally.add("messages")
    _content(msg, raw.get("content"), where, tally, atts)
    if role == "assistant":
        for k, c in enumerate(raw.get("tool_calls") or []):
            msg.tool_calls.append(_tool_call(c, f"{where}.tool_calls[{k}]"))
        tally.add("tool_calls", len(msg.tool_calls))
    elif role == "tool":
        call_id = raw.get("tool_call_id")
        msg.tool_call_id = str(call_id) if call_id else None
        fn = raw.get("function")
        msg.name = fn if isinstance(fn, str) else None
        if isinstance(raw.get("error"), dict):
            msg.extra["error"] = raw["error"]
        tally.add("tool_results")
    seg = Segment(label=where, norm=[msg], counts=dict(tally.counts), unknown=list(tally.unknown))
    seg.entries()  # a message the trace contract refuses is this place's error
    return seg


def _tool_call(c: Any, where: str) -> ToolCall:
    if not isinstance(c, dict) or not isinstance(c.get("function"), str):
        raise ImportFormatError(f"{where}: a tool call names its function")
    args = c.get("arguments")
    text = args if isinstance(args, str) else json.dumps(args or {}, ensure_ascii=False)
    cid = c.get("id")
    return ToolCall(id=str(cid) if cid else None, name=c["function"], arguments=text)


def _segment(sample: _Sample, raw: Any, where: str) -> Segment:
    """A message's segment, made once per sample (by the message's id, while its content is
    the same; a message without an id is made for each event)."""
    mid = raw.get("id") if isinstance(raw, dict) else None
    if isinstance(mid, str) and mid and "." not in mid:
        known = sample.made.get(mid)
        if known is not None and known[0] == raw:
            return known[1]
        key = mid if known is None else f"{mid}-{sample.serial}"
    else:
        key = f"m{sample.serial}"
    sample.serial += 1
    seg = _message(raw, where, key, sample.attachments)
    if isinstance(mid, str) and mid and mid not in sample.made:
        sample.made[mid] = (raw, seg)
    return seg


def _input(sample: _Sample, event: dict[str, Any], where: str) -> list[Any]:
    """The messages an event sent: its ``input``, or its ranges of the message pool."""
    refs = event.get("input_refs")
    if not event.get("input") and isinstance(refs, list) and refs:
        out: list[Any] = []
        for k, ref in enumerate(refs):
            if not (
                isinstance(ref, list) and len(ref) == 2 and all(isinstance(x, int) for x in ref)
            ):
                raise ImportFormatError(f"{where}.input_refs[{k}]: a range [start, end)")
            if not 0 <= ref[0] <= ref[1] <= len(sample.pool):
                raise ImportFormatError(
                    f"{where}.input_refs[{k}]: {ref} is outside the message pool "
                    f"({len(sample.pool)} messages)"
                )
            out.extend(sample.pool[ref[0] : ref[1]])
        return out
    raw = event.get("input")
    if not isinstance(raw, list):
        raise ImportFormatError(f"{where}.input: expected the list of messages sent")
    return raw


def _reply(
    output: Any, where: str, atts: dict[str, Any]
) -> tuple[str | None, list[dict[str, Any]], str | None]:
    """The reply of an event: its text and calls as ``outcome.output``, the calls, the
    stop reason."""
    choices = output.get("choices") if isinstance(output, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict):
        return None, [], None
    msg = NormMessage(index=0, role="assistant", text="")
    _content(msg, message.get("content"), f"{where}.output", Tally(FORMAT), atts)
    for k, c in enumerate(message.get("tool_calls") or []):
        msg.tool_calls.append(_tool_call(c, f"{where}.output.tool_calls[{k}]"))
    calls = [{"id": c.id, "name": c.name} for c in msg.tool_calls]
    stop = first.get("stop_reason") if isinstance(first, dict) else None
    return reply_text(msg), calls, stop if isinstance(stop, str) else None


def _tools(raw: Any, atts: dict[str, Any]) -> list[ToolDef]:
    if not isinstance(raw, list):
        return []
    tools = [
        {**t, "description": _text(t.get("description"), atts)} if isinstance(t, dict) else t
        for t in raw
    ]
    return parse_tools(tools)


def _events(events: Any, where: str) -> Iterator[tuple[str, Any]]:
    """Every event of a sample in order, a sub-task's own events in its place."""
    if not isinstance(events, list):
        return
    for k, e in enumerate(events):
        here = f"{where}[{k}]"
        yield here, e
        if isinstance(e, dict) and e.get("event") == "subtask":
            yield from _events(e.get("events"), f"{here}.events")


class Reader:
    """Reads an eval log's samples, one at a time; each model event is one call."""

    def __init__(self, name: str, now: datetime) -> None:
        self.name = name
        self.now = now
        self.spec: dict[str, Any] = {}
        self.errors: list[str] = []
        self.reported = 0

    def calls(self, samples: Iterable[tuple[str, Any]]) -> Iterator[Call]:
        """The calls of each sample, in the order of its events."""
        for where, sample in samples:
            try:
                yield from self._sample(where, sample)
            except ImportFormatError as exc:
                self.errors.append(f"{self.name}: {where}: {exc}")
            except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
                self.errors.append(f"{self.name}: {where}: {unexpected(exc)}")

    def _sample(self, where: str, data: Any) -> Iterator[Call]:
        if isinstance(data, CtxscopeError):
            raise ImportFormatError(str(data))
        if not isinstance(data, dict):
            raise ImportFormatError(f"a sample is an object, got {type(data).__name__}")
        atts = data.get("attachments")
        pool = data.get("message_pool")
        session = _session_id(self.spec, data)
        sample = _Sample(
            session,
            atts if isinstance(atts, dict) else {},
            pool if isinstance(pool, list) else [],
            where,
        )
        turn = 0
        models = 0
        for here, e in _events(data.get("events"), f"{where}.events"):
            if not (isinstance(e, dict) and e.get("event") == "model"):
                continue
            models += 1
            try:
                call = self._call(sample, e, here, turn)
            except ImportFormatError as exc:
                said = str(exc)  # most name their place in the event already
                self.errors.append(
                    f"{self.name}: {said if said.startswith(here) else f'{here}: {said}'}"
                )
                continue
            turn += 1
            yield call
        if not models:
            self.errors.append(
                f"{self.name}: {where}: no model event recorded (a log written without "
                "events): its calls cannot be told apart"
            )

    def _call(self, sample: _Sample, e: dict[str, Any], where: str, turn: int) -> Call:
        atts = sample.attachments
        context = [
            _segment(sample, raw, f"{where}.input[{k}]")
            for k, raw in enumerate(_input(sample, e, where))
        ]
        raw_output = e.get("output")
        output: dict[str, Any] = raw_output if isinstance(raw_output, dict) else {}
        text, calls, stop = _reply(output, where, atts)
        log: dict[str, Any] = {"file": self.name, "event": where}
        for key in ("task", "run_id", "eval_id"):
            if isinstance(self.spec.get(key), str):
                log[key] = self.spec[key]
        if calls:
            log["tool_calls"] = calls
        if stop:
            log["stop_reason"] = stop
        if e.get("error"):
            log["error"] = _text(e.get("error"), atts)
        config = e.get("config")
        reserve = config.get("max_tokens") if isinstance(config, dict) else None
        usage = usage_from_obj(output.get("usage"))
        model = e.get("model") if isinstance(e.get("model"), str) else self.spec.get("model")
        call = Call(
            session_id=sample.session,
            turn=turn,
            key=where,
            context=context,
            created_at=parse_time(e.get("timestamp")) or self.now,
            model=model if isinstance(model, str) else None,
            usage=usage,
            usage_mapping="inspect",
            output=text,
            output_reserve=reserve if isinstance(reserve, int) and reserve > 0 else None,
            tools=_tools(e.get("tools"), atts),
            metadata={"session_log": log},
            recorded=["messages", "tool definitions", "model"] + (["usage"] if usage else []),
            reconstructed=[] if usage else ["usage of this call"],
            skipped=self.errors[self.reported :],
        )
        self.reported = len(self.errors)
        return call


def _session_id(spec: dict[str, Any], sample: dict[str, Any]) -> str:
    """A sample's session: its ``uuid``, else the eval's id, the sample's id and epoch."""
    uuid = sample.get("uuid")
    if isinstance(uuid, str) and uuid:
        return uuid
    run = spec.get("eval_id") or spec.get("run_id") or spec.get("task") or "inspect"
    return f"{run}/{sample.get('id')}/epoch-{sample.get('epoch', 1)}"


# --------------------------------------------------------------------------- files


def _members(path: Path, reader: Reader) -> Iterator[tuple[str, Any]]:
    """The samples of a ``.eval`` zip, one member at a time (the spec read first)."""
    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise ImportFormatError(f"{path}: not a readable .eval zip ({exc})") from exc
    with zf:
        names = zf.namelist()
        for head in ("header.json", "_journal/start.json"):
            if head in names:
                spec = _member(zf, head)
                if isinstance(spec, dict) and isinstance(spec.get("eval"), dict):
                    reader.spec = spec["eval"]
                    break
        for name in names:
            if name.startswith("samples/") and name.endswith(".json"):
                yield name, _member(zf, name)


def _member(zf: zipfile.ZipFile, name: str) -> Any:
    """A member's JSON, or the error that it has none (the sample's, not the file's)."""
    info = zf.getinfo(name)
    if info.file_size > MAX_DOCUMENT_BYTES:
        return ImportFormatError(
            f"{info.file_size:,} bytes unpacked, over the {MAX_DOCUMENT_BYTES:,} a document may be"
        )
    try:
        with zf.open(info) as f:
            raw = f.read(MAX_DOCUMENT_BYTES + 1)
        return parse_json(raw.decode("utf-8"), name)
    except (OSError, zipfile.BadZipFile, EOFError, UnicodeDecodeError) as exc:
        return ImportFormatError(f"cannot be read ({exc})")
    except CtxscopeError as exc:
        return ImportFormatError(str(exc).removeprefix(f"{name}: "))


def _samples(data: dict[str, Any], reader: Reader) -> Iterator[tuple[str, Any]]:
    reader.spec = data["eval"]
    samples = data.get("samples")
    for k, s in enumerate(samples if isinstance(samples, list) else []):
        yield f"samples[{k}]", s


def iter_file(
    path: str | Path,
    fmt: str,
    *,
    default_now: datetime | None = None,
    window: int | None = None,
    model: str | None = None,
) -> SessionImport:
    """The traces of an eval log file, as a stream (the registry's ``StreamReader``): a
    ``.eval`` zip sample by sample, a ``.json`` log read whole."""
    p = Path(path)
    now = log_time(p, default_now)
    reader = Reader(str(p), now)
    if zipfile.is_zipfile(p):
        samples: Iterable[tuple[str, Any]] = _members(p, reader)
    else:
        data = parse_json(read_text(p), str(p))
        if not looks_like(data):
            raise ImportFormatError(f"{p}: not an Inspect eval log (a .eval zip or its .json)")
        samples = _samples(data, reader)
    return SessionImport(FORMAT, lambda: reader.calls(samples), reader, window=window, model=model)


def read(data: Any, *, where: str, session_id: str, default_now: datetime | None) -> list[Any]:
    """The reader of a ``.json`` eval log already parsed (``registry.Reader``)."""
    name = where or "input"
    if not looks_like(data):
        raise ImportFormatError(f"{name}: not an Inspect eval log")
    reader = Reader(name, default_now or datetime.now(UTC))
    traces = SessionImport(FORMAT, lambda: reader.calls(_samples(data, reader)), reader).collect()
    if not traces:
        why = reader.errors[0] if reader.errors else "it records none"
        raise ImportFormatError(f"{name}: an Inspect eval log with no model event ({why})")
    return traces


__all__ = ["FORMAT", "Reader", "iter_file", "looks_like", "read", "sniff"]
