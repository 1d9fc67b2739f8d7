"""Share what you found: snapshots, offline HTML reports and OTLP exports of traces.

- **Snapshot** (``--format json``): ``{"format": "ctxscope.snapshot/1", "traces": [...]}``,
  one trace per line inside the list. Self-contained (a trace carries its input and
  config, so a colleague can re-run it), re-importable with ``ctxscope import``, and
  byte-identical after export → import → export.
- **HTML report** (``--format html``): one file that opens with no network and runs no
  script: the charts are inline SVG drawn here from the numbers ``ctxcore.figures`` uses
  (plotly.js alone would be 4.8 MB; one trace's report stays well under 1.5 MB), every
  piece of trace content is escaped (packets are untrusted), and a Content-Security-Policy
  of ``default-src 'none'`` blocks scripts and every network request. It carries the why:
  each trace's findings with their verified fixes, and for a session the timeline of
  statuses and the per-turn usage.
- **OTLP JSON** (``--format otlp``): one span per trace with the GenAI semantic-convention
  attributes (``gen_ai.input.messages``, ...) so tracing backends show the prompt, plus
  ``ctxscope.*`` attributes so ``ctxscope import`` restores the trace exactly. Decisions
  are flat, namespaced attributes, one group per decision:
  ``ctxscope.decision.<i>.{packet_id,kind,status,reason,reason_text,partition,relevance,
  recency,score,rank,tokens_before,tokens_after,budget_left,notes}`` (absent = null), and
  ``ctxscope.decision.count``; flat keys can be filtered in any backend, unlike one JSON
  blob. The captured input, config and the rest of the result travel as JSON strings
  (``ctxscope.input``, ``ctxscope.config``, ``ctxscope.result.*``).

Everything exported is redacted (``ctxcore.formats.redact``) unless the caller opts out.
"""

from __future__ import annotations

import hashlib
import html
import json
from collections.abc import Iterable
from typing import Any

from ctxcore import __version__
from ctxcore.cost import PriceTable, price_table
from ctxcore.costing import CallCost, cache_group, session_costs
from ctxcore.diagnostics.counterfactual import Counterfactual, counterfactuals, searched_knobs
from ctxcore.errors import InputError
from ctxcore.formats.load import SNAPSHOT_FORMAT
from ctxcore.formats.otlp import DECISION_FIELDS, DECISION_PREFIX, JSON_FIELDS, RESULT_JSON_FIELDS
from ctxcore.formats.redact_memo import Redactor
from ctxcore.models import BuildResult, CapturedInput, Finding, Message, Trace, utc_iso

# --------------------------------------------------------------------------- redaction


def redact_all(
    traces: Iterable[Trace], redactor: Redactor | None = None
) -> tuple[list[Trace], dict[str, int]]:
    """Redacted copies of ``traces`` and the total count of secrets by type: what
    ``redact_trace`` gives each, each text of a session read by the rules once (a
    ``Redactor``'s memory; pass one to keep it across calls)."""
    memo = redactor if redactor is not None else Redactor()
    out: list[Trace] = []
    total: dict[str, int] = {}
    for t in traces:
        red, counts = memo.trace(t)
        out.append(red)
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v
    return out, dict(sorted(total.items()))


# --------------------------------------------------------------------------- snapshot


def snapshot_json(traces: list[Trace]) -> str:
    """The snapshot file's text: stable bytes for the same traces."""
    if not traces:
        raise InputError("nothing to export: no traces")
    body = ",\n".join(t.to_json() for t in traces)
    return f'{{"format":"{SNAPSHOT_FORMAT}","traces":[\n{body}\n]}}\n'


# --------------------------------------------------------------------------- OTLP


