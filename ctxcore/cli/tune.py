"""``ctxscope tune``: weights that are tuned, not guessed.

Searches the ctxscope preset's knobs that ``ctxcore.knobs`` gives a grid (``Knob.tune``: the
signal weights, ``relevance_weight``, ``recency_weight`` and ``min_relevance``) for the best
context recall on a set of sessions under one budget (recall as ``ctxcore.demo.recall``
measures it), by coordinate ascent: each knob in turn over a grid, keeping a change only when
it raises recall (ties: more error evidence kept, then the value nearer the default). Prints
the best settings, their recall and the turns they still miss, and writes them as a config
file that ``ctxscope build --config`` and the Playground load.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from ctxcore import knobs
from ctxcore.cli.demo import corpus_arg
from ctxcore.demo.recall import SESSIONS, Score, Turn, recall_of, turns_of
from ctxcore.errors import InputError
from ctxcore.models import Config
from ctxcore.output import STDOUT, is_stdout, write_output


def grid() -> dict[str, tuple[float, ...]]:
    """The knobs searched and the values each is tried at, in search order: those
    ``ctxcore.knobs`` gives a grid (``Knob.tune``)."""
    return {k.name: k.tune for k in knobs.KNOBS if k.tune}


def defaults() -> dict[str, float]:
    """Where the search starts: the ctxscope preset's defaults of the knobs searched."""
    return {name: knobs.number(name, "ctxscope") for name in grid()}


def _key(score: Score) -> tuple[float, float]:
    return (round(score.recall, 6), round(score.error_kept, 6))


def tune(
    turns: list[Turn], budget: int, rounds: int = 2, log: Any = None
) -> tuple[dict[str, float], Score, Score]:
    """The best knob values found, their score, and the defaults' score."""
    best = defaults()

    def score_of(values: dict[str, float]) -> Score:
        return recall_of(turns, Config(max_tokens=budget, **values))

    base = score_of(best)
    top = base
    for _ in range(rounds):
        changed = False
        for knob, values in grid().items():
            for value in values:
                if value == best[knob]:
                    continue
                trial = score_of({**best, knob: value})
                if _key(trial) > _key(top):
                    best, top, changed = {**best, knob: value}, trial, True
                    if log is not None:
                        print(f"  {knob} = {value:g}: recall {trial.recall:.1%}", file=log)
        if not changed:
            break
    return best, top, base


def cli_tune(args: argparse.Namespace) -> int:
    """``ctxscope tune [SESSIONS] [-o FILE]``; with ``-o -`` the config is the standard output
    and everything else goes to stderr. With ``--preset P`` a policy's knobs are searched
    instead (``ctxcore.cli.tune_policy``)."""
    if args.preset:
        from ctxcore.cli.tune_policy import run_tune_policy

        return run_tune_policy(args)
    if not is_stdout(args.output):
        cfg = _search(args)
        write_output(args.output, [_config_text(cfg)])
        print(f"wrote {args.output} (ctxscope build INPUT --config {args.output})")
        return 0
    real = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        cfg = _search(args)
        write_output(STDOUT, [_config_text(cfg)], stdout=real)
    return 0


def _config_text(cfg: Config) -> str:
    return json.dumps(cfg.model_dump(exclude_none=True), indent=1) + "\n"


def _search(args: argparse.Namespace) -> Config:
    corpus = corpus_arg(args.corpus)  # --corpus, else $CTXSCOPE_CORPUS, else corpus/
    paths = [Path(p) for p in args.sessions] or [
        corpus / name for name in SESSIONS if (corpus / name).exists()
    ]
    turns: list[Turn] = []
    for p in paths:
        if p.name not in SESSIONS:
            raise InputError(
                f"{p}: not one of the corpus sessions tune can read ({', '.join(SESSIONS)})"
            )
        turns.extend(turns_of(p, args.max_steps))
    if not turns:
        raise InputError("no turns with something to recall in these sessions")
    print(f"{len(turns)} turns from {len(paths)} sessions, budget {args.budget:,} tokens")
    best, top, base = tune(turns, args.budget, args.rounds, log=sys.stdout)
    print(f"defaults: recall {base.recall:.1%}, error evidence kept {base.error_kept:.0%}")
    print(f"best:     recall {top.recall:.1%}, error evidence kept {top.error_kept:.0%}")
    start = defaults()
    for knob in grid():
        mark = "" if best[knob] == start[knob] else f"  (default {start[knob]:g})"
        print(f"  {knob} = {best[knob]:g}{mark}")
    if top.missed:
        print(f"turns still missing something ({len(top.missed)}):")
        for session, step, lost in top.missed[: args.show_missed]:
            print(f"  {session} step {step}: {', '.join(x[:60] for x in lost[:3])}")
    return Config(max_tokens=args.budget, **best)


__all__ = ["cli_tune", "defaults", "grid", "tune"]
