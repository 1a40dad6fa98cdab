"""Chaos soak: a whole town under load and kill -9, checked against its own history.

    benchmarks/soak.py --minutes 1 --seed 7

builds a town of three rigs (one a read-only beads export) with a few
thousand items, then for M minutes runs four slingers, the daemon (1 s
interval, a cap, stall timeout, retry backoff, and whichever admission
features this sluice accepts), a tracker, a controller (pause/resume,
patrols with --fix, compaction, manual cycles), an exporter (rewriting the
read-only export under running work) and a chaos that SIGKILLs a
random one of them every few seconds and tears a log once a minute.
Hostile input comes too: the slingers now and then pass an argument no
encoding holds or no cap allows, and the exporter now and then puts a line
of such text, a FIFO, a symlink to ``/dev/zero`` or a symlink loop where
the export was.
Afterwards it checks every promise (see docs/reliability.md), prints one
table, and exits 1 naming each violation with the seed that replays it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from soak import invariants as inv
from soak.build import BUDGET, Config, build, fingerprint
from soak.supervisor import Supervisor
from soak.workers import HOSTILE_EXPORTS

BUDGET_SECONDS = 30.0  # soak.build.BUDGET_WINDOW
POLECAT = Path(__file__).resolve().parent / "soak" / "polecat.py"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--items", type=int, default=3000, help="work items across the three rigs")
    parser.add_argument("--dir", type=Path, help="where to build the town (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the town and history afterwards")
    parser.add_argument("--kill-every", type=float, nargs=2, default=(2.0, 5.0), metavar=("MIN", "MAX"))
    parser.add_argument("--disk-full", type=float, default=10.0, metavar="SECONDS",
                        help="how long the town's disk is full (0: no such phase)")
    parser.add_argument("--events-unwritable", type=float, default=10.0, metavar="SECONDS",
                        help="how long the event log cannot be written (0: no such phase)")
    args = parser.parse_args(argv)

    root = args.dir or Path(tempfile.mkdtemp(prefix=f"sluice-soak-{args.seed}-"))
    root.mkdir(parents=True, exist_ok=True)
    phases, skipped = _phases(root, args)
    config = Config()
    soak_dir = root / "soak"
    polecat = [sys.executable, "-S", str(POLECAT), str(soak_dir), str(args.seed),
               "{item_id}", "{rig}", "{context_id}", "{title}"]
    started = time.time()
    layout = build(root, args.seed, args.items, polecat, config)
    before = {name: fingerprint(repo) for name, repo in layout.repos.items()}
    before["export"] = fingerprint(layout.export)
    rigs_dir = layout.town / ".sluice" / "rigs"
    own_items = {name: {r["id"]: r for r in inv._lines(rigs_dir / name / "issues.jsonl")}
                 for name in layout.repos if name != "ex"}

    supervisor = Supervisor(layout, args.seed, config.cap, config.features, stall=6.0)
    try:
        supervisor.run(args.minutes * 60, kill_every=tuple(args.kill_every), phases=phases)
    except BaseException:
        _unmount(root)
        raise

    quiet_findings, quiet_rounds = inv.quiet_agreement(layout, args.seed) \
        if "scheduler.hold_file" in config.features else ([], 0)
    ev = inv.gather(layout)
    ids = json.loads((layout.soak / "ids.json").read_text())
    parse_findings, torn_left = inv.files_parse(ev)
    gate_findings, gate_intervals = inv.gates_held(ev)
    agree_findings, agreements = inv.views_agree(ev)
    agree_findings += quiet_findings
    hostile_findings, hostile_tried = inv.hostile_refused(ev)
    agreements += quiet_rounds
    checks = [
        ("no item runs in two polecats at once", inv.no_overlap(ev)),
        ("no sling launched twice", inv.one_launch_per_sling(ev)),
        ("every acknowledged sling accounted for", inv.acked_slings_accounted(ev)),
        ("one open context per item", inv.one_open_context_per_item(ev)),
        ("caps never exceeded (sampled 1/s), exports edited under running work",
         inv.caps_held(supervisor.samples)),
        ("one run record per launch, every end an outcome", inv.runs_recorded(ev)),
        ("token budget never exceeded", inv.budget_held(ev, ids["tokens"], BUDGET, BUDGET_SECONDS)
         if "scheduler.token_budget" in config.features else []),
        ("every file parses", parse_findings),
        ("every read command answers", inv.readers_work(layout, list(layout.repos))),
        ("repos and export byte-identical", inv.repos_untouched(layout, before)),
        ("work items changed only by the tracker", inv.items_only_changed_by_tracker(ev, own_items)),
        ("scheduler status agrees with a recount", inv.status_agrees(layout, config.cap, 3)),
        ("no traceback, no internal error", inv.no_crash(ev, layout)),
        (f"every hostile argument refused as a usage error ({hostile_tried} tried)", hostile_findings),
        (f"no launch while a gate holds ({gate_intervals} holds)", gate_findings),
        (f"status, explain and the next cycle agree ({agreements} unchanged reads)", agree_findings),
    ]
    stats = statistics(ev, supervisor, args, time.time() - started, torn_left, config)
    said = [r.get("error") or "" for r in ev.records]
    effects = {"disk-full": f"{sum('No space left' in e for e in said)} call(s) refused by name",
               "events-unwritable": f"{sum('event(s) not recorded' in e for e in said)} warning(s)"}
    stats["phases"] = [f"{p['name']} {p.get('seconds', 0):g} s ({effects[p['name']]})"
                       for p in supervisor.phases] + skipped
    violations = sum(len(found) for _name, found in checks)
    print_table(stats, checks, args)
    (soak_dir / "result.json").write_text(json.dumps({"stats": stats, "violations": {
        name: found for name, found in checks if found}}, indent=2, default=str))
    if not args.keep and not violations:
        _unmount(root)
        shutil.rmtree(root, ignore_errors=True)
    elif violations:
        print(f"town and history kept in {root}", file=sys.stderr)
    return 1 if violations else 0


def _phases(root: Path, args) -> tuple[tuple[tuple[str, float, float], ...], list[str]]:
    """The phases to run, at a third and two thirds of the run, and why any is skipped.

    The disk-full phase needs the town on a disk of its own: a small tmpfs
    mounted where the town is built (root only).
    """
    seconds = args.minutes * 60
    phases, skipped = [], []
    if args.disk_full > 0:
        town = root / "town"
        town.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(town)],
                              capture_output=True, text=True)
        if done.returncode == 0:
            phases.append(("disk-full", seconds / 3, args.disk_full))
        else:
            skipped.append(f"disk-full skipped (no tmpfs: {done.stderr.strip() or done.returncode})")
    if args.events_unwritable > 0:
        probe = root / "immutable-probe"
        probe.touch()
        done = subprocess.run(["chattr", "+i", str(probe)], capture_output=True, text=True) \
            if shutil.which("chattr") else None
        if done is not None and done.returncode == 0:
            subprocess.run(["chattr", "-i", str(probe)], check=True)
            phases.append(("events-unwritable", 2 * seconds / 3, args.events_unwritable))
        else:
            why = "no chattr" if done is None else done.stderr.strip() or str(done.returncode)
            skipped.append(f"events-unwritable skipped (cannot make a file immutable: {why})")
        probe.unlink()
    return tuple(phases), skipped


def _unmount(root: Path) -> None:
    subprocess.run(["umount", "-l", str(root / "town")], capture_output=True, check=False)


def statistics(ev: inv.Evidence, sup: Supervisor, args, elapsed: float, torn_left: int,
               config: Config) -> dict:
    starts = Counter(r.get("kind") for r in ev.ops("start"))
    ends = Counter(r.get("code") for r in ev.ops("end"))
    scheduled = sum(len(r["result"].get("scheduled", [])) for r in ev.ops("sling")
                    if isinstance(r.get("result"), dict))
    reasons = Counter(c.get("close_reason") for c in ev.contexts.values() if c.get("status") == "closed")
    calls = Counter(r["op"] for r in ev.records if r.get("role", "").split("-")[0] in ("slinger", "tracker",
                                                                                     "controller"))
    return {
        "seed": args.seed, "minutes": args.minutes, "wall_seconds": round(elapsed),
        "features": sorted(config.features) or ["(none: cap only)"],
        "processes_killed": sum(sup.kills.values()), "kills": dict(sup.kills),
        "restarts": sum(sup.restarts.values()), "torn_writes": len(sup.tears), "torn_tails_left": torn_left,
        "sling_calls": calls["sling"], "slings_acknowledged": scheduled, "clears": calls["clear"],
        "tracker_changes": calls["close"] + calls["reopen"] + calls["dep-add"] + calls["dep-remove"],
        "export_edits": sum(not _hostile(r) for r in ev.ops("export-edit")),
        "hostile_exports": dict(Counter(r["how"] for r in ev.ops("export-edit") if _hostile(r))),
        "pauses": calls["pause"], "patrols": calls["patrol"], "compactions": calls["compact"],
        "launches": len(ev.launches), "polecats_started": sum(starts.values()), "by_kind": dict(starts),
        "exit_codes": {str(k): v for k, v in ends.items()}, "contexts_closed": dict(reasons),
        "samples": sup.samples.count, "max_alive": sup.samples.max_alive, "cap": config.cap,
        "max_by_rig": dict(sup.samples.max_by_rig), "max_by_label": dict(sup.samples.max_by_label),
    }


def _hostile(edit: dict) -> bool:
    return edit.get("how") in HOSTILE_EXPORTS


def print_table(stats: dict, checks, args) -> None:
    rows = [
        ("seed / minutes", f"{stats['seed']} / {stats['minutes']:g} (wall {stats['wall_seconds']} s)"),
        ("features on", ", ".join(stats["features"])),
        ("processes killed", f"{stats['processes_killed']} " + _counts(stats["kills"])),
        ("restarts / torn writes", f"{stats['restarts']} / {stats['torn_writes']}"
                                   f" ({stats['torn_tails_left']} torn tail(s) left unmended)"),
        ("sling calls / acknowledged", f"{stats['sling_calls']} / {stats['slings_acknowledged']} contexts"),
        ("clears / tracker changes", f"{stats['clears']} / {stats['tracker_changes']}"),
        ("export edits under running work", str(stats["export_edits"])),
        ("hostile exports", _counts(stats["hostile_exports"]) if stats["hostile_exports"] else "none"),
        ("pauses / patrols / compactions",
         f"{stats['pauses']} / {stats['patrols']} / {stats['compactions']}"),
        ("launches / polecats started", f"{stats['launches']} / {stats['polecats_started']} "
                                        + _counts(stats["by_kind"])),
        ("contexts closed", _counts(stats["contexts_closed"])),
        ("phases without a disk", ", ".join(stats.get("phases", [])) or "none"),
        ("max polecats alive", f"{stats['max_alive']} (cap {stats['cap']}, {stats['samples']} samples)"
                               + (f" by rig {_counts(stats['max_by_rig'])}" if stats["max_by_rig"] else "")),
    ]
    width = max(len(name) for name, _ in [*rows, *checks])
    print(f"\nsluice soak — seed {args.seed}, {args.minutes:g} min")
    print("-" * (width + 40))
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    print("-" * (width + 40))
    for name, found in checks:
        print(f"{name:<{width}}  {'ok' if not found else f'VIOLATED ({len(found)})'}")
    violations = sum(len(found) for _name, found in checks)
    print("-" * (width + 40))
    print(f"{'violations':<{width}}  {violations}")
    for name, found in checks:
        for line in found[:20]:
            print(f"VIOLATION {name}: {line}  [replay: benchmarks/soak.py --minutes {args.minutes:g}"
                  f" --seed {args.seed}]")


def _counts(counter: dict) -> str:
    return "(" + ", ".join(f"{k} {v}" for k, v in sorted(counter.items(), key=lambda kv: -kv[1])) + ")"


if __name__ == "__main__":
    sys.exit(main())