def _any(value: Any) -> dict[str, Any] | None:
    """A Python value as an OTLP JSON ``AnyValue`` (None → attribute omitted)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [_any(v) for v in value]}}
    return {"stringValue": _js(value)}


def _js(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _hex(text: str, n: int) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:n]


def _genai_messages(trace: Trace) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(system instruction parts, input messages) in the GenAI parts format."""
    res = trace.result
    msgs: list[Message]
    if res is not None and res.messages is not None:
        msgs = res.messages
    else:
        prompt = res.prompt if res is not None else trace.input.query
        msgs = [Message(role="user", content=prompt)]
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    for m in msgs:
        if m.role == "system":
            system.append({"type": "text", "content": m.content})
            continue
        if m.role == "tool":
            part = {
                "type": "tool_call_response",
                "id": m.metadata.get("tool_call_id"),
                "response": m.content,
            }
            out.append({"role": "tool", "parts": [part]})
            continue
        calls = m.metadata.get("tool_calls") or []
        text = m.content
        parts: list[dict[str, Any]] = []
        if calls:
            # the history content ends with the compact call lines; send only the text
            lines = "\n".join(f"{c['name']}({c['arguments']})" for c in calls)
            text = text[: -len(lines)].rstrip("\n") if text.endswith(lines) else text
        if text:
            parts.append({"type": "text", "content": text})
        for c in calls:
            # Arguments go out as an object when that loses nothing, else as the string
            # the model produced (the conventions allow both), so a reader gets it back.
            args: Any = c["arguments"]
            try:
                parsed = json.loads(args)
                if _js(parsed) == args:
                    args = parsed
            except (json.JSONDecodeError, TypeError, RecursionError):
                pass  # not JSON a reader could parse back: the string as it is
            parts.append({"type": "tool_call", "id": c["id"], "name": c["name"], "arguments": args})
        out.append({"role": m.role, "parts": parts})
    return system, out


def _genai_attributes(trace: Trace, model: Any) -> dict[str, Any]:
    """The GenAI semantic-convention attributes of a trace's span: the request, the
    messages and tools, the usage (the counted prompt when none was reported) and the
    reply."""
    res = trace.result
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model if isinstance(model, str) else None,
        "gen_ai.conversation.id": trace.session_id,
    }
    system, messages = _genai_messages(trace)
    attrs["gen_ai.system_instructions"] = _js(system) if system else None
    attrs["gen_ai.input.messages"] = _js(messages)
    if trace.input.tools:
        tools = [{"type": "function", **t.model_dump(mode="json")} for t in trace.input.tools]
        attrs["gen_ai.tool.definitions"] = _js(tools)
    usage = trace.outcome.usage if trace.outcome is not None else {}
    in_tokens = usage.get("prompt_tokens", usage.get("input_tokens"))
    if in_tokens is None and res is not None:
        in_tokens = res.totals.used
    attrs["gen_ai.usage.input_tokens"] = in_tokens
    attrs["gen_ai.usage.output_tokens"] = usage.get("completion_tokens", usage.get("output_tokens"))
    if trace.outcome is not None and trace.outcome.output is not None:
        out = [{"role": "assistant", "parts": [{"type": "text", "content": trace.outcome.output}]}]
        attrs["gen_ai.output.messages"] = _js(out)
    return attrs


def _ctxscope_attributes(trace: Trace) -> dict[str, Any]:
    """The ``ctxscope.*`` attributes: the whole trace, so that importing the span gives it
    back (a result's decisions one attribute group each)."""
    data = trace.to_dict()
    attrs: dict[str, Any] = {
        "ctxscope.schema": data["schema"],
        "ctxscope.trace_id": trace.trace_id,
        "ctxscope.session_id": trace.session_id,
        "ctxscope.turn": trace.turn,
        "ctxscope.created_at": data["created_at"],
        "ctxscope.tags": list(trace.tags) or None,
        "ctxscope.source_trace_id": trace.source_trace_id,
        "ctxscope.preset": trace.config.preset,
    }
    for name in JSON_FIELDS:
        attrs[f"ctxscope.{name}"] = None if data[name] is None else _js(data[name])
    res = trace.result
    if res is not None:
        rd = data["result"]
        attrs["ctxscope.result.prompt"] = res.prompt
        for name in RESULT_JSON_FIELDS:
            attrs[f"ctxscope.result.{name}"] = None if rd[name] is None else _js(rd[name])
        attrs["ctxscope.decision.count"] = len(res.decisions)
        for i, d in enumerate(rd["decisions"]):
            for f in DECISION_FIELDS:
                value = d[f]
                attrs[f"{DECISION_PREFIX}{i}.{f}"] = value if value != [] else None
    return attrs


