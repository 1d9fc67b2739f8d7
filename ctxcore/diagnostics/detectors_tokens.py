"""Detectors about the final prompt's tokens: compression damage and estimator drift.

Split from ``detectors`` to keep modules small. Both look at the rendered prompt section
by section (``[Task]``, ``[Output]``, …): what compression cut, whether the result still
overflows, and whether a heuristic token count (the book preset's ``CJK + 1.3 × words``,
``len/3``, ``len/4``) misjudged a partition against the real tokenizer.
"""

from __future__ import annotations

import re

from ctxcore.diagnostics.context import TraceView, finding, id_list, normalize_ws
from ctxcore.diagnostics.counterfactual import rerun
from ctxcore.models import Finding, Reason, Status
from ctxcore.tokens import drift as rel_drift

# --------------------------------------------------------------------------- compression_damage

_HEADER = re.compile(r"^\[(Role & Policies|Task|State|Evidence|Context|Output)\]", re.MULTILINE)
MARKER = re.compile(
    r"\[\s*(?:\.\.\.|…)[^\]\n]{0,200}\]|\[(?:truncated|cut|omitted|compressed|elided|summar)"
    r"[^\]\n]{0,60}\]|\((?:truncated|omitted)[^)\n]{0,40}\)|内容已压缩|已截断|已省略|已压缩",
    re.IGNORECASE,
)
_COMPRESS_REASONS = frozenset({Reason.TRUNCATED_BY_COMPRESS, Reason.REMOVED_BY_COMPRESS})


def sections(prompt: str) -> dict[str, str]:
    """Partition name → its text in a rendered prompt (header included)."""
    marks = [(at, f"[{m.group(1)}]") for at, m in _headers(prompt)]
    out: dict[str, str] = {}
    for k, (start, name) in enumerate(marks):
        end = marks[k + 1][0] if k + 1 < len(marks) else len(prompt)
        out.setdefault(name, prompt[start:end].rstrip("\n"))
    return out


def _headers(prompt: str) -> list[tuple[int, re.Match[str]]]:
    """``(m.start(), m) for m in _HEADER.finditer(prompt)``, tried only where a line starts
    with ``[`` (found with ``str.find``): the pattern tried at every character of a long
    prompt cost a millisecond a diagnosis."""
    out = []
    at = 0
    while True:
        if prompt.startswith("[", at):
            m = _HEADER.match(prompt, at)
            if m is not None:
                out.append((at, m))
        nl = prompt.find("\n[", at)
        if nl < 0:
            return out
        at = nl + 1


def compression_damage(v: TraceView) -> list[Finding]:
    cut_ids = [d.packet_id for d in v.decisions if d.reason in _COMPRESS_REASONS]
    truncated = [d.packet_id for d in v.decisions if d.status == Status.TRUNCATED]
    compressed = bool(cut_ids) or any("compress" in w.lower() for w in v.result.warnings)
    full: dict[str, str] | None = None
    shortened = False
    if compressed and v.config.enable_compression and v.reproduces:
        alt = rerun(v.trace, {"enable_compression": False})
        if alt is not None:
            full = sections(alt.prompt)
            shortened = len(v.prompt) < len(alt.prompt)
    out = _damaged_sections(v, compressed, full)
    over = _over_budget(v, compressed)
    if over is not None:
        out.append(over)
    cut = list(dict.fromkeys(cut_ids + truncated))
    if (cut or shortened) and not MARKER.search(v.prompt):
        what = (
            f"{id_list(cut, 3)} {'was' if len(cut) == 1 else 'were'} cut"
            if cut
            else "compression cut the prompt"
        )
        out.append(
            finding(
                "compression_damage",
                "warning",
                f"{what} without a marker in the prompt: the model cannot tell that text is "
                "missing",
                cut,
                {"cut": cut},
            )
        )
    return out


