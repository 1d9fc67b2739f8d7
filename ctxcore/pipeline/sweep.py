"""Sweep a grid over two config knobs: where does the builder's behaviour change?

``sweep(input, config, x_param, x_values, y_param, y_values, watch_packet)`` returns a
``SweepGrid`` whose arrays hold, per cell, the tokens used, the items kept (and included at
any size), and whether a watched packet made it into the window. Every cell equals what
``build()`` returns for ``grid.config_at(i, j)``; the tests check several cells, including
ones where the degradation ladder fired.

Why it is fast: for the ``ctxscope`` preset with a tiktoken encoding, the input is gathered,
counted and relevance-scored once (``gather.prepare``), degraded versions are memoised per
input, and each cell only runs ``select.plan`` (numpy scoring and ordering, a linear fill) —
no prompt is rendered, because with additive segment counts the plan's charge *is* the
prompt's token count. Other presets, and estimator tokenizers (whose counts are not additive
and may need the last-resort compress), fall back to one full ``build()`` per cell;
``SweepGrid.vectorized`` says which path ran.

``sweep_session(inputs, ...)`` sweeps a recorded session (every call's input) and sums each
cell's input tokens over the calls. For the presets built on ``recorded`` it shares per
session what does not depend on the knobs — each call's rebuild and messages
(``recorded.conversation``, ``langchain_policies.shared_messages``, remembered per input),
the messages a part is sent as unchanged, the counts — and per cell runs only the policy
(``outcome`` of the preset) and its count (``langchain_build.used_tokens``), with the
config resolved once per cell and input facts. Every cell equals the sum of ``build()``'s
``totals.used`` over the calls; other presets run ``build()`` (docs/design.md, "Agent
policies", "Speed").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import ValidationError

from ctxcore.errors import InputError
from ctxcore.models import BuildResult, CapturedInput, Config, Status
from ctxcore.pipeline import build, preset, resolve_config
from ctxcore.pipeline.common import Summarizer
from ctxcore.tokens import get_counter, is_exact

_IN = (Status.KEPT, Status.TRUNCATED, Status.SUMMARIZED)


@dataclass
class SweepGrid:
    """Results of a sweep; every array is indexed ``[j, i]`` (y value j, x value i)."""

    input: CapturedInput
    config: Config
    x_param: str
    x_values: list[Any]
    y_param: str
    y_values: list[Any]
    tokens_used: npt.NDArray[np.int64]
    items_kept: npt.NDArray[np.int64]  # decisions with status "kept"
    items_included: npt.NDArray[np.int64]  # kept + truncated + summarized
    watch_packet: str | None = None
    #: the watched packet is in the prompt (at any size); None without a watched packet
    watch_in: npt.NDArray[np.bool_] | None = None
    vectorized: bool = False
    configs: list[list[Config]] = field(default_factory=list)

    def config_at(self, i: int, j: int) -> Config:
        """The resolved config of the cell at ``x_values[i]``, ``y_values[j]``."""
        return self.configs[j][i]

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.y_values), len(self.x_values))


def _cell_config(base: Config, x: str, xv: Any, y: str, yv: Any, input: CapturedInput) -> Config:
    data = base.model_dump()
    data[x] = xv
    data[y] = yv
    if base.preset == "ctxscope" and "reserve_ratio" in (x, y) and "output_reserve" not in (x, y):
        # a recorded config carries the resolved output_reserve, which would win over the
        # swept ratio: derive the reserve from the ratio, as resolve would for a fresh config
        ratio = data["reserve_ratio"]
        window = data.get("max_tokens") or input.window or 8000
        if isinstance(ratio, int | float) and isinstance(window, int) and 0 <= ratio < 1:
            data["output_reserve"] = round(ratio * window)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "config"
        raise InputError(
            f"sweep: {where} = {data.get(str(err['loc'][0]), '?')!r} is not valid "
            f"({err['msg']}); choose values in the knob's range"
        ) from exc


def _from_result(r: BuildResult, watch: str | None) -> tuple[int, int, int, bool | None]:
    kept = sum(1 for d in r.decisions if d.status == Status.KEPT)
    included = sum(1 for d in r.decisions if d.status in _IN)
    w: bool | None = None
    if watch is not None:
        w = any(d.packet_id == watch and d.status in _IN for d in r.decisions)
    return r.totals.used, kept, included, w


def _check_axes(x_param: str, y_param: str) -> None:
    """Two different config knobs, else an error naming the knobs."""
    for name in (x_param, y_param):
        if name not in Config.model_fields or name == "preset":
            raise InputError(
                f"sweep: {name!r} is not a config knob; choose one of "
                f"{', '.join(k for k in Config.model_fields if k != 'preset')}"
            )
    if x_param == y_param:
        raise InputError(f"sweep: x and y are both {x_param!r}; choose two different knobs")


def sweep(
    input: CapturedInput,
    config: Config | None,
    x_param: str,
    x_values: Sequence[Any],
    y_param: str,
    y_values: Sequence[Any],
    watch_packet: str | None = None,
    *,
    summarizer: Summarizer | None = None,
) -> SweepGrid:
    """Run the configured preset over the grid ``x_values × y_values``."""
    base = config or Config()
    _check_axes(x_param, y_param)
    xs, ys = list(x_values), list(y_values)
    nx, ny = len(xs), len(ys)
    tokens = np.zeros((ny, nx), dtype=np.int64)
    kept = np.zeros((ny, nx), dtype=np.int64)
    included = np.zeros((ny, nx), dtype=np.int64)
    watch = np.zeros((ny, nx), dtype=bool) if watch_packet is not None else None
    configs: list[list[Config]] = []
    vectorized = True
    for j, yv in enumerate(ys):
        row: list[Config] = []
        for i, xv in enumerate(xs):
            cfg = resolve_config(_cell_config(base, x_param, xv, y_param, yv, input), input)
            row.append(cfg)
            assert cfg.tokenizer is not None
            if cfg.preset == "ctxscope" and is_exact(cfg.tokenizer):
                used, k, inc, w = _ctxscope_cell(input, cfg, watch_packet, summarizer)
            else:
                vectorized = False
                used, k, inc, w = _from_result(
                    build(input, cfg, summarizer=summarizer), watch_packet
                )
            tokens[j, i], kept[j, i], included[j, i] = used, k, inc
            if watch is not None:
                watch[j, i] = bool(w)
        configs.append(row)
    return SweepGrid(
        input=input,
        config=base,
        x_param=x_param,
        x_values=xs,
        y_param=y_param,
        y_values=ys,
        tokens_used=tokens,
        items_kept=kept,
        items_included=included,
        watch_packet=watch_packet,
        watch_in=watch,
        vectorized=vectorized,
        configs=configs,
    )


def _ctxscope_cell(
    input: CapturedInput, cfg: Config, watch: str | None, summarizer: Summarizer | None
) -> tuple[int, int, int, bool | None]:
    from ctxcore.pipeline.ctxscope import _summarizer, knobs
    from ctxcore.pipeline.gather import HISTORY_SUMMARY_ID, prepare
    from ctxcore.pipeline.select import INCLUDED, KEPT, SUMMARIZED, TRUNCATED, plan

    assert cfg.tokenizer is not None
    counter = get_counter(cfg.tokenizer)
    prep = prepare(input, counter)
    pl = plan(prep, knobs(cfg), _summarizer(input, summarizer), counter)
    k = pl.count_status(KEPT)
    inc = k + pl.count_status(TRUNCATED) + pl.count_status(SUMMARIZED)
    w: bool | None = None
    if watch is not None:
        if watch == HISTORY_SUMMARY_ID:
            w = pl.summary is not None
        else:
            idx = prep.index_of.get(watch)
            w = idx is not None and pl.status[idx] in INCLUDED
    return pl.used, k, inc, w


@dataclass
class SessionSweep:
    """Input tokens of a session's calls over a grid, indexed ``[j, i]`` (y value j, x value
    i): ``tokens`` summed over the calls, ``per_call`` by call (``[j, i, k]``)."""

    config: Config
    x_param: str
    x_values: list[Any]
    y_param: str
    y_values: list[Any]
    tokens: npt.NDArray[np.int64]
    per_call: npt.NDArray[np.int64]
    #: the policy-only path ran (a preset built on ``recorded``), else one build per call
    shared: bool = False


def _policy_module(name: str) -> Any:
    """The module of a policy preset on ``recorded`` (it has ``outcome``), else None."""
    from ctxcore.pipeline.recorded import NAME, RECORDED_BASED

    return preset(name) if name in RECORDED_BASED and name != NAME else None


def _session_cell(
    inputs: Sequence[CapturedInput],
    cell: Config,
    counter_for: Any,
    summarizer: Summarizer | None,
) -> list[int]:
    """Each call's input tokens under ``cell`` (a config not yet resolved)."""
    from ctxcore.pipeline.langchain_build import used_tokens

    module = _policy_module(cell.preset)
    resolved: dict[tuple[int | None, int | None], Config] = {}
    out: list[int] = []
    for inp in inputs:
        facts = (inp.window, inp.output_reserve)  # all a preset reads of the input
        if module is None:
            out.append(build(inp, cell, summarizer=summarizer).totals.used)
            continue
        cfg = resolved.get(facts)
        if cfg is None:
            cfg = resolved[facts] = resolve_config(cell, inp)
        assert cfg.tokenizer is not None
        counter = counter_for(cfg.tokenizer)
        conv, outcome = module.outcome(inp, cfg, counter, summarizer)
        out.append(used_tokens(inp, conv, outcome, counter))
    return out


