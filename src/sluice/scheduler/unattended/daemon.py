"""``sluice daemon``: run a dispatch cycle every interval, reap finished polecats.

* **Singleton**: ``runtime/daemon.lock`` is held for the daemon's life; a
  second daemon for the same town fails at once naming the first one's pid.
* **Ticks**: the first at start, then one per ``interval``.  Each tick runs
  one dispatch cycle (:mod:`sluice.scheduler.unattended.tick`: the same ``run_cycle``
  the Python API and ``sluice scheduler run`` call) as a *subprocess* with
  ``SLUICE_DAEMON=1`` and a timeout.  A subprocess (rather than a call) means
  a hung executor or a runaway cycle can be killed outright without taking
  the daemon down, and the cycle always sees the config and stores fresh;
  killing a cycle midway is safe because launches are crash-safe (see
  :mod:`sluice.scheduler.launch.dispatch`).  Polecats live in sessions of their
  own, so they survive that kill.  The one exception: a daemon handed an
  executor object (an in-memory one, from the Python API) runs its cycles
  in-process, since a child process could not see that executor's polecats.
* After each cycle finished polecats are reaped (records moved to
  ``finished.jsonl``, logs kept); a reaping failure is part of the tick's
  log line and heartbeat.  The config is re-read every tick, so the stall
  check and reaping use the executor configured now, not at start.
* Then the run log, when longer than ``scheduler.compact_at`` lines, is
  compacted (closed sling contexts are rows of the town database and need
  none).
* After the tick's line, ``scheduler.notify`` is run for the chosen events
  written since the last tick (:mod:`sluice.scheduler.unattended.notify`); a tick that
  launched the last queued item logs ``QueueDrained`` first (``BudgetExhausted``
  is logged by the cycle itself, once per spell).  A notifier is
  bounded by ``scheduler.notify_timeout`` and its failures are log lines.
* One line per tick goes to ``runtime/daemon.log`` and stderr; a heartbeat
  (the town database's ``heartbeat`` row, :mod:`sluice.store.database.state`) holds
  pid, started_at, interval, ticks, last_tick_at, last_result.
* SIGTERM / SIGINT stop the daemon cleanly: a tick in progress finishes, no
  new one starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from sluice.core.clock import iso
from sluice.core.defaults import DAEMON_INTERVAL
from sluice.core.text import printable
from sluice.errors import InvalidOperation, LockBusy, SluiceError, UsageError
from sluice.executors import get_executor
from sluice.scheduler.launch import ends, runs
from sluice.scheduler.launch.dispatch import run_cycle
from sluice.scheduler.launch.polecats import stop_overdue
from sluice.scheduler.queue import views as queue_model
from sluice.scheduler.queue.control import compact_if_long
from sluice.scheduler.session import Session
from sluice.scheduler.unattended import notify
from sluice.scheduler.views.forecast import forecast
from sluice.store.database import forecasts
from sluice.store.database import runs as runlog
from sluice.store.database.events import QUEUE_DRAINED, emit_event
from sluice.store.database.state import read_heartbeat, write_heartbeat
from sluice.store.files import fsutil

if TYPE_CHECKING:
    from sluice.executors.base import Executor
    from sluice.store.files.town import Town

DEFAULT_INTERVAL = DAEMON_INTERVAL
DEFAULT_TIMEOUT = 300.0
#: Seconds a kept forecast stands at ticks that launch nothing and see no run end.
FORECAST_EVERY = 300.0


def log_path(town: Town):
    return town.runtime / "daemon.log"


def run_cycle_subprocess(town: Town, timeout: float) -> dict:
    """One dispatch cycle in a child process; its JSON report, or ``{"error": …}``."""
    env = {**os.environ, "SLUICE_DAEMON": "1", "SLUICE_TOWN": str(town.root)}
    process = subprocess.Popen(
        [sys.executable, "-m", "sluice.scheduler.unattended.tick", str(town.root)],
        cwd=town.root, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:  # killed: safe at any point, launches are crash-safe
        notify.kill_group(process)
        return {"error": f"dispatch cycle timed out after {timeout:g}s and was killed"}
    except BaseException:  # interrupted (Ctrl-C, a demo's SIGTERM): the cycle must not outlive its caller
        notify.kill_group(process)
        raise
    if process.returncode != 0:
        lines = [line for line in err.strip().splitlines() if line.strip()]
        message = lines[-1] if lines else f"exit status {process.returncode}"
        return {"error": message.removeprefix("error: ")}
    try:
        return json.loads(out)
    except ValueError:
        return {"error": f"dispatch cycle printed no JSON report: {out[:200]!r}"}


def describe(result: dict, reaped: int) -> str:
    if "error" in result:
        return f"error: {result['error']}" + _reaping(result, reaped)
    if result.get("reason") == "busy":
        text = "another dispatch cycle is running; skipped"
    elif result.get("paused") and not result.get("dispatched"):
        text = "paused; nothing dispatched"
    elif result.get("mode") == "direct":
        text = "direct mode (scheduler.max_polecats <= 0); nothing to dispatch"
    else:
        text = (f"dispatched {result.get('dispatched', 0)}, failed {result.get('failed', 0)},"
                f" skipped {result.get('skipped', 0)} (reason: {result.get('reason')},"
                f" capacity {result.get('capacity')}, ready {result.get('ready')})")
    return text + _held(result) + _runs(result) + _reaping(result, reaped)


def _runs(result: dict) -> str:
    """``; runs: 3 ok, 1 failed``: the runs that ended since the last tick (failed launches are above)."""
    text = runs.counts_text(result.get("runs") or {})
    return f"; runs: {text}" if text else ""


def _held(result: dict) -> str:
    """Held contexts, so a shrinking export shows on the tick line long before anything is closed."""
    held = result.get("held") or []
    if not held:
        return ""
    ids = ", ".join(printable(row.get("item_id")) for row in held[:5]) + (", …" if len(held) > 5 else "")
    return f"; held {len(held)} (missing-item: {ids})"


def _reaping(result: dict, reaped: int) -> str:
    if result.get("reap_error"):
        return f"; reaping failed: {result['reap_error']}"
    return f"; reaped {reaped} finished polecat(s)" if reaped else ""


class Daemon:
    def __init__(self, town: Town, interval: float = DEFAULT_INTERVAL, timeout: float = DEFAULT_TIMEOUT,
                 echo: Callable[[str], None] | None = None, executor: Executor | None = None):
        if interval <= 0:
            raise UsageError(f"interval must be > 0 seconds (got {interval:g})", parameters=("interval",))
        if timeout <= 0:
            raise UsageError(f"timeout must be > 0 seconds (got {timeout:g})", parameters=("timeout",))
        self.town = town
        self.executor = executor
        self.interval = interval
        self.timeout = timeout
        self.echo = echo or (lambda line: sys.stderr.write(line + "\n"))
        self.stop_requested = threading.Event()
        self.started_at = iso()
        self.ticks = 0
        self.last_result: dict | None = None
        try:  # runs that ended before the daemon started are history, not this tick's news
            self._runs_seen = runlog.totals(town)
        except SluiceError:
            self._runs_seen = {}

    def _log(self, line: str) -> None:
        # One line each, whatever an id or an error message holds: a newline would fake a tick.
        stamped = f"{iso()} {printable(line)}"
        try:
            fsutil.append_line(log_path(self.town), stamped)
        except OSError as err:  # a full disk must not stop the daemon: it says so where it can
            self.echo(f"{iso()} warning: {printable(str(err))}")
        self.echo(stamped)

    def _beat(self, **extra) -> None:
        beat = {
            "pid": os.getpid(), "started_at": self.started_at, "interval": self.interval,
            "ticks": self.ticks, "last_tick_at": extra.pop("last_tick_at", None) or self._last_tick_at(),
            "last_result": self.last_result, **extra,
        }
        try:
            write_heartbeat(self.town, beat)
        except (OSError, SluiceError) as err:  # the heartbeat goes stale (status says so); the daemon goes on
            self.echo(f"{iso()} warning: {printable(str(err))}")

    def _last_tick_at(self) -> str | None:
        try:
            beat = read_heartbeat(self.town) or {}
        except SluiceError:  # the database refuses a read: the tick goes on, its heartbeat says less
            return None
        return beat.get("last_tick_at") if beat.get("pid") == os.getpid() else None

    def tick(self) -> bool:
        """Stall check, one cycle, reaping; True when the cycle ran without error.

        Overdue polecats are stopped *before* the cycle, so the slots they held
        are used in the same tick — and here rather than inside the cycle,
        because a cycle does nothing while paused or in direct mode, and
        polecats can stall in either.
        """
        self.ticks += 1
        at = iso()
        if self.ticks == 1:  # announce what happens from now on, not the log's history
            with contextlib.suppress(OSError, SluiceError):
                notify.start_cursor(self.town)
        # A long-lived daemon follows `config set` (executor kind, address, timeout).  A broken
        # file is reported by the cycle below; until it is fixed the last good config is used.
        with contextlib.suppress(SluiceError):
            self.town.reload_config()
        timed_out = self._stop_overdue()
        # Command sources are refreshed here, with their whole timeout, so the cycle reads them fresh.
        from sluice.store.items.sources import refresh_due

        for problem in refresh_due(self.town):
            self._log(problem)
        result = self._cycle()
        if timed_out:
            result["timed_out"] = [p.id for p in timed_out]
        reaped = 0
        try:
            executor = self._executor()
            ends.settle(self.town, executor)  # ends are recorded before reaping forgets the polecats
            reaped = len(executor.reap())
        except SluiceError as err:
            result.setdefault("reap_error", str(err))
        try:  # ended by anyone since the last tick: the cycle, this tick, a `polecat list` meanwhile
            ended = runlog.totals(self.town)
            result["runs"] = runs.count_new(ended, self._runs_seen)
            self._runs_seen = ended
        except SluiceError as err:
            result["runs"] = {}
            result.setdefault("reap_error", str(err))
        try:
            for row in compact_if_long(self.town):
                self._log(f"compacted rig {row['rig']}: {row['lines_before']} → {row['lines_after']} lines,"
                          f" {row['archived']} archived")
        except (SluiceError, OSError) as err:
            result.setdefault("compact_error", str(err))
        session = self._session()
        self._after_cycle(result, session)
        keys = ("dispatched", "failed", "skipped", "reason", "capacity", "ready", "paused", "mode", "error",
                "reap_error", "compact_error")
        held, ended = len(result.get("held") or []), result.get("runs") or {}
        self.last_result = {**{k: result[k] for k in keys if k in result}, "held": held, "reaped": reaped,
                            "runs": ended}
        self._beat(last_tick_at=at)
        self._keep_forecast(session, result)
        self._log(f"tick {self.ticks}: {describe(result, reaped)}")
        for outcome in self._notify():
            self._log(outcome.line())
        return "error" not in result

    def _session(self) -> Session | None:
        """One look at the town after the cycle, shared by the drained check and the kept forecast."""
        try:
            return Session(self.town, self.executor)
        except SluiceError as err:  # a broken config: the cycle has reported it already
            self._log(f"queue check skipped: {err}")
            return None

    def _after_cycle(self, result: dict, session: Session | None) -> None:
        """Log ``QueueDrained`` when this tick launched the last queued item."""
        if not result.get("dispatched") or session is None:
            return  # most ticks launch nothing: no need to survey the queue again

        try:
            # Surveyed, not taken from the chain: the kept forecast after it replays the whole queue
            # from this very survey, and the head it keeps lets the next tick at the cap be idle.
            now = queue_model.status(session)
        except SluiceError as err:
            self._log(f"queue check skipped: {err}")
            return
        if now.get("queued_total") == 0:
            emit_event(self.town, QUEUE_DRAINED, {"dispatched": result["dispatched"]})

    def _keep_forecast(self, session: Session | None, result: dict) -> None:
        """Replay the queue once and keep its head, so ``scheduler status`` says when the queue drains.

        A tick that launched, or saw a run end, keeps a new forecast (sharing
        the survey its drained check made); one that changed nothing keeps one
        only once the last is :data:`FORECAST_EVERY` old, so an idle daemon over
        a long queue does not survey it every tick.  A forecast that fails is
        logged and the daemon goes on.
        """
        if session is None:
            return
        moved = result.get("dispatched") or result.get("runs") or result.get("timed_out")
        if not moved:
            last = forecasts.last(self.town)
            if last is not None and 0 <= session.now - last["at_ts"] < FORECAST_EVERY:
                return
        try:
            forecast(session, limit=1)
        except (SluiceError, OSError) as err:
            self._log(f"forecast skipped: {err}")

    def _notify(self) -> list:
        try:
            return notify.notify_new_events(self.town)
        except (SluiceError, OSError) as err:  # a notifier problem never stops the daemon
            self._log(f"notifications skipped: {err}")
            return []

    def _executor(self) -> Executor:
        return self.executor or get_executor(self.town)

    def _cycle(self) -> dict:
        if self.executor is None:
            return run_cycle_subprocess(self.town, self.timeout)
        try:  # an executor object lives in this process: so must the cycle (no timeout can apply)
            return run_cycle(self.town, executor=self.executor, daemon=True).to_json()
        except SluiceError as err:
            return {"error": str(err)}

    def _stop_overdue(self) -> list:
        try:
            stopped = stop_overdue(self.town, self._executor(), time.time(),
                                   on_stop=lambda p: ends.end_polecat(self.town, p, "timed-out"))
        except SluiceError as err:
            self._log(f"stall check skipped: {err}")
            return []
        for polecat in stopped:
            self._log(f"stopped polecat {polecat.id} ({polecat.item_id}): over scheduler.polecat_timeout")
        return stopped

    def run(self, once: bool = False) -> int:
        lock = fsutil.file_lock(self.town.lock_path("daemon"), timeout=0)
        try:
            lock.acquire()
        except LockBusy:
            try:
                other = (read_heartbeat(self.town) or {}).get("pid")
            except SluiceError:
                other = None
            who = f" (pid {other})" if other else ""
            raise InvalidOperation(f"a sluice daemon is already running for this town{who}") from None
        previous = {}
        try:
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self._on_signal)
            self._beat()
            self._log(f"daemon started (pid {os.getpid()}, interval {self.interval:g}s)")
            ok = True
            while not self.stop_requested.is_set():
                ok = self.tick()
                if once:
                    break
                self.stop_requested.wait(self.interval)
            self._beat(stopped_at=iso())
            self._log("daemon stopped" if not once else "daemon finished one tick")
            return 0 if ok or not once else 1
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            lock.release()

    def _on_signal(self, signum, _frame) -> None:
        self.stop_requested.set()


def run_daemon(town: Town, interval: float = DEFAULT_INTERVAL, once: bool = False,
               timeout: float = DEFAULT_TIMEOUT, executor: Executor | None = None) -> int:
    """Run the daemon until signalled (or one tick with ``once``); returns the exit status."""
    town.load_config()  # a corrupt config stops the daemon before it starts
    return Daemon(town, interval, timeout, executor=executor).run(once)
