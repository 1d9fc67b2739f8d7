"""``formats.sessions.lines.read_lines`` cuts a log into lines a block at a time: the lines,
their numbers and offsets are those of the file split at its newlines, whatever the block
size (lines across blocks, a last line without a newline, blank lines, CRLF, gzip), and a
line over the limit is that line's error while the lines after it are read (memory holds
none of it). ``values_at`` reads a line again from its offset."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from ctxcore.formats.sessions import lines as mod
from ctxcore.formats.sessions.lines import read_lines, values_at

FIXTURE = (
    Path(__file__).resolve().parent
    / "fixtures"
    / "imports"
    / "claude-code"
    / "ccviewer-task-sidechain-session.jsonl"
)


def _expected(data: bytes) -> list[tuple[int, int, bytes]]:
    """(number, offset, line) of each non-blank line, from the whole file split at once."""
    out = []
    at = 0
    for n, line in enumerate(data.split(b"\n"), start=1):
        if line.strip():
            out.append((n, at, line))
        at += len(line) + 1
    if data.endswith(b"\n"):
        pass  # split's last piece is the empty text after the last newline
    return out


@pytest.mark.parametrize("block", [1, 7, 64, 4096, 1 << 20])
@pytest.mark.parametrize("gz", [False, True])
def test_lines_numbers_and_offsets_are_the_files_whatever_the_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int, gz: bool
) -> None:
    monkeypatch.setattr(mod, "BLOCK_BYTES", block)
    real = FIXTURE.read_bytes().split(b"\n")
    # blank lines, a CRLF line, a broken line, and a last line without its newline
    data = b"\n".join([real[0], b"", b"   ", real[1] + b"\r", b"{broken", *real[2:6]]).rstrip(b"\n")
    path = tmp_path / ("log.jsonl.gz" if gz else "log.jsonl")
    path.write_bytes(gzip.compress(data) if gz else data)
    got = list(read_lines(path))
    want = _expected(data)
    assert [(ln.number, ln.offset) for ln in got] == [(n, at) for n, at, _ in want]
    assert [ln.error is None for ln in got] == [not raw.startswith(b"{broken") for *_, raw in want]
    assert (got[2].error or "").startswith(f"{path}:5: not a JSON line (")
    again = values_at(path, [ln.offset for ln in got if ln.error is None])
    assert [again[ln.offset] for ln in got if ln.error is None] == [
        ln.value for ln in got if ln.error is None
    ]


def test_a_line_over_the_limit_is_its_error_and_the_next_lines_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mod, "BLOCK_BYTES", 1000)
    monkeypatch.setattr(mod, "MAX_LINE_BYTES", 5000)
    real = FIXTURE.read_bytes().split(b"\n")
    assert len(real[0]) < 5000 and len(real[1]) < 5000
    huge = b'{"padding": "' + b"x" * 20_000 + b'"}'
    data = b"\n".join([real[0], huge, real[1], huge])  # the last one without a newline
    path = tmp_path / "log.jsonl"
    path.write_bytes(data)
    got = list(read_lines(path))
    assert [ln.number for ln in got] == [1, 2, 3, 4]
    assert [ln.error is None for ln in got] == [True, False, True, False]
    assert got[1].error is not None and got[1].error.startswith(
        f"{path}:2: the line is over 5,000 bytes, the limit for one line; it was skipped unread"
    )
    assert got[2].offset == len(real[0]) + 1 + len(huge) + 1
    assert got[2].value == values_at(path, [got[2].offset])[got[2].offset]
