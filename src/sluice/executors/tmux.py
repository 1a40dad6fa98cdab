"""Polecats in tmux sessions (``executor.kind = tmux``), so a person can watch one work.

Each polecat gets one detached session on a tmux server private to the town
(``tmux -L sluice-<townhash12>``), named ``sluice-<townhash6>-<context id>``;
``tmux -L <socket> attach -t <name>`` shows the agent live.  The pane's output
is copied to ``runtime/workers/<id>.log`` with ``pipe-pane`` and the session
ends with the polecat (``remain-on-exit off``), so "live session" is exactly
"polecat running".

tmux has its own command parser: an argument ending in ``;`` ends the command
and the rest of the line is read as further tmux commands, and some arguments
are expanded as ``#{formats}``.  The polecat's argv therefore never appears on
tmux's command line.  The pane runs a fixed Python one-liner that reads argv,
working directory and environment from the polecat's record file and
``execvp``s it; tmux only ever sees sluice's own constant strings and paths.

The record (``runtime/workers/<id>.json``) is written *before* the session
starts, so a crash between the two leaves a record that :meth:`find` reports
(state ``lost``) and the dispatcher can reconcile, never an unknown session.
A context is launched at most once: launching it again returns the polecat
on record, running or not.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.core.clock import iso
from sluice.errors import ExecutorError, ExecutorUnavailable
from sluice.executors import procs
from sluice.executors.base import (
    LaunchRequest,
    Polecat,
    check_launchable,
    ended_state,
    exit_path,
    polecat_env,
    read_exit,
    read_finished,
    require_command,
)
from sluice.executors.local import pid_alive, proc_start_time
from sluice.executors.naming import launch_name, town_key
from sluice.store.files import fsutil

if TYPE_CHECKING:
    from sluice.store.files.town import Town

KIND = "tmux"
FINISHED_LOG = "tmux-finished.jsonl"
STOP_GRACE_SECONDS = 5.0
_TMUX_TIMEOUT = 30.0

# Runs in the pane: the record file says what to run, where, and with which env; the polecat
# runs under the supervisor that records its exit status (sluice.executors.base.SUPERVISOR_CODE).
_EXEC_CODE = (
    "import json,os,sys\n"
    "from sluice.executors.base import SUPERVISOR_CODE\n"
    "r=json.load(open(sys.argv[1],encoding='utf-8'))\n"
    "os.chdir(r['repo'])\n"
    "os.environ.update(r['env'])\n"
    "x=sys.argv[1][:-len('.json')]+'.exit'\n"
    "os.execv(sys.executable,[sys.executable,'-c',SUPERVISOR_CODE,x,*r['argv']])"
)


class TmuxExecutor:
    kind = KIND

    def __init__(self, town: Town, tmux: str = "tmux"):
        self.town = town
        key = town_key(town)
        self.namespace = f"sluice-{key[:6]}"
        self.socket = f"sluice-{key[:12]}"
        self._tmux_name = tmux

    # -- tmux itself ---------------------------------------------------------
    def _tmux(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        binary = shutil.which(self._tmux_name)
        if binary is None:
            raise ExecutorUnavailable(
                "executor.kind is tmux but tmux is not installed (e.g. `apt-get install tmux`)"
            )
        env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE")}
        try:
            # -f /dev/null: the operator's ~/.tmux.conf must not change how polecats run.
            return subprocess.run([binary, "-f", os.devnull, "-L", self.socket, *args], cwd=cwd, env=env,
                                  capture_output=True, text=True, timeout=_TMUX_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise ExecutorUnavailable(f"tmux (socket {self.socket}) did not answer within {_TMUX_TIMEOUT:g}s"
                                      ) from None

    def attach_command(self, session: str) -> str:
        return shlex.join(["tmux", "-L", self.socket, "attach", "-t", session])

    def sessions(self) -> dict[str, int]:
        """This town's live polecat sessions: name → pane pid."""
        done = self._tmux("list-panes", "-a", "-F", "#{session_name}\t#{pane_pid}\t#{pane_dead}")
        if done.returncode != 0:
            if _no_server(done.stderr):
                return {}
            raise ExecutorError(f"tmux list-panes failed: {done.stderr.strip()}")
        live: dict[str, int] = {}
        for line in done.stdout.splitlines():
            name, _, rest = line.partition("\t")
            pid, _, dead = rest.partition("\t")
            if name.startswith(self.namespace + "-") and dead != "1" and pid.isdigit():
                live[name] = int(pid)
        return live

    # -- records -------------------------------------------------------------
    def _record_path(self, polecat_id: str) -> Path:
        return self.town.workers_dir / f"{polecat_id}.json"

    def _log_path(self, polecat_id: str) -> Path:
        return self.town.workers_dir / f"{polecat_id}.log"

    def _records(self) -> list[dict]:
        out = []
        for path in sorted(self.town.workers_dir.glob("*.json")):
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # another executor's file, or one being replaced right now
            if isinstance(record, dict) and record.get("executor") == KIND and record.get("id") == path.stem:
                out.append(record)
        return out

    def _record(self, polecat_id: str) -> dict | None:
        try:
            record = json.loads(self._record_path(polecat_id).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) and record.get("executor") == KIND else None

    def _polecat(self, record: dict, live: dict[str, int]) -> Polecat:
        session = record["id"]
        pid = live.get(session, record.get("pid"))
        if session in live:
            state = "running"
        elif record.get("stopped_at"):
            state = "stopped"
        elif pid is None:  # the record was written, the session never started
            launcher = record.get("launcher_pid")
            state = "pending" if launcher and pid_alive(launcher, record.get("launcher_start")) else "lost"
        else:
            state = "exited"
        if session not in live and record.get("exit_code") is None:
            ended = read_exit(self.town.workers_dir, session)  # written by the pane's supervisor
            record = {**record, "exit_code": ended["exit_code"] if ended else None,
                      "ended_ts": ended["finished_ts"] if ended else record.get("ended_ts")}
        if state == "exited":
            state = ended_state(record.get("exit_code"))
        detail = {"socket": self.socket, "session": session,
                  "attach": self.attach_command(session) if state == "running" else None,
                  "exit_code": record.get("exit_code"), "ended_ts": record.get("ended_ts"),
                  "start_time": record.get("start_time"), "cwd": record.get("repo")}
        return Polecat(id=session, executor=KIND, item_id=record.get("item_id", ""),
                       rig=record.get("rig", ""), context_id=record.get("context_id", ""),
                       started_at=record.get("started_at", ""), state=state, pid=pid,
                       log_path=str(self._log_path(session)), detail=detail)

    def _unrecorded(self, live: dict[str, int], known: set[str]) -> list[Polecat]:
        """Live sessions of this town without a record still hold a slot; report them."""
        return [Polecat(id=name, executor=KIND, item_id="", rig="", context_id="", started_at="", pid=pid,
                        log_path=str(self._log_path(name)),
                        detail={"socket": self.socket, "session": name, "attach": self.attach_command(name)})
                for name, pid in sorted(live.items()) if name not in known]

    # -- the protocol ----------------------------------------------------------
    def launch(self, request: LaunchRequest) -> Polecat:
        require_command(request)
        rig = self.town.rig(request.rig)
        name = launch_name(self.namespace, rig.prefix, request.context_id, request.item_id)
        live, earlier = self.sessions(), self._record(name)
        if earlier is not None:  # this context was launched before: never a second polecat
            return self._polecat(earlier, live)
        if name in live:
            return self._unrecorded({name: live[name]}, set())[0]
        repo = Path(request.workspace or request.repo or rig.repo)  # where the pane starts
        env = {**polecat_env(request.town, request.item_id, request.rig, request.context_id), **request.env}
        check_launchable(request.argv, env)
        _check_runnable(request.argv[0], repo, env)
        record = {"id": name, "executor": KIND, "item_id": request.item_id, "rig": request.rig,
                  "context_id": request.context_id, "town": request.town, "repo": str(repo),
                  "argv": list(request.argv), "env": env, "started_at": iso(), "socket": self.socket,
                  "pid": None, "launcher_pid": os.getpid(), "launcher_start": proc_start_time(os.getpid())}
        record_path, log_path = self._record_path(name), self._log_path(name)
        fsutil.atomic_write_json(record_path, record)
        log_path.touch()
        target = f"={name}:"
        # One tmux invocation: the server runs the whole chain before it reads any
        # output or exit of the new pane, so nothing escapes the log and even a
        # polecat that exits at once still has a pane for pipe-pane and its pid.
        pipe = "exec cat >> " + shlex.quote(str(log_path)).replace("#", "##")
        done = self._tmux(
            "new-session", "-d", "-s", name, "-x", "200", "-y", "50",
            "--", sys.executable, "-c", _EXEC_CODE, str(record_path),
            ";", "set-option", "-w", "-t", target, "remain-on-exit", "off",
            ";", "pipe-pane", "-o", "-t", target, pipe,
            ";", "display-message", "-p", "-t", target, "#{pane_pid}",
            cwd=repo,
        )  # fmt: skip
        if done.returncode != 0:
            if "duplicate session" in done.stderr:
                return self._polecat(record, self.sessions())
            record_path.unlink(missing_ok=True)
            raise ExecutorError(f"tmux could not start session {name}: {done.stderr.strip()}")
        pid = done.stdout.strip()
        if pid.isdigit():
            # Its start from boot, too: runtimes are measured on the boot clock, which no date change moves.
            record["pid"], record["start_time"] = int(pid), proc_start_time(int(pid))
            # The session runs and its first record names it: a refusal here must not read as "nothing
            # launched" (the cycle would launch the item again); find() still finds it.
            with contextlib.suppress(OSError):
                fsutil.atomic_write_json(record_path, record)
        return self._polecat(record, {name: record["pid"]})

    def active(self) -> list[Polecat]:
        return self.listing(live_only=True)

    def listing(self, live_only: bool = False) -> list[Polecat]:
        live = self.sessions()
        records = [r for r in self._records() if r["id"] in live or not live_only]
        return [self._polecat(r, live) for r in records] + self._unrecorded(live, {r["id"] for r in records})

    def find(self, context_id: str) -> Polecat | None:
        if not context_id:
            return None
        matches = [r for r in self._records() if r.get("context_id") == context_id]
        if not matches:
            matches = [r for r in self._finished() if r.get("context_id") == context_id]
        if not matches:
            return None
        newest = max(matches, key=lambda r: r.get("started_at", ""))
        return self._polecat(newest, self.sessions())

    def stop(self, polecat_id: str) -> bool:
        """SIGTERM the pane's whole tree (its process group and every descendant, ``setsid`` helpers
        included), SIGKILL what is left after a grace period, end the session."""
        pid = self.sessions().get(polecat_id)
        if pid is None:
            return False
        procs.stop_tree(pid, None, STOP_GRACE_SECONDS)
        if procs.group_alive(pid):
            procs.signal_group(pid, signal.SIGKILL)
        self._tmux("kill-session", "-t", f"={polecat_id}")
        record = self._record(polecat_id)
        if record is not None:
            record["stopped_at"] = iso()
            fsutil.atomic_write_json(self._record_path(polecat_id), record)
        return True

    def logs(self, polecat_id: str, follow: bool = False) -> Iterator[str]:
        path = self._log_path(polecat_id)
        if not path.exists():
            raise ExecutorError(f"no log for polecat {polecat_id!r} (looked for {path})")
        return _read_lines(path, (lambda: polecat_id in self.sessions()) if follow else None)

    def reap(self) -> list[Polecat]:
        """Move finished records to ``tmux-finished.jsonl``, where ``find`` still sees them; logs stay."""
        live = self.sessions()
        reaped = []
        for record in self._records():
            if record["id"] in live:
                continue
            polecat = self._polecat(record, live)
            with fsutil.file_lock(self.town.lock_path("workers")):
                path = self._record_path(record["id"])
                if not path.exists():
                    continue
                finished = {**record, "state": polecat.state, "exit_code": polecat.detail.get("exit_code"),
                            "ended_ts": polecat.detail.get("ended_ts")}
                fsutil.append_json(self.town.workers_dir / FINISHED_LOG, finished)
                path.unlink()
                exit_path(self.town.workers_dir, record["id"]).unlink(missing_ok=True)
            reaped.append(polecat)
        return reaped

    def _finished(self) -> list[dict]:
        return read_finished(self.town.workers_dir / FINISHED_LOG)

    def finished(self) -> list[Polecat]:
        """Reaped polecats, oldest first."""
        return [self._polecat(record, {}) for record in self._finished()]


