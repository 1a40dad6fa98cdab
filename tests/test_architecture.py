"""docs/architecture.md stays true: its module map is the code's, every rule code cited is defined there."""

from __future__ import annotations

import importlib
import re
import tomllib

from helpers import ROOT

SRC = ROOT / "src"
DOC = ROOT / "docs" / "architecture.md"
# Rule codes as the code cites them: beads' load, blocked, ready and listing rules, Gas Town's families.
RULE_CODE = re.compile(r"\b(?:[BK]\d|R\d{1,2}|L\d|R-[A-M]\d?)\b")
# Citations of files that are not in the repository.
OUTSIDE = re.compile(r"\.\./shared|\bDESIGN\b|§|\b\w+\.go\b")


def modules() -> set[str]:
    out = set()
    for path in (SRC / "sluice").rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        out.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_the_module_map_names_every_module_and_only_modules():
    named = set(re.findall(r"`(sluice(?:\.\w+)*)`", section(DOC.read_text(), "Module map")))
    assert sorted(modules() - named) == [], "modules missing from the module map in docs/architecture.md"
    assert sorted(named - modules()) == [], "the module map names modules that do not exist"


def test_the_layers_inside_the_scheduler_and_the_store_name_every_module():
    """Each module of the two layered containers sits in one of their layers (a folder's package aside)."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    checked = []
    for contract in contracts:
        if contract.get("containers") not in (["sluice.scheduler"], ["sluice.store"]):
            continue
        [container] = contract["containers"]
        named = {f"{container}.{name.strip()}" for layer in contract["layers"] for name in layer.split("|")}
        inside = {name for name in modules() if name.startswith(container + ".")}
        folders = {name for name in inside if any(other.startswith(name + ".") for other in inside)}
        placed = {name for name in inside if any(name == n or name.startswith(n + ".") for n in named)}
        assert sorted(inside - folders - placed) == [], f"modules of {container} in none of its layers"
        checked.append(container)
    assert sorted(checked) == ["sluice.scheduler", "sluice.store"]


def test_every_function_and_class_the_page_names_exists():
    for name in sorted(set(re.findall(r"`(sluice\.[\w.]+)", DOC.read_text()))):
        parts = name.split(".")
        cut = max(n for n in range(1, len(parts) + 1) if ".".join(parts[:n]) in modules())
        target = importlib.import_module(".".join(parts[:cut]))
        for attribute in parts[cut:]:
            assert hasattr(target, attribute), f"docs/architecture.md names {name}, which does not exist"
            target = getattr(target, attribute)


def test_every_rule_code_the_code_cites_is_defined():
    rules = section(DOC.read_text(), "Rules")
    for path in sorted((SRC / "sluice").rglob("*.py")):
        for code in sorted(set(RULE_CODE.findall(path.read_text(encoding="utf-8")))):
            where = path.relative_to(ROOT)
            assert f"**{code}**" in rules, f"{where} cites {code}, which docs/architecture.md does not define"


def test_nothing_cites_files_outside_the_repository():
    files = [*(SRC / "sluice").rglob("*.py"), *(ROOT / "docs").glob("*.md")]
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            found = OUTSIDE.search(line)
            assert found is None, f"{path.relative_to(ROOT)}:{number} cites {found.group()!r}: {line.strip()}"


def test_the_architecture_page_is_linked():
    assert "(architecture.md)" in (ROOT / "docs" / "concepts.md").read_text()
    assert "(docs/architecture.md)" in (ROOT / "README.md").read_text()
