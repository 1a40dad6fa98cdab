"""An executor that launches nothing: polecats are records in this process's memory.

It exists so a whole town can be driven from a unit test, or from a notebook,
without starting a single process (huey's "immediate mode"): a dispatch cycle
"launches" a polecat by remembering the request, the polecat counts as
running (it holds a slot) until :meth:`MemoryExecutor.finish` says it is
done, and ``stop``, ``logs``, ``listing`` and ``reap`` behave as the other
executors' do.

Two ways to use it:

* ``sluice.open_town(path, executor=MemoryExecutor())`` hands one instance to
  every call made through that town;
* ``executor.kind = "memory"`` in the town config makes
  :func:`sluice.executors.get_executor` return one instance per town *per
  process* (:meth:`MemoryExecutor.for_town`), so separate calls in one
  process see the same polecats.  Polecats do not outlive the process, and
  another process (the daemon's cycle, a second CLI call) sees none.

Launch failures can be arranged in advance with :meth:`fail_next` (counted
against the item, like a program that is not found) or by setting
``unavailable`` (the executor as a whole is unusable, never counted); a run
ends when :meth:`MemoryExecutor.finish` gives its exit code.

Its times come from a clock, the real one unless it is given a
:class:`ManualClock`: then time moves on by a microsecond a reading and
otherwise only when the test moves it (:meth:`ManualClock.advance`), so a
budget window sliding, a throttle or a breaker cooldown ending, a polecat
running past its timeout take no real seconds.  The scheduler reads ``time.time()`` and
:func:`sluice.core.clock.now_utc`; a test that wants the whole town on the
manual clock points both at it (the suite's ``clock`` fixture does).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, ClassVar

from sluice.core.clock import iso_epoch
from sluice.core.recordclass import replace
from sluice.errors import ExecutorError, ExecutorUnavailable
from sluice.executors.base import LaunchRequest, Polecat, check_launchable, polecat_env

if TYPE_CHECKING:
    from sluice.store.files.town import Town

RUNNING_STATES = ("running", "pending")


class ManualClock:
    """Wall-clock time (epoch seconds) that a test moves: by :meth:`advance`, and a microsecond per reading.

    The microsecond keeps what a real clock promises and sluice relies on:
    two readings are never equal, so stamps taken one after another (two
    promotions, two launches) stay in the order they were taken.
    """

    STEP = 1e-6

    def __init__(self, start: float | None = None):
        self.now = time.time() if start is None else float(start)
        self._lock = threading.Lock()

    def time(self) -> float:
        with self._lock:
            self.now += self.STEP
            return self.now

    def now_utc(self) -> datetime:
        return datetime.fromtimestamp(self.time(), UTC)

    def advance(self, seconds: float) -> float:
        """Move time forward (never back: a clock that jumps back is its own test)."""
        if seconds < 0:
            raise ValueError("a manual clock only moves forward")
        with self._lock:
            self.now += seconds
            return self.now


class MemoryExecutor:
    """Polecats as in-memory records; see the module docstring."""

    kind = "memory"
    #: Used when ``executor.command`` is empty: nothing runs, but the request still names the item.
    default_command: tuple[str, ...] = ("memory-polecat", "{item_id}")

    _shared: ClassVar[dict[str, MemoryExecutor]] = {}
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, clock: ManualClock | None = None) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._polecats: dict[str, Polecat] = {}
        self._logs: dict[str, list[str]] = {}
        self._failures: dict[str, list[ExecutorError]] = {}
        self._numbers = itertools.count(1)
        #: Every launch request received, in order (successful or not).
        self.requests: list[LaunchRequest] = []
        #: When set, every call raises ExecutorUnavailable with this message.
        self.unavailable: str | None = None

    @classmethod
    def for_town(cls, town: Town) -> MemoryExecutor:
        """The one instance this process keeps for ``town`` (``executor.kind = "memory"``)."""
        key = str(town.root)
        with cls._shared_lock:
            executor = cls._shared.get(key)
            if executor is None:
                executor = cls._shared[key] = cls()
            return executor

    def serve(self, town: Town) -> MemoryExecutor:
        """Make this instance the one :meth:`for_town` hands out for ``town`` in this process."""
        with self._shared_lock:
            self._shared[str(town.root)] = self
        return self

    @classmethod
    def forget_town(cls, town: Town) -> None:
        """Drop the shared instance of ``town`` (its polecats vanish)."""
        with cls._shared_lock:
            cls._shared.pop(str(town.root), None)

    def _time(self) -> float:
        return self.clock.time() if self.clock is not None else time.time()

    # -- arranging outcomes (tests) -------------------------------------------
    def fail_next(self, item_id: str, error: str = "launch refused", times: int = 1,
                  unavailable: bool = False) -> None:
        """Make the next ``times`` launches for ``item_id`` fail with ``error``: a counted failure, or
        with ``unavailable`` the executor refusing as a whole at that launch (never counted)."""
        kind = ExecutorUnavailable if unavailable else ExecutorError
        with self._lock:
            self._failures.setdefault(item_id, []).extend(kind(error) for _ in range(times))

    def finish(self, ref: str, exit_code: int = 0, output: str = "") -> Polecat:
        """End a running polecat (by polecat id or item id): it stops holding a slot."""
        with self._lock:
            polecat = self._resolve(ref)
            if output:
                self._logs[polecat.id].extend(output.splitlines())
            ended = self._time()
            done = replace(polecat, state="exited",
                           detail={**polecat.detail, "exit_code": exit_code,
                                   "finished_at": iso_epoch(ended), "ended_ts": ended})
            self._polecats[polecat.id] = done
            return done

    def _resolve(self, ref: str) -> Polecat:
        polecat = self._polecats.get(ref)
        if polecat is not None:
            return polecat
        running = [p for p in self._polecats.values() if p.item_id == ref and p.state in RUNNING_STATES]
        if not running:
            raise ExecutorError(f"no running in-memory polecat with id or item id {ref!r}")
        return running[-1]

    def _check_available(self) -> None:
        if self.unavailable:
            raise ExecutorUnavailable(self.unavailable)

    # -- the executor protocol ---------------------------------------------------
    def launch(self, request: LaunchRequest) -> Polecat:
        self._check_available()
        env = {**polecat_env(request.town, request.item_id, request.rig, request.context_id), **request.env}
        with self._lock:
            self.requests.append(request)
            pending = self._failures.get(request.item_id)
            if pending:
                raise pending.pop(0)
            check_launchable(request.argv, env)
            polecat_id = f"mem-{next(self._numbers)}"
            started = self._time()
            polecat = Polecat(
                id=polecat_id, executor=self.kind, item_id=request.item_id, rig=request.rig,
                context_id=request.context_id, started_at=iso_epoch(started), state="running",
                detail={"argv": list(request.argv), "env": env, "title": request.title,
                        "started_ts": started},
            )
            self._polecats[polecat_id] = polecat
            self._logs[polecat_id] = []
            return polecat

    def active(self) -> list[Polecat]:
        self._check_available()
        with self._lock:
            return [p for p in self._polecats.values() if p.state in RUNNING_STATES]

    def find(self, context_id: str) -> Polecat | None:
        if not context_id:
            return None
        with self._lock:
            found = [p for p in self._polecats.values() if p.context_id == context_id]
        return found[-1] if found else None

    def stop(self, polecat_id: str) -> bool:
        self._check_available()
        with self._lock:
            polecat = self._polecats.get(polecat_id)
            if polecat is None or polecat.state not in RUNNING_STATES:
                return False
            self._polecats[polecat_id] = replace(polecat, state="stopped")
            return True

    def logs(self, polecat_id: str, follow: bool = False) -> Iterator[str]:
        with self._lock:
            if polecat_id not in self._logs:
                raise ExecutorError(f"no in-memory polecat {polecat_id!r}")
            return iter(list(self._logs[polecat_id]))

    def listing(self) -> list[Polecat]:
        self._check_available()
        with self._lock:
            return list(self._polecats.values())

    def reap(self) -> list[Polecat]:
        with self._lock:
            done = [p for p in self._polecats.values() if p.state not in RUNNING_STATES]
            for polecat in done:
                del self._polecats[polecat.id]  # the log stays readable, as with the other executors
            return done
