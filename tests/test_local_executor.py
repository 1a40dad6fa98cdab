"""The local executor with real processes: records, pid reuse, sessions, stop, logs, reap, demo worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.scheduler import item, wait_for, write_items
from sluice.errors import ExecutorError, ExecutorUnavailable
from sluice.executors.base import LaunchRequest
from sluice.executors.local import LocalExecutor, pid_alive, proc_start_time
from sluice.store.files.town import Town


@pytest.fixture
def local_setup(town_files, rig, tmp_path) -> Iterator[tuple[Town, LocalExecutor, Path]]:
    """The town's files, a local executor over them, rig alpha's repository; polecats stopped at the end."""
    executor = LocalExecutor(town_files, stop_grace=1)
    yield town_files, executor, tmp_path / "repos" / rig
    for polecat in executor.active():
        executor.stop(polecat.id)


def request(town: Town, repo: Path, code: str, *args: str, context_id: str = "al-wisp-1", item_id="al-1"):
    return LaunchRequest(item_id=item_id, rig="alpha", title="t", context_id=context_id, repo=str(repo),
                         town=str(town.root), argv=(sys.executable, "-c", code, *args))


def test_launch_records_the_process_and_runs_it_in_its_own_session(local_setup):
    town, executor, repo = local_setup
    code = ("import json, os, sys, time; print(json.dumps({'cwd': os.getcwd(), 'sid': os.getsid(0),"
            " 'pgid': os.getpgid(0), 'pid': os.getpid(), 'argv': sys.argv[1:],"
            " 'env': {k: v for k, v in os.environ.items() if k.startswith('SLUICE_')}}), flush=True);"
            " time.sleep(5)")
    polecat = executor.launch(request(town, repo, code, "a b", "$(x)"))
    assert polecat.state == "running" and polecat.pid and polecat.id.startswith("pc-")
    record = json.loads((town.workers_dir / f"{polecat.id}.json").read_text())
    assert record["pid"] == polecat.pid and record["start_time"] == proc_start_time(polecat.pid)
    assert (record["item_id"], record["rig"], record["context_id"]) == ("al-1", "alpha", "al-wisp-1")
    assert record["argv"][-2:] == ["a b", "$(x)"] and record["started_at"]
    line = wait_for(lambda: next(iter(executor.logs(polecat.id)), None))
    report = json.loads(line)
    assert report["cwd"] == str(repo) and report["argv"] == ["a b", "$(x)"]
    assert report["sid"] == report["pid"] == report["pgid"] == polecat.pid
    assert report["env"] == {"SLUICE_ITEM_ID": "al-1", "SLUICE_RIG": "alpha",
                             "SLUICE_CONTEXT_ID": "al-wisp-1", "SLUICE_TOWN": str(town.root)}
    assert [p.id for p in executor.active()] == [polecat.id]
    assert executor.find("al-wisp-1").id == polecat.id and executor.find("al-wisp-2") is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, which only Linux has")
def test_a_polecat_inherits_only_its_stdio_and_default_signal_dispositions(local_setup):
    town, executor, repo = local_setup
    # a shell, not Python, as the polecat: Python ignores SIGPIPE itself at start
    script = "grep SigIgn /proc/$$/status; readlink /proc/$$/fd/0; ls /proc/$$/fd"
    polecat = executor.launch(LaunchRequest(item_id="al-1", rig="alpha", title="t", context_id="al-wisp-1",
                                            repo=str(repo), town=str(town.root),
                                            argv=("/bin/sh", "-c", script)))
    wait_for(lambda: executor.find("al-wisp-1").state != "running")  # ended: its whole output is logged
    ignored, stdin, *fds = list(executor.logs(polecat.id))
    # this interpreter ignores SIGPIPE, and an ignored signal stays ignored across exec: the watcher
    # sets it back, or a broken pipe would never end the polecat's pipelines
    own = Path("/proc/self/status").read_text().splitlines()
    assert int(dict(line.split(":", 1) for line in own)["SigIgn"], 16) & (1 << (signal.SIGPIPE - 1))
    assert not int(ignored.split(":")[1], 16) & (1 << (signal.SIGPIPE - 1))
    assert stdin.strip() == os.devnull
    assert sorted(int(fd) for fd in fds) == [0, 1, 2]  # stdio only: not the watcher's report pipe


def test_start_times_read_from_the_kernel_equal_psutil_s(local_setup):
    import psutil

    from sluice.executors.watch import start_time

    for pid in (os.getpid(), 1):
        proc = psutil.Process(pid)
        assert start_time(pid) == round(proc.create_time() - psutil.boot_time(), 2)
    assert start_time(2**22 + 12345) is None  # beyond pid_max: no such process


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, which only Linux has")
def test_liveness_read_from_the_kernel_is_psutil_s(local_setup):
    """A running process, a zombie, a process gone, another start time: what psutil says of each."""
    import psutil

    from sluice.executors import procs
    from sluice.executors.watch import start_time

    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    wait_for(lambda: psutil.Process(zombie.pid).status() == psutil.STATUS_ZOMBIE)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    me = os.getpid()
    cases = [(me, None), (me, start_time(me)), (me, start_time(me) + 5), (me, int(start_time(me) * 100)),
             (1, start_time(1)), (zombie.pid, None), (gone.pid, None), (2**22 + 12345, None), (0, None),
             (-4, None)]
    try:
        for pid, started in cases:
            assert procs._alive_in_proc(pid, started) == (procs._process(pid, started) is not None), (pid,
                                                                                                     started)
        assert procs.alive(me, start_time(me)) and not procs.alive(zombie.pid, None)
    finally:
        zombie.wait()


def test_finished_polecats_stop_counting_and_are_reaped_with_their_exit_code(local_setup):
    town, executor, repo = local_setup
    polecat = executor.launch(request(town, repo, "print('done'); raise SystemExit(3)"))
    wait_for(lambda: not executor.active())
    assert executor.listing()[0].state == "failed"  # a non-zero exit status
    [reaped] = executor.reap()
    assert reaped.id == polecat.id and reaped.detail["exit_code"] == 3
    assert executor.listing() == [] and not (town.workers_dir / f"{polecat.id}.json").exists()
    assert list(executor.logs(polecat.id)) == ["done"]  # the log stays
    assert executor.find("al-wisp-1").state == "failed"  # and find() still knows it
    assert executor.reap() == []


def test_an_exit_recorded_between_two_looks_is_read_with_the_state_it_makes(local_setup, monkeypatch):
    """The watcher writes the exit code the moment the polecat ends; a look that judges the polecat
    ended must carry that code, or the run would be called vanished."""
    from sluice.executors.base import exit_path

    town, executor, repo = local_setup
    polecat = executor.launch(request(town, repo, "pass"))
    exit_file = exit_path(town.workers_dir, polecat.id)
    record = json.loads((town.workers_dir / f"{polecat.id}.json").read_text())
    wait_for(lambda: exit_file.exists() and not pid_alive(record["watcher_pid"], record.get("watcher_start")))
    aside = exit_file.with_name("aside")
    exit_file.rename(aside)  # as it was an instant before the watcher wrote it
    judge = executor._state

    def watcher_writes_first(record):
        if aside.exists():
            aside.rename(exit_file)
        return judge(record)

    monkeypatch.setattr(executor, "_state", watcher_writes_first)
    [seen] = [p for p in executor.listing() if p.id == polecat.id]
    assert seen.state == "exited" and seen.detail.get("exit_code") == 0


def test_a_torn_finished_log_does_not_swallow_the_next_reaped_polecat(local_setup):
    """A reap killed mid-append leaves a fragment; the next reap's record must not fuse with it."""
    town, executor, repo = local_setup
    polecat = executor.launch(request(town, repo, "pass", context_id="al-wisp-9"))
    wait_for(lambda: not executor.active())
    finished = town.workers_dir / "finished.jsonl"
    finished.write_text('{"id":"pc-old","state":"exited"}\n{"id":"pc-torn","context_id":"al-wi')
    [reaped] = executor.reap()
    assert reaped.id == polecat.id
    assert executor.find("al-wisp-9").id == polecat.id  # the context's polecat is still known
    lines = finished.read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["pc-old", polecat.id]


