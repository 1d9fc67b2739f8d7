"""A session log's call gets the report ``make_report`` would make of its decisions, made
from the previous call's (``formats.sessions.calls._Lists.report_of``): the head's, the
conversation's kept from the calls before (the task's decision in place of the one it
replaced), then the rest's. Every branch is compared with ``make_report`` on the same
decisions: a task with a reason replacing a decision with one, a decision without one, no
task among them, a conversation decision neither kept nor truncated, and a new key."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from ctxcore.formats.sessions.calls import _decision, _kept, _Lists
from ctxcore.models import Decision, Reason, Status
from ctxcore.pipeline.common import INSTRUCTIONS_ID, make_report
from ctxcore.pipeline.recorded import FORMAT_ID, TASK_ID

KEY = (2, 1000, "cl100k_base")


def _item(k: int, notes: list[str] | None = None, status: Status = Status.KEPT) -> Any:
    if status == Status.KEPT:
        d = _kept(f"msg-{k}", "history", 2 + k, 10, 900 - k, notes)
    else:
        d = _decision(
            f"msg-{k}",
            "history",
            status,
            Reason.NO_ROOM,
            "left out",
            2 + k,
            10,
            0,
            900,
            notes or [],
        )
    return SimpleNamespace(key=KEY, decision=d)


def _head() -> list[Decision]:
    summarized = _decision(
        "old-1", "history", Status.SUMMARIZED, Reason.DEGRADED, "compacted", 1, 50, 0, 950, []
    )
    return [_kept(INSTRUCTIONS_ID, "instructions", 0, 30, 970), summarized]


def _never(it: Any) -> None:
    raise AssertionError(f"{it} was decided with its key already")


def _call(lists: _Lists, items: list[Any], task_at: int | None, task_notes: list[str]) -> None:
    """One call: the lists brought up to ``items``, its decisions as ``_decisions`` makes
    them, and its report compared with ``make_report``'s."""
    lists.conv = items
    head = _head()
    out = head + lists.conv_decisions(KEY, _never)
    lists.head, lists.task_at = len(head), None
    task = _kept(TASK_ID, "task", 9, 5, 800, task_notes)
    if task_at is not None:
        out[len(head) + task_at] = task
        lists.task_at = task_at
    else:
        out.append(task)
    out.append(_kept(FORMAT_ID, "format", len(out), 7, 700, ["3 tokens a message"]))
    must = [INSTRUCTIONS_ID, TASK_ID]
    assert lists.report_of(out, 1000, 321, must) == make_report(out, 1000, 321, must)


@pytest.mark.parametrize("task_notes", [[], ["the query, cut at 10,000 characters"]])
@pytest.mark.parametrize("replaced_notes", [None, ["a note"]])
@pytest.mark.parametrize("task_at", [0, 2, 4, None])
def test_the_report_of_a_call_is_make_reports(
    task_at: int | None, replaced_notes: list[str] | None, task_notes: list[str]
) -> None:
    notes = [["n0"], None, ["n2"], None, ["n4"]]
    if task_at is not None:
        notes[task_at] = replaced_notes
    items = [_item(k, notes[k]) for k in range(5)]
    lists = _Lists()
    _call(lists, items, task_at, task_notes)
    # the next call: two more items, the task further on; only the new ones are added
    more = [*items, _item(5, ["n5"]), _item(6)]
    _call(lists, more, 6 if task_at is not None else None, task_notes)
    assert lists.decided == 7 and lists.report is not None


def test_a_conversation_decision_left_out_makes_the_report_whole() -> None:
    lists = _Lists()
    items = [_item(0, ["n0"]), _item(1, status=Status.DROPPED), _item(2)]
    _call(lists, items, 2, ["q"])
    assert lists.report is None  # the report is made whole from here on
    _call(lists, [*items, _item(3, ["n3"])], 3, [])


def test_a_new_key_starts_the_conversations_report_again() -> None:
    lists = _Lists()
    items = [_item(k, ["n"] if k % 2 else None) for k in range(4)]
    _call(lists, items, 3, [])
    new_key = (3, 990, "cl100k_base")
    for it in items:
        it.key = new_key
    lists.conv = items
    lists.conv_decisions(new_key, _never)
    assert lists.key == new_key and len(lists.reasons_before) == 4
