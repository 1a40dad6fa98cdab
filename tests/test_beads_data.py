"""The six real beads exports, loaded through the real CLI as read-only rig items.

For each file: ``rig add --items`` accepts it without a warning, every live
line is listed, and ``item ready`` / ``item blocked`` agree with a plain
re-derivation of the beads rules (``helpers.beads_rules``, written from the
model's wording), plus a few facts checked by hand in the files.
"""

from __future__ import annotations

import json
import time

import pytest

from helpers import Cli, make_repo
from helpers.beads_rules import Rules, epoch, load, priority, status

# file name → the id prefix its rig routes (text before the first '-' of its ids, as beads uses it)
FILES = {
    "steveyegge__beads.issues.jsonl": "bd",  # Dolt era (2026-02): whole-second Z, metadata strings
    "steveyegge__beads@2026-01-14.issues.jsonl": "bd",  # SQLite era: local offsets, tombstones
    "steveyegge__gastown.issues.jsonl": "gt",
    "steveyegge__gastown@2026-01-07.issues.jsonl": "gt",
    "artifact-keeper__artifact-keeper.issues.jsonl": "artifact-keeper",
    "asermax__ralph-tui.issues.jsonl": "ralph",
}

pytestmark = pytest.mark.xdist_group("beads_data")  # the towns of `loaded` are built once

# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def loaded(tmp_path_factory, beads_data):
    """One town per file (two files share a prefix), each rig registered through the CLI."""
    towns = {}
    for name, rig_prefix in FILES.items():
        base = tmp_path_factory.mktemp(rig_prefix)
        town = base / "town"
        town.mkdir()
        cli = Cli(town)
        cli.run("init", str(town))
        repo = make_repo(base / "repo")
        added = cli.run("rig", "add", "r", str(repo), "--prefix", rig_prefix, "--items",
                        str(beads_data / name), "--json")
        towns[name] = (cli, added)
    return towns


def run(loaded, name):
    cli, _added = loaded[name]
    return cli


# -- tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FILES)
def test_one_items_causes_are_what_the_blocked_listing_names(loaded, name):
    """`scheduler explain` asks one item's causes by id; they must be the listing's row for it."""
    from sluice.store.files.town import Town
    from sluice.store.items.rigstore import Stores

    cli = run(loaded, name)
    store = Stores(Town(cli.town)).rig("r")
    listed = {record["id"]: causes for record, causes in store.blocked()}
    assert listed, "each export has blocked items"
    for item_id in [r["id"] for r in cli.json("item", "list")]:
        assert store.blocked_by(item_id) == listed.get(item_id)


@pytest.mark.parametrize("name", FILES)
def test_file_registers_without_errors_or_warnings(loaded, name, beads_data):
    cli, added = loaded[name]
    assert added.returncode == 0
    assert added.stderr == ""
    row = json.loads(added.stdout)
    assert row["read_only"] is True and row["prefix"] == FILES[name]
    listed = cli.json("item", "list")
    assert {r["id"] for r in listed} == set(load(beads_data / name))


@pytest.mark.parametrize("name", FILES)
def test_ready_and_blocked_follow_the_rules(loaded, name, beads_data):
    cli = run(loaded, name)
    rules = Rules(load(beads_data / name))
    before = time.time()
    ready = cli.run("item", "ready", "--limit", "0", "--json")
    after = time.time()
    assert ready.stderr == ""
    got_ready = [r["id"] for r in json.loads(ready.stdout)]
    assert got_ready == rules.ready(before) == rules.ready(after)

    blocked = cli.json("item", "blocked")
    got_blocked = {r["id"]: r["blocked_by"] for r in blocked}
    assert got_blocked == rules.blocked()
    assert all(r["blocked_by_count"] == len(r["blocked_by"]) for r in blocked)
    keys = [(priority(r), -(epoch(r["created_at"]) or 0)) for r in blocked]
    assert keys == sorted(keys)
    assert not set(got_ready) & set(got_blocked)


@pytest.mark.parametrize("name", FILES)
def test_default_limit_is_100_and_limits_cut_the_sorted_list(loaded, name):
    cli = run(loaded, name)
    everything = [r["id"] for r in cli.json("item", "ready", "--limit", "0")]
    assert [r["id"] for r in cli.json("item", "ready")] == everything[:100]
    assert [r["id"] for r in cli.json("item", "ready", "--limit", "5")] == everything[:5]


def test_the_data_exercises_both_eras_and_every_tricky_case(beads_data):
    """Guard against the fixture files silently losing what the other tests rely on."""
    dolt = (beads_data / "steveyegge__beads.issues.jsonl").read_text()
    sqlite = (beads_data / "steveyegge__beads@2026-01-14.issues.jsonl").read_text()
    assert '"metadata": "{}"' in dolt and '"ephemeral": true' in dolt
    assert '"status":"tombstone"' in sqlite.replace(" ", "")
    assert "-08:00" in sqlite
    gastown = load(beads_data / "steveyegge__gastown@2026-01-07.issues.jsonl")
    types = {r.get("issue_type") for r in gastown.values()}
    assert {"merge-request", "agent", "role", "molecule", "event"} <= types


# -- spot checks verified by reading the files -------------------------------------------------


