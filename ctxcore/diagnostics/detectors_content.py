"""Detectors about what the packets say: repeats, stale plans, labels, injection, CJK, summaries.

These read the text of the packets that reached the prompt (resolved through
``TraceView.contents``, so builder-made history packets count too). They never act on
what they find: injection-like text is reported, not stripped, and the finding quotes it
as data for the UI to show as plain text.
"""

from __future__ import annotations

import functools
import re
from datetime import datetime

from ctxcore.diagnostics.context import (
    IN_PROMPT,
    LOST,
    TRUSTED_KINDS,
    SessionFolds,
    TraceView,
    finding,
    fold_over,
    id_list,
    normalize_ws,
)
from ctxcore.diagnostics.text import (
    Memo,
    cjk_relevance,
    cjk_share,
    cjk_terms,
    identifiers,
    injection_hits,
    lowered_ws,
    normalized_ws,
    session_near_duplicates,
    shingles,
)
from ctxcore.models import Decision, Finding, Reason, Severity, Status, Trace
from ctxcore.pipeline.common import HISTORY_ID, INSTRUCTIONS_ID
from ctxcore.scoring import bm25_relevance

# --------------------------------------------------------------------------- stale_or_repeated

_PLAN_ID = re.compile(r"(?:^|[:/_\-.])(?:plan|todo|todos)(?:$|[:/_\-.\d])", re.IGNORECASE)
_PLAN_HEAD = re.compile(r"^\s*(?:#+\s*)?(?:plan|todo|next steps|计划|待办)\b", re.IGNORECASE)
#: a line of tool output that reports a failure (not code that merely says "traceback")
_ERROR_LINE = re.compile(
    r"Traceback \(most recent call last\)"
    r"|\b[A-Z]\w*(?:Error|Exception|Failure)\b(?::|\s*$)"
    r"|(?<![.\w])(?:ERROR|FAILED|FAIL)\b(?!\s*=)"
    r"|^\s*(?:E\s{2,}\S|error(?:\[\w+\])?:|fatal:|panic:|npm ERR!)"
    r"|\berror TS\d+|\bexit (?:code|status) [1-9]|(?:错误|失败|异常)[:：]",
    re.MULTILINE,
)


def _is_plan(v: TraceView, packet_id: str) -> bool:
    kind = v.kind(packet_id)
    if kind in ("plan", "todo"):
        return True
    if kind not in ("state", "note", "memory", "task_state", "todo_list"):
        return False
    return bool(_PLAN_ID.search(packet_id) or _PLAN_HEAD.match(v.content(packet_id)))


