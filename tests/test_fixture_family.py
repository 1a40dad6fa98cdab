"""One fixture name means one type across the suite.

tests/conftest.py owns the family (``town_dir``, ``town_files``,
``api_town`` …); a module that defined one of those names again, or a bare
``town``, would give the name a second meaning for its own tests, the way
``town`` once meant a ``Path`` in one module and a ``Town`` in the next.  A
module's own scenario says what it returns by its suffix (``_dir``,
``_files``, ``_api``, ``_cli``), never ``_town``, which meant all of those.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def retired(name: str) -> bool:
    """A name no module may give a fixture: ``town`` and ``*_town`` each meant several types."""
    return name == "town" or name.endswith("_town")


def fixtures(path: Path) -> dict[str, int]:
    """Every fixture ``path`` defines, by name, with its line."""
    return {node.name: node.lineno for node in _fixture_nodes(path)}


def _fixture_nodes(path: Path) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [node for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path)))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and any(_is_fixture(d) for d in node.decorator_list)]


def _is_fixture(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(target, ast.Attribute) and target.attr == "fixture") or (
        isinstance(target, ast.Name) and target.id == "fixture")


FAMILY = set(fixtures(TESTS / "conftest.py"))
MODULES = sorted(p for p in TESTS.glob("*.py") if p.name != "conftest.py")


def test_the_family_names_the_documented_types():
    assert {"town_dir", "cli", "town_files", "api_town", "rig", "rigs", "capacity", "real_polecats", "clock",
            "memory"} <= FAMILY
    doc = ast.get_docstring(ast.parse((TESTS / "conftest.py").read_text(encoding="utf-8"))) or ""
    assert [name for name in FAMILY if f"``{name}``" not in doc] == []  # the docstring names them all


def test_no_module_redefines_a_family_fixture_or_a_bare_town():
    clashes = [f"{path.name}:{line} {name}" for path in MODULES
               for name, line in fixtures(path).items() if name in FAMILY or retired(name)]
    assert not clashes, f"fixtures named like the family in conftest.py, or town, or *_town: {clashes}"


def test_a_name_several_modules_define_says_one_type_in_each():
    """Modules may share a scenario's name only if each says, by its return annotation, the same type."""
    returns: dict[str, dict[str, str | None]] = {}
    for path in MODULES:
        for node in _fixture_nodes(path):
            returns.setdefault(node.name, {})[path.name] = ast.unparse(node.returns) if node.returns else None
    unclear = {name: by_module for name, by_module in returns.items()
               if len(by_module) > 1 and (None in by_module.values() or len(set(by_module.values())) > 1)}
    assert unclear == {}


def test_the_check_finds_a_redefinition(tmp_path):
    module = tmp_path / "test_x.py"
    module.write_text("import pytest\nfrom pytest import fixture\n\n@pytest.fixture(scope='module')\n"
                      "def town(tmp_path):\n    return tmp_path\n\n@fixture\ndef town_dir():\n    pass\n")
    assert fixtures(module) == {"town": 5, "town_dir": 9}


def test_no_module_imports_from_conftest():
    """Shared code lives in ``helpers``: what conftest.py imports for itself may move without notice."""
    found = [f"{path.name}:{node.lineno}" for path in MODULES
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if (isinstance(node, ast.ImportFrom) and node.module == "conftest")
             or (isinstance(node, ast.Import) and any(a.name == "conftest" for a in node.names))]
    assert found == []
