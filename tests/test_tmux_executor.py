"""The tmux executor against real tmux sessions on a town-private server."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers.polecats import configure, gone, install_polecat, polecat_command, report, request, wait_for
from sluice.errors import ExecutorError
from sluice.executors import get_executor
from sluice.executors.naming import launch_name, polecat_name
from sluice.executors.tmux import TmuxExecutor
from sluice.store.files.town import Town

if shutil.which("tmux") is None:
    pytest.fail("tmux is not installed; the tmux executor tests need it (apt-get install tmux)")


@pytest.fixture
def tmux_setup(cli, rig, tmp_path) -> Iterator[tuple[Town, TmuxExecutor, Path]]:
    """A town whose executor is tmux, running the test polecat for 30 s; the tmux server dies after."""
    script, reports = install_polecat(tmp_path / "polecat")
    configure(cli.town, {
        "executor.kind": "tmux",
        "executor.command": json.dumps(polecat_command(script, reports, 30)),
    })
    town = Town(cli.town)
    executor = get_executor(town)
    yield town, executor, reports
    subprocess.run(["tmux", "-L", executor.socket, "kill-server"], capture_output=True)


def session_names(executor) -> list[str]:
    listed = ["tmux", "-L", executor.socket, "list-sessions", "-F", "#{session_name}"]
    return subprocess.run(listed, capture_output=True, text=True).stdout.split()


def test_get_executor_gives_tmux_and_town_private_socket(tmux_setup, tmp_path):
    town, executor, _ = tmux_setup
    assert isinstance(executor, TmuxExecutor) and executor.kind == "tmux"
    other = Town(tmp_path / "elsewhere")
    assert TmuxExecutor(other).socket != executor.socket
    assert TmuxExecutor(Town(town.root)).socket == executor.socket  # stable for one town


def test_launch_runs_argv_in_repo_with_env_and_is_active(tmux_setup):
    town, executor, reports = tmux_setup
    polecat = executor.launch(request(town, "alpha", "al-1", "al-wisp-a1", title="fix it"))
    assert polecat.state == "running" and polecat.executor == "tmux"
    seen = report(reports, "al-wisp-a1")
    assert seen["argv"] == ["fix it", "al-1"]
    assert seen["cwd"] == str(town.rig("alpha").repo)
    assert seen["env"] == {
        "SLUICE_ITEM_ID": "al-1",
        "SLUICE_RIG": "alpha",
        "SLUICE_CONTEXT_ID": "al-wisp-a1",
        "SLUICE_TOWN": str(town.root),
    }
    # the pane runs the polecat's supervisor (no shell), which leads the session the polecat runs in
    assert polecat.pid == seen["sid"] != seen["pid"]
    active = executor.active()
    assert [(p.id, p.item_id, p.context_id, p.state) for p in active] == [
        (polecat.id, "al-1", "al-wisp-a1", "running")
    ]
    assert polecat.detail["attach"] == f"tmux -L {executor.socket} attach -t {polecat.id}"
    assert session_names(executor) == [polecat.id]


def test_find_by_context_running_and_after_exit_and_reap(tmux_setup, cli, tmp_path):
    town, executor, reports = tmux_setup
    script, _ = install_polecat(tmp_path / "polecat")
    configure(cli.town, {"executor.command": json.dumps(polecat_command(script, reports, 0.2))})
    polecat = executor.launch(request(town, "alpha", "al-2", "al-wisp-b2"))
    assert executor.find("al-wisp-b2").id == polecat.id
    assert executor.find("al-wisp-zz") is None
    wait_for(lambda: not executor.active(), what="the polecat to finish")
    found = executor.find("al-wisp-b2")
    assert found.state == "exited"  # a session that ended on its own
    reaped = executor.reap()
    assert [p.id for p in reaped] == [polecat.id]
    assert executor.listing() == []
    assert executor.find("al-wisp-b2").id == polecat.id  # reaped records stay findable (crash reconcile)
    assert any("polecat done" in line for line in executor.logs(polecat.id))  # logs outlive the record


def test_relaunching_the_same_context_never_starts_a_second_polecat(tmux_setup):
    town, executor, reports = tmux_setup
    first = executor.launch(request(town, "alpha", "al-3", "al-wisp-c3"))
    report(reports, "al-wisp-c3")
    again = executor.launch(request(town, "alpha", "al-3", "al-wisp-c3"))
    assert again.id == first.id and again.pid == first.pid
    assert len(executor.active()) == 1


def test_a_context_is_launched_at_most_once_even_after_its_polecat_ended(tmux_setup, tmp_path):
    town, executor, reports = tmux_setup
    script, _ = install_polecat(tmp_path / "polecat")
    configure(town.root, {"executor.command": json.dumps(polecat_command(script, reports, 0.2))})
    first = executor.launch(request(town, "alpha", "al-3", "al-wisp-c4"))
    wait_for(lambda: not executor.active(), what="the polecat to finish")
    (reports / "al-wisp-c4.json").unlink()
    again = executor.launch(request(town, "alpha", "al-3", "al-wisp-c4"))
    assert (again.id, again.state) == (first.id, "exited")
    assert session_names(executor) == [] and not (reports / "al-wisp-c4.json").exists()


def test_a_launch_cut_short_before_its_session_is_lost_not_relaunched(tmux_setup):
    """The state a kill -9 leaves between writing the record and starting tmux."""
    town, executor, _ = tmux_setup
    name = launch_name(executor.namespace, "al", "al-wisp-c5", "al-3")
    gone_launcher = subprocess.Popen(["true"])
    gone_launcher.wait()
    record = {"id": name, "executor": "tmux", "item_id": "al-3", "rig": "alpha", "context_id": "al-wisp-c5",
              "started_at": "2026-01-01T00:00:00.000000Z", "pid": None, "launcher_pid": gone_launcher.pid}
    (town.workers_dir / f"{name}.json").write_text(json.dumps(record))
    assert executor.find("al-wisp-c5").state == "lost"
    assert executor.launch(request(town, "alpha", "al-3", "al-wisp-c5")).state == "lost"
    assert executor.active() == [] and session_names(executor) == []


def test_logs_are_piped_to_the_worker_log_and_followed_until_exit(tmux_setup, cli, tmp_path):
    town, executor, reports = tmux_setup
    script, _ = install_polecat(tmp_path / "polecat")
    configure(cli.town, {"executor.command": json.dumps(polecat_command(script, reports, 1))})
    polecat = executor.launch(request(town, "alpha", "al-4", "al-wisp-d4"))
    assert polecat.log_path == str(town.workers_dir / f"{polecat.id}.log")
    followed = list(executor.logs(polecat.id, follow=True))  # returns once the session has ended
    assert followed[:2] == ["polecat up for al-4", "second line"]
    assert "polecat done" in followed
    assert all("\r" not in line for line in followed)
    assert list(executor.logs(polecat.id)) == followed
    with pytest.raises(ExecutorError, match="no log"):
        list(executor.logs("sluice-nope"))


def test_stop_kills_the_session_and_every_process_of_the_polecat(tmux_setup):
    town, executor, reports = tmux_setup
    polecat = executor.launch(request(town, "alpha", "al-5", "al-wisp-e5"))
    seen = report(reports, "al-wisp-e5")
    assert not gone(seen["pid"]) and not gone(seen["child"])
    assert executor.stop(polecat.id) is True
    assert gone(seen["pid"]) and gone(seen["child"])
    assert executor.active() == []
    assert executor.find("al-wisp-e5").state == "stopped"
    assert executor.stop(polecat.id) is False  # not running any more
    assert executor.stop("sluice-unknown") is False


def test_active_counts_only_this_towns_sessions(tmux_setup, cli, tmp_path):
    town, executor, _ = tmux_setup
    executor.launch(request(town, "alpha", "al-6", "al-wisp-f6"))
    # A session on the same server that is not one of this town's polecats is not counted.
    subprocess.run(
        ["tmux", "-L", executor.socket, "new-session", "-d", "-s", "someone-else", "sleep", "30"], check=True
    )
    assert [p.item_id for p in executor.active()] == ["al-6"]


ODD_IDS = ["al-wisp.x:y", "al-wisp z", "weird:id", "al-" + "k" * 120, "al-wisp-ä", "al-=x"]


def test_odd_context_ids_give_valid_distinct_session_names(tmux_setup):
    town, executor, reports = tmux_setup
    launched = [executor.launch(request(town, "alpha", f"al-{n}", cid)) for n, cid in enumerate(ODD_IDS)]
    names = [p.id for p in launched]
    assert len(set(names)) == len(names)
    for name in names:
        assert "." not in name and ":" not in name and name.startswith(executor.namespace + "-")
    assert sorted(session_names(executor)) == sorted(names)  # tmux kept every name exactly as given
    for cid, polecat in zip(ODD_IDS, launched, strict=True):
        assert executor.find(cid).id == polecat.id
        assert report(reports, cid)["env"]["SLUICE_CONTEXT_ID"] == cid


@given(st.text(min_size=1, max_size=80), st.text(min_size=1, max_size=80))
def test_names_are_tmux_safe_and_distinct_per_context(a, b):
    name_a, name_b = polecat_name("sluice-abc123", "al", a), polecat_name("sluice-abc123", "al", b)
    for name in (name_a, name_b):
        assert all(c.isascii() and (c.isalnum() or c in "-_") for c in name)
    assert (name_a == name_b) == (a == b)


HOSTILE = [
    'x; run-shell "touch {pwned}";',
    "$(touch {pwned}) `touch {pwned}` #{{pane_pid}} #(touch {pwned})",
    "';touch {pwned};'",
    ";",
]


@pytest.mark.parametrize("template", HOSTILE)
def test_hostile_title_reaches_the_polecat_verbatim_and_is_never_executed(tmux_setup, tmp_path, template):
    town, executor, reports = tmux_setup
    pwned = tmp_path / "pwned"
    title = template.format(pwned=pwned)
    polecat = executor.launch(request(town, "alpha", "al-7", "al-wisp-g7", title=title))
    seen = report(reports, "al-wisp-g7")
    assert seen["argv"] == [title, "al-7"]
    assert polecat.state == "running"
    assert not pwned.exists()


def test_a_missing_program_is_a_counted_launch_failure(tmux_setup, cli):
    town, executor, _ = tmux_setup
    configure(cli.town, {"executor.command": '["no-such-agent-program", "{item_id}"]'})
    with pytest.raises(ExecutorError, match="no-such-agent-program") as err:
        executor.launch(request(town, "alpha", "al-8", "al-wisp-h8"))
    assert type(err.value) is ExecutorError  # not ExecutorUnavailable: it counts against the item
    assert executor.listing() == []


def test_a_title_no_program_can_receive_is_a_counted_launch_failure_not_a_dead_pane(tmux_setup):
    town, executor, _ = tmux_setup
    with pytest.raises(ExecutorError, match="contains a NUL byte") as err:
        executor.launch(request(town, "alpha", "al-9", "al-wisp-i9", title="evil\x00title"))
    assert type(err.value) is ExecutorError
    assert executor.listing() == [] and session_names(executor) == []


def test_an_empty_reference_names_no_polecat(tmux_setup, cli):
    """Sessions of the town without a record have no item id; an empty one must not select them."""
    _town, executor, _ = tmux_setup
    stray = f"{executor.namespace}-stray"
    subprocess.run(["tmux", "-f", "/dev/null", "-L", executor.socket, "new-session", "-d", "-s", stray,
                    "sleep", "30"], check=True)
    for command in ("stop", "logs"):
        done = cli.run("polecat", command, "", check=False)
        assert done.returncode == 2 and "name a polecat by its id" in done.stderr
    assert stray in session_names(executor)
