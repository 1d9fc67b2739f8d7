"""``ctxscope replay``: re-run a session, a tag, the whole store or trace files with new settings.

The store is opened once, read-only, by this process (while another process, the app, writes
it: a copy taken now, ``ctxcore.store.reading``): DuckDB lets one process at a time write a
file, so the worker processes of ``ctxcore.replay.replay`` get traces, never the store.
``--save`` opens it again afterwards to add the variants (tagged ``replay``,
``source_trace_id`` = the recorded trace), or, while the app holds it, writes them into the
folder the app watches, as ``ctxscope import`` does. The exit
code is 0 when nothing the "before" side kept is lost at or above ``--fail-on``, 1 when
something is, 2 on bad input (printed by ``ctxcore.cli``).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from ctxcore.cli import parse_set
from ctxcore.cli.app import app_folder
from ctxcore.errors import InputError, StoreLockedError
from ctxcore.formats.load import write_jsonl
from ctxcore.loading import load_config
from ctxcore.models import Trace
from ctxcore.replay import (
    CHANGED_MEANS,
    FIRST_LOST_MEANS,
    REPLAY_TAG,
    ReplayReport,
    TraceJson,
    TurnError,
    TurnReport,
    replay,
    replay_sessions,
)
from ctxcore.store.engines import open_store, read_store
from ctxcore.store.protocol import Store
from ctxcore.store.records import TraceFilter

FAIL_ON = ("info", "warning", "error", "never")
_PAGE = 1000


def _session_ids_of(store: Store, session: str, tag: str | None) -> list[str]:
    """The ids of the session's traces to replay, in turn order."""
    flt = TraceFilter(session_id=session, tags=(tag,) if tag else ())
    out: list[str] = []
    offset = 0
    while True:
        page = store.list_traces(flt, sort="turn", descending=False, limit=_PAGE, offset=offset)
        # earlier replays are variants, not recordings (unless asked for by tag)
        out += [r.trace_id for r in page.rows if REPLAY_TAG not in r.tags or tag == REPLAY_TAG]
        offset += len(page.rows)
        if not page.rows or offset >= page.total:
            return out


def _session_json(store: Store, session: str, tag: str | None, findings: bool) -> list[TraceJson]:
    """The session's traces as stored (their JSON, read where they are replayed with
    ingest's msgspec reader: half the time of pydantic; what it refuses, pydantic reads and
    words), and with ``findings`` the findings stored with them by this code."""
    from ctxcore.diagnostics import fingerprint
    from ctxcore.store.fastdecode import decode

    ids = _session_ids_of(store, session, tag)
    found = store.stored_findings(ids, fingerprint()) if findings else {}
    return [TraceJson(t, raw, decode, findings=found.get(t)) for t, raw in store.traces_json(ids)]


#: traces read from the store in one query by ``--all`` / ``--tag`` (whole sessions; a
#: larger session is read alone): a few MB of compressed JSON held at a time
_READ_BATCH = 100


def _sessions(store: Store, tag: str | None, findings: bool = True) -> Iterator[list[TraceJson]]:
    """Every stored session with a trace to replay (one with ``tag``, if given), largest
    first (a long session started last would finish last, alone), read a batch of sessions
    at a time when the replay is ready for them: the store is listed once (ids and tags)
    and never held in memory whole. The workers get each trace's packed JSON and unpack it
    themselves, in parallel (``PackedTrace.unpack``); with ``findings``, also the findings the store
    computed at insert where this very code computed them (the recorded side's detectors
    that read one trace are not run again)."""
    from ctxcore.diagnostics import fingerprint
    from ctxcore.store.fastdecode import decode

    listing = [
        ids
        for _, traces in store.session_listing()
        # earlier replays are variants, not recordings (unless asked for by tag)
        if (
            ids := [
                tid
                for tid, tags in traces
                if (tag is None or tag in tags) and (REPLAY_TAG not in tags or tag == REPLAY_TAG)
            ]
        )
    ]
    listing.sort(key=len, reverse=True)
    batch: list[list[str]] = []
    for k, ids in enumerate(listing):
        batch.append(ids)
        if k + 1 < len(listing) and sum(map(len, batch)) + len(listing[k + 1]) <= _READ_BATCH:
            continue
        wanted = [t for s in batch for t in s]
        packed = {p.trace_id: p for p in store.traces_packed(wanted)}
        found = store.stored_findings(wanted, fingerprint()) if findings else {}
        for ids_ in batch:
            yield [
                TraceJson(
                    tid,
                    packed[tid].data,
                    decode,
                    size=packed[tid].size,
                    unpack=packed[tid].unpack,
                    findings=found.get(tid),
                )
                for tid in ids_
                if tid in packed
            ]
        batch = []