def otlp_span(trace: Trace) -> dict[str, Any]:
    """One OTLP JSON span carrying a trace (GenAI attributes + ``ctxscope.*``)."""
    raw_meta = trace.metadata.get("otlp")
    otlp_meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    trace_hex = str(otlp_meta.get("trace_id") or _hex(f"session:{trace.session_id}", 32))
    span_hex = str(otlp_meta.get("span_id") or _hex(f"trace:{trace.trace_id}", 16))
    start = int(trace.created_at.timestamp()) * 1_000_000_000 + trace.created_at.microsecond * 1000
    res = trace.result
    duration_ms = sum(res.timings.values()) if res is not None else 0.0
    model = trace.metadata.get("model")
    attrs = {**_genai_attributes(trace, model), **_ctxscope_attributes(trace)}
    return {
        "traceId": trace_hex,
        "spanId": span_hex,
        "name": f"chat {model}"
        if isinstance(model, str)
        else f"ctxscope.build {trace.config.preset}",
        "kind": 3 if isinstance(model, str) else 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(start + int(duration_ms * 1_000_000)),
        "attributes": [
            {"key": k, "value": av} for k, v in attrs.items() if (av := _any(v)) is not None
        ],
        "status": {},
    }


def otlp_export(traces: list[Trace]) -> dict[str, Any]:
    """An OTLP/HTTP JSON ``ExportTraceServiceRequest`` with one span per trace."""
    if not traces:
        raise InputError("nothing to export: no traces")
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "ctxscope"}}]
                },
                "scopeSpans": [
                    {
                        "scope": {"name": "ctxscope", "version": __version__},
                        "spans": [otlp_span(t) for t in traces],
                    }
                ],
            }
        ]
    }


def otlp_json(traces: list[Trace]) -> str:
    return json.dumps(otlp_export(traces), ensure_ascii=False, indent=1) + "\n"


# --------------------------------------------------------------------------- HTML report

_CSS = """
body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:1200px;padding:0 1rem;color:#222}
h1{font-size:1.5rem}h2{font-size:1.25rem;border-bottom:1px solid #ddd;padding-bottom:.3rem}
h3{font-size:1.05rem;margin-top:1.5rem}
table{border-collapse:collapse;width:100%;font-size:.85rem;margin:.5rem 0}
th,td{border:1px solid #e3e3e3;padding:.25rem .45rem;text-align:left;vertical-align:top}
th{background:#f6f6f6}td.n{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#f8f8f8;border:1px solid #e3e3e3;padding:.6rem;white-space:pre-wrap;
word-break:break-word;font-size:.8rem;max-height:40rem;overflow:auto}
.kept{color:#2e7d32}.dropped,.filtered{color:#c62828}.summarized{color:#1565c0}
.truncated{color:#b8860b}.not_rendered{color:#7b1fa2}.warn{color:#b71c1c}.muted{color:#777}
details{margin:.3rem 0}summary{cursor:pointer}.error{color:#b71c1c}.warning{color:#b8860b}
.info{color:#1565c0}.legend{font-size:.8rem;margin:.2rem 0 1rem}
.key{margin-right:1rem;white-space:nowrap}
.key i{display:inline-block;width:.8rem;height:.8rem;margin-right:.3rem;vertical-align:middle}
svg text{font-family:system-ui,sans-serif}
table.cost{width:auto;min-width:24rem}
"""


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def script_json(value: Any) -> str:
    """JSON safe inside a ``<script>`` element: no ``</``, ``<!--``, ``]]>`` or ``&`` left."""
    from plotly.utils import PlotlyJSONEncoder

    text = json.dumps(value, cls=PlotlyJSONEncoder, ensure_ascii=False)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _num(v: float | int | None, digits: int = 3) -> str:
    if v is None:
        return ""
    return f"{v:,}" if isinstance(v, int) else f"{v:.{digits}f}"