def stale_or_repeated(v: TraceView) -> list[Finding]:
    out: list[Finding] = []
    ids = [
        d.packet_id
        for d in v.decisions
        if d.status in IN_PROMPT
        and d.tokens_after >= v.options.duplicate_min_tokens
        and d.packet_id != HISTORY_ID  # the whole-history packet overlaps its own messages
    ]
    sets = [shingles(v.content(i)) for i in ids]
    parent = list(range(len(ids)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    # the session's calls hold the same packets again: their pairs were found at an
    # earlier call (``text.SessionNearDuplicates``)
    pairs = session_near_duplicates(v.trace.session_id, sets, v.options.near_duplicate_jaccard)
    for i, j, _ in pairs:
        ri, rj = root(i), root(j)
        if ri != rj:
            parent[rj] = ri
    groups: dict[int, list[int]] = {}
    for i in range(len(ids)):
        groups.setdefault(root(i), []).append(i)
    least: dict[int, float] = {}  # each group's lowest pair (one pass, not one a group)
    for i, _, s in pairs:
        r = root(i)
        least[r] = min(least.get(r, s), s)
    for r, members in groups.items():
        if len(members) < 2:
            continue
        sim = least[r]
        gids = [ids[k] for k in members]
        toks = [v.by_id[g].tokens_after for g in gids]
        identical = len({normalized_ws(v.content(g)) for g in gids}) == 1
        sim = 1.0 if identical else sim
        what = "the same content" if identical else f"near-identical content (Jaccard ≥ {sim:.2f})"
        out.append(
            finding(
                "stale_or_repeated",
                "warning",
                f"{id_list(gids)} carry {what}: {sum(toks) - max(toks):,} tokens spent twice",
                gids,
                {
                    "identical": identical,
                    "jaccard": round(sim, 4),
                    "tokens": dict(zip(gids, toks, strict=True)),
                },
            )
        )
    out.extend(_stale_plans(v))
    out.extend(_carried_errors(v))
    return out


def _stale_plans(v: TraceView) -> list[Finding]:
    plans = [d for d in v.decisions if d.status in IN_PROMPT and _is_plan(v, d.packet_id)]
    if len(plans) < 2:
        return []

    def when(pid: str) -> tuple[int, datetime | None, int]:
        p = v.packets.get(pid)
        ts = p.timestamp if p is not None else None
        order = next(i for i, d in enumerate(v.decisions) if d.packet_id == pid)
        return (0 if ts is None else 1, ts, order)

    ordered = sorted((d.packet_id for d in plans), key=lambda pid: _sort_key(when(pid)))
    newest = ordered[-1]
    old = ordered[:-1]
    return [
        finding(
            "stale_or_repeated",
            "warning",
            f"an older plan ({id_list(old, 3)}) sits next to the newer {newest}: the model "
            "may follow steps that were already replaced",
            [*old, newest],
            {"newest": newest, "older": old},
        )
    ]


def _sort_key(k: tuple[int, datetime | None, int]) -> tuple[int, float, int]:
    has, ts, order = k
    return (has, ts.timestamp() if ts is not None else 0.0, order)


def _error_lines_of(text: str) -> tuple[str, ...]:
    return tuple(
        [
            normalize_ws(line).lower()
            for line in text.splitlines()
            if _ERROR_LINE.search(line) and len(line.strip()) >= 12
        ][:20]
    )


_error_lines = Memo(_error_lines_of)


#: per normalized prompt: which error-line sets it holds in full (every later turn of a
#: session asks again about the same packets' lines in the same earlier prompts); the dict
#: is this module's own and never handed out
_HOLDS: Memo[str, dict[tuple[str, ...], bool]] = Memo(lambda _prompt: {})


def _holds(t: Trace, lines: tuple[str, ...]) -> bool:
    """Does ``t``'s prompt hold every one of ``lines`` (remembered per prompt, ``_HOLDS``)?"""
    assert t.result is not None
    prompt = lowered_ws(t.result.prompt)
    known = _HOLDS(prompt)
    hit = known.get(lines)
    if hit is None:
        hit = known[lines] = all(line in prompt for line in lines)
    return hit


def _walk_back(v: TraceView, earlier: list[Trace], lines: tuple[str, ...]) -> tuple[int, int]:
    """(turns in a row, the first of them) that the prompts up to this turn's held ``lines``:
    back through ``earlier`` (latest turn first) while each is the turn before the last."""
    run = 1
    since = v.trace.turn
    expected = v.trace.turn - 1
    for t in earlier:
        if t.turn != expected or not _holds(t, lines):
            break
        run += 1
        since = t.turn
        expected -= 1
    return run, since


def _runs_back(folds: SessionFolds, k: int, lines: tuple[str, ...]) -> tuple[int, int] | None:
    """``_walk_back`` over the session's first ``k`` traces (``SessionFolds``), each turn's
    run remembered for the turns after it: (turns in a row from the latest of them, the
    first of those), or None when the latest does not hold ``lines``.

    The walk meets each turn at its first trace; a turn of several traces ends it there
    (the next trace is of the same turn)."""
    memo: dict[tuple[tuple[str, ...], int], tuple[int, int] | None] = folds.memo("carried")
    path: list[int] = []
    at: int | None = folds.turn_start(k - 1)
    known: tuple[int, int] | None = None
    while at is not None:
        if (lines, at) in memo:
            known = memo[(lines, at)]
            break
        t = folds.traces[at]
        if not _holds(t, lines):
            memo[(lines, at)] = None
            break
        path.append(at)
        alone = folds.turn_size(at) == 1
        before = folds.turn_start(at - 1) if alone and at > 0 else None
        at = before if before is not None and folds.traces[before].turn == t.turn - 1 else None
    for at in reversed(path):
        turn = folds.traces[at].turn
        known = memo[(lines, at)] = (1 + known[0], known[1]) if known else (1, turn)
    return memo.get((lines, folds.turn_start(k - 1) if k > 0 else -1))


def _carried_run(v: TraceView, earlier: list[Trace], lines: tuple[str, ...]) -> tuple[int, int]:
    """``_walk_back``, or where the session is diagnosed turn after turn (``SessionFolds``),
    the same run from the runs of the turns before."""
    k = v.folds.earlier(v.trace) if v.folds is not None else None
    if v.folds is None or k is None:
        return _walk_back(v, earlier, lines)
    start = v.folds.turn_start(k - 1)
    if v.folds.traces[start].turn != v.trace.turn - 1:
        return 1, v.trace.turn
    found = _runs_back(v.folds, k, lines)
    return (1, v.trace.turn) if found is None else (1 + found[0], found[1])


def _carried_errors(v: TraceView) -> list[Finding]:
    earlier = sorted(
        (t for t in v.session_traces if t.turn < v.trace.turn and t.result is not None),
        key=lambda t: t.turn,
        reverse=True,
    )
    if not earlier:
        return []
    out: list[Finding] = []
    for d in v.decisions:
        if d.status not in IN_PROMPT or d.packet_id == INSTRUCTIONS_ID:
            continue
        found = _error_lines(v.content(d.packet_id))
        if not found:
            continue
        lines = list(found)
        run, since = _carried_run(v, earlier, found)
        if run >= v.options.carried_turns:
            out.append(
                finding(
                    "stale_or_repeated",
                    "warning",
                    f"the same error observation ({d.packet_id}: {lines[0][:60]!r}) has been in "
                    f"the prompt for {run} turns in a row, since turn {since}",
                    [d.packet_id],
                    {"turns": run, "since_turn": since, "error_lines": lines[:5]},
                )
            )
    return out


# --------------------------------------------------------------------------- unlabelled_evidence

_GENERIC = re.compile(
    r"(?:packet|pkt|item|chunk|document|doc|evidence|ev|result|res|tool|retrieval|rag|"
    r"context|ctx|message|msg|node|id|untitled|unknown|source|src|snippet|passage|"
    r"observation|obs|knowledge|memory|file|output|out|data|p|n|k)[\s:_\-#./]*",
    re.IGNORECASE,
)
_AUTO_TAIL = re.compile(
    r"\d+|[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}|[0-9a-f]{32}|[0-9a-f]{40}",
    re.IGNORECASE,
)
SOURCE_KEYS = (
    "source",
    "source_id",
    "url",
    "uri",
    "path",
    "file",
    "tool_call_id",
    "call_id",
    "citation",
    "ref",
    "doc_id",
    "document_id",
    "origin",
    "command",
)


def is_positional_id(packet_id: str, kind: str = "") -> bool:
    """An id a builder or script made up (``3``, ``chunk_12``, a bare uuid), not a source."""
    if len(packet_id) + len(kind) > 256:
        return _positional(packet_id, kind)
    return _positional_memo(packet_id, kind)


def _positional(packet_id: str, kind: str) -> bool:
    pid = packet_id.strip()
    if kind and pid.lower().startswith(kind.lower()):
        pid = pid[len(kind) :].lstrip(":_-#./ ") or "0"
    # strip generic words one at a time (a loop, not a nested regex quantifier: ids are
    # untrusted and "tool_result_tool_result_…" must not backtrack exponentially)
    while len(pid) < 200:
        m = _GENERIC.match(pid)
        if m is None or m.end() == 0 or m.end() == len(pid):
            break
        pid = pid[m.end() :]
    return bool(_AUTO_TAIL.fullmatch(pid))


#: ``_positional`` of short ids, remembered: ids come back turn after turn, and on both
#: sides of a replay
_positional_memo = functools.lru_cache(maxsize=8192)(_positional)


def unlabelled_evidence(v: TraceView) -> list[Finding]:
    ids: list[str] = []
    why: dict[str, str] = {}
    for p in v.input.packets:
        d = v.by_id.get(p.id)
        if p.kind not in v.options.evidence_kinds or d is None:
            continue
        if d.status not in IN_PROMPT and d.status != Status.SUMMARIZED:
            continue
        sources = {k: p.metadata.get(k) for k in SOURCE_KEYS if k in p.metadata}
        has_source = any(val not in (None, "", [], {}) for val in sources.values())
        if sources and not has_source:
            ids.append(p.id)
            why[p.id] = f"metadata {', '.join(sources)} is empty"
        elif is_positional_id(p.id, p.kind) and not has_source:
            ids.append(p.id)
            why[p.id] = "positional id and no source in metadata"
    if not ids:
        return []
    return [
        finding(
            "unlabelled_evidence",
            "warning",
            f"{len(ids)} evidence packet(s) in the prompt have no source id ({id_list(ids)}): "
            "the model cannot cite them and a timeline cannot follow them across turns",
            ids,
            {"why": why},
        )
    ]


# --------------------------------------------------------------------------- injection_like

_UNTRUSTED_ROLES = frozenset({"tool", "function", "observation", "ipython"})


def _untrusted_texts(v: TraceView, packet_id: str) -> list[str]:
    """The parts of a candidate that came from tools or retrieval (never the operator's)."""
    if packet_id == INSTRUCTIONS_ID:
        return []
    if packet_id == HISTORY_ID:
        # one packet for the whole history: look at its tool messages only
        return [m.content for m in v.input.history if m.role in _UNTRUSTED_ROLES]
    p = v.packets.get(packet_id)
    if p is not None:
        return [] if p.kind in TRUSTED_KINDS else [p.content]
    return [v.content(packet_id)] if v.role(packet_id) in _UNTRUSTED_ROLES else []


def injection_like(v: TraceView) -> list[Finding]:
    out: list[Finding] = []
    for d in v.decisions:
        pid = d.packet_id
        hits = [h for text in _untrusted_texts(v, pid) for h in injection_hits(text)]
        if not hits:
            continue
        where = "in the prompt" if d.status in IN_PROMPT else f"{d.status.value}, not in the prompt"
        label, snippet = hits[0]
        out.append(
            finding(
                "injection_like",
                "warning" if d.status in IN_PROMPT else "info",
                f"{pid} ({d.kind}, {where}) contains text that {label_phrase(label)} "
                f"({snippet[:50]!r}); flagged, not acted on",
                [pid],
                {"hits": [{"pattern": lab, "text": snip} for lab, snip in hits[:5]]},
            )
        )
    return out


def label_phrase(label: str) -> str:
    return {
        "override instruction": "tries to override the instructions",
        "chat-template token": "spells a chat-template control token",
        "poses as a system/developer message": "poses as a system or developer message",
        "new-role instruction": "tries to give the model a new role",
    }.get(label, label)


# --------------------------------------------------------------------------- relevance_blind_spot

_WHITESPACE_PRESETS = frozenset({"hello-agents", "hello-agents-book"})


def _bm25_scores(v: TraceView, ids: list[str]) -> dict[str, float]:
    """What the ctxscope preset's CJK-aware BM25 gives each packet."""
    texts = [v.content(i) for i in ids]
    scores = bm25_relevance(v.input.query, texts, v.exact_counter.count_many(texts))
    return {i: round(float(s), 4) for i, s in zip(ids, scores, strict=True)}


def _blind_spot_candidates(v: TraceView) -> list[Decision]:
    """The packets a whitespace scorer scored low (at most ``blind_spot_max_relevance``)
    where the query or their text is mostly unspaced (CJK)."""
    q_cjk = cjk_share(v.input.query) >= 0.3
    cands = []
    for d in v.decisions:
        if d.relevance is None or d.packet_id == INSTRUCTIONS_ID:
            continue
        p = v.packets.get(d.packet_id)
        if (
            v.config.preset == "hello-agents-book"
            and p is not None
            and p.relevance is not None
            and p.relevance != 0.5
        ):
            continue  # the book keeps caller relevance other than exactly 0.5
        if d.relevance > v.options.blind_spot_max_relevance:
            continue
        if q_cjk or cjk_share(v.content(d.packet_id)) >= 0.3:
            cands.append(d)
    return cands


def relevance_blind_spot(v: TraceView) -> list[Finding]:
    if v.config.preset not in _WHITESPACE_PRESETS or not v.input.query.strip():
        return []
    cands = _blind_spot_candidates(v)
    if not cands:
        return []
    # The same measure the presets use (share of query terms found in the content), with
    # CJK bigrams as terms: directly comparable to the recorded relevance and min_relevance.
    q_terms = cjk_terms(v.input.query)
    aware = {d.packet_id: cjk_relevance(q_terms, v.content(d.packet_id)) for d in cands}
    hits = [
        d
        for d in cands
        if aware[d.packet_id] - (d.relevance or 0.0) >= v.options.blind_spot_min_gain
    ]
    if not hits:
        return []
    return [_blind_spot_finding(v, hits, aware)]


def _blind_spot_finding(v: TraceView, hits: list[Decision], aware: dict[str, float]) -> Finding:
    """The finding on ``hits``, the packets a CJK-aware scorer finds relevant (``aware``:
    its share of the query's terms per packet id)."""
    bm25 = _bm25_scores(v, [d.packet_id for d in v.decisions if d.relevance is not None])
    filtered = [d.packet_id for d in hits if d.reason == Reason.BELOW_MIN_RELEVANCE]
    lost = [d.packet_id for d in hits if d.status in LOST]
    lo = min(aware[d.packet_id] for d in hits)
    hi = max(aware[d.packet_id] for d in hits)
    severity: Severity = "warning" if lost else "info"
    msg = (
        f"{len(hits)} packet(s) with Chinese or other unspaced text scored relevance ≤ "
        f"{v.options.blind_spot_max_relevance:.2f} by whitespace word overlap "
        f"({v.config.preset}); with CJK-aware terms they cover {lo:.0%}–{hi:.0%} of the query"
    )
    if filtered:
        msg += f", and {len(filtered)} were filtered out by min_relevance"
    return finding(
        "relevance_blind_spot",
        severity,
        msg,
        [d.packet_id for d in hits],
        {
            "scorer": "share of query terms found, CJK bigrams as terms",
            "packets": {
                d.packet_id: {
                    "recorded": d.relevance,
                    "cjk_aware": round(aware[d.packet_id], 4),
                    "bm25": bm25.get(d.packet_id),
                    "status": d.status.value,
                }
                for d in hits
            },
        },
    )


# --------------------------------------------------------------------------- summary_coverage

_COVERS = ("covers", "source_ids", "summarizes", "sources", "summary_of")


def _add_contents(out: dict[str, str], t: Trace) -> None:
    """Each packet's and history message's text by id, where it first came."""
    for p in t.input.packets:
        out.setdefault(p.id, p.content)
    for m in t.input.history:
        if m.id:
            out.setdefault(m.id, m.content)


def _session_contents(v: TraceView) -> dict[str, str]:
    """The texts of the session's other turns by id (shared when the whole session is
    diagnosed, ``SessionFolds``: read, never changed)."""
    if v.folds is not None:
        return v.folds.fold("contents", len(v.session_traces), dict, _add_contents)
    return fold_over(v.session_traces, dict, _add_contents)


def _error_text_lines_of(text: str) -> tuple[str, ...]:
    return tuple(ln for ln in text.splitlines() if _ERROR_LINE.search(ln))


#: the lines of a text that report a failure, as they are (remembered per text)
_error_text_lines = Memo(_error_text_lines_of)


def cites_other_packets(v: TraceView) -> bool:
    """Does a summary in the prompt name the packets it covers (``metadata.covers`` and
    the like)? Only then does ``summary_coverage`` look them up, in other turns too."""
    return any(
        isinstance(next((p.metadata[k] for k in _COVERS if k in p.metadata), None), list)
        and v.in_prompt(p.id)
        for p in v.input.packets
    )


def summary_coverage(v: TraceView) -> list[Finding]:
    out: list[Finding] = []
    for label, ids, original in _summary_regions(v):
        found = _coverage_finding(v, label, ids, original)
        if found is not None:
            out.append(found)
    return out


def _summary_regions(v: TraceView) -> list[tuple[str, list[str], str]]:
    """What was summarized in the prompt: (label, source ids, original text) for the history
    summary, each summarized packet, and each packet in the prompt that says it covers
    others (``_COVERS``)."""
    regions: list[tuple[str, list[str], str]] = []
    summed = [d.packet_id for d in v.decisions if d.status == Status.SUMMARIZED]
    hist = [i for i in summed if v.is_history(i)]
    if hist:
        regions.append(("the history summary", hist, "\n".join(v.content(i) for i in hist)))
    for i in summed:
        if i not in hist:
            regions.append((f"the summary of {i}", [i], v.content(i)))
    lookup: dict[str, str] | None = None
    for p in v.input.packets:
        covers = next((p.metadata[k] for k in _COVERS if k in p.metadata), None)
        if not isinstance(covers, list) or not v.in_prompt(p.id):
            continue
        if lookup is None:
            lookup = {**_session_contents(v), **v.contents}
        srcs = [str(c) for c in covers if str(c) in lookup and str(c) != p.id]
        if srcs:
            regions.append((f"summary {p.id}", [p.id, *srcs], "\n".join(lookup[s] for s in srcs)))
    return regions


def _coverage_finding(v: TraceView, label: str, ids: list[str], original: str) -> Finding | None:
    """The finding on one summarized region, when the prompt lost enough of the
    identifiers, paths and numbers of ``original``."""
    idents = identifiers(original)
    lost = [t for t in idents if t not in v.prompt]
    if len(lost) < v.options.coverage_min_lost or not idents:
        return None
    # what an engineer needs back first: names from error lines and from the task
    wanted = "\n".join([v.input.query, *_error_text_lines(original)])
    key = [t for t in lost if t in wanted]
    share = len(lost) / len(idents)
    severity: Severity = "warning" if key and share >= v.options.coverage_warn_share else "info"
    shown = list(dict.fromkeys(key[:3] + lost))[:5]
    return finding(
        "summary_coverage",
        severity,
        f"{label} lost {len(lost)} of {len(idents)} identifiers, paths and numbers "
        f"({', '.join(shown)}{', …' if len(lost) > 5 else ''})"
        + (f"; {len(key)} of them from error lines or the task" if key else ""),
        ids,
        {
            "lost": list(dict.fromkeys(key + lost))[:50],
            "from_errors_or_task": key[:20],
            "total": len(idents),
            "share": round(share, 4),
        },
    )


# --------------------------------------------------------------------------- import_loss


def import_loss(v: TraceView) -> list[Finding]:
    """Parts of an imported source that the importer does not read (kept as JSON text).

    Importers never drop what they do not know: they keep its JSON as text in its message
    and list its path in ``metadata.import.kept_as_text`` (``ctxcore.formats.accounting``).
    The tokens are counted, but what the part means (a server tool call, a search result)
    is not mapped to packets, so the decisions cannot speak about it."""
    meta = v.trace.metadata.get("import") if isinstance(v.trace.metadata, dict) else None
    if not isinstance(meta, dict):
        return []
    paths = [str(p) for p in meta.get("kept_as_text") or []]
    total = int(meta.get("kept_as_text_total") or len(paths))
    if not total:
        return []
    shown = ", ".join(paths[:5]) + (f" and {total - 5} more" if total > 5 else "")
    return [
        finding(
            "import_loss",
            "warning",
            f"{total} part(s) of the imported {meta.get('format', 'source')} are of types "
            f"ctxscope does not read ({shown}); they are kept as JSON text in their messages, "
            "so their tokens count but they are not mapped to packets",
            evidence={"paths": paths, "total": total, "format": meta.get("format")},
        )
    ]
