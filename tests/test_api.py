"""The Python API: a whole town driven through ``sluice.open_town`` alone, with no process started.

The rigs are real git repositories (made with pygit2, not the git program),
the stores are real files, and polecats are the in-memory executor's records.
Starting any subprocess fails these tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pygit2
import pytest

import sluice
from helpers.scheduler import without_etas
from sluice.errors import InvalidOperation, SluiceError, UnknownRig, UsageError
from sluice.executors.memory import MemoryExecutor


def _repo(path: Path) -> Path:
    """A git repository with one commit, made in-process."""
    repo = pygit2.init_repository(str(path), initial_head="main")
    (path / "README.md").write_text("rig\n")
    repo.index.add("README.md")
    repo.index.write()
    who = pygit2.Signature("Test", "test@example.invalid")
    repo.create_commit("HEAD", who, who, "initial", repo.index.write_tree(), [])
    return path


@pytest.fixture
def no_processes(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"a process was started: {args!r}")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(subprocess, "run", refuse)


@pytest.fixture
def two_rig_api(town_dir, no_processes) -> sluice.Town:
    """The facade over rigs ``api`` and ``web``, its polecats an injected in-memory executor's records."""
    town = sluice.open_town(town_dir, executor=MemoryExecutor())
    town.add_rig("api", _repo(town_dir.parent / "api"), prefix="api")
    town.add_rig("web", _repo(town_dir.parent / "web"), prefix="web")
    return town


