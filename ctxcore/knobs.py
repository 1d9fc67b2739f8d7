"""The knobs: every builder setting declared once (docs/design.md, "Knobs").

A knob is one entry of ``KNOBS``: its name (the ``Config`` field), its kind and bounds, its
default in each preset that honours it, its label and help, and what the rest of ctxscope
does with it — whether the Sweep page offers it, the grid ``ctxscope tune`` searches, where
the counterfactual search tries it. Everything that lists knobs reads this table:
``models.Config`` takes its bounds and validator lists from it, the presets their defaults
and the knobs they refuse, the Playground its controls, the Sweep page its choices, the
counterfactual search and ``tune`` their knobs, ``ctxscope build --set`` its checks, the
README its table of knobs, and ``ctxcore.testing`` its one-line config summary.

The order of ``KNOBS`` is the order people see them in: the Playground's controls, the README
table, the knob lists in error messages. ``Config``'s own field order is the stored JSON's
and does not change.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ctxcore.settings import MAX_INT32, MAX_TOKENS, PRESET_NAMES
from ctxcore.tokens import TOKENIZERS

#: ``int`` and ``float`` are numbers (a ``ratio`` is a float in [0, 1], drawn as a slider);
#: ``choice`` is one string of ``choices``; ``list`` an ordered list of strings; ``shares``
#: a share per partition; ``text`` any string.
Kind = Literal["int", "ratio", "float", "bool", "choice", "list", "shares", "text"]
Value = int | float | bool | str | tuple[str, ...] | Mapping[str, float]


@dataclass(frozen=True, slots=True)
class Derived:
    """A default the preset computes from the input or other knobs (``resolve``): the
    sentence says how, for the README and the Playground's help."""

    how: str


@dataclass(frozen=True, slots=True)
class Search:
    """How the counterfactual search (``diagnostics/counterfactual.py``) tries a knob:
    ``rank`` orders the searches (lower first: with a limited number of re-runs, the first
    searched are the ones tried), ``quick`` puts it in the detectors' quick set."""

    rank: int
    quick: bool = False


@dataclass(frozen=True, slots=True)
class Knob:
    """One builder setting: the single declaration every other part reads."""

    name: str
    kind: Kind
    label: str
    help: str
    #: preset name → default; a preset not named here does not have the knob (refuses it)
    defaults: Mapping[str, Value | Derived]
    #: bounds as pydantic takes them (``Config`` reads them): ge ≤ value ≤ le, gt < value < lt
    ge: int | float | None = None
    gt: int | float | None = None
    le: int | float | None = None
    lt: int | float | None = None
    choices: tuple[str, ...] = ()
    #: the step of the app's control, and its lowest and highest values where they are
    #: inside the bounds (a control cannot offer "above 0" or "below 1")
    step: float | None = None
    low: float | None = None
    top: float | None = None
    #: derived from ``max_tokens`` when unset: the Playground offers an "auto" switch
    auto: bool = False
    #: the Sweep page offers it as an axis
    sweep: bool = False
    #: the values ``ctxscope tune`` tries (empty: tune leaves it alone)
    tune: tuple[float, ...] = ()
    #: where the counterfactual search tries it (None: it does not)
    search: Search | None = None
    #: a weight of the score: it only orders the candidates (the Playground's "no effect" note)
    weight: bool = False
    #: its place (lower first) in one-line config summaries (``ctxcore.testing``'s failure
    #: messages); None: not shown there
    summary: int | None = None

    @property
    def presets(self) -> tuple[str, ...]:
        """The presets that honour this knob, in ``settings.PRESET_NAMES`` order."""
        return tuple(p for p in PRESET_NAMES if p in self.defaults)

    @property
    def numeric(self) -> bool:
        return self.kind in ("int", "ratio", "float")

    @property
    def python_type(self) -> Any:
        """The type ``Config`` declares for it (without ``| None``; a ``choice`` may be a
        ``Literal`` of its choices)."""
        return _PYTHON_TYPES[self.kind]

    def pydantic_field(self) -> Any:
        """The pydantic field ``Config`` declares it with: default ``None`` (the preset's
        default) and the bounds."""
        from pydantic import Field

        return Field(default=None, ge=self.ge, gt=self.gt, le=self.le, lt=self.lt)

    def bounds(self) -> dict[str, int | float | None]:
        return {"ge": self.ge, "gt": self.gt, "le": self.le, "lt": self.lt}

    def low_value(self) -> float | None:
        """The lowest value the app's controls offer: ``low``, else the lower bound."""
        if self.low is not None:
            return self.low
        return self.ge if self.ge is not None else self.gt

    def top_value(self) -> float | None:
        """The highest value the app's controls offer: ``top``, else the upper bound."""
        if self.top is not None:
            return self.top
        return self.le if self.le is not None else self.lt

    def describe(self) -> str:
        """Its kind and bounds in words: "an integer from 1 to 1,099,511,627,776"."""
        if self.kind == "bool":
            return "true or false"
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        if self.kind == "list":
            return "a list of names" + (f" from {', '.join(self.choices)}" if self.choices else "")
        if self.kind == "shares":
            return "a share from 0 to 1 per partition"
        if self.kind == "text":
            return "a text"
        what = "an integer" if self.kind == "int" else "a number"
        lo, hi = self.ge, self.le
        low = "" if lo is not None else "above "
        if lo is None and self.gt is not None and self.kind == "int":
            lo, low = self.gt + 1, ""  # an integer above n is one from n + 1
        elif lo is None:
            lo = self.gt
        high = "" if hi is not None else "below "
        hi = hi if hi is not None else self.lt
        if lo is not None and hi is not None:
            return f"{what} from {low}{_number(lo)} to {high}{_number(hi)}"
        if lo is not None:
            return f"{what} {low or 'at least '}{_number(lo)}"
        if hi is not None:
            return f"{what} {high or 'at most '}{_number(hi)}"
        return what


