"""The ``ctxscope`` command line (also ``python -m ctxcore``).

This module only parses arguments and translates: each command calls into the module
that owns the work. Errors we raise on purpose (``CtxscopeError``) are printed as one
line on stderr with a non-zero exit; anything else is a bug and propagates.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias

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
    from ctxcore.loading import (
        holds_shared,
        load_input_or_trace,
        parse_json,
        read_text,
        shared_traces,
    )

    text = read_text(Path(path))
    if holds_shared(text):  # `import -o` writes shared lines; --trace picks one of several
        traces = shared_traces(text, Path(path))
        return _picked(path, traces, trace_id, "a file")
    data = parse_json(text, path)
    if not (isinstance(data, dict) and "format" in data and "schema" not in data):
        if trace_id is not None:
            raise InputError(f"{path} holds one trace or input; --trace picks from a snapshot")
        return load_input_or_trace(path)
    return _picked(path, traces_from_snapshot_or_trace(data, path), trace_id, "a snapshot")


def _picked(
    path: str, traces: list[Trace], trace_id: str | None, what: str
) -> tuple[CapturedInput, Config | None, Trace | None]:
    """The trace ``--trace`` names among ``traces`` (the only one when it names none)."""
    ids = [t.trace_id for t in traces]
    if trace_id is None and len(traces) == 1:
        t = traces[0]
    elif trace_id is None:
        raise InputError(
            f"{path} is {what} of {len(traces)} traces; pick one with --trace "
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


# --------------------------------------------------------------------------- the parser
# docs/design.md, "Command line": each sub-command has a line in ``ctxscope --help`` and a
# description heading its own --help; each argument says what it does and its default, and
# names the environment variable a default comes from; one idea has one spelling (``-o/
# --output`` for what a command writes, ``--port`` for where it listens, ``--format`` for an
# output format only), and a renamed option keeps its old spelling, which parses as before.

#: the attribute of an option that lists its old spellings (``_renamed``)
_OLD = "ctxscope_old_spellings"

_Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written (their examples keep their lines), and an
    option listed by its current spellings only: its old ones still parse, and the
    command's epilog says so (``_renamed``)."""

    def _expand_help(self, action: argparse.Action) -> str:
        """An option's help with its default, a URL's password left out: ``--db``'s default
        is ``$CTXSCOPE_DB``, which may be a team store's URL holding one."""
        import re

        text = super()._expand_help(action)
        text = re.sub(r"(://[^/?#@:\s]*):[^/?#@\s]*@", r"\1@", text)
        return re.sub(r"([?&]password=)[^&\s]*", r"\1…", text)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        old: tuple[str, ...] = getattr(action, _OLD, ())
        if old:
            action = copy.copy(action)
            action.option_strings = [s for s in action.option_strings if s not in old]
        return super()._format_action_invocation(action)


def _renamed(
    parser: argparse.ArgumentParser, *names: str, old: str, **kwargs: Any
) -> argparse.Action:
    """An option spelled ``names`` that ``old``, its spelling before the command line gave
    each idea one, still sets: --help lists the new spelling and says the old one works."""
    action = parser.add_argument(*names, old, **kwargs)
    setattr(action, _OLD, (old,))
    note = f"{old} still works: the old spelling of {names[-1]}."
    parser.epilog = f"{parser.epilog}\n\n{note}" if parser.epilog else note
    return action


def _env(var: str) -> str:
    """What --help adds to a default that comes from an environment variable
    (``settings.ENVIRONMENT``): that the variable set it, or that it would."""
    return f"from ${var}" if os.environ.get(var, "").strip() else f"${var} changes it"


def _command(
    sub: _Subcommands,
    name: str,
    line: str,
    description: str,
    func: Callable[[argparse.Namespace], int],
) -> argparse.ArgumentParser:
    """A sub-command: its line in ``ctxscope --help``, the description that heads its own
    --help (a sentence or two and an example), and the function that runs it."""
    p = sub.add_parser(name, help=line, description=description, formatter_class=_HelpFormatter)
    p.set_defaults(func=func)
    return p


def _db(p: argparse.ArgumentParser, what: str, more: str = "") -> None:
    """``--db``: the store, from ``$CTXSCOPE_DB`` by default."""
    p.add_argument(
        "--db",
        default=settings.db_target(),
        metavar="PATH",
        help=f"{what}, a DuckDB file{more} or a postgresql:// URL (a team store) "
        f"(default %(default)s; {_env(settings.ENV_DB)})",
    )


