"""Pure data preparation for the app's pages: tables, diffs, prompt segments, permalinks,
uploads.

Nothing here imports Streamlit, so each piece is tested directly; the pages only feed
widget values in and draw what comes out. Packet text stays plain strings here and is
shown by the pages with ``st.code``/``st.text``/dataframes, never as HTML.
"""

from __future__ import annotations

import difflib
import gzip
import json
import re
import shutil
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypedDict

import numpy as np
import numpy.typing as npt
import pandas as pd

from ctxcore.diagnostics import TurnFindings
from ctxcore.errors import InputError
from ctxcore.knobs import KNOBS as REGISTRY
from ctxcore.loading import config_from_obj, decode_utf8, parse_json
from ctxcore.models import PARTITIONS, BuildResult, Config, Decision, Message, Trace
from ctxcore.pipeline.sweep import SweepGrid
from ctxcore.replay import ReplayReport, TurnReport
from ctxcore.store.records import FindingRow
from ctxcore.tokens import ESTIMATORS, get_counter

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~$:&])")
#: Where GFM would autolink a bare address: a scheme before "://", "www" before ".",
#: the "@" of an e-mail address. Streamlit's markdown autolinks the text *after* escapes
#: are resolved, so backslashes cannot stop it; an invisible WORD JOINER can.
_AUTOLINK = re.compile(r"(?i)(?<=[a-z0-9])(?=://)|(?<=www)(?=\.)|(?<=@)")
WORD_JOINER = "\u2060"


def md(text: object) -> str:
    """Untrusted text made inert for Streamlit markdown (alerts, captions): every markdown
    or HTML-significant character is backslash-escaped, so no link, image or tag forms,
    and a word joiner (invisible) breaks what GFM would autolink (``https://``, ``www.``,
    ``a@b.c``). For an id on its own, ``code`` shows it exactly, with nothing added."""
    defused = _AUTOLINK.sub(WORD_JOINER, str(text))
    return _MD_SPECIAL.sub(r"\\\1", defused).replace("\n", "  \n")


def code(text: object) -> str:
    """Untrusted text as a markdown code span: shown exactly as typed (in a monospace
    chip), never a link, tag, emphasis or directive. The fence is one backtick longer
    than the longest run inside; the padding spaces are stripped again by CommonMark."""
    s = str(text).replace("\r", " ").replace("\n", " ")
    if not s.strip(" "):
        return md(s) if s else ""
    fence = "`" * (max((len(r) for r in re.findall(r"`+", s)), default=0) + 1)
    return f"{fence} {s} {fence}"


# --------------------------------------------------------------------------- decisions

DECISION_COLUMNS = [
    "rank",
    "packet_id",
    "kind",
    "status",
    "reason",
    "reason_text",
    "partition",
    "tokens_before",
    "tokens_after",
    "relevance",
    "recency",
    "score",
    "budget_left",
    "notes",
]


def decisions_frame(decisions: Sequence[Decision]) -> pd.DataFrame:
    """One row per decision, in the builder's order, ready for ``st.dataframe``. Built by
    column (lists, so pandas infers each column's type as it did from rows of dicts: 2,000
    decisions in 10 ms instead of 15)."""
    ds = list(decisions)
    if not ds:
        return pd.DataFrame(columns=DECISION_COLUMNS).astype(
            {"rank": "Int64", "budget_left": "Int64"}
        )
    cols: dict[str, Any] = {
        "rank": pd.array([d.rank for d in ds], dtype="Int64"),
        "packet_id": [d.packet_id for d in ds],
        "kind": [d.kind for d in ds],
        "status": [d.status.value for d in ds],
        "reason": [d.reason.value for d in ds],
        "reason_text": [d.reason_text for d in ds],
        "partition": [d.partition or "" for d in ds],
        "tokens_before": [d.tokens_before for d in ds],
        "tokens_after": [d.tokens_after for d in ds],
        "relevance": [d.relevance for d in ds],
        "recency": [d.recency for d in ds],
        "score": [d.score for d in ds],
        "budget_left": pd.array([d.budget_left for d in ds], dtype="Int64"),
        "notes": ["; ".join(d.notes) for d in ds],
    }
    return pd.DataFrame(cols, columns=DECISION_COLUMNS)


def filter_decisions(
    frame: pd.DataFrame,
    *,
    statuses: Iterable[str] = (),
    kinds: Iterable[str] = (),
    partitions: Iterable[str] = (),
    text: str = "",
) -> pd.DataFrame:
    """Rows matching every non-empty filter (``text`` searches id and reason, any case)."""
    mask = pd.Series(True, index=frame.index)
    statuses, kinds, partitions = list(statuses), list(kinds), list(partitions)
    if statuses:
        mask &= frame["status"].isin(statuses)
    if kinds:
        mask &= frame["kind"].isin(kinds)
    if partitions:
        mask &= frame["partition"].isin(partitions)
    if text.strip():
        needle = text.strip().lower()
        mask &= frame["packet_id"].str.lower().str.contains(needle, regex=False) | frame[
            "reason_text"
        ].str.lower().str.contains(needle, regex=False)
    return frame[mask]


