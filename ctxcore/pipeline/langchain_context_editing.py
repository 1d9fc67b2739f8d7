"""The ``langchain-context-editing`` preset: LangChain v1's ``ContextEditingMiddleware`` with
one ``ClearToolUsesEdit`` on the recorded request (docs/design.md, "Presets",
"langchain-context-editing").

Source: ``langchain==1.5.2``, ``langchain/agents/middleware/context_editing.py``. Each call is
edited as the middleware's ``wrap_model_call`` edits it: the request's messages (the system
prompt apart) counted with the shared token counter (``MessageCounter``: the tokenizer
knob's encoding, 3 per message, tool calls included); above ``trigger`` the tool results older
than the ``keep`` most recent ones are replaced by ``placeholder`` (their calls' arguments
cleared too with ``clear_tool_inputs``), those of ``exclude_tools`` left, stopping once
``clear_at_least`` tokens are reclaimed. ``tests/test_oracle_langchain.py`` checks it against
the package.
"""

from __future__ import annotations

from ctxcore.knobs import preset_defaults, refused
from ctxcore.models import CapturedInput, Config
from ctxcore.pipeline.common import Summarizer
from ctxcore.pipeline.langchain_build import Built, Outcome, runner
from ctxcore.pipeline.langchain_policies import (
    ClearToolUses,
    MessageCounter,
    clear_tool_uses,
    recorded_messages,
    refuse_unsupported,
)
from ctxcore.pipeline.recorded import conversation, with_tokenizer
from ctxcore.tokens import TokenCounter

NAME = "langchain-context-editing"
VERSION = "langchain==1.5.2"
POLICY = "ContextEditingMiddleware(ClearToolUsesEdit)"

DEFAULTS: dict[str, object] = preset_defaults(NAME)
UNSUPPORTED = refused(NAME)


def resolve(config: Config, input: CapturedInput) -> Config:
    """Fill every unset knob with ``ClearToolUsesEdit``'s default; refuse the others."""
    del input
    refuse_unsupported(NAME, config, UNSUPPORTED)
    return with_tokenizer(config, DEFAULTS)


def edit_of(config: Config) -> ClearToolUses:
    """The ``ClearToolUsesEdit`` a resolved config describes."""
    assert config.trigger is not None and config.keep is not None
    assert config.clear_at_least is not None and config.placeholder is not None
    return ClearToolUses(
        trigger=config.trigger,
        clear_at_least=config.clear_at_least,
        keep=config.keep,
        clear_tool_inputs=bool(config.clear_tool_inputs),
        exclude_tools=tuple(config.exclude_tools or ()),
        placeholder=config.placeholder,
    )


def outcome(
    input: CapturedInput,
    config: Config,
    counter: TokenCounter,
    summarizer: Summarizer | None = None,
) -> Built:
    """What ``run`` sends, before it is counted and reported."""
    del summarizer
    conv = conversation(input)
    system, rest = recorded_messages(conv)
    edited, fates = clear_tool_uses(rest, edit_of(config), MessageCounter(counter))
    sent = ([system] if system is not None else []) + edited
    by_part = {rest[k].source: f for k, f in fates.items() if rest[k].source is not None}
    return conv, Outcome(sent, by_part, POLICY)  # type: ignore[arg-type]


run = runner(outcome, "The recorded request with the tool results the edit clears replaced.")

__all__ = ["NAME", "VERSION", "edit_of", "outcome", "resolve", "run"]