def _team_db(p: argparse.ArgumentParser) -> None:
    """``--db`` of the live commands: a team store they feed what they capture into."""
    target = settings.db_target()
    p.add_argument(
        "--db",
        default=target if "://" in target else None,
        metavar="URL",
        help="a team store (postgresql://…) to ingest each captured call into as it is "
        "written, besides the file (default %(default)s: $CTXSCOPE_DB when it is a URL, "
        "else none; a DuckDB file is fed by the app or ctxscope watch)",
    )


def _no_redact(p: argparse.ArgumentParser) -> None:
    """``--no-redact`` of the commands that write a store: a team store redacts by default."""
    p.add_argument(
        "--no-redact",
        action="store_true",
        help="into a team store (postgresql://…), keep secrets as they are; it redacts them "
        f"by default (a file redacts with ${settings.ENV_REDACT_ON_INGEST}=1)",
    )


def _traces(p: argparse.ArgumentParser, what: str) -> None:
    """``--traces``: the watched folder, from ``$CTXSCOPE_TRACES`` by default."""
    p.add_argument(
        "--traces",
        default=str(settings.traces_dir()),
        metavar="DIR",
        help=f"{what} (default %(default)s; {_env(settings.ENV_TRACES)})",
    )


def _port(p: argparse.ArgumentParser, default: int, what: str) -> None:
    """``--port``: where a command listens (``run``: where its proxy listens)."""
    p.add_argument(
        "--port", type=int, default=default, metavar="N", help=f"{what} (default %(default)s)"
    )


def _settings(
    p: argparse.ArgumentParser, preset: str, set_note: str = "", *, many: bool = False
) -> None:
    """``--preset``, ``--config`` and ``--set``: the settings a build or replay uses
    (``many``: ``--preset`` may repeat)."""
    p.add_argument(
        "--preset",
        choices=list(settings.PRESET_NAMES),
        action="append" if many else "store",
        help=preset,
    )
    p.add_argument(
        "--config",
        metavar="FILE",
        help="a config file (JSON: a trace's config, or ctxscope tune's output) patched over "
        "the recorded one",
    )
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="set one knob, after --preset and --config (repeat for more; VALUE is read as "
        f"JSON, else as text): --set max_tokens=4000{set_note}; the knobs are in the "
        "README's Knobs table",
    )


def _upstreams(p: argparse.ArgumentParser, inherited: bool) -> None:
    """``--upstream-openai`` and ``--upstream-anthropic``: where the proxy forwards calls.
    ``run`` keeps a base URL its command already had (``inherited``)."""
    for api, name, env, default in (
        ("openai", "OpenAI", settings.ENV_OPENAI_BASE_URL, settings.DEFAULT_UPSTREAM_OPENAI),
        (
            "anthropic",
            "Anthropic",
            settings.ENV_ANTHROPIC_BASE_URL,
            settings.DEFAULT_UPSTREAM_ANTHROPIC,
        ),
    ):
        source = f"${env}, else {default}" if inherited else default
        p.add_argument(
            f"--upstream-{api}",
            metavar="URL",
            help=f"where the proxy sends {name} calls (default {source})",
        )


def _add_app(sub: _Subcommands) -> None:
    a = _command(
        sub,
        "app",
        "start the debugger in the browser (binds 127.0.0.1)",
        "Start the debugger: a local web app that shows the traces of the store and\n"
        "ingests every trace file written or copied into the folder it watches.\n\n"
        "example:\n"
        "  ctxscope app --traces ./traces --otlp   # and receive OpenTelemetry spans",
        _lazy("app", "cmd_app"),
    )
    _db(a, "the store it shows and ingests into")
    _traces(a, "the folder it watches: trace files that land there are ingested")
    _port(a, settings.DEFAULT_PORT, "the port it listens on")
    a.add_argument(
        "--host",
        default=settings.DEFAULT_HOST,
        metavar="ADDRESS",
        help="the address it binds (default %(default)s: this machine only); any other "
        "serves every trace to the network and needs --token",
    )
    a.add_argument(
        "--token",
        default=None,
        metavar="SECRET",
        help="the access token the app asks for (open it with ?token=SECRET); required with "
        f"a non-loopback --host (default: ${settings.ENV_TOKEN}, else none)",
    )
    a.add_argument(
        "--reader-url",
        default=None,
        metavar="URL",
        help="with a team store: the URL the app reads it by, a login that may only read "
        "(a member of ctxscope_reader); default %(default)s: --db's user, as ctxscope_reader",
    )
    a.add_argument(
        "--otlp",
        type=int,
        nargs="?",
        const=settings.DEFAULT_OTLP_PORT,
        default=None,
        metavar="PORT",
        help="also receive OpenTelemetry GenAI spans (OTLP/HTTP on 127.0.0.1) into the "
        "watched folder, on PORT (%(const)s when given without one; default: off)",
    )