def _svg_stack(segments: list[tuple[str, int, str]], total: int, label: str) -> str:
    """One stacked horizontal bar (inline SVG, no script) with a legend under it."""
    width, height = 1000, 34
    total = max(total, sum(n for _, n, _ in segments), 1)
    x = 0.0
    rects: list[str] = []
    legend: list[str] = []
    for name, n, color in segments:
        w = width * n / total
        rects.append(
            f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="{height}" fill="{_e(color)}" '
            f'stroke="#fff"><title>{_e(name)}: {n:,} tokens</title></rect>'
        )
        x += w
        legend.append(
            f'<span class="key"><i style="background:{_e(color)}"></i>{_e(name)} {n:,}</span>'
        )
    return (
        f'<div class="fig"><p class="muted">{_e(label)}</p>'
        f'<svg viewBox="0 0 {width} {height}" width="100%" role="img" '
        f'aria-label="{_e(label)}">{"".join(rects)}</svg>'
        f'<p class="legend">{"".join(legend)}</p></div>'
    )


def _window_fig(t: Trace) -> str:
    from ctxcore import figures

    assert t.result is not None
    tt = t.result.totals
    label = (
        f"Context window: {tt.window:,} tokens · available {tt.available:,} · used "
        f"{tt.used:,} · tokenizer {tt.tokenizer}"
    )
    return _svg_stack(figures.window_segments(t), figures.window_extent(t), label)


def _partitions_fig(t: Trace) -> str:
    """Budget vs used per partition as a table with bars; says when caps overlap."""
    assert t.result is not None
    parts = t.result.partitions
    top = max([p.used for p in parts] + [p.budget or 0 for p in parts] + [1])
    rows = []
    for p in parts:
        over = p.budget is not None and p.used > p.budget
        bar = (
            f'<svg viewBox="0 0 300 12" width="300" height="12">'
            f'<rect width="{300 * p.used / top:.1f}" height="12" '
            f'fill="{"#b22222" if over else "#4c72b0"}"/>'
            + (
                f'<rect x="{300 * p.budget / top:.1f}" width="2" height="12" fill="#222"/>'
                if p.budget is not None
                else ""
            )
            + "</svg>"
        )
        rows.append(
            f"<tr><td>{_e(p.name)}</td><td class=n>{_num(p.budget)}</td>"
            f"<td class=n>{p.used:,}</td><td>{bar}</td></tr>"
        )
    caps = [p.budget for p in parts if p.budget is not None]
    avail = t.result.totals.available
    note = ""
    if caps and avail > 0 and sum(caps) > avail:
        note = (
            f'<p class="muted">The partition caps add up to {sum(caps):,} tokens, '
            f"{100 * sum(caps) / avail:.0f}% of the {avail:,} available: they overlap, so "
            "not every partition can reach its cap at once.</p>"
        )
    return (
        '<div class="fig"><p class="muted">Partitions: budget (black mark) vs used</p>'
        "<table><tr><th>partition</th><th>budget</th><th>used</th><th></th></tr>"
        + "".join(rows)
        + "</table>"
        + note
        + "</div>"
    )


def _findings_html(findings: list[Finding]) -> str:
    if not findings:
        return '<h3>Findings</h3><p class="muted">No findings: nothing suspicious.</p>'
    out = ["<h3>Findings</h3><ul>"]
    for f in findings:
        line = f'<li><b class="{_e(f.severity)}">{_e(f.severity.upper())}</b> · '
        line += f"{_e(f.detector)}: {_e(f.message)}"
        if f.packet_ids:
            more = " …" if len(f.packet_ids) > 12 else ""
            line += f'<br><span class="muted">packets: {_e(", ".join(f.packet_ids[:12]))}{more}'
            line += "</span>"
        if f.fix:
            why = f.evidence.get("fix") or json.dumps(f.fix, ensure_ascii=False)
            line += f"<br>what would have kept it (verified by re-running): {_e(why)}"
        out.append(line + "</li>")
    out.append("</ul>")
    return "".join(out)


def _counterfactuals_html(found: list[Counterfactual], searched: list[str]) -> str:
    if not searched:
        return ""
    out = [
        "<h3>What would have kept it?</h3>",
        f'<p class="muted">Searched knobs: {_e(", ".join(searched))}; single changes, then '
        "pairs; each verified by re-running the pipeline.</p>",
    ]
    if not found:
        out.append(
            '<p class="muted">No single change or pair of these knobs keeps the '
            "packets the findings name.</p>"
        )
        return "".join(out)
    out.append("<ul>")
    out.extend(f"<li>{_e(cf.sentence)}</li>" for cf in found)
    out.append("</ul>")
    return "".join(out)


