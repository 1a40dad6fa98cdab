"""docs/tutorial.md works as written: its `bash` blocks run in order, in one real shell, in a scratch dir.

The tutorial is our own text, so running it is safe.  Every command that
fails is recorded by an ERR trap with its block; a block fenced as
```` ```bash exit=N ```` must fail with N (and only with N), every other block
must not fail at all.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "docs" / "tutorial.md"
BLOCK = re.compile(r"^```bash([^\n]*)\n(.*?)^```[ \t]*$", re.S | re.M)


def blocks() -> list[tuple[int | None, str]]:
    """(expected exit code or None, body) of every ```bash block, in order."""
    out = []
    for info, body in BLOCK.findall(TUTORIAL.read_text()):
        code = re.search(r"\bexit=(\d+)\b", info)
        out.append((int(code.group(1)) if code else None, body))
    return out


def script(found: list[tuple[int | None, str]], results: Path) -> str:
    lines = [
        "set -E -o pipefail",
        f"exec 3>>'{results}'",
        # $? is the failing command's status; record it with the block it happened in.
        """trap 'printf "%s\\t%s\\t%s\\n" "$__block" "$?" "$BASH_COMMAND" >&3' ERR""",
    ]
    for number, (_code, body) in enumerate(found):
        lines += [f"__block={number}", body]
    lines.append("__block=end")
    return "\n".join(lines) + "\n"


def test_the_tutorial_has_the_walk_through_it_promises():
    text = "\n".join(body for _code, body in blocks())
    for command in ("sluice init", "sluice rig add", "issues.jsonl", "sluice item create", "sluice sling",
                    "sluice daemon --once", "sluice scheduler status", "sluice scheduler list",
                    "sluice scheduler explain", "sluice rig remove"):
        assert command in text, f"the tutorial no longer runs {command!r}"


@pytest.mark.slow
def test_every_block_of_the_tutorial_runs(tmp_path: Path):
    found = blocks()
    results = tmp_path / "failures.tsv"
    results.touch()
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLUICE_")}
    env.update({
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "HOME": str(tmp_path),  # no personal git or sluice settings
        "GIT_CONFIG_NOSYSTEM": "1",
    })
    done = subprocess.run(["bash", "-c", script(found, results)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    failures: dict[int, list[tuple[int, str]]] = {}
    for line in results.read_text().splitlines():
        block, code, command = line.split("\t", 2)
        if block.isdigit():
            failures.setdefault(int(block), []).append((int(code), command))
    problems = []
    for number, (expected, body) in enumerate(found):
        got = failures.get(number, [])
        if expected is None and got:
            problems.append(f"block {number} failed: {got}\n{body}")
        elif expected is not None and (not got or any(code != expected for code, _ in got)):
            problems.append(f"block {number} should fail with exit {expected}, got {got or 'success'}"
                            f"\n{body}")
    assert not problems, "\n\n".join(problems) + f"\n\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "sluice-tutorial").exists()  # the last block cleans up after itself
