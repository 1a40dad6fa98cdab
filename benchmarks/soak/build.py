"""The soak's town: three rigs with a few thousand random items, and the config under test.

* ``ex`` reads a beads export committed in its repository (``rig add --items``),
  so it is read-only: nothing may ever change that file or the repository;
* ``ba`` and ``ca`` keep their items in their own stores (``item import``).

Items get random priorities, types (a few epics and convoys), blocking edges
to earlier items, parent-child edges to epics, cross-rig edges (which never
block), some are closed from the start and a few have titles too long for any
argv, so their launches fail and trip the circuit breaker.  Everything is
drawn from one ``random.Random(seed)``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

RIGS = (("ex", "ex"), ("ba", "ba"), ("ca", "ca"))  # (name, prefix); the first is the read-only export
GIT_ENV = {"GIT_AUTHOR_NAME": "Soak", "GIT_AUTHOR_EMAIL": "soak@example.invalid",
           "GIT_COMMITTER_NAME": "Soak", "GIT_COMMITTER_EMAIL": "soak@example.invalid",
           "GIT_CONFIG_NOSYSTEM": "1"}
TYPES = ("task", "task", "task", "bug", "feature", "chore")
TITLES = ("fix $(rm -rf /)", "naïve ünïcode ✓", "quote ' \" `x`", "plain", "semi; colon | pipe", "tab\there")
TOUCHES = ("src/api/", "docs/")
BUDGET, BUDGET_WINDOW = 60_000, "30s"  # tokens per window: a few launches' worth, so it binds
HUGE_TITLE = 140 * 1024  # longer than the kernel passes as one argument: the launch is refused

#: The soak's hold file (relative to the town) and the guard's two settings (always met, never met).
HOLD_FILE = "HOLD"
GUARD_OFF, GUARD_ON = "1B", "1000TiB"


@dataclass
class Layout:
    root: Path
    town: Path
    soak: Path  # history, polecat locks, logs
    repos: dict[str, Path] = field(default_factory=dict)
    export: Path | None = None

    @property
    def history(self) -> Path:
        return self.soak / "history"


@dataclass
class Config:
    cap: int = 4
    batch: int = 3
    stall: str = "6s"
    features: dict[str, object] = field(default_factory=dict)  # optional keys this sluice accepted


def sluice(town: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLUICE_TOWN": str(town)}
    done = subprocess.run([sys.executable, "-m", "sluice", *args], env=env, capture_output=True, text=True,
                          cwd=town, timeout=300)
    if check and done.returncode != 0:
        problem = done.stderr.strip()[-500:]
        raise RuntimeError(f"sluice {' '.join(args[:4])} exited {done.returncode}: {problem}")
    return done


def git(repo: Path, *args: str) -> None:
    env = {**os.environ, **GIT_ENV, "HOME": str(repo)}
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


def _id(prefix: str, n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    n += 36 * 36  # at least three characters
    text = ""
    while n:
        n, r = divmod(n, 36)
        text = digits[r] + text
    return f"{prefix}-{text}"


def make_items(rng: random.Random, counts: dict[str, int]) -> dict[str, list[dict]]:
    """Items per rig prefix; see the module docstring for what is in them."""
    ids = {prefix: [_id(prefix, n) for n in range(count)] for prefix, count in counts.items()}
    every = [i for prefix in ids for i in ids[prefix]]
    out: dict[str, list[dict]] = {}
    for prefix, own in ids.items():
        records, epics = [], []
        for n, item_id in enumerate(own):
            stamp = f"2026-01-{1 + n % 28:02d}T{n % 24:02d}:{n % 60:02d}:00Z"
            kind = rng.choices(("epic", "convoy", "work"), (3, 1, 96))[0] if n > 5 else "work"
            title = f"{prefix} item {n}: " + rng.choice(TITLES)
            record = {"id": item_id, "title": title, "description": f"soak item {n}", "status": "open",
                      "priority": rng.randint(0, 4), "issue_type": "task", "labels": [],
                      "dependencies": [], "created_at": stamp, "updated_at": stamp,
                      "metadata": {"estimated_tokens": rng.choice([0, 500, 1000, 4000, 20000])}}
            if rng.random() < 0.1:
                record["labels"] = [rng.choice(["area:api", "area:ui", "area:db"])]
            if rng.random() < 0.15:  # what the overlap gate compares: two items touching one path
                record["metadata"]["touches"] = [rng.choice(TOUCHES)]
            deps = record["dependencies"]
            if kind == "epic":
                record["issue_type"] = "epic"
                epics.append(item_id)
            elif kind == "convoy":
                record["issue_type"] = "convoy"
                for target in rng.sample(every, 5):
                    deps.append(_dep(item_id, target, "tracks", stamp))
            else:
                record["issue_type"] = rng.choice(TYPES)
                if n > 0 and rng.random() < 0.3:
                    deps.append(_dep(item_id, own[rng.randrange(max(0, n - 50), n)], "blocks", stamp))
                if epics and rng.random() < 0.3:
                    deps.append(_dep(item_id, rng.choice(epics), "parent-child", stamp))
                if rng.random() < 0.05:
                    deps.append(_dep(item_id, rng.choice(every), "blocks", stamp))  # cross-rig: never blocks
                if rng.random() < 0.1:
                    record.update(status="closed", closed_at=stamp, close_reason="done before the soak")
                if n % 300 == 7:
                    record["title"] = "huge " + "x" * HUGE_TITLE
            records.append(record)
        out[prefix] = records
    return out


def _dep(source: str, target: str, kind: str, stamp: str) -> dict:
    return {"issue_id": source, "depends_on_id": target, "type": kind, "created_at": stamp}


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")


def build(root: Path, seed: int, items: int, polecat_argv: list[str], config: Config) -> Layout:
    """Create the town, its rigs and items, and set the config (optional features probed)."""
    rng = random.Random(seed)
    layout = Layout(root=root, town=root / "town", soak=root / "soak")
    layout.history.mkdir(parents=True, exist_ok=True)
    per_rig = max(10, items // 3)
    generated = make_items(rng, {prefix: per_rig for _name, prefix in RIGS})
    sluice(layout.town.parent, "init", str(layout.town))
    for index, (name, prefix) in enumerate(RIGS):
        repo = root / "repos" / name
        repo.mkdir(parents=True)
        git(repo, "init", "-q", "-b", "main")
        (repo / "README.md").write_text(f"rig {name}\n")
        if index == 0:
            layout.export = repo / ".beads" / "issues.jsonl"
            write_jsonl(layout.export, generated[prefix])
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "initial")
        layout.repos[name] = repo
        if index == 0:
            export = str(layout.export)
            sluice(layout.town, "rig", "add", name, str(repo), "--prefix", prefix, "--items", export)
        else:
            sluice(layout.town, "rig", "add", name, str(repo), "--prefix", prefix)
            source = root / f"{name}-import.jsonl"
            write_jsonl(source, generated[prefix])
            sluice(layout.town, "item", "import", name, str(source))
            source.unlink()
    configure(layout, polecat_argv, config)
    write_ids(layout, generated)
    return layout


def write_ids(layout: Layout, generated: dict[str, list[dict]]) -> None:
    """What the load processes pick from: work ids (closed ones too), epics, convoys, own rigs' items."""
    every = [r for records in generated.values() for r in records]
    ids = {
        "rigs": [name for name, _prefix in RIGS],
        "read_only": RIGS[0][0],
        "export": str(layout.export),
        "work": [r["id"] for r in every if r["issue_type"] not in ("epic", "convoy")],
        "epics": [r["id"] for r in every if r["issue_type"] == "epic"],
        "convoys": [r["id"] for r in every if r["issue_type"] == "convoy"],
        "by_rig": {name: [r["id"] for r in generated[prefix]] for name, prefix in RIGS},
        "labels": {r["id"]: r["labels"] for r in every if r["labels"]},
        "touches": {r["id"]: r["metadata"]["touches"] for r in every if r["metadata"].get("touches")},
        "tokens": {r["id"]: r["metadata"]["estimated_tokens"] for r in every},
    }
    (layout.soak / "ids.json").write_text(json.dumps(ids))