def _add_build(sub: _Subcommands) -> None:
    b = _command(
        sub,
        "build",
        "run the pipeline on a captured input, a trace or an exported snapshot",
        "Build a context: run the pipeline on a captured input (what an agent had at one\n"
        "model call) and print the trace it makes, one JSON line. From a trace, or one of\n"
        "a snapshot (ctxscope export), it rebuilds the recorded input with the recorded\n"
        "config, changed by --preset, --config and --set in that order.\n\n"
        "example:\n"
        "  ctxscope build trace.json --set max_tokens=4000 > smaller.json",
        cmd_build,
    )
    b.add_argument(
        "file",
        metavar="FILE",
        help="a captured input, a trace, or a snapshot from ctxscope export (JSON)",
    )
    b.add_argument("--trace", metavar="ID", help="which trace of a snapshot of several (its id)")
    _settings(
        b,
        "the context builder; one other than the trace's starts from its own defaults "
        "(default: the trace's own, else ctxscope)",
        "; window and output_reserve set the captured input's own facts",
    )


def _add_ingest(sub: _Subcommands) -> None:
    i = _command(
        sub,
        "ingest",
        "ingest trace files into the store",
        "Ingest trace files (.jsonl, one trace a line; .json; .jsonl.gz) and folders of\n"
        "them into the store, with the diagnostics' findings. A trace already stored is\n"
        "not stored twice.\n\n"
        "example:\n"
        "  ctxscope ingest traces/live/ --db traces/ctxscope.duckdb",
        _lazy("ingest", "cli_ingest"),
    )
    i.add_argument("paths", nargs="+", metavar="PATH", help="trace files, or folders to search")
    _db(i, "the store to ingest into")
    _no_redact(i)
    i.add_argument(
        "--defer-diagnostics",
        action="store_true",
        help="store findings later (the app's watcher computes them when idle): a big "
        "ingest is then several times faster",
    )


def _add_watch(sub: _Subcommands) -> None:
    w = _command(
        sub,
        "watch",
        "watch a folder and ingest new/appended files",
        "Watch a folder and ingest trace files as they are written or appended to, until\n"
        "Ctrl-C: what the app does while it runs, without the app.\n\n"
        "example:\n"
        "  ctxscope watch traces/ --db traces/ctxscope.duckdb",
        _lazy("ingest", "cli_watch"),
    )
    w.add_argument(
        "dir",
        nargs="?",
        default=str(settings.traces_dir()),
        metavar="DIR",
        help=f"the folder to watch (default %(default)s; {_env(settings.ENV_TRACES)})",
    )
    _db(w, "the store to ingest into")
    _no_redact(w)


def _add_export(sub: _Subcommands) -> None:
    e = _command(
        sub,
        "export",
        "export a trace or session (snapshot JSON, HTML report or OTLP)",
        "Export a stored trace, or every trace of a session, to share it: a snapshot\n"
        "(JSON that import, build and the app read), an HTML report that opens offline,\n"
        "or OTLP JSON spans. Secrets are redacted unless --no-redact.\n\n"
        "example:\n"
        "  ctxscope export --session fix-login --format html -o fix-login.html",
        _lazy("exchange", "cli_export"),
    )
    e.add_argument(
        "trace_id", nargs="?", metavar="TRACE_ID", help="the trace to export (or --session)"
    )
    e.add_argument("--session", metavar="ID", help="every trace of this session instead")
    e.add_argument(
        "--format",
        choices=["json", "html", "otlp"],
        default="json",
        help="what to write: json (a snapshot), html (a report), otlp (OTLP JSON spans) "
        "(default %(default)s)",
    )
    e.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="the file to write, replaced whole or not at all (default: standard output, "
        "as with -o -)",
    )
    e.add_argument(
        "--shared",
        action="store_true",
        help="with --format json: write JSONL in the shared form (a trace names what an "
        "earlier one carried) instead of a snapshot of whole traces",
    )
    e.add_argument(
        "--no-redact", action="store_true", help="keep secrets in the export (not recommended)"
    )
    _db(e, "the store to read", " (a copy while the app holds it)")


