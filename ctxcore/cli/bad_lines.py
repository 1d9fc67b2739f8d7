"""The lines a command could not read, said as they come (docs/design.md, "Command line"):
each on standard error as ``ctxscope COMMAND: error: file:line: why``, the first
``MAX_ERRORS_PER_FILE`` of a file, and the rest counted and said in one line at the end.
The command reads on past each one; a file of two million bad lines is neither two million
lines of output nor held in memory."""

from __future__ import annotations

import sys
from typing import TextIO

from ctxcore.errors import InputError
from ctxcore.settings import MAX_ERRORS_PER_FILE


class BadLines:
    """The bad lines of one command's files (module doc)."""

    def __init__(self, command: str, err: TextIO | None = None) -> None:
        self.command = command
        self.err = err
        #: bad lines by file, said or not
        self.by_file: dict[str, int] = {}

    @property
    def total(self) -> int:
        return sum(self.by_file.values())

    def add(self, file: str, error: InputError | str) -> None:
        """A bad line of ``file``; ``error`` names the file and line (the readers' do)."""
        n = self.by_file[file] = self.by_file.get(file, 0) + 1
        if n <= MAX_ERRORS_PER_FILE:
            print(f"ctxscope {self.command}: error: {error}", file=self._err())

    def finish(self) -> None:
        """Say how many bad lines of each file were not said."""
        for file, n in self.by_file.items():
            more = n - MAX_ERRORS_PER_FILE
            if more > 0:
                print(
                    f"ctxscope {self.command}: error: {file}: {more:,} more bad lines not "
                    f"listed (only the first {MAX_ERRORS_PER_FILE:,} of a file are)",
                    file=self._err(),
                )

    def summary(self) -> str:
        """``; N line(s) could not be read`` when some could not, else nothing."""
        n = self.total
        return f"; {n:,} line(s) could not be read (said above)" if n else ""

    def _err(self) -> TextIO:
        return self.err if self.err is not None else sys.stderr


__all__ = ["BadLines"]
