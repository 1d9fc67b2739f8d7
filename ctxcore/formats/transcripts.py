"""Parsers that turn the vendored corpus files into turn-by-turn conversations.

The demo sessions (``ctxcore.demo.build``), fixtures and benches replay real agent transcripts,
and every agent framework writes its own shape: SWE-agent trajectories (``history`` of
OpenAI messages, or thought/action text with observations as user messages),
mini-swe-agent trajectories (``messages`` whose observations are user messages and whose
bash command sits in a fenced block), OpenCode markdown exports, aider chat markdown, and
LLaMA-Factory data (content parts, or ShareGPT turns). Each parser reduces one of them to a
``Conversation``: an OpenAI-shaped ``messages`` list (``tool_calls`` on the assistant,
``tool`` messages answering them by ``tool_call_id``), the ``tools`` schemas, and one
timestamp per message when the source has one. That shape is what the OpenAI importer
reads, so a conversation prefix becomes a captured input with
``ctxcore.formats.openai.captured_input_from_messages``.

Nothing is invented except what a format lacks: tool-call ids for formats that have none
(``call_<n>``, counted per conversation) and, for OpenCode exports, per-message times
derived from the header's creation time plus the per-message durations. ``Conversation.meta``
says which of these were synthesized.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ctxcore.errors import ImportFormatError

OpenAIMessage = dict[str, Any]


@dataclass(frozen=True)
class Conversation:
    """One agent run or chat as OpenAI messages, with per-message times where known."""

    source: str  # corpus file name
    title: str
    messages: list[OpenAIMessage]
    tools: list[dict[str, Any]] = field(default_factory=list)
    #: one entry per message: when it was produced, if the source says so.
    times: list[datetime | None] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def count(self, role: str) -> int:
        return sum(1 for m in self.messages if m.get("role") == role)

    def assistant_indices(self) -> list[int]:
        """Indices of the model calls: each assistant message is one step."""
        return [i for i, m in enumerate(self.messages) if m.get("role") == "assistant"]


# --------------------------------------------------------------------------- helpers


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ImportFormatError(
            f"{path}: corpus file not found; pass --corpus pointing at the corpus folder"
        ) from exc
    except json.JSONDecodeError as exc:
        raise ImportFormatError(
            f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ImportFormatError(
            f"{path}: corpus file not found; pass --corpus pointing at the corpus folder"
        ) from exc


def _call(cid: str, name: str, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def _expect(cond: bool, where: Path | str, what: str) -> None:
    if not cond:
        raise ImportFormatError(f"{where}: {what}")


# --------------------------------------------------------------------------- SWE-agent


def parse_sweagent(path: Path) -> Conversation:
    """A SWE-agent ``.traj`` file (see ``sweagent_conversation``)."""
    return sweagent_conversation(_load_json(path), path.name, path, untitled=path.stem)


def sweagent_conversation(
    data: Any, source: str, where: Path | str = "", *, untitled: str | None = None
) -> Conversation:
    """A SWE-agent trajectory's ``history`` (a01/a02 function calling, b03 thought/action).

    Function-calling trajectories already are OpenAI messages (``tool_call_ids`` becomes
    ``tool_call_id``). In the older format (b03) the action is text in the assistant
    message and the observation is the next user message: the action becomes a tool call
    ``call_<n>`` and the observation its ``tool`` answer. Demonstration messages
    (``is_demo``) stay user messages. Each source message becomes one message.
    """
    where = where or source
    _expect(
        isinstance(data, dict) and isinstance(data.get("history"), list),
        where,
        "not a SWE-agent trajectory (expected an object with a 'history' list)",
    )
    out, synth = sweagent_messages(data["history"], where, "history")
    # the last user message naming an issue: b03 shows a demonstration's issue first
    task = next(
        (m["content"] for m in reversed(out) if m["role"] == "user" and "ISSUE:" in m["content"]),
        "",
    )
    title = (
        task.split("ISSUE:", 1)[1].strip().splitlines()[0]
        if "ISSUE:" in task
        else untitled or source
    )
    return Conversation(
        source=source,
        title=title,
        messages=out,
        times=[None] * len(out),
        meta={"format": "swe-agent", "synthetic_call_ids": synth > 0},
    )


def sweagent_messages(
    history: list[Any], where: Path | str, key: str = "history"
) -> tuple[list[OpenAIMessage], int]:
    """SWE-agent messages as OpenAI messages, one for one, and how many call ids were made
    up (``call_<n>``, for actions written in the assistant's text)."""
    out: list[OpenAIMessage] = []
    pending: str | None = None
    synth = 0
    seen_user_task = False
    for i, m in enumerate(history):
        _expect(isinstance(m, dict) and "role" in m, where, f"{key}[{i}] has no role")
        role, content = m["role"], m.get("content") or ""
        if isinstance(content, list):  # multimodal SWE-agent content parts
            content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if role == "assistant":
            msg: OpenAIMessage = {"role": "assistant", "content": content}
            if m.get("tool_calls"):
                msg["tool_calls"] = m["tool_calls"]
            elif m.get("action"):
                synth += 1
                pending = f"call_{synth}"
                msg["tool_calls"] = [_call(pending, "bash", {"command": m["action"].strip()})]
            out.append(msg)
        elif role == "tool":
            ids = m.get("tool_call_ids") or []
            out.append({"role": "tool", "content": content, "tool_call_id": str(ids[0])})
        elif role == "user" and pending is not None and seen_user_task:
            out.append({"role": "tool", "content": content, "tool_call_id": pending})
            pending = None
        else:
            if role == "user" and not m.get("is_demo"):
                seen_user_task = True
            out.append({"role": role, "content": content})
    return out, synth


# --------------------------------------------------------------------------- mini-swe-agent

_BASH_BLOCK = re.compile(r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n```", re.S)


def parse_mini_swe(path: Path) -> Conversation:
    """A mini-swe-agent trajectory file (see ``mini_swe_conversation``)."""
    return mini_swe_conversation(_load_json(path), path.name, path, untitled=path.stem)


def mini_swe_conversation(
    data: Any, source: str, where: Path | str = "", *, untitled: str | None = None
) -> Conversation:
    """A mini-swe-agent trajectory (b01/b02 ``{"messages": ...}``, a03 a bare list).

    Every assistant message is one step whose single bash block is the action: it becomes
    a tool call ``call_<step>`` (the step counted from 1) and the block is removed from
    the text; every later user message is that action's observation and becomes the
    ``tool`` answer. The times are the provider's ``created`` stamps of each response when
    the trajectory kept them (``extra.response.created``); an observation takes its
    action's time. Each source message becomes one message.
    """
    where = where or source
    raw = data.get("messages") if isinstance(data, dict) else data
    _expect(
        isinstance(raw, list) and all(isinstance(m, dict) and "role" in m for m in raw),
        where,
        "not a mini-swe-agent trajectory (expected 'messages': [{role, content}, ...])",
    )
    assert isinstance(raw, list)
    out: list[OpenAIMessage] = []
    times: list[datetime | None] = []
    step = 0
    pending: str | None = None
    last_time: datetime | None = None
    first_user_seen = False
    for m in raw:
        role, content = m["role"], m.get("content") or ""
        if role == "assistant":
            step += 1
            msg, call_id = _mini_action(content, step)
            pending = call_id or pending  # a step without a block leaves the open call open
            out.append(msg)
            when = _response_time(m)
            last_time = when or last_time
            times.append(when)
        elif role == "user" and first_user_seen:
            msg = {"role": "tool", "content": content, "tool_call_id": pending or f"obs_{step}"}
            out.append(msg)
            pending = None
            times.append(last_time)
        else:
            first_user_seen = first_user_seen or role == "user"
            out.append({"role": role, "content": content})
            times.append(None)
    instance = data.get("instance_id") if isinstance(data, dict) else None
    title = _mini_title(instance, out, untitled or source)
    return Conversation(
        source=source,
        title=title,
        messages=out,
        times=times,
        meta={
            "format": "mini-swe-agent",
            "instance_id": instance,
            "synthetic_call_ids": True,
            "clock": "corpus" if any(times) else "none",
        },
    )


def _response_time(m: dict[str, Any]) -> datetime | None:
    """The provider's ``created`` stamp of the response a message was, if kept."""
    created = ((m.get("extra") or {}).get("response") or {}).get("created")
    return datetime.fromtimestamp(created, tz=UTC) if isinstance(created, int) else None


def _mini_action(content: str, step: int) -> tuple[OpenAIMessage, str | None]:
    """An assistant step: its bash block as the tool call ``call_<step>`` (the block taken
    out of the text, the ``THOUGHT:`` prefix too), and that call's id (None without one)."""
    block = _BASH_BLOCK.search(content)
    if not block:
        return {"role": "assistant", "content": content}, None
    call_id = f"call_{step}"
    thought = (content[: block.start()] + content[block.end() :]).strip()
    thought = thought.removeprefix("THOUGHT:").strip()
    msg: OpenAIMessage = {
        "role": "assistant",
        "content": thought,
        "tool_calls": [_call(call_id, "bash", {"command": block.group(1)})],
    }
    return msg, call_id


def _mini_title(instance: Any, out: list[OpenAIMessage], untitled: str) -> str:
    """The instance id, else the PR the task describes, else the task's first line."""
    task = next((m["content"] for m in out if m["role"] == "user"), "")
    title = instance or (task.strip().splitlines()[0] if task.strip() else untitled)
    pr = re.search(r"<pr_description>\s*Consider the following PR description:\s*\n(.+)", task)
    if pr:
        title = pr.group(1).strip()
    return str(title)


# --------------------------------------------------------------------------- OpenCode markdown

_OC_HEADER = re.compile(r"^## (User|Assistant \((?P<who>[^)]*)\))[ \t]*$", re.M)
_OC_TOOL = re.compile(
    r"^```\nTool: (?P<name>\S+)\n\n\*\*Input:\*\*\n```json\n(?P<input>.*?)\n```\n"
    r"(?:\*\*(?P<label>Output|Error):\*\*\n```\n(?P<output>.*?)\n?```\n)?```[ \t]*$",
    re.S | re.M,
)
_OC_CREATED = re.compile(r"^\*\*Created:\*\* (.+?)\s*$", re.M)
_OC_DURATION = re.compile(r"·\s*([\d.]+)s\s*$")


def _oc_created(text: str) -> datetime | None:
    m = _OC_CREATED.search(text)
    if not m:
        return None
    try:
        # The export writes local time without a zone; we read it as UTC and say so.
        return datetime.strptime(m.group(1), "%m/%d/%Y, %I:%M:%S %p").replace(tzinfo=UTC)
    except ValueError:
        return None


def parse_opencode(path: Path) -> Conversation:
    """An OpenCode session export (b05, c01): ``## User`` / ``## Assistant (agent · model · Ns)``.

    A message starts at such a header right after a ``---`` rule (tool output quoting
    markdown cannot fake that). In an assistant message each fenced ``Tool: NAME`` block
    becomes a tool call ``call_<n>`` with its ``**Input:**`` JSON as arguments, answered by a
    ``tool`` message holding its ``**Output:**``; ``_Thinking:_`` paragraphs are kept as
    ``reasoning``. Times: the header's ``Created`` stamp (a local time with no zone, read
    as UTC) plus the running sum of the per-message durations.
    """
    text = _read_text(path)
    title_line = text.splitlines()[0] if text else ""
    title = title_line.removeprefix("# ").strip() or path.stem
    started = _oc_created(text)
    heads = [
        h
        for h in _OC_HEADER.finditer(text)
        if text[: h.start()].rstrip().endswith("\n---") or text[: h.start()].rstrip() == "---"
    ]
    _expect(bool(heads), path, "no '## User' / '## Assistant (...)' messages found")
    out: list[OpenAIMessage] = []
    times: list[datetime | None] = []
    clock = started
    synth = 0
    for n, h in enumerate(heads):
        end = heads[n + 1].start() if n + 1 < len(heads) else len(text)
        body = text[h.end() : end].strip()
        body = body.removesuffix("---").strip()
        if h.group(1) == "User":
            out.append({"role": "user", "content": body})
            times.append(clock)
            continue
        dur = _OC_DURATION.search(h.group("who") or "")
        if clock is not None and dur:
            clock = clock + timedelta(seconds=float(dur.group(1)))
        calls: list[dict[str, Any]] = []
        results: list[OpenAIMessage] = []
        pieces: list[str] = []
        pos = 0
        for t in _OC_TOOL.finditer(body):
            pieces.append(body[pos : t.start()])
            pos = t.end()
            synth += 1
            cid = f"call_{synth}"
            calls.append(_call(cid, t.group("name"), t.group("input")))
            result: OpenAIMessage = {
                "role": "tool",
                "content": t.group("output") or "",
                "tool_call_id": cid,
                "name": t.group("name"),
            }
            if t.group("label") == "Error":
                result["is_error"] = True
            results.append(result)
        pieces.append(body[pos:])
        prose = "\n".join(p.strip() for p in pieces if p.strip())
        reasoning = ""
        if prose.startswith("_Thinking:_"):
            rest = prose.removeprefix("_Thinking:_").strip()
            reasoning, _, prose = rest.partition("\n\n")
            prose = prose.strip()
        msg: OpenAIMessage = {"role": "assistant", "content": prose}
        if reasoning:
            msg["reasoning"] = reasoning
        if calls:
            msg["tool_calls"] = calls
        out.append(msg)
        times.append(clock)
        out.extend(results)
        times.extend([clock] * len(results))
    return Conversation(
        source=path.name,
        title=title,
        messages=out,
        times=times,
        meta={
            "format": "opencode-markdown",
            "synthetic_call_ids": True,
            "clock": "created+durations (local time read as UTC)" if started else "none",
        },
    )


# --------------------------------------------------------------------------- aider markdown


def parse_aider(path: Path) -> Conversation:
    """An aider chat history session (b04).

    ``#### `` lines are the user's (consecutive ones form one message); ``> `` lines are
    aider's own output (commands, applied edits, token reports) and become ``tool``
    messages named ``aider``; everything else is the assistant's reply.
    """
    text = _read_text(path)
    head = re.search(r"^# aider chat started at (.+)$", text, re.M)
    started = None
    if head:
        try:
            started = datetime.strptime(head.group(1).strip(), "%Y-%m-%d %H:%M:%S").replace(
                tzinfo=UTC
            )
        except ValueError:
            started = None
    out: list[OpenAIMessage] = []
    kind: str | None = None
    buf: list[str] = []

    def flush() -> None:
        body = "\n".join(buf).strip()
        if kind is not None and body:
            if kind == "tool":
                out.append({"role": "tool", "content": body, "name": "aider"})
            else:
                out.append({"role": kind, "content": body})
        buf.clear()

    for line in text.splitlines():
        if line.startswith("# aider chat started at"):
            continue
        if line.startswith("#### "):
            new = "user"
            line = line[5:]
        elif line.startswith(">"):
            new = "tool"
            line = line[1:].removeprefix(" ")
        elif kind in ("user", "tool") and not line.strip():
            continue
        else:
            new = "assistant"
        if new != kind:
            flush()
            kind = new
        buf.append(line.rstrip())
    flush()
    first_user = next((m["content"] for m in out if m["role"] == "user"), path.stem)
    return Conversation(
        source=path.name,
        title=first_user.splitlines()[0],
        messages=out,
        times=[None] * len(out),
        meta={
            "format": "aider-markdown",
            "started_at": started.isoformat() if started else None,
            "clock": "none",
        },
    )


# --------------------------------------------------------------------------- LLaMA-Factory


def _tools_list(raw: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else []
        except json.JSONDecodeError as exc:
            raise ImportFormatError(f"{where}: 'tools' is not valid JSON ({exc.msg})") from exc
    if not isinstance(raw, list):
        raise ImportFormatError(f"{where}: 'tools' must be a list")
    return [t for t in raw if isinstance(t, dict)]


def _reason_tool_use(record: dict[str, Any], where: str) -> list[OpenAIMessage]:
    """LLaMA-Factory ``reasoning``/``text``/``tool_call`` parts → OpenAI messages.

    The calls carry no id; the tool message that follows answers them with a JSON list of
    ``{tool_call_id, name, content}``, in order, so the ids come from there.
    """
    out: list[OpenAIMessage] = []
    msgs = record.get("messages")
    if not isinstance(msgs, list):
        raise ImportFormatError(f"{where}: expected a 'messages' list")
    for j, m in enumerate(msgs):
        parts = m.get("content") if isinstance(m, dict) else None
        if not isinstance(parts, list):
            raise ImportFormatError(f"{where}.messages[{j}]: expected a list of content parts")
        texts = [p["value"] for p in parts if p.get("type") == "text"]
        if m["role"] == "tool":
            prev = out[-1] if out and out[-1]["role"] == "assistant" else None
            out.extend(_tool_results("\n".join(texts), prev, j))
        else:
            out.append(_parts_message(m["role"], parts, texts, j))
    return out


def _tool_results(text: str, prev: OpenAIMessage | None, j: int) -> list[OpenAIMessage]:
    """A tool message: one result per item of its JSON list, each answering the call of the
    assistant message before it at the same place (whose id it takes, or gives); a text
    that is no such list stays one tool message."""
    try:
        items: Any = json.loads(text)
    except json.JSONDecodeError:
        items = None
    if not isinstance(items, list):
        return [{"role": "tool", "content": text}]
    calls = prev.get("tool_calls", []) if prev else []
    out: list[OpenAIMessage] = []
    for k, item in enumerate(items):
        # items are {tool_call_id, name, content}, or just the result object
        wrapped = isinstance(item, dict) and "content" in item and "name" in item
        own = item.get("tool_call_id") if isinstance(item, dict) else None
        fallback = calls[k]["id"] if k < len(calls) else f"call_{j}_{k}"
        cid = str(own or fallback)
        if k < len(calls):
            calls[k]["id"] = cid
        body = item["content"] if wrapped else item
        result: OpenAIMessage = {
            "role": "tool",
            "content": body if isinstance(body, str) else json.dumps(body, ensure_ascii=False),
            "tool_call_id": cid,
        }
        name = item.get("name") if wrapped else None
        if name or k < len(calls):
            result["name"] = name or calls[k]["function"]["name"]
        out.append(result)
    return out


def _parts_message(role: str, parts: list[Any], texts: list[str], j: int) -> OpenAIMessage:
    """A message of text, reasoning and tool-call parts (calls get ``call_<j>_<k>``)."""
    msg: OpenAIMessage = {"role": role, "content": "\n".join(texts)}
    reasoning = [p["value"] for p in parts if p.get("type") == "reasoning"]
    if reasoning:
        msg["reasoning"] = "\n".join(reasoning)
    calls_raw = [p["value"] for p in parts if p.get("type") == "tool_call"]
    if calls_raw:
        calls_out = []
        for k, c in enumerate(calls_raw):
            obj = json.loads(c) if isinstance(c, str) else c
            calls_out.append(_call(f"call_{j}_{k}", obj["name"], obj.get("arguments", {})))
        msg["tool_calls"] = calls_out
    return msg


def parse_reason_tool_use(path: Path) -> list[Conversation]:
    """LLaMA-Factory ``reason_tool_use`` JSONL (a04): one conversation per line."""
    text = _read_text(path)
    convs: list[Conversation] = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path.name}:{n}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ImportFormatError(f"{where}: malformed JSON ({exc.msg})") from exc
        msgs = _reason_tool_use(record, where)
        first = next((m["content"] for m in msgs if m["role"] == "user"), "")
        convs.append(
            Conversation(
                source=path.name,
                title=first.splitlines()[0] if first else f"line {n}",
                messages=msgs,
                tools=_tools_list(record.get("tools", []), where),
                times=[None] * len(msgs),
                meta={"format": "llamafactory-reason-tool-use", "line": n, "clock": "none"},
            )
        )
    return convs


_SHAREGPT_ROLES = {"human": "user", "gpt": "assistant", "observation": "tool", "system": "system"}


def parse_sharegpt(path: Path) -> list[Conversation]:
    """LLaMA-Factory ShareGPT tool-use data (c02).

    Turns are ``human``/``function_call``/``observation``/``gpt``.

    A ``function_call`` turn becomes an assistant message with one call ``call_<i>`` (i its
    turn index); the next ``observation`` answers it.
    """
    data = _load_json(path)
    _expect(isinstance(data, list), path, "expected a list of ShareGPT records")
    convs: list[Conversation] = []
    for r, record in enumerate(data):
        where = f"{path.name}[{r}]"
        turns = record.get("conversations") if isinstance(record, dict) else None
        if not isinstance(turns, list):
            raise ImportFormatError(f"{where}: expected a 'conversations' list")
        msgs: list[OpenAIMessage] = []
        pending: list[str] = []
        for i, t in enumerate(turns):
            who, value = t.get("from"), t.get("value", "")
            if who == "function_call":
                try:
                    obj = json.loads(value)
                except json.JSONDecodeError as exc:
                    raise ImportFormatError(
                        f"{where}.conversations[{i}]: function_call is not JSON ({exc.msg})"
                    ) from exc
                cid = f"call_{i}"
                pending.append(cid)
                msgs.append(
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [_call(cid, obj["name"], obj.get("arguments", {}))],
                    }
                )
            elif who in _SHAREGPT_ROLES:
                msg: OpenAIMessage = {"role": _SHAREGPT_ROLES[who], "content": value}
                if who == "observation" and pending:  # two records have an orphan one
                    msg["tool_call_id"] = pending.pop(0)
                msgs.append(msg)
            else:
                raise ImportFormatError(f"{where}.conversations[{i}]: unknown speaker {who!r}")
        first = next((m["content"] for m in msgs if m["role"] == "user"), "")
        convs.append(
            Conversation(
                source=path.name,
                title=first.splitlines()[0] if first else f"record {r}",
                messages=msgs,
                tools=[
                    {"type": "function", "function": t}
                    for t in _tools_list(record.get("tools", []), where)
                ],
                times=[None] * len(msgs),
                meta={"format": "sharegpt", "record": r, "clock": "none"},
            )
        )
    return convs


__all__ = [
    "Conversation",
    "mini_swe_conversation",
    "parse_aider",
    "parse_mini_swe",
    "parse_opencode",
    "parse_reason_tool_use",
    "parse_sharegpt",
    "parse_sweagent",
    "sweagent_conversation",
    "sweagent_messages",
]