def _add_import(sub: _Subcommands) -> None:
    im = _command(
        sub,
        "import",
        "import model requests, session logs, OTLP or snapshots (--help lists the formats)",
        "Import what other tools record (model API requests, agent session logs,\n"
        "OpenTelemetry exports, ctxscope snapshots) as traces: into the store, or with -o\n"
        "into a trace file. It prints what each source held against what reached the\n"
        "traces. Each file's format is detected unless --from names it.\n\n"
        "example:\n"
        "  ctxscope import ~/.codex/sessions/ --from codex",
        _lazy("exchange", "cli_import"),
    )
    im.epilog = "formats (auto detects them):\n" + registry.help_lines()
    im.add_argument("paths", nargs="+", metavar="PATH", help="files, folders or glob patterns")
    _renamed(
        im,
        "--from",
        old="--format",
        dest="input_format",
        choices=list(registry.NAMES),
        default=registry.AUTO,
        metavar="FORMAT",
        help="the format of the files, one of those listed below (default %(default)s: "
        "detected per file)",
    )
    _db(im, "the store to import into")
    _no_redact(im)
    im.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write the traces (JSONL) here instead of the store; - is standard output. "
        "A trace names what an earlier one of the file carried (shared form)",
    )
    im.add_argument(
        "--whole",
        action="store_true",
        help="with -o: write each trace whole, repeating its session's earlier context",
    )
    im.add_argument(
        "--window",
        type=int,
        metavar="N",
        help="the model's context window in tokens, where a file does not say it",
    )
    im.add_argument(
        "--model",
        metavar="NAME",
        help="the model that served the requests (its window is used where a file has none)",
    )


def _add_demo(sub: _Subcommands) -> None:
    d = _command(
        sub,
        "demo",
        "(re)generate the demo traces from the corpus",
        "Regenerate the demo traces: real agent transcripts from the corpus, rebuilt turn\n"
        "by turn into trace files, then loaded into the store (--db '' skips that).\n\n"
        "example:\n"
        "  ctxscope demo -o /tmp/demo --db /tmp/demo.duckdb",
        _lazy("demo", "cli_demo"),
    )
    _renamed(
        d,
        "-o",
        "--output",
        old="--out",
        default=str(settings.DEMO_DIR),
        metavar="DIR",
        help="the folder the session files are written to (default %(default)s, the "
        "demo traces the package ships)",
    )
    d.add_argument(
        "--corpus",
        default=None,
        metavar="DIR",
        help="the transcripts they are built from (default: "
        f"${settings.ENV_CORPUS}, else the corpus/ folder of the source tree)",
    )
    _db(d, "the store they are loaded into", "; '' loads them nowhere")


def _add_check(sub: _Subcommands) -> None:
    c = _command(
        sub,
        "check",
        "run the diagnostics; non-zero exit on findings",
        "Run the diagnostics on trace files and print each finding (file:line, trace,\n"
        "detector, message). The exit code is 1 when a finding is at or above --fail-on:\n"
        "a CI gate.\n\n"
        "example:\n"
        "  ctxscope check traces/live/*.jsonl --fail-on warning",
        _lazy("check", "cli_check"),
    )
    c.add_argument("files", nargs="+", metavar="FILE", help="trace files (.jsonl or .json)")
    c.add_argument(
        "--fail-on",
        choices=["info", "warning", "error"],
        default="error",
        help="the lowest severity that fails the check, exit 1 (default %(default)s)",
    )
    _prices(c)


def _prices(p: argparse.ArgumentParser) -> None:
    """``--prices``: a price table over the shipped one (and ``$CTXSCOPE_PRICES``)."""
    p.add_argument(
        "--prices",
        metavar="FILE",
        default=None,
        help="a price table (JSON, the shape of ctxcore/data/prices.json) whose rows replace "
        f"the shipped ones per model, after ${settings.ENV_PRICES} (default %(default)s: the "
        f"shipped table; {_env(settings.ENV_PRICES)})",
    )


