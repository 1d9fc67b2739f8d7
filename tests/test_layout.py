"""The library's layout, configuration and design citations, checked against the source.

ctxcore is split into parts that may only import downwards (docs/design.md, "Parts and
allowed imports"); the environment variables in ``ctxcore.settings.ENVIRONMENT`` are
documented in the README's Configuration section; code cites the design document by section
name. Reviews miss an upward import inside a function or a variable added without its README
row, so these tests read the source with ``ast`` and fail with every violation, file:line.
They never import the modules they check (except ``ctxcore.settings``, which imports nothing).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ctxcore import settings

ROOT = Path(__file__).resolve().parent.parent
CTXCORE = ROOT / "ctxcore"
README = ROOT / "README.md"
DESIGN = ROOT / "docs" / "design.md"

# --------------------------------------------------------------------------- the table

_PARTS_SECTION = "Parts and allowed imports"
_LIST_SPLIT = re.compile(r",\s*|\s+and\s+")


def _parts_table() -> list[list[str]]:
    """The rows of the table in docs/design.md, "Parts and allowed imports": part, modules,
    what it holds, may import (cells as written, backticks kept)."""
    text = DESIGN.read_text(encoding="utf-8")
    m = re.search(rf"^## {_PARTS_SECTION}[ \t]*\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, f'docs/design.md has no "{_PARTS_SECTION}" section'
    rows = []
    for line in m.group(1).splitlines():
        line = line.strip()
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] != "Part":
            assert len(cells) == 4, f"the parts table's row {line!r} has {len(cells)} cells, not 4"
            rows.append(cells)
    assert rows, "the parts table has no rows"
    return rows


def _modules(cell: str) -> tuple[str, ...]:
    """The dotted modules a "Modules" cell names: `models` and `settings.py` are modules,
    `pipeline/` a package (everything under it), `__init__.py` the package root."""
    out = []
    for name in re.findall(r"`([^`]+)`", cell):
        if name == "__init__.py":
            out.append("ctxcore")
        else:
            out.append("ctxcore." + name.removesuffix("/").removesuffix(".py").replace("/", "."))
    return tuple(out)


def _allowed(part: str, cell: str, parts: list[str]) -> set[str]:
    """The parts a "May import" cell allows ``part`` (itself included): a list of parts,
    "everything", "everything but a and b", or "nothing from ctxcore"; "core" includes
    settings."""
    if cell.startswith("nothing"):
        return {part}
    if cell == "everything":
        return set(parts)
    if cell.startswith("everything but "):
        named = set(_LIST_SPLIT.split(cell.removeprefix("everything but ")))
        unknown = named - set(parts)
        assert not unknown, f"{part}: 'May import' names unknown parts {sorted(unknown)}"
        return set(parts) - named
    named = set(_LIST_SPLIT.split(cell))
    unknown = named - set(parts)
    assert not unknown, f"{part}: 'May import' names unknown parts {sorted(unknown)}"
    return named | {part} | ({"settings"} if "core" in named else set())


#: part -> the modules (dotted names; a package stands for everything under it) it holds, and
#: part -> the parts it may import (itself included), read from the table of
#: docs/design.md, "Parts and allowed imports": the one statement of the layering.
PARTS: dict[str, tuple[str, ...]] = {row[0]: _modules(row[1]) for row in _parts_table()}
ALLOWED: dict[str, set[str]] = {
    row[0]: _allowed(row[0], row[3], list(PARTS)) for row in _parts_table()
}

#: Names any module may read from the package root: metadata, not API. The root is loaded
#: before any ctxcore submodule anyway, so reading it pulls in nothing new.
ROOT_METADATA = frozenset({"__version__"})


def part_of(module: str) -> str | None:
    """The part ``module`` belongs to (the longest matching prefix), None if no part."""
    best: tuple[int, str] | None = None
    for part, prefixes in PARTS.items():
        for prefix in prefixes:
            # the root holds the package's __init__ only, not every module under it
            below = prefix != "ctxcore" and module.startswith(prefix + ".")
            if module == prefix or below:
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), part)
    return best[1] if best else None


# --------------------------------------------------------------------------- reading imports


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def library_files() -> list[Path]:
    return sorted(p for p in CTXCORE.rglob("*.py") if "__pycache__" not in p.parts)


MODULES: dict[str, Path] = {module_name(p): p for p in library_files()}
_DYNAMIC_CALLS = frozenset({"import_module", "__import__"})
_DOTTED = re.compile(r"ctxcore(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class Import:
    """One import of a ctxcore (or streamlit) module by a ctxcore module."""

    source: str  # the importing module
    target: str  # the imported module (dotted)
    line: int
    module_level: bool  # runs when the importing module is imported
    names: tuple[str, ...] = ()  # for ``from ctxcore import x``: the names read off the root

    def where(self) -> str:
        return f"{MODULES[self.source].relative_to(ROOT)}:{self.line}"


def _resolve_from(source: str, node: ast.ImportFrom) -> str:
    base = node.module or ""
    if node.level:
        is_package = MODULES[source].name == "__init__.py"
        pkg = source.split(".")
        drop = node.level - 1 if is_package else node.level
        pkg = pkg[: len(pkg) - drop] if drop else pkg
        base = ".".join(pkg + ([base] if base else []))
    return base


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _dynamic_target(call: ast.Call) -> str | None:
    """``import_module("ctxcore.x")`` -> ``ctxcore.x``; an f-string -> its constant package."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in _DYNAMIC_CALLS or not call.args:
        return None
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values:
        head = arg.values[0]
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            return head.value.rsplit(".", 1)[0] if "." in head.value else head.value
    return None


