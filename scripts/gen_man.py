#!/usr/bin/env python3
"""Regenerate the manual pages in man/ from the command line, or install them beside a checkout's venv.

Usage: .venv/bin/python scripts/gen_man.py              # after changing a command
       .venv/bin/python scripts/gen_man.py --install    # copy man/*.1 into <venv>/share/man/man1

An editable install (``pip install -e .``) installs no data files, so the
pages a wheel would bring are missing and ``git sluice --help`` (git runs
``man git-sluice``) finds nothing.  ``--install`` copies the checked-in pages
to ``share/man/man1`` under the running interpreter's prefix (``--prefix DIR``
for another), where ``man`` looks for any ``bin`` directory on ``PATH``.
"""

import argparse
import shutil
import sys
from pathlib import Path

MAN = Path(__file__).resolve().parents[1] / "man"

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--install", action="store_true", help="copy man/*.1 to PREFIX/share/man/man1")
    parser.add_argument("--prefix", default=sys.prefix, help="install prefix (default: this venv)")
    args = parser.parse_args()
    if args.install:
        target = Path(args.prefix) / "share" / "man" / "man1"
        target.mkdir(parents=True, exist_ok=True)
        for page in sorted(MAN.glob("*.1")):
            shutil.copyfile(page, target / page.name)
            print(target / page.name)
    else:
        from sluice.surfaces.cli.manpage import write_pages

        for path in write_pages(MAN):
            print(path)
