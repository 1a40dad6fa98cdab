"""Shared fixtures: real towns, real git repositories, the real CLI, a clock and executor the test drives.

One family, one name per type, and no test module defines a fixture of the
same name (tests/test_fixture_family.py keeps it so):

* ``town_dir`` (``Path``): an initialised town with no rigs;
* ``cli`` (``helpers.Cli``): the real entry point run against it;
* ``town_files`` (``sluice.store.files.town.Town``): its files, for the scheduler
  and store functions;
* ``api_town`` (``sluice.Town``): the library's facade over it;
* ``rig`` (``str``): rig ``alpha`` (prefix ``al``) over a real git repository
  with its own store; ``rigs`` (``dict`` of name to repository): ``alpha``/``al``
  and ``beta``/``be``;
* ``capacity``: ``capacity(max_polecats, batch_size=None)`` sets the
  scheduler's limits, as ``sluice config set`` would;
* ``real_polecats`` (``helpers.polecats.RealPolecats``): rig ``alpha``'s
  polecats as real processes of the sleeping test polecat, once on the
  local and once on the tmux executor;
* ``clock`` (``ManualClock``): the wall clock the test moves by hand, and
  ``memory`` (``MemoryExecutor``): the town's in-memory executor on it;
* ``beads_data`` (``Path``), ``ray_cluster``: the public exports and one Ray
  head for the session;
* ``_town_databases_closed`` (used by every test): the town databases a test
  opened in this process, closed after it.

A module's own scenario (its items written, its executor configured) is a
fixture built on these whose name says what it returns: ``*_dir`` a
``Path``, ``*_files`` a ``sluice.store.files.town.Town``, ``*_api`` a
``sluice.Town``, ``*_cli`` a ``Cli``; never ``town`` or ``*_town``, and a
name two modules share has one return annotation in both.  The functions
and classes behind them are in the ``helpers`` package, never imported
from here.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

from helpers import BEADS_DATA_VAR, Cli, beads_data_missing_reason
from helpers import beads_data as beads_data_path

if TYPE_CHECKING:
    import sluice
    from helpers.polecats import RealPolecats
    from sluice.executors.memory import ManualClock, MemoryExecutor
    from sluice.store.files.town import Town

# Read the exports' location once, then keep the variable out of the environment: polecats the
# tests launch inherit it, and the executor tests compare every SLUICE_* variable a polecat sees.
BEADS_DATA = beads_data_path()
os.environ.pop(BEADS_DATA_VAR, None)
# Every town the tests make notes itself in the per-user town registry (sluice.store.items.registry): a
# fresh one under a temporary state directory, never the real home's. XDG_STATE_HOME rather than
# SLUICE_REGISTRY, so the SLUICE_* variables a polecat sees stay the ones sluice sets.
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="sluice-test-state-")
atexit.register(shutil.rmtree, os.environ["XDG_STATE_HOME"], True)
os.environ.pop("SLUICE_REGISTRY", None)

# Speed is measured by benchmarks, never by timed assertions: no per-example deadline, which a
# busy machine (or two xdist workers on two cores) would otherwise turn into random failures.
settings.register_profile("sluice", deadline=None)
settings.load_profile("sluice")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked slow run first, in their usual order, and the short ones after them.

    pytest-xdist hands out tests in this order (after the groups of tests that
    share a fixture, which it puts first): a long test handed out last runs
    alone on one core while the other has finished, so starting the long ones
    first lets the many short ones fill in around them.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def _town_databases_closed() -> Iterator[None]:
    """Each test's town databases closed after it, as its process would at exit: a worker that runs
    hundreds of tests would otherwise hold three descriptors open for every town it ever opened."""
    yield
    from sluice.store.database import db

    for database in list(db._shared.values()):
        database.close()
    db._shared.clear()


@pytest.fixture
def town_dir(tmp_path: Path) -> Path:
    """An initialised town with no rigs, made in-process (what `sluice init` does)."""
    from helpers.foundation import quick_town

    return quick_town(tmp_path)


@pytest.fixture
def cli(town_dir: Path) -> Cli:
    return Cli(town_dir)


@pytest.fixture
def town_files(town_dir: Path) -> Town:
    """The town's files.  Its config is read once: build it after the config the test reads is set."""
    from sluice.store.files.town import Town

    return Town(town_dir)


@pytest.fixture
def api_town(town_dir: Path) -> sluice.Town:
    """The library's facade over the town, with the executor its config names."""
    from sluice.api import open_town

    return open_town(town_dir)