def _walk(node: ast.AST, module_level: bool) -> Iterator[tuple[ast.AST, bool]]:
    """Every node below ``node``, with whether it runs at import time of the module."""
    for child in ast.iter_child_nodes(node):
        level = module_level
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            level = False
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            yield child, level
            for sub in child.body:  # type-only imports: checked for layering, never run
                yield sub, False
                yield from _walk(sub, False)
            for sub in child.orelse:
                yield sub, level
                yield from _walk(sub, level)
            continue
        yield child, level
        yield from _walk(child, level)


def imports_of(source: str) -> list[Import]:
    """Every import in ``source``: statements at any depth and ``import_module`` calls.

    A module that imports by a computed name (``import_module(NAMES[x])``) is taken to
    import every ctxcore module whose full dotted name it spells as a string constant.
    """
    tree = ast.parse(MODULES[source].read_text(encoding="utf-8"))
    out: list[Import] = []
    dynamic_by_name: bool | None = None  # None: none; else whether one runs at import time
    for node, level in _walk(tree, True):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.append(Import(source, alias.name, node.lineno, level))
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_from(source, node)
            if base == "ctxcore":
                for alias in node.names:
                    sub = f"ctxcore.{alias.name}"
                    if sub in MODULES:
                        out.append(Import(source, sub, node.lineno, level))
                    else:
                        out.append(Import(source, "ctxcore", node.lineno, level, (alias.name,)))
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                target = sub if sub in MODULES else base
                out.append(Import(source, target, node.lineno, level))
        elif isinstance(node, ast.Call):
            dynamic = _dynamic_target(node)
            if dynamic is not None:
                out.append(Import(source, dynamic, node.lineno, level))
            else:
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if name in _DYNAMIC_CALLS:
                    dynamic_by_name = bool(dynamic_by_name) or level
    if dynamic_by_name is not None:
        for node, _level in _walk(tree, True):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and _DOTTED.fullmatch(node.value)
                and node.value in MODULES
            ):
                out.append(Import(source, node.value, node.lineno, dynamic_by_name))
    return [
        i
        for i in out
        if i.target == "ctxcore"
        or i.target.startswith("ctxcore.")
        or i.target.split(".")[0] == "streamlit"
    ]


