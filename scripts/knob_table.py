"""Write the README's table of knobs from their declarations (``ctxcore/knobs.py``).

Run after adding or changing a knob: ``python scripts/knob_table.py``. It replaces the
table under "### Knobs" in README.md; ``tests/test_knobs.py`` fails while it is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ctxcore.knobs import readme_table  # noqa: E402

README = ROOT / "README.md"
HEADING = "### Knobs\n"


def with_table(text: str) -> str:
    """``text`` (the README) with the table under "### Knobs" replaced by the current one."""
    start = text.index(HEADING)
    first = text.index("\n| ", start) + 1
    end = first
    while text.startswith("|", end):
        end = text.index("\n", end) + 1
    return text[:first] + readme_table() + text[end:]


def main() -> int:
    text = README.read_text(encoding="utf-8")
    new = with_table(text)
    if new != text:
        README.write_text(new, encoding="utf-8")
        print("README.md: table of knobs rewritten")
    else:
        print("README.md: table of knobs is current")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
