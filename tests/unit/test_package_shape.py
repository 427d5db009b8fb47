"""The package's shape (docs/architecture.md): no import circle between llmload's modules, counting
every import (top-level, inside functions, under TYPE_CHECKING), no folder of more than 15
modules, no loadgen module over 350 lines and no command module (cli) over 250. The circle finder
and the length check are each checked on a planted case, so a pass means something."""

from __future__ import annotations

import ast
from pathlib import Path

from fixtures.paths import REPO

MAX_MODULES = 15  # modules of one folder, its __init__ and __main__ not counted
MAX_LOADGEN_LINES = 350  # lines of one loadgen module (the first architecture step's bar)
MAX_CLI_LINES = 250  # lines of one command module (llmload.cli: parse, call, print, return a code)


def module_names(root: Path) -> dict[str, Path]:
    """Every module of the package under `root` by its dotted name (a package by its own)."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules `name` imports anywhere in its file (a package's name when only
    the package is imported)."""

    def known(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(known(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in modules else known(base))
    return {m for m in found if m is not None and m != name}


def import_circles(root: Path) -> list[list[str]]:
    """The strongly connected parts of the import graph with more than one module (Tarjan)."""
    modules = module_names(root)
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = []
            while True:
                top = stack.pop()
                part.append(top)
                if top == node:
                    break
            if len(part) > 1:
                circles.append(sorted(part))

    for node in graph:
        if node not in index:
            visit(node)
    return circles


def test_no_import_circle_in_the_package() -> None:
    assert import_circles(REPO / "llmload") == []


def test_a_planted_circle_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..c import g\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n")
    (pkg / "d.py").write_text("import pkg.a\n")  # imports into the circle, not part of it
    assert import_circles(pkg) == [["pkg.a", "pkg.c", "pkg.sub.b"]]


def test_no_folder_holds_more_than_15_modules() -> None:
    crowded = {}
    for folder in sorted(p for p in (REPO / "llmload").rglob("*") if p.is_dir() and p.name != "__pycache__"):
        modules = [p for p in folder.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
        if len(modules) > MAX_MODULES:
            crowded[str(folder.relative_to(REPO))] = len(modules)
    assert crowded == {}


def long_modules(folder: Path, most: int) -> dict[str, int]:
    """The modules under `folder` of more than `most` lines, with their lengths."""
    long = {}
    for path in sorted(folder.rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines > most:
            long[str(path.relative_to(folder.parent))] = lines
    return long


def test_no_loadgen_module_over_350_lines() -> None:
    assert long_modules(REPO / "llmload" / "loadgen", MAX_LOADGEN_LINES) == {}


def test_no_command_module_over_250_lines() -> None:
    """A command parses, calls, prints and returns its exit code: its logic lives below it."""
    assert long_modules(REPO / "llmload" / "cli", MAX_CLI_LINES) == {}


def test_a_planted_long_command_is_found(tmp_path: Path) -> None:
    cli = tmp_path / "cli"
    cli.mkdir()
    (cli / "short.py").write_text("x = 1\n" * MAX_CLI_LINES)
    (cli / "long.py").write_text("x = 1\n" * (MAX_CLI_LINES + 1))
    assert long_modules(cli, MAX_CLI_LINES) == {"cli/long.py": MAX_CLI_LINES + 1}
