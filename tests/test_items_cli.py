"""Every `sluice item` command through the real CLI: flags, JSON shapes, refusals."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from helpers import make_repo
from helpers.foundation import quick_rig
from sluice.store.files.town import Town


def create(cli, *args: str) -> dict:
    return cli.json("item", "create", "alpha", *args)


def issues_file(town_dir: Path) -> Path:
    return town_dir / ".sluice" / "rigs" / "alpha" / "issues.jsonl"


def fails(cli, *args: str, code: int = 1) -> str:
    done = cli.run(*args, check=False)
    assert done.returncode == code, (args, done.returncode, done.stdout, done.stderr)
    assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr
    return done.stderr


# -- create ---------------------------------------------------------------------------------


def test_create_with_every_flag(cli, rig):
    blocker = create(cli, "--title", "blocker")
    epic = create(cli, "--title", "epic", "--type", "epic")
    seen = create(cli, "--title", "seen")
    item = create(
        cli, "--title", "the work", "--priority", "0", "--type", "bug", "--label", "backend",
        "--label", "urgent", "--label", "backend", "--dep", blocker["id"], "--dep", f"related:{seen['id']}",
        "--parent", epic["id"], "--description", "line one\nline two", "--tokens", "1500",
        "--assignee", "ann", "--touches", "src/api/**", "--touches", "docs/*.md",
    )  # fmt: skip
    assert item["id"].startswith("al-") and item["title"] == "the work"
    assert item["priority"] == 0 and item["issue_type"] == "bug" and item["status"] == "open"
    assert item["labels"] == ["backend", "urgent"]
    assert item["description"] == "line one\nline two"
    assert item["metadata"] == {"estimated_tokens": 1500, "touches": ["src/api/**", "docs/*.md"]}
    assert item["assignee"] == "ann"
    assert item["created_at"] == item["updated_at"] and item["created_at"].endswith("Z")
    edges = {(d["type"], d["depends_on_id"]) for d in item["dependencies"]}
    assert edges == {("blocks", blocker["id"]), ("related", seen["id"]), ("parent-child", epic["id"])}
    assert all(d["issue_id"] == item["id"] for d in item["dependencies"])
    assert cli.json("item", "show", item["id"]) == item


def test_create_defaults(cli, rig):
    item = create(cli, "--title", "plain")
    assert item["priority"] == 2 and item["issue_type"] == "task" and item["status"] == "open"
    for absent in ("labels", "dependencies", "metadata", "description", "assignee", "closed_at"):
        assert absent not in item
    assert cli.run("item", "create", "alpha", "--title", "human").stdout.startswith("created al-")


def test_tokens_zero_is_kept(cli, rig):
    assert create(cli, "--title", "free", "--tokens", "0")["metadata"] == {"estimated_tokens": 0}


def test_dep_type_prefix_and_external_targets(cli, rig):
    other = create(cli, "--title", "spawner")
    item = create(cli, "--title", "gate", "--dep", f"waits-for:{other['id']}",
                  "--dep", "external:proj:capability", "--dep", "zz-other-rig")
    assert [(d["type"], d["depends_on_id"]) for d in item["dependencies"]] == [
        ("waits-for", other["id"]), ("blocks", "external:proj:capability"), ("blocks", "zz-other-rig"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (("--title", ""), 2, "title"),
        (("--title", "x" * 501), 2, "500"),
        (("--title", "p", "--priority", "5"), 2, "priority"),
        (("--title", "p", "--priority", "-1"), 2, "priority"),
        (("--title", "p", "--tokens", "-3"), 2, "tokens"),
        (("--title", "p", "--dep", "al-missing"), 1, "al-missing"),
        (("--title", "p", "--parent", "al-missing"), 1, "al-missing"),
        (("--title", "p", "--dep", "blocks:"), 2, "TYPE:ID"),
    ],
)
def test_create_refuses_bad_input(cli, rig, town_dir, args, code, words):
    assert words in fails(cli, "item", "create", "alpha", *args, code=code)
    assert not issues_file(town_dir).exists()


def test_create_refuses_two_edge_types_to_one_target(cli, rig):
    epic = create(cli, "--title", "epic")["id"]
    assert "one edge per pair" in fails(cli, "item", "create", "alpha", "--title", "x", "--dep", epic,
                                        "--parent", epic, code=2)
    same = create(cli, "--title", "twice", "--dep", epic, "--dep", f"blocks:{epic}")
    assert len(same["dependencies"]) == 1


def test_create_in_an_unknown_rig(cli, rig):
    assert "unknown rig 'nope'" in fails(cli, "item", "create", "nope", "--title", "x")


def test_hostile_text_is_stored_verbatim_and_never_executed(cli, rig, town_dir, tmp_path):
    hostile = "$(touch pwned) `touch pwned2`; rm -rf / && echo 'x' \"y\" | tee z"
    description = "${IFS}$(id)\n--json\n\\n \x1b[31mred\x1b[0m ünïcødé ✓"
    item = create(cli, "--title", hostile, "--description", description, "--label", "$(touch pwned3)")
    assert item["title"] == hostile and item["description"] == description
    assert item["labels"] == ["$(touch pwned3)"]
    shown = cli.json("item", "show", item["id"])
    assert shown["title"] == hostile and shown["description"] == description
    assert hostile in cli.run("item", "list").stdout
    for where in (town_dir, tmp_path, tmp_path / "repos" / "alpha", Path.cwd()):
        assert not list(where.glob("pwned*")), where
    raw = issues_file(town_dir).read_text(encoding="utf-8")
    assert raw.count("\n") == 1  # one record, newlines inside it escaped


# -- show / list ----------------------------------------------------------------------------------


def test_show_is_one_object_and_unknown_ids_fail(cli, rig):
    item = create(cli, "--title", "one")
    shown = cli.json("item", "show", item["id"])
    assert isinstance(shown, dict) and shown["id"] == item["id"]
    assert "al-nothing" in fails(cli, "item", "show", "al-nothing")
    assert "zz-nothing" in fails(cli, "item", "show", "zz-nothing")
    human = cli.run("item", "show", item["id"]).stdout
    assert item["id"] in human and "one" in human


def test_list_filters_by_rig_status_and_labels(cli, rig, town_dir, tmp_path):
    from sluice.store.items.rigs import add_rig

    add_rig(Town(town_dir), "beta", make_repo(tmp_path / "repos" / "beta"), "be")
    a = create(cli, "--title", "a", "--label", "x", "--label", "y")
    b = create(cli, "--title", "b", "--label", "x")
    c = cli.json("item", "create", "beta", "--title", "c", "--label", "y")
    cli.run("item", "close", b["id"])

    def ids(*args):
        rows = cli.json("item", "list", *args)
        assert isinstance(rows, list)
        return [r["id"] for r in rows]

    assert sorted(ids()) == sorted([a["id"], b["id"], c["id"]])
    assert ids("alpha") == [a["id"], b["id"]]
    assert ids("beta") == [c["id"]]
    assert ids("--status", "closed") == [b["id"]]
    assert ids("alpha", "--status", "open") == [a["id"]]
    assert ids("--label", "x") == [a["id"], b["id"]]
    assert ids("--label", "x", "--label", "y") == [a["id"]]
    assert ids("--label", "nope") == []
    assert "unknown status" in fails(cli, "item", "list", "--status", "bogus", code=2)
    assert "unknown rig" in fails(cli, "item", "list", "gamma")
    assert cli.run("item", "list", "--label", "nope").stdout.strip() == "no items"


# -- update / close ------------------------------------------------------------------------------


def test_update_changes_fields_and_reopening_clears_the_close(cli, rig):
    item = create(cli, "--title", "u", "--label", "a")
    updated = cli.json("item", "update", item["id"], "--status", "in_progress", "--priority", "1",
                       "--assignee", "bob", "--add-label", "b", "--add-label", "a")
    assert updated["status"] == "in_progress" and updated["priority"] == 1
    assert updated["assignee"] == "bob" and updated["labels"] == ["a", "b"]
    assert updated["updated_at"] >= item["updated_at"]

    closed = cli.json("item", "update", item["id"], "--status", "closed")
    assert closed["status"] == "closed" and closed["closed_at"]
    reopened = cli.json("item", "update", item["id"], "--status", "open")
    assert reopened["status"] == "open"
    assert "closed_at" not in reopened and "close_reason" not in reopened


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (("--status", "bogus"), 2, "unknown status"),
        (("--priority", "9"), 2, "priority"),
        ((), 2, "nothing to update"),
    ],
)
def test_update_refuses_bad_input(cli, rig, args, code, words):
    item = create(cli, "--title", "u")
    assert words in fails(cli, "item", "update", item["id"], *args, code=code)
    assert cli.json("item", "show", item["id"]) == item


def test_update_unknown_item(cli, rig):
    assert "al-none" in fails(cli, "item", "update", "al-none", "--priority", "1")


def test_close_records_reason_and_is_idempotent(cli, rig, town_dir):
    item = create(cli, "--title", "c")
    closed = cli.json("item", "close", item["id"], "--reason", "shipped in v2")
    assert closed["status"] == "closed" and closed["close_reason"] == "shipped in v2"
    assert closed["closed_at"] == closed["updated_at"]
    before = issues_file(town_dir).read_bytes()
    again = cli.json("item", "close", item["id"], "--reason", "other")
    assert again == closed and issues_file(town_dir).read_bytes() == before
    default = cli.json("item", "close", create(cli, "--title", "d")["id"])
    assert default["close_reason"] == "Closed"
    assert "al-none" in fails(cli, "item", "close", "al-none")


# -- dependencies ----------------------------------------------------------------------------------


def test_dep_add_shapes_and_effect(cli, rig):
    a, b = create(cli, "--title", "a")["id"], create(cli, "--title", "b")["id"]
    row = cli.json("item", "dep", "add", a, b)
    assert row == {"issue_id": a, "depends_on_id": b, "type": "blocks", "status": "added"}
    assert [r["id"] for r in cli.json("item", "ready")] == [b]
    assert cli.json("item", "blocked")[0]["blocked_by"] == [b]
    shown = cli.json("item", "show", a)
    assert cli.json("item", "dep", "add", a, b) == {**row, "status": "exists"}  # the same edge again: no-op
    assert "already depends on" in cli.run("item", "dep", "add", a, b).stdout
    assert cli.json("item", "show", a) == shown and len(shown["dependencies"]) == 1
    assert "already depends" in fails(cli, "item", "dep", "add", a, b, "--type", "related")
    human = cli.run("item", "dep", "add", b, "external:p:c", "--type", "tracks").stdout
    assert "now depends on external:p:c" in human


def test_dep_add_refuses_self_edges_and_blocking_cycles(cli, rig):
    a, b, c = (create(cli, "--title", t)["id"] for t in "abc")
    assert "itself" in fails(cli, "item", "dep", "add", a, a)
    cli.run("item", "dep", "add", a, b)
    cli.run("item", "dep", "add", b, c, "--type", "conditional-blocks")
    for dep_type in ("blocks", "conditional-blocks", "waits-for", "parent-child"):
        assert "cycle" in fails(cli, "item", "dep", "add", c, a, "--type", dep_type)
    assert "cycle" in fails(cli, "item", "dep", "add", b, a)
    cli.run("item", "dep", "add", c, a, "--type", "related")  # non-blocking edges may loop
    assert not any(d["type"] != "related" for d in cli.json("item", "show", c).get("dependencies", []))


@pytest.mark.parametrize("target", ["", "   "])
def test_an_empty_dependency_target_is_refused(cli, rig, town_dir, target):
    a = create(cli, "--title", "a")["id"]
    before = issues_file(town_dir).read_bytes()
    assert "non-empty" in fails(cli, "item", "dep", "add", a, target, code=2)
    assert "expected ID or TYPE:ID" in fails(cli, "item", "create", "alpha", "--title", "b", "--dep", target,
                                             code=2)
    assert "expected ID or TYPE:ID" in fails(cli, "item", "create", "alpha", "--title", "b", "--dep",
                                             f"related:{target}", code=2)
    assert issues_file(town_dir).read_bytes() == before


def test_dep_add_unknown_items(cli, rig):
    a = create(cli, "--title", "a")["id"]
    assert "al-missing" in fails(cli, "item", "dep", "add", a, "al-missing")
    assert "al-missing" in fails(cli, "item", "dep", "add", "al-missing", a)
    cli.run("item", "dep", "add", a, "zz-other")  # another prefix: kept, never blocks
    assert [r["id"] for r in cli.json("item", "ready")] == [a]


# -- ready / blocked -----------------------------------------------------------------------------


def test_ready_and_blocked_through_the_cli(cli, rig):
    epic = create(cli, "--title", "epic", "--type", "epic", "--priority", "1")["id"]
    child = create(cli, "--title", "child", "--parent", epic)["id"]
    grandchild = create(cli, "--title", "grandchild", "--parent", child)["id"]
    gate = create(cli, "--title", "gate", "--priority", "0")["id"]
    cli.run("item", "dep", "add", epic, gate)
    assert [r["id"] for r in cli.json("item", "ready")] == [gate]
    rows = {r["id"]: r for r in cli.json("item", "blocked")}
    assert {k: v["blocked_by"] for k, v in rows.items()} == {epic: [gate], child: [epic], grandchild: [child]}
    assert rows[child]["blocked_by_count"] == 1 and rows[child]["title"] == "child"
    cli.run("item", "close", gate)
    assert [r["id"] for r in cli.json("item", "ready")] == [epic, grandchild, child]
    assert cli.json("item", "blocked") == []
    assert cli.run("item", "blocked").stdout.strip() == "no blocked items"


def test_the_blocked_listing_kept_in_the_index_equals_the_one_worked_out(cli, rig, town_dir):
    """`item blocked` reads rows kept written out in the index; they must be what the rows say."""
    from sluice.store.items.index import blocked_line
    from sluice.store.items.rigstore import Stores

    gate = {"id": "al-gate", "title": "gate", "status": "open", "priority": 0}
    lines = [json.dumps(gate)]
    for n, extra in enumerate([{"title": 'says "blocked_by": [] in its title'},  # must not be spliced
                               {"blocked_by": ["stale"], "blocked_by_count": 9},  # its own keys lose
                               {"title": "plain"}, {"title": "naïve ünïcode"}]):
        record = {"id": f"al-{n}", "status": "open", "priority": n % 3, **extra,
                  "dependencies": [{"issue_id": f"al-{n}", "depends_on_id": "al-gate", "type": "blocks"}]}
        lines.append(json.dumps(record, ensure_ascii=False) + "   ")  # trailing blanks: still spliced right
    issues_file(town_dir).write_text("\n".join(lines) + "\n", encoding="utf-8")
    listed = cli.json("item", "blocked")
    store = Stores(Town(town_dir)).rig(rig)
    worked_out = [blocked_line(raw, causes) for _p, _c, _i, raw, causes in store.blocked_raw()]
    assert [json.loads(text) for text in worked_out] == listed
    assert [row[3] for row in store.index.blocked_lines()] == worked_out
    assert all(text.count('"blocked_by_count":') == 1 for text in worked_out)  # never a key twice
    assert [r["id"] for r in listed] == ["al-0", "al-3", "al-1", "al-2"]
    assert all(r["blocked_by"] == ["al-gate"] and r["blocked_by_count"] == 1 for r in listed)
    assert listed[0]["title"] == 'says "blocked_by": [] in its title'


def test_ready_limit(cli, rig):
    for n in range(4):
        create(cli, "--title", f"i{n}")
    assert len(cli.json("item", "ready", "--limit", "2")) == 2
    assert len(cli.json("item", "ready", "--limit", "0")) == 4
    assert "limit" in fails(cli, "item", "ready", "--limit", "-1", code=2)
    assert len(cli.json("item", "ready", "--limit", str(10**30))) == 4  # more than SQLite counts: all


def test_ready_text_copes_with_null_fields_of_a_record_as_stored(cli, rig, town_dir):
    issues_file(town_dir).write_text(
        '{"id": "al-raw", "title": null, "status": null, "priority": null, "issue_type": null}\n'
    )
    done = cli.run("item", "ready")
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.split() == ["al-raw", "P0", "open"]


def test_update_and_close_change_the_version_readers_see(cli, rig, town_dir):
    """A hand-edited store may hold an id twice; the last line is the record, so it is the one to change."""
    old = {"id": "al-twice", "title": "old", "status": "open", "priority": 2}
    new = {**old, "title": "new"}
    issues_file(town_dir).write_text(json.dumps(old) + "\n" + json.dumps(new) + "\n")
    assert cli.json("item", "update", "al-twice", "--priority", "0")["title"] == "new"
    assert cli.json("item", "show", "al-twice")["priority"] == 0
    cli.run("item", "close", "al-twice")
    assert cli.json("item", "show", "al-twice")["status"] == "closed"
    assert cli.json("item", "ready") == []


# -- import ----------------------------------------------------------------------------------------


def test_import_upserts_and_drops_tombstones(cli, rig, tmp_path, town_dir):
    export = tmp_path / "export.jsonl"
    rows = [
        {"id": "al-one", "title": "one", "status": "open", "priority": 1,
         "created_at": "2026-01-01T00:00:00Z"},
        {"id": "al-gone", "title": "gone", "status": "tombstone", "created_at": "2026-01-01T00:00:00Z"},
        {"id": "al-wisp-1", "title": "w", "wisp": True, "created_at": "2026-01-01T00:00:00Z"},
    ]
    export.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert cli.json("item", "import", "alpha", str(export)) == {
        "rig": "alpha", "added": 2, "updated": 0, "skipped_tombstones": 1,
    }  # fmt: skip
    assert cli.json("item", "show", "al-wisp-1")["ephemeral"] is True  # legacy `wisp` read as ephemeral
    assert cli.json("item", "show", "al-one")["issue_type"] == "task"  # beads' import default
    rows[0]["title"] = "one, again"
    export.write_text(json.dumps(rows[0]) + "\n")
    summary = cli.run("item", "import", "alpha", str(export)).stdout
    assert "0 added, 1 updated" in summary
    assert cli.json("item", "show", "al-one")["title"] == "one, again"
    assert sorted(r["id"] for r in cli.json("item", "list")) == ["al-one", "al-wisp-1"]


def test_import_refuses_missing_and_corrupt_files(cli, rig, tmp_path, town_dir):
    assert "no such file" in fails(cli, "item", "import", "alpha", str(tmp_path / "none.jsonl"), code=1)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "al-1", "title": "ok"}\n{broken\n{"id": "al-2", "title": "ok"}\n')
    assert f"{bad}:2:" in fails(cli, "item", "import", "alpha", str(bad))
    assert not issues_file(town_dir).exists()
    assert "unknown rig" in fails(cli, "item", "import", "nope", str(bad))


def test_ready_and_blocked_merge_rigs_in_beads_order(cli, rig, town_dir, tmp_path):
    quick_rig(town_dir, tmp_path, "beta", "be")
    a2 = create(cli, "--title", "a2", "--priority", "2")["id"]
    b1 = cli.json("item", "create", "beta", "--title", "b1", "--priority", "1")["id"]
    a1 = create(cli, "--title", "a1", "--priority", "1")["id"]  # newer than b1: first among P1
    b3 = cli.json("item", "create", "beta", "--title", "b3", "--priority", "3")["id"]
    assert [r["id"] for r in cli.json("item", "ready")] == [a1, b1, a2, b3]
    assert [r["id"] for r in cli.json("item", "ready", "--limit", "2")] == [a1, b1]
    assert [r["id"] for r in cli.json("item", "ready", "beta")] == [b1, b3]
    cli.run("item", "dep", "add", b3, b1)
    cli.run("item", "dep", "add", a2, a1)
    assert [r["id"] for r in cli.json("item", "blocked")] == [a2, b3]


DOCUMENTED = [
    ("init",), ("rig", "add"), ("rig", "list"), ("item", "create"), ("item", "show"), ("item", "list"),
    ("item", "ready"), ("item", "blocked"), ("item", "update"), ("item", "close"), ("item", "dep", "add"),
    ("item", "import"), ("config", "get"), ("config", "set"),
]  # fmt: skip


@pytest.mark.parametrize("command", DOCUMENTED, ids=" ".join)
def test_every_command_and_flag_is_in_the_docs(cli, command):
    docs = (Path(__file__).resolve().parents[1] / "docs" / "items.md").read_text(encoding="utf-8")
    assert f"`sluice {' '.join(command)}" in docs
    helptext = cli.run(*command, "--help", env={"COLUMNS": "200"}).stdout
    assert "--help" in helptext
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", helptext)) - {"--help"}
    for flag in sorted(flags):
        assert flag in docs, f"{' '.join(command)} {flag} is not documented in docs/items.md"