def _add_cost(sub: _Subcommands) -> None:
    c = _command(
        sub,
        "cost",
        "what each call cost and where the prompt cache broke",
        "Price each model call of trace files, session logs or the store: the prompt's\n"
        "tokens, those read from and written to the (simulated) prompt cache, the output\n"
        "and the cost, with the reason a cached prefix broke; then the tokens tool\n"
        "definitions and thinking took. --json: one JSON object per call.\n\n"
        "example:\n"
        "  ctxscope cost ~/.claude/projects/my-project/*.jsonl",
        _lazy("cost", "cli_cost"),
    )
    c.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="trace files or files ctxscope import reads (session logs, requests, OTLP)",
    )
    c.add_argument("--session", metavar="ID", help="a session of the store instead")
    c.add_argument("--all", action="store_true", help="every session of the store instead")
    _db(c, "the store --session and --all read", " (a copy while the app holds it)")
    _prices(c)
    c.add_argument(
        "--json", action="store_true", help="one JSON object per call instead of the tables"
    )


def _add_ledger(sub: _Subcommands) -> None:
    c = _command(
        sub,
        "ledger",
        "what each recorded compaction kept and lost",
        "For every compaction in session logs or requests (Claude Code compact_boundary,\n"
        "Codex compacted, Anthropic compaction blocks): the file paths, identifiers, error\n"
        "lines and user constraints from before it that its summary kept and lost, and the\n"
        "turn where a lost one was next needed. --json: one JSON object per compaction.\n"
        "With --preset P: the compactions policy P makes replaying the files instead.\n\n"
        "example:\n"
        "  ctxscope ledger ~/.claude/projects/my-project/*.jsonl\n"
        "  ctxscope ledger session.jsonl --preset auto-compact --set threshold=0.5",
        _lazy("ledger", "cli_ledger"),
    )
    c.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="trace files or files ctxscope import reads (session logs, requests, OTLP)",
    )
    _settings(c, "the ledger of this policy's own compactions on the files (replayed)")
    c.add_argument(
        "--json", action="store_true", help="one JSON object per compaction instead of the text"
    )


def _add_replay(sub: _Subcommands) -> None:
    rp = _command(
        sub,
        "replay",
        "re-run a session, tag, the store or trace files with new settings; "
        "non-zero exit when something kept before is lost",
        "Re-run recorded builds with new settings and compare them with the recording (or\n"
        "with --against-set/--against-config): what each turn loses, the first turn each\n"
        "item is lost before and after, findings added and cleared. The exit code is 1\n"
        "when something kept before is lost at or above --fail-on.\n\n"
        "examples:\n"
        "  ctxscope replay --session fix-login --set max_tokens=4000\n"
        "  ctxscope replay --all --preset hello-agents --fail-on warning",
        cmd_replay,
    )
    rp.add_argument("files", nargs="*", metavar="FILE", help="trace files instead of the store")
    which = rp.add_mutually_exclusive_group()
    which.add_argument("--session", metavar="ID", help="every turn of one stored session")
    which.add_argument("--tag", help="every stored trace with this tag")
    which.add_argument("--all", action="store_true", help="every stored trace")
    _settings(
        rp,
        "the context builder to rebuild with (default: each trace's own); repeat it to "
        "compare policies side by side (trace files; --set applies to each that takes the knob)",
        many=True,
    )
    against = rp.add_mutually_exclusive_group()
    against.add_argument(
        "--against-config",
        metavar="FILE",
        help="compare with the recording patched by this config, not as recorded",
    )
    against.add_argument(
        "--against-set",
        action="append",
        metavar="KEY=VALUE",
        help="compare with the recording with this knob set, not as recorded (repeatable)",
    )
    _db(rp, "the store to read", " (a copy while the app holds it)")
    rp.add_argument(
        "--format",
        choices=["table", "json"],
        default="table",
        help="how the report is printed: a table, or the report as one JSON line "
        "(default %(default)s)",
    )
    rp.add_argument(
        "--json",
        action="store_true",
        help="evaluate the policies on trace files: per turn input tokens, cost with the "
        "prompt cache, context recall and findings introduced, as one JSON line",
    )
    _prices(rp)
    _replay_run_options(rp)


