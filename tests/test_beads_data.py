"""The six real beads exports, loaded through the real CLI as read-only rig items.

For each file: ``rig add --items`` accepts it without a warning, every live
line is listed, and ``item ready`` / ``item blocked`` agree with a plain
re-derivation of the beads rules written below from the model's wording
(reference §5), plus a few facts checked by hand in the files.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import pytest

from helpers import Cli, make_repo

# file name → the id prefix its rig routes (text before the first '-' of its ids, as beads uses it)
FILES = {
    "steveyegge__beads.issues.jsonl": "bd",  # Dolt era (2026-02): whole-second Z, metadata strings
    "steveyegge__beads@2026-01-14.issues.jsonl": "bd",  # SQLite era: local offsets, tombstones
    "steveyegge__gastown.issues.jsonl": "gt",
    "steveyegge__gastown@2026-01-07.issues.jsonl": "gt",
    "artifact-keeper__artifact-keeper.issues.jsonl": "artifact-keeper",
    "asermax__ralph-tui.issues.jsonl": "ralph",
}

NOT_WORK = {"merge-request", "gate", "molecule", "message", "agent", "role", "rig"}


# -- the rules, restated ---------------------------------------------------------------


def load(path: Path) -> dict[str, dict]:
    """Every record beads would import: blank/_schema/non-issue lines skipped, tombstones dropped."""
    records = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        if "_schema" in record or record.get("_type", "issue") != "issue":
            continue
        if "wisp" in record and "ephemeral" not in record:
            record["ephemeral"] = record["wisp"]
        records[record["id"]] = record
    return {rid: r for rid, r in records.items() if r.get("status") != "tombstone"}


def epoch(value) -> float | None:
    if not value:
        return None
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def status(record: dict) -> str:
    return record.get("status") or "open"


def finished(record: dict) -> bool:
    """A closed or pinned item holds nothing up and is never blocked."""
    return status(record) in ("closed", "pinned")


def prefix(item_id: str) -> str:
    return item_id.split("-", 1)[0] if "-" in item_id else ""


def edges(record: dict):
    for dep in record.get("dependencies") or []:
        yield dep.get("type") or "blocks", dep["depends_on_id"], dep.get("metadata")


def gate_of(metadata) -> str | None:
    if isinstance(metadata, str) and metadata:
        metadata = json.loads(metadata)
    return metadata.get("gate") if isinstance(metadata, dict) else None


class Rules:
    """ready / blocked for one rig's records, following the beads model step by step."""

    def __init__(self, records: dict[str, dict]):
        self.records = records
        self.children = defaultdict(list)
        for record in records.values():
            for dep_type, target, _meta in edges(record):
                if dep_type == "parent-child" and self.target(record["id"], target):
                    self.children[target].append(record)
        self.memo: dict[str, bool] = {}

    def target(self, source: str, target: str) -> dict | None:
        """An edge only counts when it points at an existing item with the same prefix."""
        if target.startswith("external:") or prefix(target) != prefix(source):
            return None
        return self.records.get(target)

    def gate_holds(self, spawner: str, gate: str | None) -> bool:
        kids = self.children[spawner]
        if not kids:
            return False
        if gate == "any-children" and any(status(k) == "closed" for k in kids):
            return False
        return any(not finished(k) for k in kids)

    def parents(self, record: dict) -> list[dict]:
        found = [self.target(record["id"], t) for ty, t, _m in edges(record) if ty == "parent-child"]
        return [p for p in found if p is not None]

    def is_blocked(self, record: dict, path: frozenset = frozenset()) -> bool:
        rid = record["id"]
        if rid in self.memo:
            return self.memo[rid]
        if finished(record) or rid in path:
            return False
        answer = False
        for dep_type, target_id, meta in edges(record):
            target = self.target(rid, target_id)
            if target is None:
                continue
            if dep_type in ("blocks", "conditional-blocks"):
                answer = answer or not finished(target)
            elif dep_type == "waits-for":
                answer = answer or self.gate_holds(target_id, gate_of(meta))
        if not answer:
            answer = any(self.is_blocked(p, path | {rid}) for p in self.parents(record))
        self.memo[rid] = answer
        return answer

    def ready(self, now: float) -> list[str]:
        deferred_parent_ids = {
            rid for rid, r in self.records.items() if (epoch(r.get("defer_until")) or 0) > now
        }
        out = []
        for record in self.records.values():
            defer = epoch(record.get("defer_until"))
            if (
                status(record) == "open"
                and not record.get("pinned")
                and not self.is_blocked(record)
                and not record.get("ephemeral")
                and (record.get("issue_type") or "task") not in NOT_WORK
                and (defer is None or defer <= now)
                and not any(p["id"] in deferred_parent_ids for p in self.parents(record))
            ):
                out.append(record)
        out.sort(key=lambda r: (priority(r), -(epoch(r["created_at"]) or 0), r["id"]))
        return [r["id"] for r in out]

    def blocked(self) -> dict[str, list[str]]:
        out = {}
        for record in self.records.values():
            if finished(record) or not self.is_blocked(record):
                continue
            own = []
            for dep_type, target_id, _meta in edges(record):
                target = self.target(record["id"], target_id)
                counts = dep_type in ("blocks", "conditional-blocks", "waits-for")
                if counts and target and not finished(target) and target_id not in own:
                    own.append(target_id)
            causes = own or sorted(p["id"] for p in self.parents(record))[:1]
            if causes:
                out[record["id"]] = causes
        return out


def priority(record: dict) -> int:
    value = record.get("priority")
    return value if isinstance(value, int) else 0


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
