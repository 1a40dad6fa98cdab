"""The dashboard's event feed: one snapshot per change, shared by every open ``/api/events`` stream.

Each stream used to compute the whole snapshot itself every second, so ten
open tabs cost ten surveys of the queue a second.  Now one task, running
while at least one stream is open, watches the signature of the town's
sources (:mod:`sluice.surfaces.watching`) and computes the snapshot when it
changed (after a rest in proportion to what the last one cost), or after
the backstop for what moves with the clock alone (the page ticks runtimes
itself); every stream sends the newest message it has not sent yet.  The number of open streams is
bounded, so a page left open in many tabs, or a misbehaving client, cannot
pile up connections: one past the bound is answered 503 at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable

from sluice.errors import SluiceError
from sluice.surfaces.watching import BACKSTOP, Pace

POLL = 0.25  # seconds between looks at the watched files
DEFAULT_MAX_STREAMS = 32


class Feed:
    """The newest ``event: …`` message and its version, kept up to date while anyone listens."""

    def __init__(self, compute: Callable[[], dict], watched: Callable[[], tuple], interval: float = 1.0,
                 max_streams: int = DEFAULT_MAX_STREAMS):
        self.compute = compute
        self.watched = watched
        self.interval = interval
        self.max_streams = max_streams
        self.streams = 0
        self.version = 0
        self.message = ""
        self.pace = Pace()
        # Set when a newer message is out, then replaced by a fresh one. An Event, not a Condition:
        # a stream's wait is cancelled by its timeout, and a Condition's wait cancelled that way can
        # leave its lock released under the waiter ("cannot wait on un-acquired lock").
        self._changed: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    def join(self) -> bool:
        """Count one more open stream, starting the feed's task; False when the bound is reached."""
        if self.streams >= self.max_streams:
            return False
        self.streams += 1
        if self._changed is None:
            self._changed = asyncio.Event()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        return True

    def leave(self) -> None:
        self.streams -= 1

    async def next_after(self, version: int, timeout: float) -> tuple[int, str]:
        """The newest (version, message) once it is newer than ``version``, or the same after ``timeout``."""
        assert self._changed is not None
        if self.version == version:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)
        return self.version, self.message

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        seen, next_at, last = None, 0.0, None
        while self.streams > 0:
            due = loop.time() >= next_at  # the backstop: what moves with the clock alone
            watched = await asyncio.to_thread(self.watched) if due or self.pace.ready(loop.time()) else seen
            if watched != seen or due:
                started = loop.time()
                seen, next_at = watched, started + max(self.interval, BACKSTOP)
                try:
                    snapshot = await asyncio.to_thread(self.compute)
                    data, kind = json.dumps(snapshot, ensure_ascii=False), "state"
                except SluiceError as err:
                    data, kind = json.dumps({"error": str(err)}), "problem"
                self.pace.took(started, loop.time())
                if data != last:
                    last = data
                    self.version += 1
                    self.message = f"event: {kind}\ndata: {data}\n\n"
                    changed, self._changed = self._changed, asyncio.Event()
                    changed.set()
            await asyncio.sleep(POLL)
