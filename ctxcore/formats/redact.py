"""Find and mask secrets in traces before they leave the machine.

Agent context is full of things that must not be shared: the API key an agent echoed
from its environment, a ``curl -H "Authorization: Bearer ..."`` in a tool log, a database
URL with its password, a service-account JSON it read. Snapshots, HTML reports and OTLP
exports run every string of a trace through ``redact_text`` by default (``--no-redact``
turns it off), and ingest can do the same when ``CTXSCOPE_REDACT_ON_INGEST`` is set.

Each secret is replaced by a marker naming its type, e.g. ``[REDACTED:openai_key]``, and
counted by type in ``Trace.redactions``. Markers never match a rule again, so redacting
twice changes nothing: an exported snapshot re-imported and exported again is identical.

Rules are specific formats (a provider prefix and the length/alphabet of its keys) or a
secret-looking value next to a secret-looking name; plain hex digests, UUIDs and git SHAs
are left alone on purpose, since traces are full of them and they are not credentials.
Token counts in decisions still describe the original build; only the text changes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ctxcore.models import Trace

MARKER = "[REDACTED:{}]"
_MARKER_RE = re.compile(r"\[REDACTED:[a-z0-9_]+\]")


@dataclass(frozen=True)
class Rule:
    """One secret format: a regex and the group that holds the secret (0 = whole match).

    ``guard`` holds lower-case substrings of which at least one must occur for the regex
    to match at all; checking them first (a C-speed ``in``) keeps redaction of a
    megabyte-sized trace fast, since most rules cannot match most text.
    """

    name: str
    pattern: re.Pattern[str]
    group: int = 0
    guard: tuple[str, ...] = ()


_GUARDS: dict[str, tuple[str, ...]] = {
    "gcp_service_account_key": ('"private_key"',),
    "private_key": ("private key",),
    "anthropic_key": ("sk-ant-",),
    "openai_key": ("sk-",),
    "stripe_key": ("_live_", "_test_"),
    "google_api_key": ("aiza",),
    "aws_access_key_id": ("akia", "asia", "abia", "acca"),
    "aws_secret_access_key": ("secret",),
    "github_token": ("github_pat_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    "slack_token": ("xox",),
    "slack_webhook": ("hooks.slack.com",),
    "huggingface_token": ("hf_",),
    "azure_key": ("accountkey", "sharedaccess", "sig=", "api-key", "subscription-key"),
    "jwt": ("eyj",),
    "bearer_token": ("bearer",),
    "basic_auth": ("authorization",),
    "url_password": ("://",),
    "generic_secret": ("key", "secret", "token", "pass"),
}


def _r(name: str, regex: str, group: int = 0, flags: int = 0) -> Rule:
    return Rule(name, re.compile(regex, flags), group, _GUARDS[name])


# Order matters: specific formats before generic ones (sk-ant- before sk-, PEM blocks
# before anything that could match inside them).
RULES: tuple[Rule, ...] = (
    _r(
        "gcp_service_account_key",
        r'"private_key"\s*:\s*"(-----BEGIN [A-Z ]*PRIVATE KEY-----.*?'
        r'-----END [A-Z ]*PRIVATE KEY-----(?:\\n)?)"',
        1,
        re.DOTALL,
    ),
    _r(
        "private_key",
        r"-----BEGIN ((?:RSA |EC |DSA |OPENSSH |ENCRYPTED |PGP )?PRIVATE KEY(?: BLOCK)?)-----"
        r".*?-----END \1-----",
        0,
        re.DOTALL,
    ),
    _r("anthropic_key", r"\bsk-ant-(?:api|admin|sid)\d{2}-[A-Za-z0-9_\-]{20,}"),
    _r("openai_key", r"\bsk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{20,}"),
    _r("openai_key", r"\bsk-[A-Za-z0-9]{32,}\b"),
    _r("stripe_key", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b"),
    _r("google_api_key", r"\bAIza[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])"),
    _r("aws_access_key_id", r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"),
    _r(
        "aws_secret_access_key",
        r"(?i)(?:aws_?secret_?access_?key|aws_?secret_?key|secret_?access_?key)"
        r"""["']?\s*[:=]\s*["']?([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])""",
        1,
    ),
    _r("github_token", r"\bgithub_pat_[A-Za-z0-9_]{40,}"),
    _r("github_token", r"\bgh[pousr]_[A-Za-z0-9]{36,}\b"),
    _r("slack_token", r"\bxox[abposre]-[A-Za-z0-9\-]{10,}"),
    _r(
        "slack_webhook",
        r"https://hooks\.slack\.com/services/T[A-Za-z0-9]+/B[A-Za-z0-9]+/[A-Za-z0-9]+",
    ),
    _r("huggingface_token", r"\bhf_[A-Za-z0-9]{30,}\b"),
    _r(
        "azure_key",
        r"(?i)\b(?:AccountKey|SharedAccessKey|SharedAccessSignature|sig)=([A-Za-z0-9+/%]{20,}={0,2})",
        1,
    ),
    _r("jwt", r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    _r("bearer_token", r"(?i)\bbearer\s+([A-Za-z0-9\-._~+/]{16,}=*)", 1),
    _r("basic_auth", r"(?i)\bauthorization:\s*basic\s+([A-Za-z0-9+/]{8,}={0,2})", 1),
    _r(
        "url_password",
        r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/@\"'<>\[\]]+:((?!\[REDACTED:)[^\s@/\"'<>]+)@",
        1,
    ),
    _r(
        "azure_key",
        r"(?i)\b(?:api-key|ocp-apim-subscription-key)[\"']?\s*[:=]\s*[\"']?([a-f0-9]{32})\b",
        1,
    ),
    _r(
        "generic_secret",
        r"(?i)\b(?:api[_\-]?key|secret[_\-]?key|client[_\-]?secret|access[_\-]?token|"
        r"auth[_\-]?token|password|passwd)[\"']?\s*[:=]\s*[\"']([A-Za-z0-9_\-./+=!@#$%^&*]{12,})[\"']",
        1,
    ),
)


