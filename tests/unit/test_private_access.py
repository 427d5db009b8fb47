"""Private names of other packages are touched in the declared adapter modules only.

A third-party release may rename or drop any private attribute without notice; llmload keeps
every such contact in one adapter module per package family (`ADAPTERS`), whose contract test
says at once what a new release broke. The rule checked here, on the syntax of every module of llmload/:

- an attribute `x._name` (one leading underscore, not a dunder), or a `getattr`/`hasattr`/
  `setattr`/`delattr` of the literal `"_name"`, is llmload's own when some module of llmload
  defines that name (`def _name`, `class _name`, a module-level or class-level `_name = ...`, or
  `self._name = ...` / `cls._name = ...`); otherwise it is a private of another package;
- `import pkg._mod` / `from pkg._mod import X` / `from pkg import _name` of a package other than
  llmload is a private of another package.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator

from fixtures.paths import REPO

PACKAGE = REPO / "llmload"
# the only modules allowed to touch other packages' privates, each with its contract test
ADAPTERS = {
    "llmload/loadgen/transport/ghc_adapter.py",  # test_ghc_adapter_contract.py
    "llmload/loadgen/argparse_adapter.py",  # test_argparse_adapter_contract.py
    "llmload/sim/aiohttp_adapter.py",  # test_sim_adapter_contract.py
}
REFLECTION = {"getattr", "hasattr", "setattr", "delattr"}


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _owner_names(node: ast.expr) -> Iterator[str]:
    """Private names a store to `node` defines: `_x`, `self._x`, `cls._x`, unpacked or not."""
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        if node.value.id in ("self", "cls"):
            yield node.attr
    elif isinstance(node, ast.Tuple | ast.List):
        for element in node.elts:
            yield from _owner_names(element)
    elif isinstance(node, ast.Starred):
        yield from _owner_names(node.value)


def defined_names(trees: Iterable[ast.Module]) -> set[str]:
    """Every private name some module of llmload defines (the module docstring's rule)."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    names.update(_owner_names(target))
            elif isinstance(node, ast.AnnAssign | ast.AugAssign):
                names.update(_owner_names(node.target))
    return {name for name in names if is_private(name)}


def _foreign_module(module: str) -> bool:
    parts = module.split(".")
    return parts[0] != "llmload" and any(is_private(part) for part in parts)


def private_accesses(tree: ast.Module, own: set[str]) -> list[tuple[int, str]]:
    """(line, what) of every access in `tree` to a private name llmload does not define."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr) and node.attr not in own:
            found.append((node.lineno, f".{node.attr}"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in REFLECTION
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and is_private(node.args[1].value)
            and node.args[1].value not in own
        ):
            found.append((node.lineno, f'{node.func.id}("{node.args[1].value}")'))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if _foreign_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            if _foreign_module(node.module):
                found.append((node.lineno, f"from {node.module} import"))
            elif not node.module.startswith("llmload"):
                found += [
                    (node.lineno, f"from {node.module} import {a.name}")
                    for a in node.names
                    if is_private(a.name)
                ]
    return sorted(found)


def package_trees() -> dict[str, ast.Module]:
    return {
        path.relative_to(REPO).as_posix(): ast.parse(path.read_text(), str(path))
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def test_only_the_adapters_touch_other_packages_privates() -> None:
    trees = package_trees()
    own = defined_names(trees.values())
    outside = {
        f"{module}:{line} {what}"
        for module, tree in trees.items()
        if module not in ADAPTERS
        for line, what in private_accesses(tree, own)
    }
    assert sorted(outside) == []


def test_each_declared_adapter_exists_and_is_needed() -> None:
    """An adapter that no longer touches a private of another package is no adapter: drop it."""
    trees = package_trees()
    own = defined_names(trees.values())
    assert {module: bool(private_accesses(trees[module], own)) for module in ADAPTERS} == dict.fromkeys(
        ADAPTERS, True
    )


PLANTED = """
import gevent._ffi
from geventhttpclient._parser import HTTPResponseParser
from ssl import _create_unverified_context
from llmload.sim.__main__ import main
from llmload.x import _ours


class Mine:
    _level = 0

    def __init__(self, pool):
        self._kept = pool
        self._a, (self._b, other._c) = 1, (2, 3)

    def _helper(self):
        return self._kept._semaphore, self._a, self._b, self._level, self.__dict__


def read(resp, pool):
    pool._create_tcp_socket = None
    other._c
    getattr(resp, "_sock", None), hasattr(pool, "_helper"), getattr(resp, "__class__")
    return resp._body_buffer, Mine()._helper(), _ours
"""


def test_the_checker_finds_exactly_the_planted_accesses() -> None:
    tree = ast.parse(PLANTED)
    own = defined_names([tree])
    assert own == {"_level", "_kept", "_a", "_b", "_helper"}
    assert private_accesses(tree, own) == [
        (2, "import gevent._ffi"),
        (3, "from geventhttpclient._parser import"),
        (4, "from ssl import _create_unverified_context"),
        (14, "._c"),  # `other._c = ...` defines nothing: only self/cls stores do
        (17, "._semaphore"),
        (21, "._create_tcp_socket"),
        (22, "._c"),
        (23, 'getattr("_sock")'),
        (24, "._body_buffer"),
    ]
