"""A file no format claims: one line naming the formats, the closest one and ``--from``.

Real files of other shapes: a ctxscope test case and a golden file of this repository (JSON
objects of their own kinds), a TOML file and a README (text), the aider chat fixture with its
first line cut (text close to a format but not of it), and Claude Code Viewer's own
``package.json`` read from a real Claude Code request's fields (docs/design.md, "Formats").
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from ctxcore.cli import main
from ctxcore.errors import ImportFormatError
from ctxcore.formats import registry
from ctxcore.formats.load import load_file

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "imports"


def _refusal(path: Path) -> str:
    with pytest.raises(ImportFormatError) as exc:
        load_file(path)
    said = str(exc.value)
    assert "\n" not in said
    assert said.startswith(f"{path}: matches no format ctxscope reads")
    assert said.endswith("if it is one of them, name it: --from NAME")
    return said


def test_a_json_object_of_another_kind_names_every_format_and_the_closest() -> None:
    said = _refusal(ROOT / "tests" / "cases" / "ha_english.json")
    # every format by name, in the table's order
    assert "(" + ", ".join(f.name for f in registry.FORMATS) + ")" in said
    # a build case holds 'input' and 'config' as a trace does, and nothing of another format
    assert "closest: trace, whose fields 'config', 'input' it holds" in said


def test_a_json_object_sharing_no_field_says_so_and_lists_its_fields() -> None:
    said = _refusal(ROOT / "tests" / "golden" / "hello_agents" / "ha_english.json")
    assert "closest: none (it holds none of their fields; its fields: name, package, printed" in (
        said
    )


def test_the_closest_is_the_format_whose_fields_it_shares_most(tmp_path: Path) -> None:
    # a real Anthropic request without its messages: no detector claims it any more, and
    # what it still holds (model, max_tokens, system, tools) is Anthropic's
    name = "anthropic-messages/openllmetry-prompt-caching-system-blocks.request.json"
    request = json.loads((FIXTURES / name).read_text())
    del request["messages"]
    p = tmp_path / "request.json"
    p.write_text(json.dumps(request))
    found = registry.closest(request)
    assert found is not None and found[0].name == "anthropic"
    said = _refusal(p)
    shared = ", ".join(repr(k) for k in sorted(set(request) & set(found[0].keys)))
    assert f"closest: anthropic, whose fields {shared} it holds" in said


def test_the_fallbacks_own_complaint_is_said_when_it_is_the_closest(tmp_path: Path) -> None:
    # ShareGPT-like records ('conversations') that the chat reader cannot read
    p = tmp_path / "records.json"
    p.write_text(json.dumps({"conversations": "not a list"}))
    said = _refusal(p)
    assert "closest: openai, whose fields 'conversations' it holds (read as it: " in said


@pytest.mark.parametrize("name", ["pyproject.toml", "README.md"])
def test_a_text_file_of_another_kind_is_refused_as_text(name: str) -> None:
    said = _refusal(ROOT / name)
    assert "malformed JSON" not in said and "a text file that is not JSON" in said
    assert "aider-llm-history" in said and "aider-chat" in said
    assert "closest: none (it holds none of their line markers)" in said


def test_a_text_file_close_to_a_text_format_names_it(tmp_path: Path) -> None:
    source = FIXTURES / "aider-chat" / "aider-2024-08-06-ask.subset.chat.history.md"
    lines = source.read_text().splitlines(keepends=True)
    assert lines[0].startswith("# aider chat started at")
    p = tmp_path / "history.md"
    p.write_text("".join(lines[1:]).lstrip("\n"))  # its start line cut: the sniffer says no
    said = _refusal(p)
    assert "closest: aider-chat, whose line markers '#### '" in said


def test_the_command_says_it_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", str(ROOT / "tests" / "cases" / "ha_english.json"), "-o", "-"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "closest: trace" in err[0] and "--from NAME" in err[0]


def test_every_format_names_what_it_is_known_by() -> None:
    for f in registry.FORMATS:
        assert f.keys, f"{f.name}: no keys, so it can never be the closest"
        if f.sniff is not None and f.name.startswith("aider"):
            assert all(not k.isidentifier() for k in f.keys), f.name  # line markers


def test_a_binary_file_is_refused_as_binary_naming_the_byte() -> None:
    # a PNG starts with 0x89 'PNG' CR LF 0x1a LF: 0x89 begins no UTF-8 character, and 0x1a
    # is a control byte no text holds
    png = ROOT / "docs" / "findings.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    said = _refusal(png)
    assert "a binary file, not text (byte 0 is 0x89, not UTF-8)" in said
    assert "text file" not in said and "malformed JSON" not in said


def test_a_zip_no_format_claims_is_refused_as_a_zip(tmp_path: Path) -> None:
    p = tmp_path / "project.zip"
    with zipfile.ZipFile(p, "w") as zf:
        zf.write(ROOT / "pyproject.toml", "pyproject.toml")
    # a zip member's header: 'PK' 0x03 0x04, so the first byte no text holds is byte 2
    said = _refusal(p)
    assert "a zip archive, not text (byte 2 is 0x03, a control byte)" in said


def test_text_in_another_encoding_says_where_it_stops_being_utf8(tmp_path: Path) -> None:
    head = (ROOT / "pyproject.toml").read_bytes()[:200]
    p = tmp_path / "notes.txt"
    p.write_bytes(head + "café\n".encode("latin-1"))
    said = _refusal(p)
    # 'caf' after the 200 bytes, then é as Latin-1's single byte 0xe9
    assert f"text that is not UTF-8 (byte {200 + 3} is 0xe9, not UTF-8)" in said
