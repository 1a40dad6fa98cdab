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

import copy
import time
from functools import cached_property
from typing import TYPE_CHECKING

from sluice.errors import ExecutorError
from sluice.executors import get_executor
from sluice.store.items.rigstore import Stores

if TYPE_CHECKING:
    from sluice.core.models import TownConfig
    from sluice.executors.base import Executor, Polecat
    from sluice.store.files.town import Town


class Session:
    """The context of one call; see the module docstring."""

    def __init__(self, files: Town, executor: Executor | None = None, now: float | None = None,
                 stores: Stores | None = None):
        self.files = files
        # A corrupt file is an error, never a default.  Stores kept open by the caller come with the
        # config they were checked against (sluice.store.items.kept), which is the file as it is now.
        self.config: TownConfig = files.reload_config() if stores is None else files.config
        self.now = time.time() if now is None else now
        self.stores = Stores(files) if stores is None else stores
        self._executor = executor
        self._resolved = executor is not None
        self.problem: str | None = None  # why the executor could not be had or asked
        self._refusal: ExecutorError | None = None  # the error that said so, for require_executor
        # The queue's survey and admission, made once per call by sluice.scheduler.queue.views, so a view
        # that shows the queue and its forecast surveys it once.
        self.surveyed: tuple | None = None
        # The queue's head as sluice.scheduler.queue.head read it (the views and the forecast of one
        # call share it), and how many rows a view of this call will want of it (the snapshot's forecast).
        self.head: tuple | None = None
        self.head_rows = 0

    @classmethod
    def of(cls, where: Town | Session, executor: Executor | None = None, now: float | None = None) -> Session:
        """``where`` itself when it is a session, else a new one over those files."""
        return where if isinstance(where, Session) else cls(where, executor, now)

    def seeing(self, executor: Executor | None) -> Session:
        """This session (files, config, stores, ``now``) asking ``executor`` instead, not yet asked.

        For a view that wraps the executor so it answers once (``snapshot``);
        an executor that could not be had stays so, with its ``problem``.
        """
        other = copy.copy(self)
        other.__dict__.pop("active", None)
        other._executor, other._resolved, other.surveyed, other.head = executor, True, None, None
        return other

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
            self.problem, self._refusal = str(err), err
            return None

    def require_active(self) -> list[Polecat]:
        """The running polecats, for a command that cannot go on without them: a refusal is raised."""
        active = self.active
        if active is None:
            assert self._refusal is not None
            raise self._refusal
        return active

    def find(self, context_id: str) -> Polecat | None:
        """The executor's polecat for a context, or None (also when the executor cannot be asked)."""
        if self.active is None:
            return None
        return self.executor.find(context_id)
