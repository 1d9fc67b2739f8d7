"""``ctxscope tune --preset P FILE...``: a policy's knobs searched for the lowest cost with
recall at or above a floor (docs/design.md, "Evaluating policies").

Every setting of the grid is evaluated on the recorded sessions given
(``ctxcore.replay.evaluate``: input tokens, $ through the simulated prompt cache, recall,
losses); the winner is the cheapest setting whose recall is at or above ``--recall-floor``
(ties: fewer input tokens, then the earlier setting). The grid is ``--grid k=v1,v2,...`` per
knob, else the default grid of ``default_grid``, sized to the sessions given: a knob counted
in tokens (``TOKEN_KNOBS``) tries values inside the range of the sessions' own calls.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import shlex
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from ctxcore import knobs
from ctxcore.errors import InputError
from ctxcore.models import Trace
from ctxcore.replay.evaluate import PolicyScore, evaluate, label
from ctxcore.replay.variants import INPUT_FACTS

#: the most settings the default grid may hold; a larger one asks for ``--grid``
MAX_DEFAULT_SETTINGS = 256
#: knobs counted in tokens of the request: their default grid is sized to the sessions' calls
#: (a 100,000-token trigger never fires on a session of 6,000-token calls)
TOKEN_KNOBS = ("trigger", "max_tokens", "clear_at_least")


def _two_digits(v: float) -> int:
    """``v`` rounded to two significant digits (12,345 → 12,000)."""
    return int(float(f"{v:.2g}")) if v >= 1 else 0


def sized_values(name: str, sizes: Sequence[int]) -> list[int]:
    """A token knob's grid on calls of ``sizes`` input tokens: a trigger or a limit at the
    calls' quartiles (it fires on the larger calls, not on the smaller), ``clear_at_least``
    at none, 5 % and 20 % of the median call."""
    if name == "clear_at_least":
        median = statistics.median(sizes)
        raw = [0, _two_digits(median * 0.05), _two_digits(median * 0.2)]
    elif len(sizes) == 1:
        raw = [_two_digits(sizes[0] * q) for q in (0.5, 0.75, 0.9)]
    else:
        raw = [_two_digits(v) for v in statistics.quantiles(sizes, n=4)]
    return sorted(set(raw))


def session_sizes(traces: Sequence[Trace]) -> list[int]:
    """The input tokens of each recorded call (its rebuild as sent)."""
    return [t.result.totals.used for t in traces if t.result is not None]


def _values_around(k: knobs.Knob, default: float) -> list[float]:
    """A knob's default grid around its preset default ``d``: the lowest value, d/2, d and
    2d (a default at the lowest value: d, d + step, d + 10 steps), in bounds and rounded to
    the knob's step (integers to whole numbers)."""
    lo = k.low_value()
    hi = k.top_value()
    step = k.step or (1 if k.kind == "int" else 0.1)
    if lo is not None and default <= lo:
        raw = [default, default + step, default + 10 * step]
    else:
        raw = [lo if lo is not None else default / 4, default / 2, default, default * 2]
    out: list[float] = []
    for v in raw:
        v = max(v, lo) if lo is not None else v
        v = min(v, hi) if hi is not None else v
        v = round(v) if k.kind == "int" else round(round(v / step) * step, 6)
        if v not in out:
            out.append(v)
    return sorted(out)


def _derived_values(k: knobs.Knob) -> list[float]:
    """A share whose default the preset computes (``Derived``): its range's quarters (a
    computed count or size has no grid of its own)."""
    lo, hi = k.low_value(), k.top_value()
    if k.kind != "ratio" or lo is None or hi is None:
        return []
    vals = [lo + (hi - lo) * q for q in (0.25, 0.5, 0.75, 1.0)]
    return [round(v, 2) for v in vals]


