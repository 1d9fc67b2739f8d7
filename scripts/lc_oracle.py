"""Run the real LangChain policies on message lists (the LangChain oracle).

Runs INSIDE the LangChain oracle venv (``.oracle-langchain/bin/python scripts/lc_oracle.py <
cases.json``) and imports only langchain, langchain-core, tiktoken and the standard library,
so it sees exactly what a user of the packages sees (docs/design.md, "LangChain policies").

stdin: ``{"cases": [{"name", "policy", "messages", "params", "summary", "summary_input",
"window"}]}``. ``messages`` are chat messages as dicts ``{role, content, id, tool_calls:
[{id, name, args}], tool_call_id, name}`` with roles system/user/assistant/tool; ``policy``
is one of

- ``context-editing``: ``ContextEditingMiddleware(edits=[ClearToolUsesEdit(**params)],
  token_counter=...)``, its ``wrap_model_call`` run with a handler that records the messages
  the model would get (a system message first in ``messages`` becomes the request's
  ``system_message``, as ``create_agent`` passes it);
- ``summarization``: ``SummarizationMiddleware(model, trigger=..., keep=...,
  token_counter=...)``, its ``before_model`` run on the state; the summary model is a fake
  chat model that returns ``summary`` (ctxscope's deterministic stand-in's text) and
  records its prompt, which is compared with the package's own prompt built from
  ``summary_input`` (the messages ctxscope handed the stand-in);
- ``trim``: ``trim_messages(messages, **params, token_counter=...)``.

Every policy counts tokens with the same function ctxscope uses: per message 3 tokens, the
content's tokens, and per tool call the tokens of its name and of its arguments as compact
JSON, all with tiktoken's ``encode_ordinary`` of the case's encoding (``token_counter``
"len" counts messages, as LangChain's docs describe). stdout: ``{"package": {...versions},
"results": [{"name", "messages", "prompt_matches", "summary_calls"}]}``.
TIKTOKEN_CACHE_DIR must hold the encodings.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import version
from typing import Any

import tiktoken
from langchain.agents.middleware.context_editing import (
    ClearToolUsesEdit,
    ContextEditingMiddleware,
)
from langchain.agents.middleware.summarization import (
    DEFAULT_SUMMARY_PROMPT,
    SummarizationMiddleware,
)
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.utils import get_buffer_string, trim_messages

PACKAGES = {p: version(p) for p in ("langchain", "langchain-core", "langgraph", "tiktoken")}
PER_MESSAGE = 3


class StandInModel(FakeListChatModel):
    """The summary model: returns ctxscope's stand-in text, records each prompt it got."""

    prompts: list[str] = []  # noqa: RUF012 - a pydantic field, copied per instance

    def _call(self, messages: Any, *args: Any, **kwargs: Any) -> str:
        self.prompts.append("".join(str(m.content) for m in messages))
        return super()._call(messages, *args, **kwargs)


def make_counter(encoding: str) -> Callable[[Sequence[BaseMessage]], int]:
    """The token counter both sides share (see the module docstring)."""
    if encoding == "len":
        return len
    enc = tiktoken.get_encoding(encoding)

    def count(messages: Sequence[BaseMessage]) -> int:
        total = 0
        for m in messages:
            content = m.content if isinstance(m.content, str) else json.dumps(m.content)
            total += PER_MESSAGE + len(enc.encode_ordinary(content))
            for call in getattr(m, "tool_calls", None) or []:
                args = json.dumps(call["args"], ensure_ascii=False, separators=(",", ":"))
                total += len(enc.encode_ordinary(call["name"]))
                total += len(enc.encode_ordinary(args))
        return total

    return count


def to_message(d: dict[str, Any]) -> BaseMessage:
    role, content, mid = d["role"], d["content"], d.get("id")
    if role == "system":
        return SystemMessage(content=content, id=mid)
    if role == "user":
        return HumanMessage(content=content, id=mid)
    if role == "assistant":
        calls = [
            {"id": c["id"], "name": c["name"], "args": c["args"], "type": "tool_call"}
            for c in d.get("tool_calls") or []
        ]
        return AIMessage(content=content, id=mid, tool_calls=calls)
    if role == "tool":
        return ToolMessage(
            content=content, id=mid, tool_call_id=d["tool_call_id"], name=d.get("name")
        )
    raise SystemExit(f"a case holds a message with role {role!r}")


_ROLES = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}


def to_dict(m: BaseMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": _ROLES[m.type], "content": m.content, "id": m.id}
    if isinstance(m, AIMessage):
        out["tool_calls"] = [
            {"id": c["id"], "name": c["name"], "args": c["args"]} for c in m.tool_calls
        ]
    if isinstance(m, ToolMessage):
        out["tool_call_id"] = m.tool_call_id
        out["name"] = m.name
    return out


def run_context_editing(case: dict[str, Any], messages: list[BaseMessage]) -> dict[str, Any]:
    system = messages[0] if messages and isinstance(messages[0], SystemMessage) else None
    rest = messages[1:] if system is not None else messages
    middleware = ContextEditingMiddleware(
        edits=[ClearToolUsesEdit(**case["params"])],
        token_counter=make_counter(case["encoding"]),
    )
    seen: list[BaseMessage] = []

    def handler(request: ModelRequest[Any]) -> ModelResponse[Any]:
        seen.extend(request.messages)
        return ModelResponse(result=[AIMessage(content="")])

    model = FakeListChatModel(responses=[""])
    middleware.wrap_model_call(
        ModelRequest(model=model, messages=rest, system_message=system), handler
    )
    out = ([system] if system is not None else []) + seen
    return {"messages": [to_dict(m) for m in out]}


def _context_size(spec: list[Any]) -> Any:
    kind, value = spec
    return (kind, value)


def run_summarization(case: dict[str, Any], messages: list[BaseMessage]) -> dict[str, Any]:
    system = messages[0] if messages and isinstance(messages[0], SystemMessage) else None
    rest = messages[1:] if system is not None else messages
    model = StandInModel(responses=[case["summary"] or ""], prompts=[])
    params = case["params"]
    middleware = SummarizationMiddleware(
        model,
        trigger=_context_size(params["trigger"]),
        keep=_context_size(params["keep"]),
        token_counter=make_counter(case["encoding"]),
    )
    update = middleware.before_model({"messages": rest}, None)  # type: ignore[arg-type]
    out = rest if update is None else update["messages"][1:]  # [0] is RemoveMessage(all)
    prompt_matches = None
    if case.get("summary_input") is not None:
        expected = DEFAULT_SUMMARY_PROMPT.format(
            messages=get_buffer_string([to_message(m) for m in case["summary_input"]], format="xml")
        ).rstrip()
        prompt_matches = model.prompts == [expected]
    return {
        "messages": [to_dict(m) for m in ([system] if system is not None else []) + out],
        "summary_calls": len(model.prompts),
        "prompt_matches": prompt_matches,
    }


def run_trim(case: dict[str, Any], messages: list[BaseMessage]) -> dict[str, Any]:
    params = dict(case["params"])
    out = trim_messages(messages, token_counter=make_counter(case["encoding"]), **params)
    return {"messages": [to_dict(m) for m in out]}


RUNNERS = {
    "context-editing": run_context_editing,
    "summarization": run_summarization,
    "trim": run_trim,
}


def main() -> None:
    data = json.load(sys.stdin)
    results = []
    for case in data["cases"]:
        messages = [to_message(m) for m in case["messages"]]
        out = RUNNERS[case["policy"]](case, messages)
        results.append({"name": case["name"], **out})
    json.dump({"package": PACKAGES, "results": results}, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