def report_counterfactuals(
    traces: list[Trace], findings: list[list[Finding]], per_trace: int = 3
) -> list[list[Counterfactual]]:
    """For the packets the findings name (lost or summarized, up to ``per_trace`` per
    trace), the smallest verified change over every knob that keeps each one."""
    out: list[list[Counterfactual]] = []
    for t, fs in zip(traces, findings, strict=True):
        found: list[Counterfactual] = []
        if t.result is not None:
            by_id = {d.packet_id: d for d in t.result.decisions}
            ids = [
                pid
                for f in fs
                for pid in f.packet_ids
                if pid in by_id and by_id[pid].status.value in _LOST_STATUSES
            ]
            for pid in list(dict.fromkeys(ids))[:per_trace]:
                best = counterfactuals(t, pid, knobs=searched_knobs(t), pairs=True, max_builds=60)
                found.extend(best[:1])
        out.append(found)
    return out


_LOST_STATUSES = frozenset({"dropped", "filtered", "summarized", "truncated"})


def _sessions_html(traces: list[Trace]) -> str:
    """Each session of the export at a glance (``_session_html``), in the order they first
    appear: the turns of two sessions (a Claude Code log's side chains) are never drawn as
    one session's."""
    by: dict[str, list[Trace]] = {}
    for t in traces:
        by.setdefault(t.session_id, []).append(t)
    if len(by) == 1:
        return _session_html(traces)
    return "".join(_session_html(ts, sid, f"session-{k}") for k, (sid, ts) in enumerate(by.items()))


def _session_html(traces: list[Trace], name: str | None = None, ident: str = "session") -> str:
    """A session's turns at a glance: usage per turn and the statuses of its packets
    (``name``: the session's id, said when the export holds several)."""
    from ctxcore import figures

    built = sorted((t for t in traces if t.result is not None), key=lambda t: t.turn)
    if len(built) < 2:
        return ""
    top = max(max(t.result.totals.window, t.result.totals.used) for t in built if t.result)
    bar_h, gap = 16, 4
    height = len(built) * (bar_h + gap)
    bars: list[str] = []
    prev: int | None = None
    for i, t in enumerate(built):
        assert t.result is not None
        tt = t.result.totals
        y = i * (bar_h + gap)
        jump = prev is not None and t.turn != prev + 1
        prev = t.turn
        bars.append(
            f'<text x="0" y="{y + 12}" font-size="11">{"⋯ " if jump else ""}turn {t.turn}</text>'
            f'<rect x="90" y="{y}" width="{800 * tt.available / top:.1f}" height="{bar_h}" '
            f'fill="#eee"/><rect x="90" y="{y}" width="{800 * tt.used / top:.1f}" '
            f'height="{bar_h}" fill="#4c72b0"><title>turn {t.turn}: {tt.used:,} of '
            f"{tt.available:,} available</title></rect>"
            f'<text x="{95 + 800 * max(tt.used, tt.available) / top:.1f}" y="{y + 12}" '
            f'font-size="11">{tt.used:,} / {tt.available:,}</text>'
        )
    usage = (
        '<div class="fig"><p class="muted">Tokens used per turn (blue) of the budget '
        "available (grey); ⋯ marks a gap between non-consecutive turns</p>"
        f'<svg viewBox="0 0 1000 {height}" width="100%">{"".join(bars)}</svg></div>'
    )
    head = "".join(f"<th>{_e(s)}</th>" for s in figures.STATUS_ORDER)
    rows = []
    prev = None
    for t in built:
        assert t.result is not None
        counts: dict[str, int] = {}
        for d in t.result.decisions:
            counts[d.status.value] = counts.get(d.status.value, 0) + 1
        if prev is not None and t.turn != prev + 1:
            rows.append(
                f'<tr><td colspan="{len(figures.STATUS_ORDER) + 2}" class="muted">'
                f"⋯ turns {prev + 1}–{t.turn - 1} not in this export</td></tr>"
            )
        prev = t.turn
        cells = "".join(
            f'<td class="n {s}">{counts.get(s, 0):,}</td>' for s in figures.STATUS_ORDER
        )
        rows.append(
            f'<tr><td><a href="#turn-{t.turn}">turn {t.turn}</a></td>'
            f"<td class=n>{t.result.totals.used:,}</td>{cells}</tr>"
        )
    timeline = (
        "<h3>Timeline: packets per status, turn by turn</h3><table><tr><th>turn</th>"
        f"<th>used</th>{head}</tr>{''.join(rows)}</table>"
    )
    head = "Session" if name is None else f"Session {_e(name)}"
    return f'<section id="{ident}"><h2>{head}</h2>{usage}{timeline}</section>'


