"""The redaction table: every secret format we know, at every depth, on every way out.

Each row is one format with a fake secret in that format (random, so no real credential is
in the repo) and the text it typically appears in. Every row is checked on its own, inside a
trace at awkward places (ids, metadata keys, values under keys named ``name``/``id``/``kind``
deep in metadata), and through each export format (snapshot JSON, OTLP JSON, the offline
HTML report) as ``ctxscope export`` writes them from a real store.
"""

from __future__ import annotations

import random
import string
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ctxcore.formats.redact import redact_text, redact_trace
from ctxcore.formats.share import html_report, otlp_json, redact_all, snapshot_json
from ctxcore.models import CapturedInput, Config, Message, Packet
from ctxcore.pipeline import build_trace
from ctxcore.store import TraceStore

RNG = random.Random(1729)
ALNUM = string.ascii_letters + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
BECH32 = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"


def rnd(n: int, alphabet: str = ALNUM) -> str:
    return "".join(RNG.choice(alphabet) for _ in range(n))


#: (type, template, secret): the secret in its provider's format inside typical text.
TABLE: list[tuple[str, str, str]] = [
    ("anthropic_key", "ANTHROPIC_API_KEY={s}", "sk-ant-api03-" + rnd(93, ALNUM + "-_") + "AA"),
    ("anthropic_oauth_token", "oauth: {s}", "sk-ant-oat01-" + rnd(95, ALNUM + "-_")),
    ("anthropic_oauth_token", "refresh {s} ok", "sk-ant-ort01-" + rnd(95, ALNUM + "-_")),
    ("openai_key", "key {s}", "sk-proj-" + rnd(100, ALNUM + "-_")),
    ("openrouter_key", "OPENROUTER={s}", "sk-or-v1-" + rnd(64, HEX)),
    ("stripe_key", "stripe {s}", "sk_live_" + rnd(24)),
    ("google_api_key", "?key={s}&x=1", "AIza" + rnd(35, ALNUM + "-_")),
    ("google_oauth_token", "access {s}", "ya29." + rnd(120, ALNUM + "-_")),
    ("google_client_secret", "secret is {s}", "GOCSPX-" + rnd(28, ALNUM + "-_")),
    ("aws_access_key_id", "id {s}", "AKIA" + rnd(16, string.ascii_uppercase + string.digits)),
    ("aws_secret_access_key", "aws_secret_access_key = {s}", rnd(40, B64)),
    ("github_token", "GH={s}", "ghp_" + rnd(36)),
    ("gitlab_token", "git clone https://oauth2:{s}@gitlab.com/g/p.git", "glpat-" + rnd(20)),
    ("gitlab_token", "deploy {s}", "gldt-" + rnd(20)),
    ("npm_token", "//registry.npmjs.org/:_authToken {s}", "npm_" + rnd(36)),
    ("pypi_token", "twine upload -p {s}", "pypi-AgEIcHlwaS5vcmc" + rnd(60, ALNUM + "-_")),
    ("slack_token", "bot {s}", "xoxb-" + rnd(12, string.digits) + "-" + rnd(24)),
    (
        "slack_webhook",
        "post to {s}",
        "https://hooks.slack.com/services/T" + rnd(8) + "/B" + rnd(8) + "/" + rnd(24),
    ),
    (
        "discord_webhook",
        "post to {s}",
        "https://discord.com/api/webhooks/" + rnd(18, string.digits) + "/" + rnd(68, ALNUM + "_-"),
    ),
    ("telegram_bot_token", "bot{s}/getMe", rnd(10, string.digits) + ":AA" + rnd(33, ALNUM + "_-")),
    ("huggingface_token", "HF {s}", "hf_" + rnd(34)),
    ("sendgrid_key", "SG key {s}", "SG." + rnd(22, ALNUM + "-_") + "." + rnd(43, ALNUM + "-_")),
    ("twilio_key", "twilio {s}", "SK" + rnd(32, HEX)),
    ("mailgun_key", "mailgun {s}", "key-" + rnd(32, HEX)),
    ("digitalocean_token", "do {s}", "dop_v1_" + rnd(64, HEX)),
    ("shopify_token", "shop {s}", "shpat_" + rnd(32, HEX)),
    ("square_token", "square {s}", "sq0atp-" + rnd(22, ALNUM + "-_")),
    ("databricks_token", "dbx {s}", "dapi" + rnd(32, HEX)),
    ("doppler_token", "doppler {s}", "dp.st.dev." + rnd(40)),
    ("linear_key", "linear {s}", "lin_api_" + rnd(40)),
    ("postman_key", "postman {s}", "PMAK-" + rnd(24, HEX) + "-" + rnd(34, HEX)),
    ("age_secret_key", "age {s}", "AGE-SECRET-KEY-1" + rnd(58, BECH32)),
    ("atlassian_token", "jira {s}", "ATATT3" + rnd(186, ALNUM + "-_")),
    ("groq_key", "groq {s}", "gsk_" + rnd(52)),
    ("replicate_token", "REPLICATE {s}", "r8_" + rnd(37)),
    ("xai_key", "grok {s}", "xai-" + rnd(80)),
    ("perplexity_key", "pplx {s}", "pplx-" + rnd(48)),
    ("langsmith_key", "ls {s}", "lsv2_pt_" + rnd(32, HEX) + "_" + rnd(10, HEX)),
    ("tavily_key", "tavily {s}", "tvly-" + rnd(32)),
    ("azure_key", "AccountName=a;AccountKey={s};", rnd(86, B64) + "=="),
    (
        "jwt",
        "cookie {s}",
        "eyJ" + rnd(20, ALNUM + "_-") + ".eyJ" + rnd(30, ALNUM + "_-") + "." + rnd(43),
    ),
    ("bearer_token", "Authorization: Bearer {s}", rnd(40, ALNUM + "._-")),
    ("basic_auth", "Authorization: Basic {s}", rnd(24, B64) + "=="),
    ("url_password", "postgres://app:{s}@db:5432/x", rnd(18)),
    ("generic_secret", 'client_secret: "{s}"', rnd(28)),
    ("env_secret", "DB_PASSWORD={s}", rnd(14)),
    ("env_secret", "export MY_SERVICE_API_KEY={s}", rnd(30)),
    ("env_secret", "SECRET_KEY: {s}", rnd(50, ALNUM + "!@#%^&*")),
    ("password", "password: {s}", rnd(6, string.ascii_lowercase) + "42" + rnd(4)),
    ("password", "mysql -u root --password={s}", "Hunter2" + rnd(6)),
    (
        "private_key",
        "{s}",
        "-----BEGIN OPENSSH PRIVATE KEY-----\n"
        + rnd(64, B64)
        + "\n-----END OPENSSH PRIVATE KEY-----",
    ),
]

