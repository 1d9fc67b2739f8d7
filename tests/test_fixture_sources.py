"""Every fixture says where it comes from: each file under ``tests/fixtures/imports/`` (the
import samples) and ``tests/fixtures/streams/`` (the recorded streams the proxy tests replay)
is named in its folder's ``SOURCES.md`` (repository, path, commit, licence), and every row of
``EXPECTED.json`` names an import sample that is there. A sample added without its source, or
a count left behind by a removed sample, fails here."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "imports"
STREAMS = Path(__file__).resolve().parent / "fixtures" / "streams"
#: the two files that describe the samples
META = {"SOURCES.md", "EXPECTED.json"}


def named_in(markdown: str) -> set[str]:
    """Every path a backticked name in ``markdown`` stands for: `a/b.json` is itself and
    `a/b.{request.json,response.sse}` is both of its files."""
    out: set[str] = set()
    for name in re.findall(r"`([^`\s]+)`", markdown):
        parts = re.split(r"\{([^{}]*)\}", name)
        # parts alternate: literal, choices, literal, ...
        choices = [p.split(",") if i % 2 else [p] for i, p in enumerate(parts)]
        out.update("".join(combo) for combo in itertools.product(*choices))
    return out


def sample_files(folder: Path = FIXTURES) -> list[str]:
    return sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and p.name not in META
    )


@pytest.mark.parametrize("folder", [FIXTURES, STREAMS], ids=lambda p: p.name)
def test_every_sample_is_named_in_sources_md(folder: Path) -> None:
    assert sample_files(folder), f"no samples in {folder}"
    named = named_in((folder / "SOURCES.md").read_text(encoding="utf-8"))
    missing = [f for f in sample_files(folder) if f not in named]
    assert not missing, (
        f"fixtures with no row in tests/fixtures/{folder.name}/SOURCES.md (repository, path, "
        f"commit, licence): {missing}"
    )


def test_every_expected_count_names_a_sample() -> None:
    expected = json.loads((FIXTURES / "EXPECTED.json").read_text(encoding="utf-8"))["files"]
    gone = sorted(set(expected) - set(sample_files()))
    assert not gone, f"EXPECTED.json counts files that are not in tests/fixtures/imports: {gone}"


def test_brace_names_stand_for_each_file() -> None:
    assert named_in("| `s/x.{request.json,response.sse}` | and `y.json` |") == {
        "s/x.request.json",
        "s/x.response.sse",
        "y.json",
    }
