"""``derive.stable_id``: a trace's id is the hash of its parts' JSON as ``json.dumps`` writes
it, whichever way the id is made (an importer's strings take a quicker way to the same text)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from ctxcore.formats.derive import stable_id

TEXTS = [
    "",
    "plain",
    'a "quoted" \\ back\\slash',
    "tab\there\nnew line\r\x00\x01\x1f\x7f",
    "caf\u00e9 \u2014 \u2028\u2029 \u4e2d\u6587",
    "emoji \U0001f600 and /slash/",
    "session-0000-4000-8000",
]


def _by_dumps(*parts: Any) -> str:
    blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]


@pytest.mark.parametrize("text", TEXTS)
def test_strings_hash_as_their_json_dumps(text: str) -> None:
    for parts in [(text,), ("claude-code", text, "msg_01"), (text, text, text, text), ()]:
        assert stable_id(*parts) == _by_dumps(*parts)


def test_other_values_hash_as_their_json_dumps() -> None:
    parts = ("openai-chat", 3, None, {"b": 1, "a": [1.5, "x"]}, ("t", 2))
    assert stable_id(*parts) == _by_dumps(*parts)
    assert stable_id("a", 1) != stable_id("a", "1")


def test_a_lone_surrogate_is_refused_either_way() -> None:
    with pytest.raises(UnicodeEncodeError):
        stable_id("x", "\ud800")
    with pytest.raises(UnicodeEncodeError):
        stable_id("x", 1, "\ud800")