@pytest.fixture
def rig(town_dir: Path, tmp_path: Path) -> str:
    """A rig named ``alpha`` (prefix ``al``) over a real git repository with its own store."""
    from helpers.foundation import quick_rig

    return quick_rig(town_dir, tmp_path)


@pytest.fixture
def rigs(rig: str, town_dir: Path, tmp_path: Path) -> dict[str, Path]:
    """Rigs ``alpha`` (prefix ``al``) and ``beta`` (prefix ``be``): each name with its repository."""
    from helpers.foundation import quick_rig

    quick_rig(town_dir, tmp_path, "beta", "be")
    return {name: tmp_path / "repos" / name for name in (rig, "beta")}


@pytest.fixture
def capacity(town_dir: Path) -> Callable[..., None]:
    """``capacity(max_polecats, batch_size=None)`` sets the scheduler's limits as `sluice config set` does."""
    from helpers.scheduler import configure

    def set_limits(max_polecats: int, batch_size: int | None = None) -> None:
        configure(town_dir, "scheduler.max_polecats", str(max_polecats))
        if batch_size is not None:
            configure(town_dir, "scheduler.batch_size", str(batch_size))

    return set_limits


@pytest.fixture(params=["local", "tmux"])
def real_polecats(request, town_dir: Path, rig: str, tmp_path: Path) -> Iterator[RealPolecats]:
    """The sleeping test polecat (a minute) as rig alpha's command on the local or the tmux executor.

    Every polecat still running at the end is stopped, and the tmux server
    of the town's socket killed.
    """
    from helpers.polecats import RealPolecats, configure, install_polecat, polecat_command
    from sluice.executors import get_executor
    from sluice.store.files.town import Town

    script, reports = install_polecat(tmp_path / "polecat")
    configure(town_dir, {"executor.kind": request.param,
                         "executor.command": json.dumps(polecat_command(script, reports, 60))})
    yield RealPolecats(request.param, reports, script)
    executor = get_executor(Town(town_dir))
    for polecat in executor.active():
        executor.stop(polecat.id)
    if request.param == "tmux":
        subprocess.run(["tmux", "-L", executor.socket, "kill-server"], capture_output=True)


@pytest.fixture(scope="session")
def ray_cluster():
    """One real Ray head for the whole session (tests/helpers/ray_cluster.py), however many modules use it.

    Defined here, not imported into each module: an imported fixture is a new definition per
    module, and each would start a head of its own.
    """
    from helpers.ray_cluster import start_cluster, stop_cluster

    cluster = start_cluster()
    yield cluster
    stop_cluster(cluster)


@pytest.fixture(scope="session")
def beads_data() -> Path:
    """The public beads exports (``SLUICE_BEADS_DATA``); tests that need them skip without them."""
    path = BEADS_DATA
    if not path.is_dir():
        pytest.skip(beads_data_missing_reason(path))
    return path


@pytest.fixture
def clock(monkeypatch) -> ManualClock:
    """The wall clock of this test: a microsecond per reading, and whatever ``clock.advance(seconds)`` adds.

    ``time.time()`` and :func:`sluice.core.clock.now_utc` (so every ``iso()``
    stamp) read it, in this process: a budget window slides, a cooldown or a
    throttle ends, a polecat overruns its timeout without a real second
    passing, however loaded the machine.  Timeouts of the test's own waits run
    on ``time.monotonic``, which it leaves alone.
    """
    from sluice.core import clock as sluice_clock
    from sluice.executors.memory import ManualClock

    manual = ManualClock()
    monkeypatch.setattr(time, "time", manual.time)
    monkeypatch.setattr(sluice_clock, "now_utc", manual.now_utc)
    return manual


@pytest.fixture
def memory(town_dir: Path, clock: ManualClock) -> Iterator[MemoryExecutor]:
    """The town's executor (``executor.kind = "memory"``) on the test's clock.

    Polecats are records: a launch starts none, a run ends when the test
    says (``memory.finish(item_id, exit_code)``), a launch fails when it
    arranged so (``memory.fail_next(item_id)``).  Every call in this process
    (the library, in-process CLI commands) sees the same instance.
    """
    from helpers.scheduler import configure
    from sluice.executors.memory import MemoryExecutor
    from sluice.store.files.town import Town

    configure(town_dir, "executor.kind", "memory")
    executor = MemoryExecutor(clock).serve(Town(town_dir))
    yield executor
    MemoryExecutor.forget_town(Town(town_dir))