def default_grid(preset: str, sizes: Sequence[int] = ()) -> dict[str, list[Any]]:
    """The grid searched when ``--grid`` is not given: each numeric knob the preset has
    (not the input's facts, ``window`` and ``output_reserve``, nor a score weight without
    ``Knob.tune``) at ``Knob.tune`` if it has one; a knob counted in tokens, given the calls'
    ``sizes``, inside their range (``sized_values``); else its lowest value, half its preset
    default, the default and twice it (``_values_around``), or for a default the preset
    computes, the quarters of its range if it is a share; every combination of them (at
    most ``MAX_DEFAULT_SETTINGS``)."""
    grid: dict[str, list[Any]] = {}
    for name in knobs.honoured(preset):
        k = knobs.BY_NAME[name]
        if not k.numeric or name in INPUT_FACTS or (k.weight and not k.tune):
            continue
        d = k.defaults[preset]
        if name in TOKEN_KNOBS and sizes:
            values: list[Any] = sized_values(name, sizes)
        elif k.tune:
            values = list(k.tune)
        elif isinstance(d, knobs.Derived):
            values = _derived_values(k)
        elif isinstance(d, int | float) and not isinstance(d, bool):
            values = _values_around(k, d)
        else:
            continue
        if len(values) > 1:
            grid[name] = values
    return grid


def _parsed(k: knobs.Knob, text: str, where: str) -> Any:
    """One ``--grid`` value of knob ``k``, checked against its kind and bounds."""
    try:
        if k.kind == "int":
            v: Any = int(text)
        elif k.numeric:
            v = float(text)
        elif k.kind == "bool" and text.lower() in ("true", "false"):
            v = text.lower() == "true"
        elif k.kind == "choice" and text in k.choices:
            v = text
        else:
            raise ValueError(text)
    except ValueError:
        raise InputError(f"{where}: {text!r} is not {k.describe()}") from None
    if k.numeric and not _in_bounds(k, v):
        raise InputError(f"{where}: {text} is not {k.describe()}")
    return v


def _in_bounds(k: knobs.Knob, v: float) -> bool:
    return (
        (k.ge is None or v >= k.ge)
        and (k.gt is None or v > k.gt)
        and (k.le is None or v <= k.le)
        and (k.lt is None or v < k.lt)
    )


def grid_from(preset: str, specs: Sequence[str]) -> dict[str, list[Any]]:
    """``--grid k=v1,v2,...`` (repeatable) as knob → values; a knob the preset lacks, or one
    that takes no grid (a list or a text), is refused in one line."""
    grid: dict[str, list[Any]] = {}
    for spec in specs:
        name, sep, rest = spec.partition("=")
        name = name.strip()
        if not sep or not rest.strip():
            raise InputError(f"--grid {spec!r}: write KNOB=V1,V2,...")
        if name not in knobs.honoured(preset) or name in INPUT_FACTS:
            has = ", ".join(n for n in knobs.honoured(preset) if n not in INPUT_FACTS)
            raise InputError(f"--grid {name}: preset {preset} has no knob {name} (it has: {has})")
        k = knobs.BY_NAME[name]
        if not (k.numeric or k.kind in ("bool", "choice")):
            raise InputError(f"--grid {name}: a {k.kind} knob is not searched over a grid")
        grid[name] = [_parsed(k, v.strip(), f"--grid {name}") for v in rest.split(",")]
    return grid


