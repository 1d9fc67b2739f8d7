"""``ctxscope migrate`` and ``ctxscope token``: a store's schema brought up to date, saying
what ran, and the people's tokens of a team store (docs/design.md, "Store").

Every other command migrates a store it writes on open; ``migrate`` is for the store's owner,
before the readers (a read-only open refuses an out-of-date schema), before writers that may
not change the schema, and to make the app's read-only role on a team store."""

from __future__ import annotations

import argparse
import sys

from ctxcore.errors import InputError
from ctxcore.store.engines import is_server, migrate_store, shown


def cli_migrate(args: argparse.Namespace) -> int:
    """``ctxscope migrate [--db PATH|URL] [--move FILE.duckdb]``: one line per migration run,
    or that none was pending; then, with ``--move``, the file's traces moved in."""
    ran = migrate_store(args.db)
    where = shown(args.db)
    for step in ran:
        print(f"{where}: ran migration {step}")
    if not ran:
        print(f"{where}: up to date, no migration to run")
    if is_server(args.db):
        from ctxcore.store.pgaccess import READER_ROLE

        print(
            f"{where}: role {READER_ROLE} may read every table (SELECT only); the app reads as it"
        )
    if args.move is not None:
        return _move(args.move, args.db)
    return 0


def _move(source: str, db: str) -> int:
    """``migrate --move FILE.duckdb``: the file's traces into ``db`` (``store.moving``); exit
    1 when a trace could not go in (each said on stderr)."""
    from pathlib import Path

    from ctxcore.store.engines import open_store
    from ctxcore.store.moving import move_traces

    if is_server(source) or not Path(source).is_file():
        raise InputError(
            f"--move {shown(source)}: give a DuckDB store file to move into --db (it is read, "
            "never changed)"
        )
    if Path(source).resolve() == Path(db).resolve():
        raise InputError(f"--move {source}: that is the --db store itself")
    from ctxcore import settings

    with open_store(source, read_only=True) as src, open_store(db) as dst:
        moved = move_traces(
            src,
            dst,
            origin=source,
            # into a team store, on unless --no-redact (cli._team_redaction), as ingest's
            redact=settings.redact_on_ingest(),
            progress=lambda done, total: print(
                f"\r{done:,}/{total:,} traces", end="", file=sys.stderr, flush=True
            ),
        )
    print(file=sys.stderr)
    print(
        f"{shown(db)}: moved {moved.added:,} traces from {source} "
        f"({moved.skipped:,} were there already)"
    )
    for tid, src_file in moved.conflicts:
        print(
            f"trace_id {tid!r} is already stored (from {src_file}) with different content; "
            "kept as it was",
            file=sys.stderr,
        )
    for tid, why in moved.refused:
        print(f"trace_id {tid!r} {why}", file=sys.stderr)
    return 1 if moved.conflicts or moved.refused else 0


def _team(db: str) -> str:
    if not is_server(db):
        raise InputError(
            f"--db {db}: tokens belong to a team store (postgresql://…); an app on a DuckDB "
            "file takes one --token"
        )
    return db


def cli_token(args: argparse.Namespace) -> int:
    """``ctxscope token add NAME | revoke NAME | list --db URL``: a person's access to the app
    on a team store (docs/design.md, "Store", access)."""
    from ctxcore.store import pgaccess

    db = _team(args.db)
    if args.action != "list" and not args.name:
        raise InputError(f"ctxscope token {args.action}: whose token? give a NAME")
    if args.action == "add":
        token = pgaccess.add_token(db, args.name)
        print(token)
        print(
            f"ctxscope token: the token of {args.name!r}, shown this once (only its digest is "
            "stored); give it to them: the app asks for it",
            file=sys.stderr,
        )
    elif args.action == "revoke":
        pgaccess.revoke_token(db, args.name)
        print(f"{shown(db)}: the token of {args.name!r} is revoked; the app refuses it now")
    else:
        for row in pgaccess.list_tokens(db):
            state = f"revoked {row.revoked_at:%Y-%m-%d %H:%M}" if row.revoked_at else "live"
            print(f"{row.name}\tmade {row.created_at:%Y-%m-%d %H:%M}\t{state}")
    return 0