_PYTHON_TYPES: dict[str, Any] = {
    "int": int,
    "ratio": float,
    "float": float,
    "bool": bool,
    "choice": str,
    "list": list[str],
    "shares": dict[str, float],
    "text": str,
}


def _number(v: float | None) -> str | None:
    if v is None:
        return None
    if float(v).is_integer():
        return f"{int(v):,}"
    return f"{v:g}"


def _ratio(
    name: str, label: str, help: str, defaults: Mapping[str, Value | Derived], **kw: Any
) -> Knob:
    """A share or a weight: a number from 0 to 1 (unless ``kw`` says otherwise), a slider."""
    return Knob(name, "ratio", label, help, defaults, **{"ge": 0, "le": 1, "step": 0.01, **kw})


def _signal(signal: str, label: str, default: float, help: str) -> Knob:
    """The weight of one of the ctxscope preset's signals (``pipeline/signals.py``)."""
    return _ratio(
        f"{signal}_weight",
        f"signal: {label} (weight)",
        f"Adds weight × the {signal.replace('_', ' ')} signal's strength to the score: {help}",
        {"ctxscope": default},
        tune=SIGNAL_GRID,
        weight=True,
    )


#: The signal weights' defaults: fresh and error evidence outrank a good word match (the
#: relevance weight is 0.6 for a perfect BM25 score), mentions and references come next,
#: metadata last; ``ctxscope tune`` searches around these over this grid.
SIGNAL_GRID: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.6, 0.8, 1.0)

#: the LangChain policy presets (docs/design.md, "LangChain policies")
_LANGCHAIN = ("langchain-context-editing", "langchain-summarization", "langchain-trim")
#: the other policy presets on the recorded request (docs/design.md, "anthropic-context-editing",
#: "auto-compact")
_ANTHROPIC = "anthropic-context-editing"
_COMPACT = "auto-compact"
#: the SWE-agent and OpenHands policy presets (docs/design.md, "Agent policies")
_SWE_MASKING = "swe-agent-masking"
_HYBRID = "masking-summary-hybrid"
_OPENHANDS_MASKING = "openhands-observation-masking"
_OPENHANDS_RECENT = "openhands-recent-events"
_OPENHANDS_WINDOW = "openhands-conversation-window"
_OPENHANDS_SUMMARIZING = "openhands-summarizing"
_AGENT = (
    _SWE_MASKING,
    _OPENHANDS_MASKING,
    _OPENHANDS_RECENT,
    _OPENHANDS_WINDOW,
    _OPENHANDS_SUMMARIZING,
    _HYBRID,
)
#: LangChain's message types ``trim_messages``' start_on and end_on name, and none
_MESSAGE_TYPES = ("none", "human", "ai", "system", "tool")

