"""No function of the library or the app is over the size and complexity limits, except those
docs/design.md names with the reason ("Function size").

The limits (docs/design.md, "Function size"): 80 lines from ``def`` to the last line, and a
cyclomatic complexity of 25 as radon counts it (nested functions count towards the function
that holds them, so a closure is no way around the limit). The source is read, never imported.
"""

from __future__ import annotations

import re
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Class, Function

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
#: The code the limits hold for: the library and the app.
CHECKED = ("ctxcore", "ctxapp")
MAX_LINES = 80
MAX_COMPLEXITY = 25
SECTION = 'docs/design.md, "Function size"'


def _functions(path: Path) -> list[tuple[str, int, int]]:
    """(qualified name, lines, complexity) of every function and method in ``path``."""
    out: list[tuple[str, int, int]] = []
    for block in cc_visit(path.read_text(encoding="utf-8")):
        if isinstance(block, Class):
            blocks: list[Function] = list(block.methods)
        else:
            blocks = [block]
        for fn in blocks:
            out.append((fn.fullname, fn.endline - fn.lineno + 1, fn.complexity))
    return out


def over_limits(root: Path = ROOT) -> dict[str, str]:
    """``path:function`` → what is over, for every function over a limit."""
    found: dict[str, str] = {}
    for part in CHECKED:
        for path in sorted((root / part).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            for name, lines, cc in _functions(path):
                over = []
                if lines > MAX_LINES:
                    over.append(f"{lines} lines")
                if cc > MAX_COMPLEXITY:
                    over.append(f"complexity {cc}")
                if over:
                    found[f"{path.relative_to(root).as_posix()}:{name}"] = ", ".join(over)
    return found


def exemptions(markdown: str) -> dict[str, str]:
    """The "Function size" section's table: ``path:function`` → why it may stay as it is."""
    m = re.search(r"^#+ Function size[ \t]*\n(.*?)(?=^#+ |\Z)", markdown, re.M | re.S)
    assert m, 'docs/design.md has no "Function size" section'
    rows: dict[str, str] = {}
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("`") and ":" in cells[0]:
            rows[cells[0].strip("`")] = cells[1]
    return rows


def test_no_function_over_the_limits_unless_the_design_says_why() -> None:
    allowed = exemptions(DESIGN.read_text(encoding="utf-8"))
    over = over_limits()
    bad = [f"{name}: {what}" for name, what in sorted(over.items()) if name not in allowed]
    assert not bad, (
        f"functions over {MAX_LINES} lines or complexity {MAX_COMPLEXITY} (radon):\n  "
        + "\n  ".join(bad)
        + "\nSplit them along a real seam, or name them with the reason in the design: "
        + SECTION
    )
    stale = [name for name in sorted(allowed) if name not in over]
    assert not stale, f'"Function size" names functions that are within the limits now: {stale}'


def test_the_check_sees_a_long_and_a_branchy_function(tmp_path: Path) -> None:
    pkg = tmp_path / "ctxcore"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    branches = "\n".join(f"    if x == {i}:\n        return {i}" for i in range(MAX_COMPLEXITY))
    (pkg / "m.py").write_text(
        f"def long():\n{body}\n\n\ndef branchy(x):\n{branches}\n    return -1\n\n\n"
        "class C:\n    def fine(self):\n        return 1\n"
    )
    assert over_limits(tmp_path) == {
        "ctxcore/m.py:long": f"{MAX_LINES + 1} lines",
        "ctxcore/m.py:branchy": f"complexity {MAX_COMPLEXITY + 1}",
    }
    table = "## Function size\n\n| Function | Why |\n|---|---|\n| `ctxcore/m.py:long` | data |\n"
    assert exemptions(table) == {"ctxcore/m.py:long": "data"}
