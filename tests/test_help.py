"""`--help` is written for people: placeholders saying what goes there, examples, config keys, completion."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import run_in_process
from sluice.surfaces.cli import command
from sluice.surfaces.cli.helptext import EXAMPLES
from sluice.surfaces.cli.manpage import _walk

ROOT = command()
LEAVES = [(" ".join(path[1:]), cmd) for path, cmd in _walk(ROOT, ["sluice"])]
SLUICE = [sys.executable, "-m", "sluice"]


def help_of(*words: str) -> str:
    """``sluice WORDS --help`` at 100 columns, run in this process the way ``python -m sluice`` runs it
    (the same text, byte for byte, without an interpreter and typer started for each page)."""
    done = run_in_process([*words, "--help"], {**os.environ, "COLUMNS": "100"}, Path.cwd())
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(("name", "cmd"), LEAVES, ids=[name for name, _ in LEAVES])
def test_every_command_has_examples_that_parse(name: str, cmd):
    assert EXAMPLES.get(name), f"sluice {name} has no examples: add some to EXAMPLES in cli/helptext.py"
    for line in EXAMPLES[name]:
        words = shlex.split(line)
        if words[0] == "--town":  # a root option before the command
            words = words[2:]
        assert " ".join(words[:len(name.split())]) == name, line
        cmd.make_context(f"sluice {name}", words[len(name.split()):])  # a bad flag or value raises


def test_examples_name_only_commands_that_exist():
    assert set(EXAMPLES) <= {name for name, _ in LEAVES}


@pytest.mark.parametrize("words", [(), ("sling",), ("item", "create"), ("scheduler", "throttle"),
                                   ("schedule", "policy", "set"), ("config", "set"), ("top",)])
def test_help_shows_placeholders_not_python_types(words):
    text = help_of(*words)
    for typed in ("<bool>", "<str>", "<int>", "<float>", "<list[", "{targets}", "{key}"):
        assert typed not in text, f"sluice {' '.join(words)} --help shows {typed}"
    if words:
        assert "Examples:" in text and f"sluice {' '.join(words)}" in text.split("Examples:")[1]


def test_sling_help_says_items_and_a_rig():
    text = help_of("sling")
    assert "Usage: sluice sling [OPTIONS] [ITEM... [RIG]]" in text
    assert re.search(r"--var\s+KEY=VALUE", text)


def test_config_set_help_lists_every_key_with_its_default():
    from sluice.core.models import CONFIG_KEYS

    text = re.sub(r"\s+", " ", help_of("config", "set"))
    for key in CONFIG_KEYS:
        assert f"{key}:" in text, key
    assert "scheduler.max_polecats: an integer >= -1" in text and "default -1" in text
    assert "scheduler.retry_base: a duration; default 30s" in text
    assert 'executor.kind: one of local, tmux, ray, demo, memory; default local' in text


def test_show_completion_prints_a_bash_script_that_completes_commands(tmp_path: Path):
    # Run from bash, as a person would: typer finds the shell it was started from. A lone command
    # under ``bash -c`` replaces bash (its parent would be this test's), so bash is kept waiting for it.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    script = subprocess.run(["bash", "-c", "sluice --show-completion; exit $?"], capture_output=True,
                            text=True, env=env, timeout=60)
    assert script.returncode == 0, script.stderr
    assert "_sluice_completion" in script.stdout and "complete " in script.stdout
    (tmp_path / "completion.bash").write_text(script.stdout)
    probe = ('source completion.bash; COMP_WORDS=(sluice sched); COMP_CWORD=1; _sluice_completion sluice; '
             'printf "%s\\n" "${COMPREPLY[@]}"')
    done = subprocess.run(["bash", "-c", probe], cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=60)
    assert sorted(done.stdout.split()) == ["schedule", "scheduler"], done


@pytest.mark.parametrize(("shell", "words"), [("zsh", "sluice scheduler r"), ("fish", "sluice scheduler r")])
def test_zsh_and_fish_completion_answer_through_the_same_protocol(shell, words):
    env = {**os.environ, "_SLUICE_COMPLETE": f"complete_{shell}", "_TYPER_COMPLETE_ARGS": words,
           "_TYPER_COMPLETE_FISH_ACTION": "get-args"}  # what the fish script asks; zsh ignores it
    done = subprocess.run(SLUICE, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    for name in ("run", "resume", "reset"):
        assert name in done.stdout, done.stdout
