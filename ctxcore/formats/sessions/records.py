"""What the readers of a session held in one JSON file share (a Gemini CLI chat file, an
OpenCode session): its records are read in order, a record that cannot be read is one error
naming it and the rest are read; each call carries the errors read since the call before it
(``Call.skipped``), the last call those after it; what the file holds and never sends to the
model is counted on every call (``session_log.not_sent_to_the_model``). Docs/design.md,
"Formats".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ctxcore.errors import ImportFormatError
from ctxcore.formats.sessions.calls import Call
from ctxcore.formats.sessions.lines import unexpected

T = TypeVar("T")


class RecordReader:
    """The errors of a file's records, who has reported them, and what is never sent."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        #: how many of ``errors`` a call has already carried
        self.reported = 0
        self.not_sent: dict[str, int] = {}

    def guard(self, where: str, read: Callable[[], T]) -> T | None:
        """``read()`` of one record; None when it cannot be read, the error then naming
        ``where`` (an unexpected shape says so rather than raising)."""
        try:
            return read()
        except ImportFormatError as exc:
            self.errors.append(f"{where}: {exc}")
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            self.errors.append(f"{where}: {unexpected(exc)}")
        return None

    def since_last_call(self) -> list[str]:
        """The errors no call has carried yet, now the next call's."""
        found = self.errors[self.reported :]
        self.reported = len(self.errors)
        return found

    def count_not_sent(self, what: str) -> None:
        self.not_sent[what] = self.not_sent.get(what, 0) + 1

    def finish(self, calls: list[Call]) -> list[Call]:
        """The calls, the last carrying the errors read after it, each the count of what the
        file holds and does not send."""
        left = self.since_last_call() if calls else []
        if left:
            calls[-1].skipped = [*calls[-1].skipped, *left]
        for call in calls:
            if self.not_sent:
                call.metadata["session_log"]["not_sent_to_the_model"] = dict(self.not_sent)
        return calls


__all__ = ["RecordReader"]
