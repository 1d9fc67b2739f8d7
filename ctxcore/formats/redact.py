"""Find and mask secrets in traces before they leave the machine.

Agent context is full of things that must not be shared: the API key an agent echoed
from its environment, a ``curl -H "Authorization: Bearer ..."`` in a tool log, a database
URL with its password, a service-account JSON it read. Snapshots, HTML reports and OTLP
exports run every string of a trace through ``redact_text`` by default (``--no-redact``
turns it off), and ingest can do the same when ``CTXSCOPE_REDACT_ON_INGEST`` is set.

Each secret is replaced by a marker naming its type, e.g. ``[REDACTED:openai_key]``, and
counted by type in ``Trace.redactions``. Markers never match a rule again, so redacting
twice changes nothing: an exported snapshot re-imported and exported again is identical.

Rules are specific formats (a provider prefix and the length/alphabet of its keys), or a
secret-looking value next to a secret-looking name (quoted, ``NAME_PASSWORD=...`` in the
environment style, or an unquoted ``password: ...`` whose value is not code). Plain hex
digests, UUIDs and git SHAs are left alone on purpose, since traces are full of them and
they are not credentials. Every string is redacted, ids and metadata keys included.
Token counts in decisions still describe the original build; only the text changes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

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
    "anthropic_oauth_token": ("sk-ant-",),
    "openrouter_key": ("sk-or-",),
    "openai_key": ("sk-",),
    "stripe_key": ("_live_", "_test_"),
    "google_api_key": ("aiza",),
    "google_oauth_token": ("ya29.",),
    "google_client_secret": ("gocspx-",),
    "aws_access_key_id": ("akia", "asia", "abia", "acca"),
    "aws_secret_access_key": ("secret",),
    "github_token": ("github_pat_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    "gitlab_token": ("glpat-", "gldt-", "glptt-", "glrt-", "glsoat-", "glft-", "glcbt-"),
    "npm_token": ("npm_",),
    "pypi_token": ("pypi-ageicHlwaS5vcmc".lower(),),
    "slack_token": ("xox",),
    "slack_webhook": ("hooks.slack.com",),
    "discord_webhook": ("/api/webhooks/",),
    "telegram_bot_token": (":aa",),
    "huggingface_token": ("hf_", "api_org_"),
    "sendgrid_key": ("sg.",),
    "twilio_key": ("sk",),
    "mailgun_key": ("key-",),
    "digitalocean_token": ("_v1_",),
    "shopify_token": ("shpat_", "shpca_", "shppa_", "shpss_"),
    "square_token": ("sq0atp-", "sq0csp-"),
    "databricks_token": ("dapi",),
    "doppler_token": ("dp.st.", "dp.ct.", "dp.sa.", "dp.scim.", "dp.audit."),
    "linear_key": ("lin_api_",),
    "postman_key": ("pmak-",),
    "age_secret_key": ("age-secret-key-",),
    "atlassian_token": ("atatt3",),
    "groq_key": ("gsk_",),
    "replicate_token": ("r8_",),
    "xai_key": ("xai-",),
    "perplexity_key": ("pplx-",),
    "langsmith_key": ("lsv2_",),
    "tavily_key": ("tvly-",),
    "azure_key": ("accountkey", "sharedaccess", "sig=", "api-key", "subscription-key"),
    "jwt": ("eyj",),
    "bearer_token": ("bearer",),
    "basic_auth": ("authorization",),
    "url_password": ("://",),
    "generic_secret": ("key", "secret", "token", "pass"),
    "password": ("pass", "pwd"),
    "env_secret": ("pass", "pwd", "secret", "token", "key", "credential"),
}


#: ``\b`` of the rules, with ``_`` a separator rather than part of a word: a key glued to an
#: identifier (``tool_sk_live_…`` in a tool name, ``x_AKIA…`` in a trace id) still ends a
#: word there, where ``\b`` saw none and let the key through.
_EDGE = r"(?:(?<![A-Za-z0-9])(?=[A-Za-z0-9])|(?<=[A-Za-z0-9])(?![A-Za-z0-9]))"


def _r(name: str, regex: str, group: int = 0, flags: int = 0) -> Rule:
    return Rule(name, re.compile(regex.replace(r"\b", _EDGE), flags), group, _GUARDS[name])


#: A value that is not itself a secret but names one: a shell or template variable, a
#: placeholder, a masked value, a marker of ours. Unquoted ``NAME=value`` rules skip these.
_NOT_A_VALUE = r"""(?![$%<*{\[]|(?:\*+|x{4,}|null|none|true|false|undefined|changeme|redacted)\b)"""

# Order matters: specific formats before generic ones (sk-ant- before sk-, PEM blocks
# before anything that could match inside them, provider formats before NAME=value).
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
    _r("anthropic_oauth_token", r"\bsk-ant-(?:oat|ort)\d{2}-[A-Za-z0-9_\-]{20,}"),
    _r("anthropic_key", r"\bsk-ant-(?:api|admin|sid)\d{2}-[A-Za-z0-9_\-]{20,}"),
    _r("openrouter_key", r"\bsk-or-v1-[a-f0-9]{64}\b"),
    _r("openai_key", r"\bsk-(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{20,}"),
    _r("openai_key", r"\bsk-[A-Za-z0-9]{32,}\b"),
    _r("stripe_key", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b"),
    _r("google_api_key", r"\bAIza[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])"),
    _r("google_oauth_token", r"\bya29\.[0-9A-Za-z_\-]{20,}"),
    _r("google_client_secret", r"\bGOCSPX-[A-Za-z0-9_\-]{28}(?![A-Za-z0-9_\-])"),
    _r("aws_access_key_id", r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"),
    _r(
        "aws_secret_access_key",
        r"(?i)(?:aws_?secret_?access_?key|aws_?secret_?key|secret_?access_?key)"
        r"""["']?\s*[:=]\s*["']?([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])""",
        1,
    ),
    _r("github_token", r"\bgithub_pat_[A-Za-z0-9_]{40,}"),
    _r("github_token", r"\bgh[pousr]_[A-Za-z0-9]{36,}\b"),
    _r("gitlab_token", r"\bgl(?:pat|dt|ptt|rt|soat|ft|cbt)-[A-Za-z0-9_\-]{20,}"),
    _r("npm_token", r"\bnpm_[A-Za-z0-9]{36}\b"),
    _r("pypi_token", r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,}"),
    _r("slack_token", r"\bxox[abposre]-[A-Za-z0-9\-]{10,}"),
    _r(
        "slack_webhook",
        r"https://hooks\.slack\.com/services/T[A-Za-z0-9]+/B[A-Za-z0-9]+/[A-Za-z0-9]+",
    ),
    _r(
        "discord_webhook",
        r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_\-]{60,}",
    ),
    _r("telegram_bot_token", r"(?<![0-9])\d{8,10}:AA[A-Za-z0-9_\-]{33}(?![A-Za-z0-9_\-])"),
    _r("huggingface_token", r"\b(?:hf|api_org)_[A-Za-z0-9]{30,}\b"),
    _r("sendgrid_key", r"\bSG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}(?![A-Za-z0-9_\-])"),
    _r("twilio_key", r"\bSK[0-9a-fA-F]{32}\b"),
    _r("mailgun_key", r"\bkey-[0-9a-f]{32}\b"),
    _r("digitalocean_token", r"\bdo[opr]_v1_[a-f0-9]{64}\b"),
    _r("shopify_token", r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b"),
    _r("square_token", r"\bsq0(?:atp|csp)-[A-Za-z0-9_\-]{22,}"),
    _r("databricks_token", r"\bdapi[a-f0-9]{32}(?:-\d)?\b"),
    _r("doppler_token", r"\bdp\.(?:st|ct|sa|scim|audit)\.[A-Za-z0-9_\-.]{40,}"),
    _r("linear_key", r"\blin_api_[A-Za-z0-9]{40}\b"),
    _r("postman_key", r"\bPMAK-[a-f0-9]{24}-[a-f0-9]{34}\b"),
    _r("age_secret_key", r"\bAGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}\b"),
    _r("atlassian_token", r"\bATATT3[A-Za-z0-9_\-=]{180,}"),
    _r("groq_key", r"\bgsk_[A-Za-z0-9]{48,}\b"),
    _r("replicate_token", r"\br8_[A-Za-z0-9]{37,}\b"),
    _r("xai_key", r"\bxai-[A-Za-z0-9]{70,}\b"),
    _r("perplexity_key", r"\bpplx-[A-Za-z0-9]{40,}\b"),
    _r("langsmith_key", r"\blsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10}\b"),
    _r("tavily_key", r"\btvly-(?:dev-|prod-)?[A-Za-z0-9]{32,}\b"),
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
    # An environment-style assignment: an upper-case name that says secret, any value.
    _r(
        "env_secret",
        r"\b[A-Z0-9_]*(?:PASSWORD|PASSWD|_PWD|SECRET|SECRET_KEY|TOKEN|API_KEY|APIKEY|"
        r"ACCESS_KEY|PRIVATE_KEY|CREDENTIALS?)\b[\"']?[ \t]*[=:][ \t]*[\"']?"
        + _NOT_A_VALUE
        + r"""((?=[^\s"'`,;]*[^\s"'`,;0-9])[^\s"'`,;]{6,})""",
        1,
    ),
    # ``password: hunter2`` / ``password=s3cret!`` unquoted: a value with a digit or a symbol
    # and nothing of code (calls, attributes, indexing), so ``password = getpass.getpass()``
    # and ``password: str`` stay.
    _r(
        "password",
        r"(?i)\b(?:password|passwd|pwd|passphrase)\b[ \t]*[=:][ \t]*"
        + _NOT_A_VALUE
        + r"""((?=[^\s"'`]*[0-9!@#&+?~^])[^\s"'`()\[\]{}.,;<>=]{6,})(?![^\s"'`,;])""",
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


def _walk(node: Any, counts: dict[str, int]) -> Any:
    # Every string at every depth, ids and dictionary keys included: a secret can sit in a
    # session id, a packet id or a metadata key as well as in content. The structural fields
    # (schema, timestamps, statuses, reason codes, roles) are validated enums and times that no
    # rule can match, so nothing needs skipping; ids that are rewritten are rewritten the same
    # way everywhere (the function is deterministic), so decisions still name their packets.
    if isinstance(node, str):
        new, found = redact_text(node)
        for k, v in found.items():
            counts[k] = counts.get(k, 0) + v
        return new
    if isinstance(node, dict):
        return {_walk(k, counts): _walk(v, counts) for k, v in node.items()}
    if isinstance(node, list):
        return [_walk(v, counts) for v in node]
    return node


def redact_trace(trace: Trace, raw: bytes | str | None = None) -> tuple[Trace, dict[str, int]]:
    """A copy of ``trace`` with secrets masked in every free-text field.

    Returns the new trace (whose ``redactions`` add this pass's counts to the ones it
    already had) and this pass's counts by type. ``raw``: the trace's JSON if the caller
    has it (ingest's line). A trace in which no rule can match (``may_hold_secret``, one
    read of its JSON) is returned as it is; only the others are walked string by string.
    """
    if not may_hold_secret(trace.to_json_bytes() if raw is None else raw):
        return trace, {}
    return walk_trace(trace)


def walk_trace(trace: Trace) -> tuple[Trace, dict[str, int]]:
    """``redact_trace`` by reading every string of ``trace`` with ``redact_text``."""
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


# --- Deciding from a trace's serialization whether any rule can match (docs/design.md,
# "Capture, import, export, redaction": redaction on ingest at the speed of one scan).

#: For each rule (by name), text that every match of it holds: alternatives, each a tuple of
#: literals that must all occur. Matched as written for a rule without ``(?i)``, in the
#: lowered text for one with it. Each is read off the rule's regex (a literal outside every
#: optional part); where a rule's is its guard, the guard is what today's ``redact_text``
#: requires before it runs the rule. tests/test_redact_scan.py checks each against the
#: secrets of the redaction tests and compares ``redact_trace`` with the walk for every input.
_NEEDS: dict[str, tuple[tuple[str, ...], ...]] = {
    "gcp_service_account_key": (('"private_key"', "-----BEGIN "),),
    "private_key": (("-----BEGIN ", "PRIVATE KEY", "-----END "),),
    "anthropic_oauth_token": (("sk-ant-",),),
    "anthropic_key": (("sk-ant-",),),
    "openrouter_key": (("sk-or-v1-",),),
    "openai_key": (("sk-",),),
    "stripe_key": (("sk_live_",), ("sk_test_",), ("rk_live_",), ("rk_test_",)),
    "google_api_key": (("AIza",),),
    "google_oauth_token": (("ya29.",),),
    "google_client_secret": (("GOCSPX-",),),
    "aws_access_key_id": (("AKIA",), ("ASIA",), ("ABIA",), ("ACCA",)),
    "aws_secret_access_key": (("secret", "key"),),
    "github_token": (("github_pat_",), ("ghp_",), ("gho_",), ("ghu_",), ("ghs_",), ("ghr_",)),
    "npm_token": (("npm_",),),
    "pypi_token": (("pypi-AgEIcHlwaS5vcmc",),),
    "slack_token": (("xox",),),
    "slack_webhook": (("https://hooks.slack.com/services/T",),),
    "discord_webhook": (("/api/webhooks/",),),
    "telegram_bot_token": ((":AA",),),
    "huggingface_token": (("hf_",), ("api_org_",)),
    "sendgrid_key": (("SG.",),),
    "twilio_key": (("SK",),),
    "mailgun_key": (("key-",),),
    "digitalocean_token": (("_v1_",),),
    "square_token": (("sq0atp-",), ("sq0csp-",)),
    "databricks_token": (("dapi",),),
    "linear_key": (("lin_api_",),),
    "postman_key": (("PMAK-",),),
    "age_secret_key": (("AGE-SECRET-KEY-1",),),
    "atlassian_token": (("ATATT3",),),
    "groq_key": (("gsk_",),),
    "replicate_token": (("r8_",),),
    "xai_key": (("xai-",),),
    "perplexity_key": (("pplx-",),),
    "langsmith_key": (("lsv2_",),),
    "tavily_key": (("tvly-",),),
    "azure_key": (
        ("accountkey=",), ("sharedaccess",), ("sig=",), ("api-key",), ("subscription-key",),
    ),
    "jwt": (("eyJ",),),
    "bearer_token": (("bearer",),),
    "basic_auth": (("authorization:", "basic"),),
    "url_password": (("://", "@"),),
    "generic_secret": tuple(
        (a + sep + b,)
        for a, b in (("api", "key"), ("secret", "key"), ("client", "secret"),
                     ("access", "token"), ("auth", "token"))
        for sep in ("_", "-", "")
    ) + (("passw",),),
    "env_secret": tuple(
        (w,) for w in ("PASSWORD", "PASSWD", "_PWD", "SECRET", "TOKEN", "API_KEY", "APIKEY",
                       "ACCESS_KEY", "PRIVATE_KEY", "CREDENTIAL")
    ),
    "password": (("passw",), ("pwd",), ("passphrase",)),
}  # fmt: skip


def rule_needs(rule: Rule) -> tuple[bool, tuple[tuple[str, ...], ...]]:
    """What a match of ``rule`` holds, and whether as written (else in the lowered text):
    its ``_NEEDS``, lowered for a rule that ignores case; else its guard, lowered; a rule
    with neither needs nothing (one empty alternative: every text may hold a match)."""
    alts = _NEEDS.get(rule.name)
    if alts is None:
        return False, tuple((g,) for g in rule.guard) or ((),)
    if rule.pattern.flags & re.IGNORECASE:
        return False, tuple(tuple(lit.lower() for lit in alt) for alt in alts)
    return True, alts


#: Characters that an ``(?i)`` rule's ASCII letters match although they are not ASCII
#: (``re``'s case folding): a text with one is redacted by the walk, whatever it holds.
_FOLDED_TO_ASCII = ("\u0130", "\u0131", "\u017f", "\u212a")
#: A JSON escape, and what each stands for (``\\uXXXX``: that character)
_ESCAPE = re.compile(r'\\(["\\/bfnrt]|u[0-9a-fA-F]{4})')
_ESCAPED = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def _unescape(m: re.Match[str]) -> str:
    g = m.group(1)
    return _ESCAPED[g] if len(g) == 1 else chr(int(g[1:], 16))


_HEX4 = re.compile(r"[0-9a-fA-F]{4}")


def json_strings(line: str) -> str:
    """A JSON text with its escapes read: every string it holds (keys included) stands in
    it character for character, between the JSON's quotes and punctuation.

    What ``_ESCAPE.sub(_unescape, line)`` gives, read between the backslashes: each piece
    after one starts with what it escapes (an empty piece: the backslash was escaped, and
    the piece after it is plain text); what is no escape stays as written. (The regex's
    callback, a call per escape, cost ~3x.)"""
    if "\\" not in line:
        return line
    pieces = line.split("\\")
    out = [pieces[0]]
    k, n = 1, len(pieces)
    while k < n:
        piece = pieces[k]
        k += 1
        if not piece:  # an escaped backslash, or a last one alone
            out.append("\\")
            if k < n:
                out.append(pieces[k])
                k += 1
        elif (char := _ESCAPED.get(piece[0])) is not None:
            out += (char, piece[1:])
        elif piece[0] == "u" and _HEX4.fullmatch(piece, 1, 5):
            out += (chr(int(piece[1:5], 16)), piece[5:])
        else:  # no escape: as written
            out += ("\\", piece)
    return "".join(out)


class _Literals:
    """Every literal of every rule's needs, and a one-pass test of which a text holds.

    A literal is kept with how it is looked for: as written, or in the lowered text. The
    text's 2-grams and 4-grams (of its lower-cased bytes, read as little-endian integers
    through numpy views, no copy) are hashed into a bitmap; a literal whose grams are not
    all there is not in the text. Those that pass are looked up with ``in`` (the bitmap
    only rules literals out, it never decides one is there), and only the alternatives
    they are part of are checked.
    """

    #: bits of the hash (the bitmap holds 2-grams and 4-grams in two halves)
    BITS = 16
    _MUL = np.uint32(2654435761)  # Knuth's multiplicative hash

    def __init__(self, checks: list[tuple[bool, tuple[tuple[str, ...], ...]]]) -> None:
        #: a rule that needs nothing: every text may hold a match of it
        self.always = any(not alt for _, alts in checks for alt in alts)
        keys = sorted({(lit, w) for w, alts in checks for alt in alts for lit in alt})
        self.keys = keys
        index = {key: i for i, key in enumerate(keys)}
        #: each alternative as the indices of its literals, and those of each literal
        self.alts_of: list[list[tuple[int, ...]]] = [[] for _ in keys]
        for w, alts in checks:
            for alt in alts:
                ids = tuple(index[(lit, w)] for lit in alt)
                for i in ids:
                    self.alts_of[i].append(ids)
        grams: list[int] = []
        starts: list[int] = []
        for lit, _ in keys:
            b = lit.lower().encode()
            starts.append(len(grams))
            grams += [
                self._slot(int.from_bytes(b[k : k + 2], "little"), 2) for k in range(len(b) - 1)
            ]
            grams += [
                self._slot(int.from_bytes(b[k : k + 4], "little"), 4) for k in range(len(b) - 3)
            ]
            if len(b) < 2:  # one character: no gram; slot 0 (two NULs) is always set
                grams.append(0)
        self.grams = np.array(grams, np.int64)
        self.starts = np.array(starts, np.int64)

    @classmethod
    def _slot(cls, gram: int, width: int) -> int:
        """A gram's place in the bitmap: a 2-gram's own number (the first half), a
        4-gram's hash (the second)."""
        if width == 2:
            return gram
        return 1 << cls.BITS | ((gram * int(cls._MUL)) & 0xFFFFFFFF) >> (32 - cls.BITS)

    @classmethod
    def _mark(cls, bits: Any, data: bytes) -> None:
        """Set the slot of every 2-gram and 4-gram of ``data`` (a view per offset)."""
        bits[0] = True
        for off in range(2):
            if (count := (len(data) - off) // 2) > 0:
                bits[np.frombuffer(data, np.uint16, count, off).astype(np.intp)] = True
        shift, high = np.uint32(32 - cls.BITS), np.intp(1 << cls.BITS)
        for off in range(4):
            if (count := (len(data) - off) // 4) > 0:
                g = np.frombuffer(data, np.uint32, count, off) * cls._MUL
                bits[(g >> shift).astype(np.intp) + high] = True

    def any_alternative(self, text: str, low: str) -> bool:
        """Does ``text`` (``low``: lowered) hold every literal of some alternative?"""
        if self.always:
            return True
        bits = np.zeros(2 << self.BITS, np.bool_)
        self._mark(bits, low.encode("utf-8", "surrogatepass"))
        maybe = np.logical_and.reduceat(bits[self.grams], self.starts)
        keys = self.keys
        present = {
            int(i) for i in np.flatnonzero(maybe) if keys[i][0] in (text if keys[i][1] else low)
        }
        return any(all(j in present for j in alt) for i in present for alt in self.alts_of[i])


_LITERALS = _Literals([rule_needs(r) for r in RULES])
#: where ``may_hold_secret`` cuts a text into pieces it reads once each (no literal holds it)
_PIECE = b"{"


def may_hold_secret(raw: bytes | str) -> bool:
    """Can ``redact_trace`` find anything in the trace whose JSON is ``raw``? False only
    when no rule can match any string of it: read once (its escapes read, lowered once),
    each rule's needs (``_NEEDS``) looked up in it; a match of a rule inside any one string
    is a match of its needs in the whole text, which holds every string as it is.

    A piece between two ``{`` that came before is not read again (``_PIECE``): no literal of
    the needs holds a ``{`` and no escape reads past one, so each literal the text holds is
    inside a piece, and the pieces kept, each once, joined by ``{``, hold the same literals
    and no other (the answer is the same; lines of a group share many pieces)."""
    if isinstance(raw, bytes):
        raw = _PIECE.join(dict.fromkeys(raw.split(_PIECE)))
    try:
        line = raw if isinstance(raw, str) else raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:  # not a trace's JSON: whoever reads it words the error
        return True
    text = json_strings(line)
    if not text.isascii() and any(c in text for c in _FOLDED_TO_ASCII):
        return True
    return _LITERALS.any_alternative(text, text.lower())
