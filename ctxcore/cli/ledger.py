"""``ctxscope ledger PATH... [--preset P [--set k=v ...]] [--json]``: what each compaction
kept and lost (docs/design.md, "Compaction ledger").

PATHs are trace files or any file ``ctxscope import`` reads. By default, per compaction: its
session, the turns around it, the importer's label, then each item lost (its kind, its text,
the turn that next needed it) and a count of those kept; ``--json`` writes one JSON object per
compaction instead (``Entry.as_json``). A file with no compaction says so on stderr. With
``--preset`` (and ``--set``/``--config``, routed as ``replay``'s policy comparison routes
them) the files' recorded calls are replayed with that policy and the ledger is of the
policy's own compactions (``replay.compactions``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from ctxcore.errors import InputError
from ctxcore.ledger import Entry, ledger
from ctxcore.models import Trace


def _lines(e: Entry) -> list[str]:
    """An entry as the text ``ctxscope ledger`` prints."""
    before = "no call" if e.before_turn is None else f"turn {e.before_turn}"
    out = [
        f"session {e.session_id}: {e.label}, between {before} and turn {e.turn}: "
        f"{len(e.kept)} item(s) kept, {len(e.lost)} lost"
    ]
    for i in e.lost:
        need = (
            f"next needed at turn {i.needed_turn} (its {i.needed_in})"
            if i.needed_turn is not None
            else "not needed again"
        )
        out.append(f"  lost {i.kind}: {i.text[:120]!r}, {need}")
    return out


def policy_entries(traces: list[Trace], settings: dict[str, Any]) -> list[Entry]:
    """The ledger of the compactions the policy ``settings`` names makes on ``traces``' recorded
    calls (replayed; a call the policy could not rebuild is said on stderr)."""
    from ctxcore.replay.compactions import ledger_of_policy
    from ctxcore.replay.evaluate import label
    from ctxcore.replay.run import replay

    recorded = [t for t in traces if t.result is not None]
    report = replay(recorded, settings, findings=False, keep_variants=True)
    for e in report.errors:
        print(f"  not replayed: {e.session_id}:{e.turn}: {e.message}", file=sys.stderr)
    variants = {v.source_trace_id: v for v in report.variants if v.source_trace_id}
    return ledger_of_policy(recorded, variants, label(settings))


def run_ledger(
    paths: list[str],
    as_json: bool,
    out: TextIO | None = None,
    settings: dict[str, Any] | None = None,
) -> int:
    """Print the ledger of the traces ``paths`` hold (with ``settings``, of that policy's
    compactions); 0, or 1 when no file held a compaction."""
    from ctxcore.formats.load import load_file

    out = out or sys.stdout
    found = 0
    for name in paths:
        if Path(name).is_dir():
            raise InputError(f"{name}: is a folder; pass the files (e.g. {name}/*.jsonl)")
        traces = load_file(name)
        entries = ledger(traces) if settings is None else policy_entries(traces, settings)
        if not entries:
            what = "recorded" if settings is None else f"made by {settings['preset']}"
            print(f"{name}: no compaction {what}", file=sys.stderr)
        for e in entries:
            found += 1
            if as_json:
                print(json.dumps({"file": name, **e.as_json()}, ensure_ascii=False), file=out)
            else:
                print("\n".join([f"{name}:", *_lines(e)]), file=out)
    return 0 if found else 1


def cli_ledger(args: argparse.Namespace) -> int:
    """``ctxscope ledger PATH... [--preset P [--set k=v ...]] [--json]``."""
    settings = None
    if args.preset:
        from ctxcore.cli.replay import policies_from

        settings = policies_from([args.preset], args.config, args.set)[0]
    elif args.set or args.config:
        raise InputError("--set and --config name a policy's knobs: give the policy, --preset P")
    return run_ledger(list(args.paths), bool(args.json), settings=settings)
