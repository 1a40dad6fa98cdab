"""Per-run workspaces, the git half: cloning a rig onto a fresh branch, and what counts as unsaved work.

Real git repositories throughout; the source repository is compared byte for
byte (``.git`` included) after every clone.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import git, make_repo
from sluice.core.workspaces import branch_name, ref_problem, safe_component, template_problem
from sluice.errors import ExecutorError
from sluice.executors import workspace as ws


def tree_bytes(root: Path) -> dict[str, str]:
    """Every path under ``root`` with the sha256 of its bytes (and its mode): a repository, ``.git`` too."""
    out = {}
    for path in sorted(root.rglob("*")):
        stat = path.lstat()
        if path.is_symlink():
            out[str(path)] = "link:" + os.readlink(path)
        elif path.is_dir():
            out[str(path)] = f"dir {stat.st_mode:o}"
        else:
            out[str(path)] = f"{stat.st_mode:o} " + hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "rig", {"README.md": "rig\n", "src.py": "x = 1\n"})


def commit(path: Path, name: str, text: str = "work\n") -> None:
    (path / name).write_text(text)
    git("add", "-A", cwd=path)
    git("commit", "-q", "-m", f"add {name}", cwd=path)


def test_a_clone_of_a_local_rig_is_on_a_new_branch_from_its_default_branch_and_leaves_it_untouched(
        source, tmp_path):
    commit(source, "second.txt")
    before = tree_bytes(source)
    made = ws.clone(str(source), tmp_path / "ws" / "al-1", "sluice/al-1")
    assert made.branch == "sluice/al-1" and made.path == tmp_path / "ws" / "al-1"
    assert git("rev-parse", "--abbrev-ref", "HEAD", cwd=made.path).strip() == "sluice/al-1"
    assert git("rev-parse", "HEAD", cwd=made.path) == git("rev-parse", "main", cwd=source)
    assert (made.path / "second.txt").read_text() == "work\n"
    assert tree_bytes(source) == before
    assert git("remote", cwd=source).strip() == ""  # the rig needs no origin of its own


def test_a_local_clone_hardlinks_the_sources_objects(source, tmp_path):
    git("gc", "-q", cwd=source)  # one pack file to find again
    pack = next((source / ".git" / "objects" / "pack").glob("*.pack"))
    made = ws.clone(str(source), tmp_path / "ws" / "al-1", "sluice/al-1")
    assert (made.path / ".git" / "objects" / "pack" / pack.name).stat().st_ino == pack.stat().st_ino


def test_a_branch_the_source_already_has_gives_the_next_fresh_name(source, tmp_path):
    git("branch", "sluice/al-1", cwd=source)
    made = ws.clone(str(source), tmp_path / "w", "sluice/al-1",
                    fresh_names=["sluice/al-1-2", "sluice/al-1-3"])
    assert made.branch == "sluice/al-1-2"


def test_a_source_that_cannot_be_cloned_raises_the_executor_error_with_gits_words(tmp_path):
    target = tmp_path / "w"
    with pytest.raises(ExecutorError) as caught:
        ws.clone(str(tmp_path / "nowhere"), target, "sluice/al-1")
    assert "cannot clone" in str(caught.value) and "does not exist" in str(caught.value)
    assert not target.exists()
    with pytest.raises(ExecutorError, match=r"Could not resolve host|unable to access|Failed to connect"):
        ws.clone("https://127.0.0.1:1/none.git", tmp_path / "w2", "sluice/al-1", timeout=30)


def test_an_existing_directory_is_never_cloned_over(source, tmp_path):
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "keep.txt").write_text("mine")
    with pytest.raises(ExecutorError, match="already exists"):
        ws.clone(str(source), tmp_path / "w", "sluice/al-1")
    assert (tmp_path / "w" / "keep.txt").read_text() == "mine"


def test_git_variables_of_a_hook_do_not_aim_the_clone_elsewhere(source, tmp_path, monkeypatch):
    other = make_repo(tmp_path / "other")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    before = tree_bytes(other)
    made = ws.clone(str(source), tmp_path / "w", "sluice/al-1")
    assert (made.path / "src.py").exists() and tree_bytes(other) == before


def test_unsaved_work_is_uncommitted_changes_stashes_and_commits_not_on_the_source(source, tmp_path):
    git("tag", "v1", cwd=source)
    made = ws.clone(str(source), tmp_path / "w", "sluice/al-1")
    assert ws.unsaved_work(made.path) is None
    (made.path / "new.txt").write_text("draft")
    assert ws.unsaved_work(made.path) == "1 uncommitted change"
    git("stash", "-q", "-u", cwd=made.path)
    assert ws.unsaved_work(made.path) is not None  # the stash is work too
    git("stash", "drop", "-q", cwd=made.path)
    assert ws.unsaved_work(made.path) is None
    commit(made.path, "done.txt")
    assert ws.unsaved_work(made.path) == "1 commit not on its source"
    git("push", "-q", "origin", "sluice/al-1", cwd=made.path)  # pushed: it exists elsewhere now
    assert ws.unsaved_work(made.path) is None
    git("tag", "mine", "HEAD~1", cwd=made.path)  # a tag on a commit the source has: nothing new
    assert ws.unsaved_work(made.path) is None


def test_ignored_files_are_not_work(source, tmp_path):
    commit(source, ".gitignore", "build/\n")
    made = ws.clone(str(source), tmp_path / "w", "sluice/al-1")
    (made.path / "build").mkdir()
    (made.path / "build" / "out.o").write_text("x")
    assert ws.unsaved_work(made.path) is None


def test_retire_removes_only_a_workspace_without_unsaved_work(source, tmp_path):
    clean = ws.clone(str(source), tmp_path / "a", "sluice/al-1").path
    dirty = ws.clone(str(source), tmp_path / "b", "sluice/al-2").path
    commit(dirty, "unpushed.txt")
    assert ws.retire(clean) is None and not clean.exists()
    assert ws.retire(dirty) == "1 commit not on its source" and dirty.exists()


def test_prune_removes_the_oldest_past_the_limit_and_never_one_with_work(source, tmp_path):
    paths = [ws.clone(str(source), tmp_path / f"w{i}", f"sluice/al-{i}").path for i in range(4)]
    commit(paths[0], "unpushed.txt")
    for age, path in enumerate(paths):
        os.utime(path, (1000 + age, 1000 + age))  # w0 oldest
    removed = ws.prune(paths, keep=1)
    assert removed == [paths[2], paths[1]]
    assert paths[0].exists() and paths[3].exists()


@pytest.mark.parametrize("template, problem", [
    ("sluice/{item_id}", None),
    ("agents/{rig}/{item_id}", None),
    ("sluice/fixed", "must hold {item_id}"),
    ("sluice/{item}/{item_id}", "may use only"),
    ("bad name/{item_id}", "must not hold ' '"),
    ("-x/{item_id}", "must not be empty, start with"),
    ("a..b/{item_id}", "'..'"),
])
def test_branch_templates_are_checked_without_git(template, problem):
    found = template_problem(template)
    assert (found is None) if problem is None else (problem in found)


@given(st.text(max_size=40), st.integers(min_value=1, max_value=99))
def test_any_item_id_makes_a_valid_branch_and_one_path_component(item_id, attempt):
    name = branch_name("sluice/{item_id}", item_id, "rig", attempt)
    assert ref_problem(name) is None
    component = safe_component(item_id)
    assert "/" not in component and component not in (".", "..") and not component.startswith(("-", "."))


def test_retries_get_a_numbered_branch():
    assert branch_name("sluice/{item_id}", "al-7", "alpha") == "sluice/al-7"
    assert branch_name("sluice/{item_id}", "al-7", "alpha", 3) == "sluice/al-7-3"


# -- the settings ------------------------------------------------------------------------------


def test_workspace_settings_are_set_and_checked_like_every_key(cli, tmp_path):
    cli.run("config", "set", "executor.workspace", "clone")
    cli.run("config", "set", "executor.workspace_keep", "2")
    cli.run("config", "set", "executor.workspace_branch", "agents/{rig}/{item_id}")
    cli.run("config", "set", "executor.workspace_root", "spaces")
    assert cli.run("config", "get", "executor.workspace").stdout.strip() == "clone"
    bad = cli.run("config", "set", "executor.workspace", "worktree", check=False)
    assert bad.returncode == 2 and "executor.workspace" in bad.stderr and "clone" in bad.stderr
    bad = cli.run("config", "set", "executor.workspace_branch", "sluice/fixed", check=False)
    assert bad.returncode == 2 and "must hold {item_id}" in bad.stderr
    bad = cli.run("config", "set", "executor.workspace_keep", "-1", check=False)
    assert bad.returncode == 2


def test_a_rigs_own_workspace_setting_and_remote(cli, tmp_path):
    repo = make_repo(tmp_path / "repos" / "alpha")
    row = cli.json("rig", "add", "alpha", str(repo), "--remote", "https://example.invalid/alpha.git")
    assert row["remote"] == "https://example.invalid/alpha.git"
    cli.run("config", "set", "rigs.alpha.workspace", "clone")
    assert cli.run("config", "get", "rigs.alpha.workspace").stdout.strip() == "clone"
    cli.run("config", "set", "rigs.alpha.workspace", "none")
    assert cli.run("config", "get", "rigs.alpha.workspace").stdout.strip() in ("", "null", "None")
    cli.run("config", "set", "rigs.alpha.remote", "none")
    assert cli.json("rig", "list")[0]["remote"] is None
    bad = cli.run("rig", "add", "beta", str(make_repo(tmp_path / "repos" / "beta")), "--remote", "-x",
                  check=False)
    assert bad.returncode == 2 and "invalid --remote" in bad.stderr


def test_a_rigs_remote_defaults_to_its_origin_and_is_none_without_one(cli, tmp_path):
    with_origin = make_repo(tmp_path / "repos" / "alpha")
    git("remote", "add", "origin", "git@example.invalid:team/alpha.git", cwd=with_origin)
    assert cli.json("rig", "add", "alpha", str(with_origin))["remote"] == "git@example.invalid:team/alpha.git"
    assert cli.json("rig", "add", "beta", str(make_repo(tmp_path / "repos" / "beta")))["remote"] is None


@settings(max_examples=60)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=24),
       st.integers(min_value=1, max_value=9))
def test_every_branch_sluice_makes_is_one_git_itself_accepts(item_id, attempt):
    name = branch_name("sluice/{rig}/{item_id}", item_id, item_id[::-1], attempt)
    done = subprocess.run(["git", "check-ref-format", "--branch", name], capture_output=True, text=True)
    assert done.returncode == 0, (name, done.stderr)


@pytest.mark.parametrize("name", ["a b", "a..b", "a~1", "a^", "a:b", "a?", "a*", "a[", "a\\b", "a.lock", "/a",
                                  "a/", "a.", ".a", "a/.b", "a@{1}", "a//b", "-a"])
def test_what_the_ref_rules_refuse_git_refuses_too(name):
    assert ref_problem(name) is not None
    done = subprocess.run(["git", "check-ref-format", "--branch", name], capture_output=True, text=True)
    assert done.returncode != 0, name


def test_a_tag_the_source_had_on_a_commit_no_branch_holds_is_not_unsaved_work(source, tmp_path):
    git("checkout", "-q", "-b", "release", cwd=source)
    commit(source, "release.txt")
    git("tag", "v2", cwd=source)
    git("checkout", "-q", "main", cwd=source)
    git("branch", "-q", "-D", "release", cwd=source)  # v2's commit is on no branch of the source now
    made = ws.clone(str(source), tmp_path / "w", "sluice/al-1")
    assert ws.unsaved_work(made.path) is None
    git("tag", "mine", "v2", cwd=made.path)  # a new tag, but on a commit the source has
    assert ws.unsaved_work(made.path) is None