def test_a_reused_pid_is_not_our_polecat(local_setup):
    town, executor, repo = local_setup
    polecat = executor.launch(request(town, repo, "import time; time.sleep(5)"))
    path = town.workers_dir / f"{polecat.id}.json"
    record = json.loads(path.read_text())
    record["start_time"] = record["start_time"] - 1  # as if another process had this pid before
    path.write_text(json.dumps(record))
    assert executor.active() == []
    assert pid_alive(polecat.pid, None)
    assert not executor.stop(polecat.id)  # never signals a process that is not the polecat
    assert pid_alive(polecat.pid, None)
    os.kill(polecat.pid, signal.SIGKILL)


def test_a_zombie_is_not_active(local_setup, tmp_path):
    """A polecat that exited but was not waited for (its launcher is gone) does not hold a slot."""
    town, _executor, repo = local_setup
    code = ("import sys; from sluice.store.files.town import Town;"
            "from sluice.executors.local import LocalExecutor;"
            "from sluice.executors.base import LaunchRequest;"
            f"p = LocalExecutor(Town({str(town.root)!r})).launch(LaunchRequest('al-1', 'alpha', 't', 'c1',"
            f" {str(repo)!r}, {str(town.root)!r}, (sys.executable, '-c', 'pass')));"
            "import time; time.sleep(1.5)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    fresh = LocalExecutor(town)
    assert fresh.active() == []
    assert [p.state for p in fresh.listing()] == ["exited"]


def test_launch_failures_raise_with_the_reason_and_leave_no_record(local_setup):
    town, executor, repo = local_setup
    missing = LaunchRequest("al-1", "alpha", "t", "c1", str(repo), str(town.root), ("/no/such/binary", "x"))
    with pytest.raises(ExecutorError, match="cannot launch '/no/such/binary'"):
        executor.launch(missing)
    bad_cwd = LaunchRequest("al-1", "alpha", "t", "c1", str(repo / "nope"), str(town.root), (sys.executable,))
    with pytest.raises(ExecutorError, match="no such directory"):
        executor.launch(bad_cwd)
    with pytest.raises(ExecutorUnavailable, match=r"executor\.command is not set"):
        executor.launch(LaunchRequest("al-1", "alpha", "t", "c1", str(repo), str(town.root), ()))
    assert executor.listing() == [] and executor.active() == []


def test_a_new_polecat_never_takes_the_id_of_an_earlier_or_concurrent_one(local_setup, monkeypatch):
    """Reaped polecats keep their logs, and another launcher may pick an id at the same moment."""
    from sluice.executors import local

    town, executor, repo = local_setup
    old = executor.launch(request(town, repo, "print('old polecat')"))
    wait_for(lambda: not executor.active())
    executor.reap()
    picks = iter([old.id, "pc-race", "pc-mine"])

    def next_pick(prefix, _seed, taken):
        for candidate in picks:
            if candidate not in taken:
                if candidate == "pc-race":  # another launcher claims this one between the look and the claim
                    (town.workers_dir / "pc-race.log").write_text("other polecat\n")
                return candidate
        raise AssertionError("ran out of ids")

    monkeypatch.setattr(local, "new_id", next_pick)
    new = executor.launch(request(town, repo, "print('new polecat')", context_id="al-wisp-2"))
    assert new.id == "pc-mine"
    wait_for(lambda: not executor.active())
    assert list(executor.logs(old.id)) == ["old polecat"]
    assert list(executor.logs("pc-race")) == ["other polecat"]
    assert list(executor.logs(new.id)) == ["new polecat"]


def test_a_launch_does_not_list_the_logs_of_every_earlier_polecat(local_setup, monkeypatch):
    """The workers' directory keeps every log the town wrote: a launch asks about its own id only."""
    town, executor, repo = local_setup
    town.workers_dir.mkdir(parents=True, exist_ok=True)
    for n in range(50):
        (town.workers_dir / f"pc-old{n}.log").write_text("an earlier polecat\n")
    listed = []
    glob, iterdir, scandir = Path.glob, Path.iterdir, os.scandir
    monkeypatch.setattr(Path, "glob", lambda self, *a: listed.append(self) or glob(self, *a))
    monkeypatch.setattr(Path, "iterdir", lambda self: listed.append(self) or iterdir(self))
    monkeypatch.setattr(os, "scandir", lambda *a: listed.append(a) or scandir(*a))
    start = executor.start(request(town, repo, "pass"))
    assert listed == []
    polecat = start()
    assert polecat.state == "running" and not polecat.id.startswith("pc-old")


def test_a_polecat_is_recorded_with_the_start_time_its_watcher_read(local_setup, monkeypatch):
    """A batch's reports are read after all its watchers started: a polecat that ended by then is gone
    from /proc, so its start time (the guard against a reused pid) comes from the watcher's own file."""
    from sluice.executors import local

    town, executor, repo = local_setup
    wait = executor.start(request(town, repo, "pass"))
    monkeypatch.setattr(local, "proc_start_time", lambda pid: None)  # as for a process already gone
    polecat = wait()
    record = json.loads((town.workers_dir / f"{polecat.id}.json").read_text())
    started = json.loads((town.workers_dir / f"{polecat.id}.started").read_text())
    assert record["start_time"] is not None and record["start_time"] == started["start_time"]
    assert record["watcher_start"] == started["watcher_start"] is not None


def test_a_watcher_whose_launcher_is_gone_still_records_the_exit(local_setup):
    """A launcher killed between starting a watcher and reading its report (a batch in flight):
    the polecat is watched to its end all the same."""
    from sluice.executors import local

    town, _executor, repo = local_setup
    town.workers_dir.mkdir(parents=True, exist_ok=True)
    work = town.workers_dir
    polecat = [sys.executable, "-c", "import time; time.sleep(0.5)"]
    watcher, read_end = local._spawn_watcher(polecat, repo, dict(os.environ), work / "w.log", work / "w.exit",
                                             work / "w.started")
    os.close(read_end)  # nobody will read the report
    assert watcher.wait(timeout=60) == 0
    assert json.loads((work / "w.exit").read_text())["exit_code"] == 0


def test_text_no_program_can_receive_is_a_launch_failure(local_setup):
    town, executor, repo = local_setup
    with pytest.raises(ExecutorError, match="argument 3 of the polecat command contains a NUL byte"):
        executor.launch(request(town, repo, "pass", "a\x00b"))
    with pytest.raises(ExecutorError, match="argument 3 of the polecat command is 200000 bytes long"):
        executor.launch(request(town, repo, "pass", "x" * 200_000))
    env_nul = LaunchRequest("al-1", "alpha", "t", "c1", str(repo), str(town.root), (sys.executable,),
                            env={"SLUICE_ARGS": "x\x00y"})
    with pytest.raises(ExecutorError, match="environment variable SLUICE_ARGS contains a NUL byte"):
        executor.launch(env_nul)
    assert executor.listing() == []


def test_stop_terminates_the_whole_process_group(local_setup, tmp_path):
    town, executor, repo = local_setup
    pids = tmp_path / "child.pid"
    code = ("import subprocess, sys, time, pathlib;"
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
            f"pathlib.Path({str(pids)!r}).write_text(str(c.pid)); time.sleep(60)")
    polecat = executor.launch(request(town, repo, code))
    child = int(wait_for(lambda: pids.exists() and pids.read_text()))
    child_start = proc_start_time(child)
    assert executor.stop(polecat.id)
    assert not pid_alive(polecat.pid, None)
    wait_for(lambda: not pid_alive(child, child_start), timeout=5)
    assert executor.listing()[0].state == "stopped"
    assert not executor.stop(polecat.id)


@pytest.mark.parametrize("orphaned", [False, True], ids=["setsid-child", "setsid-orphan"])
def test_stop_terminates_helpers_the_polecat_started_in_sessions_of_their_own(local_setup, tmp_path,
                                                                             orphaned):
    """A ``setsid`` helper is out of the polecat's process group; an orphaned one is not even its child.

    The orphan case forks a middle process that starts the helper in a new
    session and exits at once, so the helper is reparented (on Linux, to the
    watcher, a child subreaper) before ``stop`` is asked.
    """
    town, executor, repo = local_setup
    pids = tmp_path / "helper.pid"
    helper = ("import subprocess, sys, pathlib;"
              "h = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],"
              " start_new_session=True);"
              f"pathlib.Path({str(pids)!r}).write_text(str(h.pid))")
    if orphaned:  # the middle process exits right after starting the helper
        code = ("import subprocess, sys, time;"
                f"subprocess.run([sys.executable, '-c', {helper!r}]); time.sleep(60)")
    else:
        code = f"{helper}; import time; time.sleep(60)"
    polecat = executor.launch(request(town, repo, code))
    helper_pid = int(wait_for(lambda: pids.exists() and pids.read_text()))
    helper_start = proc_start_time(helper_pid)
    assert os.getsid(helper_pid) != os.getsid(polecat.pid)  # out of reach of the polecat's group
    assert executor.stop(polecat.id)
    wait_for(lambda: not pid_alive(helper_pid, helper_start), timeout=10)
    assert not pid_alive(polecat.pid, None)


def test_a_record_written_before_psutil_start_times_is_still_recognised(local_setup):
    """Records of polecats launched by an older sluice hold Linux clock ticks as an integer."""
    town, executor, repo = local_setup
    polecat = executor.launch(request(town, repo, "import time; time.sleep(60)"))
    path = town.workers_dir / f"{polecat.id}.json"
    record = json.loads(path.read_text())
    record["start_time"] = round(record["start_time"] * os.sysconf("SC_CLK_TCK"))
    path.write_text(json.dumps(record))
    assert [p.id for p in executor.active()] == [polecat.id]


def test_stop_kills_a_polecat_that_ignores_sigterm(local_setup):
    town, executor, repo = local_setup
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True);" \
           " time.sleep(60)"
    polecat = executor.launch(request(town, repo, code))
    wait_for(lambda: list(executor.logs(polecat.id)) == ["ready"])
    assert executor.stop(polecat.id)
    assert not pid_alive(polecat.pid, None)


