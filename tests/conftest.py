"""Shared fixtures: real towns, real git repositories, the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "beads"
if not DATA.is_dir():  # CI lays shared/ beside the clone
    DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "beads"


def git(*args: str, cwd: Path) -> str:
    env = {**os.environ, **GIT_ENV, "HOME": str(cwd)}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True)
    return done.stdout


def make_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A real git repository with one commit."""
    path.mkdir(parents=True, exist_ok=True)
    git("init", "-q", "-b", "main", str(path), cwd=path.parent)
    for name, text in (files or {"README.md": "rig\n"}).items():
        (path / name).write_text(text)
    git("add", "-A", cwd=path)
    git("commit", "-q", "-m", "initial", cwd=path)
    return path


class Cli:
    """Runs the installed ``sluice`` entry point against one town."""

    def __init__(self, town: Path):
        self.town = town

    def run(self, *args: str, check: bool = True, env: dict | None = None, timeout: float = 120, cwd=None):
        full_env = {**os.environ, "SLUICE_TOWN": str(self.town), **(env or {})}
        done = subprocess.run(
            [sys.executable, "-m", "sluice", *args],
            cwd=cwd or self.town,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"sluice {' '.join(args)} exited {done.returncode}\n"
                f"stdout:{done.stdout}\nstderr:{done.stderr}"
            )
        return done

    def json(self, *args: str, **kw):
        return json.loads(self.run(*args, "--json", **kw).stdout)


@pytest.fixture
def town_dir(tmp_path: Path) -> Path:
    town = tmp_path / "town"
    town.mkdir()
    subprocess.run([sys.executable, "-m", "sluice", "init", str(town)], check=True, capture_output=True)
    return town


@pytest.fixture
def cli(town_dir: Path) -> Cli:
    return Cli(town_dir)


@pytest.fixture
def rig(cli: Cli, tmp_path: Path) -> str:
    """A rig named ``alpha`` (prefix ``al``) over a real git repository with its own store."""
    make_repo(tmp_path / "repos" / "alpha")
    cli.run("rig", "add", "alpha", str(tmp_path / "repos" / "alpha"), "--prefix", "al")
    return "alpha"


@pytest.fixture
def beads_data() -> Path:
    if not DATA.is_dir():
        pytest.fail(f"real beads exports not found at {DATA}")
    return DATA