def report_costs(traces: list[Trace], prices: PriceTable | None = None) -> dict[str, CallCost]:
    """Each model call of ``traces`` costed with the simulated cache over the calls of its
    session in the export (``ctxcore.costing``), by trace id; a trace that names no model
    and recorded no usage is left out."""
    table = prices or price_table()
    groups: dict[str, list[Trace]] = {}
    for t in traces:
        recorded = t.outcome is not None and t.outcome.tokens is not None
        if recorded or t.metadata.get("model"):
            groups.setdefault(cache_group(t), []).append(t)
    return {c.trace_id: c for ts in groups.values() for c in session_costs(ts, table)}


def _cost_html(call: CallCost) -> str:
    """A call's cost and cache: its tokens as the simulation sees them beside the provider's,
    the cost and its source, the break (every word of it escaped: a reason quotes prompt
    lines)."""
    from ctxcore import figures

    rows = "".join(
        f"<tr><td>{_e(name)}</td><td class=n>{_num(sim)}</td><td class=n>{_num(rec)}</td></tr>"
        for name, sim, rec in zip(
            figures.FIGURES,
            figures.simulated_figures(call),
            figures.recorded_figures(call.recorded),
            strict=True,
        )
    )
    lines = [figures.cost_line(call)]
    differs = figures.billed_differently(call)
    if differs is not None:
        lines.append(differs)
    if call.cache_break is None:
        lines.append("No cache break: this call read all the previous call could serve.")
    else:
        lines.extend(figures.break_lines(call.cache_break))
    return (
        '<h3>Cost and prompt cache</h3><table class="cost"><tr><th>tokens</th>'
        "<th>simulated</th><th>recorded (provider)</th></tr>"
        + rows
        + "</table>"
        + "".join(f"<p>{_e(line)}</p>" for line in lines)
    )


def _session_costs_html(traces: list[Trace], calls: dict[str, CallCost]) -> str:
    """Per session of the export with costed calls: its total and a row per turn (the
    provider's figures where recorded, else the simulation's), each break with its reason."""
    from ctxcore import figures

    by_session: dict[str, list[CallCost]] = {}
    for t in traces:
        if t.trace_id in calls:
            by_session.setdefault(t.session_id, []).append(calls[t.trace_id])
    out: list[str] = []
    for sid, items in by_session.items():
        known = [c.cost_usd for c in items if c.cost_usd is not None]
        total = figures.usd(sum(known)) if known else figures.MISSING
        unknown = len(items) - len(known)
        note = f" ({unknown:,} of unknown cost, not in the total)" if unknown else ""
        rows = "".join(
            f"<tr><td>turn {f.turn}</td>"
            f"<td class=n>{_e(figures.usd(f.usd))}</td><td class=n>{_num(f.cached)}</td>"
            f"<td class=n>{_num(f.written)}</td><td class=n>{_num(f.uncached)}</td>"
            f"<td class=n>{_num(f.output)}</td><td>{_e(f.source)}</td>"
            f"<td>{_e(f.cache_break.kind if f.cache_break else '')}</td>"
            f"<td>{_e(f.cache_break.reason if f.cache_break else '')}</td></tr>"
            for f in figures.session_turns(items)
        )
        out.append(
            f"<h3>Cost and prompt cache: session {_e(sid)}</h3>"
            f"<p>{_e(total)} over {len(items):,} calls{_e(note)}</p>"
            "<table><tr><th>turn</th><th>$</th><th>cached</th><th>written</th>"
            "<th>uncached</th><th>output</th><th>figures</th><th>break</th>"
            f"<th>break reason</th></tr>{rows}</table>"
        )
    return f'<section id="cost"><h2>Cost</h2>{"".join(out)}</section>' if out else ""


