"""sluice's logger, made the first time something is logged.

``logging`` brings ``traceback``, ``threading`` and ``string`` with it: about
5 ms of every command that imports it, a sixth of a bare interpreter's
start.  A hot read that goes well logs nothing, so every module logs
through :data:`log`, which imports ``logging`` and fetches the ``sluice``
logger only when it is first used; each function given to
:func:`when_made` is called with the real logger then (the fast command
line holds its warnings back that way), or at once if it already exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

NAME = "sluice"
_made: list[Any] = []
_waiting: list[Callable[[Any], None]] = []


def logger() -> Any:
    """The real ``logging.Logger`` named ``sluice``, made now if it was not yet."""
    if not _made:
        import logging

        _made.append(logging.getLogger(NAME))
        while _waiting:
            _waiting.pop(0)(_made[0])
    return _made[0]


def when_made(callback: Callable[[Any], None]) -> None:
    """Call ``callback(logger)`` once the logger exists: now, or when something first logs."""
    if _made:
        callback(_made[0])
    else:
        _waiting.append(callback)


def forget(callback: Callable[[Any], None]) -> None:
    """Drop a ``callback`` given to :func:`when_made` that has not run yet."""
    if callback in _waiting:
        _waiting.remove(callback)


class _Deferred:
    """Stands for the logger: any attribute (``warning``, ``debug``, ``isEnabledFor``) is the real one's."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        return getattr(logger(), name)


log: Any = _Deferred()
