"""Context recall per preset × budget on the corpus sessions (method: ``ctxcore.demo.recall``).

.venv/bin/python bench/bench_recall.py              # the table, every preset × budget
.venv/bin/python bench/bench_recall.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ctxcore.demo.recall import BUDGETS, MAX_STEPS, PRESETS, all_turns, recall_of  # noqa: E402
from ctxcore.models import Config  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=ROOT / "corpus")
    ap.add_argument("--max-steps", type=int, default=MAX_STEPS)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    turns = all_turns(args.corpus, args.max_steps)
    n_sessions = len({t.session for t in turns})
    print(f"{len(turns)} turns from {n_sessions} sessions")
    rows: list[dict[str, Any]] = []
    print("| preset | " + " | ".join(f"{b // 1000}k" for b in BUDGETS) + " |")
    print("|---|" + "---|" * len(BUDGETS))
    for preset in PRESETS:
        cells = []
        for b in BUDGETS:
            s = recall_of(turns, Config(preset=preset, max_tokens=b))
            cells.append(f"{s.recall:.1%} (errors {s.error_kept:.0%})")
            rows.append(
                {
                    "preset": preset,
                    "budget": b,
                    "recall": s.recall,
                    "error_kept": s.error_kept,
                    "turns": s.turns,
                    "error_turns": s.error_turns,
                }
            )
        print(f"| {preset} | " + " | ".join(cells) + " |")
    print(f"({time.perf_counter() - t0:.0f} s)")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
