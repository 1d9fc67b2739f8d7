"""Valid traces for the store/ingest/watch/capture tests, built with ctxcore.models directly.

Packet content is real text: lines of the vendored corpus's tool logs, so the full-text
search tests search something an engineer would actually search.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from ctxcore.models import (
    SCHEMA,
    Builder,
    BuildResult,
    CapturedInput,
    Config,
    Decision,
    Outcome,
    Packet,
    PartitionUsage,
    Reason,
    Report,
    Status,
    Totals,
    Trace,
)

ROOT = Path(__file__).resolve().parent.parent
_LOGS = [
    "d01_pytest_reportingdemo_44_failures.rst",
    "d04_grep_r_qualname_sphinx.txt",
    "d06_jest_failure_zh_xresolver.log",
    "d03_django_runtests_admin_inlines.txt",
]


def corpus_lines() -> list[str]:
    out: list[str] = []
    for name in _LOGS:
        text = (ROOT / "corpus" / name).read_text(encoding="utf-8", errors="replace")
        out += [ln.strip() for ln in text.splitlines() if len(ln.strip()) > 20]
    return out


_LINES = corpus_lines()
STATUSES = [Status.KEPT, Status.KEPT, Status.SUMMARIZED, Status.DROPPED, Status.TRUNCATED]
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def make_trace(
    i: int,
    n_packets: int = 5,
    *,
    session_id: str = "s1",
    turn: int | None = None,
    tags: list[str] | None = None,
    verdict: str | None = None,
    must_keep_dropped: bool = False,
    warnings: list[str] | None = None,
    trace_id: str | None = None,
    with_result: bool = True,
) -> Trace:
    """Trace number ``i``: packet k is ``STATUSES[k % 5]`` (packet 0 is must-keep)."""
    now = T0 + timedelta(minutes=i)
    packets = []
    decisions = []
    for k in range(n_packets):
        content = _LINES[(i * 7 + k) % len(_LINES)]
        must = k == 0
        status = STATUSES[k % len(STATUSES)]
        if must:
            status = Status.DROPPED if must_keep_dropped else Status.KEPT
        tokens = 10 + (k * 13 + i) % 50
        packets.append(
            Packet(
                id=f"tool:call_{k}",
                kind="tool_result" if k % 2 else "evidence",
                content=content,
                relevance=round(0.1 + (k % 9) / 10, 2),
                must_keep=must,
                tokens=tokens,
            )
        )
        after = 0 if status == Status.DROPPED else tokens // (2 if status != Status.KEPT else 1)
        decisions.append(
            Decision(
                packet_id=f"tool:call_{k}",
                kind=packets[-1].kind,
                status=status,
                reason=Reason.MUST_KEEP if must and not must_keep_dropped else Reason.FITS,
                reason_text=f"packet {k} {status.value}",
                partition="[Evidence]",
                relevance=packets[-1].relevance,
                recency=0.5,
                score=round(1 - k / (n_packets + 1), 4),
                rank=k + 1,
                tokens_before=tokens,
                tokens_after=after,
                budget_left=1000 - k * 10,
            )
        )
    used = sum(d.tokens_after for d in decisions)
    result = BuildResult(
        prompt="\n".join(p.content for p in packets),
        decisions=decisions,
        partitions=[
            PartitionUsage(name="[Task]", budget=200, used=20, items=1),
            PartitionUsage(name="[Evidence]", budget=800, used=used, items=n_packets),
        ],
        totals=Totals(
            window=4096,
            output_reserve=512,
            safety_margin=64,
            available=1000 + i,
            used=used,
            tokenizer="cl100k_base",
        ),
        report=Report(budget=1000 + i, used=used),
        warnings=warnings or [],
    )
    return Trace(
        schema=SCHEMA,
        trace_id=trace_id or f"t{i:06d}",
        session_id=session_id,
        turn=i if turn is None else turn,
        created_at=now,
        builder=Builder(name="test", version="1"),
        tags=tags or [],
        input=CapturedInput(query=f"fix failure {i}", now=now, packets=packets),
        config=Config(preset="ctxscope", max_tokens=4096),
        result=result if with_result else None,
        outcome=None if verdict is None else Outcome(verdict=verdict),  # type: ignore[arg-type]
    )


def write_jsonl(path: Path, traces: list[Trace], *, trailing_newline: bool = True) -> None:
    text = "\n".join(t.to_json() for t in traces)
    path.write_text(text + ("\n" if trailing_newline else ""), encoding="utf-8")
