"""The per-rig store under real processes and real damage.

Concurrent writers (CLI processes and library processes), strict reading
(malformed line ⇒ error naming file:line, nothing rewritten), torn last lines,
unknown keys, read-only rigs and the derived index.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import Cli, make_repo
from sluice.errors import StoreCorrupt
from sluice.store.files.town import Town
from sluice.store.items.index import DurableIndex
from sluice.store.items.rigstore import RigStore, Stores, read_jsonl

WORKERS = 8


def issues_path(town: Path, rig: str = "alpha") -> Path:
    return town / ".sluice" / "rigs" / rig / "issues.jsonl"


def store_of(town: Path, rig: str = "alpha") -> RigStore:
    return Stores(Town(town)).rig(rig)


def record(item_id: str, title: str = "t", **extra) -> dict:
    return {"id": item_id, "title": title, "status": "open", "priority": 2, "issue_type": "task",
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z", **extra}


def write_lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def valid_jsonl(path: Path) -> list[dict]:
    data = path.read_bytes()
    assert data.endswith(b"\n")
    return [json.loads(line) for line in data.decode().splitlines()]


# -- concurrency -------------------------------------------------------------------------


@pytest.mark.slow
def test_concurrent_cli_creates_all_land(cli, rig, town_dir):
    env = {**os.environ, "SLUICE_TOWN": str(town_dir)}
    procs = [
        subprocess.Popen([sys.executable, "-m", "sluice", "item", "create", rig, "--title", f"parallel {n}",
                          "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for n in range(WORKERS)
    ]
    created = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        created.append(json.loads(out)["id"])
    assert len(set(created)) == WORKERS
    lines = valid_jsonl(issues_path(town_dir))
    assert sorted(r["id"] for r in lines) == sorted(created)
    assert {r["title"] for r in lines} == {f"parallel {n}" for n in range(WORKERS)}


def _create_many(town: str, worker: int, count: int) -> list[str]:
    from sluice.store.items.tracker import NewItem, create_item

    the_town = Town(Path(town))
    return [create_item(the_town, "alpha", NewItem(title=f"w{worker}-{n}"))["id"] for n in range(count)]


def _pool():
    return multiprocessing.get_context("fork").Pool(WORKERS)


def test_concurrent_library_creates_all_land(rig, town_dir):
    with _pool() as pool:
        results = pool.starmap(_create_many, [(str(town_dir), w, 6) for w in range(WORKERS)])
    ids = [i for chunk in results for i in chunk]
    assert len(set(ids)) == WORKERS * 6
    on_disk = valid_jsonl(issues_path(town_dir))
    assert sorted(r["id"] for r in on_disk) == sorted(ids)
    assert len(store_of(town_dir).durable()) == WORKERS * 6


def _read_repeatedly(town: str, rounds: int) -> int:
    seen = 0
    for _ in range(rounds):
        store = Stores(Town(Path(town))).rig("alpha")
        seen = max(seen, len(store.durable()))
    return seen


def test_readers_never_see_a_half_written_durable_file(rig, town_dir):
    with _pool() as pool:
        readers = [pool.apply_async(_read_repeatedly, (str(town_dir), 40)) for _ in range(3)]
        writers = [pool.apply_async(_create_many, (str(town_dir), w, 8)) for w in range(4)]
        for job in writers:
            job.get(timeout=120)
        for job in readers:
            assert job.get(timeout=120) <= 32  # and no StoreCorrupt was raised on the way
    assert len(store_of(town_dir).durable()) == 32


# -- strict reading ------------------------------------------------------------------------

CORRUPTING_COMMANDS = [
    ("item", "list"),
    ("item", "list", "alpha"),
    ("item", "ready"),
    ("item", "blocked"),
    ("item", "show", "al-one"),
    ("item", "create", "alpha", "--title", "new"),
    ("item", "update", "al-one", "--priority", "1"),
    ("item", "close", "al-one"),
    ("item", "dep", "add", "al-one", "al-three"),
]


@pytest.fixture
def corrupt_durable(rig, town_dir):
    path = issues_path(town_dir)
    good = [json.dumps(record("al-one")), json.dumps(record("al-two")), json.dumps(record("al-three"))]
    write_lines(path, [good[0], '{"id": "al-two", "title": "cut', good[2]])
    return path, good


@pytest.mark.parametrize("argv", CORRUPTING_COMMANDS, ids=lambda a: " ".join(a[:3]))
def test_malformed_middle_line_fails_naming_file_and_line_and_rewrites_nothing(cli, corrupt_durable, argv):
    path, _good = corrupt_durable
    before = path.read_bytes()
    stat = path.stat()
    done = cli.run(*argv, check=False)
    assert done.returncode == 1
    assert f"{path}:2:" in done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert path.read_bytes() == before
    assert path.stat().st_mtime_ns == stat.st_mtime_ns


def test_repairing_the_line_brings_every_record_back(cli, corrupt_durable):
    path, good = corrupt_durable
    assert cli.run("item", "list", check=False).returncode == 1
    write_lines(path, good)
    assert [r["id"] for r in cli.json("item", "list")] == ["al-one", "al-two", "al-three"]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"title": "no id"}', "no string 'id'"),
        ("[1, 2]", "not a JSON object"),
        ('{"id": 7}', "no string 'id'"),
        ('{"id": "al-x", "labels": 5}', "labels is not a list"),
        ('{"id": "al-x", "dependencies": {"al-one": "blocks"}}', "dependencies is not a list"),
        ('{"id": "al-x", "dependencies": ["al-one"]}', "dependencies[0] is not an object"),
        ('{"id": "al-x", "status": ["open"]}', "status is not a string"),
        ('{"id": "al-x", "issue_type": {"t": 1}}', "issue_type is not a string"),
        ('{"id": "al-x", "assignee": 3}', "assignee is not a string"),
    ],
)
def test_records_that_are_not_items_are_errors(cli, rig, town_dir, line, problem):
    path = issues_path(town_dir)
    write_lines(path, [json.dumps(record("al-one")), line])
    for argv in (("item", "list"), ("item", "ready"), ("item", "blocked"), ("schedule", "next", "--preview")):
        done = cli.run(*argv, check=False)
        assert done.returncode == 1, argv
        assert f"{path}:2:" in done.stderr and problem in done.stderr
        assert "internal error" not in done.stderr


@pytest.mark.parametrize("name", ["issues.jsonl"])
def test_a_store_file_the_system_cannot_read_is_named_not_an_internal_error(cli, rig, town_dir, name):
    blocker = town_dir / ".sluice" / "rigs" / "alpha" / name
    blocker.mkdir(parents=True)  # a directory where the file belongs
    done = cli.run("item", "ready", check=False)
    assert done.returncode == 1
    assert done.stderr == f"error: {blocker}: Is a directory\n"


def test_a_token_estimate_too_big_for_the_index_is_the_most_expensive_not_a_crash(cli, rig, town_dir):
    huge = 10**30
    write_lines(issues_path(town_dir), [
        json.dumps({**record("al-huge"), "metadata": {"estimated_tokens": huge}}),
        json.dumps(record("al-plain")),
    ])  # fmt: skip
    assert {r["id"] for r in cli.json("item", "ready")} == {"al-huge", "al-plain"}
    decisions = cli.json("schedule", "next", "--preview", "--limit", "2")
    assert [d["node_id"] for d in decisions] == ["al-plain", "al-huge"]
    assert decisions[1]["reasons"][2] == f"cost=0.0000(tokens={2**63 - 1})"


def test_blank_schema_and_memory_lines_are_skipped(cli, rig, town_dir):
    write_lines(issues_path(town_dir), [
        '{"_schema": "beads-jsonl/1"}', "", json.dumps({**record("al-one"), "_type": "issue"}),
        '{"_type": "memory", "key": "k", "value": "v"}', "   ",
    ])  # fmt: skip
    assert [r["id"] for r in cli.json("item", "list")] == ["al-one"]


def test_torn_last_line_of_the_durable_file_is_ignored_with_a_warning(cli, rig, town_dir):
    path = issues_path(town_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes((json.dumps(record("al-one")) + "\n" + '{"id": "al-two", "ti').encode())
    done = cli.run("item", "list", "--json")
    assert [r["id"] for r in json.loads(done.stdout)] == ["al-one"]
    assert f"{path}:2" in done.stderr and "torn" in done.stderr


# -- rewrites ---------------------------------------------------------------------------------


def test_unknown_keys_survive_a_rewrite(cli, rig, town_dir, tmp_path):
    export = tmp_path / "export.jsonl"
    odd = {**record("al-odd"), "_type": "issue", "content_hash": "abc123", "x_custom": {"nested": [1, 2]},
           "metadata": "{\"estimated_tokens\": 5}", "comments": [{"id": 1, "text": "hi"}], "source_repo": "."}
    other = {**record("al-other"), "design": "keep me", "compaction_level": 2}
    write_lines(export, [json.dumps(odd), json.dumps(other)])
    cli.run("item", "import", rig, str(export))

    cli.run("item", "update", "al-odd", "--status", "in_progress", "--assignee", "me")
    cli.run("item", "close", "al-other", "--reason", "done")
    on_disk = {r["id"]: r for r in valid_jsonl(issues_path(town_dir))}
    for key in ("_type", "content_hash", "x_custom", "metadata", "comments", "source_repo"):
        assert on_disk["al-odd"][key] == odd[key], key
    assert on_disk["al-odd"]["status"] == "in_progress" and on_disk["al-odd"]["assignee"] == "me"
    assert on_disk["al-other"]["design"] == "keep me" and on_disk["al-other"]["compaction_level"] == 2
    assert on_disk["al-other"]["close_reason"] == "done"
    assert cli.json("item", "show", "al-odd")["x_custom"] == {"nested": [1, 2]}


def test_a_rewrite_leaves_no_temporary_files(cli, rig, town_dir):
    cli.run("item", "create", rig, "--title", "one")
    assert sorted(p.name for p in issues_path(town_dir).parent.iterdir()) == ["issues.jsonl"]


@pytest.fixture(params=["--items", "auto-detected"])
def read_only_rig(request, cli, tmp_path, beads_data):
    """A rig whose items are a beads export, given with --items or found at .beads/issues.jsonl."""
    export_text = (beads_data / "artifact-keeper__artifact-keeper.issues.jsonl").read_text()
    repo = tmp_path / "repos" / "ak"
    if request.param == "--items":
        make_repo(repo)
        export = tmp_path / "export.jsonl"
        export.write_text(export_text)
        row = cli.json("rig", "add", "ak", str(repo), "--prefix", "artifact-keeper", "--items", str(export))
    else:
        (repo / ".beads").mkdir(parents=True)
        make_repo(repo, {".beads/issues.jsonl": export_text})
        export = repo / ".beads" / "issues.jsonl"
        row = cli.json("rig", "add", "ak", str(repo), "--prefix", "artifact-keeper")
    assert row["read_only"] is True and Path(row["items"]) == export.resolve()
    return export


@pytest.mark.parametrize(
    "argv",
    [
        ("item", "create", "ak", "--title", "x"),
        ("item", "update", "artifact-keeper-01d", "--priority", "0"),
        ("item", "close", "artifact-keeper-01d"),
        ("item", "close", "artifact-keeper-07f"),  # already closed: still refused, not a silent success
        ("item", "dep", "add", "artifact-keeper-01d", "artifact-keeper-3k9", "--type", "related"),
        ("item", "import", "ak", "{export}"),
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_writes_to_a_read_only_rig_are_refused(cli, read_only_rig, argv):
    export = read_only_rig
    before = export.read_bytes()
    done = cli.run(*[a.format(export=export) for a in argv], check=False)
    assert done.returncode == 1
    assert "read-only" in done.stderr and str(export.resolve()) in done.stderr
    assert "Traceback" not in done.stderr
    assert export.read_bytes() == before
    assert cli.json("item", "show", "artifact-keeper-01d")["priority"] == 4


def test_a_vanished_export_is_an_error_not_an_empty_rig(cli, read_only_rig):
    """Read as empty, every queued context for its items would look orphaned and be closed."""
    export = read_only_rig
    assert cli.json("item", "show", "artifact-keeper-01d")["priority"] == 4  # indexed while it was there
    text = export.read_bytes()
    export.unlink()
    for argv in (("item", "list", "ak"), ("item", "ready"), ("schedule", "next", "--preview")):
        done = cli.run(*argv, check=False)
        assert done.returncode == 1, argv
        assert str(export.resolve()) in done.stderr and "does not exist" in done.stderr
    export.write_bytes(text)
    assert cli.json("item", "show", "artifact-keeper-01d")["priority"] == 4


# -- the derived index --------------------------------------------------------------------------


def test_index_follows_hand_edits_of_the_file(cli, rig, town_dir):
    path = issues_path(town_dir)
    write_lines(path, [json.dumps(record("al-one", "before")), json.dumps(record("al-two"))])
    assert [r["id"] for r in cli.json("item", "ready")] == ["al-one", "al-two"]
    assert cli.json("item", "show", "al-one")["title"] == "before"

    write_lines(path, [json.dumps(record("al-one", "after", status="closed")), json.dumps(record("al-two")),
                       json.dumps(record("al-three", priority=0))])
    assert cli.json("item", "show", "al-one")["title"] == "after"
    assert [r["id"] for r in cli.json("item", "ready")] == ["al-three", "al-two"]
    # same size, new content: the mtime alone gives it away
    text = path.read_text().replace('"al-two", "title": "t"', '"al-two", "title": "u"')
    path.write_text(text)
    assert cli.json("item", "show", "al-two")["title"] == "u"


def test_deleting_or_damaging_the_index_loses_nothing(cli, rig, town_dir):
    for n in range(3):
        cli.run("item", "create", rig, "--title", f"item {n}", "--priority", str(n))
    index = town_dir / ".sluice" / "runtime" / "index" / "alpha.sqlite"
    listed, ready = cli.json("item", "list"), cli.json("item", "ready")
    assert index.is_file()
    index.unlink()
    assert cli.json("item", "list") == listed and cli.json("item", "ready") == ready
    index.write_bytes(b"this is not a database")
    assert cli.json("item", "list") == listed and cli.json("item", "blocked") == []
    assert index.read_bytes().startswith(b"SQLite format 3")


def test_read_jsonl_reports_line_numbers_of_records(tmp_path):
    path = tmp_path / "f.jsonl"
    header = '{"_schema": "beads-jsonl/1"}'
    write_lines(path, ["", json.dumps(record("x-1")), header, json.dumps(record("x-2"))])
    assert [(n, r["id"]) for n, r, _raw in read_jsonl(path)] == [(2, "x-1"), (4, "x-2")]
    assert list(read_jsonl(tmp_path / "missing.jsonl")) == []


def test_a_second_town_process_sees_writes_of_the_first(rig, town_dir):
    first, second = store_of(town_dir), store_of(town_dir)
    assert second.durable() == []
    Cli(town_dir).run("item", "create", rig, "--title", "from the cli")
    second.refresh()
    assert len(second.durable()) == 1 and first.durable() == second.durable()


def _index_over(tmp_path: Path, reads) -> DurableIndex:
    """An index of ``tmp_path/items.jsonl`` whose loader runs ``reads`` one per rebuild."""
    source = tmp_path / "items.jsonl"
    calls = iter(reads)

    def load():
        yield from next(calls)(source)

    return DurableIndex(tmp_path / "index.sqlite", source, load)


def test_a_file_rewritten_while_it_is_read_is_read_again(tmp_path):
    """An export rewritten in place can be caught half-way; the index must not keep that half."""
    whole = [json.dumps(record(f"x-{n}")) for n in range(3)]
    write_lines(tmp_path / "items.jsonl", whole[:1])

    def caught_half_way(source):
        yield record("x-0"), whole[0]
        write_lines(source, whole)  # the writer finishes while we read: the signature moves

    def settled(source):
        for _n, rec, raw in read_jsonl(source):
            yield rec, raw

    index = _index_over(tmp_path, [caught_half_way, settled])
    assert index.ids() == {"x-0", "x-1", "x-2"}


def test_a_spliced_line_from_a_rewrite_is_read_again_not_reported(tmp_path):
    whole = [json.dumps(record(f"x-{n}")) for n in range(2)]
    write_lines(tmp_path / "items.jsonl", whole)

    def spliced(source):
        write_lines(source, [*whole, json.dumps(record("x-2"))])
        raise StoreCorrupt(source, 2, "malformed record (a line from two versions)")
        yield  # pragma: no cover - a generator

    def settled(source):
        for _n, rec, raw in read_jsonl(source):
            yield rec, raw

    assert _index_over(tmp_path, [spliced, settled]).ids() == {"x-0", "x-1", "x-2"}


def test_damage_that_stays_put_is_reported_at_once(tmp_path):
    write_lines(tmp_path / "items.jsonl", ['{"id": broken'])
    reads = []

    def damaged(source):
        reads.append(source)
        yield from ((rec, raw) for _n, rec, raw in read_jsonl(source))

    with pytest.raises(StoreCorrupt, match=r"items\.jsonl:1"):
        _index_over(tmp_path, [damaged, damaged, damaged]).ids()
    assert len(reads) == 1


@pytest.mark.parametrize("bad", ["high", 9, -1, 1.5, True, 100000000000000000000000])
def test_a_priority_outside_0_to_4_is_warned_about_and_ranks_as_the_default(cli, rig, town_dir, bad):
    path = issues_path(town_dir)
    write_lines(path, [json.dumps(record("al-bad", priority=bad, created_at="2025-01-01T00:00:00Z")),
                       json.dumps(record("al-p0", priority=0)), json.dumps(record("al-p3", priority=3))])
    for argv in (("item", "ready", "--json"), ("schedule", "next", "--preview", "--limit", "3", "--json")):
        done = cli.run(*argv)
        assert f"{path}:1: record al-bad: priority" in done.stderr and "default 2" in done.stderr, argv
    ready = [row["id"] for row in cli.json("item", "ready")]
    assert ready == ["al-p0", "al-bad", "al-p3"]  # never above a real P0
    ranked = [d["node_id"] for d in cli.json("schedule", "next", "--preview", "--limit", "3")]
    assert ranked == ["al-p0", "al-bad", "al-p3"]
    assert " P2 " in next(line for line in cli.run("item", "ready").stdout.splitlines() if "al-bad" in line)


def test_a_line_nested_too_deeply_to_parse_is_a_corrupt_line_naming_file_and_line(tmp_path):
    """json raises RecursionError, not ValueError, on deep nesting; it is still just a bad line."""
    path = tmp_path / "issues.jsonl"
    path.write_text('{"id": "a-1"}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(StoreCorrupt, match=f"{path}:2"):
        list(read_jsonl(path))
    path.write_text('{"id": "a-1"}\n' + "[" * 100_000)  # and as a torn last line it is skipped
    assert [record["id"] for _n, record, _raw in read_jsonl(path)] == ["a-1"]


def test_many_bad_priorities_are_summarised_not_flooded(cli, rig, town_dir):
    write_lines(issues_path(town_dir), [json.dumps(record(f"al-{n}", priority="high")) for n in range(60)])
    for _ in range(2):  # the rebuild and a later read say the same
        err = cli.run("item", "ready", "--limit", "1").stderr
        assert err.count("is not an integer 0-4") == 20 and "40 more warning(s) like these" in err


def test_ready_groups_count_deferred_candidates_by_the_clock(town_dir, rig):
    """Kept counts for undeferred candidates plus a live count of deferred ones: the same as counting all."""
    def pc(child: str, parent: str) -> list[dict]:
        return [{"issue_id": child, "depends_on_id": parent, "type": "parent-child"}]

    write_lines(issues_path(town_dir), [json.dumps(r) for r in [
        record("al-1", priority=1),
        record("al-2", priority=1, defer_until="2030-01-01T00:00:00Z"),
        record("al-3", priority=1, defer_until="2020-01-01T00:00:00Z", metadata={"estimated_tokens": 900}),
        record("al-ep", issue_type="epic", defer_until="2030-06-01T00:00:00Z"),
        record("al-4", priority=3, dependencies=pc("al-4", "al-ep")),
        record("al-5", priority=3, status="closed"),
    ]])
    index = store_of(town_dir).index
    facts = {i: (p, t) for i, p, t in index.conn().execute("SELECT id, priority, tokens FROM items")}
    for year in (2025, 2030.3, 2031):
        now = (year - 1970) * 365.25 * 86400
        expected: dict[tuple[int, int], int] = {}
        for row in index.ready_rows(now):
            expected[facts[row[2]]] = expected.get(facts[row[2]], 0) + 1
        assert {(p, t): n for p, t, n in index.ready_groups(now)} == expected
        assert index.ready_count(now) == len(index.ready_rows(now))
    assert index.ready_count((2025 - 1970) * 365.25 * 86400) == 2  # al-1 and al-3
    assert index.ready_count((2031 - 1970) * 365.25 * 86400) == 5  # al-2, the epic and its child too


def test_answers_kept_beside_the_index_hold_for_their_file_and_until_the_next_deferral_ends(town_dir, rig,
                                                                                              caplog):
    """A one-shot command reads a rig's ready counts and merge queue from ``<index>.answers.json``
    without opening the index; whatever order the clock and the file move in, the answer is the
    index's own."""
    year = lambda y: (y - 1970) * 365.25 * 86400  # noqa: E731
    records = [record("al-1", priority=1), record("al-2", priority=1, defer_until="2030-01-01T00:00:00Z"),
               record("al-3", priority=2, defer_until="2028-01-01T00:00:00Z"),
               record("al-mr", issue_type="merge-request"), record("al-mr2", issue_type="merge-request",
                                                                   status="in_progress")]
    write_lines(issues_path(town_dir), [json.dumps(r) for r in records])

    def counted(now: float) -> list[tuple[int, int, int]]:  # the index asked directly, by a fresh open
        index = store_of(town_dir).index
        facts = {i: (p, t) for i, p, t in index.conn().execute("SELECT id, priority, tokens FROM items")}
        groups: dict[tuple[int, int], int] = {}
        for row in index.ready_rows(now):
            groups[facts[row[2]]] = groups.get(facts[row[2]], 0) + 1
        return sorted((p, t, n) for (p, t), n in groups.items())

    for y in (2025, 2026, 2029, 2031, 2025, 2028.5, 2031):  # forwards past two deferrals, then back
        fresh = store_of(town_dir).index
        assert sorted(fresh.ready_groups(year(y))) == counted(year(y)), y
    served = store_of(town_dir).index
    assert sorted(served.ready_groups(year(2031))) == counted(year(2031))
    assert served.status_counts("merge-request") == {"open": 1, "in_progress": 1}
    served = store_of(town_dir).index
    assert served.status_counts("merge-request") == {"open": 1, "in_progress": 1}
    assert sorted(served.ready_groups(year(2031))) == counted(year(2031))
    assert served._conn is None  # both from the kept answers: the index was never opened
    answers = store_of(town_dir).index._answers_path

    # The file changes: the kept answers are another file's, so the index is asked again.
    write_lines(issues_path(town_dir), [json.dumps(r) for r in [*records, record("al-4", priority=3),
                                                              record("al-mr3", issue_type="merge-request")]])
    served = store_of(town_dir).index
    assert (3, 0, 1) in [(p, 0, n) for p, _t, n in served.ready_groups(year(2031))]
    assert store_of(town_dir).index.status_counts("merge-request") == {"open": 2, "in_progress": 1}
    # Kept answers that are cut short or not ours are no answers.
    for damaged in (b'{"version": 1, "sch', b"[]", json.dumps({**json.loads(answers.read_bytes()),
                                                            "version": 99}).encode()):
        answers.write_bytes(damaged)
        assert sorted(store_of(town_dir).index.ready_groups(year(2031))) == counted(year(2031))
        assert json.loads(answers.read_bytes())["version"] == 1  # and kept again, whole

    # A torn last line is said by every command, the ones answered from the kept answers too.
    with issues_path(town_dir).open("a") as fh:
        fh.write('{"id": "al-torn", "tit')
    assert sorted(store_of(town_dir).index.ready_groups(year(2031))) == counted(year(2031))
    caplog.clear()
    served = store_of(town_dir).index
    served.ready_groups(year(2031))
    assert served._conn is None and any("al-torn" in r.getMessage() or "issues.jsonl" in r.getMessage()
                                        for r in caplog.records)


def test_a_file_lock_waits_times_out_and_dies_with_its_holder(tmp_path):
    """Two holders never overlap; a busy lock is LockBusy after its timeout; kill -9 frees it."""
    import signal
    import subprocess
    import sys
    import time

    from sluice.errors import LockBusy
    from sluice.store.files.fsutil import file_lock

    path = tmp_path / "runtime" / "x.lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom sluice.store.files.fsutil import file_lock\n"
        f"with file_lock({str(path)!r}):\n    print('held', flush=True)\n    time.sleep(60)\n")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        began = time.monotonic()
        with pytest.raises(LockBusy, match=r"x\.lock"), file_lock(path, timeout=0.3):
            pass
        assert time.monotonic() - began >= 0.3
        with pytest.raises(LockBusy), file_lock(path, timeout=0):
            pass
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        with file_lock(path, timeout=5) as lock:  # the kernel dropped the dead holder's lock
            with pytest.raises(LockBusy), file_lock(path, timeout=0):  # another lock in this process
                pass
            with pytest.raises(RuntimeError, match="already held"):
                lock.acquire()
        with file_lock(path, timeout=0):  # released on leaving: free at once
            pass
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
