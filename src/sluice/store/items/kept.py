"""A town's config and rig stores kept open between calls, and re-checked before each.

A long-lived process (the MCP server) answers ``schedule next`` many times;
re-opening the town for each answer validates the config, opens every rig's
index and counts the ready rows again, most of the time for nothing.  A
:class:`KeptReads` keeps them, and before each call checks what they came
from, so an answer is never older than the files on disk:

* ``config.json`` is compared byte for byte with the text the kept town was
  opened from; any difference (a config set, a rig added or removed) opens
  the town and its stores afresh;
* each rig's items file is compared by (size, mtime, inode) with the file
  its index was checked against, exactly as a fresh open would compare it,
  and the index is re-opened (rebuilt if need be) when it differs;
* the sling contexts are read from the town database by each call.

Anything else a call needs (the policy file, the decision log, worktrees) is
read by the call itself, as it always is.
"""

from __future__ import annotations

import _thread
from pathlib import Path

from sluice.store.files import fsutil
from sluice.store.files.town import Town
from sluice.store.items.rigstore import Stores


class KeptReads:
    """One town's files and stores, for calls made one at a time (hold :attr:`lock`)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        # A server may run calls on different threads; the lock threading.Lock() gives, without
        # importing threading (a millisecond of every `schedule next`).
        self.lock = _thread.allocate_lock()
        self._config_text: bytes | None = None
        self._town: Town | None = None
        self._stores: Stores | None = None

    def fresh(self) -> tuple[Town, Stores]:
        """The town and its stores, with everything that changed on disk since the last call forgotten."""
        town = Town(self.root)
        try:
            text = fsutil.read_regular(town.config_path)
        except OSError:
            text = None  # the fresh town below reports it as every command does
        if self._town is None or self._stores is None or text is None or text != self._config_text:
            self.close()
            # The town reads (and validates) its config when first asked, from the file as it is
            # then: never older than ``text``, so a later change is still seen as one.
            self._town, self._stores = town, Stores(town)
            self._config_text = text
        else:
            self._stores.recheck()
        return self._town, self._stores

    def close(self) -> None:
        if self._stores is not None:
            self._stores.refresh()
        self._town = self._stores = None
        self._config_text = None