def _trace_section(
    t: Trace,
    k: int,
    findings: list[Finding],
    fixes: list[Counterfactual],
    call: CallCost | None = None,
) -> str:
    """One trace of the HTML report: its facts, its cost and cache (a model call), its
    result (or a note that it has none), its captured input and its config."""
    out: list[str] = [f'<section id="trace-{k}"><h2 id="turn-{t.turn}">Trace {_e(t.trace_id)}</h2>']
    out.append(_facts_table(t))
    if call is not None:
        out.append(_cost_html(call))
    if t.result is None:
        out.append('<p class="muted">Captured input only: this trace has no build result.</p>')
    else:
        out.extend(_result_html(t, t.result, findings, fixes))
    out.extend(_input_html(t.input))
    cfg = json.dumps(
        t.config.model_dump(mode="json", exclude_none=True), indent=1, ensure_ascii=False
    )
    out.append(f"<h3>Config</h3><pre>{_e(cfg)}</pre></section>")
    return "\n".join(out)


def _facts_table(t: Trace) -> str:
    """Session, turn, time, builder, preset, tags, the totals and what was redacted."""
    rows = [
        ("session", t.session_id),
        ("turn", t.turn),
        ("created", utc_iso(t.created_at)),
        ("builder", f"{t.builder.name} {t.builder.version}"),
        ("preset", t.config.preset),
        ("tags", ", ".join(t.tags)),
    ]
    if t.result is not None:
        tt = t.result.totals
        rows += [
            ("tokenizer", tt.tokenizer),
            (
                "window / reserve / safety",
                f"{tt.window:,} / {tt.output_reserve:,} / {tt.safety_margin:,}",
            ),
            ("available / used", f"{tt.available:,} / {tt.used:,}"),
        ]
    if t.redactions:
        rows.append(("redacted", ", ".join(f"{a}: {b}" for a, b in t.redactions.items())))
    cells = "".join(f"<tr><th>{_e(a)}</th><td>{_e(b)}</td></tr>" for a, b in rows)
    return f"<table>{cells}\n</table>"


def _result_html(
    t: Trace, res: BuildResult, findings: list[Finding], fixes: list[Counterfactual]
) -> list[str]:
    """A build result: warnings, findings, fixes, where the tokens went, the decisions,
    the debug report and the final prompt."""
    out: list[str] = []
    if res.warnings:
        out.append("<h3>Warnings</h3><ul>")
        out.extend(f'<li class="warn">{_e(w)}</li>' for w in res.warnings)
        out.append("</ul>")
    out.append(_findings_html(findings))
    out.append(_counterfactuals_html(fixes, searched_knobs(t)))
    out.append("<h3>Where the tokens went</h3>")
    out.append(_window_fig(t))
    out.append(_partitions_fig(t))
    out.extend(_decisions_table(res))
    rep = res.report
    out.append(
        "<h3>Debug report</h3><pre>"
        + _e(json.dumps(rep.model_dump(mode="json"), ensure_ascii=False, indent=2))
        + "</pre>"
    )
    out.append(f"<h3>Final prompt</h3><pre>{_e(res.prompt)}</pre>")
    return out


_DECISION_HEADS = (
    "rank",
    "packet",
    "kind",
    "status",
    "reason",
    "why",
    "partition",
    "relevance",
    "recency",
    "score",
    "tokens before",
    "tokens after",
    "budget left",
)


def _decisions_table(res: BuildResult) -> list[str]:
    """Every decision, one row each."""
    out = ["<h3>Decisions</h3><table><tr>"]
    out.append("".join(f"<th>{h}</th>" for h in _DECISION_HEADS) + "</tr>")
    for d in res.decisions:
        st = d.status.value
        out.append(
            f"<tr><td class=n>{_num(d.rank)}</td><td>{_e(d.packet_id)}</td>"
            f"<td>{_e(d.kind)}</td>"
            f'<td class="{st}">{st}</td><td>{d.reason.value}</td><td>{_e(d.reason_text)}'
            + "".join(f"<br><span class=muted>{_e(n)}</span>" for n in d.notes)
            + f"</td><td>{_e(d.partition)}</td><td class=n>{_num(d.relevance)}</td>"
            f"<td class=n>{_num(d.recency)}</td><td class=n>{_num(d.score)}</td>"
            f"<td class=n>{_num(d.tokens_before)}</td><td class=n>{_num(d.tokens_after)}</td>"
            f"<td class=n>{_num(d.budget_left)}</td></tr>"
        )
    out.append("</table>")
    return out


