"""The towns of this user on this machine, and the repositories each has as rigs.

Two towns that register one repository both dispatch its items: each sees
them ready, each launches them.  Neither town can tell from its own files,
so every town notes itself in a per-user registry (``towns.json`` under
``$XDG_STATE_HOME/sluice/``, or where ``SLUICE_REGISTRY`` says) when a rig
is added and at every patrol, and is told which other towns have a
repository it has.  Nothing is written into a repository.

The registry only points at towns: whether another town *still* has a
repository is read from that town's own ``config.json`` when it can be, so a
rig removed there stops counting at once.  A town whose config is gone is
pruned at the next write.  The registry is advice: when it cannot be read or
written the command goes on without it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from sluice.core.clock import iso
from sluice.errors import SluiceError
from sluice.logs import log
from sluice.store.files import fsutil

#: Where the registry is, for tests and unusual set-ups (a file path).
REGISTRY_VAR = "SLUICE_REGISTRY"
VERSION = 1


def registry_path(environ: Mapping[str, str] | None = None) -> Path:
    """``$SLUICE_REGISTRY``, else ``$XDG_STATE_HOME/sluice/towns.json``, else under ``~/.local/state``."""
    environ = os.environ if environ is None else environ
    if environ.get(REGISTRY_VAR):
        return Path(environ[REGISTRY_VAR]).expanduser()
    state = environ.get("XDG_STATE_HOME") or ""
    home = Path(environ.get("HOME") or Path.home())
    base = Path(state) if os.path.isabs(state) else home / ".local" / "state"  # a relative one is ignored
    return base / "sluice" / "towns.json"


def _config_path(root: str) -> Path:
    return Path(root) / ".sluice" / "config.json"


def _read(path: Path) -> dict[str, dict]:
    try:
        data = json.loads(fsutil.read_regular(path))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        log.debug("town registry %s unreadable (%s): starting afresh", path, err)
        return {}
    towns = data.get("towns") if isinstance(data, dict) else None
    if not isinstance(towns, dict):
        return {}
    return {root: entry for root, entry in towns.items() if isinstance(entry, dict)}


def _repos_now(root: str, entry: dict) -> set[str]:
    """The repositories town ``root`` has now: from its config, else as it noted them."""
    try:
        rigs = json.loads(fsutil.read_regular(_config_path(root))).get("rigs", {})
        return {_identity(rig["repo"]) for rig in rigs.values() if isinstance(rig, dict) and rig.get("repo")}
    except (OSError, ValueError, AttributeError, TypeError):
        return {r for r in entry.get("repos", []) if isinstance(r, str)}


def _identity(repo: str | os.PathLike) -> str:
    """One spelling per repository: the resolved path (a symlink or a trailing slash names the same one)."""
    return str(Path(repo).expanduser().resolve())


def note_town(root: Path, repos: Iterable[str | os.PathLike],
              environ: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """Record town ``root`` with ``repos``; for each of them another live town also has, those towns.

    Towns whose config no longer exists are pruned.  Returns ``{repo: [town
    root, …]}`` (empty when no repository is shared, or the registry is out
    of reach).
    """
    path = registry_path(environ)
    me = str(Path(root).resolve())
    mine = sorted({_identity(r) for r in repos})
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with fsutil.file_lock(path.with_name(path.name + ".lock")):
            towns = {r: e for r, e in _read(path).items() if r == me or os.path.lexists(_config_path(r))}
            towns[me] = {"repos": mine, "updated_at": iso()}
            document = {"version": VERSION, "towns": dict(sorted(towns.items()))}
            fsutil.atomic_write_json(path, document, mode=0o600)
    except (OSError, SluiceError) as err:  # no room, no permission, a lock held too long
        log.debug("town registry %s not written (%s)", path, err)
        towns = {r: e for r, e in _read(path).items() if os.path.lexists(_config_path(r))}
    shared: dict[str, list[str]] = {}
    wanted = set(mine)
    for other, entry in sorted(towns.items()):
        if other == me:
            continue
        for repo in sorted(_repos_now(other, entry) & wanted):
            shared.setdefault(repo, []).append(other)
    return shared


def sharing_warning(repo: str, towns: list[str]) -> str:
    """The one sentence every surface says of a shared repository."""
    others = ", ".join(towns)
    return (f"repository {repo} is also a rig of town {others}: both towns would dispatch its items"
            " (remove the rig from one of them)")