def _no_server(stderr: str) -> bool:
    """tmux's ways of saying "no sessions": no server, a dead socket, or a server shutting down."""
    return any(
        sign in stderr
        for sign in ("no server running", "error connecting to", "no current target", "server exited")
    )


def _check_runnable(program: str, repo: Path, env: dict[str, str]) -> None:
    """Fail the launch now (a counted failure) rather than in a pane nobody watches."""
    if not repo.is_dir():
        raise ExecutorError(f"rig repository {repo} does not exist")
    if os.sep in program:
        path = Path(program) if os.path.isabs(program) else repo / program
        found = path.is_file() and os.access(path, os.X_OK)
    else:
        found = shutil.which(program, path=env.get("PATH", os.environ.get("PATH"))) is not None
    if not found:
        raise ExecutorError(f"polecat command {program!r} not found or not executable (executor.command)")


def _read_lines(path: Path, still_running=None, poll: float = 0.2) -> Iterator[str]:
    """Lines of a log written through a pty (``\\r\\n`` endings); follow while ``still_running()``.

    After the polecat has gone, one more pause lets ``pipe-pane`` write its last bytes.
    """
    with open(path, "rb") as fh:
        pending = b""
        while True:
            chunk = fh.read(65536)
            if not chunk:
                if still_running is None:
                    break
                time.sleep(poll)
                if not still_running():
                    still_running = None
                continue
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line.decode("utf-8", "replace").rstrip("\r")
        if pending:
            yield pending.decode("utf-8", "replace").rstrip("\r")
