"""The executor protocol and what every executor shares.

An executor knows four things: how to ``launch`` a polecat for one sling
context, which of this town's polecats are ``active``, how to ``stop`` one and
where its ``logs`` are.  ``find`` lets the dispatcher reconcile a context whose
launch was interrupted (crash mid-cycle) instead of launching it twice.

The polecat's command is an argv template from ``executor.command``; every
element has its placeholders substituted independently and the result is
never given to a shell, because titles are written by agents.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Protocol

from sluice.core.recordclass import asdict, field, recordclass
from sluice.errors import ExecutorError

PLACEHOLDERS = ("item_id", "rig", "title", "context_id", "repo", "workspace", "branch")
MAX_ARG_BYTES = 128 * 1024  # Linux MAX_ARG_STRLEN: the longest single argument or "KEY=value", NUL included


@recordclass(frozen=True)
class LaunchRequest:
    item_id: str
    rig: str
    title: str
    context_id: str
    repo: str
    town: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    workspace: str = ""  # the run's own clone to start in (``executor.workspace = "clone"``); "": ``repo``
    branch: str = ""  # the branch checked out in ``workspace``
    # The argv before substitution and what fills it: a job that makes its workspace on another
    # machine fills ``{workspace}`` and ``{branch}`` there, in the same single pass as the rest.
    template: tuple[str, ...] = ()
    values: Mapping[str, str] = field(default_factory=dict)
    attempt: int = 1  # 1, then one more for each retry of a failed run (a retry's branch is fresh)

    @property
    def cwd(self) -> str:
        """Where the polecat starts: its workspace, else the rig's repository."""
        return self.workspace or self.repo


@recordclass
class Polecat:
    """One launched worker, as an executor reports it."""

    id: str
    executor: str
    item_id: str
    rig: str
    context_id: str
    started_at: str
    state: str = "running"  # running | exited | stopped | lost | pending
    pid: int | None = None
    log_path: str | None = None
    detail: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


class Executor(Protocol):
    kind: str

    def launch(self, request: LaunchRequest) -> Polecat:
        """Start the polecat or raise ExecutorError (counted) / ExecutorUnavailable (not counted)."""
        ...

    def active(self) -> list[Polecat]:
        """This town's polecats that are still running (they use capacity)."""
        ...

    def find(self, context_id: str) -> Polecat | None:
        """The polecat launched for ``context_id``, running or not, if the executor knows it."""
        ...

    def stop(self, polecat_id: str) -> bool:
        """Stop one polecat and its children; False if it was not running."""
        ...

    def logs(self, polecat_id: str, follow: bool = False) -> Iterator[str]:
        """The polecat's output, line by line; with ``follow`` keep reading until it ends."""
        ...

    def listing(self) -> list[Polecat]:
        """Every polecat the executor still has a record of, running or finished."""
        ...

    def reap(self) -> list[Polecat]:
        """Forget finished polecats' records (logs stay); returns those reaped."""
        ...


_PLACEHOLDER = re.compile("{(" + "|".join(PLACEHOLDERS) + ")}")
_WORKSPACE_ONLY = ("workspace", "branch")


def substitute(template: list[str] | tuple[str, ...], values: Mapping[str, str]) -> tuple[str, ...]:
    """Fill ``{item_id}``-style placeholders element by element; no shell ever sees the result.

    One pass per element: text that came in through a value (a title saying
    ``{repo}``) is never substituted again.  ``{workspace}`` and ``{branch}``
    are filled only for a run that has a workspace (``values`` holds them);
    otherwise they stay as written, as they always did.
    """
    def value(match: re.Match) -> str:
        name = match.group(1)
        if name in _WORKSPACE_ONLY and name not in values:
            return match.group(0)
        return str(values.get(name, ""))

    return tuple(_PLACEHOLDER.sub(value, element) for element in template)


def check_launchable(argv: tuple[str, ...] | list[str], env: Mapping[str, str]) -> None:
    """Refuse, as a launch failure, text that no program can receive.

    A NUL byte (JSON allows ``\\u0000`` in a title) or an argument longer than
    the kernel passes cannot reach the polecat; finding that out here makes it a
    counted failure of the item instead of a crashed cycle or a pane that dies
    unseen.
    """
    for position, element in enumerate(argv):
        _check_text(f"argument {position} of the polecat command", element)
    for key, value in env.items():
        _check_text(f"environment variable {key}", f"{key}={value}")


