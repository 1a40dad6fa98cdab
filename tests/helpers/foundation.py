"""In-process town and rig set-up behind the ``town_dir``, ``rig`` and ``rigs`` fixtures.

The library calls `sluice init` and `rig add` make, without the command
line; `init` and `rig add` themselves are exercised through the CLI in
test_town.py.
"""

from __future__ import annotations

from pathlib import Path

from helpers import make_repo
from sluice.store.files.town import Town, init_town


def quick_town(tmp_path: Path) -> Path:
    return init_town(tmp_path / "town").root


def quick_rig(town_dir: Path, tmp_path: Path, name: str = "alpha", prefix: str = "al") -> str:
    """A rig over a real git repository with its own store (``alpha``/``al`` by default)."""
    from sluice.store.items.rigs import add_rig

    add_rig(Town(town_dir), name, make_repo(tmp_path / "repos" / name), prefix)
    return name
