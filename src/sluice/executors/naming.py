"""Names an executor gives a town's polecats outside sluice's own files.

A tmux session or a Ray job outlives the process that launched it, so its
name must say which town it belongs to and which sling context it serves, and
launching the same context twice must produce the same name (that is how a
repeated launch is recognised instead of starting a second polecat).

Names use only ``[A-Za-z0-9_-]``: tmux refuses ``.`` and ``:`` in session
names and Ray puts the submission id into log file names.  When a context id
has to be altered to fit, a short hash of the original is appended so two
different ids can never end up with the same name.
"""

from __future__ import annotations

import re
import secrets
from typing import TYPE_CHECKING

from sluice.core.digest import sha256

if TYPE_CHECKING:
    from sluice.store.files.town import Town

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_LONGEST_PART = 60


def town_key(town: Town) -> str:
    """A stable hex digest of the town's root path (the same town always gets the same key)."""
    return sha256(str(town.root).encode("utf-8")).hexdigest()


def polecat_name(namespace: str, prefix: str, context_id: str) -> str:
    """``<namespace>-<prefix>-<context suffix>``, e.g. ``sluice-3f2a1c-al-wisp-k2x9``.

    Context ids normally start with their rig's prefix, so the id itself
    supplies both parts.  Anything unusual (a character outside the safe set,
    an id that does not start with the prefix, an overlong id) is replaced or
    cut and the name gets ``-<hash6>`` of the exact id, keeping names distinct.
    """
    if context_id.startswith(prefix + "-"):
        base, altered = context_id, False
    else:
        base, altered = f"{prefix}-{context_id}", True
    safe = _UNSAFE.sub("_", base)
    altered = altered or safe != base or len(safe) > _LONGEST_PART
    if altered:
        digest = sha256((prefix + chr(0) + context_id).encode("utf-8")).hexdigest()[:6]
        safe = f"{safe[:_LONGEST_PART]}-{digest}"
    return f"{namespace}-{safe}"


def launch_name(namespace: str, prefix: str, context_id: str, item_id: str) -> str:
    """The name of one launch: fixed per context; fresh for a direct launch, which has no context.

    Direct mode (``sling`` with ``max_polecats <= 0``) launches without a
    context and guards against doubles itself, so its polecats need distinct
    names, not repeatable ones.
    """
    if context_id:
        return polecat_name(namespace, prefix, context_id)
    return polecat_name(namespace, prefix, f"{item_id}-{secrets.token_hex(3)}")
