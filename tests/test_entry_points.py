"""Both installed entry points work: `sluice …` and, through git's external commands, `git sluice …`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _env() -> dict:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def test_git_sluice_runs_sluice(tmp_path: Path):
    town = tmp_path / "town"
    done = subprocess.run(["git", "sluice", "init", str(town), "--json"], env=_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (town / ".sluice" / "config.json").is_file()
    listed = subprocess.run(["git", "sluice", "--town", str(town), "rig", "list", "--json"], env=_env(),
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and listed.stdout.strip() == "[]"


def test_usage_errors_exit_2_and_domain_errors_exit_1(tmp_path: Path):
    sluice = str(Path(sys.executable).parent / "sluice")
    usage = subprocess.run([sluice, "item", "ready", "--limit", "many"], capture_output=True, text=True,
                           env=_env(), cwd=tmp_path, timeout=60)
    assert usage.returncode == 2 and "Traceback" not in usage.stderr
    lonely = subprocess.run([sluice, "item", "ready"], capture_output=True, text=True, cwd=tmp_path,
                            env={**_env(), "SLUICE_TOWN": ""}, timeout=60)
    assert lonely.returncode == 1
    assert lonely.stderr.startswith("error: no sluice town found")


def _sluice(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sluice", *args], capture_output=True, text=True,
                          env={**_env(), **(env or {})}, cwd=cwd, timeout=60)


def test_usage_errors_are_one_plain_line_and_a_hint(tmp_path: Path):
    cases = [
        (("sling", "--bogus"), "error: No such option: --bogus", "try 'sluice sling --help'"),
        (("nosuch",), "error: No such command 'nosuch'.", "try 'sluice --help'"),
        (("rig", "add"), "error: Missing argument 'NAME'.", "try 'sluice rig add --help'"),
        (("item", "ready", "--limit", "many"), "error: Invalid value for '--limit'",
         "try 'sluice item ready --help'"),
    ]
    for args, first, hint in cases:
        done = _sluice(*args, cwd=tmp_path)
        lines = done.stderr.splitlines()
        assert done.returncode == 2, (args, done.stderr)
        assert len(lines) == 2 and lines[0].startswith(first) and lines[1] == hint, (args, done.stderr)
        assert not any(ch in done.stderr for ch in "╭│╰"), done.stderr
        assert done.stdout == ""


def test_library_usage_errors_get_the_same_hint(tmp_path: Path):
    town = tmp_path / "town"
    assert _sluice("init", str(town), cwd=tmp_path).returncode == 0
    done = _sluice("--town", str(town), "item", "ready", "--limit", "-1", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["error: --limit must be >= 0 (0 = all)",
                                        "try 'sluice item ready --help'"]


def test_every_json_document_is_compact_on_one_line(tmp_path: Path):
    """One format for every --json: compact separators on one line, however the document is built."""
    import json

    from helpers import make_repo

    town = tmp_path / "town"
    make_repo(tmp_path / "repo")

    def run(*args: str) -> subprocess.CompletedProcess:
        return _sluice("--town", str(town), *args, cwd=tmp_path)

    assert _sluice("init", str(town), cwd=tmp_path).returncode == 0
    assert run("rig", "add", "alpha", str(tmp_path / "repo"), "--prefix", "al").returncode == 0
    first = json.loads(run("item", "create", "alpha", "--title", "één", "--json").stdout)
    run("item", "create", "alpha", "--title", "second", "--dep", first["id"], "--json")
    reads = [("rig", "list"), ("item", "list"), ("item", "ready"), ("item", "blocked"),
             ("item", "show", first["id"]), ("scheduler", "status"), ("scheduler", "list"),
             ("schedule", "policy", "show"), ("schedule", "status"), ("schedule", "next", "--preview")]
    for args in reads:
        done = run(*args, "--json")
        assert done.returncode == 0, (args, done.stderr)
        text = done.stdout
        assert text.endswith("\n") and text.count("\n") == 1, (args, text)
        compact = json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))
        assert text[:-1] == compact, (args, text)


def test_version_prints_the_package_version_from_every_entry_point(tmp_path: Path):
    from importlib.metadata import version

    import sluice

    assert version("git-sluice") == sluice.__version__
    want = f"sluice {sluice.__version__}\n"
    bindir = Path(sys.executable).parent
    for argv in ([str(bindir / "sluice"), "--version"], [str(bindir / "git-sluice"), "--version"],
                 ["git", "sluice", "--version"], [sys.executable, "-m", "sluice", "--version"],
                 [str(bindir / "sluice"), "--town", str(tmp_path), "--version"]):
        done = subprocess.run(argv, capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=60)
        assert (done.returncode, done.stdout, done.stderr) == (0, want, ""), argv


def test_version_imports_no_heavy_library():
    """--version is answered before the command line loads: no typer, rich, pydantic or pygit2."""
    done = subprocess.run([str(Path(sys.executable).parent / "sluice"), "--version"], capture_output=True,
                          text=True, env={**_env(), "PYTHONPROFILEIMPORTTIME": "1"}, timeout=60)
    assert done.returncode == 0
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "sluice.__main__" in imported
    heavy = {name for name in imported if name.split(".")[0] in ("typer", "rich", "pydantic", "pygit2")}
    assert not heavy, sorted(heavy)
