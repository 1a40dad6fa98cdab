"""The town: where its files live, its config, its rigs and id routing.

A town is any directory holding ``.sluice/config.json``.  Everything else
sluice keeps is found from here, so a :class:`Town` is the one object the
library's entry points take.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.core.recordclass import frozen
from sluice.errors import ConfigError, TownNotFound, UnknownRig, UsageError
from sluice.store.files import configcache, fsutil

if TYPE_CHECKING:
    from sluice.core.models import TownConfig
    from sluice.store.database.db import Database

# The models (and pydantic) are imported where a config is validated, not here: hot read commands
# answer from a config validated before (sluice.store.files.configcache) and never pay for pydantic.

CONFIG_NAME = "config.json"


@frozen
class ItemCommand:
    """A rig's items read through a command (``rigs.NAME.items`` an object): how and how often."""

    argv: tuple[str, ...]
    watch: tuple[Path, ...]  # a change under any of these runs the command again
    timeout: float  # seconds before a running command is killed
    refresh: float  # seconds after which the snapshot is taken again anyway
    read_wait: float  # seconds a read command waits for a refresh before serving the last snapshot


@frozen
class Rig:
    name: str
    repo: Path
    prefix: str
    items: Path | None  # external read-only export (or a command's snapshot), or None for the rig's own store
    command: ItemCommand | None = None  # set when ``items`` is the snapshot of this command's output
    remote: str | None = None  # the URL a workspace on another machine clones from (``rig add --remote``)
    workspace: str | None = None  # the rig's own ``rigs.NAME.workspace``; None: ``executor.workspace``

    @property
    def read_only(self) -> bool:
        return self.items is not None


class Town:
    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self.dir = self.root / ".sluice"

    # -- paths -------------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.dir / CONFIG_NAME

    @property
    def runtime(self) -> Path:
        return self.dir / "runtime"

    @property
    def workers_dir(self) -> Path:
        return self.runtime / "workers"

    @property
    def events_path(self) -> Path:
        return self.dir / "events" / "scheduler.jsonl"

    @property
    def policy_path(self) -> Path:
        return self.dir / "schedule" / "policy.json"

    @property
    def decisions_path(self) -> Path:
        return self.dir / "schedule" / "decisions.jsonl"

    @cached_property
    def db(self) -> Database:
        """The town database (:mod:`sluice.store.database.db`), opened on first use."""
        from sluice.store.database.db import database_path, shared

        return shared(database_path(self.dir), on_create=lambda _conn: _refuse_unmigrated(self))

    @property
    def db_if_made(self) -> Database | None:
        """The town database when it is there already: a derived result kept in it (a validated copy
        of a file, a rig's warmth) is never worth making one."""
        from sluice.store.database.db import database_path

        return self.db if database_path(self.dir).exists() else None

    def lock_path(self, name: str) -> Path:
        return self.runtime / f"{name}.lock"

    def rig_dir(self, rig: str) -> Path:
        return self.dir / "rigs" / rig

    def rig_items(self, rig: Rig) -> Path:
        """A rig's items file: its read-only export or snapshot, else its own store."""
        return rig.items if rig.items is not None else self.rig_dir(rig.name) / "issues.jsonl"

    # -- config --------------------------------------------------------------
    @cached_property
    def config(self) -> TownConfig:
        """The config for this call: the plain copy of this exact file when it was validated before."""
        return self.reload_config()

    def reload_config(self) -> TownConfig:
        """Read the config afresh and use it for the rest of this call (one consistent view).

        Afresh means as the file is now: its validated plain copy when these
        exact bytes were validated before, else a full validation (a corrupt
        file is an error, never a default).
        """
        config = configcache.plain_config(self) or self.load_config()
        self.__dict__["config"] = config
        return config

    def load_config(self) -> TownConfig:
        """The config file, fully validated (a bad file is a ConfigError naming it)."""
        try:
            raw = fsutil.read_edited(self.config_path, "config")  # the plain copy is keyed by these bytes
            if raw is None:
                raise ConfigError(f"{self.config_path}: missing (run `sluice init`)")
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(f"{self.config_path}: cannot read ({err})") from None
        from sluice.core.models import TownConfig, load_model

        config = load_model(TownConfig, self.config_path, text)
        configcache.remember(self, raw, config.model_dump(mode="json"))
        return config  # type: ignore[return-value]

    def save_config(self, config: TownConfig) -> None:
        fsutil.atomic_write_json(self.config_path, config.model_dump(mode="json"))
        self.__dict__["config"] = config

    def update_config(self, change) -> TownConfig:
        """Re-read, apply ``change(config) -> config`` and save, under the config lock."""
        with fsutil.file_lock(self.lock_path("config")):
            config = change(self.load_config())
            self.save_config(config)
            return config

    # -- rigs ----------------------------------------------------------------
    def _routing(self) -> tuple[dict[str, Rig], dict[str, Rig]]:
        """Rigs by name and by prefix, built once per loaded config (routing is on hot paths)."""
        config = self.config
        cached = self.__dict__.get("_routing_cache")
        if cached is None or cached[0] is not config:
            by_name = {}
            for name, rc in sorted(config.rigs.items()):
                command = self._item_command(config, rc)
                items = self.snapshot_path(name) if command else Path(rc.items) if rc.items else None
                by_name[name] = Rig(name=name, repo=Path(rc.repo), prefix=rc.prefix, items=items,
                                    command=command, remote=getattr(rc, "remote", None),
                                    workspace=getattr(rc, "workspace", None))
            cached = (config, by_name, {rig.prefix: rig for rig in by_name.values()})
            self.__dict__["_routing_cache"] = cached
        return cached[1], cached[2]

    def snapshot_path(self, rig: str) -> Path:
        """Where the output of a rig's item command is kept (read exactly like an export)."""
        return self.runtime / "sources" / f"{rig}.jsonl"

    @staticmethod
    def _item_command(config, rc) -> ItemCommand | None:
        spec = rc.items
        if spec is None or isinstance(spec, str):
            return None
        get = spec.get if isinstance(spec, dict) else lambda key: getattr(spec, key)  # plain copy or model
        from sluice.core.clock import parse_duration

        town_items = getattr(config, "items", None)
        def seconds(key: str) -> float:
            own = get(key)
            return parse_duration(own) if own is not None else town_items.seconds(key)

        repo = Path(rc.repo)
        watch = tuple(repo / w for w in get("watch")) or (repo / ".beads",)
        return ItemCommand(tuple(get("command")), watch, seconds("command_timeout"), seconds("refresh"),
                           town_items.seconds("read_wait"))

    def rigs(self) -> list[Rig]:
        return list(self._routing()[0].values())

    def rig(self, name: str) -> Rig:
        rig = self._routing()[0].get(name)
        if rig is None:
            known = ", ".join(self._routing()[0]) or "none registered"
            raise UnknownRig(f"unknown rig {name!r} (known: {known})")
        return rig

    def rig_for_id(self, item_id: str) -> Rig | None:
        """The rig an id's prefix routes to (longest matching prefix wins)."""
        by_prefix = self._routing()[1]
        cut = item_id.rfind("-")
        while cut > 0:  # try the longest candidate prefix first
            rig = by_prefix.get(item_id[:cut])
            if rig is not None:
                return rig
            cut = item_id.rfind("-", 0, cut)
        return None


