"""``sluice demo``: the whole system working on a throwaway town, live.

It builds a town in a temporary directory with three real git rigs (one of
them warm: it has a linked worktree) and a few dozen items — epics with
children, ``blocks`` chains, different priorities and token estimates — sets
``scheduler.max_polecats`` to 3, slings every epic, and then runs the
daemon's tick (a real dispatch cycle in a child process, plus reaping) about once
a second.  The polecats are real processes: the built-in demo worker sleeps a
moment and closes its item, as an agent would.  The view is ``sluice top``'s
layout over the town's snapshot (queue in dispatch order, running polecats,
rigs, events) under a line of demo progress; with ``--web`` the dashboard
serves the same town while it runs.  The run ends by itself when
every work item is closed, and a summary says how long it took and the most
polecats seen at once — which must never exceed the cap.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from sluice.core.recordclass import field, recordclass
from sluice.errors import SluiceError, UsageError

CAP = 3
RIGS = (
    ("api", "api", "Payments API", True),
    ("web", "web", "Storefront web app", False),
    ("docs", "docs", "Developer docs", False),
)
TASKS = {
    "api": [
        ("Add idempotency keys to POST /charges", 0, 3000),
        ("Retry webhooks with exponential backoff", 1, 1500),
        ("Rate-limit the refunds endpoint", 1, 800),
        ("Index payments by merchant and date", 2, 500),
        ("Remove the v1 charge shim", 3, 2500),
        ("Structured logs for the ledger", 2, 1200),
        ("Contract tests for /payouts", 2, 2000),
        ("Rotate signing keys without downtime", 1, 4000),
        ("Paginate the disputes list", 3, 700),
        ("Fix rounding in currency conversion", 0, 600),
    ],
    "web": [
        ("Checkout: show saved cards", 1, 2000),
        ("Cart survives a page reload", 1, 900),
        ("Lazy-load product images", 2, 600),
        ("Keyboard navigation for the menu", 2, 1100),
        ("Price formatting per locale", 1, 1500),
        ("Dark mode for account pages", 3, 1800),
        ("Error page for failed payments", 2, 700),
        ("Remove the legacy jQuery bundle", 3, 3000),
        ("Search suggestions as you type", 2, 2500),
    ],
    "docs": [
        ("Quickstart for the payments API", 1, 1500),
        ("Document webhook retries", 2, 600),
        ("Migration guide from v1 charges", 2, 2200),
        ("Examples for idempotency keys", 2, 500),
        ("Glossary of payment states", 3, 400),
        ("Fix broken links in the changelog", 4, 300),
        ("Diagrams for the refund flow", 3, 1600),
    ],
}
# (rig, blocked task index, blocker task index): the first waits for the second.
CHAINS = (("api", 4, 0), ("api", 8, 3), ("web", 7, 0), ("web", 8, 2), ("docs", 2, 0), ("docs", 3, 1))


@recordclass
class DemoSummary:
    town: str
    items: int
    done: int
    elapsed: float
    ticks: int
    dispatched: int
    failed: int
    max_active: int
    cap: int
    kept: bool
    timed_out: bool = False
    log: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.timed_out and self.done == self.items and self.max_active <= self.cap

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "log"} | {"ok": self.ok}


def _git(*args: str, cwd: Path) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "sluice demo", "GIT_AUTHOR_EMAIL": "demo@sluice.invalid",
           "GIT_COMMITTER_NAME": "sluice demo", "GIT_COMMITTER_EMAIL": "demo@sluice.invalid"}
    try:
        subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True)
    except FileNotFoundError:
        raise SluiceError("the demo needs git on PATH to build its rigs") from None
    except subprocess.CalledProcessError as err:
        raise SluiceError(f"git {' '.join(args)} failed: {err.stderr.strip()}") from None


def build_town(root: Path):
    """A fresh town under ``root`` with three rigs, their epics and tasks; returns (town, epic ids)."""
    from sluice.core.models import apply_config_value
    from sluice.store.files.town import init_town
    from sluice.store.items.rigs import add_rig
    from sluice.store.items.tracker import NewItem, add_dependency, create_item

    town = init_town(root / "town")
    epics = []
    for name, prefix, title, warm in RIGS:
        repo = root / "repos" / name
        repo.mkdir(parents=True)
        _git("init", "-q", "-b", "main", cwd=repo)
        (repo / "README.md").write_text(f"# {title}\n")
        _git("add", "README.md", cwd=repo)
        _git("commit", "-q", "-m", "initial", cwd=repo)
        if warm:  # an agent already has a checkout here: affinity makes this rig's work score higher
            _git("worktree", "add", "-q", "-b", "agent-1", str(root / "worktrees" / name), cwd=repo)
        add_rig(town, name, repo, prefix)
        epic = create_item(town, name, NewItem(title=title, priority=1, issue_type="epic"))
        epics.append(epic["id"])
        specs = [NewItem(title=task, priority=p, parent=epic["id"], tokens=t) for task, p, t in TASKS[name]]
        ids = [create_item(town, name, spec)["id"] for spec in specs]
        for rig, blocked, blocker in CHAINS:
            if rig == name:
                add_dependency(town, ids[blocked], ids[blocker])
    for key, value in (("scheduler.max_polecats", CAP), ("scheduler.batch_size", CAP),
                       ("scheduler.spawn_delay", "100ms"), ("executor.kind", "demo")):
        town.update_config(lambda config, k=key, v=value: apply_config_value(config, k, v))
    return town, epics


def _snapshot(town, full: dict) -> dict:
    """The demo's own counts (per-rig done and total, open work) beside the town's snapshot ``full``."""
    from sluice.store.items.rigstore import Stores

    per_rig = {}
    open_work = 0
    for store in Stores(town).all():
        items = [r for r in store.durable() if r.get("issue_type") != "epic"]
        done = sum(1 for r in items if r.get("status") == "closed")
        open_work += len(items) - done
        per_rig[store.rig.name] = {"total": len(items), "done": done}
    return {"rigs": per_rig, "open": open_work, "town": full}


def run(work_seconds: str = "1.5-3.5", keep: bool = False, timeout: float = 150.0, live: bool | None = None,
        web_port: int | None = None, say=print) -> DemoSummary:
    """Build the demo town, sling everything, tick until done; returns the summary.

    With ``web_port`` the dashboard serves the demo town on 127.0.0.1 while it
    runs (0: any free port); its URL goes to ``say`` before the first tick.
    """
    from sluice.api import Town as Facade
    from sluice.scheduler.launch.sling import sling
    from sluice.scheduler.unattended.daemon import Daemon
    from sluice.surfaces.demo_worker import work_span

    try:  # checked here: a bad value would only surface in every polecat, after the timeout
        work_span(work_seconds)
    except ValueError as err:
        raise UsageError(f"--work-seconds: {err}") from None
    if timeout <= 0:
        raise UsageError(f"--timeout must be > 0 seconds (got {timeout:g})")
    root = Path(tempfile.mkdtemp(prefix="sluice-demo-"))
    web = None
    old_env = {k: os.environ.get(k) for k in ("SLUICE_DEMO_WORK_SECONDS", "SLUICE_TOWN")}
    os.environ["SLUICE_DEMO_WORK_SECONDS"] = work_seconds
    old_term = _exit_on_sigterm()
    try:
        town, epics = build_town(root)
        os.environ["SLUICE_TOWN"] = str(town.root)
        slung = sling(town, epics)
        total = sum(len(tasks) for tasks in TASKS.values())
        log: list[str] = [f"slung {len(slung.scheduled)} items from {len(epics)} epics into the queue"]
        daemon = Daemon(town, interval=1.0, echo=lambda line: log.append(line.split(" ", 1)[-1]))
        facade = Facade(town)
        if web_port is not None:  # in a thread, stopped (below) before the town is removed
            from sluice.surfaces.web.serve import make_web

            web = make_web(Facade(town), port=web_port)
            web.start()
            say(f"sluice demo: watch it at {web.url}#token={web.token}")
        view = _View(live, total, web.url if web is not None else None)
        summary = DemoSummary(str(town.root), total, 0, 0.0, 0, 0, 0, 0, CAP, keep, log=log)
        started = time.monotonic()
        with view:
            while True:
                daemon.tick()
                result = daemon.last_result or {}
                summary.ticks += 1
                summary.dispatched += result.get("dispatched", 0)
                summary.failed += result.get("failed", 0)
                deadline = time.monotonic() + 1.0
                while True:  # sample often between ticks: the cap must hold at every moment
                    # one look per sample, as top takes it
                    snap = _snapshot(town, facade.snapshot().to_json())
                    running = snap["town"]["polecats"]
                    summary.max_active = max(summary.max_active, len(running))
                    summary.elapsed = time.monotonic() - started
                    view.update(snap, running, log, summary)
                    if snap["open"] == 0 or time.monotonic() >= deadline:
                        break
                    time.sleep(0.25)
                if snap["open"] == 0 and not running:
                    break
                if summary.elapsed > timeout:
                    summary.timed_out = True
                    break
        summary.done = total - snap["open"]
        summary.elapsed = time.monotonic() - started
        return summary
    finally:
        if web is not None:
            web.stop()
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        for key, value in old_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if not keep:
            _stop_all(root)
            shutil.rmtree(root, ignore_errors=True)


def _exit_on_sigterm():
    """Make SIGTERM unwind like Ctrl-C, so the town is removed and its polecats stopped.

    The default action ends the process at once, skipping every ``finally``.
    Returns the previous handler (None when not in the main thread, where
    handlers cannot be set).
    """
    def terminate(signum, _frame):
        raise SystemExit(128 + signum)

    try:
        return signal.signal(signal.SIGTERM, terminate)
    except ValueError:  # not the main thread
        return None


def _stop_all(root: Path) -> None:
    """Stop any polecat still running (only after a timeout or an interrupt)."""
    with contextlib.suppress(SluiceError, OSError):
        from sluice.executors import get_executor
        from sluice.store.files.town import Town

        executor = get_executor(Town(root / "town"))
        for polecat in executor.active():
            executor.stop(polecat.id)


class _View:
    """The ``sluice top`` layout, live on a terminal; a line per change elsewhere (CI logs, pipes)."""

    def __init__(self, live: bool | None, total: int, url: str | None = None):
        from rich.console import Console

        self.console = Console(stderr=True)  # stdout carries only the summary (or its JSON)
        self.live_enabled = self.console.is_terminal if live is None else live
        self.total = total
        self.url = url
        self._live = None
        self._last_line = ""
        self._printed_log = 0

    def __enter__(self):
        if self.live_enabled:
            from rich.live import Live

            self._live = Live(console=self.console, screen=True, auto_refresh=False, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc):
        if self._live is not None:
            self._live.__exit__(*exc)

    def update(self, snap: dict, running: list, log: list[str], summary: DemoSummary) -> None:
        if self._live is not None:
            self._live.update(self._render(snap, summary), refresh=True)
            return
        for line in log[self._printed_log:]:
            self.console.print(f"[dim]{line}[/dim]", highlight=False, soft_wrap=True)
        self._printed_log = len(log)
        done = sum(r["done"] for r in snap["rigs"].values())
        line = f"{summary.elapsed:5.1f}s  done {done}/{self.total}  running {len(running)}/{CAP}"
        if line.split("s ", 1)[1] != self._last_line.split("s ", 1)[-1]:
            self.console.print(line, highlight=False, soft_wrap=True)
            self._last_line = line

    def _render(self, snap: dict, summary: DemoSummary):
        from sluice.surfaces.top import render

        done = sum(r["done"] for r in snap["rigs"].values())
        note = [f"sluice demo  {summary.elapsed:5.1f}s", f"done {done}/{self.total}",
                f"most polecats at once {summary.max_active} (cap {CAP})", f"ticks {summary.ticks}"]
        if self.url:
            note.append(f"dashboard {self.url}")
        return render(snap["town"], note=note, height=self.console.height, width=self.console.width,
                      keys=False)
