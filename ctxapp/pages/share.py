"""Share / Import: export a snapshot or HTML report; bring in snapshots, OpenAI requests, OTLP.

An upload is bounded twice: Streamlit refuses a file over ``server.maxUploadSize`` (MB, set
in ``.streamlit/config.toml``), and a ``.gz`` is unpacked here in chunks, into a file, and
refused past the same number of bytes unpacked, since a few MB of gzip can unpack to
gigabytes. The importer then reads a file path, never a string the page decompressed.
"""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import streamlit as st

from ctxapp.ui import state, views, widgets
from ctxcore.formats.accounting import describe
from ctxcore.formats.load import load_file, traces_from_value
from ctxcore.formats.redact import redact_text
from ctxcore.formats.registry import NAMES
from ctxcore.formats.share import html_report, redact_all, snapshot_json
from ctxcore.loading import parse_json
from ctxcore.models import Trace

FORMATS: list[str] = list(NAMES)


def _export(t: Trace) -> None:
    st.subheader("Export")
    redact = st.toggle(
        "Redact secrets (API keys, tokens, passwords in URLs, private keys)",
        value=True,
        key="sh_redact",
    )
    scope = st.radio("What", ["this trace", "its whole session"], key="sh_scope", horizontal=True)
    with state.guard():
        traces = [t] if scope == "this trace" else state.session_traces(t.session_id)
        ident = t.trace_id if scope == "this trace" else t.session_id
        # the file's name is redacted as its content: an id can carry a key as well
        name = views.file_stem(redact_text(ident)[0] if redact else ident)

        def make() -> tuple[str, str, dict[str, int]]:
            out, counts = redact_all(traces) if redact else (traces, {})
            return snapshot_json(out), html_report(out, redactions=counts), counts

        snap, report, counts = state.derived(
            "export", t.trace_id, f"{scope}|{redact}|{len(traces)}", make
        )
        if redact:
            found = ", ".join(f"{k}: {v}" for k, v in counts.items()) or "none found"
            st.caption(f"Secrets redacted in the export: {found}")
        c1, c2 = st.columns(2)
        c1.download_button(
            "Download snapshot (.json)",
            snap,
            file_name=f"{name}.ctxscope.json",
            mime="application/json",
            key="sh_dl_snapshot",
            type="primary",
        )
        c2.download_button(
            "Download HTML report",
            report,
            file_name=f"{name}.html",
            mime="text/html",
            key="sh_dl_html",
        )


def upload_limit_mb() -> int:
    """Streamlit's upload limit in force (``server.maxUploadSize``, MB)."""
    return int(st.get_option("server.maxUploadSize"))


def _import() -> None:
    st.subheader("Import")
    limit = upload_limit_mb()
    fmt = st.selectbox(
        "Format",
        FORMATS,
        key="sh_format",
        help="auto detects the format: ctxscope traces and snapshots, OpenAI chat and "
        "Responses requests, Anthropic Messages, Gemini, Bedrock Converse, LangChain "
        "messages, agent session logs and OpenTelemetry exports.",
    )
    up = st.file_uploader(
        "Upload a snapshot, trace JSONL, a model request, a session log or an OTLP export",
        type=["json", "jsonl", "gz"],
        key="sh_upload",
        help=f"Up to {limit:,} MB per file; a .gz up to {limit:,} MB once unpacked.",
    )
    st.caption(
        f"Files up to {limit:,} MB (a `.gz`: up to {limit:,} MB unpacked). For larger ones "
        "use `ctxscope import` or drop trace files into the watched folder."
    )
    pasted = st.text_area(
        "…or paste JSON",
        key="sh_paste",
        height=160,
        placeholder='{"messages": [{"role": "user", "content": "…"}]}',
    )
    if st.button("Import", key="sh_import", type="primary"):
        with state.guard():
            traces: list[Trace] = []
            # a JSONL line that cannot be read costs that line only: said below, as text
            skipped: list[str] = []
            if up is not None:
                with tempfile.TemporaryDirectory() as tmp:
                    path = views.saved_upload(up, up.name, Path(tmp), limit << 20)
                    traces += load_file(path, fmt, skipped.append)
                    skipped = [s.replace(str(path), path.name, 1) for s in skipped]
            if pasted.strip():
                data = parse_json(pasted, "pasted JSON")
                traces += traces_from_value(
                    data,
                    fmt,
                    where="pasted JSON",
                    session_id="pasted",
                    default_now=datetime.now(UTC).replace(microsecond=0),
                )
            for line in skipped[:5]:
                st.text(f"not imported: {line}")
            if len(skipped) > 5:
                st.text(f"… and {len(skipped) - 5} more lines not imported")
            if not traces:
                st.warning(
                    "Nothing imported: no line of the file could be read (above)."
                    if skipped
                    else "Nothing to import: upload a file or paste JSON first."
                )
                return
            added = state.add_traces(traces, source=up.name if up is not None else "paste")
            state.ss_set("sh_imported", [x.trace_id for x in traces])
            st.success(f"Imported {len(traces)} trace(s), {added} new.")
            # what came through against the source, as `ctxscope import` prints it (as text:
            # paths and type names come from the file)
            lines = describe(traces[:20])
            if lines:
                st.text("\n".join(lines))
            warned = [w for x in traces if x.result for w in x.result.warnings]
            for w in list(dict.fromkeys(warned))[:5]:
                st.text(f"warning: {w}")
    done = state.ss_get("sh_imported") or []
    if done:
        pick = st.selectbox("Imported", done, key="sh_imported_pick")
        if st.button("Open in Inspect", key="sh_open"):
            state.switch("inspect", trace=pick)


def render() -> None:
    st.title("Share / Import")
    t = widgets.trace_picker("sh")
    if t is not None:
        widgets.trace_caption(t)
        _export(t)
    st.divider()
    widgets.failing_files_banner()
    _import()
    errs = state.ingest_errors()
    if errs:
        with st.expander(f"Ingest errors ({len(errs)})"):
            frame = pd.DataFrame(
                {
                    "message": [e.message for e in errs],
                    "file": [e.file for e in errs],
                    "line": [e.line for e in errs],
                    "at": [e.at for e in errs],
                }
            )
            widgets.readable_table(
                frame,
                "sh_errors",
                column_config={
                    "message": st.column_config.TextColumn("message", width=widgets.REASON_PX),
                    "file": st.column_config.TextColumn("file", width=260),
                    "line": st.column_config.NumberColumn("line", width=70),
                    "at": st.column_config.DatetimeColumn(
                        "at", format="YYYY-MM-DD HH:mm:ss", width=160
                    ),
                },
                whole=["file", "line", "message"],
            )


if __name__ == "__main__":
    from ctxapp.ui.boot import run_page

    run_page(render)