def _from_files(paths: list[str]) -> tuple[list[Trace], list[TurnError]]:
    """The traces of the files, and one error per line or item that could not be read
    (named by file and line): the rest is replayed, as a store's unreadable trace is. The
    first ``MAX_ERRORS_PER_FILE`` of a file are kept, the rest counted in one more."""
    from ctxcore.cli.check import load_checked
    from ctxcore.settings import MAX_ERRORS_PER_FILE

    bad: list[InputError | str] = []
    per_file: dict[str, int] = {}

    def said(name: str, exc: InputError) -> None:
        n = per_file[name] = per_file.get(name, 0) + 1
        if n <= MAX_ERRORS_PER_FILE:
            bad.append(exc)

    traces = [c.trace for c in load_checked(paths, errors=said)]
    if not traces and bad:
        raise InputError(f"no trace could be read; the first error: {bad[0]}")
    for name, n in per_file.items():
        if n > MAX_ERRORS_PER_FILE:
            bad.append(f"{name}: {n - MAX_ERRORS_PER_FILE:,} more bad lines not listed")
    return traces, [
        TurnError(session_id="", turn=-1, trace_id="", side="read", message=str(e)) for e in bad
    ]


def settings_from(preset: str | None, config: str | None, sets: list[str] | None) -> dict[str, Any]:
    """The patch ``--preset``, ``--config`` and ``--set`` make (later ones win)."""
    out: dict[str, Any] = {}
    if config:
        # only what the file sets: an unset preset must not reset every trace to the default
        out.update(load_config(config).model_dump(exclude_unset=True, exclude_none=True))
    if preset:
        out["preset"] = preset
    out.update(parse_set(sets or []))
    return out


def _losses(t: TurnReport) -> str:
    counts = {s: len([f for f in t.flips if f.loss == s]) for s in ("error", "warning", "info")}
    return ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "-"


def print_table(report: ReplayReport, out: TextIO) -> None:
    """The report as ``replay`` prints it by default: what was compared, each changed turn
    with the packets it loses, the totals, the items whose first lost turn moved, the turns
    that could not be compared and the findings by detector (each section its function)."""
    for section in (_head, _changed, _totals, _first_lost, _not_compared, _by_detector):
        section(report, out.write)


def _head(report: ReplayReport, w: Callable[[str], object]) -> None:
    """The two settings compared, how many turns changed, and the changed turns' header."""
    w(f"before: {report.before}\nafter:  {report.after}\n\n")
    changed = report.changed_turns
    w(
        f"{len(report.turns)} turn(s), {len(changed)} changed ({CHANGED_MEANS}), "
        f"{report.seconds:.2f} s\n"
    )
    if changed:
        w(
            f"{'session':<28} {'turn':>4} {'used before':>11} {'after':>7} {'budget':>13} "
            f"{'flips':>5}  {'losses':<24} findings\n"
        )
        w(f"{'':<34}(under a turn, each packet it loses: status before → after)\n")


def _changed(report: ReplayReport, w: Callable[[str], object]) -> None:
    """A row per changed turn, and under it a line per packet the turn loses."""
    for t in report.changed_turns:
        budget = (
            f"{t.budget_before}"
            if t.budget_before == t.budget_after
            else f"{t.budget_before}→{t.budget_after}"
        )
        found = f"+{len(t.findings_added)} -{len(t.findings_cleared)}"
        w(
            f"{t.session_id[:28]:<28} {t.turn:>4} {t.used_before:>11} {t.used_after:>7} "
            f"{budget:>13} {len(t.flips):>5}  {_losses(t):<24} {found}\n"
        )
        for f in t.flips:
            if f.loss is not None:
                mark = (
                    " must-keep" if f.must_keep else " error evidence" if f.error_evidence else ""
                )
                w(f"{'':<34}{f.loss:<8} {f.packet_id}: {f.before} → {f.after}{mark}\n")


def _turn_list(turns: list[TurnReport]) -> str:
    """The first 12 turns as ``session:turn``, comma-separated."""
    return ", ".join(f"{t.session_id}:{t.turn}" for t in turns[:12])