def test_logs_follow_until_the_polecat_ends(local_setup):
    town, executor, repo = local_setup
    code = "import time\nfor n in range(3):\n    print(n, flush=True); time.sleep(0.2)"
    polecat = executor.launch(request(town, repo, code))
    assert list(executor.logs(polecat.id, follow=True)) == ["0", "1", "2"]
    with pytest.raises(ExecutorError):
        list(executor.logs("pc-none"))


def test_a_pending_record_of_a_dead_launcher_is_found_but_holds_no_slot(local_setup):
    town, executor, _repo = local_setup
    town.workers_dir.mkdir(parents=True, exist_ok=True)
    (town.workers_dir / "pc-lost.json").write_text(json.dumps({
        "id": "pc-lost", "state": "pending", "item_id": "al-1", "rig": "alpha", "context_id": "al-wisp-9",
        "launcher_pid": 999_999_999, "created_ts": time.time() - 3600, "started_at": "2026-01-01T00:00:00Z"}))
    assert executor.active() == []
    assert executor.find("al-wisp-9").state == "lost"


def test_the_demo_worker_closes_its_own_item(cli, local_setup):
    town, _executor, repo = local_setup
    write_items(town.root, "alpha", [item("al-demo", "demo work")])
    demo = LocalExecutor(town, demo=True)
    argv = tuple(a.replace("{item_id}", "al-demo") for a in demo.default_command)
    polecat = demo.launch(LaunchRequest("al-demo", "alpha", "demo work", "c1", str(repo), str(town.root),
                                        argv, env={"SLUICE_DEMO_WORK_SECONDS": "0.1"}))
    wait_for(lambda: not demo.active(), timeout=30)
    shown = cli.json("item", "show", "al-demo")
    assert shown["status"] == "closed" and shown["close_reason"] == "done"
    assert "closed al-demo" in "\n".join(demo.logs(polecat.id))