def _damaged_sections(v: TraceView, compressed: bool, full: dict[str, str] | None) -> list[Finding]:
    """The [Task] and [Output] sections of a compressed prompt missing or cut short, against
    ``full``: the sections of the prompt built without compression (None: not rebuilt)."""
    out: list[Finding] = []
    if not compressed:
        return out  # nothing cut: no section to look for (a long prompt's are not read)
    have = sections(v.prompt)
    # a prompt rendered without partitions (an imported chat) has no sections to lose
    protected = ("[Task]", "[Output]") if compressed and (have or full) else ()
    for name in protected:
        expected = full.get(name) if full is not None else None
        got = have.get(name)
        if got is None and (expected is not None or full is None):
            out.append(
                finding(
                    "compression_damage",
                    "error",
                    f"the {name} section is missing from the prompt"
                    + (" (removed by compression)" if compressed else ""),
                    evidence={"section": name, "compressed": compressed},
                )
            )
        elif (
            got is not None and expected is not None and normalize_ws(got) != normalize_ws(expected)
        ):
            out.append(
                finding(
                    "compression_damage",
                    "error",
                    f"compression cut the {name} section short "
                    f"({len(got):,} of {len(expected):,} characters left)",
                    evidence={"section": name, "kept": got, "expected": expected},
                )
            )
    return out


def _over_budget(v: TraceView, compressed: bool) -> Finding | None:
    """The prompt over the budget of a known window (after compression, if any ran)."""
    # An imported prompt's text is a readable rendering (role labels added), not what was
    # sent: its size is the totals' count. Against an unknown window there is no overflow.
    used = (
        v.result.totals.used if v.imported else max(v.result.totals.used, v.counter.count(v.prompt))
    )
    if not (used > v.budget > 0 and v.window_known):
        return None
    state = (
        "after compression"
        if compressed or v.config.enable_compression
        else ("with compression off" if v.config.enable_compression is False else "")
    )
    return finding(
        "compression_damage",
        "error",
        f"the prompt is {used:,} tokens, {used - v.budget:,} over the budget of "
        f"{v.budget:,}{' ' + state if state else ''}",
        evidence={"used": used, "budget": v.budget, "compressed": compressed},
    )


# --------------------------------------------------------------------------- estimate_drift


def estimate_drift(v: TraceView) -> list[Finding]:
    out: list[Finding] = []
    opts = v.options
    ref = v.exact_counter
    if not v.counter.exact:
        parts = sections(v.prompt) or {"(whole prompt)": v.prompt}
        rows: dict[str, dict[str, float]] = {}
        for name, text in parts.items():
            est, exact = v.counter.count(text), ref.count(text)
            dr = rel_drift(est, exact)
            if abs(est - exact) >= opts.drift_min_tokens and abs(dr) > opts.drift_threshold:
                rows[name] = {"estimate": est, "exact": exact, "drift": round(dr, 4)}
        est_all, exact_all = v.counter.count(v.prompt), ref.count(v.prompt)
        over = exact_all > v.budget >= est_all
        if rows or over:
            worst = sorted(rows.items(), key=lambda kv: -abs(kv[1]["drift"]))
            desc = "; ".join(
                f"{name} {r['estimate']:,.0f} vs {r['exact']:,.0f} ({r['drift']:+.0%})"
                for name, r in worst[:3]
            )
            msg = (
                f"{v.tokenizer} counts differ from {ref.name} by more than "
                f"{opts.drift_threshold:.0%}: {desc}"
                if rows
                else ""
            )
            if over:
                msg = (msg + "; " if msg else "") + (
                    f"the prompt fits by {v.tokenizer} ({est_all:,} ≤ {v.budget:,}) but is "
                    f"{exact_all:,} {ref.name} tokens"
                )
            out.append(
                finding(
                    "estimate_drift",
                    "error" if over else "warning",
                    msg,
                    evidence={
                        "tokenizer": v.tokenizer,
                        "reference": ref.name,
                        "partitions": rows,
                        "prompt_estimate": est_all,
                        "prompt_exact": exact_all,
                    },
                )
            )
    off: dict[str, dict[str, int]] = {}
    for p in v.input.packets:
        d = v.by_id.get(p.id)
        if not p.tokens or d is None or d.tokens_before != p.tokens:
            continue
        real = ref.count(p.content)
        if (
            abs(p.tokens - real) >= opts.drift_min_tokens
            and abs(rel_drift(p.tokens, real)) > opts.drift_threshold
        ):
            off[p.id] = {"given": p.tokens, "counted": real}
    if off:
        ids = list(off)
        first = off[ids[0]]
        out.append(
            finding(
                "estimate_drift",
                "warning",
                f"caller-supplied token counts used by the builder are off by more than "
                f"{opts.drift_threshold:.0%} for {len(ids)} packet(s) ({ids[0]}: "
                f"{first['given']:,} given, {first['counted']:,} counted by {ref.name})",
                ids,
                {"packets": off, "reference": ref.name},
            )
        )
    return out