KNOBS: tuple[Knob, ...] = (
    Knob(
        "tokenizer",
        "choice",
        "Tokenizer",
        "What counts tokens: a tiktoken encoding (exact) or one of the seeds' estimators.",
        {
            "ctxscope": "cl100k_base",
            "hello-agents": "cl100k_base",
            "hello-agents-book": "book-heuristic",
            "recorded": "cl100k_base",
            **{p: "cl100k_base" for p in _LANGCHAIN},
            **{p: "cl100k_base" for p in _AGENT},
            _ANTHROPIC: "cl100k_base",
            _COMPACT: "cl100k_base",
        },
        choices=TOKENIZERS,
        summary=7,
    ),
    Knob(
        "max_tokens",
        "int",
        "max_tokens (window budget)",
        "The model's window the context is built for.",
        {
            "ctxscope": Derived("the input's window, else 8,000"),
            "hello-agents": 8000,
            "hello-agents-book": 3000,
            "langchain-trim": Derived("the input's window less its output reserve, else 8,000"),
            _OPENHANDS_WINDOW: Derived(
                "the input's window less its output reserve, else 8,000 (over it, the "
                "provider refuses the request and OpenHands condenses)"
            ),
        },
        gt=0,
        le=MAX_TOKENS,
        step=100,
        low=100,
        sweep=True,
        search=Search(1, quick=True),
        summary=1,
    ),
    _ratio(
        "reserve_ratio",
        "reserve_ratio",
        "The share of max_tokens kept free for the model's answer.",
        {"ctxscope": 0.15, "hello-agents": 0.15, "hello-agents-book": 0.2},
        le=None,
        lt=1,
        top=0.95,
        sweep=True,
        search=Search(4, quick=True),
        summary=2,
    ),
    Knob(
        "output_reserve",
        "int",
        "output_reserve (tokens)",
        "Tokens kept free for the model's answer; set, it replaces reserve_ratio.",
        {"ctxscope": Derived("the input's output_reserve, else reserve_ratio × max_tokens")},
        ge=0,
        le=MAX_TOKENS,
        step=100,
        auto=True,
        sweep=True,
        search=Search(5, quick=True),
    ),
    Knob(
        "safety_margin",
        "int",
        "safety_margin (tokens)",
        "Tokens left unused as a margin against miscounts.",
        {"ctxscope": Derived("2 % of max_tokens")},
        ge=0,
        le=MAX_TOKENS,
        step=100,
        auto=True,
        sweep=True,
        search=Search(6),
    ),
    _ratio(
        "min_relevance",
        "min_relevance",
        "Candidates less relevant than this are filtered out before the fill.",
        {"ctxscope": 0.05, "hello-agents": 0.3, "hello-agents-book": 0.1},
        sweep=True,
        tune=(0.0, 0.02, 0.05, 0.1, 0.2),
        search=Search(2, quick=True),
        summary=3,
    ),
    _ratio(
        "relevance_weight",
        "relevance_weight",
        "The weight of relevance in the score.",
        {"ctxscope": 0.6, "hello-agents-book": 0.7},
        sweep=True,
        tune=(0.2, 0.4, 0.6, 0.8, 1.0),
        search=Search(3, quick=True),
        weight=True,
        summary=4,
    ),
    _ratio(
        "recency_weight",
        "recency_weight",
        "The weight of recency in the score.",
        {"ctxscope": 0.3, "hello-agents-book": 0.3},
        sweep=True,
        tune=(0.0, 0.1, 0.3, 0.5),
        weight=True,
        summary=5,
    ),
    _ratio(
        "priority_weight",
        "priority_weight",
        "The weight of the packets' priority in the score.",
        {"ctxscope": 0.1},
        sweep=True,
        weight=True,
    ),
    _signal(
        "current_turn", "current turn", 0.4, "a tool result of this turn, or of the last call."
    ),
    _signal("error", "error evidence", 0.5, "failing tests, tracebacks, compiler errors."),
    _signal("mention", "named by the user", 0.4, "paths, symbols, ids the user named."),
    _signal(
        "reference", "referenced by the last step", 0.3, "what the last assistant step touched."
    ),
    _signal(
        "metadata",
        "search hits / modified / linked test",
        0.2,
        "search hits, modification times, linked tests in a packet's metadata.",
    ),
    _signal(
        "lexical",
        "identifier & word-form match",
        0.3,
        "query words found once identifiers are split and word forms matched.",
    ),
    Knob(
        "recency_tau_hours",
        "float",
        "recency_tau_hours",
        "Recency is exp(−age in hours / this).",
        {"ctxscope": 6.0},
        gt=0,
        step=1.0,
        low=0.01,
    ),
    Knob(
        "enable_compression",
        "bool",
        "enable_compression",
        "Compress the prompt when it still overflows: the ctxscope preset's last resort "
        "with an estimated count, the hello-agents presets' own cut.",
        {"ctxscope": True, "hello-agents": True, "hello-agents-book": True},
    ),
    Knob(
        "fill",
        "choice",
        "fill",
        "skip tries smaller items after one that does not fit; break stops at the first; "
        "optimal is a 0/1 knapsack.",
        {"ctxscope": "skip"},
        choices=("skip", "break", "optimal"),
        summary=6,
    ),
    Knob(
        "history_limit",
        "int",
        "history_limit (messages)",
        "How many of the latest history messages compete on their own.",
        {"ctxscope": 20, "hello-agents": 10, "hello-agents-book": 5},
        ge=0,
        le=MAX_INT32,
        step=1,
        sweep=True,
        search=Search(7),
    ),
    Knob(
        "partition_budgets",
        "shares",
        "Partition budgets (ratios of the budget)",
        "Caps per partition as shares of the available budget; they may sum past 1.",
        {
            "ctxscope": {
                "[Role & Policies]": 0.30,
                "[Task]": 0.25,
                "[State]": 0.15,
                "[Evidence]": 0.65,
                "[Context]": 0.45,
                "[Output]": 0.05,
            }
        },
        search=Search(8),
    ),
    Knob(
        "degrade",
        "list",
        "degrade order",
        "The degradation ladder's steps, run in this order until the build fits.",
        {"ctxscope": Derived("every step of the ladder, in its order")},
    ),
    # LangChain v1's policies (docs/design.md, "LangChain policies"): each knob is the
    # parameter of the same name, with the package's default
    Knob(
        "trigger",
        "int",
        "trigger",
        "When the policy acts. langchain-context-editing (ClearToolUsesEdit): above this many "
        "tokens in the messages. langchain-summarization (SummarizationMiddleware): at this "
        "many tokens or messages (trigger_kind). anthropic-context-editing "
        "(clear_tool_uses_20250919): above this many input tokens in the whole request.",
        {
            "langchain-context-editing": 100_000,
            "langchain-summarization": 4000,
            _ANTHROPIC: 100_000,
        },
        ge=0,
        le=MAX_TOKENS,
        step=1000,
    ),
    Knob(
        "trigger_kind",
        "choice",
        "trigger kind",
        "What trigger counts, as in SummarizationMiddleware's trigger=(kind, value): tokens or "
        "messages.",
        {"langchain-summarization": "tokens"},
        choices=("tokens", "messages"),
    ),
    Knob(
        "keep",
        "int",
        "keep",
        "What the policy leaves alone. langchain-context-editing: the most recent tool results "
        "(ClearToolUsesEdit keep). langchain-summarization: the most recent messages or tokens "
        "(keep_kind) kept after the summary. anthropic-context-editing: the most recent tool "
        "uses (clear_tool_uses_20250919 keep).",
        {"langchain-context-editing": 3, "langchain-summarization": 20, _ANTHROPIC: 3},
        ge=0,
        le=MAX_TOKENS,
        step=1,
    ),
    Knob(
        "keep_kind",
        "choice",
        "keep kind",
        "What keep counts, as in SummarizationMiddleware's keep=(kind, value): messages or tokens.",
        {"langchain-summarization": "messages"},
        choices=("messages", "tokens"),
    ),
    Knob(
        "clear_at_least",
        "int",
        "clear_at_least (tokens)",
        "ClearToolUsesEdit stops clearing once this many tokens are reclaimed (0: it clears "
        "every tool result older than keep). anthropic-context-editing: a clearing that would "
        "reclaim fewer tokens is not applied (0: none).",
        {"langchain-context-editing": 0, _ANTHROPIC: 0},
        ge=0,
        le=MAX_TOKENS,
        step=100,
    ),
    Knob(
        "clear_tool_inputs",
        "bool",
        "clear_tool_inputs",
        "ClearToolUsesEdit (and clear_tool_uses_20250919) also clears the arguments of the "
        "call a cleared result answers.",
        {"langchain-context-editing": False, _ANTHROPIC: False},
    ),
    Knob(
        "exclude_tools",
        "list",
        "exclude_tools",
        "ClearToolUsesEdit (and clear_tool_uses_20250919) never clears the results of these tools.",
        {"langchain-context-editing": (), _ANTHROPIC: ()},
    ),
    Knob(
        "placeholder",
        "text",
        "placeholder",
        "The text ClearToolUsesEdit puts in place of a cleared tool result.",
        {"langchain-context-editing": "[cleared]"},
    ),
    Knob(
        "strategy",
        "choice",
        "strategy",
        "trim_messages keeps the last messages that fit max_tokens, or the first.",
        {"langchain-trim": "last"},
        choices=("last", "first"),
    ),
    Knob(
        "token_counter",
        "choice",
        "token_counter",
        "What trim_messages counts: tokenizer (tokens per message with the tokenizer knob's "
        "encoding, 3 per message, tool calls included) or len (messages, as LangChain's "
        "token_counter=len).",
        {"langchain-trim": "tokenizer"},
        choices=("tokenizer", "len"),
    ),
    Knob(
        "include_system",
        "bool",
        "include_system",
        "trim_messages (strategy last) always keeps a first system message.",
        {"langchain-trim": False},
    ),
    Knob(
        "start_on",
        "choice",
        "start_on",
        "trim_messages (strategy last) drops the oldest kept messages until one of this type "
        "leads (none: no rule).",
        {"langchain-trim": "none"},
        choices=_MESSAGE_TYPES,
    ),
    Knob(
        "end_on",
        "choice",
        "end_on",
        "trim_messages drops the newest messages until one of this type ends the list (none: "
        "no rule).",
        {"langchain-trim": "none"},
        choices=_MESSAGE_TYPES,
    ),
    Knob(
        "allow_partial",
        "bool",
        "allow_partial",
        "trim_messages cuts the message that does not fit to the lines that do, instead of "
        "dropping it whole.",
        {"langchain-trim": False},
    ),
    Knob(
        "thinking_keep",
        "int",
        "thinking keep (turns)",
        "clear_thinking_20251015 keep: the thinking of the most recent assistant turns with "
        "thinking that stays; older thinking is cleared (a value at least the number of such "
        "turns is the API's keep all).",
        {_ANTHROPIC: 1},
        ge=0,
        le=MAX_INT32,
        step=1,
    ),
    _ratio(
        "threshold",
        "compaction threshold (share of the window)",
        "auto-compact compacts the conversation when the request reaches this share of the "
        "model's window.",
        {_COMPACT: Derived("the agent's calibrated share: claude-code 0.75, codex 0.81")},
        ge=0.01,
    ),
    Knob(
        "agent",
        "choice",
        "compacting agent",
        "Whose compaction auto-compact plays: claude-code keeps the summary alone, codex keeps "
        "the most recent user messages (up to 20,000 tokens) before its summary.",
        {_COMPACT: "claude-code"},
        choices=("claude-code", "codex"),
    ),
    # SWE-agent's history processors and OpenHands' condensers (docs/design.md, "Agent
    # policies"): each knob is the parameter of the same name, with its source's default
    Knob(
        "n",
        "int",
        "n (observations kept)",
        "LastNObservations: the observations after the instance template that keep their text; "
        "older ones read 'Old environment output: (K lines omitted)' (the paper's setting, 10).",
        {_SWE_MASKING: 10, _HYBRID: 10},
        ge=1,
        le=MAX_INT32,
        step=1,
    ),
    Knob(
        "polling",
        "int",
        "polling",
        "LastNObservations updates what it elides every polling observations (so between n and "
        "n + polling - 1 keep their text), for the prompt cache.",
        {_SWE_MASKING: 1, _HYBRID: 1},
        ge=1,
        le=MAX_INT32,
        step=1,
    ),
    Knob(
        "summarize_every_n_turns",
        "int",
        "summarize_every_n_turns (turns)",
        "SummarizeEveryNTurns n: how many (action, observation) turns one checkpoint summary "
        "replaces (the Complexity Trap's hybrid: 43).",
        {_HYBRID: 43},
        ge=1,
        le=MAX_INT32,
        step=1,
    ),
    Knob(
        "keep_last_m_turns",
        "int",
        "keep_last_m_turns (turns)",
        "SummarizeEveryNTurns: the most recent turns left unsummarized (it summarizes once "
        "summarize_every_n_turns + keep_last_m_turns turns are waiting).",
        {_HYBRID: 10},
        ge=0,
        le=MAX_INT32,
        step=1,
    ),
    Knob(
        "attention_window",
        "int",
        "attention_window (events)",
        "ObservationMaskingCondenser: observations among this many most recent events keep their "
        "content; older ones read <MASKED>.",
        {_OPENHANDS_MASKING: 100},
        ge=1,
        le=MAX_INT32,
        step=1,
    ),
    Knob(
        "keep_first",
        "int",
        "keep_first (events)",
        "RecentEventsCondenser and LLMSummarizingCondenser always keep this many first events "
        "(the system prompt is the first).",
        {_OPENHANDS_RECENT: 1, _OPENHANDS_SUMMARIZING: 1},
        ge=0,
        le=MAX_INT32,
        step=1,
    ),
    Knob(
        "max_events",
        "int",
        "max_events (events)",
        "RecentEventsCondenser: the events kept in all, the first keep_first and the most recent.",
        {_OPENHANDS_RECENT: 100},
        ge=1,
        le=MAX_INT32,
        step=1,
    ),
    Knob(
        "max_size",
        "int",
        "max_size (events)",
        "LLMSummarizingCondenser: past this many events in the view it forgets all but the first "
        "keep_first and the most recent into one summary (the view falls to max_size // 2).",
        {_OPENHANDS_SUMMARIZING: 100},
        ge=2,
        le=MAX_INT32,
        step=1,
    ),
)