def _replace(rule: Rule, counts: dict[str, int]) -> Callable[[re.Match[str]], str]:
    marker = MARKER.format(rule.name)

    def sub(m: re.Match[str]) -> str:
        secret = m.group(rule.group)
        if secret is None or _MARKER_RE.fullmatch(secret) or secret.startswith("[REDACTED:"):
            return m.group(0)
        counts[rule.name] = counts.get(rule.name, 0) + 1
        if rule.group == 0:
            return marker
        start, end = m.span(rule.group)
        base = m.start(0)
        whole = m.group(0)
        return whole[: start - base] + marker + whole[end - base :]

    return sub


def redact_text(text: str) -> tuple[str, dict[str, int]]:
    """``text`` with every secret replaced by ``[REDACTED:<type>]``, and the counts by type."""
    counts: dict[str, int] = {}
    lower = text.lower()
    for rule in RULES:
        if rule.guard and not any(g in lower for g in rule.guard):
            continue
        before = len(counts), sum(counts.values())
        text = rule.pattern.sub(_replace(rule, counts), text)
        if (len(counts), sum(counts.values())) != before:
            lower = text.lower()
    return text, counts


#: Fields that hold identifiers or codes, never free text: left as they are.
_SKIP_KEYS = frozenset(
    {
        "schema",
        "trace_id",
        "session_id",
        "source_trace_id",
        "created_at",
        "now",
        "timestamp",
        "id",
        "packet_id",
        "kind",
        "status",
        "reason",
        "partition",
        "preset",
        "tokenizer",
        "role",
        "fill",
        "verdict",
        "name",
        "version",
    }
)


def _walk(node: Any, counts: dict[str, int], key: str | None = None) -> Any:
    if isinstance(node, str):
        if key in _SKIP_KEYS:
            return node
        new, found = redact_text(node)
        for k, v in found.items():
            counts[k] = counts.get(k, 0) + v
        return new
    if isinstance(node, dict):
        return {k: _walk(v, counts, k) for k, v in node.items()}
    if isinstance(node, list):
        return [_walk(v, counts, key) for v in node]
    return node


def redact_trace(trace: Trace) -> tuple[Trace, dict[str, int]]:
    """A copy of ``trace`` with secrets masked in every free-text field.

    Returns the new trace (whose ``redactions`` add this pass's counts to the ones it
    already had) and this pass's counts by type.
    """
    counts: dict[str, int] = {}
    data = trace.to_dict()
    redactions = data.pop("redactions", {}) or {}
    data = _walk(data, counts)
    if not counts:
        return trace, counts
    total = dict(redactions)
    for k, v in counts.items():
        total[k] = total.get(k, 0) + v
    data["redactions"] = dict(sorted(total.items()))
    return Trace.model_validate(data), counts
