"""``ctxscope demo``: regenerate the demo traces from the corpus and load them into the store."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ctxcore import settings
from ctxcore.demo.build import DEFAULT_CORPUS, generate


def corpus_arg(given: str | None) -> Path:
    """The corpus a command reads (``demo``, ``tune``): ``--corpus`` if given, else
    ``$CTXSCOPE_CORPUS``, else the corpus/ folder of the source tree."""
    return Path(given) if given else settings.corpus_dir(DEFAULT_CORPUS)


def cli_demo(args: argparse.Namespace) -> int:
    """``ctxscope demo [-o DIR] [--corpus DIR] [--db PATH]``.

    Writes the session files, then loads them into the store. When the app owns the store,
    the files are already where its watcher looks, so that is said and not an error.
    """
    paths = generate(corpus_arg(args.corpus), Path(args.output))
    total = 0
    for p in paths:
        n = p.read_text(encoding="utf-8").count("\n")
        total += n
        print(f"{p}  {n} traces")
    print(f"{total} traces in {len(paths)} sessions")
    db = getattr(args, "db", None)
    if not db:
        return 0
    from ctxcore.errors import StoreLockedError
    from ctxcore.store.engines import open_store
    from ctxcore.store.ingest import format_counts, format_error, ingest_paths

    try:
        with open_store(db) as store:
            counts = ingest_paths(store, [str(p) for p in paths], complete_tail=True)
    except StoreLockedError as exc:
        print(
            f"{exc}\nthe demo files are written to {args.output}: a running app ingests them "
            "if that is inside its watched folder, else copy them there",
            file=sys.stderr,
        )
        return 0
    print(f"store {db}: {format_counts(counts)}")
    for e in counts.error_rows:
        print(format_error(e), file=sys.stderr)
    return 1 if counts.errors else 0
