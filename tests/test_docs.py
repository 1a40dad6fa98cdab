"""Documentation cannot drift: every command and flag is documented, and help text exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer.main

from sluice.surfaces.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _commands():
    def walk(command, path):
        subs = getattr(command, "commands", None)
        if subs:
            for name, sub in sorted(subs.items()):
                yield from walk(sub, [*path, name])
        else:
            yield " ".join(path), command

    return list(walk(typer.main.get_command(app), ["sluice"]))


COMMANDS = _commands()


def test_the_command_set_is_what_the_design_promises():
    names = {name for name, _ in COMMANDS}
    for expected in [
        "sluice init", "sluice rig add", "sluice rig list", "sluice item create", "sluice item show",
        "sluice item list", "sluice item ready", "sluice item blocked", "sluice item update",
        "sluice item close", "sluice item dep add", "sluice item import", "sluice sling",
        "sluice scheduler status", "sluice scheduler list", "sluice scheduler run", "sluice scheduler pause",
        "sluice scheduler resume", "sluice scheduler clear", "sluice schedule next", "sluice schedule status",
        "sluice schedule policy show", "sluice schedule policy set", "sluice config get", "sluice config set",
        "sluice daemon", "sluice patrol", "sluice hooks install", "sluice hooks report", "sluice mcp",
        "sluice demo", "sluice polecat list", "sluice polecat stop", "sluice polecat logs",
        "sluice rig remove", "sluice hooks uninstall", "sluice schedule policy unset",
    ]:
        assert expected in names


@pytest.mark.parametrize(("name", "command"), COMMANDS, ids=[name for name, _ in COMMANDS])
def test_every_command_has_help_and_a_line_in_the_cli_reference(name: str, command):
    assert (command.help or "").strip(), f"{name} has no help text"
    reference = (DOCS / "cli.md").read_text()
    assert f"`{name}" in reference, f"{name} is missing from docs/cli.md"


@pytest.mark.parametrize(("name", "command"), COMMANDS, ids=[name for name, _ in COMMANDS])
def test_every_flag_is_documented(name: str, command):
    reference = (DOCS / "cli.md").read_text()
    line = next(row for row in reference.splitlines() if f"`{name}" in row)
    for param in command.params:
        for flag in param.opts:
            if flag.startswith("--") and flag not in ("--help",):
                assert re.search(re.escape(flag) + r"\b", line), f"{name}: {flag} missing from docs/cli.md"


def test_docs_link_to_files_that_exist():
    for page in DOCS.glob("*.md"):
        for target in re.findall(r"\]\(([a-z_]+\.md)(?:#[^)]*)?\)", page.read_text()):
            assert (DOCS / target).exists(), f"{page.name} links to missing {target}"
    for target in re.findall(r"\]\((docs/[a-z_]+\.md)\)", (ROOT / "README.md").read_text()):
        assert (ROOT / target).exists()


def test_readme_opens_with_the_two_setup_commands():
    text = (ROOT / "README.md").read_text()
    block = text.split("```")[1]
    lines = [ln for ln in block.splitlines()[1:] if ln.strip()]
    assert len(lines) == 2
    assert lines[0].endswith("&& sluice demo")
    assert (ROOT / lines[1].split()[0]).exists()
