"""``python -m sluice.scheduler.unattended.tick TOWN``: one dispatch cycle, as the daemon's tick runs it.

The daemon runs each cycle in a child process (see :mod:`sluice.scheduler.unattended.daemon`
for why); this is that child.  It calls :func:`sluice.scheduler.launch.dispatch.run_cycle`,
the very function behind ``sluice.open_town(path).run_cycle()`` and ``sluice
scheduler run``, prints the report as one JSON document on stdout, and on
failure prints ``error: MESSAGE`` as its last line on stderr and exits 1.
It loads neither the command line nor its libraries, so a tick starts fast.
"""

from __future__ import annotations

import json
import sys

from sluice.errors import SluiceError, os_error_text
from sluice.scheduler.launch.dispatch import run_cycle
from sluice.store.files.town import find_town


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("error: usage: python -m sluice.scheduler.unattended.tick TOWN\n")
        return 2
    try:
        report = run_cycle(find_town(argv[0]), daemon=True)
    except SluiceError as err:
        sys.stderr.write(f"error: {err}\n")
        return 1
    except OSError as err:
        sys.stderr.write(f"error: {os_error_text(err)}\n")
        return 1
    except Exception as err:  # a bug: one line for the daemon's log, never a crash of the daemon
        sys.stderr.write(f"error: internal error: {type(err).__name__}: {err}\n")
        return 1
    sys.stdout.write(json.dumps(report.to_json(), ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
