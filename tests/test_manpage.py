"""`git sluice --help` opens a real manual page: git runs `man git-sluice`, man finds the shipped page."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from helpers import ROOT
from sluice.surfaces.cli.manpage import PAGES, render
from sluice.surfaces.cli.manpage import _walk as commands


def test_the_shipped_pages_match_the_command_line():
    for name, prog in PAGES.items():
        shipped = (ROOT / "man" / name).read_text(encoding="utf-8")
        assert shipped == render(prog), f"man/{name} is out of date: run scripts/gen_man.py"


def test_the_page_names_every_command_and_option():
    import typer.main

    from sluice.surfaces.cli import app

    page = render("sluice").replace("\\-", "-")
    for path, command in commands(typer.main.get_command(app), ["sluice"]):
        assert f'.SS "{" ".join(path)}' in page, path
        for param in command.params:
            for flag in param.opts:
                if flag.startswith("--") and flag != "--help":
                    assert flag in page, (path, flag)


def test_the_wheel_ships_the_pages_and_git_sluice_help_shows_them(tmp_path: Path):
    source = tmp_path / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(ROOT / "src", source / "src", ignore=ignore)
    shutil.copytree(ROOT / "man", source / "man")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"),
                    str(source)], check=True, capture_output=True, timeout=600)
    (wheel,) = (tmp_path / "dist").glob("*.whl")

    # Lay the wheel's data out as an installer does: <prefix>/share/man/man1 beside <prefix>/bin.
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if ".data/data/" in member:
                target = prefix / member.split(".data/data/", 1)[1]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(member))
    for name in PAGES:
        assert (prefix / "share" / "man" / "man1" / name).read_text() == (ROOT / "man" / name).read_text()
    (prefix / "bin" / "git-sluice").symlink_to(Path(sys.executable).parent / "git-sluice")

    env = {k: v for k, v in os.environ.items() if k not in ("MANPATH", "MANOPT", "GIT_PAGER")}
    env.update(PATH=f"{prefix / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", MANPAGER="cat", PAGER="cat",
               MANWIDTH="100", HOME=str(tmp_path), GIT_CONFIG_NOSYSTEM="1")
    where = subprocess.run(["man", "-w", "git-sluice"], env=env, capture_output=True, text=True, timeout=60)
    assert where.stdout.strip() == str(prefix / "share" / "man" / "man1" / "git-sluice.1"), where.stderr
    shown = subprocess.run(["git", "sluice", "--help"], env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "git-sluice - a git-native scheduler" in shown.stdout
    assert "git sluice scheduler run" in shown.stdout and "--dry-run" in shown.stdout


def _readme_first_command() -> list[str]:
    block = (ROOT / "README.md").read_text().split("```")[1]
    first = next(line for line in block.splitlines()[1:] if line.strip())
    return [step.strip() for step in first.split("&&")]


def test_the_readme_first_command_installs_the_manual_and_puts_sluice_on_the_path():
    steps = _readme_first_command()
    assert steps[0].startswith("python3 -m venv .venv")
    install = next(i for i, step in enumerate(steps) if "pip install" in step and "-e ." in step)
    manual = next(i for i, step in enumerate(steps) if "scripts/gen_man.py --install" in step)
    activate = steps.index(". .venv/bin/activate")
    assert install < manual < activate < len(steps) - 1
    assert steps[-1] == "sluice demo"  # bare, as the tutorial types it: the venv's bin is on PATH


def test_after_the_readme_first_command_git_sluice_help_shows_the_manual(tmp_path: Path):
    # The README's own manual step, run with this interpreter against a fresh prefix standing in for .venv.
    (step,) = [s for s in _readme_first_command() if "scripts/gen_man.py --install" in s]
    prefix = tmp_path / "venv"
    (prefix / "bin").mkdir(parents=True)
    argv = [sys.executable, *step.split()[1:], "--prefix", str(prefix)]
    subprocess.run(argv, cwd=ROOT, check=True, capture_output=True, timeout=120)
    (prefix / "bin" / "git-sluice").symlink_to(Path(sys.executable).parent / "git-sluice")

    env = {k: v for k, v in os.environ.items() if k not in ("MANPATH", "MANOPT", "GIT_PAGER")}
    env.update(PATH=f"{prefix / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", MANPAGER="cat", PAGER="cat",
               MANWIDTH="100", HOME=str(tmp_path), GIT_CONFIG_NOSYSTEM="1")
    shown = subprocess.run(["git", "sluice", "--help"], env=env, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert "git-sluice - a git-native scheduler" in shown.stdout
    assert "git sluice scheduler run" in shown.stdout