BY_NAME: dict[str, Knob] = {k.name: k for k in KNOBS}
NAMES: tuple[str, ...] = tuple(BY_NAME)


def config_field(name: str) -> Any:
    """``Config``'s field for knob ``name`` (``Knob.pydantic_field``)."""
    return BY_NAME[name].pydantic_field()


def names(
    *, numeric: bool | None = None, finite: bool = False, kind: Kind | None = None
) -> tuple[str, ...]:
    """Knob names in order: the numeric ones (``numeric=True``), the float ones
    (``finite=True``: the values that must be finite numbers), those of one ``kind``."""
    out = [k for k in KNOBS if numeric is None or k.numeric == numeric]
    if finite:
        out = [k for k in out if k.kind in ("ratio", "float")]
    if kind is not None:
        out = [k for k in out if k.kind == kind]
    return tuple(k.name for k in out)


def searched(*, quick: bool = False) -> tuple[str, ...]:
    """The knobs the counterfactual search tries, by ``Search.rank`` (``quick``: only the
    detectors' quick set)."""
    found = [(k.search.rank, k.name) for k in KNOBS if k.search and (k.search.quick or not quick)]
    return tuple(name for _, name in sorted(found))


def summarized() -> tuple[str, ...]:
    """The knobs one-line config summaries show, by ``Knob.summary``."""
    return tuple(name for _, name in sorted((k.summary, k.name) for k in KNOBS if k.summary))