def test_import_sluice_is_cheap():
    """``import sluice`` loads none of the heavy libraries; the API arrives on first use."""
    code = ("import sys, sluice; heavy = ('typer', 'rich', 'pydantic', 'pygit2', 'sluice.api');"
            " print([m for m in heavy if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_whole_town_through_the_facade(two_rig_api):
    memory = two_rig_api.executor
    assert [r.name for r in two_rig_api.rigs()] == ["api", "web"]
    two_rig_api.config_set("scheduler.max_polecats", "2")
    two_rig_api.config_set("scheduler.batch_size", "5")
    assert two_rig_api.config_get("scheduler.max_polecats") == 2

    urgent = two_rig_api.create_item("api", "urgent fix", priority=0)
    later = two_rig_api.create_item("api", "later", priority=3)
    blocker = two_rig_api.create_item("web", "web blocker", priority=1)
    waiting = two_rig_api.create_item("web", "waits on the blocker", priority=0, deps=[blocker["id"]])
    assert {i["id"] for i in two_rig_api.ready()} == {urgent["id"], later["id"], blocker["id"]}
    assert [row["id"] for row in two_rig_api.blocked()] == [waiting["id"]]

    slung = two_rig_api.sling([urgent["id"], later["id"], blocker["id"], waiting["id"]], formula="fix")
    assert slung.ok and slung.mode == "deferred"
    assert [row["item_id"] for row in slung.scheduled] == [urgent["id"], later["id"], blocker["id"],
                                                           waiting["id"]]
    again = two_rig_api.sling([urgent["id"]])
    assert [row["item_id"] for row in again.already] == [urgent["id"]] and not again.scheduled

    queue = two_rig_api.list()
    assert len(queue) == 4
    assert [e.id for e in queue if e.blocked] == [waiting["id"]]
    assert queue.entries[0].id == urgent["id"]  # P0 first

    assert two_rig_api.explain(urgent["id"]).would_dispatch
    why = two_rig_api.explain(waiting["id"])
    assert why.queued and not why.would_dispatch and why.codes  # blocked: it says why

    preview = two_rig_api.run_cycle(dry_run=True)
    assert [row["item_id"] for row in preview.planned] == [urgent["id"], blocker["id"]]
    assert memory.requests == []  # a dry run launches nothing

    report = two_rig_api.run_cycle()
    assert report.dispatched == 2 and report.reason == "capacity"
    assert {r.item_id for r in memory.requests} == {urgent["id"], blocker["id"]}
    assert memory.requests[0].env["SLUICE_FORMULA"] == "fix"
    status = two_rig_api.status()
    assert (status.active_polecats, status.capacity, status.queued_total) == (2, 0, 2)
    assert status.last_dispatch_count == 2

    # The blocker's polecat finishes and its item is closed: the waiting item becomes ready.
    memory.finish(blocker["id"])
    two_rig_api.close_item(blocker["id"], "done")
    assert two_rig_api.status().capacity == 1
    assert two_rig_api.pause().changed and two_rig_api.status().paused
    paused = two_rig_api.run_cycle()
    assert paused.paused and paused.dispatched == 0
    assert two_rig_api.resume().changed and not two_rig_api.status().paused
    report = two_rig_api.run_cycle()
    assert [row["item_id"] for row in report.launched] == [waiting["id"]]

    cleared = two_rig_api.clear(later["id"])
    assert cleared.cleared == 1 and cleared.contexts[0]["item_id"] == later["id"]
    assert len(two_rig_api.list()) == 0
    assert two_rig_api.patrol("api").rows("queued") == []
    rows = two_rig_api.polecats()
    assert {row["item_id"] for row in rows} == {urgent["id"], blocker["id"], waiting["id"]}
    stopped = two_rig_api.stop_polecat(urgent["id"])
    assert stopped[0]["stopped"] is True
    assert two_rig_api.status().active_polecats == 1


def test_to_json_is_the_documents_shape(two_rig_api):
    """Typed attributes read the same document ``to_json`` returns."""
    two_rig_api.config_set("scheduler.max_polecats", "1")
    item = two_rig_api.create_item("api", "one")
    two_rig_api.sling([item["id"]])
    status = two_rig_api.status()
    doc = status.to_json()
    assert doc["queued_total"] == status.queued_total == 1
    assert status.items[0].to_json() is doc["items"][0]
    assert json.loads(json.dumps(doc)) == doc  # plain JSON values only
    decisions = two_rig_api.next(limit=1, preview=True)
    assert decisions[0].node_id == item["id"] and decisions.to_json()[0]["node_id"] == item["id"]
    assert two_rig_api.policy().weights["priority"] == 1.0
    assert two_rig_api.set_policy(merge_queue_threshold=5).merge_queue_threshold == 5


def test_errors_are_sluice_errors(two_rig_api, tmp_path):
    with pytest.raises(UnknownRig):
        two_rig_api.sling(["api-x"], rig="nope")
    with pytest.raises(UsageError):
        two_rig_api.run_cycle(batch=0)
    with pytest.raises(SluiceError):
        sluice.open_town(tmp_path / "not-a-town")
    closed = two_rig_api.create_item("api", "done already")
    two_rig_api.close_item(closed["id"])
    result = two_rig_api.sling([closed["id"]], force=True)
    assert not result.ok and "closed" in result.errors[0]["error"]
    with pytest.raises(InvalidOperation):
        two_rig_api.add_rig("api", tmp_path / "api")


def test_cross_rig_guard_and_force(two_rig_api):
    two_rig_api.config_set("scheduler.max_polecats", "1")
    item = two_rig_api.create_item("api", "belongs to api")
    refused = two_rig_api.sling([item["id"]], rig="web")
    assert not refused.ok and "cross-rig" in refused.errors[0]["error"]
    forced = two_rig_api.sling([item["id"]], rig="web", force=True)
    assert forced.ok and forced.scheduled[0]["rig"] == "web"
    with pytest.raises(UsageError, match="not both"):  # the rig is given once, last or as rig
        two_rig_api.sling([item["id"], "web"], rig="web", rig_last=True)
    refused = two_rig_api.sling([item["id"], "api", "web"], rig_last=True)  # "web" is the rig, not an item
    assert [row["item_id"] for row in refused.errors] == [item["id"], "api"]


def test_direct_mode_launches_through_the_injected_executor(two_rig_api):
    item = two_rig_api.create_item("web", "now")
    result = two_rig_api.sling([item["id"]])
    assert result.mode == "direct"
    assert [row["item_id"] for row in result.dispatched] == [item["id"]]
    assert two_rig_api.executor.requests[0].item_id == item["id"]
    assert [row["item_id"] for row in two_rig_api.sling([item["id"]]).already] == [item["id"]]


def test_failed_launches_trip_the_breaker(two_rig_api):
    two_rig_api.config_set("scheduler.max_polecats", "3")
    two_rig_api.config_set("scheduler.max_dispatch_failures", "2")
    item = two_rig_api.create_item("api", "flaky")
    two_rig_api.executor.fail_next(item["id"], "no such agent", times=2)
    two_rig_api.sling([item["id"]])
    first = two_rig_api.run_cycle()
    assert first.failed == 1 and first.failures[0]["error"] == "launch failed: no such agent"
    assert two_rig_api.run_cycle().why == {"backoff": 1}  # a failed launch waits out its backoff
    second = two_rig_api.run_cycle(ignore_backoff=True)
    assert second.failures[0]["circuit_broken"] is True
    assert two_rig_api.explain(item["id"]).codes == ["circuit-broken"]
    assert [row.item_id for row in two_rig_api.broken()] == [item["id"]]
    assert len(two_rig_api.list()) == 0


def test_memory_kind_is_one_executor_per_town_per_process(tmp_path, no_processes):
    town = sluice.init_town(tmp_path / "town")
    town.add_rig("api", _repo(tmp_path / "api"))
    town.config_set("executor.kind", "memory")
    town.config_set("scheduler.max_polecats", "1")
    item = town.create_item("api", "shared")
    town.sling([item["id"]])
    assert town.run_cycle().dispatched == 1
    again = sluice.open_town(tmp_path / "town")
    assert again.status().active_polecats == 1  # the same in-memory polecat
    MemoryExecutor.forget_town(again.files)
    assert again.status().active_polecats == 0


def test_results_are_the_cli_json_documents(tmp_path, no_processes):
    """``to_json()`` equals what the command prints with ``--json`` (the CLI run in this process)."""
    from typer.testing import CliRunner

    from sluice.surfaces.cli import app

    town = sluice.init_town(tmp_path / "town")
    town.add_rig("api", _repo(tmp_path / "api"))
    town.config_set("executor.kind", "memory")
    town.config_set("scheduler.max_polecats", "1")
    first, second = town.create_item("api", "first"), town.create_item("api", "second")
    town.sling([first["id"], second["id"]])
    town.run_cycle()

    def cli(*args: str):
        done = CliRunner().invoke(app, ["--town", str(town.root), *args, "--json"])
        assert done.exit_code == 0, done.output
        return json.loads(done.stdout)

    try:
        assert town.status().to_json() == cli("scheduler", "status")
        assert without_etas(town.list().to_json()) == without_etas(cli("scheduler", "list"))
        assert town.policy().to_json() == cli("schedule", "policy", "show")
        assert [r.to_json() for r in town.rigs()] == cli("rig", "list")
        assert town.patrol("api").to_json() == cli("patrol", "api")
        assert town.run_cycle(dry_run=True).to_json() == cli("scheduler", "run", "--dry-run")
        assert town.pause().to_json() == {**cli("scheduler", "pause"), "changed": True}
        assert town.resume().to_json() == {**cli("scheduler", "resume"), "changed": True}
        assert town.clear(first["id"]).to_json() == cli("scheduler", "clear", "--item", first["id"])
        assert town.item(first["id"]).to_json() == cli("item", "show", first["id"])
        assert town.items("api").to_json() == cli("item", "list", "api")
        assert town.polecats().to_json() == cli("polecat", "list")
        assert town.runs().to_json() == cli("runs")
        assert town.feed(limit=5).to_json() == cli("feed", "--limit", "5")
        assert town.promote(second["id"]).to_json() == {**cli("scheduler", "promote", second["id"]),
                                                        "changed": True}
        moving = ("at", "forecast", "queue", "scheduler", "events", "polecats")  # move with the clock
        assert ({k: v for k, v in town.snapshot().to_json().items() if k not in moving}
                == {k: v for k, v in cli("snapshot").items() if k not in moving})
    finally:
        MemoryExecutor.forget_town(town.files)


def test_a_busy_lock_is_a_sluice_error_naming_the_lock(two_rig_api):
    """A busy lock is never a bare timeout: every lock sluice takes raises LockBusy."""
    import threading

    from sluice.errors import LockBusy
    from sluice.store.files.fsutil import file_lock

    path = two_rig_api.files.lock_path("config")
    held, release = threading.Event(), threading.Event()

    def hold():
        with file_lock(path):
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        held.wait(10)
        with pytest.raises(LockBusy, match=r"config\.lock") as caught, file_lock(path, timeout=0):
            pass
        assert isinstance(caught.value, SluiceError) and not isinstance(caught.value, TimeoutError)
    finally:
        release.set()
        holder.join()


def test_the_daemon_ticks_in_process_with_an_executor_object(two_rig_api):
    """A daemon given an in-memory executor runs its cycle here: no child process could see it."""
    two_rig_api.config_set("scheduler.max_polecats", "1")
    item = two_rig_api.create_item("api", "by the daemon")
    two_rig_api.sling([item["id"]])
    assert two_rig_api.daemon(interval=1, once=True) == 0
    assert [r.item_id for r in two_rig_api.executor.requests] == [item["id"]]
    two_rig_api.executor.finish(item["id"])
    assert two_rig_api.daemon(interval=1, once=True) == 0  # reaps the finished polecat
    assert not two_rig_api.polecats(running=True)
    [ended] = two_rig_api.polecats()  # its run stays listed for an hour, with how it ended
    assert (ended["item_id"], ended["outcome"], ended["exit_code"]) == (item["id"], "ok", 0)
    [run] = two_rig_api.runs()
    assert run["outcome"] == "ok" and run["runtime_seconds"] >= 0


def test_library_errors_name_parameters_and_the_cli_names_flags(two_rig_api):
    """The library says ``batch``; the command line says ``--batch``."""
    from sluice.surfaces.output import error_text

    with pytest.raises(UsageError) as caught:
        two_rig_api.run_cycle(batch=0)
    assert str(caught.value).startswith("batch must be >= 1") and "--" not in str(caught.value)
    assert error_text(caught.value).startswith("--batch must be >= 1")
    with pytest.raises(UsageError) as caught:
        two_rig_api.next(graph_id=" ")
    assert error_text(caught.value).startswith("--graph-id must be")
    two_rig_api.config_set("scheduler.max_polecats", "1")
    item = two_rig_api.create_item("api", "hooked", assignee="bob")
    two_rig_api.update_item(item["id"], status="hooked")
    [row] = two_rig_api.sling([item["id"]]).errors
    assert row["error"].endswith("(override with force)")
    assert error_text(InvalidOperation(row["error"])).endswith("(override with --force)")


def test_every_method_and_result_is_documented():
    """docs/api.md names every public method of the facade and every result type."""
    import inspect

    from sluice import api

    text = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text(encoding="utf-8")
    methods = [name for name, _ in inspect.getmembers(api.Town, inspect.isfunction)
               if not name.startswith("_")]
    missing = [name for name in methods if f"`{name}(" not in text]
    missing += [name for name in api.__all__ if f"`{name}" not in text]
    assert not missing, f"not in docs/api.md: {missing}"


def test_every_error_is_reachable_from_the_package_and_named_in_the_docs():
    """`sluice.TownNotFound` and every other error class of sluice.errors: exported, documented, rooted."""
    import inspect

    import sluice
    from sluice import errors

    classes = {name for name, value in inspect.getmembers(errors, inspect.isclass)
               if value.__module__ == errors.__name__}
    text = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text(encoding="utf-8")
    errors_section = text[text.index("## Errors"):]
    for name in sorted(classes):
        assert getattr(sluice, name) is getattr(errors, name), name
        assert name in sluice.__all__, name
        assert issubclass(getattr(sluice, name), sluice.SluiceError), name
        named = f"`{name}`" in errors_section or f"`sluice.{name}`" in errors_section
        assert named, f"docs/api.md's Errors section does not name {name}"


def test_no_method_of_the_facade_returns_a_bare_dict_or_list_of_dicts():
    """Every result has one definition of its keys: a method annotated ``dict`` or ``list[dict]`` would
    hand out a document nothing checks."""
    import inspect

    from sluice import api

    bare = {"dict", "list[dict]", "list[dict[str, Any]]", "dict[str, Any]", "list"}
    methods = [(name, value) for name, value in inspect.getmembers(api.Town, inspect.isfunction)
               if not name.startswith("_")]
    assert len(methods) > 30
    annotated = {name: inspect.signature(value).return_annotation for name, value in methods}
    assert all(returns is not inspect.Signature.empty for returns in annotated.values()), annotated
    assert not {name: r for name, r in annotated.items() if str(r).replace(" ", "") in bare}


def test_every_error_the_docs_name_is_importable_from_sluice():
    """The Errors section of docs/api.md promises ``sluice.X`` for each error it names."""
    import builtins
    import re

    import sluice

    text = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text(encoding="utf-8")
    errors_section = text[text.index("## Errors"):text.index("## The in-memory executor")]
    named = set(re.findall(r"`(?:sluice\.)?([A-Z][A-Za-z]+)`", errors_section)) - set(dir(builtins))
    assert {"TownNotFound", "SluiceError", "LockBusy", "StorageError"} <= named
    for name in sorted(named):
        assert issubclass(getattr(sluice, name), sluice.SluiceError), name


def test_every_name_of_the_facade_is_reachable_from_the_package():
    import sluice
    from sluice import api

    for name in api.__all__:
        assert name in sluice.__all__ and getattr(sluice, name) is getattr(api, name), name


def test_the_results_the_facade_and_the_package_name_the_same_results():
    """sluice.api's ``__all__`` takes sluice.results'; sluice's lists are written out, since deriving them
    would import the results on ``sluice --version``, so they must equal the facade's."""
    import ast
    import inspect

    import sluice
    from sluice import api, errors, results

    defined = {name for name, value in vars(results).items() if isinstance(value, type)
               and value.__module__ == results.__name__ and "_spec" in vars(value) and name[0] != "_"}
    assert set(results.__all__) == defined and len(results.__all__) == len(defined)
    assert all(getattr(api, name) is getattr(results, name) for name in results.__all__)
    assert {"Town", "open_town", "SlingResult"} <= set(api.__all__) > set(results.__all__)
    error_names = {name for name, value in vars(errors).items()
                   if isinstance(value, type) and value.__module__ == errors.__name__}
    assert set(sluice.__all__) == {*api.__all__, *error_names, "MemoryExecutor", "__version__"}
    assert len(sluice.__all__) == len(set(sluice.__all__))
    # what type checkers read: the names sluice imports from sluice.api under TYPE_CHECKING
    typed = [alias.name for node in ast.walk(ast.parse(inspect.getsource(sluice)))
             if isinstance(node, ast.ImportFrom) and node.module == "sluice.api" for alias in node.names]
    assert sorted(typed) == sorted(api.__all__)


def test_a_result_whose_document_lost_a_field_fails_at_once():
    """A key renamed on one side is a KeyError when the result is made, never a silent None."""
    from sluice.api import ResetResult

    assert ResetResult.from_json({"item_id": "al-1", "rig": "alpha", "context_id": None, "reset": True}).reset
    with pytest.raises(KeyError, match="context_id"):
        ResetResult.from_json({"item_id": "al-1", "rig": "alpha", "context": None, "reset": True})


def test_a_record_result_reads_as_its_document_and_a_list_as_typed_rows():
    """An item keeps every key of its record behind the attributes; a row missing a key fails at once."""
    from sluice.api import Item, Items, Polecats

    record = {"id": "al-1", "title": "fix", "x-custom": {"kept": True}}
    item = Item.from_json(record)
    assert (item.id, item.title, item.status) == ("al-1", "fix", None)
    assert item["x-custom"] == {"kept": True} and "x-custom" in item and item.get("nope") is None
    assert dict(item) == {**item} == record and item.to_json() is record
    items = Items.from_json([record])
    assert len(items) == 1 and items[0].title == "fix" and [i.id for i in items] == ["al-1"]
    assert not Items.from_json([])
    row = {"id": "p1", "item_id": "al-1", "rig": "al", "context_id": None, "executor": "local",
           "started_at": None, "pid": None, "exit_code": None, "log_path": None, "attach": None,
           "outcome": None, "run_id": None, "ended_at": None, "runtime_seconds": None}
    with pytest.raises(KeyError, match="state"):
        Polecats.from_json([row])[0]
    assert Polecats.from_json([{**row, "state": "running"}])[0].state == "running"


def test_one_call_reads_the_config_once_and_asks_the_executor_once(two_rig_api, monkeypatch):
    """A Session per call: status reads config.json once and asks for the running polecats once."""
    from sluice.store.files.town import Town as TownFiles

    two_rig_api.config_set("scheduler.max_polecats", "2")
    two_rig_api.sling([two_rig_api.create_item("api", "queued")["id"]])
    reads, asks = [], []
    real_reload, real_active = TownFiles.reload_config, two_rig_api.executor.active
    monkeypatch.setattr(TownFiles, "reload_config", lambda self: reads.append(1) or real_reload(self))
    monkeypatch.setattr(two_rig_api.executor, "active", lambda: asks.append(1) or real_active())
    for call in (two_rig_api.status, two_rig_api.list, lambda: two_rig_api.explain("api-nope")):
        reads.clear()
        asks.clear()
        call()
        assert (len(reads), len(asks)) == (1, 1), call


def test_a_cycle_a_sling_a_snapshot_and_the_advisor_read_the_config_once_and_resolve_the_executor_once(
        two_rig_api, monkeypatch):
    """One call, one session: no part of a cycle, a sling, a view or ``schedule next`` reads the config
    or looks the executor up again."""
    from sluice.store.files.town import Town as TownFiles

    two_rig_api.config_set("scheduler.max_polecats", "2")
    two_rig_api.config_set("scheduler.batch_size", "2")
    two_rig_api.config_set("executor.kind", "memory")
    two_rig_api.executor.serve(two_rig_api.files)
    configured = sluice.open_town(two_rig_api.root)  # resolves its executor from the config on each call
    first, second = (two_rig_api.create_item("api", title)["id"] for title in ("first", "second"))
    reads, lookups = [], []
    real_reload, real_lookup = TownFiles.reload_config, MemoryExecutor.for_town.__func__
    monkeypatch.setattr(TownFiles, "reload_config", lambda self: reads.append(1) or real_reload(self))
    monkeypatch.setattr(MemoryExecutor, "for_town", classmethod(lambda cls, t: lookups.append(1)
                                                                or real_lookup(cls, t)))
    calls = {
        "sling": lambda: configured.sling([first, second]),
        "sling ITEM... RIG": lambda: configured.sling([first, second, "api"], rig_last=True),
        "run_cycle --dry-run": lambda: configured.run_cycle(dry_run=True),
        "run_cycle": configured.run_cycle,
        "snapshot": configured.snapshot,
        "item_detail": lambda: configured.item_detail(first),
        "next": lambda: configured.next(preview=True),
        "schedule_status": configured.schedule_status,
        "polecats": configured.polecats,
        "runs": configured.runs,
    }
    for name, call in calls.items():
        reads.clear()
        lookups.clear()
        call()
        assert len(reads) <= 1 and len(lookups) <= 1, (name, len(reads), len(lookups))
    assert len(two_rig_api.executor.active()) == 2  # the cycle launched both through the one executor


def test_an_executor_that_cannot_be_asked_is_kept_as_the_session_problem(two_rig_api):
    from sluice.scheduler.session import Session

    two_rig_api.config_set("scheduler.max_polecats", "2")
    two_rig_api.executor.unavailable = "cluster down"
    session = Session(two_rig_api.files, two_rig_api.executor)
    assert session.active is None and session.problem == "cluster down"
    assert session.find("any-context") is None
    assert two_rig_api.status().executor_error == "cluster down"
