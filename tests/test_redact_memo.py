"""The proxy's converter redacts a session's texts once (``formats.redact_memo.Redactor``).

A running session is spooled as the proxy spools it: every call repeats the earlier
messages and adds new ones, and secrets turn up in new messages now and then. The traces the
converter writes must be the ones ``formats.redact.redact_trace`` gives for each call, byte
for byte, while the rules read only the texts not seen before; and a converter that dies
half-way through the session leaves the rest to the next one, which resumes from the spool.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ctxcore.capture.calls import CallRecord, Sessions, trace_from_call
from ctxcore.capture.spool import BATCH, Converter, SpoolWriter, live_file, spool_dir
from ctxcore.cli import main
from ctxcore.formats import redact_memo
from ctxcore.formats.load import iter_traces, load_file
from ctxcore.formats.redact import redact_text, redact_trace
from ctxcore.formats.redact_memo import Growing, Redactor

ROOT = Path(__file__).resolve().parent.parent
CHAT = "/v1/chat/completions"
#: real-looking keys of the rules' formats (not real credentials)
SECRETS = {
    3: "sk-proj-" + "Q7fK2mZ9xL4pR8tV1wY6bN3cD5gH0jE2" * 2,
    7: "AKIAIOSFODNN7EXAMPLQ",
    11: "ghp_" + "x9Y8w7V6u5T4s3R2q1P0o9N8m7L6k5J4i3H2",
}


def rule_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts the redaction rules read through ``redact_memo`` from now on, in order."""
    read: list[str] = []
    real = redact_memo.redact_text

    def counted(text: str) -> tuple[str, dict[str, int]]:
        read.append(text)
        return real(text)

    monkeypatch.setattr(redact_memo, "redact_text", counted)
    return read


