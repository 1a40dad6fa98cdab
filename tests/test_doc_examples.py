"""The documented examples do what the docs say: every block marked runnable is run and its output compared.

A fenced block opts in through its info string, so an example someone adds
is checked only once it is marked:

* ```` ```bash run ```` (or ``sh``): run in the page's one shell, in page
  order, in a scratch directory; ``exit=N`` means it must fail with N (and
  only with N), any other failure fails the test;
* ```` ```console run ````: lines starting with ``$ `` are run, the lines
  under each are what it must print;
* ```` ```python run ````: run by the same Python in that shell; a
  ```` ```python setup ```` block (usually hidden in an HTML comment) is run
  first in each of the page's later Python blocks;
* ```` ```text output ````: what the run block just before it prints
  (stdout and stderr together);
* ```` ```bash shown ````: shown only, never run (a daemon, a server, a cron
  line, paths of a real host).

Blocks inside ``<!-- … -->`` are run too but not shown (a page's setup).
Output is compared line by line after normalising what differs from run to
run: ids (``doc-r6ck``, ``api-wisp-6k72``, ``pc-u3y2``), times, and runs of
spaces.  In the documented text ``…`` stands for any text within a line,
and a line holding only ``…`` for any number of lines.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("tutorial.md", "cli.md", "scheduler.md", "operations.md", "api.md")
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)


@dataclass
class Block:
    page: str
    line: int
    lang: str
    flags: set[str]
    body: str
    exit: int | None = None
    expected: str | None = None  # the documented output, for console lines or a following output block

    @property
    def where(self) -> str:
        return f"docs/{self.page}:{self.line}"


def parse(page: str) -> list[Block]:
    """The page's run, setup and output blocks, in order; an output block is attached to its run block."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    out: list[Block] = []
    for match in FENCE.finditer(text):
        words = match.group(1).split()
        lang, flags = (words[0] if words else ""), set(words[1:])
        line = text.count("\n", 0, match.start()) + 1
        code = next((int(f[5:]) for f in flags if f.startswith("exit=")), None)
        block = Block(page, line, lang, flags, match.group(2), code)
        if "output" in flags:
            runs = [b for b in out if "run" in b.flags]
            assert runs, f"{block.where}: an output block with no run block before it"
            runs[-1].expected = block.body
        elif "run" in flags or "setup" in flags:
            out.append(block)
    return out


def console_steps(block: Block) -> list[tuple[str, str]]:
    """(command, documented output) of each ``$ `` line of a console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.body.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
    return [(cmd, "\n".join(lines) + "\n" if lines else "") for cmd, lines in steps]


_IDS = [
    # A forecast's HH:MM (UTC), with its date when it is not today: it moves with the clock.
    (re.compile(r"(?:\b\d{4}-\d\d-\d\d )?(?<![:\d])\d\d:\d\d(?![:\d])"), "<hhmm>"),
    (re.compile(r"\b\d{4}-\d\d-\d\d(?:T[\d:.]+Z?)?"), "<time>"),
    (re.compile(r"\b\d\d:\d\d:\d\d(?:\.\d+)?Z?"), "<clock>"),
    (re.compile(r"\b[a-z][a-z0-9]*-wisp-[a-z0-9]{3,}\b"), "<context>"),
    (re.compile(r"\bpc-[a-z0-9]{3,}\b"), "<polecat>"),
    (re.compile(r"\b[a-z][a-z0-9]*-[a-z0-9]{4}\b"), "<id>"),  # hash ids (doc-r6ck), on both sides alike
]


def normalise(text: str) -> str:
    for pattern, word in _IDS:
        text = pattern.sub(word, text)
    return "\n".join(re.sub(r"[ \t]+", " ", line).strip() for line in text.splitlines()).strip("\n")


def pattern_of(documented: str) -> re.Pattern:
    """The documented output as a regex: ``…`` any text in a line, a lone ``…`` line any lines."""
    parts = []
    for line in normalise(documented).splitlines():
        if line == "…":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(piece) for piece in line.split("…")) + r"\n")
    return re.compile("".join(parts), re.S)


def matches(documented: str, actual: str) -> bool:
    return pattern_of(documented).fullmatch(normalise(actual) + "\n") is not None


def script(blocks: list[Block], results: Path, outputs: Path) -> str:
    """One bash script for a page: each step's output to its own file, each failure recorded with it."""
    lines = [
        "set -E -o pipefail",
        f"exec 3>>'{results}'",
        """trap 'printf "%s\\t%s\\t%s\\n" "$__step" "$?" "$BASH_COMMAND" >&3' ERR""",
    ]
    setup = ""
    for number, block in enumerate(blocks):
        if block.lang == "python":
            if "setup" in block.flags:
                setup += block.body
                continue
            body = f"python3 - <<'__SLUICE_DOC_PY__'\n{setup}{block.body}__SLUICE_DOC_PY__\n"
        elif block.lang == "console":
            body = "".join(f"__step={number}.{n}\n{{ {cmd}\n}} > '{outputs}/{number}.{n}' 2>&1\n"
                           for n, (cmd, _) in enumerate(console_steps(block)))
            lines += [f"__step={number}", body]
            continue
        else:
            body = block.body
        lines += [f"__step={number}", f"{{ {body}\n}} > '{outputs}/{number}' 2>&1"]
    lines.append("__step=end")
    return "\n".join(lines) + "\n"


