"""The error texts the docs quote are the program's own: each is produced here, then looked up in the page.

A quoted message is compared with what the command really says, with the
page's line breaks folded into spaces, so rewording an error without its page
(or the page without the code) fails here.  Errors shown as a runnable
example's output (the tutorial's `rig remove`) are checked by running the
example (tests/test_doc_examples.py).  Every missing file or rig is a
domain error, exit 1, whichever command names it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import Cli
from helpers.scheduler import item, write_items

DOCS = Path(__file__).resolve().parents[1] / "docs"


def page(name: str) -> str:
    return re.sub(r"\s+", " ", (DOCS / name).read_text())


def error(cli, *args: str, code: int = 1) -> str:
    done = cli.run(*args, check=False)
    assert done.returncode == code, (args, done.returncode, done.stderr)
    line = next(ln for ln in done.stderr.splitlines() if ln.startswith("error: "))
    return line.removeprefix("error: ")


@pytest.fixture
def doc_cli(cli, rigs, capacity) -> Cli:
    """The CLI over rigs alpha (an open, a claimed and a closed item) and beta, two polecats at once."""
    write_items(cli.town, "alpha", [item("al-1", "Fix the parser"),
                                    item("al-2", status="in_progress", assignee="bob"),
                                    item("al-3", status="closed")])
    capacity(2)
    return cli


def test_the_sling_guards_scheduler_md_quotes_are_the_real_ones(doc_cli):
    text = page("scheduler.md")
    quoted = [error(doc_cli, "sling", "al-1", "beta"),
              error(doc_cli, "sling", "al-2").replace("al-2", "al-1"),
              error(doc_cli, "sling", "al-3").replace("al-3", "al-1"),
              error(doc_cli, "sling", "al-1", "alpah", code=2),
              error(doc_cli, "scheduler", "clear", "--item", "al-nope")]
    for message in quoted:
        assert message in text, f"scheduler.md does not quote {message!r}"


@pytest.mark.parametrize("args", [
    ("item", "import", "alpha", "/nonexistent/export.jsonl"),
    ("rig", "add", "x", "/nonexistent"),
    ("scheduler", "throttle", "--rig", "nosuch", "--until", "10m"),
    ("top", "--once", "--rig", "nosuch"),
    ("compact", "--rig", "nosuch"),
    ("item", "ready", "nosuch"),
])
def test_a_missing_file_or_rig_is_exit_1_everywhere(doc_cli, args):
    message = error(doc_cli, *args, code=1)
    assert "nonexistent" in message or "unknown rig 'nosuch' (known: alpha, beta)" in message, message