def honoured(preset: str) -> list[str]:
    """The knobs preset ``preset`` has, in order."""
    return [k.name for k in KNOBS if preset in k.defaults]


def refused(preset: str) -> tuple[str, ...]:
    """The knobs preset ``preset`` does not have: setting one is an error."""
    return tuple(k.name for k in KNOBS if preset not in k.defaults)


def preset_defaults(preset: str) -> dict[str, object]:
    """The fixed defaults of preset ``preset`` (``Derived`` ones are its ``resolve``'s to
    compute), fresh lists and dicts each call."""
    out: dict[str, object] = {}
    for k in KNOBS:
        v = k.defaults.get(preset)
        if v is None or isinstance(v, Derived):
            continue
        out[k.name] = list(v) if isinstance(v, tuple) else dict(v) if isinstance(v, Mapping) else v
    return out


def number(name: str, preset: str) -> float:
    """Knob ``name``'s fixed numeric default in preset ``preset``."""
    v = BY_NAME[name].defaults[preset]
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise TypeError(f"knob {name} has no numeric default in preset {preset}: {v!r}")
    return v


def whole(name: str, preset: str) -> int:
    """Knob ``name``'s fixed integer default in preset ``preset``."""
    v = number(name, preset)
    if not isinstance(v, int):
        raise TypeError(f"knob {name} has no integer default in preset {preset}: {v!r}")
    return v