def run_page(page: str, tmp_path: Path) -> tuple[list[Block], dict[str, list[int]], Path, str]:
    blocks = parse(page)
    results, outputs = tmp_path / "failures.tsv", tmp_path / "outputs"
    results.touch()
    outputs.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLUICE_")}
    env.update({
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "HOME": str(tmp_path),  # no personal git or sluice settings
        "XDG_STATE_HOME": str(tmp_path / "state"),  # nor the user's town registry
        "GIT_CONFIG_NOSYSTEM": "1",
        "COLUMNS": "120",
        "PYTHONPATH": str(ROOT / "src"),
    })
    done = subprocess.run(["bash", "-c", script(blocks, results, outputs)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)
    failures: dict[str, list[int]] = {}
    for line in results.read_text().splitlines():
        step, code, _command = line.split("\t", 2)
        failures.setdefault(step, []).append(int(code))
    return blocks, failures, outputs, done.stderr


def check_page(page: str, tmp_path: Path) -> None:
    blocks, failures, outputs, stderr = run_page(page, tmp_path)
    problems = []
    for number, block in enumerate(blocks):
        if "setup" in block.flags and block.lang == "python":
            continue
        if block.lang == "console":
            steps = [(f"{number}.{n}", cmd, want) for n, (cmd, want) in enumerate(console_steps(block))]
        else:
            steps = [(str(number), block.body.strip(), block.expected)]
        for step, what, want in steps:
            got = (outputs / step).read_text() if (outputs / step).exists() else ""
            codes = failures.get(step, [])
            if block.exit is None and codes:
                problems.append(f"{block.where} failed with {codes}:\n{what}\n--- it printed:\n{got}")
            elif block.exit is not None and (not codes or any(c != block.exit for c in codes)):
                problems.append(f"{block.where} should exit {block.exit}, got {codes or 'success'}:\n{what}")
            if want is not None and not matches(want, got):
                problems.append(f"{block.where} printed what the page does not show:\n{what}\n"
                                f"--- the page shows:\n{want}--- it printed:\n{got}")
    assert not problems, "\n\n".join(problems) + f"\n\nstderr:\n{stderr}"
    assert "Traceback" not in stderr


def test_the_pages_mark_their_examples():
    """Each page has examples that run; the tutorial runs every shell block it shows."""
    for page in PAGES:
        assert any("run" in b.flags for b in parse(page)), f"docs/{page} marks no runnable example"
    text = (ROOT / "docs" / "tutorial.md").read_text()
    for match in FENCE.finditer(text):
        words = match.group(1).split()
        if words and words[0] == "bash":
            line = text.count("\n", 0, match.start()) + 1
            assert "run" in words, f"tutorial.md:{line} is not marked run"


def test_the_tutorial_has_the_walk_through_it_promises():
    text = "\n".join(b.body for b in parse("tutorial.md"))
    for command in ("sluice init", "sluice rig add", "issues.jsonl", "sluice item create", "sluice sling",
                    "sluice daemon --once", "sluice scheduler status", "sluice scheduler list",
                    "sluice scheduler explain", "sluice rig remove"):
        assert command in text, f"the tutorial no longer runs {command!r}"


def test_the_output_comparison_normalises_ids_and_times_and_nothing_else():
    assert matches("Scheduled api-3 → api (context api-wisp-6k72)\n",
                   "Scheduled api-3 → api (context api-wisp-q0xz)\n")
    assert matches("doc-r6ck  P1 open  Document\n…\n", "doc-a1b2      P1   open Document\nmore\nlines\n")
    assert matches("town ready at /…/town\n", "town ready at /tmp/x/y/town\n")
    assert not matches("Scheduled api-3 → api\n", "Scheduled api-4 → api\n")
    assert not matches("score: 2.125\n", "score: 1.125\n")
    assert not matches("a\nb\n", "a\n")


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_every_runnable_example_prints_what_the_page_shows(page: str, tmp_path: Path):
    check_page(page, tmp_path)
