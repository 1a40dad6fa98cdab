"""docs/formats.md lists every file sluice keeps under `.sluice/`: a town used the way operators use it
holds nothing the layout does not name."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from helpers import Cli, make_repo

ROOT = Path(__file__).resolve().parents[1]


def documented_patterns() -> list[re.Pattern]:
    text = (ROOT / "docs" / "formats.md").read_text()
    block = text.split("```\n<town>/.sluice/\n", 1)[1].split("```", 1)[0]
    patterns = []
    for line in block.splitlines():
        entry = line.split()[0]
        regex = re.escape(entry)
        regex = re.sub(r"<[a-z]+>", "[^/]+", regex.replace(r"\<", "<").replace(r"\>", ">"))
        regex = regex.replace("NN", r"\d\d").replace("…", ".*")
        patterns.append(re.compile(regex + "$"))
    return patterns


def test_every_file_under_dot_sluice_is_in_the_documented_layout(cli: Cli, tmp_path: Path):
    for name, prefix in (("alpha", "al"), ("beta", "be")):
        make_repo(tmp_path / "repos" / name)
        cli.run("rig", "add", name, str(tmp_path / "repos" / name), "--prefix", prefix)
    cli.run("config", "set", "scheduler.max_polecats", "2")
    cli.run("config", "set", "executor.command", f'["{sys.executable}", "-c", "print(1)"]')
    first = cli.json("item", "create", "alpha", "--title", "first")["id"]
    cli.json("item", "create", "alpha", "--title", "second", "--dep", first)
    cli.json("item", "create", "beta", "--title", "beta work")
    cli.run("sling", first)
    cli.run("scheduler", "run")
    cli.run("scheduler", "pause")
    cli.run("scheduler", "resume")
    cli.run("schedule", "next")
    cli.run("schedule", "policy", "set", "--fairness", "0.5")
    cli.run("hooks", "install", "alpha")
    cli.run("daemon", "--once")
    cli.run("patrol", "alpha", "--fix")
    cli.run("rig", "remove", "beta")

    patterns = documented_patterns()
    dot = cli.town / ".sluice"
    files = sorted(str(p.relative_to(dot)) for p in dot.rglob("*") if p.is_file())
    undocumented = [f for f in files if not any(p.match(f) for p in patterns)]
    assert not undocumented, f"files under .sluice/ missing from docs/formats.md: {undocumented}"
    assert any(f.startswith("runtime/workers/") and f.endswith(".log") for f in files)  # a polecat ran
