"""The defaults of options that several surfaces offer, defined once.

The typer command line, the fast path (which must not import pydantic or
typer), the Python API and the MCP tools all default these the same way; a
default changed here changes it everywhere, so their answers cannot drift.
"""

from __future__ import annotations

#: ``item ready --limit``: at most this many rows (beads' own default, R11); 0 means all.
READY_LIMIT = 100
#: ``schedule next --limit``: how many decisions one call makes.
NEXT_LIMIT = 1
#: ``daemon --interval``: seconds between ticks; the forecast assumes a daemon at it when none runs.
DAEMON_INTERVAL = 180.0
