"""Towns, rigs and configuration through the real CLI: `init`, `rig`, `config`, town discovery."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import Cli, make_repo

NO_ENV_TOWN = {"SLUICE_TOWN": ""}


def fails(cli: Cli, *args: str, code: int = 1, **kw) -> str:
    done = cli.run(*args, check=False, **kw)
    assert done.returncode == code, (args, done.returncode, done.stdout, done.stderr)
    assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr
    return done.stderr


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repos" / "alpha")


# -- init ----------------------------------------------------------------------------------------


def test_init_creates_the_layout(tmp_path):
    town = tmp_path / "new-town"
    cli = Cli(tmp_path)
    out = cli.json("init", str(town))
    assert out == {"town": str(town.resolve())}
    config = json.loads((town / ".sluice" / "config.json").read_text())
    assert config["rigs"] == {} and config["scheduler"]["max_polecats"] == -1
    for sub in ("rigs", "runtime/workers", "schedule", "events"):
        assert (town / ".sluice" / sub).is_dir()


@pytest.mark.parametrize("where", ["a file", "below a file"])
def test_init_where_no_directory_can_be_made_is_a_clear_error(tmp_path, where):
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory\n")
    target = blocker if where == "a file" else blocker / "town"
    err = fails(Cli(tmp_path), "init", str(target))
    assert "cannot create a town" in err and str(target) in err and "internal error" not in err
    assert blocker.read_text() == "not a directory\n"


def test_init_leaves_an_existing_town_alone(cli, town_dir, repo):
    cli.run("rig", "add", "alpha", str(repo))
    config = (town_dir / ".sluice" / "config.json").read_bytes()
    assert "town ready" in cli.run("init", str(town_dir)).stdout
    assert (town_dir / ".sluice" / "config.json").read_bytes() == config


# -- rig add / list ----------------------------------------------------------------------------


def test_rig_add_and_list(cli, town_dir, repo, tmp_path):
    row = cli.json("rig", "add", "alpha", str(repo), "--prefix", "al")
    own_store = str(town_dir.resolve() / ".sluice" / "rigs" / "alpha" / "issues.jsonl")
    assert row == {"name": "alpha", "prefix": "al", "repo": str(repo.resolve()), "items": own_store,
                   "read_only": False, "source": "own", "items_command": None, "source_stale": None,
                   "remote": None}
    beta = make_repo(tmp_path / "repos" / "beta")
    assert cli.json("rig", "add", "beta", str(beta))["prefix"] == "beta"  # prefix defaults to the name
    rows = cli.json("rig", "list")
    assert [r["name"] for r in rows] == ["alpha", "beta"] and rows[0] == row
    assert "alpha" in cli.run("rig", "list").stdout


def test_rig_add_relative_repo_path_is_stored_absolute(cli, town_dir, repo, tmp_path):
    row = cli.json("rig", "add", "alpha", "alpha", cwd=tmp_path / "repos")
    assert row["repo"] == str(repo.resolve())


def test_rig_add_detects_a_beads_export_and_reads_it_read_only(cli, tmp_path, beads_data):
    repo = tmp_path / "repos" / "ralph"
    (repo / ".beads").mkdir(parents=True)
    export = (beads_data / "asermax__ralph-tui.issues.jsonl").read_text()
    make_repo(repo, {".beads/issues.jsonl": export})
    row = cli.json("rig", "add", "ralph", str(repo))
    assert row["read_only"] is True and row["items"] == str((repo / ".beads" / "issues.jsonl").resolve())
    assert len(cli.json("item", "list", "ralph")) == 122


def test_rig_add_with_items_file(cli, repo, tmp_path):
    export = tmp_path / "export.jsonl"
    export.write_text('{"id": "al-1", "title": "one", "status": "open", "priority": 1}\n')
    row = cli.json("rig", "add", "alpha", str(repo), "--prefix", "al", "--items", str(export))
    assert row["read_only"] is True and row["items"] == str(export.resolve())
    assert [r["id"] for r in cli.json("item", "ready")] == ["al-1"]


@pytest.mark.parametrize("kind", ["plain directory", "missing", "inside a repo", "a file", "its .git"])
def test_rig_add_refuses_what_is_not_a_repository(cli, town_dir, repo, tmp_path, kind):
    target = {
        "plain directory": tmp_path / "plain",
        "missing": tmp_path / "missing",
        "inside a repo": repo / "sub",
        "a file": repo / "README.md",
        "its .git": repo / ".git",  # polecats would run inside .git; the work tree is the rig
    }[kind]
    if kind in ("plain directory", "inside a repo"):
        target.mkdir()
    err = fails(cli, "rig", "add", "x", str(target))
    assert str(target) in err
    assert cli.json("rig", "list") == []


def test_rig_add_refuses_duplicates(cli, repo, tmp_path):
    cli.run("rig", "add", "alpha", str(repo), "--prefix", "al")
    other = make_repo(tmp_path / "repos" / "other")
    assert "already registered" in fails(cli, "rig", "add", "alpha", str(other), "--prefix", "ot")
    assert "prefix 'al' already routes to rig 'alpha'" in fails(cli, "rig", "add", "other", str(other),
                                                                 "--prefix", "al")
    assert [r["name"] for r in cli.json("rig", "list")] == ["alpha"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("bad name",), "invalid rig name"),
        ((".hidden",), "invalid rig name"),
        (("ok", "--prefix", "ends-"), "invalid prefix"),
        (("ok", "--prefix", "sp ace"), "invalid prefix"),
        (("ok", "--prefix", "-bad"), "must start with a letter or digit"),  # its ids would read as options
        (("ok", "--prefix", ".dot"), "must start with a letter or digit"),
        (("ok", "--prefix", "_under"), "must start with a letter or digit"),
    ],
)
def test_rig_add_refuses_bad_names_and_prefixes(cli, repo, args, words):
    name, *rest = args
    assert words in fails(cli, "rig", "add", name, str(repo), *rest, code=2)


def test_rig_add_refuses_missing_or_corrupt_items_files(cli, repo, tmp_path):
    assert "no such file" in fails(cli, "rig", "add", "a", str(repo), "--items", str(tmp_path / "no.jsonl"),
                                   code=1)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a-1", "title": "t"}\n\n{"id": oops}\n{"id": "a-2", "title": "t"}\n')
    assert f"{bad}:3:" in fails(cli, "rig", "add", "a", str(repo), "--items", str(bad))
    assert cli.json("rig", "list") == []


def test_hyphenated_prefix_routes_ids(cli, tmp_path, beads_data):
    repo = make_repo(tmp_path / "repos" / "ak")
    cli.run("rig", "add", "ak", str(repo), "--prefix", "artifact-keeper", "--items",
            str(beads_data / "artifact-keeper__artifact-keeper.issues.jsonl"))
    assert cli.json("item", "show", "artifact-keeper-01d")["priority"] == 4


# -- town discovery ---------------------------------------------------------------------------------


def test_town_found_from_a_subdirectory(cli, town_dir, repo):
    cli.run("rig", "add", "alpha", str(repo))
    deep = town_dir / "a" / "b" / "c"
    deep.mkdir(parents=True)
    rows = cli.json("rig", "list", env=NO_ENV_TOWN, cwd=deep)
    assert [r["name"] for r in rows] == ["alpha"]


def test_town_option_and_environment(cli, town_dir, repo, tmp_path):
    cli.run("rig", "add", "alpha", str(repo))
    other = tmp_path / "other-town"
    Cli(tmp_path).run("init", str(other))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    by_env = cli.json("rig", "list", env={"SLUICE_TOWN": str(town_dir)}, cwd=elsewhere)
    assert [r["name"] for r in by_env] == ["alpha"]
    # --town beats SLUICE_TOWN, which beats the cwd
    assert cli.json("--town", str(other), "rig", "list", env={"SLUICE_TOWN": str(town_dir)}) == []
    assert cli.json("rig", "list", env={"SLUICE_TOWN": str(other)}, cwd=town_dir) == []


def test_no_town_is_a_clear_error(cli, tmp_path):
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    err = fails(cli, "rig", "list", env=NO_ENV_TOWN, cwd=nowhere)
    assert "no sluice town found" in err and "sluice init" in err
    assert "not a sluice town" in fails(cli, "--town", str(nowhere), "item", "list")
    assert "not a sluice town" in fails(cli, "item", "list", env={"SLUICE_TOWN": str(nowhere)})


# -- config -------------------------------------------------------------------------------------------


def test_config_set_and_get(cli, town_dir):
    assert cli.run("config", "get", "scheduler.max_polecats").stdout.strip() == "-1"
    cli.run("config", "set", "scheduler.max_polecats", "4")
    assert cli.run("config", "get", "scheduler.max_polecats").stdout.strip() == "4"
    cli.run("config", "set", "scheduler.max_polecats", "-1")  # a negative number typed as is
    assert cli.run("config", "get", "scheduler.max_polecats").stdout.strip() == "-1"
    cli.run("config", "set", "scheduler.spawn_delay", "1m30s")
    assert cli.run("config", "get", "scheduler.spawn_delay").stdout.strip() == "1m30s"
    cli.run("config", "set", "executor.command", '["agent", "{item_id}", "$(not run)"]')
    command = json.loads(cli.run("config", "get", "executor.command").stdout)
    assert command == ["agent", "{item_id}", "$(not run)"]
    saved = json.loads((town_dir / ".sluice" / "config.json").read_text())
    assert saved["scheduler"]["max_polecats"] == -1 and saved["scheduler"]["spawn_delay"] == "1m30s"
    cli.run("config", "set", "executor.command", "[]")  # the documented default: back to "not set"
    assert json.loads(cli.run("config", "get", "executor.command").stdout) == []


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("scheduler.max_polecats", "-2"),
        ("scheduler.max_polecats", "many"),
        ("scheduler.batch_size", "0"),
        ("scheduler.spawn_delay", "3x"),
        ("scheduler.max_dispatch_failures", "0"),
        ("executor.kind", "cloud"),
        ("executor.command", "agent --go"),
        ("executor.command", '["agent", 3]'),
        ("executor.command", "{}"),
    ],
)
def test_config_set_refuses_bad_values_naming_the_key(cli, town_dir, key, value):
    before = (town_dir / ".sluice" / "config.json").read_bytes()
    err = fails(cli, "config", "set", key, value, code=2)
    assert key in err and "expected" in err
    assert (town_dir / ".sluice" / "config.json").read_bytes() == before


def test_config_unknown_keys(cli):
    assert "unknown config key 'scheduler.nope'" in fails(cli, "config", "get", "scheduler.nope", code=2)
    assert "unknown config key" in fails(cli, "config", "set", "rigs", "{}", code=2)


CONFIG_READERS = [
    ("rig", "list"),
    ("rig", "add", "beta", "{repo}"),
    ("config", "get", "scheduler.max_polecats"),
    ("config", "set", "scheduler.max_polecats", "3"),
    ("item", "list"),
    ("item", "ready"),
    ("item", "blocked"),
    ("item", "create", "alpha", "--title", "x"),
    ("item", "show", "al-1"),
    ("init", "{town}"),
]


DAMAGE = {
    "not json": '{"rigs": {',
    "wrong shape": "[1, 2]",
    "unknown key": '{"rigs": {}, "surprise": true}',
    "bad value": '{"rigs": {}, "scheduler": {"batch_size": 0}}',
}


def _assert_config_error(cli, town_dir, repo, argv, text):
    config = town_dir / ".sluice" / "config.json"
    config.write_text(text)
    args = [a.format(repo=repo, town=town_dir) for a in argv]
    err = fails(cli, *args)
    assert str(config.resolve()) in err
    assert config.read_text() == text  # never repaired, never overwritten with defaults


@pytest.mark.parametrize("argv", CONFIG_READERS, ids=lambda a: " ".join(a[:2]))
def test_corrupt_config_is_an_error_on_every_command(cli, town_dir, repo, argv):
    _assert_config_error(cli, town_dir, repo, argv, DAMAGE["not json"])


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("argv", [("item", "list"), ("config", "set", "scheduler.batch_size", "2")],
                         ids=lambda a: " ".join(a[:2]))
def test_every_kind_of_config_damage_is_named(cli, town_dir, repo, argv, damage):
    _assert_config_error(cli, town_dir, repo, argv, DAMAGE[damage])


def test_config_that_is_not_utf8_is_named(cli, town_dir):
    config = town_dir / ".sluice" / "config.json"
    config.write_bytes(b"\xff\xfe{}")
    err = fails(cli, "rig", "list")
    assert str(config.resolve()) in err and "utf-8" in err
    assert config.read_bytes() == b"\xff\xfe{}"


def test_a_config_nested_too_deeply_to_parse_is_a_config_error_naming_the_file(tmp_path):
    from sluice.errors import ConfigError
    from sluice.store.files.town import Town, init_town

    town = init_town(tmp_path / "town")
    town.config_path.write_text('{"rigs": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ConfigError, match=r"config\.json: not valid JSON"):
        Town(town.root).load_config()


def test_a_context_description_nested_too_deeply_is_an_invalid_context():
    from sluice.core.records import SlingContextFields

    assert SlingContextFields.from_description("[" * 100_000 + "]" * 100_000) is None


@pytest.mark.parametrize("description", [True, 7, ["x"], {"work_bead_id": "a-1"}])
def test_a_context_description_that_is_not_text_is_an_invalid_context(description):
    from sluice.core.records import SlingContextFields

    assert SlingContextFields.from_description(description) is None


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "directory", "dangling link"])
def test_a_config_that_is_not_a_regular_file_is_named_never_read_or_waited_on(cli, town_dir, kind):
    config = town_dir / ".sluice" / "config.json"
    config.unlink()
    if kind == "fifo":
        os.mkfifo(config)
    elif kind == "directory":
        config.mkdir()
    else:
        config.symlink_to("/dev/zero" if kind == "link to /dev/zero" else town_dir / "nowhere.json")
    for argv in (("rig", "list"), ("scheduler", "status"), ("item", "ready")):
        done = cli.run(*argv, check=False, timeout=60)  # a FIFO once blocked every command forever
        assert done.returncode == 1, (argv, done.stderr)
        assert str(config) in done.stderr and "not a sluice town" not in done.stderr, done.stderr
        expected = {"fifo": "is a FIFO", "directory": "is a directory",
                    "dangling link": "which does not exist",
                    "link to /dev/zero": "is a character device (a symbolic link to /dev/zero)"}[kind]
        assert expected in done.stderr, done.stderr