def configure(layout: Layout, polecat_argv: list[str], config: Config) -> None:
    required = {
        "scheduler.max_polecats": str(config.cap),
        "scheduler.batch_size": str(config.batch),
        "scheduler.spawn_delay": "0s",
        "scheduler.max_dispatch_failures": "3",
        "scheduler.polecat_timeout": config.stall,
        "scheduler.retry_base": "1s",
        "scheduler.retry_max": "3s",
        "executor.kind": "local",
        "executor.command": json.dumps(polecat_argv),
    }
    for key, value in required.items():
        sluice(layout.town, "config", "set", key, value)
    # Switched on when this sluice accepts the key; a refusal means the feature is not there yet.
    optional = {
        "rigs.ex.max_polecats": "2", "rigs.ba.max_polecats": "2", "rigs.ca.max_polecats": "3",
        "scheduler.label_caps.area:db": "1",
        "scheduler.token_budget": str(BUDGET), "scheduler.budget_window": BUDGET_WINDOW,
        "scheduler.throttle_for": "3s",  # a polecat exiting 75 throttles its rig this long
        "scheduler.breaker_cooldown": "20s",  # and a circuit-broken item is tried again after this
        "scheduler.missing_grace": "30s",
        "scheduler.compact_retention": "20s",  # so compaction archives contexts during the run
        "scheduler.compact_at": "3000",  # and the daemon compacts on its own too
        # The gates the controller toggles at random (soak.workers.toggle_gate): a hold file, and a
        # host guard always met until it is switched to a limit no machine meets.
        "scheduler.hold_file": HOLD_FILE,
        "scheduler.host.min_free_memory": GUARD_OFF,
        "scheduler.host.max_load": "1000000",
    }
    for key, value in optional.items():
        if sluice(layout.town, "config", "set", key, value, check=False).returncode == 0:
            got = sluice(layout.town, "config", "get", key, check=False)
            config.features[key] = _parse(got.stdout.strip()) if got.returncode == 0 else value


def _parse(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def fingerprint(path: Path) -> dict[str, str]:
    """sha256 of every file under ``path`` (a repository with its .git, or one file)."""
    if path.is_file():
        return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()}
    out = {}
    for file in sorted(p for p in path.rglob("*") if p.is_file() or p.is_symlink()):
        data = os.readlink(file).encode() if file.is_symlink() else file.read_bytes()
        out[str(file.relative_to(path))] = hashlib.sha256(data).hexdigest()
    return out
