"""Text views show item text safely: any JSON type, and control characters escaped.

Titles and ids come from exports and agents.  A ``null`` title must not
crash a listing or print ``None``; ``\\x1b[31m``, NUL, U+202E and newlines
must reach the terminal escaped (``\\x1b``, ``\\x00``, ``\\u202e``, ``\\n``) in
every text view, so no row is split and no terminal is driven.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.scheduler import configure, item, sleeper, write_items

NASTY = "red\x1b[31m nul\x00 rtl\u202e line\nbreak"
ODD_ID = "al-\x1b[2Jodd"
RAW = ("\x1b", "\x00", "\u202e")


@pytest.fixture
def nasty_dir(town_dir, rig, capacity) -> Path:
    """Rig alpha with titles a terminal or a shell would act on, a missing one, a number, an odd id."""
    untitled, numbered = item("al-2"), item("al-3")
    untitled["title"], numbered["title"] = None, 7
    write_items(town_dir, "alpha", [
        item("al-1", title=NASTY, priority=0),
        untitled,
        numbered,
        item(ODD_ID, title="odd id"),
        item("al-4", title=NASTY, deps=[("blocks", "al-1")]),
    ])
    capacity(2)
    configure(town_dir, "executor.command", sleeper(30))
    return town_dir


def assert_safe(done, *must_show: str) -> None:
    assert done.returncode == 0, done.stderr
    assert "internal error" not in done.stderr
    for raw in RAW:
        assert raw not in done.stdout, (done.args, done.stdout)
    for text in must_show:
        assert text in done.stdout, (done.args, done.stdout)


ESCAPED = r"red\x1b[31m nul\x00 rtl\u202e line\nbreak"


def test_item_views_escape_control_characters_and_show_any_json_type(cli, nasty_dir):
    for argv in (("item", "list"), ("item", "ready")):
        done = cli.run(*argv, check=False)
        assert_safe(done, ESCAPED, r"al-\x1b[2Jodd")
        assert "None" not in done.stdout
        assert len(done.stdout.splitlines()) == (5 if argv[1] == "list" else 4)  # one row per item
    assert_safe(cli.run("item", "blocked", check=False), ESCAPED)
    assert_safe(cli.run("item", "show", "al-1", check=False), ESCAPED)
    assert_safe(cli.run("item", "show", ODD_ID, check=False), r"al-\x1b[2Jodd")


def test_scheduler_views_with_null_titles_and_control_characters(cli, nasty_dir):
    cli.run("scheduler", "pause")
    cli.run("sling", "al-1", "al-2", "al-3", ODD_ID, "al-4", "alpha")
    for argv in (("scheduler", "list"), ("scheduler", "status")):
        done = cli.run(*argv, check=False)
        assert_safe(done, ESCAPED, r"al-\x1b[2Jodd")
        assert "None" not in done.stdout
    done = cli.run("patrol", "alpha", check=False)
    assert_safe(done, ESCAPED, r"al-\x1b[2Jodd", "al-2: \n")
    assert "None" not in done.stdout


def test_schedule_and_polecat_views_escape_item_text(cli, nasty_dir):
    done = cli.run("schedule", "next", "--limit", "5", check=False)
    assert_safe(done, ESCAPED, r"al-\x1b[2Jodd")
    assert len(done.stdout.splitlines()) == 1 + 4  # the header and one line per decision, no forged row
    assert_safe(cli.run("schedule", "status", check=False), r"al-\x1b[2Jodd")
    cli.run("sling", ODD_ID, "al-1", "alpha")
    cli.run("scheduler", "run", "--batch", "2")
    try:
        assert_safe(cli.run("polecat", "list", check=False), r"al-\x1b[2Jodd")
    finally:
        cli.run("polecat", "stop", ODD_ID, check=False)
        cli.run("polecat", "stop", "al-1", check=False)


def test_explain_broken_reset_and_sling_errors_escape_ids(cli, nasty_dir):
    """The last views that printed an id raw: explain's header, broken, reset, sling's refusal."""
    assert_safe(cli.run("scheduler", "explain", ODD_ID, check=False), r"al-\x1b[2Jodd")
    configure(nasty_dir, "executor.command", '["/nonexistent/agent-\\u001b[2J", "{item_id}"]')
    configure(nasty_dir, "scheduler.max_dispatch_failures", "1")
    cli.run("sling", ODD_ID, "alpha")
    cli.run("scheduler", "run", check=False)
    done = cli.run("scheduler", "broken", check=False)
    assert_safe(done, r"al-\x1b[2Jodd")
    assert done.stdout.count("\n") == 2  # one row and its last error
    assert_safe(cli.run("scheduler", "reset", ODD_ID, check=False), r"al-\x1b[2Jodd")
    done = cli.run("sling", "al-\x1b[2Jnope\nerror: fake", "alpha", check=False)
    assert done.returncode == 1 and r"al-\x1b[2Jnope\nerror: fake" in done.stderr
    assert "\x1b" not in done.stderr and done.stderr.count("error:") == 2  # the fake one is escaped inline


def test_the_daemon_log_escapes_what_it_says_of_a_polecat(cli, nasty_dir):
    configure(nasty_dir, "scheduler.polecat_timeout", "1ms")  # every running polecat is overdue at once
    cli.run("sling", ODD_ID, "alpha")
    cli.run("scheduler", "run")
    done = cli.run("daemon", "--once", check=False)
    log = (nasty_dir / ".sluice" / "runtime" / "daemon.log").read_text()
    assert "over scheduler.polecat_timeout" in log and r"al-\x1b[2Jodd" in log, log
    for raw in RAW:
        assert raw not in log and raw not in done.stderr
    assert all(line[:4].isdigit() for line in log.splitlines())  # each line a stamped line of its own


def test_every_text_view_is_escaped_on_its_way_out(capsys):
    """A view that forgets to escape a field still cannot drive the terminal: emit escapes all of it."""
    from sluice.surfaces.output import emit

    emit({"title": NASTY}, False, lambda data: f"row\t{data['title']}")
    out = capsys.readouterr().out
    assert out == "row\t" + r"red\x1b[31m nul\x00 rtl\u202e line" + "\nbreak\n"


# Where a command-line module may write to a stream itself, and why; anything else goes through
# output.emit / output.write_text (stdout) or common.say (stderr), which escape what they print.
RAW_WRITERS = {
    ("__init__.py", "sys.stdout.write"): "the version line",
    ("__init__.py", "sys.stderr.write"): "the error edge, each message escaped where it is written",
    ("common.py", "sys.stderr.write"): "`say` itself, which escapes",
    ("polecat_cmd.py", "sys.stdout.write"): "`polecat logs`: the polecat's own output, as it wrote it",
    ("runs_cmd.py", "sys.stdout.write"): "`feed --follow --json`: JSON lines",
}


def test_no_command_prints_around_the_escaping_helpers():
    """A new view cannot forget to escape: a test names every place that writes to a stream."""
    import re
    from pathlib import Path

    import sluice.surfaces.cli as cli_package

    found = set()
    for module in sorted(Path(cli_package.__file__).parent.glob("*.py")):
        text = module.read_text(encoding="utf-8")
        for writer in re.findall(r"\b(sys\.std(?:out|err)\.write|typer\.echo|print)\(", text):
            found.add((module.name, writer))
    assert found <= set(RAW_WRITERS), sorted(found - set(RAW_WRITERS))
