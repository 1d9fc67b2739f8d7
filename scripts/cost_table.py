"""Write the README's table of recorded against simulated cache reads (issue 32, "Done when").

Run after changing the prompt cache, the importers or the fixtures:
``python scripts/cost_table.py``. For every fixture session with recorded cache reads
(``tests/fixtures/imports``, read as ``ctxscope import`` reads them; a session with its side
chains, which share its cache) it costs the calls (``ctxcore.costing``) and compares, from the
session's second call on, the cache reads the provider billed with those the simulation
predicts: their sums, the calls where both say hit or both say miss, and the breaks found.
The first call is apart: what it read was cached before the recording. It replaces the table
under "### Recorded against simulated cache reads" in README.md; ``tests/test_cost_table.py``
fails while it is stale.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ctxcore.cost import price_table  # noqa: E402
from ctxcore.costing import CallCost, session_groups  # noqa: E402
from ctxcore.errors import CtxscopeError  # noqa: E402
from ctxcore.formats.load import iter_traces  # noqa: E402

README = ROOT / "README.md"
HEADING = "### Recorded against simulated cache reads\n"
FIXTURES = ROOT / "tests" / "fixtures" / "imports"
HEADER = (
    "| Fixture | Session | Calls | Billed reads | Simulated reads | Difference | "
    "Hit/miss alike | First call: cached before | Breaks found |\n"
    "|---|---|---:|---:|---:|---:|---:|---:|---|\n"
)


def _recorded(c: CallCost) -> int | None:
    return c.recorded.cache_read_tokens if c.recorded is not None else None


def _row(name: str, calls: list[CallCost]) -> str | None:
    """One session's row, or None when no call recorded its cache reads."""
    if not any(_recorded(c) is not None for c in calls):
        return None
    first, rest = calls[0], [c for c in calls[1:] if _recorded(c) is not None]
    billed = sum(_recorded(c) or 0 for c in rest)
    simulated = sum(c.cache_read_tokens for c in rest)
    alike = sum(1 for c in rest if (c.cache_read_tokens > 0) == ((_recorded(c) or 0) > 0))
    diff = f"{100 * (simulated - billed) / billed:+.1f} %" if billed else "-"
    before = max(0, (_recorded(first) or 0) - first.cache_read_tokens)
    kinds = Counter(c.cache_break.kind for c in calls if c.cache_break is not None)
    breaks = ", ".join(f"{k} × {n}" for k, n in sorted(kinds.items())) or "none"
    chains = len({c.session_id for c in calls}) - 1
    sid = first.session_id
    short = sid if len(sid) <= 16 else sid[:15] + "…"
    session = short + (f" (+{chains} side chains)" if chains else "")
    return (
        f"| `{name}` | {session} | {len(calls)} | {billed:,} | {simulated:,} | {diff} | "
        f"{alike}/{len(rest)} | {before:,} | {breaks} |"
    )


def rows() -> list[str]:
    """The table's rows, fixture by fixture (files in name order)."""
    prices = price_table(env="")
    out: list[str] = []
    for path in sorted(p for p in FIXTURES.rglob("*") if p.is_file()):
        if path.name in ("EXPECTED.json", "SOURCES.md"):
            continue
        try:
            groups = list(session_groups(iter_traces(path), prices))
        except CtxscopeError:
            continue  # not a file that imports alone (a response without its request)
        name = path.relative_to(FIXTURES).as_posix()
        out.extend(r for g in groups if g and (r := _row(name, g)) is not None)
    return out


def readme_table() -> str:
    return HEADER + "".join(r + "\n" for r in rows())


def with_table(text: str, table: str | None = None) -> str:
    """``text`` (the README) with the table under the heading replaced by the current one."""
    start = text.index(HEADING)
    first = text.index("\n| ", start) + 1
    end = first
    while text.startswith("|", end):
        end = text.index("\n", end) + 1
    return text[:first] + (readme_table() if table is None else table) + text[end:]


def main() -> int:
    text = README.read_text(encoding="utf-8")
    new = with_table(text)
    if new != text:
        README.write_text(new, encoding="utf-8")
        print("README.md: table of cache reads rewritten")
    else:
        print("README.md: table of cache reads is current")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
