"""Pydantic-free views of the town config and the policy, read from a copy validated before.

Agents and hooks run ``schedule next``, ``scheduler status`` and friends
thousands of times a day; each must start in well under 0.1 s, and importing
pydantic and building the config and policy models alone costs about
0.05 s.  So every full validation of ``config.json``
(:meth:`sluice.store.files.town.Town.load_config`) or of the policy
(:func:`sluice.scheduler.queue.ranking.load_town_policy`) keeps the validated
document as plain JSON in the town database (the ``derived`` rows
``config-cache`` and ``policy-cache``), keyed by the exact bytes of the file
and by the module that validated them.  A command whose file still has
those bytes reads the plain copy; any other case (no copy, an edited file, a
newer sluice) goes the validating way, so a bad file is reported exactly as
everywhere else.

The copy is only ever a shortcut.  A town without a database (not made yet,
or a 0.1 town before its migration) is never given one for it; a database
that cannot be opened, or refuses the write (read-only, full), or whose
write lock another process holds right now, keeps no copy, and the file is
validated as if there were none.

The views answer every field the models have, plus the models' few
helpers (``scheduler.deferred``/``seconds``, ``weights_for``); anything
else on the config (a pydantic method) loads and asks the full model.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from sluice.core.clock import parse_duration
from sluice.core.digest import sha256
from sluice.errors import SluiceError
from sluice.store.files import fsutil

if TYPE_CHECKING:
    from sluice.store.files.town import Town

CONFIG, POLICY = "config", "policy"
#: The ``derived`` row of the town database holding each kind's plain copy.
NAMES = {CONFIG: "config-cache", POLICY: "policy-cache"}
_HERE = Path(__file__).resolve().parent
_CORE = _HERE.parents[1] / "core"
#: The modules whose rules validated each kind of file: a new sluice must not trust an old copy.
_VALIDATED_BY = {CONFIG: (_CORE / "models.py", _CORE / "records.py", _CORE / "text.py"),
                 POLICY: (_HERE / "policy.py", _CORE / "text.py")}
ABSENT = None  # the bytes of a file that does not exist (a missing policy means the defaults)


def _key(kind: str, text: bytes | None) -> str:
    """What a copy is kept under: the file's digest, and the size and time of the module that validated it."""
    try:
        validator = ",".join(f"{stat.st_size}:{stat.st_mtime_ns}"
                             for stat in map(os.stat, _VALIDATED_BY[kind]))
    except OSError:
        validator = "?"
    return ("absent" if text is None else sha256(text).hexdigest()) + "/" + validator


def remember(town: Town, text: bytes | None, dump: dict[str, Any], kind: str = CONFIG) -> None:
    """Keep ``dump`` (a validated document) for the file whose bytes are ``text`` (None: no file)."""
    database = town.db_if_made
    if database is None:
        return
    body = json.dumps({"key": _key(kind, text), kind: dump}, ensure_ascii=False)
    database.keep_if_free(NAMES[kind], body)  # a copy is worth neither a wait nor an fsync


def _recall(town: Town, kind: str, source: Path) -> dict[str, Any] | None:
    """The validated document kept for ``source`` as it is now, or None."""
    database = town.db_if_made
    if database is None:
        return None
    try:
        text = fsutil.read_regular(source)
    except FileNotFoundError:
        text = ABSENT
    except OSError:
        return None
    try:
        body = database.kept(NAMES[kind])
        cached = json.loads(body) if body is not None else None
    except (SluiceError, ValueError):
        return None
    if not isinstance(cached, dict) or cached.get("key") != _key(kind, text):
        return None
    data = cached.get(kind)
    return data if isinstance(data, dict) else None


class SchedulerSection(SimpleNamespace):
    """``config.scheduler`` with the model's two helpers."""

    @property
    def deferred(self) -> bool:
        """Deferred mode ⇔ a positive cap; 0 and -1 both mean direct dispatch."""
        return self.max_polecats > 0

    def seconds(self, key: str) -> float:
        return parse_duration(getattr(self, key))


class PlainConfig:
    """The validated config as attributes; anything the plain copy lacks asks the full model."""

    def __init__(self, data: dict[str, Any], full):
        self._full_loader = full
        self._full = None
        self.rigs = {name: SimpleNamespace(**rig) for name, rig in data["rigs"].items()}
        if "scheduler" in data:
            self.scheduler = SchedulerSection(**data["scheduler"])
        if "executor" in data:
            executor = dict(data["executor"])
            executor["ray"] = SimpleNamespace(**executor.get("ray", {}))
            self.executor = SimpleNamespace(**executor)
        if "items" in data:
            self.items = SchedulerSection(**data["items"])  # the same ``seconds`` helper
        if "version" in data:
            self.version = data["version"]

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if self._full is None:
            self._full = self._full_loader()
        return getattr(self._full, name)


def plain_config(town: Town) -> PlainConfig | None:
    """The config without validation when this exact file was validated before, else None."""
    data = _recall(town, CONFIG, town.config_path)
    if data is None:
        return None
    rigs = data.get("rigs")
    if not isinstance(rigs, dict) or not all(isinstance(r, dict) for r in rigs.values()):
        return None
    sections = (data.get("scheduler", {}), data.get("executor", {}), data.get("items", {}))
    if not all(isinstance(section, dict) for section in sections):
        return None
    return PlainConfig(data, town.load_config)


class PlainPolicy(SimpleNamespace):
    """The validated policy as attributes, with the model's ``weights_for`` and ``model_dump``."""

    def weights_for(self, graph_id: str | None):
        from sluice.core import scoring

        return scoring.resolve_weights(self, graph_id)

    def model_dump(self, mode: str = "json") -> dict[str, Any]:
        return copy.deepcopy(self._document)


def plain_policy(town: Town) -> PlainPolicy | None:
    """The policy without validation when this exact file (or its absence) was validated before."""
    data = _recall(town, POLICY, town.policy_path)
    if data is None or not isinstance(data.get("weights"), dict):
        return None
    overrides = data.get("graph_overrides")
    if not isinstance(overrides, dict) or not all(isinstance(o, dict) for o in overrides.values()):
        return None
    fields = {**data, "weights": SimpleNamespace(**data["weights"]),
              "graph_overrides": {g: SimpleNamespace(**o) for g, o in overrides.items()}}
    policy = PlainPolicy(**fields)
    policy._document = data
    return policy