def settings_of(preset: str, grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, as settings patches of ``preset``."""
    names = list(grid)
    return [
        {"preset": preset, **dict(zip(names, combo, strict=True))}
        for combo in itertools.product(*(grid[n] for n in names))
    ]


def winner(scores: Sequence[PolicyScore], floor: float) -> int | None:
    """The index in ``scores`` of the cheapest with recall at or above ``floor`` (ties: fewer
    input tokens, then the first); None when none is."""
    ok = [
        i
        for i, s in enumerate(scores)
        if s.recall is not None and s.recall >= floor and s.cost_usd is not None
    ]
    return min(ok, key=lambda i: (scores[i].cost_usd, scores[i].input_tokens, i), default=None)


def replay_line(files: Sequence[str], settings: dict[str, Any]) -> str:
    """The ``ctxscope replay`` command that evaluates ``settings`` again."""
    parts = ["ctxscope", "replay", *files, "--preset", str(settings["preset"])]
    for k, v in settings.items():
        if k != "preset":
            parts += ["--set", f"{k}={str(v).lower() if isinstance(v, bool) else v}"]
    return shlex.join(parts)


def _table(base: PolicyScore, scores: Sequence[PolicyScore], best: int | None) -> str:
    """The settings tried, the winner marked ``*``, under the recording as sent."""
    lines = [f"  {'setting':<58} {'input tokens':>12} {'$ cached':>10} {'recall':>7} {'losses':>6}"]
    for i, s in enumerate([base, *scores]):
        mark = "*" if best is not None and i == best + 1 else " "
        usd = "?" if s.cost_usd is None else f"{s.cost_usd:.4f}"
        rec = "-" if s.recall is None else f"{s.recall:.1%}"
        lines.append(
            f"{mark} {s.label[:58]:<58} {s.input_tokens:>12,} {usd:>10} {rec:>7} {s.losses:>6}"
        )
    return "\n".join(lines) + "\n"


def run_tune_policy(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """``tune --preset P FILE... [--recall-floor R] [--grid k=v1,v2 ...] [--json]``; exit 0
    with a winner, 1 when no setting reaches the floor."""
    from ctxcore.cost import price_table
    from ctxcore.formats.load import load_file

    out = out or sys.stdout
    preset: str = args.preset
    files = [str(f) for f in args.sessions]
    if not files:
        raise InputError(f"tune --preset {preset}: give the recorded sessions (FILE...)")
    traces = [t for f in files for t in load_file(f)]
    sizes = session_sizes(traces)
    grid = grid_from(preset, args.grid) if args.grid else default_grid(preset, sizes)
    size = math.prod(len(v) for v in grid.values())
    if not args.grid and size > MAX_DEFAULT_SETTINGS:
        raise InputError(
            f"the default grid of {preset} is {size:,} settings "
            f"({', '.join(grid)}): name the knobs to search with --grid KNOB=V1,V2,..."
        )
    policies = settings_of(preset, grid)
    prices = price_table(Path(args.prices) if args.prices else None)
    base, *scores = evaluate(traces, policies, prices, workers=args.workers)
    best = winner(scores, args.recall_floor)
    line = None if best is None else replay_line(files, policies[best])
    if args.json:
        doc = {
            "preset": preset,
            "recall_floor": args.recall_floor,
            "grid": grid,
            "grid_given": bool(args.grid),
            "recorded": _row(base),
            "settings": [_row(s) for s in scores],
            "winner": best,
            "replay": line,
        }
        out.write(json.dumps(doc, ensure_ascii=False) + "\n")
        return 0 if best is not None else 1
    how = (
        "--grid"
        if args.grid
        else "the default grid (token knobs inside the calls' "
        f"{min(sizes, default=0):,}-{max(sizes, default=0):,} tokens; others lowest value, "
        "half, default, twice)"
    )
    out.write(f"{preset}: {len(policies)} settings from {how}, recall floor {args.recall_floor}\n")
    out.write(_table(base, scores, best))
    if best is None:
        out.write(f"no setting reaches recall {args.recall_floor:.1%} on these sessions\n")
        return 1
    out.write(f"winner (*): {label(policies[best])}\n  {line}\n")
    return 0


def _row(s: PolicyScore) -> dict[str, Any]:
    """A setting's totals (``PolicyScore.as_json`` without its turns)."""
    return {k: v for k, v in s.as_json().items() if k != "turns"}


__all__ = [
    "MAX_DEFAULT_SETTINGS",
    "TOKEN_KNOBS",
    "default_grid",
    "grid_from",
    "replay_line",
    "run_tune_policy",
    "session_sizes",
    "sized_values",
    "settings_of",
    "winner",
]
