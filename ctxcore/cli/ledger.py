"""``ctxscope ledger PATH... [--json]``: what each recorded compaction kept and lost
(docs/design.md, "Compaction ledger").

PATHs are trace files or any file ``ctxscope import`` reads. By default, per compaction: its
session, the turns around it, the importer's label, then each item lost (its kind, its text,
the turn that next needed it) and a count of those kept; ``--json`` writes one JSON object per
compaction instead (``Entry.as_json``). A file with no compaction says so on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

from ctxcore.errors import InputError
from ctxcore.ledger import Entry, ledger


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


def run_ledger(paths: list[str], as_json: bool, out: TextIO | None = None) -> int:
    """Print the ledger of the traces ``paths`` hold; 0, or 1 when no file held a compaction."""
    from ctxcore.formats.load import load_file

    out = out or sys.stdout
    found = 0
    for name in paths:
        if Path(name).is_dir():
            raise InputError(f"{name}: is a folder; pass the files (e.g. {name}/*.jsonl)")
        entries = ledger(load_file(name))
        if not entries:
            print(f"{name}: no compaction recorded", file=sys.stderr)
        for e in entries:
            found += 1
            if as_json:
                print(json.dumps({"file": name, **e.as_json()}, ensure_ascii=False), file=out)
            else:
                print("\n".join([f"{name}:", *_lines(e)]), file=out)
    return 0 if found else 1


def cli_ledger(args: argparse.Namespace) -> int:
    """``ctxscope ledger PATH... [--json]``."""
    return run_ledger(list(args.paths), bool(args.json))
