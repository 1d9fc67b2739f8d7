"""The extractive summarizers on real tool logs, files, repo maps and histories."""

from __future__ import annotations

from pathlib import Path

from ctxcore.summarize import (
    ExtractiveSummarizer,
    clean_terminal,
    collapse_repeats,
    summarize_file,
    summarize_history,
    summarize_repo_map,
    summarize_tool_log,
)


def _read(corpus: Path, name: str) -> str:
    # bytes, not read_text: universal newlines would hide the CRLF and \r spinners
    return (corpus / name).read_bytes().decode("utf-8")


def test_clean_terminal_strips_ansi_and_renders_spinners() -> None:
    assert clean_terminal("\x1b[0;32m[Step] 1\x1b[0m") == "[Step] 1"
    assert clean_terminal("Installing ... -\b \b\\\b \bdone\r\n") == "Installing ... done\n"
    assert clean_terminal("10%\r50%\r100%\n") == "100%\n"


def test_collapse_repeats_counts_runs() -> None:
    assert collapse_repeats(["a", "a", "b", "a"]) == [("a", 2), ("b", 1), ("a", 1)]


def test_d08_repeated_sigpipe_lines_collapse_with_their_count(corpus: Path) -> None:
    text = _read(corpus, "d08_find_grep_sigpipe_spam.log")
    spam = "find: ‘grep’ terminated by signal 13"
    n = sum(1 for line in text.split("\n") if line == spam)
    out = summarize_tool_log(text, 300)
    assert f"{spam}  [× {n}]" in out
    assert out.count(spam) == 1
    assert text.split("\n")[0] in out  # first line kept


def test_d05_pip_spinners_and_crlf_are_gone(corpus: Path) -> None:
    text = _read(corpus, "d05_pip_install_editable_marshmallow.log")
    assert "\b" in text and "\r" in text
    out = summarize_tool_log(text, 200)
    assert "\b" not in out and "\r" not in out
    assert "Installing build dependencies ... done" in out
    last = [line for line in text.replace("\r", "").split("\n") if line.strip()][-1]
    assert last.strip() in out


def test_d07_ansi_removed_errors_and_chinese_kept(corpus: Path) -> None:
    text = _read(corpus, "d07_npm_run_verify_tsc_jest_pack.log")
    assert "\x1b[" in text
    out = summarize_tool_log(text, 300)
    assert "\x1b" not in out
    assert "console.error" in out
    assert "无法读取文件" in out
    assert "src/core/fileReader.ts:31:21" in out  # a file:line reference
    assert len(out) < len(text) / 3


def test_d02_failing_tests_and_first_last_lines(corpus: Path) -> None:
    text = _read(corpus, "d02_pytest_requests_157_errors_truncated.txt")
    out = summarize_tool_log(text, 300)
    failing = [ln for ln in text.split("\n") if ln.startswith("ERROR tests/test_requests.py::")]
    assert failing and any(f in out for f in failing)
    assert "ERROR at setup of" in out
    assert text.split("\n")[0] in out
    assert "lines omitted" in out


def test_d09_tsc_dump_keeps_file_line_errors_and_shrinks(corpus: Path) -> None:
    text = _read(corpus, "d09_tsc_output_first1500_of_18741_errors.txt")
    out = summarize_tool_log(text, 300)
    assert "src/app/about/page.tsx(5,43): error TS1005" in out
    assert len(out) < len(text) / 20
    assert out.startswith(f"[tool log summary: {len(text.split(chr(10)))} lines")


def test_file_outline_and_lines_around_symbols() -> None:
    code = "\n".join(
        ["import os", "", "class TimeDelta(Field):", "    precision = 'seconds'"]
        + [f"    # filler {k}" for k in range(60)]
        + ["    def _serialize(self, value):", "        return int(value.total_seconds())"]
        + [f"# tail {k}" for k in range(40)]
    )
    out = summarize_file(code, 80, symbols=("total_seconds",))
    assert "class TimeDelta(Field):" in out
    assert "def _serialize(self, value):" in out
    assert "return int(value.total_seconds())" in out
    assert "filler 30" not in out
    assert "⋮" in out


def test_repo_map_d10_tree_and_entry_files(corpus: Path) -> None:
    text = _read(corpus, "d10_aider_repo_map_show-repo_2024-08-05.md")
    out = summarize_repo_map(text, 400)
    wide = summarize_repo_map(text, 3000)
    assert "aider/: " in wide and "args_formatter.py" in wide  # room for every name
    assert out.startswith("[repo map:")
    assert "aider/" in out and "tests/basic/" in out
    assert "aider/main.py:" in out  # an entry file with its outline
    assert len(out) < len(text)


def test_history_summary_is_structured() -> None:
    content = "\n\n".join(
        [
            "[builder:history:0] user: Fix the rounding in fields.py. 不要修改公共 API.",
            "[builder:history:1] assistant: I will use round() instead of int().",
            "[builder:history:2] tool: FAILED tests/test_fields.py::test_timedelta - error",
            "[builder:history:3] assistant: Fixed the rounding; the tests passed.",
        ]
    )
    out = summarize_history(content, 300)
    lines = out.split("\n")
    assert lines[0] == "Range covered: builder:history:0 … builder:history:3 (4 messages)"
    sections = [ln.split(":")[0] for ln in lines if not ln.startswith("- ")]
    assert sections[1:] == [
        "User constraints", "Completed", "Open issues", "Decisions", "Evidence ids",
    ]  # fmt: skip
    assert any("不要修改公共 API" in ln and "(builder:history:0)" in ln for ln in lines)
    assert any("the tests passed" in ln for ln in lines)
    assert "fields.py" in lines[-1] and "tests/test_fields.py" in lines[-1]


def test_summarizer_is_memoised_and_dispatches_on_kind(corpus: Path) -> None:
    text = _read(corpus, "d08_find_grep_sigpipe_spam.log")
    s = ExtractiveSummarizer()
    a = s("tool_result", text, 200)
    b = s("tool_result", text, 200)
    assert a == b and s.calls == 1
    assert s("note", text, 200) != a  # generic head/tail for other kinds
    assert s.calls == 2


def test_evidence_ids_equal_the_regex_on_the_whole_text(corpus: Path) -> None:
    """``evidence_ids`` scans run by run; it must find exactly what the regex finds on the
    whole text, in order: on every corpus file and on the edges of the run argument."""
    from ctxcore.summarize import _EVIDENCE, evidence_ids

    texts = [p.read_text(encoding="utf-8", errors="replace") for p in sorted(corpus.iterdir())]
    texts += [
        "-" * 3000 + " see a/b/c.py:12 and tool:call_1, xtool:y, (file_2.json) note:x.",
        "path/to/ünïcode_模块.py:3 call_9 tool_result:a-b/c.d",
        "tool:",
        ".py",
        "a.py.py/b.ts:1:2",
        "::tool:x::file:y",
        "日志 error in pkg/x.rs:10，见 note_1。",
    ]
    found = 0
    for text in texts:
        expected = _EVIDENCE.findall(text)
        assert evidence_ids(text) == expected
        found += len(expected)
    assert found > 100  # the corpus really has ids to find
