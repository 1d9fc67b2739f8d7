"""Secret redaction: fake secrets in real formats are masked and counted; look-alikes are not."""

from __future__ import annotations

import base64
import hashlib
import json
import random
import string
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ctxcore.cli import main
from ctxcore.formats.openai import trace_from_request
from ctxcore.formats.redact import redact_text, redact_trace
from ctxcore.models import Trace
from ctxcore.store import TraceStore

RNG = random.Random(20240611)
ALNUM = string.ascii_letters + string.digits
UPPER_NUM = string.ascii_uppercase + string.digits
B64 = string.ascii_letters + string.digits + "+/"


def rnd(n: int, alphabet: str = ALNUM) -> str:
    return "".join(RNG.choice(alphabet) for _ in range(n))


def _pem(label: str) -> str:
    body = base64.b64encode(bytes(RNG.randrange(256) for _ in range(300))).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----"


def fake_secrets() -> list[tuple[str, str, str]]:
    """(type, text containing the secret, the secret itself) in each provider's format."""
    jwt = ".".join(
        base64.urlsafe_b64encode(json.dumps(p).encode()).decode().rstrip("=")
        for p in ({"alg": "HS256", "typ": "JWT"}, {"sub": "1234567890", "name": "x"})
    )
    jwt += "." + rnd(43, ALNUM + "-_")
    gcp_pem = _pem("PRIVATE KEY").replace("\n", "\\n") + "\\n"
    return [
        ("openai_key", "OPENAI_API_KEY={s}", "sk-proj-" + rnd(74, ALNUM + "-_") + rnd(20)),
        ("openai_key", "key = '{s}'", "sk-" + rnd(20) + "T3BlbkFJ" + rnd(20)),
        ("openai_key", "using {s} for batch", "sk-svcacct-" + rnd(60, ALNUM + "_-") + "A"),
        ("anthropic_key", "x-api-key: {s}", "sk-ant-api03-" + rnd(93, ALNUM + "-_") + "AA"),
        ("anthropic_key", "ADMIN={s}", "sk-ant-admin01-" + rnd(90, ALNUM + "-_") + "AA"),
        ("google_api_key", "?key={s}&q=1", "AIza" + rnd(35, ALNUM + "-_")),
        ("aws_access_key_id", "aws_access_key_id = {s}", "AKIA" + rnd(16, UPPER_NUM)),
        ("aws_access_key_id", "AWS_ACCESS_KEY_ID={s}", "ASIA" + rnd(16, UPPER_NUM)),
        ("aws_secret_access_key", "aws_secret_access_key = {s}", rnd(40, B64)),
        ("aws_secret_access_key", '"SecretAccessKey": "{s}"', rnd(40, B64)),
        ("github_token", "git clone https://{s}@github.com/o/r", "ghp_" + rnd(36)),
        ("github_token", "GH_TOKEN={s}", "gho_" + rnd(36)),
        ("github_token", "token: {s}", "github_pat_11" + rnd(20, UPPER_NUM) + "_" + rnd(59)),
        ("slack_token", "SLACK_BOT_TOKEN={s}", "xoxb-" + rnd(12, string.digits) + "-" + rnd(24)),
        ("slack_token", "user token {s}", "xoxp-" + rnd(11, string.digits) + "-" + rnd(32)),
        ("stripe_key", "stripe.api_key = '{s}'", "sk_live_" + rnd(24)),
        ("huggingface_token", "HF_TOKEN={s}", "hf_" + rnd(34)),
        (
            "azure_key",
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={s};EndpointSuffix=core.windows.net",
            rnd(86, B64) + "==",
        ),
        ("azure_key", "api-key: {s}", rnd(32, "0123456789abcdef")),
        (
            "bearer_token",
            "curl -H 'Authorization: Bearer {s}' https://api.x.io",
            rnd(40, ALNUM + "._-"),
        ),
        ("url_password", "DATABASE_URL=postgres://admin:{s}@db.internal:5432/app", rnd(18)),
        ("url_password", "redis://default:{s}@cache:6379/0", rnd(24)),
        ("private_key", "key file:\n{s}\n", _pem("RSA PRIVATE KEY")),
        ("private_key", "{s}", _pem("OPENSSH PRIVATE KEY")),
        ("gcp_service_account_key", '{{"type": "service_account", "private_key": "{s}"}}', gcp_pem),
        ("jwt", "cookie session={s}", jwt),
        ("generic_secret", 'client_secret: "{s}"', rnd(28, ALNUM + "-_")),
    ]


