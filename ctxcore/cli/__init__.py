"""The ``ctxscope`` command line (also ``python -m ctxcore``).

This module only parses arguments and translates: each command calls into the module
that owns the work. Errors we raise on purpose (``CtxscopeError``) are printed as one
line on stderr with a non-zero exit; anything else is a bug and propagates.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxcore import __version__, settings
from ctxcore.errors import CtxscopeError, InputError
from ctxcore.formats import registry

if TYPE_CHECKING:
    from ctxcore.models import CapturedInput, Config, Trace


def parse_set(pairs: Sequence[str]) -> dict[str, Any]:
    """``key=value`` pairs; values are read as JSON when they parse, else as strings."""
    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise InputError(f"--set {pair!r}: expected key=value (e.g. --set max_tokens=4000)")
        key, raw = pair.split("=", 1)
        key = key.strip()
        if not key:
            raise InputError(f"--set {pair!r}: the key is empty")
        value: Any
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        except RecursionError as exc:
            from ctxcore.loading import too_deep

            raise too_deep(f"--set {key}") from exc
        if isinstance(value, float) and value != value:  # NaN: keep the literal text
            value = raw
        out[key] = value
    return out


def _build_source(
    path: str, trace_id: str | None
) -> tuple[CapturedInput, Config | None, Trace | None]:
    """The captured input, config and trace ``build`` starts from: a trace file, a bare
    input, or one trace of a snapshot (``ctxscope export``; ``--trace`` picks which when it
    holds several)."""
    from ctxcore.formats.load import traces_from_snapshot_or_trace
    from ctxcore.loading import load_input_or_trace, parse_json, read_text

    data = parse_json(read_text(Path(path)), path)
    if not (isinstance(data, dict) and "format" in data and "schema" not in data):
        if trace_id is not None:
            raise InputError(f"{path} holds one trace or input; --trace picks from a snapshot")
        return load_input_or_trace(path)
    traces = traces_from_snapshot_or_trace(data, path)
    ids = [t.trace_id for t in traces]
    if trace_id is None and len(traces) == 1:
        t = traces[0]
    elif trace_id is None:
        raise InputError(
            f"{path} is a snapshot of {len(traces)} traces; pick one with --trace "
            f"(ids: {', '.join(ids[:10])}{' …' if len(ids) > 10 else ''})"
        )
    else:
        found = [t for t in traces if t.trace_id == trace_id]
        if not found:
            raise InputError(f"{path} holds no trace {trace_id!r}; it holds {', '.join(ids[:10])}")
        t = found[0]
    return t.input, t.config, t


def cmd_build(args: argparse.Namespace) -> int:
    from ctxcore.loading import config_from_obj, input_from_obj, load_config
    from ctxcore.pipeline import build_trace, check_input_facts

    inp, trace_cfg, trace = _build_source(args.file, getattr(args, "trace", None))
    base: dict[str, Any] = {}
    if trace_cfg is not None:
        base = trace_cfg.model_dump(exclude_none=True)
    if args.config:
        base.update(load_config(args.config).model_dump(exclude_none=True))
    if args.preset:
        if trace_cfg is not None and trace_cfg.preset != args.preset and not args.config:
            # Another preset's resolved knobs do not carry over; start from its defaults.
            base = {}
        base["preset"] = args.preset
    sets = parse_set(args.set or [])
    # the window and output reserve are facts of the model call (the captured input), not
    # builder knobs, but --set is where a user looks for them
    facts = {k: sets.pop(k) for k in ("window", "output_reserve") if k in sets}
    if facts:
        inp = input_from_obj({**inp.model_dump(mode="json"), **facts}, "input (after --set)")
        if "window" in facts and "max_tokens" not in sets:
            base.pop("max_tokens", None)  # the budget follows the new window
        if "output_reserve" in facts:
            base.pop("output_reserve", None)  # a recorded config's reserve would win over it
    base.update(sets)
    cfg: Config = config_from_obj(base, "config (after --config/--preset/--set)")
    check_input_facts(cfg.preset, facts, f"--set {', '.join(facts)}")
    out = build_trace(
        inp,
        cfg,
        session_id=trace.session_id if trace else "cli",
        turn=trace.turn if trace else 0,
        tags=list(trace.tags) if trace else [],
        source_trace_id=trace.trace_id if trace else None,
    )
    sys.stdout.write(out.to_json() + "\n")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    """``ctxscope replay``. A replay of a store (``--all``, ``--tag``) on more than one
    worker starts the workers' fork server first, before the replay's own imports and the
    reading of the store, which its imports then overlap (``ctxcore.replay.pool``)."""
    from ctxcore.processes import check_workers
    from ctxcore.replay.pool import default_workers, start_workers

    store_wide = (args.all or args.tag) and not args.session and not args.files
    workers = check_workers(args.workers) if args.workers is not None else default_workers()
    if store_wide and workers > 1:
        start_workers(not args.no_findings)
    from ctxcore.cli.replay import cli_replay

    return cli_replay(args)


def _lazy(module: str, func: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        from importlib import import_module

        fn: Callable[[argparse.Namespace], int] = getattr(
            import_module(f"ctxcore.cli.{module}"), func
        )
        return fn(args)

    return run


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ctxscope", description="See and fix what an LLM agent puts into its context."
    )
    p.add_argument(
        "--version", action="version", version=f"ctxscope {__version__}", help="print the version"
    )
    sub = p.add_subparsers(dest="command", required=True)
    # $CTXSCOPE_DB / $CTXSCOPE_TRACES, else traces/ctxscope.duckdb and traces/
    db, traces = str(settings.db_path()), str(settings.traces_dir())

    a = sub.add_parser("app", help="start the debugger (binds 127.0.0.1)")
    a.add_argument("--db", default=db)
    a.add_argument("--traces", default=traces)
    a.add_argument("--port", type=int, default=settings.DEFAULT_PORT)
    a.add_argument("--host", default=settings.DEFAULT_HOST)
    a.add_argument("--token", default=None, help="required with a non-loopback --host")
    a.add_argument(
        "--otlp",
        type=int,
        nargs="?",
        const=settings.DEFAULT_OTLP_PORT,
        default=None,
        metavar="PORT",
        help="also receive OpenTelemetry GenAI spans (OTLP/HTTP on 127.0.0.1, "
        f"default port {settings.DEFAULT_OTLP_PORT}) into the watched folder",
    )
    a.set_defaults(func=_lazy("app", "cmd_app"))

    b = sub.add_parser(
        "build", help="run the pipeline on a captured input, a trace or an exported snapshot"
    )
    b.add_argument("file")
    b.add_argument("--trace", help="which trace of a snapshot of several (its id)")
    b.add_argument("--preset", choices=list(settings.PRESET_NAMES))
    b.add_argument("--config")
    b.add_argument("--set", action="append", metavar="KEY=VALUE")
    b.set_defaults(func=cmd_build)

    i = sub.add_parser("ingest", help="ingest trace files into the store")
    i.add_argument("paths", nargs="+")
    i.add_argument("--db", default=db)
    i.add_argument(
        "--defer-diagnostics",
        action="store_true",
        help="store findings later (the app's watcher computes them when idle): a big "
        "ingest is then several times faster",
    )
    i.set_defaults(func=_lazy("ingest", "cli_ingest"))

    w = sub.add_parser("watch", help="watch a folder and ingest new/appended files")
    w.add_argument("dir", nargs="?", default=traces)
    w.add_argument("--db", default=db)
    w.set_defaults(func=_lazy("ingest", "cli_watch"))

    e = sub.add_parser("export", help="export a trace or session")
    e.add_argument("trace_id", nargs="?")
    e.add_argument("--session")
    e.add_argument("--format", choices=["json", "html", "otlp"], default="json")
    e.add_argument("-o", "--output")
    e.add_argument("--no-redact", action="store_true", help="keep secrets (not recommended)")
    e.add_argument("--db", default=db)
    e.set_defaults(func=_lazy("exchange", "cli_export"))

    im = sub.add_parser(
        "import",
        help="import model requests, session logs, OTLP or snapshots (--format lists them)",
        epilog="formats (auto detects them):\n" + registry.help_lines(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    im.add_argument("paths", nargs="+", metavar="PATH", help="files, folders or glob patterns")
    im.add_argument("--format", choices=list(registry.NAMES), default=registry.AUTO)
    im.add_argument("--db", default=db)
    im.add_argument("-o", "--output", help="write the trace JSON here instead of the store")
    im.add_argument("--window", type=int, help="the model's context window, if the file lacks it")
    im.add_argument("--model", help="the model that served the request (sets the window)")
    im.set_defaults(func=_lazy("exchange", "cli_import"))

    d = sub.add_parser("demo", help="(re)generate the demo traces from the corpus")
    d.add_argument("--out", default=str(settings.DEMO_DIR))
    d.add_argument("--corpus", default=None)
    d.add_argument("--db", default=db)
    d.set_defaults(func=_lazy("demo", "cli_demo"))

    c = sub.add_parser("check", help="run the diagnostics; non-zero exit on findings")
    c.add_argument("files", nargs="+")
    c.add_argument("--fail-on", choices=["info", "warning", "error"], default="error")
    c.set_defaults(func=_lazy("check", "cli_check"))

    rp = sub.add_parser(
        "replay",
        help="re-run a session, tag, the store or trace files with new settings; "
        "non-zero exit when something kept before is lost",
    )
    rp.add_argument("files", nargs="*", metavar="FILE", help="trace files instead of the store")
    which = rp.add_mutually_exclusive_group()
    which.add_argument("--session", help="every turn of one stored session")
    which.add_argument("--tag", help="every stored trace with this tag")
    which.add_argument("--all", action="store_true", help="every stored trace")
    rp.add_argument("--preset", choices=list(settings.PRESET_NAMES))
    rp.add_argument("--config", help="a config file patched over each recorded config")
    rp.add_argument("--set", action="append", metavar="KEY=VALUE")
    against = rp.add_mutually_exclusive_group()
    against.add_argument("--against-config", help="compare with this config, not the recording")
    against.add_argument("--against-set", action="append", metavar="KEY=VALUE")
    rp.add_argument("--db", default=db)
    rp.add_argument("--format", choices=["table", "json"], default="table")
    rp.add_argument(
        "--fail-on",
        choices=["info", "warning", "error", "never"],
        default="error",
        help="exit 1 on a loss this bad: error = must-keep or error evidence, warning = "
        "any packet that was in the prompt, info = squeezed too",
    )
    rp.add_argument("--save", action="store_true", help="store the variants, tagged replay")
    rp.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes (default: one per CPU; at most 32, or one per CPU where that is more)",
    )
    rp.add_argument(
        "--no-findings", action="store_true", help="skip the diagnostics (several times faster)"
    )
    rp.set_defaults(func=cmd_replay)

    up_help = f"where OpenAI calls go (default {settings.DEFAULT_UPSTREAM_OPENAI})"
    ua_help = f"where Anthropic calls go (default {settings.DEFAULT_UPSTREAM_ANTHROPIC})"
    px = sub.add_parser("proxy", help="record every model call an agent makes (API proxy)")
    px.add_argument("--port", type=int, default=settings.DEFAULT_PROXY_PORT)
    px.add_argument("--traces", default=traces)
    px.add_argument("--upstream-openai", help=up_help)
    px.add_argument("--upstream-anthropic", help=ua_help)
    px.add_argument("--timeout", type=float, default=600.0, help="seconds an upstream may stall")
    px.set_defaults(func=_lazy("live", "cmd_proxy"))

    r = sub.add_parser("run", help="run a command with its model calls recorded: run -- CMD")
    r.add_argument("--proxy-port", type=int, default=settings.DEFAULT_PROXY_PORT)
    r.add_argument("--traces", default=traces, help="for the proxy it starts")
    r.add_argument("--upstream-openai", help=f"for the proxy it starts; {up_help}")
    r.add_argument("--upstream-anthropic", help=f"for the proxy it starts; {ua_help}")
    r.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS")
    r.set_defaults(func=_lazy("live", "cmd_run"))

    co = sub.add_parser("collect", help="receive OpenTelemetry GenAI spans (OTLP/HTTP)")
    co.add_argument("--port", type=int, default=settings.DEFAULT_OTLP_PORT)
    co.add_argument("--traces", default=traces)
    co.set_defaults(func=_lazy("live", "cmd_collect"))

    t = sub.add_parser("tune", help="search the ctxscope knobs for the best context recall")
    t.add_argument("sessions", nargs="*", help="corpus session files (default: all of them)")
    t.add_argument("--corpus", default="corpus")
    t.add_argument("--budget", type=int, default=8000, help="max_tokens (default 8,000)")
    t.add_argument("--max-steps", type=int, default=8, help="steps per session (default 8)")
    t.add_argument("--rounds", type=int, default=1)
    t.add_argument("--show-missed", type=int, default=10)
    t.add_argument("-o", "--output", default="ctxscope-tuned.json")
    t.set_defaults(func=_lazy("tune", "cli_tune"))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        rc: int = args.func(args)
        return rc
    except CtxscopeError as exc:
        print(f"ctxscope {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
