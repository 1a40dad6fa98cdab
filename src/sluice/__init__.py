"""sluice: a git-native scheduler for multi-agent coding workspaces.

The Python API (see ``docs/api.md``)::

    import sluice

    town = sluice.open_town("/path/to/town")
    town.sling(["api-1"], rig="api")
    town.run_cycle()

``import sluice`` stays cheap: the API is imported on first use of one of its
names (``sluice --version`` and the hot read commands must not pay for
pydantic, pygit2, typer or rich).
"""

from __future__ import annotations

from sluice.errors import (
    ConfigError,
    DispatchBusy,
    ExecutorError,
    ExecutorUnavailable,
    InvalidOperation,
    LockBusy,
    MissingFile,
    NotAdmitted,
    NotARepository,
    ReadOnlyStore,
    SlingFailed,
    SluiceError,
    SourceFailed,
    StorageError,
    StoreCorrupt,
    TextRefused,
    TownNotFound,
    UnknownItem,
    UnknownPolecat,
    UnknownRig,
    UsageError,
)

__version__ = "0.1.0"

__all__ = [
    "BrokenItem", "BrokenItems", "ClearResult", "CompactResult", "ConfigError", "CycleReport", "Decision",
    "Decisions", "DependencyAdded", "DispatchBusy", "ExecutorError", "ExecutorUnavailable", "Explanation",
    "Export", "ExportedRecord", "Feed", "FeedEntry", "Forecast", "ImportResult", "InvalidOperation", "Item",
    "ItemDetail", "ItemForecast", "ItemRows", "Items", "LockBusy", "MemoryExecutor", "MissingFile",
    "NotARepository", "NotAdmitted", "PatrolReport", "PauseState", "PolecatRow", "Polecats", "PolicyInfo",
    "Promotion", "Queue", "QueueEntry", "QueueStatus", "ReadOnlyStore", "ResetResult", "RigInfo",
    "RigRefreshed", "RigRemoved", "RunRecord", "Runs", "ScheduleStatus", "SlingFailed", "SlingResult",
    "SluiceError", "Snapshot", "SourceFailed", "StorageError", "StoreCorrupt", "TextRefused", "ThrottleState",
    "Town",
    "TownNotFound", "UnknownItem", "UnknownPolecat", "UnknownRig", "UsageError", "UsageReport", "__version__",
    "init_town", "open_town",
]

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing costs milliseconds here
if TYPE_CHECKING:
    from typing import Any

    from sluice.api import (
        BrokenItem,
        BrokenItems,
        ClearResult,
        CompactResult,
        CycleReport,
        Decision,
        Decisions,
        DependencyAdded,
        Explanation,
        Export,
        ExportedRecord,
        Feed,
        FeedEntry,
        Forecast,
        ImportResult,
        Item,
        ItemDetail,
        ItemForecast,
        ItemRows,
        Items,
        PatrolReport,
        PauseState,
        PolecatRow,
        Polecats,
        PolicyInfo,
        Promotion,
        Queue,
        QueueEntry,
        QueueStatus,
        ResetResult,
        RigInfo,
        RigRefreshed,
        RigRemoved,
        RunRecord,
        Runs,
        ScheduleStatus,
        SlingResult,
        Snapshot,
        ThrottleState,
        Town,
        UsageReport,
        init_town,
        open_town,
    )
    from sluice.executors.memory import MemoryExecutor


def __getattr__(name: str) -> Any:
    # Lazy on purpose: the API pulls in pydantic and the scheduler (see the module docstring).  Every
    # name of __all__ not defined above is sluice.api's (a test keeps the lists equal).
    if name == "MemoryExecutor":
        from sluice.executors.memory import MemoryExecutor

        return MemoryExecutor
    if name in __all__:
        from sluice import api

        return getattr(api, name)
    raise AttributeError(f"module 'sluice' has no attribute {name!r}")