SECRETS = fake_secrets()


def test_at_least_twenty_formats() -> None:
    assert len(SECRETS) >= 20
    assert len({t for t, _, _ in SECRETS}) >= 15


@pytest.mark.parametrize(("kind", "template", "secret"), SECRETS, ids=[s[0] for s in SECRETS])
def test_each_fake_secret_is_redacted(kind: str, template: str, secret: str) -> None:
    text = template.format(s=secret)
    out, counts = redact_text(text)
    assert secret not in out
    assert f"[REDACTED:{kind}]" in out
    assert counts == {kind: 1}
    # the text around the secret survives
    prefix = template.split("{s}")[0].replace("{{", "{")
    assert out.startswith(prefix[: max(0, len(prefix) - 1)])


def test_all_secrets_in_one_log_counted_by_type() -> None:
    log = "\n".join(t.format(s=s) for _, t, s in SECRETS)
    out, counts = redact_text(log)
    for _, _, secret in SECRETS:
        assert secret not in out
    expected: dict[str, int] = {}
    for kind, _, _ in SECRETS:
        expected[kind] = expected.get(kind, 0) + 1
    assert counts == expected
    # idempotent: a second pass finds nothing and changes nothing
    again, counts2 = redact_text(out)
    assert again == out and counts2 == {}


def test_negatives_are_left_alone(corpus: Path) -> None:
    sha256 = hashlib.sha256(b"ctxscope").hexdigest()
    git_sha = hashlib.sha1(b"commit").hexdigest()
    negatives = [
        f"commit {git_sha}",
        f"sha256:{sha256}",
        f"request id {uuid.UUID(int=RNG.getrandbits(128))}",
        f"md5 {hashlib.md5(b'x').hexdigest()}",
        "the task-force ask-questions mask-layer",
        "https://github.com/pytest-dev/pytest/blob/main/src/_pytest/logging.py#L345",
        "password = getpass.getpass()",
        "Authorization header missing; pass a bearer token",
        "sk-learn is not a package; use scikit-learn",
        "AKIA is the prefix of an AWS access key id",
    ]
    for text in negatives:
        out, counts = redact_text(text)
        assert out == text, text
        assert counts == {}
    # real agent logs from the corpus contain no secrets: nothing may be redacted
    for name in (
        "d05_pip_install_editable_marshmallow.log",
        "d04_grep_r_qualname_sphinx.txt",
        "d12_npm-debug.log",
        "d09_tsc_output_first1500_of_18741_errors.txt",
    ):
        text = (corpus / name).read_text(encoding="utf-8")
        out, counts = redact_text(text)
        assert counts == {}, (name, counts)
        assert out == text


