"""What a Ray polecat job runs on its node: make the workspace there, then the agent in it.

Ray always runs a job's entrypoint with ``/bin/sh -c``, so the entrypoint is
a constant (:data:`ENTRYPOINT`) and everything that comes from an item —
its title, the whole argv — reaches this module as JSON in the job's
environment (:data:`SPEC_VAR`), never as shell text.  The sluice package
itself reaches the node as the job's ``runtime_env`` ``py_modules``, so a
node needs Python 3.11+ as ``python3`` and git, not sluice, the town or the
rig at any path.

* **Workspace "repo"**: the agent becomes the job's process (``exec``) in
  the rig's checkout, which must then exist at the same path on the node.
* **Workspace "clone"**: the rig's remote is cloned into
  ``<root>/sluice-workspaces/<rig>/<job id>`` (root:
  ``executor.workspace_root``, else the node's temp directory) on a branch
  of its own, with
  :func:`sluice.executors.workspace.clone`; ``{workspace}`` and
  ``{branch}`` are filled into the argv template here, in the same single
  pass as every other placeholder, and the agent runs with
  ``SLUICE_WORKSPACE`` and ``SLUICE_BRANCH``.  This process waits for it
  and exits with its status; after an ``ok`` run the workspace is removed
  unless it holds work that exists nowhere else.  Before cloning, the
  rig's ended workspaces on the node beyond ``executor.workspace_keep``
  go, oldest first, under the same rule; a running job's is never touched
  (each job holds a lock beside its workspace for its whole life).
* **A clone that fails** prints :data:`MARK` and git's words as the job's
  last line and exits :data:`WORKSPACE_FAILED`; the executor reads that line
  back from the job's message as the run's reason.

It imports only the standard library and the few sluice modules it needs
(errors, the argv substitution, the workspace helpers): it runs on machines
where sluice is not installed, from the package the job ships.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

SPEC_VAR = "SLUICE_RAY_JOB"
ENTRYPOINT = "exec python3 -m sluice.executors.ray_job"
MARK = "sluice-workspace: "
WORKSPACE_FAILED = 70  # EX_SOFTWARE: the job never reached the agent
DIRECTORY = "sluice-workspaces"


def reason_of(message: str | None) -> str | None:
    """The workspace failure a failed job's message ends with (Ray puts the log's tail there), or None."""
    lines = [line.strip() for line in (message or "").splitlines() if line.strip()]
    if lines and lines[-1].startswith(MARK):
        return lines[-1][len(MARK):]
    return None


def main(environ: dict[str, str] | None = None) -> int:
    env = _agent_env(dict(os.environ if environ is None else environ))
    spec = json.loads(env.pop(SPEC_VAR))
    workspace = spec.get("workspace")
    if not workspace:
        argv = spec["argv"]
        try:
            os.chdir(spec["repo"])
            os.execvpe(argv[0], argv, env)
        except OSError as err:
            said = err.strerror or err
            print(f"sluice: cannot launch {argv[0]!r} in {spec['repo']}: {said}", file=sys.stderr, flush=True)
            return 127
    from sluice.core.workspaces import safe_component
    from sluice.errors import SluiceError
    from sluice.executors.base import substitute
    from sluice.executors.workspace import clone, retire

    rig_dir = Path(workspace.get("root") or tempfile.gettempdir()) / DIRECTORY / safe_component(spec["rig"])
    rig_dir.mkdir(parents=True, exist_ok=True)
    lock = rig_dir / f".{workspace['name']}.lock"
    _hold(lock)  # for this process's life: nobody trims a running job's workspace
    _trim(rig_dir, int(workspace.get("keep", 5)))
    try:
        made = clone(workspace["source"], rig_dir / workspace["name"], workspace["branch"],
                     fresh_names=workspace.get("fresh", ()))
    except SluiceError as err:
        lock.unlink(missing_ok=True)
        print(MARK + " ".join(str(err).split()), file=sys.stderr, flush=True)
        return WORKSPACE_FAILED
    print(f"{MARK}cloned {workspace['source']} into {made.path} on branch {made.branch}", flush=True)
    values = {**spec["values"], "workspace": str(made.path), "branch": made.branch}
    env.update(SLUICE_WORKSPACE=str(made.path), SLUICE_BRANCH=made.branch)
    argv = list(substitute(spec["template"], values)) if spec.get("template") else spec["argv"]
    code = _run(argv, made.path, env)
    if code == 0:
        kept = retire(made.path)
        if not kept:
            lock.unlink(missing_ok=True)
        print(f"{MARK}{'kept ' + str(made.path) + ': ' + kept if kept else 'removed ' + str(made.path)}",
              flush=True)
    return code if code >= 0 else 128 - code


def _hold(lock: Path) -> int:
    """Take ``lock`` and keep it until this process ends (the descriptor is never closed)."""
    fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _busy(lock: Path) -> bool:
    """Whether a running job holds ``lock``."""
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _trim(rig_dir: Path, keep: int) -> None:
    """Keep at most ``keep`` ended workspaces of the rig on this node (``executor.workspace_keep``):
    the oldest go first, never one a running job holds, never one with unsaved work."""
    from sluice.executors.workspace import prune

    ended = [path for path in rig_dir.iterdir()
             if path.is_dir() and not _busy(rig_dir / f".{path.name}.lock")]
    for path in prune(ended, keep):
        (rig_dir / f".{path.name}.lock").unlink(missing_ok=True)
        print(f"{MARK}removed {path} (more than {keep} kept)", flush=True)


def _agent_env(env: dict[str, str]) -> dict[str, str]:
    """The node's environment without the directory Ray put the shipped sluice package in: the agent
    sees the node's own Python path, not sluice's."""
    ours = str(Path(__file__).resolve().parents[2])
    kept = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry and entry != ours]
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        env.pop("PYTHONPATH", None)
    return env


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> int:
    """Run the agent and wait for it; its exit status (negative: the signal that ended it).

    Ray stops a job by signalling its process group, which the agent shares:
    this process only notes the signals (a handler, not SIG_IGN, so the agent
    keeps the default ones) and waits to report how the agent ended.
    """
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)
    try:
        child = subprocess.Popen(argv, cwd=cwd, env=env)
    except OSError as err:
        print(f"sluice: cannot launch {argv[0]!r}: {err.strerror or err}", file=sys.stderr, flush=True)
        return 127
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