def _totals(report: ReplayReport, w: Callable[[str], object]) -> None:
    """The turns whose findings alone differ, the tokens spent or saved, and the turns that
    lose a must-keep packet or error evidence."""
    same = report.findings_only_turns
    if same:
        more = f" and {len(same) - 12} more" if len(same) > 12 else ""
        w(f"same context, other findings: {len(same)} turn(s) ({_turn_list(same)}{more})\n")
    delta = report.tokens_delta
    w(f"\ntokens: {'spent' if delta > 0 else 'saved'} {abs(delta):,} over all turns\n")
    must = report.turns_losing_must_keep
    w(
        f"turns losing a must-keep packet or error evidence: {len(must)}"
        + (f" ({_turn_list(must)})" if must else "")
        + "\n"
    )


def _first_lost(report: ReplayReport, w: Callable[[str], object]) -> None:
    """Each item whose first lost turn differs before and after."""
    moved = [x for x in report.first_lost if x.before_turn != x.after_turn]
    if moved:
        w(f"first turn lost ({FIRST_LOST_MEANS}):\n")
        for x in moved:
            b = "never" if x.before_turn is None else str(x.before_turn)
            a = "never" if x.after_turn is None else str(x.after_turn)
            w(f"  {x.session_id}: {x.item[:80]}: {b} → {a}\n")


def _not_compared(report: ReplayReport, w: Callable[[str], object]) -> None:
    """The turns (or unread lines) that could not be compared, the first 40, and why."""
    if report.errors:
        w(f"turns not compared ({len(report.errors)}):\n")
        for e in report.errors[:40]:
            where = f"{e.session_id}:{e.turn}" if e.turn >= 0 else "(unread)"
            ident = f" {e.trace_id}" if e.trace_id else ""  # a file's line names itself
            w(f"  {where}{ident}: {e.side} failed: {e.message}\n")
        if len(report.errors) > 40:
            w(f"  … and {len(report.errors) - 40} more\n")


def _by_detector(report: ReplayReport, w: Callable[[str], object]) -> None:
    """The findings of each detector before and after, when findings were compared."""
    if report.findings_compared:
        dets = sorted({*report.findings_before, *report.findings_after})
        w("findings by detector (before → after):" + ("" if dets else " none") + "\n")
        for d in dets:
            w(f"  {d}: {report.findings_before.get(d, 0)} → {report.findings_after.get(d, 0)}\n")


def _note(why: str) -> None:
    print(f"note: {why}", file=sys.stderr)


def _save(db: str, report: ReplayReport) -> None:
    """The variants into the store; while the app writes it, into the folder it watches (as
    ``ctxscope import`` does), which it ingests."""
    try:
        store = open_store(db)
    except StoreLockedError as exc:
        folder = app_folder(Path(db))
        if folder is None:
            raise InputError(
                f"{exc}; no ctxscope app is serving this store, so the variants cannot be "
                "saved: stop that process and replay with --save again"
            ) from exc
        digest = hashlib.sha1(
            "\0".join(v.trace_id for v in report.variants).encode("utf-8")
        ).hexdigest()[:10]
        out = folder / f"replay-{digest}.jsonl"
        write_jsonl(report.variants, out)
        print(
            f"ctxscope replay: the store is in use by the ctxscope app; wrote "
            f"{len(report.variants)} variant(s) tagged {REPLAY_TAG!r} to {out}, the folder "
            "that app watches: it ingests them from there",
            file=sys.stderr,
        )
        return
    with store:
        # a variant id names (recording, settings); its timings differ run to run, so one
        # already stored is kept as it is rather than refused as different content
        new = [v for v in report.variants if store.get_trace(v.trace_id) is None]
        added = store.add_traces(new, source="replay") if new else 0
    print(
        f"ctxscope replay: saved {added} new variant(s) tagged {REPLAY_TAG!r} "
        f"({len(report.variants) - added} already stored)",
        file=sys.stderr,
    )


def policies_from(
    presets: list[str], config: str | None, sets: list[str] | None
) -> list[dict[str, Any]]:
    """One settings patch per ``--preset`` (docs/design.md, "Evaluating policies"): each
    ``--set`` goes to every preset that takes the knob (the input's window and output
    reserve to all); a knob none of them takes is an error naming them."""
    from ctxcore.knobs import honoured
    from ctxcore.replay.variants import INPUT_FACTS

    patch = settings_from(None, config, sets)
    unused = [
        k for k in patch if k not in INPUT_FACTS and all(k not in honoured(p) for p in presets)
    ]
    if unused:
        raise InputError(
            f"--set {', '.join(unused)}: none of the presets {', '.join(presets)} takes it"
        )
    return [
        {"preset": p, **{k: v for k, v in patch.items() if k in INPUT_FACTS or k in honoured(p)}}
        for p in presets
    ]


