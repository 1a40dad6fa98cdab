"""What the tests share: real git repositories, the real CLI in a subprocess, the beads exports.

Fixtures live in ``tests/conftest.py``; plain functions and classes live
here and in the modules beside this one (``helpers.scheduler``,
``helpers.advisor``, ``helpers.polecats`` …), imported as a package because
the suite runs under ``--import-mode=importlib``, where test modules cannot
import one another.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}

#: Where the public beads exports are read from, when a test needs them.
BEADS_DATA_VAR = "SLUICE_BEADS_DATA"


def _clone_root() -> Path:
    """The main checkout of this repository (a linked worktree answers its main clone)."""
    try:
        common = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--path-format=absolute", "--git-common-dir"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ROOT
    return Path(common).parent if common.endswith(".git") else ROOT


def beads_data() -> Path:
    """The directory of real beads exports: ``$SLUICE_BEADS_DATA``, else ``../shared/data/beads``.

    The default is the ``shared/`` folder laid beside the clone (as CI does);
    a fresh clone has none, and the tests that need it skip.
    """
    configured = os.environ.get(BEADS_DATA_VAR)
    if configured:
        return Path(configured).expanduser().resolve()
    return _clone_root().parent / "shared" / "data" / "beads"


def beads_data_missing_reason(path: Path) -> str:
    return f"needs the public beads exports: set {BEADS_DATA_VAR} to their directory (none at {path})"


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
