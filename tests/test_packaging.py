"""The distribution is ``git-sluice`` (``sluice`` on the package index is an unrelated project).

Every install line in the README, the docs and the messages sluice prints
must name it, or a reader installs the wrong thing.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# `pip install` (with any flags) of the package-index name sluice, with or without extras
WRONG_INSTALL = re.compile(r"pip install(?:\s+-\S+)*\s+['\"]?sluice(?:\[[^\]]*\])?['\"]?(?:\s|$|`)")
TEXTS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
         *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "src" / "sluice").rglob("*.py"))]


def test_the_distribution_is_git_sluice_with_both_commands():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "git-sluice"
    assert project["scripts"]["sluice"] == project["scripts"]["git-sluice"]  # one entry point, two names


def test_the_installed_metadata_carries_the_new_name():
    try:
        dist = importlib.metadata.distribution("git-sluice")
    except importlib.metadata.PackageNotFoundError:
        raise AssertionError("no git-sluice distribution installed; an older checkout installed it "
                             "as `sluice`: reinstall with pip install -e '.[test]'") from None
    assert {ep.name for ep in dist.entry_points if ep.group == "console_scripts"} >= {"sluice", "git-sluice"}
    import sluice

    assert dist.version == sluice.__version__


def test_no_install_line_or_version_lookup_names_the_wrong_distribution():
    wrong = []
    for rel in TEXTS:
        text = (ROOT / rel).read_text()
        for number, line in enumerate(text.splitlines(), start=1):
            if WRONG_INSTALL.search(line) or re.search(r"""version\(\s*['"]sluice['"]\s*\)""", line):
                wrong.append(f"{rel}:{number}: {line.strip()}")
    assert not wrong, "install lines must name git-sluice:\n" + "\n".join(wrong)


def test_the_ray_message_names_the_extra_of_git_sluice():
    from sluice.executors.ray import NOT_INSTALLED

    assert NOT_INSTALLED.endswith("pip install 'git-sluice[ray]'")
