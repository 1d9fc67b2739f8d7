"""Write the README's Complexity Trap comparison beside the paper's finding (issue 33, "Anchor
and speed").

Run after changing a policy preset, the prompt cache, recall or the corpus:
``python scripts/policy_table.py``. It measures the corpus's SWE-agent and mini-swe-agent runs
under the paper's settings as ``bench/bench_policies.py`` does (``rows``: each call rebuilt,
priced as one model with nothing cached and through the simulated prompt cache, recall as
``ctxscope replay`` scores it) and replaces the block between the ``policy-table`` markers in
README.md; ``tests/test_policy_table.py`` fails while it is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import bench_policies  # noqa: E402

README = ROOT / "README.md"
START = "<!-- policy-table: written by scripts/policy_table.py -->\n"
END = "<!-- /policy-table -->\n"
MODEL = "claude-sonnet-4-5"
RAW, MASKING, POLLING, SUMMARY, HYBRID = (label for label, _ in bench_policies.POLICIES)

PAPER = (
    'The paper (Lindenbauer et al., "The Complexity Trap", NeurIPS 2025 DL4Code workshop, '
    "arXiv 2508.21433) ran SWE-agent on SWE-bench Verified anew under each policy, with five "
    "model configurations: observation masking (the last 10 observations kept) halves the cost "
    "of the raw agent and matches the solve rate of LLM summarization; its hybrid costs 7 % "
    "less than masking and 11 % less than LLM summarization (the paper's repository, by "
    "JetBrains Research, mirrored as `Recursive-Safeguarding/the-complexity-trap`).\n"
)


def _pct(new: float, old: float) -> str:
    return f"{(new - old) / old:+.0%}" if old else "—"


def _recall(r: float | None) -> str:
    return "—" if r is None else f"{r:.1%}"


def _table(tot: dict[str, dict[str, Any]]) -> str:
    raw = tot[RAW]
    lines = [
        "| policy | input tokens | vs raw | $ nothing cached | vs raw | $ with the prompt cache "
        "| vs raw | recall |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, t in tot.items():
        lines.append(
            f"| {label} | {t['input_tokens']:,} | {_pct(t['input_tokens'], raw['input_tokens'])} "
            f"| {t['usd_uncached']:.2f} | {_pct(t['usd_uncached'], raw['usd_uncached'])} "
            f"| {t['usd']:.2f} | {_pct(t['usd'], raw['usd'])} | {_recall(t['recall'])} |"
        )
    return "\n".join(lines) + "\n"


def _less(new: float, old: float, more: str, less: str) -> str:
    """``new`` against ``old`` in words: "35 % fewer" or "12 % more"."""
    share = (new - old) / old if old else 0.0
    return f"{abs(share):.0%} {less if share < 0 else more}"


def _findings(tot: dict[str, dict[str, Any]]) -> str:
    """What the table says, in sentences whose figures are the table's."""
    raw, mask, poll, hyb = tot[RAW], tot[MASKING], tot[POLLING], tot[HYBRID]
    tokens = _less(mask["input_tokens"], raw["input_tokens"], "more", "fewer")
    plain = _less(mask["usd_uncached"], raw["usd_uncached"], "more", "less")
    cached = _less(mask["usd"], raw["usd"], "more", "less")
    agrees = "agrees with the paper" if mask["usd_uncached"] < raw["usd_uncached"] else "does not"
    return (
        f"With nothing cached the replay {agrees}: masking sends {tokens} tokens than the "
        f"raw run and costs {plain}. With the prompt cache it does not: masking rewrites "
        "the prompt before the newest observations at every step, so each call writes its "
        f"prefix to the cache again and costs {cached} than the raw run, whose prefix stays "
        "cached; eliding only every 10 observations (`polling=10`) costs "
        f"{_pct(poll['usd'], raw['usd'])}, the hybrid {_pct(hyb['usd'], raw['usd'])}. The "
        "replay keeps the recorded trajectories: it cannot see what the paper measured "
        "beside cost — whether the task was solved, and how a shorter context changes what "
        "the agent does next. Recall stands in (of what each recorded reply used that was in "
        f"its prompt, the share the rebuilt prompt still holds): {_recall(mask['recall'])} "
        "under masking. The summary stand-in is ctxscope's deterministic summarizer, not a "
        "model: its summaries are short and cost nothing to write.\n"
    )


def block() -> str:
    """The README block: the paper's finding, the replay's table and what it says."""
    found = bench_policies.rows(MODEL)
    tot = bench_policies.totals(found)
    runs = {r["run"]: r["calls"] for r in found}
    here = (
        f"Here, the corpus's {len(runs)} SWE-agent and mini-swe-agent trajectories "
        f"({sum(runs.values()):,} calls) replayed as recorded: each call rebuilt under the "
        f"policy and priced as {MODEL} (`bench/bench_policies.py` has the table per run):\n"
    )
    return f"{START}{PAPER}\n{here}\n{_table(tot)}\n{_findings(tot)}{END}"


def with_block(text: str, new: str | None = None) -> str:
    """``text`` (the README) with the block between the markers replaced."""
    start = text.index(START)
    end = text.index(END, start) + len(END)
    return text[:start] + (block() if new is None else new) + text[end:]


def main() -> int:
    text = README.read_text(encoding="utf-8")
    new = with_block(text)
    if new != text:
        README.write_text(new, encoding="utf-8")
        print("README.md: the Complexity Trap comparison rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
