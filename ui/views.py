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
from typing import IO, TypedDict

import numpy as np
import numpy.typing as npt
import pandas as pd

from ctxcore.errors import InputError
from ctxcore.models import PARTITIONS, BuildResult, Config, Decision, Trace
from ctxcore.pipeline.sweep import SweepGrid
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
    """One row per decision, in the builder's order, ready for ``st.dataframe``."""
    rows = [
        {
            "rank": d.rank,
            "packet_id": d.packet_id,
            "kind": d.kind,
            "status": d.status.value,
            "reason": d.reason.value,
            "reason_text": d.reason_text,
            "partition": d.partition or "",
            "tokens_before": d.tokens_before,
            "tokens_after": d.tokens_after,
            "relevance": d.relevance,
            "recency": d.recency,
            "score": d.score,
            "budget_left": d.budget_left,
            "notes": "; ".join(d.notes),
        }
        for d in decisions
    ]
    frame = pd.DataFrame(rows, columns=DECISION_COLUMNS)
    frame["rank"] = frame["rank"].astype("Int64")
    frame["budget_left"] = frame["budget_left"].astype("Int64")
    return frame


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


def status_counts(decisions: Sequence[Decision]) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in decisions:
        out[d.status.value] = out.get(d.status.value, 0) + 1
    return out


# --------------------------------------------------------------------------- flips


def flipped(recorded: BuildResult | None, variant: BuildResult) -> pd.DataFrame:
    """Packets whose status, tokens or rank differ between two builds of the same input.

    Status flips come first, then token changes, then rank moves; a packet that only one
    of the builds considered (e.g. a per-message history packet under another preset)
    shows ``—`` on the other side.
    """
    cols = [
        "packet_id",
        "kind",
        "status_before",
        "status_now",
        "tokens_before",
        "tokens_now",
        "rank_before",
        "rank_now",
        "change",
        "reason_now",
    ]
    before = {d.packet_id: d for d in (recorded.decisions if recorded else [])}
    after = {d.packet_id: d for d in variant.decisions}
    order = list(before) + [p for p in after if p not in before]
    rows: list[dict[str, str | int | None]] = []
    for pid in order:
        b, a = before.get(pid), after.get(pid)
        either = a or b
        sb = b.status.value if b else "—"
        sa = a.status.value if a else "—"
        tb = b.tokens_after if b else None
        ta = a.tokens_after if a else None
        rb = b.rank if b else None
        ra = a.rank if a else None
        changes = []
        if sb != sa:
            changes.append("status")
        if tb != ta:
            changes.append("tokens")
        if rb != ra:
            changes.append("rank")
        if not changes:
            continue
        rows.append(
            {
                "packet_id": pid,
                "kind": either.kind if either else "",
                "status_before": sb,
                "status_now": sa,
                "tokens_before": tb,
                "tokens_now": ta,
                "rank_before": rb,
                "rank_now": ra,
                "change": ", ".join(changes),
                "reason_now": a.reason_text if a else "not a candidate in this build",
            }
        )
    frame = pd.DataFrame(rows, columns=cols)
    if not frame.empty:
        frame["_k"] = frame["change"].map(
            lambda c: 0 if c.startswith("status") else (1 if c.startswith("tokens") else 2)
        )
        frame = frame.sort_values("_k", kind="stable").drop(columns="_k")
        for c in ("tokens_before", "tokens_now", "rank_before", "rank_now"):
            frame[c] = frame[c].astype("Int64")
    return frame.reset_index(drop=True)


def decision_diff(a: Trace, b: Trace) -> pd.DataFrame:
    """Compare's decision diff: every packet whose fate differs between two traces."""
    if a.result is None or b.result is None:
        raise InputError("both traces need a build result to compare their decisions")
    frame = flipped(a.result, b.result)
    return frame.rename(
        columns={
            "status_before": "status_A",
            "status_now": "status_B",
            "tokens_before": "tokens_A",
            "tokens_now": "tokens_B",
            "rank_before": "rank_A",
            "rank_now": "rank_B",
            "reason_now": "reason_B",
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
    for c in frame.columns:
        if c != "partition":
            frame[c] = frame[c].astype("Int64")
    return frame


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

#: Knob order and widget kind for the Playground; a knob shows when the preset has it.
KNOBS: dict[str, str] = {
    "tokenizer": "choice",
    "max_tokens": "int",
    "reserve_ratio": "ratio",
    "output_reserve": "int",
    "safety_margin": "int",
    "min_relevance": "ratio",
    "relevance_weight": "ratio",
    "recency_weight": "ratio",
    "priority_weight": "ratio",
    "recency_tau_hours": "float",
    "enable_compression": "bool",
    "fill": "choice",
    "history_limit": "int",
    "degrade": "list",
}
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


# --------------------------------------------------------------------------- sweep


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