NOT_SECRETS = [
    "password = getpass.getpass()",
    "password: str",
    "PASSWORD=${DB_PASSWORD}",
    "GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}",
    "MAX_TOKENS=4000",
    "MAX_TOKEN=4096",
    "API_KEY=<your key here>",
    "password: ********",
    "password=self.password",
    "token = tokens[0]",
    "the npm_config_cache folder",
]


def test_the_table_covers_at_least_thirty_formats() -> None:
    assert len({kind for kind, _, _ in TABLE}) >= 30


@pytest.mark.parametrize(
    ("kind", "template", "secret"), TABLE, ids=[f"{r[0]}-{i}" for i, r in enumerate(TABLE)]
)
def test_each_format_is_masked_and_named(kind: str, template: str, secret: str) -> None:
    out, counts = redact_text(template.format(s=secret))
    assert secret not in out
    assert f"[REDACTED:{kind}]" in out
    assert counts == {kind: 1}
    again, more = redact_text(out)
    assert (again, more) == (out, {})


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_look_alikes_are_left_alone(text: str) -> None:
    assert redact_text(text) == (text, {})


def _trace_with_secrets_everywhere() -> tuple[object, list[str]]:
    """A real build whose secrets sit in ids, metadata keys and nested ``name``/``id`` fields."""
    secrets = [s for _, _, s in TABLE]
    gh, ant, npm, gl = secrets[11], secrets[1], secrets[14], secrets[12]
    now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    log = "\n".join(t.format(s=s) for _, t, s in TABLE)
    inp = CapturedInput(
        query="why does the deploy fail?",
        now=now,
        system_instructions="You deploy services.",
        history=[Message(role="user", content=f"use {ant} for the API")],
        packets=[
            Packet(id="tool:env-dump", kind="tool_result", content=log, must_keep=True),
            Packet(
                id=f"tool:{gh}",
                kind="tool_result",
                content="the id itself is a token",
                metadata={"deep": [{"name": npm, "id": gl, "kind": ant}], f"key {gh}": 1},
            ),
        ],
    )
    trace = build_trace(
        inp,
        Config(preset="ctxscope", max_tokens=200_000),
        trace_id="secret-probe",
        session_id=f"session-{npm}",
        tags=[f"tag-{gl}"],
        metadata={"owner": {"name": ant, "id": gh}},
    )
    return trace, secrets


def test_a_trace_is_redacted_at_every_depth_ids_and_keys_included() -> None:
    trace, secrets = _trace_with_secrets_everywhere()
    red, counts = redact_trace(trace)  # type: ignore[arg-type]
    text = red.to_json()
    leaked = [s for s in secrets if s in text]
    assert leaked == []
    assert sum(counts.values()) > len(TABLE)
    # ids that held a secret are rewritten the same way wherever they appear
    packet_ids = {p.id for p in red.input.packets}
    assert red.result is not None
    assert {d.packet_id for d in red.result.decisions} >= packet_ids
    assert "tool:[REDACTED:github_token]" in packet_ids
    assert red.session_id == "session-[REDACTED:npm_token]"


@pytest.mark.parametrize("fmt", ["json", "otlp", "html"])
def test_every_export_format_carries_no_secret(fmt: str) -> None:
    trace, secrets = _trace_with_secrets_everywhere()
    out, counts = redact_all([trace])  # type: ignore[list-item]
    text = {
        "json": lambda: snapshot_json(out),
        "otlp": lambda: otlp_json(out),
        "html": lambda: html_report(out, redactions=counts),
    }[fmt]()
    assert [s for s in secrets if s in text] == []


@pytest.mark.parametrize("fmt", ["json", "otlp", "html"])
def test_ctxscope_export_from_a_store_redacts_by_default(fmt: str, tmp_path: Path) -> None:
    trace, secrets = _trace_with_secrets_everywhere()
    db = tmp_path / "store.duckdb"
    with TraceStore(db) as store:
        store.add_traces([trace])  # type: ignore[list-item]
    out = tmp_path / f"export.{fmt}"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ctxcore",
            "export",
            "secret-probe",
            "--format",
            fmt,
            "--db",
            str(db),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    text = out.read_text(encoding="utf-8")
    assert [s for s in secrets if s in text] == []
    assert "redacted" in proc.stderr
