#!/usr/bin/env python3
"""Regenerate the manual pages in man/ from the command line (run after changing a command).

Usage: .venv/bin/python scripts/gen_man.py
"""

from pathlib import Path

from sluice.surfaces.cli.manpage import write_pages

if __name__ == "__main__":
    for path in write_pages(Path(__file__).resolve().parents[1] / "man"):
        print(path)