def session_calls(
    n: int, extra: dict[int, str] | None = None
) -> list[tuple[CallRecord, bytes, bytes]]:
    """``n`` calls of one chat session: each the system prompt, the conversation so far and
    a new user message, tool call and tool result (a secret in some of the new results)."""
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are a careful coding agent. Read before you edit."}
    ]
    out = []
    for i in range(n):
        result = f"file f{i}.py: def f{i}(x):\n    return x * {i}\n" * 20
        if i in SECRETS:
            result += f"\nexport API_KEY={SECRETS[i]}\n"
        result += (extra or {}).get(i, "")
        messages += [
            {"role": "user", "content": f"step {i}: look at f{i}.py and tell me what it does"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": "read", "arguments": json.dumps({"path": f"f{i}"})},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"call_{i}", "content": result},
        ]
        request = {"model": "gpt-4o", "prompt_cache_key": "sess-1", "messages": messages}
        response = {
            "id": f"chatcmpl-{i}",
            "object": "chat.completion",
            "model": "gpt-4o",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": f"f{i} multiplies by {i}"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 100 * (i + 1), "completion_tokens": 6},
        }
        record = CallRecord(
            id=f"call-{i:03d}",
            api="openai.chat",
            path=CHAT,
            source="agent",
            started_at=1_760_000_000.0 + i,
            latency_ms=4.0,
            status=200,
            content_type="application/json",
        )
        out.append((record, json.dumps(request).encode(), json.dumps(response).encode()))
    return out


def spool(traces: Path, calls: list[tuple[CallRecord, bytes, bytes]]) -> None:
    writer = SpoolWriter(spool_dir(traces))
    for call in calls:
        writer.put(*call)
    writer.close()


def expected(calls: list[tuple[CallRecord, bytes, bytes]], sessions: Sessions) -> list[bytes]:
    """Each call's line as every trace was redacted before: the whole trace read again
    (without the build's timings, which differ from run to run)."""
    return [
        untimed(redact_trace(trace_from_call(record, req, resp, sessions))[0].to_json().encode())
        for record, req, resp in calls
    ]


def untimed(line: bytes) -> bytes:
    """A trace line without ``result.timings`` (milliseconds measured as it was built)."""
    head, sep, rest = line.partition(b',"timings":{')
    assert sep, line[:200]
    return head + rest.partition(b"}")[2]


def test_a_running_session_is_redacted_as_whole_traces_are_reading_only_new_texts(
    tmp_path: Path,
) -> None:
    traces = tmp_path / "traces"
    calls = session_calls(16)
    spool(traces, calls)
    conv = Converter(traces)
    assert conv.step() == len(calls)
    lines = live_file(traces, "agent").read_bytes().splitlines()
    assert [untimed(ln) for ln in lines] == expected(calls, Sessions())
    kinds = {3: "openai_key", 7: "aws_access_key_id", 11: "github_token"}
    for i, secret in SECRETS.items():
        assert secret.encode() not in b"\n".join(lines)
        # the call where it first appears (in its new part) and every later call say so
        assert kinds[i] in json.loads(lines[i])["redactions"]
        assert kinds[i] not in json.loads(lines[i - 1])["redactions"]
        assert all(kinds[i] in json.loads(ln)["redactions"] for ln in lines[i:])
    read = conv.redactor.misses
    # the rules read each distinct text once: the texts of every call together are many
    # times more than the ones the memory was missing
    walked = Redactor()
    sessions = Sessions()
    for record, req, resp in calls:
        trace = trace_from_call(record, req, resp, sessions)
        # the same trace redacted with the memory and without: the same bytes
        assert conv.redactor.trace(trace)[0].to_json() == redact_trace(trace)[0].to_json()
        walked.trace(trace)
        walked._seen.clear()  # a memory of one call only: every call's texts read again
    assert read * 5 < walked.misses


def test_a_new_secret_in_a_text_seen_before_redacted_is_redacted() -> None:
    """The memory is by content: a text is redacted as it is, whatever came before."""
    red = Redactor()
    clean = "cat .env"
    assert red.text(clean) == (clean, {})
    dirty = f"cat .env\nOPENAI_API_KEY={SECRETS[3]}"
    got, found = red.text(dirty)
    assert SECRETS[3] not in got and found == {"openai_key": 1}
    assert red.text(dirty) == (got, found)
    assert red.misses == 2


def test_the_memory_starts_over_when_full() -> None:
    red = Redactor(max_chars=100)
    for k in range(30):
        red.text(f"text number {k:04d}")  # 16 characters each
    assert red._chars <= 100
    assert red.misses == 30
    red.text("text number 0029")
    assert red.misses == 30  # the latest are still known


DIES_ONCE = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path

    import ctxcore.capture.spool as spool

    real = spool.trace_from_call
    spool.BATCH = int(sys.argv[3])

    def dying(record, *args):
        # what an out-of-memory kill does to a converter, half-way through the session
        if record.id == sys.argv[2]:
            os.kill(os.getpid(), 9)
        return real(record, *args)

    spool.trace_from_call = dying
    spool.run_converter(Path(sys.argv[1]), lambda: True, drain_s=60)
    """
)


def test_a_converter_restarted_half_way_resumes_from_the_spool(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    calls = session_calls(12)
    spool(traces, calls)
    batch = 4
    assert batch < BATCH
    run = subprocess.run(
        [sys.executable, "-c", DIES_ONCE, str(traces), "call-006", str(batch)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == -9, run.stderr
    target = live_file(traces, "agent")
    first = target.read_bytes().splitlines()
    assert len(first) == batch  # the first batch written, the second died with the converter
    # a new converter (its memory empty, as after a restart) resumes where the spool says
    started = time.monotonic()
    conv = Converter(traces)
    conv.step()
    assert time.monotonic() - started < 60
    lines = target.read_bytes().splitlines()
    assert [json.loads(ln)["trace_id"] for ln in lines] == [r.id for r, _, _ in calls]
    # turn numbers restart with a new converter (docs/design.md, "Live capture")
    want = expected(calls[:batch], Sessions()) + expected(calls[batch:], Sessions())
    assert [untimed(ln) for ln in lines] == want
    assert SECRETS[7].encode() not in target.read_bytes()
    assert conv.failed == 0
    assert sorted(os.listdir(spool_dir(traces))) == []


# --------------------------------------------------------------------------- import


SIDECHAIN = ROOT / "tests" / "fixtures" / "imports" / "claude-code"
SIDECHAIN = SIDECHAIN / "ccviewer-task-sidechain-session.jsonl"


def test_an_import_with_redaction_reads_each_text_once_and_redacts_new_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ctxscope import -o`` with ``CTXSCOPE_REDACT_ON_INGEST=1`` of a real Claude Code log
    (a session and its Task agents) with a secret added to a user message half-way: the
    traces are the unredacted import's, each redacted whole as before; the calls before the
    secret have none, the one that adds it and every later call of its session have it
    masked; and the rules read a fraction of the texts the traces hold."""
    rows = [json.loads(ln) for ln in SIDECHAIN.read_text().splitlines() if ln.strip()]
    users = [i for i, r in enumerate(rows) if r.get("type") == "user"]
    at = users[len(users) // 2]
    content = rows[at]["message"]["content"]
    if isinstance(content, str):
        rows[at]["message"]["content"] = f"{content} key={SECRETS[3]}"
    else:
        content.append({"type": "text", "text": f"use the key {SECRETS[3]}"})
    src = tmp_path / "leak.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    plain = list(iter_traces(src))
    read = rule_reads(monkeypatch)
    monkeypatch.setenv("CTXSCOPE_REDACT_ON_INGEST", "1")
    out = tmp_path / "out.jsonl"
    assert main(["import", str(src), "-o", str(out)]) == 0
    texts_read = len(read)
    assert SECRETS[3] not in out.read_text()
    got = load_file(out)
    assert [untimed(t.to_json().encode()) for t in got] == [
        untimed(redact_trace(t)[0].to_json().encode()) for t in plain
    ]
    leaked = [SECRETS[3] in t.to_json() for t in plain]
    assert not leaked[0] and any(leaked)  # it is new part-way through
    assert [bool(t.redactions) for t in got] == leaked
    everything = Redactor()
    for t in plain:
        everything.trace(t)
        everything._seen.clear()
    assert 0 < texts_read and texts_read * 3 < everything.misses


#: a private key whose block a session's calls split: BEGIN in one call's new message, END
#: in the next one's (not a real key)
PEM_BEGIN = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA" + "q8Zr1x" * 40 + "\n"
PEM_END = "Xy7Qp2" * 40 + "\n-----END RSA PRIVATE KEY-----\n"


def _block(rnd: random.Random, k: int) -> str:
    """A message's text: filler, with a secret now and then, whole or cut at its edges
    (``Bearer`` ending one block and its token starting the next, a key's prefix ending
    one and the rest of it starting the next)."""
    words = ["def", "return", "x", "=", "pytest", "FAILED", "ok", "\n", "tool_sk", "key:"]
    text = " ".join(rnd.choice(words) for _ in range(rnd.randint(5, 120)))
    pick = k % 7
    if pick == 1:
        text += f" {SECRETS[3]} "
    elif pick == 2:
        text = f"Authorization: Bearer {SECRETS[11]}\n" + text
    elif pick == 3:
        text += " curl -H 'Authorization: Bearer"  # its token starts the next block
    elif pick == 4:
        text = SECRETS[11][4:] + " " + text
    elif pick == 5:
        text += " password: hunter2!x and API_KEY=" + SECRETS[7][:10]
    elif pick == 6:  # a token on the line after its Bearer: one secret across a line end
        text += "\nAuthorization: Bearer\n" + "Zx9q" * 8
    return text


def test_a_growing_prompt_is_redacted_as_the_whole_text_reading_only_its_new_blocks() -> None:
    """A rendered prompt grows by blocks each call: its redaction is ``redact_text``'s of
    the whole text, secrets on either side of a block's edge and cut across it included,
    while the rules read only the new blocks; a private key whose block spans blocks (and
    calls) is read whole, as the whole text reads it."""
    rnd = random.Random(34)
    grow = Growing()
    text = "[system]\nYou are a careful agent.\n\n[tools]\n" + "x" * 5000
    total = 0
    for k in range(80):
        text += f"\n\n[{('user', 'assistant', 'tool')[k % 3]}]\n{_block(rnd, k)}"
        got = grow.redact(text)
        assert got == redact_text(text), k
        total += len(text)
    assert "[REDACTED:openai_key]" in got[0] and "[REDACTED:github_token]" in got[0]
    assert grow.read * 10 < total  # each call's new blocks only
    # a private key begun in one call's message and ended in a later call's
    for k, block in enumerate([PEM_BEGIN, "more words", PEM_END, "after", "the end"]):
        text += f"\n\n[{('tool', 'user')[k % 2]}]\n{block}"
        got = grow.redact(text)
        assert got == redact_text(text), k
    assert "[REDACTED:private_key]" in got[0] and "Xy7Qp2" not in got[0]


def test_a_private_key_split_between_two_calls_is_redacted_as_whole_traces_are(
    tmp_path: Path,
) -> None:
    """Through the proxy's converter: call 5 adds a tool result that begins a private key,
    call 6 one that ends it; each call's trace is ``redact_trace``'s, the key masked in the
    prompt from call 6 on (the prompt is the one text holding the whole block)."""
    traces = tmp_path / "traces"
    calls = session_calls(9, {5: "\n" + PEM_BEGIN, 6: "\n" + PEM_END})
    spool(traces, calls)
    conv = Converter(traces)
    assert conv.step() == len(calls)
    lines = live_file(traces, "agent").read_bytes().splitlines()
    assert [untimed(ln) for ln in lines] == expected(calls, Sessions())
    prompts = [json.loads(ln)["result"]["prompt"] for ln in lines]
    assert "[REDACTED:private_key]" not in prompts[5]
    assert all("[REDACTED:private_key]" in p and "Xy7Qp2" not in p for p in prompts[6:])


def test_a_trace_line_is_redact_trace_s_and_a_part_seen_clean_is_not_read_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``Redactor.line``: the JSON of ``redact_trace``'s trace, a secret anywhere (a new
    message, a metadata key) found; the parts of earlier calls, found clean by their
    bytes, are not taken apart again."""
    sessions = Sessions()
    traces = [trace_from_call(r, q, s, sessions) for r, q, s in session_calls(12)]
    keyed = traces[5].model_copy(
        update={"metadata": {**traces[5].metadata, f"note {SECRETS[7]}": 1}}
    )
    red = Redactor()
    for trace in [*traces[:5], keyed, *traces[5:11]]:
        assert red.line(trace)[0] == redact_trace(trace)[0].to_json()
    assert "aws_access_key_id" in red.line(keyed)[1]
    taken_apart = []
    decoder = redact_memo._OBJECT

    class Counting:
        def decode(self, raw: bytes) -> object:
            taken_apart.append(raw)
            return decoder.decode(raw)

    monkeypatch.setattr(redact_memo, "_OBJECT", Counting())
    assert red.line(traces[11])[0] == redact_trace(traces[11])[0].to_json()
    warm = len(taken_apart)
    taken_apart.clear()
    Redactor().line(traces[11])
    # the earlier calls' messages and decisions were known by their bytes: only the
    # trace's own objects and its new parts were taken apart
    assert warm * 3 < len(taken_apart)


def test_a_list_going_on_from_a_clean_one_has_only_its_new_items_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A session's lists (history, messages, decisions) start with the previous call's
    items: past the items it shares with a clean list seen before, only the rest is read.
    A secret in a new item, in an item that replaced the clean list's last one, or in an
    item of its own that a number's digits run on into, is still found."""
    items = [{"role": "user", "content": f"message {k}: " + "words " * 20} for k in range(40)]

    def line(xs: list[object]) -> bytes:
        return json.dumps({"input": {"history": xs}}, separators=(",", ":")).encode()

    red = Redactor()
    assert red._trace_clean(line(items))
    secret = {"role": "user", "content": f"export API_KEY={SECRETS[3]}"}
    read: list[bytes] = []
    decoder = redact_memo._LIST

    class Counting:
        def decode(self, raw: bytes) -> object:
            read.append(raw)
            return decoder.decode(raw)

    monkeypatch.setattr(redact_memo, "_LIST", Counting())
    assert red._trace_clean(line([*items, {"role": "user", "content": "new"}]))
    assert sum(len(r) for r in read) < 100  # the new item only
    assert not red._trace_clean(line([*items, secret]))
    assert not red._trace_clean(line([*items[:-1], secret, *items]))
    assert red._trace_clean(line([*items[:-1]]))
    numbers = [*items, 12]
    assert red._trace_clean(line(numbers))
    assert not red._trace_clean(line([*items, 123, SECRETS[3]]))


def test_a_long_text_is_first_read_by_the_check_and_redacted_as_redact_text_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``redact_memo._read``: a text of CHECK_MIN characters or more goes to the rules only
    when ``may_hold_secret`` says one may match. Every secret of the redaction tests (and
    each near-secret), at the start, middle and end of long texts, among escapes, quotes
    and non-ASCII, is redacted as ``redact_text`` redacts it; a long text with a guard's
    word and no secret is not read by the rules."""
    from test_redact import SECRETS as FORMATS
    from test_redaction_table import NOT_SECRETS, TABLE

    filler = (ROOT / "corpus" / "d01_pytest_reportingdemo_44_failures.rst").read_text()
    texts = [t.format(s=s) for _, t, s in [*FORMATS, *TABLE]] + NOT_SECRETS
    odd = ['a "quoted" \\ backslash\t', "naïve café ☃ ", "\x00\x1f control ", "\n\n"]
    cases = []
    for i, text in enumerate(texts):
        pad = filler[(i * 997) % 20000 :][: redact_memo.CHECK_MIN] + odd[i % len(odd)]
        cases += [text + pad, pad + text, pad + text + "\n" + pad]
    assert all(len(c) >= redact_memo.CHECK_MIN for c in cases)
    for case in cases:
        assert redact_memo._read(case) == redact_text(case), case[:80]
    assert sum(bool(redact_text(c)[1]) for c in cases) >= 3 * len(FORMATS)
    read = rule_reads(monkeypatch)
    clean = filler[:5000] + "\nthe token count and the secret of a good test\n"
    assert redact_memo._read(clean) == (clean, {}) and read == []
    short = "the token count"
    assert redact_memo._read(short) == (short, {}) and read == [short]