def test_a_launcher_killed_before_recording_the_pid_leaves_a_polecat_still_found_and_stoppable(local_setup,
                                                                                                monkeypatch):
    """The watcher's `.started` file completes the record, so the context is never launched twice."""
    town, executor, repo = local_setup
    writes: list[dict] = []
    real_write = LocalExecutor._write

    def dies_after_the_intent(self, record):
        if writes:
            raise SystemExit("killed")  # the launcher dies after the watcher started the polecat
        writes.append(record)
        real_write(self, record)

    monkeypatch.setattr(LocalExecutor, "_write", dies_after_the_intent)
    with pytest.raises(SystemExit):
        executor.launch(request(town, repo, "import time; time.sleep(30)", context_id="al-wisp-7"))
    monkeypatch.undo()
    record = json.loads((town.workers_dir / f"{writes[0]['id']}.json").read_text())
    assert record["state"] == "pending" and "pid" not in record  # as the dead launcher left it
    later = LocalExecutor(Town(town.root), stop_grace=1)  # the next cycle's view
    found = later.find("al-wisp-7")
    assert found.state == "running" and found.pid and pid_alive(found.pid, proc_start_time(found.pid))
    assert [p.id for p in later.active()] == [found.id]
    assert later.stop(found.id)
    wait_for(lambda: later.get(found.id).state in ("exited", "failed", "stopped"))
    [reaped] = later.reap()
    assert reaped.id == found.id and reaped.detail["exit_code"] == -signal.SIGTERM
    assert not list(town.workers_dir.glob(f"{found.id}.*[!g]"))  # .json, .exit, .started gone; the log stays


def test_a_record_the_disk_refuses_once_the_polecat_runs_still_reports_it_launched(local_setup, monkeypatch):
    """Were the refusal raised, the cycle would withdraw its intent and launch the item a second time."""
    import errno

    from sluice.errors import StorageError

    town, executor, repo = local_setup
    real_write = LocalExecutor._write

    def full_once_started(self, record):
        if record.get("pid") is not None:
            raise StorageError(self._record_path(record["id"]), "cannot write it: No space left on device",
                               errno.ENOSPC)
        real_write(self, record)

    monkeypatch.setattr(LocalExecutor, "_write", full_once_started)
    polecat = executor.launch(request(town, repo, "import time; time.sleep(30)", context_id="al-wisp-8"))
    monkeypatch.undo()
    assert polecat.state == "running" and pid_alive(polecat.pid, proc_start_time(polecat.pid))
    found = LocalExecutor(Town(town.root), stop_grace=1).find("al-wisp-8")  # the next cycle's view
    assert found.id == polecat.id and found.state == "running" and found.pid == polecat.pid
