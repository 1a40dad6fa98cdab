"""What the tests share: real git repositories, the real CLI, the beads exports.

Fixtures live in ``tests/conftest.py``; plain functions and classes live
here and in the modules beside this one (``helpers.scheduler``,
``helpers.advisor``, ``helpers.polecats`` …), imported as a package because
the suite runs under ``--import-mode=importlib``, where test modules cannot
import one another.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
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


def run_in_process(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """``python -m sluice ARGS`` run by this process, with everything it touches put back after."""
    import io
    import logging

    from sluice.__main__ import main

    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    logger = logging.getLogger("sluice")
    saved = (dict(os.environ), os.getcwd(), sys.argv, sys.stdout, sys.stderr,
             list(logger.handlers), logger.level, logger.propagate)
    code: int = 0
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv, sys.stdout, sys.stderr = ["sluice", *args], out, err
    try:
        code = main() or 0
    except SystemExit as exit_:
        if exit_.code is None:
            code = 0
        elif isinstance(exit_.code, int):
            code = exit_.code
        else:
            err.write(f"{exit_.code}\n")
            code = 1
    finally:
        environ, where, sys.argv, sys.stdout, sys.stderr, handlers, level, propagate = saved
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(where)
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate
    stdout, stderr = (s.buffer.getvalue().decode("utf-8", "replace").replace("\r\n", "\n")
                      for s in (out, err))
    return subprocess.CompletedProcess(["sluice", *args], code, stdout, stderr)


def git(*args: str, cwd: Path) -> str:
    env = {**os.environ, **GIT_ENV, "HOME": str(cwd)}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True)
    return done.stdout


def make_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A real git repository with one commit.

    The plain one (a README) is made by git once per process and copied for
    every later rig: a repository holds no path of its own, so the copy is as
    real as the first, and most fixtures need one or two of them.
    """
    if files is None and not path.exists():
        shutil.copytree(_plain_repo(), path, symlinks=True)
        return path
    path.mkdir(parents=True, exist_ok=True)
    git("init", "-q", "-b", "main", str(path), cwd=path.parent)
    for name, text in (files or {"README.md": "rig\n"}).items():
        (path / name).write_text(text)
    git("add", "-A", cwd=path)
    git("commit", "-q", "-m", "initial", cwd=path)
    return path


_PLAIN: list[Path] = []


def _plain_repo() -> Path:
    if not _PLAIN:
        root = Path(tempfile.mkdtemp(prefix="sluice-test-repo-"))
        atexit.register(shutil.rmtree, root, True)
        _PLAIN.append(make_repo(root / "repo", {"README.md": "rig\n"}))
    return _PLAIN[0]


class Cli:
    """Runs the real ``sluice`` entry point against one town.

    By default the command runs inside the test's own process, the way
    ``python -m sluice`` runs it (same ``main``, argv, environment, working
    directory and captured stdout/stderr; ``SystemExit`` becomes the return
    code): starting an interpreter and importing typer for each of the
    suite's thousands of commands would cost most of its time.  ``isolated``
    (or a ``timeout``) runs it in a child process instead, for the tests
    whose point is the process itself — a hung command, start-up imports, a
    signal.
    """

    def __init__(self, town: Path, isolated: bool = False):
        self.town = town
        self.isolated = isolated

    def run(self, *args: str, check: bool = True, env: dict | None = None, timeout: float | None = None,
            cwd=None, isolated: bool | None = None):
        full_env = {**os.environ, "SLUICE_TOWN": str(self.town), **(env or {})}
        if isolated or (isolated is None and (self.isolated or timeout is not None)):
            done = subprocess.run(
                [sys.executable, "-m", "sluice", *args],
                cwd=cwd or self.town,
                env=full_env,
                capture_output=True,
                text=True,
                timeout=timeout or 120,
            )
        else:
            done = run_in_process(list(args), full_env, Path(cwd or self.town))
        if check and done.returncode != 0:
            raise AssertionError(
                f"sluice {' '.join(args)} exited {done.returncode}\n"
                f"stdout:{done.stdout}\nstderr:{done.stderr}"
            )
        return done

    def json(self, *args: str, **kw):
        return json.loads(self.run(*args, "--json", **kw).stdout)