def _input_html(inp: CapturedInput) -> list[str]:
    """The captured input: query, system instructions, packets, history, tools."""
    out = ["<h3>Captured input</h3>", f"<p><b>query</b></p><pre>{_e(inp.query)}</pre>"]
    if inp.system_instructions:
        out.append(f"<p><b>system instructions</b></p><pre>{_e(inp.system_instructions)}</pre>")
    for p in inp.packets:
        out.append(
            f"<details><summary>{_e(p.id)} <span class=muted>({_e(p.kind)}"
            f"{', must keep' if p.must_keep else ''})</span></summary><pre>{_e(p.content)}</pre>"
            "</details>"
        )
    for i, m in enumerate(inp.history):
        out.append(
            f"<details><summary>history {i}: {_e(m.role)}</summary><pre>{_e(m.content)}</pre>"
            "</details>"
        )
    if inp.tools:
        tools = json.dumps(
            [x.model_dump(mode="json") for x in inp.tools], ensure_ascii=False, indent=1
        )
        out.append(
            f"<details><summary>{len(inp.tools)} tool definitions</summary>"
            f"<pre>{_e(tools)}</pre></details>"
        )
    return out


def report_findings(traces: list[Trace]) -> list[list[Finding]]:
    """Each trace's findings with the earlier turns of its session in the export and
    verified fixes (what the Inspect page shows)."""
    from ctxcore.diagnostics import diagnose

    out: list[list[Finding]] = []
    for t in traces:
        if t.result is None:
            out.append([])
            continue
        earlier = [s for s in traces if s.session_id == t.session_id and s.turn < t.turn]
        out.append(diagnose(t, session_traces=earlier))
    return out


def html_report(
    traces: list[Trace],
    *,
    redactions: dict[str, int] | None = None,
    findings: list[list[Finding]] | None = None,
    fixes: list[list[Counterfactual]] | None = None,
    costs: dict[str, CallCost] | None = None,
) -> str:
    """A self-contained, offline HTML report of one or more traces (no script at all).

    ``findings`` (one list per trace) defaults to ``report_findings(traces)``, ``fixes``
    to ``report_counterfactuals`` of them, ``costs`` (by trace id) to ``report_costs``. The CSP
    (``default-src 'none'``) forbids every script and every request, so even a packet
    that slipped past escaping could neither run nor phone home.
    """
    if not traces:
        raise InputError("nothing to export: no traces")
    if findings is None:
        findings = report_findings(traces)
    if fixes is None:
        fixes = report_counterfactuals(traces, findings)
    if costs is None:
        costs = report_costs(traces)
    title = (
        f"ctxscope report: trace {traces[0].trace_id}"
        if len(traces) == 1
        else f"ctxscope report: session {traces[0].session_id} ({len(traces)} traces)"
    )
    csp = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_CSS}</style>",
        "</head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="muted">Exported by ctxscope {_e(__version__)}. '
        "Open offline; every piece of trace content below is shown as text.</p>",
    ]
    if redactions:
        detail = ", ".join(f"{_e(k)}: {v}" for k, v in sorted(redactions.items()))
        parts.append(f"<p><b>Redacted on export:</b> {detail}</p>")
    parts.append(_sessions_html(traces))
    parts.append(_session_costs_html(traces, costs))
    parts.extend(
        _trace_section(t, k, fs, cfs, costs.get(t.trace_id))
        for k, (t, fs, cfs) in enumerate(zip(traces, findings, fixes, strict=True))
    )
    parts.append("</body></html>\n")
    return "\n".join(parts)


# --------------------------------------------------------------------------- CLI


__all__ = [
    "html_report",
    "report_costs",
    "report_counterfactuals",
    "report_findings",
    "otlp_export",
    "otlp_json",
    "otlp_span",
    "redact_all",
    "script_json",
    "snapshot_json",
]