def shares(name: str, preset: str) -> dict[str, float]:
    """Knob ``name``'s fixed per-partition default in preset ``preset``."""
    v = BY_NAME[name].defaults[preset]
    if not isinstance(v, Mapping):
        raise TypeError(f"knob {name} has no per-partition default in preset {preset}: {v!r}")
    return dict(v)


def hint(name: str) -> str:
    """What to add to a config error about field ``name`` (``loading.config_from_obj``):
    for a knob, its kind and bounds; for an unknown name, the knobs it may have meant and
    all of them."""
    k = BY_NAME.get(name)
    if k is not None:
        return f" ({name} is {k.describe()})"
    if name == "preset":
        return ""
    close = difflib.get_close_matches(name, NAMES, n=3, cutoff=0.6)
    meant = f"did you mean {' or '.join(close)}? " if close else ""
    return f"; {meant}the knobs: {', '.join(NAMES)}"


def _default_cell(k: Knob, preset: str) -> str:
    """The knob's default in ``preset`` as the README writes it ("—" where it has none)."""
    v = k.defaults.get(preset)
    if v is None:
        return "—"
    if isinstance(v, Derived):
        return v.how
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, Mapping):
        return ", ".join(f"{p.strip('[]')} {s:g}" for p, s in v.items())
    if isinstance(v, tuple):
        return ", ".join(v) if v else "none"
    return f"{v:,}" if isinstance(v, int) else f"{v:g}" if isinstance(v, float) else str(v)


