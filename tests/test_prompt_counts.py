"""A prompt block's tokens from the counts of its parts (``cache.prompts._tokens``): a
message's block is its role, a line end, its text, a line end and its tool calls; the
tokenizer's pieces start afresh after a line end followed by a character other than white
space, so the block's count is its text's (which the importer counted) with the few
characters before its first such place and after its last one counted again with the head
and the tail (docs/design.md, "Prompt cache"). Every count is checked against tiktoken's
count of the whole block."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ctxcore.cache import prompts
from ctxcore.cache.prompts import _first_cut, _last_cut, _message_text, _prefixed, _tokens
from ctxcore.tokens import get_counter, get_encoding

ROOT = Path(__file__).resolve().parent.parent

#: texts whose edges a tokenizer treats specially: white space and line ends at either
#: end, punctuation that takes the line ends after it, digit runs, contractions, letters
#: of other scripts, emoji, a special token's text, a lone surrogate
EDGES = [
    "plain words",
    "\nstarts with a line end",
    " \nspace then line end",
    "  two spaces",
    "\tTab",
    "ends with a line end\n",
    "ends with spaces  ",
    "ends with punctuation)",
    "ends with a bracket]",
    "12345",
    "x = 1234567",
    "they'll",
    "it's",
    "日本語のテキスト",
    "ends in Japanese い",
    "emoji 👩‍👩‍👧‍👦",
    "<|endoftext|> text",
    "lone \ud800 surrogate x",
    "a" * 3000,
    "'s",
    "\r\nCRLF first",
    "last\r",
    "\u00a0nbsp first",
    "\u2028separator",
]


def _corpus_slices(n: int) -> list[str]:
    """``n`` slices of the corpus (tool outputs, chats, logs in several languages) cut at
    random places, so their edges fall anywhere in a token."""
    text = "\n".join(
        p.read_text(encoding="utf-8", errors="replace") for p in sorted((ROOT / "corpus").glob("*"))
    )
    rng = random.Random(34)
    out = []
    for _ in range(n):
        start = rng.randrange(len(text) - 4000)
        out.append(text[start : start + rng.randrange(1, 4000)])
    return out


def _whole(text: str) -> int:
    """tiktoken's count of ``text`` (a lone surrogate as tiktoken reads it: the counter's)."""
    if any("\ud800" <= ch <= "\udfff" for ch in text):
        return get_counter().count(text)
    return len(get_encoding("cl100k_base").encode_ordinary(text))


@pytest.mark.parametrize("calls", [None, [{"id": "c1", "name": "Bash", "input": {"x": 1}}]])
def test_a_blocks_count_is_its_whole_texts(calls: object) -> None:
    apart = 0
    for body in EDGES + _corpus_slices(600):
        for role in ("user", "assistant", "tool", ""):
            text = _message_text(role, body, calls)
            assert _tokens(text, len(role) + 1, body) == _whole(text), (role, body[-40:])
            apart += 0 <= _first_cut(body) <= _last_cut(body) if body else 0
        text = _prefixed("packet", body)
        assert _tokens(text, 7, body) == _whole(text), body[:40]
    assert apart > 4 * 250  # two slices in five or more are summed, not counted whole


def test_the_text_the_importer_counted_is_not_counted_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its count is the counter's: only the role and the tool calls are counted."""
    counter = get_counter()
    body = _corpus_slices(1)[0].strip() + " done"
    counter.count(body)  # as the importer counts a message's text
    sent: list[str] = []
    real = counter._raw_many

    def spy(texts: list[str]) -> list[int]:
        sent.extend(texts)
        return real(texts)

    monkeypatch.setattr(counter, "_raw_many", spy)
    monkeypatch.setattr(prompts, "_COUNTS", {})
    text = _message_text("assistant", body, [{"id": "c9", "name": "Read"}])
    n = prompts._count("k", text, len("assistant") + 1, body)
    assert body not in sent and text not in sent
    assert n == len(get_encoding("cl100k_base").encode_ordinary(text))