def find_town(explicit: str | os.PathLike | None = None, cwd: Path | None = None) -> Town:
    """The town from ``--town``, else ``SLUICE_TOWN``, else the nearest parent of the cwd."""
    # A town's config there at all, whatever it is (a FIFO, a dangling link), is a town found: reading its
    # config says what is wrong with it.
    given = explicit or os.environ.get("SLUICE_TOWN")
    if given:
        town = Town(Path(given).expanduser())
        if not os.path.lexists(town.config_path):
            raise TownNotFound(
                f"{town.root} is not a sluice town (no .sluice/{CONFIG_NAME}; run `sluice init`)"
            )
        return town
    here = (cwd or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if os.path.lexists(candidate / ".sluice" / CONFIG_NAME):
            return Town(candidate)
    raise TownNotFound(
        f"no sluice town found from {here} (run `sluice init`, give the town's path, or set SLUICE_TOWN)"
    )


def init_town(path: Path) -> Town:
    """Create a town at ``path``; an existing town is left as it is."""
    town = Town(Path(path))
    try:
        if town.config_path.exists():
            town.load_config()  # a corrupt config is an error, not something to overwrite
            return town
        town.root.mkdir(parents=True, exist_ok=True)
        for sub in ("rigs", "runtime/workers", "schedule", "events"):
            (town.dir / sub).mkdir(parents=True, exist_ok=True)
        from sluice.core.models import TownConfig

        fsutil.atomic_write_json(town.config_path, TownConfig().model_dump(mode="json"))
        town.db.conn  # noqa: B018  (the database and its schema, made now: a later read writes nothing)
        town.db.close()
    except OSError as err:  # a file in the way, no permission, a read-only disk
        raise ConfigError(f"cannot create a town at {town.root}: {err.strerror or err}") from None
    return town


def validate_rig_name(name: str) -> None:
    if not name or not all(c.isalnum() or c in "-_." for c in name) or name.startswith("."):
        raise UsageError(f"invalid rig name {name!r} (letters, digits, '-', '_' and '.')")


def validate_prefix(prefix: str) -> None:
    """A prefix starts with a letter or digit: an id starting with ``-`` would read as an option."""
    body = prefix.replace("-", "")
    if not prefix or not all(c.isalnum() or c in "_." for c in body) or prefix.endswith("-"):
        raise UsageError(f"invalid prefix {prefix!r}: ids look like <prefix>-<base36>")
    if not prefix[0].isalnum():
        raise UsageError(f"invalid prefix {prefix!r}: it must start with a letter or digit"
                         " (ids starting with '-' or '.' would read as options or hidden files)")


def made_by_01(town: Town) -> bool:
    """Whether ``town`` holds state files of sluice 0.1 (what
    :mod:`sluice.store.database.migrate` brings in)."""
    rigs = town.dir / "rigs"
    logs = rigs.is_dir() and any((d / "ephemeral.jsonl").exists() for d in rigs.iterdir() if d.is_dir())
    runs, state = town.dir / "runs" / "runs.jsonl", town.runtime / "scheduler-state.json"
    return logs or runs.exists() or state.exists()


def _refuse_unmigrated(town: Town) -> None:
    """A new database beside 0.1's files would strand their state: only the migration may make it
    (:func:`sluice.store.database.migrate.ensure`, which every way into a town takes first)."""
    if made_by_01(town):
        raise ConfigError(f"{town.root}: this town was made by sluice 0.1 and is migrated when opened"
                          " through `sluice` or `sluice.open_town`; open it that way first")
