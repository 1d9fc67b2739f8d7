"""``ctxscope migrate``: bring a store's schema up to date, saying what ran (docs/design.md,
"Store"). Every other command migrates a store it writes on open; this one is for the store's
owner, before the readers (a read-only open refuses an out-of-date schema) and before writers
that may not change the schema."""

from __future__ import annotations

import argparse

from ctxcore.store.engines import migrate_store, shown


def cli_migrate(args: argparse.Namespace) -> int:
    """``ctxscope migrate [--db PATH|URL]``: one line per migration run, or that none was
    pending."""
    ran = migrate_store(args.db)
    where = shown(args.db)
    for step in ran:
        print(f"{where}: ran migration {step}")
    if not ran:
        print(f"{where}: up to date, no migration to run")
    return 0