#: every import, once per (module, target, line, names)
ALL_IMPORTS: list[Import] = list(
    dict.fromkeys(i for src in sorted(MODULES) for i in imports_of(src))
)


def _fail(title: str, lines: list[str], hint: str) -> None:
    if lines:
        pytest.fail(
            f"{title} ({len(lines)}):\n  " + "\n  ".join(lines) + f"\n{hint}", pytrace=False
        )


# --------------------------------------------------------------------------- (a) layering


def test_the_parts_table_is_read_as_the_layering_it_states() -> None:
    """The parse of the design's table, on rows whose meaning is not in doubt."""
    assert PARTS["settings"] == ("ctxcore.settings",)
    assert PARTS["root"] == ("ctxcore",)
    assert "ctxcore.__main__" in PARTS["cli"] and "ctxcore.pipeline" in PARTS["pipeline"]
    assert ALLOWED["settings"] == {"settings"}
    assert ALLOWED["core"] == {"settings", "core"}
    assert ALLOWED["cli"] == set(PARTS)
    assert "cli" not in ALLOWED["root"] and "demo" not in ALLOWED["root"]
    assert _allowed("x", "core, pipeline", ["settings", "core", "pipeline", "x"]) == {
        "settings",
        "core",
        "pipeline",
        "x",
    }
    with pytest.raises(AssertionError, match="unknown parts"):
        _allowed("x", "core, pipelines", ["settings", "core", "pipeline", "x"])


def test_every_library_module_belongs_to_a_part() -> None:
    orphans = [str(p.relative_to(ROOT)) for m, p in MODULES.items() if part_of(m) is None]
    _fail(
        "ctxcore modules that belong to no part",
        orphans,
        'Add them to the table in docs/design.md, "Parts and allowed imports" (read here).',
    )


def test_imports_follow_the_allowed_imports_table() -> None:
    bad: list[str] = []
    for imp in ALL_IMPORTS:
        if imp.target.split(".")[0] == "streamlit":
            continue  # test_library_never_imports_streamlit
        src_part = part_of(imp.source)
        if src_part is None:
            continue  # test_every_library_module_belongs_to_a_part
        if imp.target not in MODULES:
            bad.append(f"{imp.where()}: {imp.source} imports {imp.target}, which does not exist")
            continue
        dst_part = part_of(imp.target)
        assert dst_part is not None
        if dst_part == "root" and src_part != "root" and set(imp.names) <= ROOT_METADATA:
            continue
        if dst_part not in ALLOWED[src_part]:
            what = f"{imp.target}" + (f" ({', '.join(imp.names)})" if imp.names else "")
            allowed = ", ".join(p for p in PARTS if p in ALLOWED[src_part])
            bad.append(
                f"{imp.where()}: {imp.source} [{src_part}] imports {what} [{dst_part}]; "
                f"{src_part} may import only: {allowed}"
            )
    _fail(
        "imports that break the layering",
        bad,
        'Lower parts never import higher ones (docs/design.md, "Parts and allowed imports"): '
        "move the code to the part that owns it, or pass what it needs in as an argument.",
    )


# --------------------------------------------------------------------------- (b) circles


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp: list[str] = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_import_circles_between_library_modules() -> None:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    where: dict[tuple[str, str], str] = {}
    for imp in ALL_IMPORTS:
        if imp.module_level and imp.target in MODULES and imp.target != imp.source:
            graph[imp.source].add(imp.target)
            where.setdefault((imp.source, imp.target), imp.where())
    bad = []
    for comp in _cycles(graph):
        members = set(comp)
        edges = [
            f"{a} -> {b} ({where[(a, b)]})" for a in comp for b in sorted(graph[a]) if b in members
        ]
        bad.append(f"circle of {len(comp)} modules: " + "; ".join(edges))
    _fail(
        "import circles (module-level imports)",
        bad,
        "Break each circle: move the shared piece into the lower module, or import it "
        "inside the function that needs it.",
    )


# --------------------------------------------------------------------------- (c) streamlit


