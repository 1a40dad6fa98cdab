"""One call's context: the town's files, the config read once, the stores, the executor, the time.

Every read of the queue needs the same five things, and each used to get
them itself: read the config again, open the stores again, resolve the
executor and swallow its error its own way, take ``time.time()`` again.  A
:class:`Session` is made once per call (the facade, :class:`sluice.api.Town`,
makes one for each; the daemon one per tick) and handed down, so one call
reads the config once, asks the executor once and judges everything at one
``now``.  The executor is resolved only when something asks for it, and an
executor that cannot be had or asked is not an error here: ``problem`` says
why, and the call counts no polecats (``scheduler status`` reports it).
"""

from __future__ import annotations

import time
from functools import cached_property
from typing import TYPE_CHECKING

from sluice.errors import ExecutorError
from sluice.executors import get_executor
from sluice.store.rigstore import Stores

if TYPE_CHECKING:
    from sluice.core.models import TownConfig
    from sluice.executors.base import Executor, Polecat
    from sluice.store.town import Town


class Session:
    """The context of one call; see the module docstring."""

    def __init__(self, files: Town, executor: Executor | None = None, now: float | None = None):
        self.files = files
        self.config: TownConfig = files.reload_config()  # a corrupt file is an error, never a default
        self.now = time.time() if now is None else now
        self.stores = Stores(files)
        self._executor = executor
        self._resolved = executor is not None
        self.problem: str | None = None  # why the executor could not be had or asked
        self._refusal: ExecutorError | None = None  # the error that said so, for require_executor
        # The queue's survey and admission, made once per call by sluice.scheduler.queue, so a view
        # that shows the queue and its forecast surveys it once.
        self.surveyed: tuple | None = None

    @classmethod
    def of(cls, where: Town | Session, executor: Executor | None = None, now: float | None = None) -> Session:
        """``where`` itself when it is a session, else a new one over those files."""
        return where if isinstance(where, Session) else cls(where, executor, now)

    @property
    def executor(self) -> Executor | None:
        """The configured executor (or the one given), resolved once; None when it cannot be had."""
        if not self._resolved:
            self._resolved = True
            try:
                self._executor = get_executor(self.files)
            except ExecutorError as err:
                self.problem, self._refusal = str(err), err
        return self._executor

    def require_executor(self) -> Executor:
        """The executor, for a command that cannot do without it: its refusal is raised, not kept."""
        executor = self.executor
        if executor is None:
            assert self._refusal is not None
            raise self._refusal
        return executor

    @cached_property
    def active(self) -> list[Polecat] | None:
        """The running polecats, asked once; None when the executor cannot say (see ``problem``)."""
        executor = self.executor
        if executor is None:
            return None
        try:
            return executor.active()
        except ExecutorError as err:
            self.problem = str(err)
            return None

    def find(self, context_id: str) -> Polecat | None:
        """The executor's polecat for a context, or None (also when the executor cannot be asked)."""
        if self.active is None:
            return None
        return self.executor.find(context_id)