def test_hooked_item_is_not_ready_and_is_blocked_by_its_open_molecule_wisp(loaded):
    # bd-xmf: status hooked, `blocks`-depends on the open wisp bd-wisp-uq6fx (Gas Town practice).
    cli = run(loaded, "steveyegge__beads.issues.jsonl")
    item = cli.json("item", "show", "bd-xmf")
    assert item["status"] == "hooked"
    assert "bd-xmf" not in {r["id"] for r in cli.json("item", "ready", "--limit", "0")}
    rows = {r["id"]: r for r in cli.json("item", "blocked")}
    assert rows["bd-xmf"]["blocked_by"] == ["bd-wisp-uq6fx"]
    assert cli.json("item", "show", "bd-wisp-uq6fx")["ephemeral"] is True


def test_hooked_items_of_the_sqlite_era_are_never_ready(loaded, beads_data):
    cli = run(loaded, "steveyegge__gastown@2026-01-07.issues.jsonl")
    hooked = {r["id"] for r in load(beads_data / "steveyegge__gastown@2026-01-07.issues.jsonl").values()
              if r.get("status") == "hooked"}
    assert len(hooked) == 25 and "gt-0vu9e" in hooked
    assert not hooked & {r["id"] for r in cli.json("item", "ready", "--limit", "0")}


def test_tombstones_are_not_listed_ready_or_blocked(loaded):
    cli = run(loaded, "asermax__ralph-tui.issues.jsonl")
    for listing in (cli.json("item", "list"), cli.json("item", "ready", "--limit", "0"),
                    cli.json("item", "blocked")):
        ids = {r["id"] for r in listing}
        assert not {"ralph-oue", "ralph-oue.1", "ralph-oue.2"} & ids
    assert cli.json("item", "list", "--status", "tombstone") == []


def test_open_blocker_blocks_and_a_closed_one_does_not(loaded, beads_data):
    # artifact-keeper-2to (open) blocks on artifact-keeper-ubj and -7s3, both open.
    cli = run(loaded, "artifact-keeper__artifact-keeper.issues.jsonl")
    rows = {r["id"]: r["blocked_by"] for r in cli.json("item", "blocked")}
    assert {"artifact-keeper-ubj", "artifact-keeper-7s3"} <= set(rows["artifact-keeper-2to"])
    # ralph-tui-41q.10 waits on its open sibling ralph-tui-41q.8
    ralph = run(loaded, "asermax__ralph-tui.issues.jsonl")
    ralph_rows = {r["id"]: r["blocked_by"] for r in ralph.json("item", "blocked")}
    assert "ralph-tui-41q.8" in ralph_rows["ralph-tui-41q.10"]


def test_dangling_targets_do_not_block(loaded, beads_data):
    # gt-0ol blocks-depends on gt-h5n, which is not in the 2026-01-07 export at all.
    records = load(beads_data / "steveyegge__gastown@2026-01-07.issues.jsonl")
    assert "gt-h5n" not in records
    cli = run(loaded, "steveyegge__gastown@2026-01-07.issues.jsonl")
    rows = {r["id"]: r["blocked_by"] for r in cli.json("item", "blocked")}
    assert "gt-h5n" not in {b for causes in rows.values() for b in causes}


def test_pinned_status_row_is_neither_ready_nor_blocked(loaded):
    cli = run(loaded, "steveyegge__beads.issues.jsonl")
    assert cli.json("item", "show", "bd-pr-sheriff")["status"] == "pinned"
    assert "bd-pr-sheriff" not in {r["id"] for r in cli.json("item", "ready", "--limit", "0")}
    assert "bd-pr-sheriff" not in {r["id"] for r in cli.json("item", "blocked")}


def test_ready_output_keeps_every_key_of_the_export(loaded, beads_data):
    cli = run(loaded, "steveyegge__beads.issues.jsonl")
    records = load(beads_data / "steveyegge__beads.issues.jsonl")
    for row in cli.json("item", "ready", "--limit", "0"):
        assert set(records[row["id"]]) <= set(row)
        assert row["dependency_count"] == records[row["id"]]["dependency_count"]


def test_imported_export_with_a_blocked_epic_blocks_its_whole_tree(tmp_path, beads_data):
    """The exports hold no inherited blockage, so make some: import one, then block an epic."""
    source = beads_data / "asermax__ralph-tui.issues.jsonl"
    town = tmp_path / "town"
    town.mkdir()
    cli = Cli(town)
    cli.run("init", str(town))
    cli.run("rig", "add", "ralph", str(make_repo(tmp_path / "repo")), "--prefix", "ralph")
    summary = cli.json("item", "import", "ralph", str(source))
    assert summary == {"rig": "ralph", "added": 122, "updated": 0, "skipped_tombstones": 8}

    rules = Rules(load(source))
    epic = next(
        rid for rid, r in sorted(rules.records.items())
        if r.get("issue_type") == "epic" and status(r) == "open" and not rules.is_blocked(r)
        and any(status(k) == "open" for k in rules.children[rid])
    )
    blocker = cli.json("item", "create", "ralph", "--title", "gate the epic", "--priority", "0")["id"]
    cli.run("item", "dep", "add", epic, blocker)

    own_store = town / ".sluice" / "rigs" / "ralph" / "issues.jsonl"
    rules = Rules(load(own_store))
    expected_blocked = rules.blocked()
    inherited = {rid for rid, causes in expected_blocked.items() if causes == [epic]}
    assert inherited, "an open child of the epic inherits its blockage"
    assert expected_blocked[epic] == [blocker]
    assert {r["id"]: r["blocked_by"] for r in cli.json("item", "blocked")} == expected_blocked
    now = time.time()
    got = [r["id"] for r in cli.json("item", "ready", "--limit", "0")]
    assert got == rules.ready(now)
    assert blocker in got and epic not in got and not inherited & set(got)