def test_library_never_imports_streamlit_or_the_app() -> None:
    bad = [
        f"{i.where()}: {i.source} imports {i.target}"
        for i in ALL_IMPORTS
        if i.target.split(".")[0] in ("streamlit", "ctxapp")
    ]
    _fail(
        "ctxcore modules that import streamlit or the app",
        bad,
        "ctxcore is the library; Streamlit belongs to the app, ctxapp/ "
        '(docs/design.md, "The app").',
    )


# --------------------------------------------------------------------------- (d) settings


def _section(markdown: str, title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}[ \t]*\n(.*?)(?=^## |\Z)", markdown, re.M | re.S)
    return m.group(1) if m else ""


def _table_rows(section: str) -> dict[str, list[str]]:
    """First cell (without backticks) -> the row's cells, for every markdown table row."""
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        line = line.strip()
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = [c.strip().strip("`").strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells
    return rows


#: how the table may write an empty default
_UNSET = frozenset({"", "(unset)", "unset", "(empty)", "(none)", "—"})


def test_readme_configuration_documents_every_environment_variable() -> None:
    config = _section(README.read_text(encoding="utf-8"), "Configuration")
    assert config, "README.md has no '## Configuration' section"
    rows = _table_rows(config)
    bad: list[str] = []
    for name, (default, _meaning) in settings.ENVIRONMENT.items():
        row = rows.get(name)
        if row is None:
            bad.append(f"{name}: no row in the table")
        elif len(row) < 3 or not (row[1] == default or (default == "" and row[1] in _UNSET)):
            got = row[1] if len(row) > 1 else "nothing"
            bad.append(f"{name}: the default column says {got!r}, settings says {default!r}")
    for path in (settings.DEFAULT_DB, settings.DEFAULT_TRACES_DIR):
        if f"`{path}" not in config:
            bad.append(f"default path {path} is not mentioned")
    _fail(
        "README.md, Configuration is out of step with ctxcore/settings.py",
        bad,
        "Each variable of settings.ENVIRONMENT needs a row `| NAME | default | meaning |`.",
    )


_ENV_NAME = re.compile(r"CTXSCOPE_[A-Z0-9_]*[A-Z0-9]")


def test_no_undeclared_environment_variables() -> None:
    files = [README, *library_files(), *sorted((ROOT / "ctxapp").rglob("*.py"))]
    bad: list[str] = []
    for path in files:
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for name in _ENV_NAME.findall(line):
                if name not in settings.ENVIRONMENT:
                    bad.append(f"{path.relative_to(ROOT)}:{no}: {name}")
    _fail(
        "CTXSCOPE_ variables not declared in settings.ENVIRONMENT",
        bad,
        "Declare each one in ctxcore/settings.py (ENV_* and ENVIRONMENT) and in the README's "
        "Configuration table, and read it through a settings function.",
    )


# --------------------------------------------------------------------------- (e) citations

_SKIP_DIRS = frozenset(
    {".git", ".venv", ".oracle-venv", "node_modules", "__pycache__", "corpus", "traces"}
)
_OLD_CITATION = re.compile(r"\bDESIGN\b(?:\.md)?[\s,]*§|§\s*\d")
#: ``docs/design.md, "<section>"`` (the quotes may span a line break) or unquoted
_CITATION = re.compile(r'docs/design\.md,[ \t]*(?:\n[ \t]*#?[ \t]*)?("[^"]{1,80}"|[^\n]+)')


def repo_files(*suffixes: str) -> list[Path]:
    out = []
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT).parts
        if any(p in _SKIP_DIRS or p.startswith(".") for p in rel[:-1]):
            continue
        if path.is_file() and (path.suffix in suffixes or path.name in suffixes):
            out.append(path)
    return sorted(out)


def design_headings() -> list[str]:
    text = DESIGN.read_text(encoding="utf-8")
    return [m.group(1).strip() for m in re.finditer(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", text, re.M)]


def test_design_document_exists_with_its_sections() -> None:
    assert DESIGN.is_file(), "docs/design.md is missing"
    want = [
        "Overview",
        "Parts and allowed imports",
        "The trace contract",
        "The pipeline",
        "Presets",
        "Degradation ladder",
        "Diagnostics",
        "Store",
        "Ingest and the watcher",
        "Capture, import, export, redaction",
        "The app",
        "Settings",
    ]
    have = design_headings()
    missing = [w for w in want if w not in have]
    _fail("sections missing from docs/design.md", missing, "Code cites them by these names.")


def test_no_python_file_cites_the_outside_design_brief() -> None:
    this = Path(__file__).resolve()
    bad: list[str] = []
    for path in repo_files(".py"):
        if path.resolve() == this:
            continue
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if _OLD_CITATION.search(line):
                bad.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()}")
    _fail(
        'citations of "DESIGN §…" (a document outside the repository)',
        bad,
        'Cite the repository\'s design instead: docs/design.md, "<section name>".',
    )


def test_design_citations_name_existing_sections() -> None:
    headings = design_headings()
    bad: list[str] = []
    for path in repo_files(".py", ".md", ".sh", ".toml", "Makefile"):
        if path == DESIGN:
            continue
        text = path.read_text(encoding="utf-8")
        for m in _CITATION.finditer(text):
            cited = m.group(1).strip()
            if cited.startswith(('"<', "<")):
                continue  # a placeholder, as in this file's own messages
            if cited.startswith('"'):
                ok = re.sub(r"\s*\n\s*#?\s*", " ", cited.strip('"')) in headings
            else:  # unquoted: the text must start with a heading, then end or punctuation
                ok = any(re.match(rf"{re.escape(h)}(?![\w-])", cited) for h in headings)
            if not ok:
                no = text.count("\n", 0, m.start()) + 1
                bad.append(f"{path.relative_to(ROOT)}:{no}: {m.group(0).strip()}")
    _fail(
        "citations of docs/design.md sections that do not exist",
        bad,
        "Sections: " + " · ".join(headings),
    )


# --------------------------------------------------------------------------- (f) the app's pages


def test_the_design_page_table_lists_exactly_the_page_registry() -> None:
    """docs/design.md, "The app" has a row per page of ``ctxapp.pages.PAGES`` (the registry
    imports nothing from Streamlit), in the registry's order, and no other."""
    from ctxapp.pages import PAGES

    rows = _table_rows(_section(DESIGN.read_text(encoding="utf-8"), "The app"))
    listed = [name for name, cells in rows.items() if cells[:2] != ["Page", "Shows"]]
    registry = [p.title for p in PAGES]
    assert listed == registry, (
        f'docs/design.md, "The app" lists the pages {listed}; the registry '
        f"(ctxapp/pages/__init__.py PAGES) has {registry}. Keep the table to the registry."
    )


# --------------------------------------------------------------------------- (g) the detectors


def test_the_design_detector_table_lists_exactly_the_registry() -> None:
    """docs/design.md, "Diagnostics" has a row per detector of ``diagnostics.DETECTORS``, in
    the registry's order, and no other (read from the source: the registry is a dict
    literal of names)."""
    source = (CTXCORE / "diagnostics" / "__init__.py").read_text(encoding="utf-8")
    registry = None
    for node in ast.walk(ast.parse(source)):
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == "DETECTORS" for t in targets):
            value = node.value
            assert isinstance(value, ast.Dict), "DETECTORS is no dict literal"
            registry = [k.value for k in value.keys if isinstance(k, ast.Constant)]
    assert registry, "ctxcore/diagnostics/__init__.py has no DETECTORS"
    section = _section(DESIGN.read_text(encoding="utf-8"), "Diagnostics")
    table = section[section.index("| Detector | Finds |") :].split("\n\n", 1)[0]
    listed = [name for name in _table_rows(table) if name != "Detector"]
    assert listed == registry, (
        f'docs/design.md, "Diagnostics" lists the detectors {listed}; the registry '
        f"(diagnostics.DETECTORS) has {registry}."
    )
