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
* SIGTERM / SIGINT stop the daemon within a second, whatever it is doing: a
  tick in progress is cut short where it stands (its cycle child killed, as
  a timed-out one is; everything a tick writes is crash-safe), the heartbeat
  says ``stopped_at`` and the log ``daemon stopped``, and no new tick starts.
  Should the tick be stuck where Python cannot interrupt it (inside a C
  library), a watcher thread, woken by the signal itself, kills the cycle's
  process group and ends the process after :data:`STOP_GRACE` seconds.
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
#: Seconds after SIGTERM / SIGINT within which the tick must have let go, else the process is ended.
STOP_GRACE = 0.8
#: Seconds more for the last heartbeat and log line once it has let go.
FINISH_GRACE = 5.0


class Stopped(BaseException):
    """Raised by the signal handler into a tick in progress: the daemon is asked to stop now.

    A BaseException, as KeyboardInterrupt is, so that no ``except Exception`` on the way takes it
    for a failure of the tick and goes on.
    """


def log_path(town: Town):
    return town.runtime / "daemon.log"


def run_cycle_subprocess(town: Town, timeout: float,
                         started: Callable[[subprocess.Popen | None], None] | None = None) -> dict:
    """One dispatch cycle in a child process; its JSON report, or ``{"error": …}``.

    ``started`` is told of the child when it starts and again (None) when it is gone.
    """
    env = {**os.environ, "SLUICE_DAEMON": "1", "SLUICE_TOWN": str(town.root)}
    process = subprocess.Popen(
        [sys.executable, "-m", "sluice.scheduler.unattended.tick", str(town.root)],
        cwd=town.root, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )
    if started is not None:
        started(process)
    try:
        return _cycle_report(process, timeout)
    finally:
        if started is not None:
            started(None)


def _cycle_report(process: subprocess.Popen, timeout: float) -> dict:
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
    """Held contexts, so a shrinking export (or a rig that cannot be read) shows on the tick line
    long before anything is closed: ``held 4 (missing-item: al-1, …; rig-unreadable: ga-1)``."""
    held = result.get("held") or []
    if not held:
        return ""
    by_reason: dict[str, list] = {}
    for row in held:
        by_reason.setdefault(str(row.get("reason") or "missing-item"), []).append(row.get("item_id"))
    parts = []
    for reason, ids in by_reason.items():
        shown = ", ".join(printable(item_id) for item_id in ids[:5]) + (", …" if len(ids) > 5 else "")
        parts.append(f"{printable(reason)}: {shown}")
    return f"; held {len(held)} ({'; '.join(parts)})"


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
        self._interruptible = False  # a tick run by run(): the signal handler may cut it short
        self._cycle_process: subprocess.Popen | None = None  # the cycle child running now, if any
        self._let_go = threading.Event()  # after a stop signal: the tick has been left
        self._finished = threading.Event()  # run() is done
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
            return run_cycle_subprocess(self.town, self.timeout, started=self._cycle_started)
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

    def _cycle_started(self, process: subprocess.Popen | None) -> None:
        self._cycle_process = process

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
        watcher = None
        try:
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self._on_signal)
            watcher = _Watcher(self)
            self._beat()
            self._log(f"daemon started (pid {os.getpid()}, interval {self.interval:g}s)")
            ok, cut = True, False
            while not self.stop_requested.is_set():
                try:
                    ok = self._interrupted_tick()
                except Stopped:
                    cut = True
                    break
                if once:
                    break
                self.stop_requested.wait(self.interval)
            self._let_go.set()
            self._beat(stopped_at=iso())
            if once and not cut:
                self._log("daemon finished one tick")
            else:
                self._log(f"daemon stopped (tick {self.ticks} cut short)" if cut else "daemon stopped")
            return 0 if ok or not once or cut else 1
        finally:
            self._let_go.set()
            self._finished.set()
            if watcher is not None:
                watcher.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            lock.release()

    def _interrupted_tick(self) -> bool:
        """:meth:`tick`, which a stop signal cuts short (:class:`Stopped`) wherever it stands."""
        self._interruptible = True
        try:
            if self.stop_requested.is_set():  # signalled between the loop's check and here
                raise Stopped
            return self.tick()
        finally:
            self._interruptible = False

    def _on_signal(self, signum, _frame) -> None:
        self.stop_requested.set()
        if self._interruptible:
            self._interruptible = False  # once: the unwinding itself is not interrupted again
            raise Stopped

    def _force_stop(self, signum: int) -> None:
        """The watcher's last resort: the tick did not let go within :data:`STOP_GRACE`."""
        process = self._cycle_process
        if process is not None:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.echo(f"{iso()} daemon stopped (tick {self.ticks} did not let go within {STOP_GRACE:g}s"
                      f" of signal {signum}; process ended)")
        os._exit(128 + signum)


class _Watcher:
    """A thread woken by SIGTERM / SIGINT themselves (``signal.set_wakeup_fd``), so that a main
    thread stuck where no Python signal handler runs still stops within :data:`STOP_GRACE`.

    Only in the main thread (the only one that can take signals); elsewhere it does nothing.
    """

    def __init__(self, daemon: Daemon):
        self._daemon = daemon
        self._write = self._previous = None
        if threading.current_thread() is not threading.main_thread():
            return
        read, write = os.pipe()
        os.set_blocking(write, False)
        try:
            self._previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        except (ValueError, OSError):
            os.close(read)
            os.close(write)
            return
        self._write = write
        # Started with the two signals blocked, which it keeps: they go to the main thread (whose
        # blocking calls they interrupt); this one learns of them from the bytes their C handler writes.
        stopping = {signal.SIGTERM, signal.SIGINT}
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, stopping)
        try:
            threading.Thread(target=self._watch, args=(read,), name="sluice-daemon-stop", daemon=True).start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    def _watch(self, read: int) -> None:
        daemon = self._daemon
        try:
            while True:
                got = os.read(read, 64)
                if not got:
                    return  # closed: the daemon has finished
                asked = [n for n in got if n in (signal.SIGTERM, signal.SIGINT)]
                if asked:
                    break
            if daemon._let_go.wait(STOP_GRACE) and daemon._finished.wait(FINISH_GRACE):
                return
            if not daemon._finished.is_set():
                daemon._force_stop(asked[0])
        finally:
            os.close(read)

    def close(self) -> None:
        if self._write is None:
            return
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(self._previous if self._previous is not None else -1)
        os.close(self._write)
        self._write = None


def run_daemon(town: Town, interval: float = DEFAULT_INTERVAL, once: bool = False,
               timeout: float = DEFAULT_TIMEOUT, executor: Executor | None = None) -> int:
    """Run the daemon until signalled (or one tick with ``once``); returns the exit status."""
    town.load_config()  # a corrupt config stops the daemon before it starts
    return Daemon(town, interval, timeout, executor=executor).run(once)