#: Rows a decisions table sends at a time: a knob move re-sends the page shown, not all the
#: decisions (2,000 rows were ~510 kB per Playground move; docs/design.md, "The app").
PAGE_ROWS = 100
BUILDER_ORDER = "builder order"
CHANGED_FIRST = "changed first"
#: what a decisions table can be sorted by, over all its rows: the builder's order, the packets
#: that changed against the build compared with (Playground), or any column
DECISION_SORTS = [BUILDER_ORDER, CHANGED_FIRST, *DECISION_COLUMNS]


def sort_decisions(
    frame: pd.DataFrame,
    by: str,
    *,
    descending: bool = False,
    first: Sequence[str] = (),
) -> pd.DataFrame:
    """``frame`` (``decisions_frame`` rows, filtered or not) in the order a table shows it.

    ``BUILDER_ORDER`` keeps the frame's order; ``CHANGED_FIRST`` puts the packets of ``first``
    (in that order) before the others (in the builder's order); a column sorts every row by
    its values, stable, gaps last either way. ``descending`` reverses the order (a column's
    gaps stay last).
    """
    if by == CHANGED_FIRST:
        pos = {pid: i for i, pid in enumerate(first)}
        key = np.array([pos.get(p, len(pos)) for p in frame["packet_id"]], dtype=np.int64)
        frame = frame.iloc[np.argsort(key, kind="stable")]
    elif by in frame.columns:
        return frame.sort_values(by, ascending=not descending, kind="stable", na_position="last")
    return frame.iloc[::-1] if descending else frame


