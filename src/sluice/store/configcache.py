"""A pydantic-free view of a town config that was validated before.

Hot read commands (``item ready`` and friends, answered by
:mod:`sluice.surfaces.fastcli`) must start in well under 0.1 s, and importing
pydantic alone costs about 0.05 s.  So every full validation
(:meth:`sluice.store.town.Town.load_config`) leaves ``runtime/config-cache.json``:
the validated config as plain JSON, keyed by the exact bytes of
``config.json`` and by the models module that validated them.  A hot command
whose config file still has those bytes reads the plain copy; any other case
(no cache, an edited file, a newer sluice) goes the validating way, so a bad
config is reported exactly as everywhere else.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sluice.store.town import Town

CACHE_NAME = "config-cache.json"
_MODELS = Path(__file__).resolve().parent.parent / "core" / "models.py"


def _models_key() -> str:
    try:
        stat = os.stat(_MODELS)
    except OSError:
        return "?"
    return f"{stat.st_size}:{stat.st_mtime_ns}"


def _key(text: bytes) -> str:
    return hashlib.sha256(text).hexdigest() + "/" + _models_key()


def cache_path(town: Town) -> Path:
    return town.runtime / CACHE_NAME


def remember(town: Town, text: bytes, dump: dict[str, Any]) -> None:
    """Keep ``dump`` (a validated config) for the config file whose bytes are ``text``."""
    path = cache_path(town)
    body = json.dumps({"key": _key(text), "config": dump}, ensure_ascii=False)
    try:
        if path.read_text(encoding="utf-8") == body:
            return
    except (OSError, UnicodeDecodeError):
        pass
    if not town.runtime.is_dir():
        return  # not a town laid out by `sluice init`: nothing to keep
    from sluice.store import fsutil

    try:
        fsutil.atomic_write_bytes(path, body.encode("utf-8"))
    except OSError:
        pass  # a cache that cannot be written only costs the next command its speed


class PlainConfig:
    """Attribute access over a validated config's JSON; anything but rigs asks the full model."""

    def __init__(self, data: dict[str, Any], full):
        self._full_loader = full
        self._full = None
        self.rigs = {name: SimpleNamespace(**rig) for name, rig in data.get("rigs", {}).items()}

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if self._full is None:
            self._full = self._full_loader()
        return getattr(self._full, name)


def plain_config(town: Town) -> PlainConfig | None:
    """The config without validation when this exact file was validated before, else None."""
    try:
        text = town.config_path.read_bytes()
        cached = json.loads(cache_path(town).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(cached, dict) or cached.get("key") != _key(text):
        return None
    data = cached.get("config")
    rigs = data.get("rigs") if isinstance(data, dict) else None
    if not isinstance(rigs, dict) or not all(isinstance(r, dict) for r in rigs.values()):
        return None
    return PlainConfig(data, town.load_config)
