"""How polecats are launched, counted, stopped and read: one module per executor.

Every caller (dispatcher, status, patrol, daemon, `sluice polecat`) goes
through :func:`get_executor` and the :class:`~sluice.executors.base.Executor`
protocol, never through a concrete executor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.errors import ConfigError

if TYPE_CHECKING:
    from sluice.executors.base import Executor
    from sluice.store.files.town import Town


def get_executor(town: Town, kind: str | None = None) -> Executor:
    """The executor named by ``executor.kind`` (imported lazily: Ray is heavy)."""
    kind = kind or town.config.executor.kind
    if kind in ("local", "demo"):
        from sluice.executors.local import LocalExecutor

        return LocalExecutor(town, demo=kind == "demo")
    if kind == "tmux":
        from sluice.executors.tmux import TmuxExecutor

        return TmuxExecutor(town)
    if kind == "memory":
        from sluice.executors.memory import MemoryExecutor

        return MemoryExecutor.for_town(town)
    if kind == "ray":
        from sluice.executors.ray import RayExecutor

        return RayExecutor(town)
    raise ConfigError(f"executor.kind {kind!r} is not one of local, tmux, ray, demo, memory")