def _defaults_text(k: Knob) -> str:
    """Which presets have ``k`` and its default in each, presets with one default together:
    "`a`, `b`: 0.15; `c`: 0.2". When every preset has it, the most common default is said
    once ("every preset: cl100k_base, but `hello-agents-book`: book-heuristic")."""
    groups: dict[str, list[str]] = {}
    for p in PRESET_NAMES:
        if p in k.defaults:
            groups.setdefault(_default_cell(k, p), []).append(p)

    def named(value: str) -> str:
        return ", ".join(f"`{p}`" for p in groups[value]) + f": {value}"

    if sum(map(len, groups.values())) == len(PRESET_NAMES) and len(PRESET_NAMES) > 2:
        common = max(groups, key=lambda v: len(groups[v]))
        rest = "; ".join(named(v) for v in groups if v != common)
        return f"every preset: {common}" + (f", but {rest}" if rest else "")
    return "; ".join(named(v) for v in groups)


def readme_table() -> str:
    """The README's table of knobs ("Knobs"; ``tests/test_knobs.py`` keeps it current and
    ``scripts/knob_table.py`` writes it): each knob, its kind and bounds, the presets that
    have it with its default in each (a preset not named refuses it), what it does."""
    head = ["Knob", "Values", "Presets and defaults", "What it does"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k in KNOBS:
        cells = [f"`{k.name}`", k.describe(), _defaults_text(k), k.help]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


__all__ = [
    "BY_NAME",
    "KNOBS",
    "NAMES",
    "SIGNAL_GRID",
    "Derived",
    "Kind",
    "Knob",
    "Search",
    "Value",
    "config_field",
    "hint",
    "honoured",
    "names",
    "number",
    "preset_defaults",
    "readme_table",
    "refused",
    "searched",
    "shares",
    "summarized",
    "whole",
]