def test_redact_trace_counts_and_masks_every_field() -> None:
    key = "sk-proj-" + rnd(80, ALNUM + "_-")
    gh = "ghp_" + rnd(36)
    url = "postgres://u:" + rnd(16) + "@h/db"
    request = {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": f"Use {key} to call the API."},
            {"role": "user", "content": "set up the db"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {
                            "name": "bash",
                            "arguments": json.dumps({"cmd": f"export GH={gh}"}),
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": f"connected to {url}"},
            {"role": "user", "content": "now push"},
        ],
    }
    trace = trace_from_request(request, now=datetime(2025, 1, 1, tzinfo=UTC))
    raw = trace.to_json()
    assert key in raw and gh in raw
    red, counts = redact_trace(trace)
    out = red.to_json()
    assert key not in out and gh not in out and url.split(":")[2].split("@")[0] not in out
    # the key appears in system_instructions, the prompt and result.messages: each counted
    assert counts["openai_key"] == raw.count(key)
    assert counts["github_token"] == raw.count(gh)
    assert red.redactions == dict(sorted(counts.items()))
    # ids and structure are untouched
    assert [p.id for p in red.input.packets] == ["tool:call_1"]
    assert red.trace_id == trace.trace_id
    # a second pass is a no-op
    again, counts2 = redact_trace(red)
    assert counts2 == {} and again == red


#: The secrets their own rule finds alone (no name beside them needed).
ALONE = [s for s in SECRETS if redact_text(s[2])[1] == {s[0]: 1}]


@pytest.mark.parametrize(("kind", "template", "secret"), ALONE, ids=[s[0] for s in ALONE])
def test_a_secret_glued_to_a_word_is_redacted(kind: str, template: str, secret: str) -> None:
    del template
    glued = [f"tool_{secret}", f"x_{secret}_1"]
    if kind == "google_api_key":
        glued = glued[:1]  # its alphabet holds "_": what follows the key may be more of it
    for text in glued:
        out, counts = redact_text(text)
        assert secret not in out, text
        assert counts == {kind: 1}


def _glued_trace() -> tuple[Trace, list[str]]:
    """A real import whose trace id, session id, tool name and a packet id carry a fake
    Stripe key or AWS key id glued to a word, and those secrets."""
    stripe, aws = "sk_live_" + rnd(24), "AKIA" + rnd(16, UPPER_NUM)
    request = {
        "model": "gpt-4o",
        "messages": [
            {"role": "user", "content": "pay the invoice"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{aws}",
                        "type": "function",
                        "function": {"name": f"tool_{stripe}", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"call_{aws}", "content": "paid"},
        ],
        "tools": [{"type": "function", "function": {"name": f"tool_{stripe}", "parameters": {}}}],
    }
    trace = trace_from_request(request, now=datetime(2025, 1, 1, tzinfo=UTC))
    trace = trace.model_copy(update={"trace_id": f"run_{aws}", "session_id": f"s_{aws}"})
    return trace, [stripe, aws]


@pytest.mark.parametrize("fmt", ["json", "html", "otlp"])
def test_exports_carry_no_secret_glued_to_a_word(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    trace, secrets = _glued_trace()
    assert all(s in trace.to_json() for s in secrets)
    db = tmp_path / "store.duckdb"
    with TraceStore(str(db)) as store:
        store.add_traces([trace], source="tests")
    out = tmp_path / f"export.{fmt}"
    assert main(["export", trace.trace_id, "--db", str(db), "--format", fmt, "-o", str(out)]) == 0
    capsys.readouterr()
    text = out.read_text(encoding="utf-8")
    assert text and not [s for s in secrets if s in text]


def test_share_downloads_carry_no_secret_in_their_names_or_contents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app_support import fill, open_page
    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage
    from streamlit.testing.v1 import app_test

    stores: list[MemoryMediaFileStorage] = []

    class Kept(MemoryMediaFileStorage):
        """The storage of an AppTest run's downloads, kept to read them after the run."""

        def __init__(self, media_endpoint: str) -> None:
            super().__init__(media_endpoint)
            stores.append(self)

    monkeypatch.setattr(app_test, "MemoryMediaFileStorage", Kept)
    monkeypatch.setenv("CTXSCOPE_NO_WATCH", "1")
    trace, secrets = _glued_trace()
    fill(tmp_path / "ctxscope.duckdb", [trace])  # the conftest points CTXSCOPE_DB here
    for scope in ("this trace", "its whole session"):
        at = open_page("share", trace=trace.trace_id)
        at.radio(key="sh_scope").set_value(scope).run()
        assert not at.exception
        files = list(stores[-1]._files_by_id.values())
        names = [f.filename or "" for f in files]
        assert sorted(n.rsplit(".", 1)[-1] for n in names) == ["html", "json"], names
        for f in files:
            leaked = [s for s in secrets if s in (f.filename or "") or s.encode() in f.content]
            assert not leaked, (f.filename, leaked)