def page_count(rows: int, per_page: int = PAGE_ROWS) -> int:
    """Pages of ``per_page`` rows that ``rows`` rows take (at least one, shown empty)."""
    return max(1, -(-rows // per_page))


def page_of(frame: pd.DataFrame, page: int, per_page: int = PAGE_ROWS) -> pd.DataFrame:
    """Rows of page ``page`` (1-based; a page past the end is the last one)."""
    page = min(max(page, 1), page_count(len(frame), per_page))
    return frame.iloc[(page - 1) * per_page : page * per_page]


def status_counts(decisions: Sequence[Decision]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in decisions:
        out[d.status.value] = out.get(d.status.value, 0) + 1
    return out


# --------------------------------------------------------------------------- findings

#: what was found first (the message fits at 1024 px), then where: session, packets, trace
FINDING_COLUMNS = ["turn", "severity", "detector", "message", "session", "packets", "trace_id"]
#: packet ids shown in a findings row; the rest are counted ("… 3 more")
FINDING_PACKETS = 4


def _packets_cell(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:FINDING_PACKETS])
    more = len(ids) - FINDING_PACKETS
    return f"{shown} … {more:,} more" if more > 0 else shown


def findings_frame(rows: Iterable[FindingRow]) -> pd.DataFrame:
    """One row per finding, in the order given, naming the turn it belongs to: what the
    Traces page's findings view shows (each row opens its turn in Inspect)."""
    return pd.DataFrame(
        [
            {
                "session": r.session_id,
                "turn": r.turn,
                "severity": r.severity,
                "detector": r.detector,
                "message": r.message,
                "packets": _packets_cell(r.packet_ids),
                "trace_id": r.trace_id,
            }
            for r in rows
        ],
        columns=FINDING_COLUMNS,
    )


def session_findings_frame(session_id: str, turns: Iterable[TurnFindings]) -> pd.DataFrame:
    """The findings of one session's turns, latest turn first (the Timeline's list)."""
    return pd.DataFrame(
        [
            {
                "session": session_id,
                "turn": t.turn,
                "severity": f.severity,
                "detector": f.detector,
                "message": f.message,
                "packets": _packets_cell(f.packet_ids),
                "trace_id": t.trace_id,
            }
            for t in sorted(turns, key=lambda t: t.turn, reverse=True)
            for f in t.findings
        ],
        columns=FINDING_COLUMNS,
    )


# --------------------------------------------------------------------------- flips


_HISTORY_K = re.compile(r"^builder:history:(\d+)$")
_HISTORY_POS = re.compile(r"^history:(\d+)$")


def history_keys(decisions: Sequence[Decision], history: Sequence[Message]) -> dict[str, str]:
    """Packet id → the history message it holds, for every history candidate of one build.

    Presets name the same message differently: by its own id (``msg-1``), by position in
    the input (``history:3``) or counted from the oldest message the builder considered
    (``builder:history:K``); the key is the message's id, else ``history[pos]``. The one
    ``builder:history`` packet of the hello-agents preset holds many and maps to none.
    """
    names = [m.id or f"history[{k}]" for k, m in enumerate(history)]
    by_id = {m.id: k for k, m in enumerate(history) if m.id}
    ks = [int(m.group(1)) for d in decisions if (m := _HISTORY_K.match(d.packet_id))]
    # K counts from the oldest message considered: the (max K + 1)-th from the end.
    offset = len(history) - (max(ks) + 1) if ks else 0
    out: dict[str, str] = {}
    for d in decisions:
        pos: int | None = by_id.get(d.packet_id)
        if pos is None and (m := _HISTORY_K.match(d.packet_id)):
            pos = offset + int(m.group(1))
        elif pos is None and (m := _HISTORY_POS.match(d.packet_id)):
            pos = int(m.group(1))
        if pos is not None and 0 <= pos < len(history):
            out[d.packet_id] = names[pos]
    return out


FLIP_COLUMNS = [
    "packet_id",
    "status_before",
    "status_now",
    "reason_before",
    "reason_now",
    "change",
    "kind",
    "tokens_before",
    "tokens_now",
    "rank_before",
    "rank_now",
    "id_now",
]
NOT_CANDIDATE = "not a candidate in this build"


def _history_aliases(
    before: Mapping[str, Decision], after: Mapping[str, Decision], history: Sequence[Message]
) -> dict[str, str]:
    """Before id → after id, for packets the two builds name differently (a history message's
    id in one, a builder id in the other) matched through the history message they hold.
    Only ids one side lacks can be matched: none when both builds name packets alike."""
    if not history or before.keys() <= after.keys() or after.keys() <= before.keys():
        return {}
    kb = history_keys(list(before.values()), history)
    ka = history_keys(list(after.values()), history)
    after_by_key = {k: pid for pid, k in ka.items() if pid not in before}
    return {pid: after_by_key[k] for pid, k in kb.items() if pid not in after and k in after_by_key}


def _flip_row(
    pid: str, now_id: str, b: Decision | None, a: Decision | None
) -> dict[str, str | int | None] | None:
    """One packet's row of ``flipped``: its status, reason, tokens and rank before and now,
    and what changed; None when nothing did. A side where the packet was no candidate shows
    ``—`` and ``NOT_CANDIDATE``."""
    sb = b.status.value if b else "—"
    sa = a.status.value if a else "—"
    tb = b.tokens_after if b else None
    ta = a.tokens_after if a else None
    rb = b.rank if b else None
    ra = a.rank if a else None
    changes = [
        what for what, x, y in (("status", sb, sa), ("tokens", tb, ta), ("rank", rb, ra)) if x != y
    ]
    if not changes:
        return None
    either = a or b
    return {
        "packet_id": pid,
        "status_before": sb,
        "status_now": sa,
        "reason_before": b.reason_text if b else NOT_CANDIDATE,
        "reason_now": a.reason_text if a else NOT_CANDIDATE,
        "change": ", ".join(changes),
        "kind": either.kind if either else "",
        "tokens_before": tb,
        "tokens_now": ta,
        "rank_before": rb,
        "rank_now": ra,
        "id_now": now_id if now_id != pid else "",
    }


def flipped(
    recorded: BuildResult | None, variant: BuildResult, history: Sequence[Message] = ()
) -> pd.DataFrame:
    """Packets whose status, tokens or rank differ between two builds of the same input.

    Status flips come first, then token changes, then rank moves. Reasons before and now
    sit next to the statuses, where a narrow table still shows them. A packet one build
    names by a history message's id and the other by a builder id (another preset) is
    matched through ``history`` and shown once, with the other name in ``id_now``; a
    packet only one build considered shows ``—`` and "not a candidate" on the other side.
    """
    before = {d.packet_id: d for d in (recorded.decisions if recorded else [])}
    after = {d.packet_id: d for d in variant.decisions}
    alias = _history_aliases(before, after, history)
    taken = set(alias.values())
    order = list(before) + [p for p in after if p not in before and p not in taken]
    rows: list[dict[str, str | int | None]] = []
    for pid in order:
        now_id = alias.get(pid, pid)
        b, a = before.get(pid), after.get(now_id)
        if (
            b is not None
            and a is not None
            and b.status is a.status
            and b.tokens_after == a.tokens_after
            and b.rank == a.rank
        ):
            continue  # unchanged: most packets of a move
        row = _flip_row(pid, now_id, b, a)
        if row is not None:
            rows.append(row)
    frame = pd.DataFrame(rows, columns=FLIP_COLUMNS)
    if not frame.empty:
        frame["_k"] = frame["change"].map(
            lambda c: 0 if c.startswith("status") else (1 if c.startswith("tokens") else 2)
        )
        frame = frame.sort_values("_k", kind="stable").drop(columns="_k")
    frame = shown_ints(frame, ("tokens_before", "tokens_now", "rank_before", "rank_now"))
    return frame.reset_index(drop=True)


def shown_ints(frame: pd.DataFrame, columns: Iterable[str]) -> pd.DataFrame:
    """Integer columns with gaps made text for a small display table: ``1,234`` for a
    number and ``—`` where there is none (a dataframe draws a missing value as "None")."""
    out = frame.copy()
    for c in columns:
        out[c] = [
            "—" if v is None or v is pd.NA or (isinstance(v, float) and v != v) else f"{int(v):,}"
            for v in out[c]
        ]
    return out


def flip_summary(flips: pd.DataFrame, named: int = 3) -> str | None:
    """One markdown line under the window bar: how many packets flipped, to what, and which
    (the first ``named`` of each, ids as code spans)."""
    if flips.empty:
        return None
    moved = flips[flips["status_before"] != flips["status_now"]]
    to: dict[str, list[str]] = {}
    for pid, s in zip(moved["packet_id"], moved["status_now"], strict=True):
        to.setdefault(s, []).append(str(pid))
    parts = []
    for s, ids in to.items():
        shown = ", ".join(code(i) for i in ids[:named])
        more = f" +{len(ids) - named:,}" if len(ids) > named else ""
        parts.append(f"{len(ids):,} now {s if s != '—' else 'not a candidate'} ({shown}{more})")
    others = len(flips) - len(moved)
    if others:
        parts.append(f"{others:,} with other tokens or rank")
    return f"flipped ({len(flips):,}): " + ", ".join(parts)


#: the weights of the score: they only order the candidates (``Knob.weight``)
_WEIGHTS = tuple(k.name for k in REGISTRY if k.weight)
_ROOM = frozenset({"NO_ROOM", "AFTER_BREAK", "PARTITION_FULL", "NOT_IN_OPTIMAL_SET", "DEGRADED"})


def changed_knobs(before: Config, now: Config) -> list[str]:
    """The config fields that differ between two configs, in the Playground's knob order."""
    a, b = before.model_dump(), now.model_dump()
    names = [k for k in KNOBS if a.get(k) != b.get(k)]
    names += [k for k in a if k not in KNOBS and a.get(k) != b.get(k)]
    return names


def no_effect_note(
    before_cfg: Config, now_cfg: Config, before: BuildResult, now: BuildResult
) -> str | None:
    """Why the knobs that moved changed nothing on this input (None when nothing moved).

    The Playground shows it under an empty "Flipped" table: a slider that does nothing
    is a question ("did it apply?") unless the page says what it would have acted on.
    """
    moved = changed_knobs(before_cfg, now_cfg)
    if not moved:
        return None
    counts = status_counts(before.decisions)
    room = sum(1 for d in before.decisions if d.reason.value in _ROOM)
    total = len(before.decisions)
    notes: list[str] = []
    if set(moved) <= set(_WEIGHTS):
        if room == 0:
            notes.append(
                "the weights only order the candidates, and every candidate that passed the "
                f"filters already fits ({counts.get('kept', 0):,} of {total:,} kept, none "
                "left out for lack of room), so a new order keeps the same packets"
            )
        else:
            notes.append(
                "the weights only reorder the candidates; the new order still leaves the "
                f"same {room:,} packet(s) out for lack of room"
            )
    elif "max_tokens" in moved and room == 0:
        notes.append(
            "nothing was left out for lack of room, so a different budget changes nothing "
            f"that is kept ({before.totals.used:,} tokens used)"
        )
    elif "min_relevance" in moved:
        lo = min(before_cfg.min_relevance or 0.0, now_cfg.min_relevance or 0.0)
        hi = max(before_cfg.min_relevance or 0.0, now_cfg.min_relevance or 0.0)
        between = sum(
            1 for d in before.decisions if d.relevance is not None and lo <= d.relevance < hi
        )
        if between == 0:
            notes.append(
                f"no candidate's relevance lies between {lo:.2f} and {hi:.2f}, so the filter "
                "lets the same packets through"
            )
    if not notes:
        notes.append("no packet's status, tokens or rank depends on it for this input")
    return f"{', '.join(moved)} changed; " + "; ".join(notes) + "."


def decision_diff(a: Trace, b: Trace) -> pd.DataFrame:
    """Compare's decision diff: every packet whose fate differs between two traces."""
    if a.result is None or b.result is None:
        raise InputError("both traces need a build result to compare their decisions")
    history = a.input.history if a.input.history == b.input.history else ()
    frame = flipped(a.result, b.result, history)
    return frame.rename(
        columns={
            "status_before": "status_A",
            "status_now": "status_B",
            "tokens_before": "tokens_A",
            "tokens_now": "tokens_B",
            "rank_before": "rank_A",
            "rank_now": "rank_B",
            "reason_before": "reason_A",
            "reason_now": "reason_B",
            "id_now": "id_B",
        }
    )


def prompt_diff(a: str, b: str, name_a: str = "A", name_b: str = "B", context: int = 2) -> str:
    """A unified diff of two prompts as plain text (empty when identical)."""
    lines = difflib.unified_diff(
        a.splitlines(), b.splitlines(), fromfile=name_a, tofile=name_b, lineterm="", n=context
    )
    return "\n".join(lines)


def budgets_frame(traces: Mapping[str, Trace]) -> pd.DataFrame:
    """Per partition, budget and used for each named trace (Compare's budget table)."""
    rows: dict[str, dict[str, str | int | None]] = {}
    for label, t in traces.items():
        if t.result is None:
            continue
        for p in t.result.partitions:
            row = rows.setdefault(p.name, {"partition": p.name})
            row[f"budget_{label}"] = p.budget
            row[f"used_{label}"] = p.used
        tot = rows.setdefault("total", {"partition": "total"})
        tot[f"budget_{label}"] = t.result.totals.available
        tot[f"used_{label}"] = t.result.totals.used
    frame = pd.DataFrame(list(rows.values()))
    # a partition without a cap of its own shows "—", never "None"
    return shown_ints(frame, [c for c in frame.columns if c != "partition"])


# --------------------------------------------------------------------------- prompt

_HEADER = re.compile(r"^\[(Role & Policies|Task|State|Evidence|Context|Output)\]\s*$")
#: Markers builders leave where they cut or summarized: ctxscope's "[… 1,234 tokens of
#: tool:x cut; …]" / "… summarized; …]", the tutorial's compress marker, summaries' "… omitted …".
CUT_MARKERS = ("[… ", "[... 内容已压缩 ...]", " omitted …")


@dataclass(frozen=True)
class PromptSegment:
    partition: str  # "[Task]" etc., or "(before first header)"
    text: str
    start_line: int  # 1-based line number in the prompt
    cuts: tuple[int, ...]  # 1-based prompt line numbers holding a cut marker


def prompt_segments(prompt: str) -> list[PromptSegment]:
    """Split a prompt at partition headers (``[Task]`` on a line of its own)."""
    lines = prompt.split("\n")
    segs: list[PromptSegment] = []
    name = "(before first header)"
    buf: list[str] = []
    start = 1
    cuts: list[int] = []
    for i, line in enumerate(lines, start=1):
        if _HEADER.match(line):
            if buf and any(s.strip() for s in buf):
                segs.append(PromptSegment(name, "\n".join(buf), start, tuple(cuts)))
            name, buf, start, cuts = line.strip(), [line], i, []
            continue
        buf.append(line)
        if any(m in line for m in CUT_MARKERS):
            cuts.append(i)
    if buf and (any(s.strip() for s in buf) or not segs):
        segs.append(PromptSegment(name, "\n".join(buf), start, tuple(cuts)))
    return segs


def marked_prompt(prompt: str) -> str:
    """The prompt as plain text with a ruler line before each partition and at each cut.

    Meant for ``st.code``: the marks are ASCII lines that cannot be confused with
    packet content because they carry the line number.
    """
    out: list[str] = []
    for seg in prompt_segments(prompt):
        out.append(f"──────── {seg.partition} · line {seg.start_line} " + "─" * 20)
        for k, line in enumerate(seg.text.split("\n")):
            n = seg.start_line + k
            out.append(line)
            if n in seg.cuts:
                out.append(f"✂──────── cut/summary above (line {n}) " + "─" * 14)
    return "\n".join(out)


class TokenRow(TypedDict):
    """One partition of a prompt as ``figures.tokenizer_drift`` draws it."""

    partition: str
    exact: int  # the real tokenizer's count
    estimates: dict[str, int]  # estimator name -> its count


def partition_token_rows(prompt: str, tokenizer: str) -> list[TokenRow]:
    """Per partition of the prompt: the real count and every seed estimator's count."""
    exact_name = tokenizer if tokenizer in ("cl100k_base", "o200k_base") else "cl100k_base"
    counter = get_counter(exact_name)
    rows: list[TokenRow] = []
    for seg in prompt_segments(prompt):
        rows.append(
            {
                "partition": seg.partition,
                "exact": counter.count(seg.text),
                "estimates": {name: fn(seg.text) for name, fn in ESTIMATORS.items()},
            }
        )
    return rows


# --------------------------------------------------------------------------- config

#: Knob order and kind for the Playground and its links, from ``ctxcore.knobs`` (the
#: per-partition shares have a key per partition, ``PARTITION_SLUGS``); a knob shows when
#: the preset has it.
KNOBS: dict[str, str] = {k.name: k.kind for k in REGISTRY if k.kind != "shares"}
PARTITION_SLUGS: dict[str, str] = {
    p: "pb_" + re.sub(r"[^a-z]+", "_", p.lower()).strip("_") for p in PARTITIONS
}
_SLUG_PARTITION = {v: k for k, v in PARTITION_SLUGS.items()}


def config_to_params(cfg: Config) -> dict[str, str]:
    """Every non-default-free knob of a config as flat query parameters."""
    out: dict[str, str] = {"preset": cfg.preset}
    data = cfg.model_dump(exclude_none=True)
    for name in KNOBS:
        if name not in data:
            continue
        v = data[name]
        if isinstance(v, bool):
            out[name] = "true" if v else "false"
        elif isinstance(v, list):
            out[name] = ",".join(str(x) for x in v)
        else:
            out[name] = f"{v:g}" if isinstance(v, float) else str(v)
    for part, ratio in (cfg.partition_budgets or {}).items():
        out[PARTITION_SLUGS[part]] = f"{ratio:g}"
    return out


def params_to_config_dict(params: Mapping[str, str]) -> dict[str, object]:
    """The inverse of ``config_to_params``; unknown keys are ignored (they belong to pages).

    Raises ``InputError`` naming the parameter when a value does not parse.
    """
    out: dict[str, object] = {}
    if "preset" in params:
        out["preset"] = params["preset"]
    for name, kind in KNOBS.items():
        if name not in params:
            continue
        raw = str(params[name])
        try:
            if kind == "int":
                out[name] = int(float(raw))
            elif kind in ("ratio", "float"):
                out[name] = float(raw)
            elif kind == "bool":
                if raw.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(raw)
                out[name] = raw.lower() in ("true", "1")
            elif kind == "list":
                out[name] = [s for s in raw.split(",") if s]
            else:
                out[name] = raw
        except ValueError as exc:
            raise InputError(
                f"link parameter {name}={raw!r} is not a valid {kind}; fix or drop it from the URL"
            ) from exc
    budgets = {}
    for key, raw in params.items():
        if key in _SLUG_PARTITION:
            try:
                budgets[_SLUG_PARTITION[key]] = float(raw)
            except ValueError as exc:
                raise InputError(
                    f"link parameter {key}={raw!r} is not a number; fix or drop it from the URL"
                ) from exc
    if budgets:
        out["partition_budgets"] = budgets
    return out


_TURN_WORDS = re.compile(r"\bturn\s*#?\s*(\d+)\b")


def find_traces(items: Sequence[tuple[str, int, str]], query: str) -> list[str]:
    """The ids of ``items`` (trace id, turn, label as the pickers show it) that ``query``
    finds, best first: "turn 15" is turn 15 and no other (not 150, not 12); a bare number
    is that turn first, then any label holding it (an id, a count); every other word must
    appear in the label (any case). Items otherwise keep their order."""
    q = query.strip().lower()
    if not q:
        return [tid for tid, _, _ in items]
    turns = {int(n) for n in _TURN_WORDS.findall(q)}
    words = _TURN_WORDS.sub(" ", q).split()
    found: list[tuple[int, int, str]] = []
    for pos, (tid, turn, label) in enumerate(items):
        if turns and turns != {turn}:
            continue
        low, rank = label.lower(), 0
        for w in words:
            if w.isdigit() and int(w) == turn:
                continue  # the turn itself: the best match
            if w not in low:
                break
            rank += 1
        else:
            found.append((rank, pos, tid))
    return [tid for _, _, tid in sorted(found)]


#: a config file is a few hundred bytes; anything much bigger is not one
CONFIG_FILE_BYTES = 64 * 1024


def config_from_file(data: bytes, name: str, recorded: Config) -> Config:
    """A config file (``ctxscope tune -o FILE``, or any file ``ctxscope build --config``
    reads) applied over a trace's recorded settings, as ``build --config`` applies it: the
    same parsing and the same model, so a file one takes the other takes. A bad file is one
    ``InputError`` naming the file and the field."""
    name = Path(name).name or "config file"
    if len(data) > CONFIG_FILE_BYTES:
        raise InputError(
            f"{name}: {len(data):,} bytes is not a config file (they are under "
            f"{CONFIG_FILE_BYTES // 1024} KB: the knobs of one preset as a JSON object)"
        )
    patch = config_from_obj(parse_json(decode_utf8(data, name), name), name)
    base = recorded.model_dump(exclude_none=True)
    base.update(patch.model_dump(exclude_none=True))
    return config_from_obj(base, name)


def config_json(cfg: Config) -> str:
    """A canonical string of a config, used as a cache key."""
    return json.dumps(cfg.model_dump(mode="json"), sort_keys=True)


def trace_summary(t: Trace) -> dict[str, int | None]:
    """The few numbers shown as metrics at the top of Inspect/Playground."""
    if t.result is None:
        return {"budget": None, "used": None, "kept": 0, "dropped": 0}
    counts = status_counts(t.result.decisions)
    return {
        "budget": t.result.totals.available,
        "used": t.result.totals.used,
        "kept": counts.get("kept", 0) + counts.get("truncated", 0),
        "summarized": counts.get("summarized", 0),
        "dropped": counts.get("dropped", 0) + counts.get("filtered", 0),
        "not_rendered": counts.get("not_rendered", 0),
    }


# --------------------------------------------------------------------------- replay


def replay_status_rows(traces: Sequence[Trace]) -> list[dict[str, Any]]:
    """What ``figures.timeline_heatmap`` reads, from builds (a replay's variants are not
    stored, so the store's ``session_statuses`` cannot give them)."""
    rows = []
    for t in traces:
        assert t.result is not None, "a replay's sides are builds"
        for d in t.result.decisions:
            rows.append(
                {
                    "turn": t.turn,
                    "packet_id": d.packet_id,
                    "kind": d.kind,
                    "status": d.status.value,
                    "reason": d.reason.value,
                    "tokens_after": d.tokens_after,
                }
            )
    return rows


def replay_side(report: ReplayReport, recorded: Mapping[str, Trace], side: str) -> list[Trace]:
    """One side of a replay (``side``: ``before_id`` or ``after_id``), turn by turn: the
    recorded trace where that side is the recording, else the variant the report kept."""
    out = []
    for turn in report.turns:
        tid = getattr(turn, side)
        t = recorded.get(tid) or report.variant(tid)
        if t is not None:
            out.append(t)
    return out


def replay_losses(t: TurnReport) -> str:
    """A turn's flips that lost something, counted by severity (``2 error, 1 info``)."""
    counts = {s: len([f for f in t.flips if f.loss == s]) for s in ("error", "warning", "info")}
    return ", ".join(f"{n} {s}" for s, n in counts.items() if n)


REPLAY_CHANGED_COLUMNS = [
    "turn",
    "used before",
    "used after",
    "Δ tokens",
    "budget",
    "flips",
    "losses",
    "lost",
    "findings +/−",
]


def replay_changed_frame(turns: Sequence[TurnReport]) -> pd.DataFrame:
    """The turns that changed, one row each: tokens and budget on both sides, the flips,
    what was lost (warning and above, by packet id) and the findings added and cleared."""
    return pd.DataFrame(
        [
            {
                "turn": t.turn,
                "used before": t.used_before,
                "used after": t.used_after,
                "Δ tokens": t.tokens_delta,
                "budget": f"{t.budget_before} → {t.budget_after}",
                "flips": len(t.flips),
                "losses": replay_losses(t),
                "lost": ", ".join(f.packet_id for f in t.flips if f.loss in ("error", "warning")),
                "findings +/−": f"+{len(t.findings_added)} −{len(t.findings_cleared)}",
            }
            for t in turns
        ],
        columns=REPLAY_CHANGED_COLUMNS,
    )


def replay_described(label: str) -> str:
    """A side of the replay (``ReplayReport.before``/``after``) in words."""
    if label == "recorded":
        return "the recording"
    patch = json.loads(label)
    if not patch:
        return "the recorded settings (no knob set)"
    return ", ".join(f"{k} {v}" for k, v in patch.items())


def replay_nothing_changed(report: ReplayReport) -> str:
    """What was compared, for a replay where no turn changed (markdown)."""
    n = len(report.turns)
    said = (
        f"**Nothing changed**: all {n} turn(s) build the same context with "
        f"{replay_described(report.after)} as with {replay_described(report.before)} "
        f"(compared: each packet's status and the tokens used)."
    )
    if report.findings_compared:
        same = len(report.findings_only_turns)
        said += (
            f" The findings differ at {same} turn(s): see *Findings by detector*."
            if same
            else " The findings are the same too."
        )
    return said


def replay_changed_caption(report: ReplayReport, changed_means: str) -> str:
    """The line over a replay's timelines: what "changed" means, and the turns whose findings
    alone differ."""
    only = len(report.findings_only_turns)
    more = (
        f" {only} more turn(s) build the same context and differ in their findings only."
        if only
        else ""
    )
    return f"Changed: {changed_means}.{more}"


def imported_builders(traces: Iterable[Trace], prefix: str) -> list[str]:
    """The builders (``<prefix>…``) of the traces an import made, sorted, once each: their
    recording is what another agent sent, not a build of a ctxscope preset."""
    return sorted({t.builder.name for t in traces if t.builder.name.startswith(prefix)})


def replay_errors_message(report: ReplayReport) -> str:
    """How many turns could not be compared, and how many fail with the new settings only."""
    failed = report.new_failures
    said = f"{len(report.errors)} turn(s) could not be compared"
    if failed:
        said += (
            f"; {len(failed)} of them build only with the settings before: the new settings "
            "lose everything those turns kept"
        )
    return said


def replay_errors_frame(report: ReplayReport) -> pd.DataFrame:
    """The turns a replay could not compare: the side that failed and why."""
    return pd.DataFrame(
        {
            "turn": [e.turn for e in report.errors],
            "side that failed": [e.side for e in report.errors],
            "why": [e.message for e in report.errors],
            "trace id": [e.trace_id for e in report.errors],
        }
    )


def replay_tokens_frame(report: ReplayReport) -> pd.DataFrame:
    """Tokens used per turn on both sides, indexed by turn (the bar chart's data)."""
    return pd.DataFrame(
        {
            "before": [t.used_before for t in report.turns],
            "after": [t.used_after for t in report.turns],
        },
        index=pd.Index([t.turn for t in report.turns], name="turn"),
    )


def _turn_or_never(turn: int | None) -> str:
    return "never" if turn is None else str(turn)


def first_lost_rows(report: ReplayReport) -> list[dict[str, str]]:
    """The items whose first lost turn moved between the two sides: the item (cut to 120
    characters), its kind and the turn it is first lost before and after."""
    return [
        {
            "item": x.item[:120],
            "kind": x.kind,
            "before": _turn_or_never(x.before_turn),
            "after": _turn_or_never(x.after_turn),
        }
        for x in report.first_lost
        if x.before_turn != x.after_turn
    ]


def replay_findings_rows(report: ReplayReport) -> list[dict[str, str | int]]:
    """Findings per detector on both sides (``ReplayReport.findings_compared`` says whether
    they were compared)."""
    return [
        {
            "detector": d,
            "before": report.findings_before.get(d, 0),
            "after": report.findings_after.get(d, 0),
        }
        for d in sorted({*report.findings_before, *report.findings_after})
    ]


# --------------------------------------------------------------------------- sweep


def sweep_y_default(params: Sequence[str], x_name: str) -> str:
    """The knob the sweep's y axis starts on: ``min_relevance`` (the filter, where a fill
    changes most) unless x is it, else the first knob that is not x's."""
    if "min_relevance" in params and x_name != "min_relevance":
        return "min_relevance"
    return next(p for p in params if p != x_name)


def _grid(
    values: npt.NDArray[np.int64] | npt.NDArray[np.bool_], nx: int, ny: int
) -> list[list[float | None]]:
    rows = [list(r) for r in values] if values is not None else []
    if len(rows) == nx and nx != ny and all(len(r) == ny for r in rows):
        rows = [list(col) for col in zip(*rows, strict=True)]  # (x, y) -> (y, x)
    return [[None if v is None else float(v) for v in r] for r in rows]


def sweep_arrays(
    grid: SweepGrid,
) -> tuple[list[list[float | None]], list[list[float | None]], list[list[float | None]] | None]:
    """Tokens used, items kept and watch-in as ``z[y][x]`` lists for the heatmaps."""
    nx, ny = len(grid.x_values), len(grid.y_values)
    watch = grid.watch_in
    return (
        _grid(grid.tokens_used, nx, ny),
        _grid(grid.items_kept, nx, ny),
        _grid(watch, nx, ny) if watch is not None else None,
    )


# --------------------------------------------------------------------------- files

_UNSAFE_FILE_CHARS = re.compile(r"[^\w.-]+")


def file_stem(name: str, limit: int = 80) -> str:
    """A trace or session id made a download's file name: letters (any script), digits,
    ``.``, ``-`` and ``_`` only, so an id like ``https://x/../y`` names no folder."""
    stem = _UNSAFE_FILE_CHARS.sub("_", name).strip("._")[:limit]
    return stem or "ctxscope"


# --------------------------------------------------------------------------- uploads

_CHUNK = 1 << 20


def saved_upload(data: IO[bytes], name: str, folder: Path, limit_bytes: int) -> Path:
    """An uploaded file written into ``folder`` for the importer, a ``.gz`` unpacked.

    Unpacking stops with an ``InputError`` once more than ``limit_bytes`` came out; a
    gzip inside the gzip is not unpacked again (its name loses every ``.gz``).
    """
    name = Path(name).name  # the browser's name: no folder part, never "." or ".."
    if name in ("", ".", ".."):
        name = "upload"
    data.seek(0)
    if not name.endswith(".gz"):
        path = folder / name
        with path.open("wb") as out:
            shutil.copyfileobj(data, out, _CHUNK)
        return path
    stem = name
    while stem.endswith(".gz"):
        stem = stem[: -len(".gz")]
    path = folder / (stem or "upload")
    total = 0
    try:
        with gzip.GzipFile(fileobj=data, mode="rb") as src, path.open("wb") as out:
            while chunk := src.read(_CHUNK):
                total += len(chunk)
                if total > limit_bytes:
                    raise InputError(
                        f"{name} unpacks to more than {limit_bytes // (1 << 20):,} MB, more "
                        "than the app imports; import it with ctxscope import (or ingest) "
                        "on the command line"
                    )
                out.write(chunk)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{name}: not a valid gzip file ({exc})") from exc
    return path