def sweep_session(
    inputs: Sequence[CapturedInput],
    config: Config,
    x_param: str,
    x_values: Sequence[Any],
    y_param: str,
    y_values: Sequence[Any],
    *,
    summarizer: Summarizer | None = None,
) -> SessionSweep:
    """The configured preset over the grid ``x_values × y_values`` on every call of a
    session (``inputs``, in the order sent); each cell's tokens are the calls' sum."""
    _check_axes(x_param, y_param)
    if not inputs:
        raise InputError("sweep: the session has no calls to sweep")
    xs, ys = list(x_values), list(y_values)
    per_call = np.zeros((len(ys), len(xs), len(inputs)), dtype=np.int64)
    for j, yv in enumerate(ys):
        for i, xv in enumerate(xs):
            cell = _cell_config(config, x_param, xv, y_param, yv, inputs[0])
            per_call[j, i] = _session_cell(inputs, cell, get_counter, summarizer)
    return SessionSweep(
        config=config,
        x_param=x_param,
        x_values=xs,
        y_param=y_param,
        y_values=ys,
        tokens=per_call.sum(axis=2),
        per_call=per_call,
        shared=_policy_module(config.preset) is not None,
    )


__all__ = ["SessionSweep", "SweepGrid", "sweep", "sweep_session"]