def _check_text(what: str, text: str) -> None:
    if "\x00" in text:
        raise ExecutorError(f"{what} contains a NUL byte, which no program can receive")
    size = len(text.encode("utf-8", "surrogateescape"))
    if size >= MAX_ARG_BYTES:
        raise ExecutorError(f"{what} is {size} bytes long; the system passes at most {MAX_ARG_BYTES - 1}")


def polecat_env(town: str, item_id: str, rig: str, context_id: str) -> dict[str, str]:
    return {"SLUICE_ITEM_ID": item_id, "SLUICE_RIG": rig, "SLUICE_CONTEXT_ID": context_id,
            "SLUICE_TOWN": town}


def read_finished(path: Path) -> list[dict]:
    """Records of reaped polecats, oldest first, from an executor's ``*finished.jsonl``.

    The log is append-only and only informative, so a line cut short by a
    crash is skipped rather than treated as corruption.
    """
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    out = []
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue  # an interrupted last append
        if isinstance(record, dict) and record.get("id"):
            out.append(record)
    return out


# -- exit status --------------------------------------------------------------------
#
# A polecat outlives the process that launched it (a daemon tick's cycle exits
# at once), so nobody could wait() for it and its exit status was lost.  The
# local executor starts polecats through its watcher (sluice.executors.watch);
# a tmux pane runs this small supervisor instead, because the pane's process
# group is what ``stop`` signals: it forks, the child execs the polecat (so the
# polecat stays in the pane's group), and the supervisor waits and writes
# ``{"exit_code": N, "finished_at": …}`` to ``runtime/workers/<id>.exit`` before
# exiting with the same status.  It ignores the signals itself (its handler
# does nothing, and exec resets handlers, so the polecat keeps the default
# ones) so that it can record how the polecat ended.  ``exit_code`` is
# negative when a signal ended the polecat (``-15``: SIGTERM), as Python
# reports it.
SUPERVISOR_CODE = """\
import json, os, signal, sys, time
exit_path, argv = sys.argv[1], sys.argv[2:]
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(sig, lambda *_: None)
pid = os.fork()
if pid == 0:
    try:
        os.execvp(argv[0], argv)
    except OSError as err:
        sys.stderr.write(f"sluice: cannot launch {argv[0]!r}: {err.strerror}\\n")
    os._exit(127)
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
tmp = exit_path + ".tmp"
stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
with open(tmp, "w") as fh:
    fh.write(json.dumps({"exit_code": code, "finished_at": stamp, "finished_ts": time.time()}))
os.replace(tmp, exit_path)
os._exit(code if code >= 0 else 128 - code)
"""


def exit_path(workers_dir: Path, polecat_id: str) -> Path:
    """Where the supervisor of polecat ``polecat_id`` records how it ended."""
    return Path(workers_dir) / f"{polecat_id}.exit"


def read_exit(workers_dir: Path, polecat_id: str) -> dict | None:
    """``{"exit_code", "finished_at", "finished_ts"}`` of a finished polecat, or None while unknown."""
    try:
        data = json.loads(exit_path(workers_dir, polecat_id).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    code = data.get("exit_code") if isinstance(data, dict) else None
    if not isinstance(code, int) or isinstance(code, bool):
        return None
    def seconds(key: str) -> float | None:
        value = data.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    return {"exit_code": code, "finished_at": data.get("finished_at"), "finished_ts": seconds("finished_ts"),
            "finished_boot": seconds("finished_boot")}


def ended_state(exit_code: int | None) -> str:
    """``failed`` for a non-zero exit status, else ``exited`` (also when the status is unknown)."""
    return "failed" if exit_code not in (None, 0) else "exited"


def require_command(request: LaunchRequest) -> None:
    """No argv means no ``executor.command``: unusable, and never charged to the item."""
    from sluice.errors import ExecutorUnavailable

    if not request.argv:
        raise ExecutorUnavailable(
            "executor.command is not set; set it with"
            ' `sluice config set executor.command \'["my-agent", "{item_id}"]\'`'
        )