def run_evaluation(args: argparse.Namespace, out: TextIO) -> int:
    """``replay FILE... --preset P [--preset Q ...] [--json]``: the recording and each
    policy side by side (``ctxcore.replay.evaluate``) on any file an import reads; exit 0
    (a comparison gates nothing)."""
    from ctxcore.cost import price_table
    from ctxcore.replay.evaluate import evaluate, table

    if not args.files:
        raise InputError("policies are compared on trace files: give them (FILE...)")
    if not args.preset:
        raise InputError("name the policies to evaluate: --preset P (repeat for more)")
    from ctxcore.formats.load import load_file

    prices = price_table(Path(args.prices) if args.prices else None)
    # any file an import reads: a ctxscope trace file, or an agent's log as it was written
    skipped: list[str] = []
    traces = [t for f in args.files for t in load_file(f, skipped=skipped.append)]
    scores = evaluate(
        traces, policies_from(args.preset, args.config, args.set), prices, workers=args.workers
    )
    if args.json:
        doc = {"policies": [s.as_json() for s in scores], "skipped": skipped}
        out.write(json.dumps(doc, ensure_ascii=False) + "\n")
    else:
        out.write(table(scores))
    return 0


def _checked_source(args: argparse.Namespace) -> None:
    """Refuse a bad ``--fail-on``, and anything but trace files or one store selection."""
    if args.fail_on not in FAIL_ON:
        raise InputError(f"--fail-on {args.fail_on!r}: choose one of {', '.join(FAIL_ON)}")
    from_store = bool(args.session or args.tag or args.all)
    if args.files and from_store:
        raise InputError("give trace files or one of --session/--tag/--all, not both")
    if not args.files and not from_store:
        raise InputError("choose what to replay: --session ID, --tag T, --all or trace files")


def _report(args: argparse.Namespace, settings: dict[str, Any]) -> ReplayReport:
    """The replay of the trace files or of the store's selection with ``settings``."""
    against: dict[str, Any] | None = None
    if args.against_config or args.against_set:
        against = settings_from(None, args.against_config, args.against_set)
    options: dict[str, Any] = {
        "against": against,
        "findings": not args.no_findings,
        "workers": args.workers,
        "keep_variants": args.save,
    }
    if args.files:
        traces, unread = _from_files(list(args.files))
        report = replay(traces, settings, **options)
        if unread:
            report = report.model_copy(update={"errors": unread + report.errors})
        return report
    # read-only (a copy while another process, the app, writes it: docs/design.md,
    # "Store"), and closed before --save opens it to write
    with read_store(args.db, note=_note) as store:
        if args.session:
            stored = _session_json(store, args.session, args.tag, not args.no_findings)
            if not stored:
                raise InputError(f"{args.db}: no traces in session {args.session!r}")
            # one session is one job: replayed here, as ``replay`` does
            return replay_sessions([stored], settings, **{**options, "workers": 1})
        sessions = _sessions(store, args.tag, not args.no_findings)
        first = next(sessions, None)
        if first is None:
            what = f"with tag {args.tag!r}" if args.tag else "in the store"
            raise InputError(f"{args.db}: no traces {what}")
        return replay_sessions(itertools.chain([first], sessions), settings, **options)


def run_replay(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    _checked_source(args)
    if args.json or len(args.preset or []) > 1:
        return run_evaluation(args, out)
    settings = settings_from(args.preset[0] if args.preset else None, args.config, args.set)
    report = _report(args, settings)
    if args.format == "json":
        out.write(json.dumps(report.model_dump(mode="json"), ensure_ascii=False) + "\n")
    else:
        print_table(report, out)
    if args.save:
        _save(args.db, report)
    if args.fail_on == "never":
        return 0
    losses = report.losses(args.fail_on)
    failed = report.new_failures  # a build that fails only after the change loses everything
    if losses or failed:
        turns = {(t.session_id, t.turn) for t, _ in losses} | {
            (e.session_id, e.turn) for e in failed
        }
        said = f"{len(losses)} loss(es) at {args.fail_on} or above"
        if failed:
            said += f" and {len(failed)} build(s) that fail only with the new settings"
        print(f"ctxscope replay: {said} in {len(turns)} turn(s)", file=sys.stderr)
        return 1
    return 0


def cli_replay(args: argparse.Namespace) -> int:
    """``ctxscope replay (--session ID | --tag T | --all | FILE...) [settings] [--fail-on]``."""
    return run_replay(args)