def _replay_run_options(rp: argparse.ArgumentParser) -> None:
    """``replay``'s gate, what it keeps, and how it runs."""
    rp.add_argument(
        "--fail-on",
        choices=["info", "warning", "error", "never"],
        default="error",
        help="exit 1 on a loss this bad: error = must-keep or error evidence, warning = "
        "any packet that was in the prompt, info = squeezed too (default %(default)s)",
    )
    rp.add_argument(
        "--save",
        action="store_true",
        help="store the variants, tagged replay (while the app holds the store: into the "
        "folder it watches)",
    )
    rp.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="processes (default: one per CPU; at most 32, or one per CPU where that is more)",
    )
    rp.add_argument(
        "--no-findings", action="store_true", help="skip the diagnostics (several times faster)"
    )


def _add_proxy(sub: _Subcommands) -> None:
    px = _command(
        sub,
        "proxy",
        "record every model call an agent makes (API proxy)",
        "Run a recording proxy for the OpenAI and Anthropic APIs on 127.0.0.1: point an\n"
        "agent's base URL at it, and each model call is sent upstream and written as a\n"
        "trace into the live/ subfolder of the watched folder.\n\n"
        "example:\n"
        "  ctxscope proxy &\n"
        "  OPENAI_BASE_URL=http://127.0.0.1:4040/v1 python my_agent.py",
        _lazy("live", "cmd_proxy"),
    )
    _port(px, settings.DEFAULT_PROXY_PORT, "the port it listens on")
    _traces(px, "calls are written to DIR/live/")
    _team_db(px)
    _no_redact(px)
    _upstreams(px, inherited=False)
    px.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="how long an upstream may stall before the call fails (default %(default)s)",
    )


def _add_run(sub: _Subcommands) -> None:
    r = _command(
        sub,
        "run",
        "run a command with its model calls recorded: run -- CMD",
        "Run a command with its model calls recorded: its OPENAI_BASE_URL and\n"
        "ANTHROPIC_BASE_URL point at the ctxscope proxy on --port (started for the\n"
        "command when none runs there), and its calls are tagged with its name. --port is\n"
        "the proxy's: run listens on nothing itself.\n\n"
        "example:\n"
        "  ctxscope run -- python my_agent.py --task fix-login",
        _lazy("live", "cmd_run"),
    )
    _renamed(
        r,
        "--port",
        old="--proxy-port",
        type=int,
        default=settings.DEFAULT_PROXY_PORT,
        metavar="N",
        help="the port of the proxy the calls go through: a ctxscope proxy listening there "
        "is used, else one is started on it (default %(default)s)",
    )
    _traces(r, "where a proxy it starts writes (DIR/live/); a running one keeps its own")
    _team_db(r)
    _no_redact(r)
    _upstreams(r, inherited=True)
    r.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        metavar="-- CMD ARGS",
        help="the command to run and its arguments, after --",
    )


def _add_collect(sub: _Subcommands) -> None:
    co = _command(
        sub,
        "collect",
        "receive OpenTelemetry GenAI spans (OTLP/HTTP)",
        "Receive OpenTelemetry GenAI spans and logs over OTLP/HTTP (protobuf or JSON) on\n"
        "127.0.0.1, and write each model call as a trace into the live/ subfolder of the\n"
        "watched folder (ctxscope app --otlp runs one beside the app).\n\n"
        "example:\n"
        "  ctxscope collect &\n"
        "  OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 python my_agent.py",
        _lazy("live", "cmd_collect"),
    )
    _port(co, settings.DEFAULT_OTLP_PORT, "the port it listens on, OTLP/HTTP's")
    _traces(co, "traces are written to DIR/live/")
    _team_db(co)
    _no_redact(co)


def _add_migrate(sub: _Subcommands) -> None:
    m = _command(
        sub,
        "migrate",
        "bring a store's schema up to date (a team store before its readers)",
        "Run a store's pending schema migrations and print each one that ran. Commands\n"
        "that write a store migrate it when they open it; a read-only open (the app on a\n"
        "team store, a reader role) refuses an out-of-date schema until this has run.\n"
        "With --move, a DuckDB store file's traces are then moved into it (read, never\n"
        "changed; a trace already there is skipped, so a move cut short can run again).\n\n"
        "example:\n"
        "  ctxscope migrate --db postgresql://ctxscope@dbhost/ctxscope\n"
        "  ctxscope migrate --db postgresql://ctxscope@dbhost/db --move traces/ctxscope.duckdb",
        _lazy("store", "cli_migrate"),
    )
    _db(m, "the store to migrate")
    m.add_argument(
        "--move",
        metavar="FILE",
        help="a DuckDB store file whose traces are moved into --db once it is up to date",
    )
    _no_redact(m)


