"""A rig's life in a town: adding it (choosing where its items come from), listing it, removing it.

Adding registers a git repository under a name and a prefix; the items come
from sluice's own store, a beads export, or a command printing one
(:mod:`sluice.store.items.sources`).  Nothing is registered when the repository,
the export or the command fails.

``rig remove`` unregisters a rig: its name and prefix stop routing.  What it
must never do is lose data or reach into the repository:

* **Queued work refuses the removal.**  An open sling context in the rig's
  store, or an open context in any other rig whose work item routes to this
  rig, is work someone asked for.  Without ``--force`` the command says which
  and changes nothing; with ``--force`` each one is closed with reason
  ``rig-removed`` (a ``ContextClosed`` event each), never dropped silently.
* **The rig's own store is moved aside, not deleted**: ``.sluice/rigs/NAME``
  becomes ``.sluice/removed/NAME-<UTC stamp>/`` and the result says where, so
  its items can be imported again (``sluice item import``).  Only the derived
  index under ``runtime/index`` is deleted (it is rebuilt from the JSONL).
* **The repository is not touched**, nor a beads export it was read from:
  git hooks installed there stay until ``sluice hooks uninstall``.

The dispatch lock is held throughout, so no cycle launches from the rig
while it goes.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.core.items import is_context
from sluice.errors import InvalidOperation, MissingFile, NotARepository, SourceFailed, UsageError
from sluice.logs import log
from sluice.store.database import contexts as ctxs
from sluice.store.database import events
from sluice.store.files import fsutil
from sluice.store.files.town import ItemCommand, Rig, Town, validate_prefix, validate_rig_name
from sluice.store.git import gitview
from sluice.store.items import beads_repo, registry, sources
from sluice.store.items.rigstore import Stores, read_jsonl
from sluice.store.items.sources import parse_command

if TYPE_CHECKING:
    from sluice.core.models import TownConfig

RIG_REMOVED = "rig-removed"  # close reason of contexts closed by a forced removal
REMOVED_DIR = "removed"  # under .sluice/: stores of removed rigs, kept


def add_rig(town: Town, name: str, repo: Path, prefix: str | None = None, items: Path | None = None,
            items_command: str | list[str] | None = None, watch: tuple[Path, ...] = (),
            own_store: bool = False, remote: str | None = None) -> Rig:
    """Register a git repository and choose where its items come from.

    ``remote`` is the URL workspaces on other machines clone the rig from
    (default: the repository's ``origin``, when it has one); it is stored as
    given and never contacted here.

    ``items`` names a beads export to read (read-only); ``items_command`` a
    command printing one (:mod:`sluice.store.items.sources`), run once now so a
    failing command registers nothing; ``own_store`` gives the rig sluice's
    own store.  Without any of them a ``.beads/issues.jsonl`` in the
    repository is read, a rig without beads gets its own store, and a beads
    store with no export is refused (it would look empty), naming the ways on.
    """
    repo = Path(repo).expanduser().resolve()
    opened = gitview.open_repo(repo)  # not a repository ⇒ NotARepository, nothing registered
    if opened.workdir and Path(opened.workdir).resolve() != repo:
        # The .git directory of a work tree: polecats would run inside .git.
        raise NotARepository(f"{repo}: this is the git directory of {opened.workdir}; register the work tree")
    if remote is not None and (not remote.strip() or remote.startswith("-")):
        raise UsageError(f"invalid remote {remote!r}: a URL or path git can clone, not starting with '-'",
                         parameters=("remote",))
    remote = remote if remote is not None else gitview.origin_url(repo)
    if (items is not None) + (items_command is not None) + bool(own_store) > 1:
        raise UsageError("give at most one of items, items_command and own_store",
                         parameters=("items", "items_command", "own_store"))
    if watch and items_command is None:
        raise UsageError("watch goes with items_command", parameters=("watch", "items_command"))
    if items_command is not None:
        return _add_command_rig(town, name, repo, prefix or name, parse_command(items_command), watch, remote)
    if items is None and not own_store:
        if beads_repo.export_path(repo).is_file():
            items = beads_repo.export_path(repo)
        elif parts := beads_repo.store_parts(repo):
            raise InvalidOperation(beads_repo.refusal(name, repo, parts))
    if items is not None:
        given = Path(items).expanduser()
        try:  # a FIFO, a device or a link loop is named, never waited on or read
            found = fsutil.check_regular(given)
        except fsutil.NotRegularFile as err:
            raise MissingFile(f"items {err}", parameters=("items",)) from None
        except OSError:
            found = None
        if found is None:
            raise MissingFile(f"items {given.absolute()}: no such file", parameters=("items",))
        items = given.resolve()
        # A corrupt export is refused now, naming file and line; so is a prefix none of its ids has.
        check_prefix(prefix or name, (record for _n, record, _raw in read_jsonl(items)), items)
    return register_rig(town, name, repo, prefix or name, items, remote=remote)


def check_prefix(prefix: str, records: Iterable[dict], source: Path | str) -> None:
    """Refuse ``prefix`` when ``source`` has work items and not one of their ids carries it.

    Ids route to a rig by its prefix, so such a rig could never be slung to
    without ``force``; the refusal names the prefix its ids do carry.
    """
    counts: Counter[str] = Counter()
    fits = False
    for record in records:  # every one read: a corrupt line further on is refused too
        if fits or record.get("ephemeral") or is_context(record):
            continue
        if record["id"].startswith(prefix + "-"):
            fits = True
        else:  # beads' ids are PREFIX-HASH, and a prefix may hold a hyphen itself
            counts[record["id"].rsplit("-", 1)[0]] += 1
    if counts and not fits:
        common, found = counts.most_common(1)[0]
        raise UsageError(f"{source}: no item id starts {prefix + '-'!r} and {found:,} of its"
                         f" {counts.total():,} start {common + '-'!r}: give prefix {common!r} (an id"
                         " goes to the rig its prefix names)", parameters=("prefix",))


def _add_command_rig(town: Town, name: str, repo: Path, prefix: str, argv: list[str],
                     watch: tuple[Path, ...], remote: str | None) -> Rig:
    """Run the command once (a failure registers nothing), then register the rig reading its snapshot."""
    validate_rig_name(name)
    validate_prefix(prefix)
    if name in town.reload_config().rigs:
        raise InvalidOperation(f"rig {name!r} is already registered")
    spec = {"command": argv, "watch": [str(Path(w).expanduser().resolve()) for w in watch]}
    every = town.config.items
    watched = tuple(Path(w) for w in spec["watch"]) or (repo / ".beads",)
    command = ItemCommand(tuple(argv), watched, every.seconds("command_timeout"), every.seconds("refresh"),
                          every.seconds("read_wait"))
    trial = Rig(name=name, repo=repo, prefix=prefix, items=town.snapshot_path(name), command=command)
    try:
        sources.refresh(town, trial)
        check_prefix(prefix, (record for _n, record, _raw in read_jsonl(town.snapshot_path(name))),
                     f"the output of {sources.shown(argv)}")
    except SourceFailed as err:
        _forget_snapshot(town, name)
        said = str(err).replace("; the last snapshot keeps serving", "; nothing was registered")
        raise SourceFailed(said) from None
    except UsageError:
        _forget_snapshot(town, name)
        raise
    return register_rig(town, name, repo, prefix, None, command=spec, remote=remote)


def _forget_snapshot(town: Town, name: str) -> None:
    for path in (town.snapshot_path(name), sources.state_path(town, name)):
        path.unlink(missing_ok=True)


def rig_row(town: Town, rig: Rig) -> dict:
    """One rig as `rig add` / `rig list` print it: ``items`` is the file its items are read from.

    ``source`` says where they come from (``own``, ``export`` or ``command``);
    ``source_stale`` is null, or why they may be behind the beads store.
    """
    own = town.rig_dir(rig.name) / "issues.jsonl"
    return {
        "name": rig.name,
        "prefix": rig.prefix,
        "repo": str(rig.repo),
        "items": str(rig.items) if rig.items else str(own),
        "read_only": rig.read_only,
        "source": "command" if rig.command else "export" if rig.items else "own",
        "items_command": list(rig.command.argv) if rig.command else None,
        "source_stale": sources.source_stale(town, rig),
        "remote": rig.remote,
    }


def rig_rows(town: Town) -> list[dict]:
    return [rig_row(town, rig) for rig in town.rigs()]


def register_rig(town: Town, name: str, repo: Path, prefix: str, items: Path | None,
                 command: dict | None = None, remote: str | None = None) -> Rig:
    """Add the rig to the config; ``command`` (a ``rigs.NAME.items`` object) makes it a command source."""
    from sluice.core.models import RigConfig  # pydantic: only a write of the config pays for it

    validate_rig_name(name)
    validate_prefix(prefix)

    def change(config: TownConfig) -> TownConfig:
        if name in config.rigs:
            raise InvalidOperation(f"rig {name!r} is already registered")
        for other, rc in config.rigs.items():
            if rc.prefix == prefix:
                raise InvalidOperation(f"prefix {prefix!r} already routes to rig {other!r}")
        rigs = dict(config.rigs)
        source = command if command is not None else str(items) if items else None
        rigs[name] = RigConfig(repo=str(repo), prefix=prefix, items=source, remote=remote)
        return config.model_copy(update={"rigs": rigs})

    town.update_config(change)
    town.rig_dir(name).mkdir(parents=True, exist_ok=True)
    rig = town.rig(name)
    for other in town.rigs():
        if other.name != name and Path(other.repo).resolve() == Path(rig.repo).resolve():
            log.warning(f"repository {rig.repo} is also rig {other.name!r}: polecats of both work on it")
    others = other_towns(town, rig)
    if others:
        log.warning(registry.sharing_warning(str(rig.repo), others))
    return rig


def other_towns(town: Town, rig: Rig) -> list[str]:
    """The other towns of this user that have ``rig``'s repository too (noting this town's on the way)."""
    shared = registry.note_town(town.root, [r.repo for r in town.rigs()])
    return shared.get(str(Path(rig.repo).resolve()), [])


def remove_rig(town: Town, name: str, force: bool = False) -> dict:
    """Unregister rig ``name``: its store moves to ``.sluice/removed/``; queued work refuses unless forced."""
    town.reload_config()
    rig = town.rig(name)  # unknown ⇒ UnknownRig, nothing changed
    with fsutil.file_lock(town.lock_path("dispatch")):
        stores = Stores(town)
        queued = [
            c for c in ctxs.open_contexts(town)
            if c.rig == name or (c.work_id and (owner := town.rig_for_id(c.work_id)) and owner.name == name)
        ]
        if queued and not force:
            shown = ", ".join(f"{c.work_id or c.id} ({c.id} in {c.rig})" for c in queued[:5])
            more = f" and {len(queued) - 5} more" if len(queued) > 5 else ""
            raise InvalidOperation(
                f"rig {name!r} has {len(queued)} queued context(s): {shown}{more}; nothing was changed"
                f" (clear them first, or override with force, which closes them as {RIG_REMOVED!r})"
            )
        done = set(ctxs.close_many(town, None, [(c.id, RIG_REMOVED, None) for c in queued]))
        closed = [{"context_id": c.id, "item_id": c.work_id, "rig": c.rig} for c in queued if c.id in done]
        stores.rig(name).refresh()  # let go of the index before its file is deleted

        def unregister(config):
            rigs = dict(config.rigs)
            rigs.pop(name, None)
            return config.model_copy(update={"rigs": rigs})

        town.update_config(unregister)
        kept = _move_store_aside(town, name)
        _drop_index(town, name)
        result = {"name": rig.name, "prefix": rig.prefix, "repo": str(rig.repo),
                  "items": str(rig.items) if rig.items else None, "store": str(kept) if kept else None,
                  "closed": closed}
        payload = {k: result[k] for k in ("name", "prefix", "repo", "store")} | {"closed": len(closed)}
        events.emit_event(town, events.RIG_REMOVED, payload)
    return result


def _move_store_aside(town: Town, name: str) -> Path | None:
    """``rigs/NAME`` → ``removed/NAME-<stamp>`` (a rename on one file system: all or nothing)."""
    own = town.rig_dir(name)
    if not own.exists():
        return None
    parent = town.dir / REMOVED_DIR
    parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = parent / f"{name}-{stamp}"
    serial = 1
    while target.exists():  # removed twice in one second: never overwrite an earlier copy
        serial += 1
        target = parent / f"{name}-{stamp}-{serial}"
    os.rename(own, target)
    return target


def _drop_index(town: Town, name: str) -> None:
    """Delete what is derived from the rig's items: its index, and a command rig's snapshot and state.

    A snapshot is only a copy of what the command printed; the items stay in beads.
    """
    base = town.runtime / "index" / f"{name}.sqlite"
    snapshot = town.snapshot_path(name)
    for path in (base, base.with_name(base.name + "-wal"), base.with_name(base.name + "-shm"), snapshot,
                 sources.state_path(town, name)):
        path.unlink(missing_ok=True)
