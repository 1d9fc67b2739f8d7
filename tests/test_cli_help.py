"""The command line teaches itself through ``--help`` (docs/design.md, "Command line").

Every sub-command has a line in ``ctxscope --help`` and a description of its own; every
option and positional says what it does, shows its default, and names the environment
variable a default comes from; one idea has one spelling across the sub-commands, and the
old spellings (``demo --out``, ``run --proxy-port``, ``import --format``) still work while
``--help`` shows only the new ones. The parser is walked, not listed, so a sub-command or
option added without help fails here.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxcore import settings
from ctxcore.cli import main, make_parser
from ctxcore.formats.load import load_file

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "imports"


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, str | None]]:
    """Each sub-command (nested ones too) as (its words, its parser, its line in the
    parent's --help)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            lines = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*path, name), sub, lines.get(name)
                yield from _commands(sub, (*path, name))


def _parsers() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    root = make_parser()
    return [((), root)] + [(words, sub) for words, sub, _ in _commands(root)]


def _arguments(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """The options and positionals a user passes (not -h, not the sub-command choice)."""
    for action in parser._actions:
        if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            yield action


def _name(words: tuple[str, ...], action: argparse.Action) -> str:
    return f"ctxscope {' '.join(words)} {'/'.join(action.option_strings) or action.dest}"


def _shown(parser: argparse.ArgumentParser, action: argparse.Action) -> tuple[str, ...]:
    """The spellings --help lists for an option (its listing, before the help text)."""
    formatter = parser._get_formatter()
    invocation: str = formatter._format_action_invocation(action)
    return tuple(s.split(" ")[0] for s in invocation.split(", "))


def test_the_walk_finds_every_sub_command() -> None:
    words = {w for w, _ in _parsers()}
    expected = {"app", "build", "ingest", "watch", "export", "import", "demo", "check"}
    expected |= {"cost", "ledger", "replay", "proxy", "run", "collect", "tune", "migrate", "token"}
    assert {w[0] for w in words if w} == expected


def test_every_sub_command_has_a_help_line_and_a_description() -> None:
    root = make_parser()
    listing = root.format_help()
    for words, sub, line in _commands(root):
        assert line and line.strip(), f"ctxscope {' '.join(words)}: no help= line"
        assert line.split()[0] in listing, words  # the line is what ctxscope --help shows
        assert sub.description and len(sub.description.split()) >= 6, (
            f"ctxscope {' '.join(words)}: no description= (the header of its --help)"
        )


def test_every_option_and_positional_has_help_and_shows_its_default() -> None:
    missing, no_default = [], []
    for words, parser in _parsers():
        for action in _arguments(parser):
            if not action.help or action.help == argparse.SUPPRESS or not action.help.strip():
                missing.append(_name(words, action))
                continue
            has_default = action.default not in (None, False, argparse.SUPPRESS)
            if has_default and "%(default)" not in action.help:
                no_default.append(_name(words, action))
    assert missing == [], f"options without help: {missing}"
    assert no_default == [], f"defaults --help does not show: {no_default}"


def test_defaults_from_the_environment_say_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    values = {
        settings.ENV_DB: str(tmp_path / "elsewhere.duckdb"),
        settings.ENV_TRACES: str(tmp_path / "watched"),
    }
    for var, value in values.items():
        monkeypatch.setenv(var, value)
    found: dict[str, int] = dict.fromkeys(values, 0)
    for words, parser in _parsers():
        for action in _arguments(parser):
            for var, value in values.items():
                if action.default == value:
                    found[var] += 1
                    assert f"${var}" in (action.help or ""), _name(words, action)
    assert found[settings.ENV_DB] >= 6 and found[settings.ENV_TRACES] >= 5, found
    # those without a fixed default name their variable too
    text = {" ".join(w): p.format_help() for w, p in _parsers()}
    assert "$CTXSCOPE_CORPUS" in text["tune"] and "$CTXSCOPE_CORPUS" in text["demo"]
    assert "$CTXSCOPE_TOKEN" in text["app"]
    assert "$OPENAI_BASE_URL" in text["run"] and "$ANTHROPIC_BASE_URL" in text["run"]


@pytest.mark.parametrize("words", [w for w, _ in _parsers()], ids=lambda w: " ".join(w) or "-")
def test_help_of_each_command_runs(
    words: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main([*words, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: ctxscope {' '.join(words)}".rstrip())
    parser = dict(_parsers())[words]
    first = (parser.description or "").split("\n")[0].split()[:4]
    assert " ".join(first) in " ".join(out.split()), words


# --------------------------------------------------------------------------- one spelling


def test_one_idea_one_spelling() -> None:
    """Across the sub-commands a value (its dest) is always spelled the same in --help,
    and a spelling always names the same value."""
    spelled: dict[str, set[tuple[str, ...]]] = {}
    meaning: dict[str, set[str]] = {}
    for _, parser in _parsers():
        for action in _arguments(parser):
            if not action.option_strings:
                continue
            shown = _shown(parser, action)
            spelled.setdefault(action.dest, set()).add(shown)
            for s in shown:
                meaning.setdefault(s, set()).add(action.dest)
    assert {d: s for d, s in spelled.items() if len(s) > 1} == {}
    assert {s: d for s, d in meaning.items() if len(d) > 1} == {}
    assert spelled["output"] == {("-o", "--output")}
    assert spelled["port"] == {("--port",)}
    # what a command writes is its -o, where it (or its proxy) listens its --port
    parsers = dict(_parsers())
    dests = {w[0]: {a.dest for a in _arguments(p)} for w, p in parsers.items() if w}
    assert {c for c, d in dests.items() if "output" in d} == {"export", "import", "demo", "tune"}
    assert {c for c, d in dests.items() if "port" in d} == {"app", "proxy", "run", "collect"}


def test_format_is_only_an_output_format() -> None:
    parsers = dict(_parsers())
    for words, parser in parsers.items():
        for action in _arguments(parser):
            if "--format" in _shown(parser, action):
                assert words in {("export",), ("replay",)}, words
                assert "print" in (action.help or "") or "write" in (action.help or "")
    imp = next(a for a in parsers[("import",)]._actions if "--from" in a.option_strings)
    assert "--from" in _shown(parsers[("import",)], imp)


OLD_SPELLINGS = [
    # (new argv, old argv): both parse to the same arguments
    (["demo", "-o", "d"], ["demo", "--out", "d"]),
    (["demo", "--output", "d"], ["demo", "--out", "d"]),
    (["run", "--port", "4999", "--", "true"], ["run", "--proxy-port", "4999", "--", "true"]),
    (["import", "x.json", "--from", "openai"], ["import", "x.json", "--format", "openai"]),
]


@pytest.mark.parametrize(("new", "old"), OLD_SPELLINGS, ids=lambda a: " ".join(a))
def test_old_spellings_parse_as_the_new_ones(new: list[str], old: list[str]) -> None:
    parser = make_parser()
    parsed_new, parsed_old = vars(parser.parse_args(new)), vars(parser.parse_args(old))
    assert parsed_old == parsed_new
    sub = dict(_parsers())[(new[0],)]
    spelling = next(a for a in old if a.startswith("--") and a not in new)
    # the old spelling is not taught: not in the usage line nor the option's listing, but
    # the help names it as still accepted
    usage = sub.format_usage()
    listed = {s for a in _arguments(sub) if a.option_strings for s in _shown(sub, a)}
    assert f"[{spelling}" not in usage and spelling not in listed
    assert f"{spelling} still works" in " ".join(sub.format_help().split())


def test_import_format_still_works_end_to_end(tmp_path: Path) -> None:
    src = FIXTURES / "openai-chat" / "otel-contrib-tool-calls-turn1.request.json"
    outs = {}
    for spelling in ("--from", "--format"):
        out = tmp_path / f"{spelling.strip('-')}.jsonl"
        assert main(["import", str(src), spelling, "openai", "-o", str(out)]) == 0
        outs[spelling] = [t.trace_id for t in load_file(out, "trace")]
    assert outs["--from"] and outs["--from"] == outs["--format"]
    # a format by the old name is read as that format, not detected
    claude = FIXTURES / "claude-code" / "ccviewer-init-session.jsonl"
    assert main(["import", str(claude), "--format", "openai", "-o", str(tmp_path / "x")]) != 0
    assert main(["import", str(claude), "--format", "claude-code", "-o", str(tmp_path / "y")]) == 0


def test_demo_out_still_works_end_to_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = settings.corpus_dir(ROOT / "corpus")
    if not corpus.is_dir():
        pytest.skip(f"corpus not found at {corpus}")
    old, new = tmp_path / "old", tmp_path / "new"
    assert main(["demo", "--out", str(old), "--corpus", str(corpus), "--db", ""]) == 0
    assert main(["demo", "-o", str(new), "--corpus", str(corpus), "--db", ""]) == 0
    files = sorted(p.name for p in old.glob("*.jsonl"))
    assert files and files == sorted(p.name for p in new.glob("*.jsonl"))
    assert all((old / f).read_bytes() == (new / f).read_bytes() for f in files)


# --------------------------------------------------------------------------- tune's corpus


def test_tune_reads_the_corpus_of_ctxscope_corpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = settings.corpus_dir(ROOT / "corpus")
    session = corpus / "a02_sweagent_function_calling_simple.traj.json"
    if not session.exists():
        pytest.skip(f"corpus not found at {corpus}")
    mine = tmp_path / "my-corpus"
    mine.mkdir()
    shutil.copy(session, mine / session.name)
    monkeypatch.chdir(tmp_path)  # no corpus/ here: only the variable can point at it
    monkeypatch.setenv(settings.ENV_CORPUS, str(mine))
    out = tmp_path / "tuned.json"
    argv = ["tune", "--budget", "4000", "--max-steps", "3", "--rounds", "1", "-o", str(out)]
    assert main(argv) == 0
    assert "from 1 sessions" in capsys.readouterr().out
    assert json.loads(out.read_text())["max_tokens"] == 4000
    # --corpus wins over the variable
    monkeypatch.setenv(settings.ENV_CORPUS, str(tmp_path / "nothing-here"))
    assert main(argv) == 2
    assert "no turns" in capsys.readouterr().err
    assert main([*argv, "--corpus", str(mine)]) == 0