def _add_token(sub: _Subcommands) -> None:
    t = _command(
        sub,
        "token",
        "add, revoke or list the people's access tokens of a team store",
        "The app on a team store asks each person for their token. add NAME makes one and\n"
        "prints it once (only its digest is stored); revoke NAME ends it (the app refuses\n"
        "it from then on); list names them, never the tokens.\n\n"
        "example:\n"
        "  ctxscope token add alice --db postgresql://ctxscope@dbhost/ctxscope",
        _lazy("store", "cli_token"),
    )
    t.add_argument("action", choices=["add", "revoke", "list"], help="what to do with the tokens")
    t.add_argument("name", nargs="?", metavar="NAME", help="whose token (add, revoke)")
    _db(t, "the team store whose tokens they are")


def _add_tune(sub: _Subcommands) -> None:
    t = _command(
        sub,
        "tune",
        "search the ctxscope knobs for the best context recall",
        "Search the ctxscope preset's knobs that have a search grid (the signal weights,\n"
        "relevance_weight, recency_weight, min_relevance) for the best context recall on\n"
        "corpus sessions under one budget, and write the best as a config file that\n"
        "build --config and the Playground load.\n\n"
        "With --preset P, search a policy's knobs instead for the lowest cost ($ through\n"
        "the simulated prompt cache) with recall at or above --recall-floor, on the\n"
        "recorded sessions given (any file an import reads).\n\n"
        "examples:\n"
        "  ctxscope tune --budget 4000 -o tuned.json\n"
        "  ctxscope tune --preset anthropic-context-editing session.jsonl "
        "--grid trigger=0,2000 --grid keep=1,3",
        _lazy("tune", "cli_tune"),
    )
    _tune_policy_options(t)
    t.add_argument(
        "sessions",
        nargs="*",
        metavar="SESSION",
        help="corpus session files (default: those of --corpus that tune reads)",
    )
    t.add_argument(
        "--corpus",
        default=None,
        metavar="DIR",
        help="where the sessions are (default: "
        f"${settings.ENV_CORPUS}, else the corpus/ folder of the source tree)",
    )
    t.add_argument(
        "--budget", type=int, default=8000, metavar="N", help="max_tokens (default %(default)s)"
    )
    t.add_argument(
        "--max-steps",
        type=int,
        default=8,
        metavar="N",
        help="model calls read per session (default %(default)s)",
    )
    t.add_argument(
        "--rounds",
        type=int,
        default=1,
        metavar="N",
        help="passes over the knobs; one that changes nothing ends the search "
        "(default %(default)s)",
    )
    t.add_argument(
        "--show-missed",
        type=int,
        default=10,
        metavar="N",
        help="how many turns still missing something to list (default %(default)s)",
    )
    t.add_argument(
        "-o",
        "--output",
        default="ctxscope-tuned.json",
        metavar="FILE",
        help="the config file to write; - prints it (default %(default)s)",
    )


def _tune_policy_options(t: argparse.ArgumentParser) -> None:
    """``tune --preset P``'s options: the policy, its floor, its grid and the output."""
    t.add_argument(
        "--preset",
        choices=list(settings.PRESET_NAMES),
        default=None,
        help="search this policy's knobs on the recorded sessions given (FILE...)",
    )
    t.add_argument(
        "--recall-floor",
        type=float,
        default=0.9,
        metavar="R",
        help="the lowest recall a setting may have to win (default %(default)s)",
    )
    t.add_argument(
        "--grid",
        action="append",
        metavar="KNOB=V1,V2,...",
        help="a knob's values to try (repeatable; default: each numeric knob of the preset at "
        "its lowest value, half its default, the default and twice it)",
    )
    t.add_argument("--json", action="store_true", help="the settings tried as one JSON line")
    t.add_argument(
        "--workers", type=int, default=None, metavar="N", help="replay processes (default: per CPU)"
    )
    _prices(t)


#: the sub-commands in the order ``ctxscope --help`` lists them
#: The sub-commands, each by its name and what adds it to the parser.
SUBCOMMANDS: dict[str, Callable[[_Subcommands], None]] = {
    "app": _add_app,
    "build": _add_build,
    "ingest": _add_ingest,
    "watch": _add_watch,
    "export": _add_export,
    "import": _add_import,
    "demo": _add_demo,
    "check": _add_check,
    "cost": _add_cost,
    "ledger": _add_ledger,
    "replay": _add_replay,
    "proxy": _add_proxy,
    "run": _add_run,
    "collect": _add_collect,
    "tune": _add_tune,
    "migrate": _add_migrate,
    "token": _add_token,
}


def _environment_epilog() -> str:
    """The environment variables the defaults come from, for ``ctxscope --help``."""
    width = max(map(len, settings.ENVIRONMENT)) + 2
    rows = [f"  {var:<{width}}{meaning}" for var, (_, meaning) in settings.ENVIRONMENT.items()]
    return "environment:\n" + "\n".join(rows) + "\n\nctxscope COMMAND --help says more."


def make_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``ctxscope`` parser: one sub-command per entry of ``SUBCOMMANDS``. Given the
    command line, when it starts with a command's name only that command is added (every
    command's arguments are ~12 ms to make, on each run); otherwise (no command, ``--help``,
    a name that is not one) every command is, for the help and the error to list."""
    p = argparse.ArgumentParser(
        prog="ctxscope",
        description="See and fix what an LLM agent puts into its context.",
        epilog=_environment_epilog(),
        formatter_class=_HelpFormatter,
    )
    p.add_argument(
        "--version", action="version", version=f"ctxscope {__version__}", help="print the version"
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    named = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    for name, add in SUBCOMMANDS.items():
        if named is None or name == named:
            add(sub)
    return p


#: the commands that write what they read into a store (and take --no-redact)
_WRITERS = frozenset({"ingest", "watch", "import", "proxy", "run", "collect", "migrate"})


@contextmanager
def _team_redaction(args: argparse.Namespace) -> Iterator[None]:
    """Into a team store, ingest and import redact secrets unless ``--no-redact``
    (docs/design.md, "Store", access): ``$CTXSCOPE_REDACT_ON_INGEST`` says so, for the
    command's run, to every part of it and the processes it starts."""
    db = getattr(args, "db", None)
    if args.command not in _WRITERS or not db or "://" not in str(db):
        yield
        return
    before = os.environ.get(settings.ENV_REDACT_ON_INGEST)
    os.environ[settings.ENV_REDACT_ON_INGEST] = "0" if args.no_redact else "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(settings.ENV_REDACT_ON_INGEST, None)
        else:
            os.environ[settings.ENV_REDACT_ON_INGEST] = before


def _counting_beside(args: argparse.Namespace) -> AbstractContextManager[object]:
    """Where this command's exact counts are made: ``import -o`` of a long session log
    starts a counting process now, before its own imports (``ctxcore.counting``)."""
    if args.command != "import" or not getattr(args, "output", None):
        return nullcontext()
    from ctxcore.cli.counting_beside import counting_beside

    return counting_beside(list(args.paths), args.input_format)


def main(argv: Sequence[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else list(argv)
    return _run(make_parser(given).parse_args(given))


def _run(args: argparse.Namespace) -> int:
    try:
        with _team_redaction(args), _counting_beside(args):
            rc: int = args.func(args)
        return rc
    except CtxscopeError as exc:
        print(f"ctxscope {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def run() -> NoReturn:
    """The ``ctxscope`` command (and ``python -m ctxcore``): ``main``, then the process's
    exit. ``import -o`` leaves millions of objects (a long log's prompts) for the
    interpreter to free one by one at exit, ~0.1 s of a 1.5 s import: once its output is
    written and closed, the standard streams flushed and no other thread runs, it ends at
    once (``os._exit``; docs/design.md, "Capture, import, export, redaction")."""
    given = sys.argv[1:]
    args = make_parser(given).parse_args(given)
    rc = _run(args)
    if _ends_at_once(args):
        os._exit(rc)
    sys.exit(rc)


def _ends_at_once(args: argparse.Namespace) -> bool:
    """Whether the command may skip the interpreter's teardown: an ``import -o`` that
    leaves nothing behind (no thread, nothing at exit to run) and whose standard streams
    flushed (a closed pipe is left to the normal exit, which reports it)."""
    import atexit
    import threading

    if args.command != "import" or not getattr(args, "output", None):
        return False
    if threading.active_count() > 1 or atexit._ncallbacks():
        return False
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return False
    return True


if __name__ == "__main__":  # pragma: no cover
    run()
