"""How results become output, shared by the typer command line and its fast path.

Kept free of typer so that :mod:`sluice.surfaces.fastcli` prints exactly what
the typer commands print without importing them.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable
from typing import Any

from sluice.core.text import clipped, printable_text, unencodable
from sluice.core.text import printable as shown


class RawJSON(list):
    """A list of already-serialised JSON values, printed as one array without re-parsing."""


def to_json(data: Any) -> str:
    """Every ``--json`` document: compact, on one line (``jq`` makes it pretty when a person wants it).

    Compact rather than indented because a large array of items (``item ready
    --json`` of a big rig) is then the stored lines joined, never re-encoded.
    """
    if isinstance(data, RawJSON):
        return "[" + ",".join(data) + "]"
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=_default)


def _default(value: Any):
    dump = getattr(value, "model_dump", None)
    if dump is not None:
        return dump(mode="json")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def emit(data: Any, as_json: bool, human: Callable[[Any], str | None] | None = None) -> None:
    """The one place a command's result becomes output: JSON, or text for a person."""
    if as_json:
        sys.stdout.write(to_json(data) + "\n")
        return
    text = human(data) if human is not None else to_json(data)
    if text:
        write_text(text)


def write_text(text: str) -> None:
    """Text for a person on stdout, every unsafe character escaped: the one way a view prints.

    The last line of defence: whatever a view forgot to escape field by field
    still cannot drive the terminal.
    """
    text = printable_text(text)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


# -- text for people ---------------------------------------------------------------


def table(header: list[str], rows: list[list[str]], right: tuple[int, ...] = (), indent: str = ""
          ) -> list[str]:
    """Rows under a header, each column as wide as its widest cell, numbers (``right``) right-aligned.

    Cells are text already shown (escaped); the last column is not padded, so
    a long title costs nothing to the columns before it.
    """
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        padded = [c.rjust(w) if i in right else c.ljust(w)
                  for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return (indent + "  ".join(padded)).rstrip()

    return [line(header), *(line(r) for r in rows)]


#: The outcomes of a run that went wrong: marked ``!`` wherever runs are listed.
FAILED_OUTCOMES = ("failed", "timed-out", "vanished")


def score_text(score) -> str:
    """A score as people read it, to two decimals (``4.03``); the JSON keeps every digit."""
    return "-" if not isinstance(score, (int, float)) or isinstance(score, bool) else f"{score:.2f}"


# -- items as text ------------------------------------------------------------------


def item_line(item: dict) -> str:
    # `item ready` rows are records as stored: a key may be present but null, or of any JSON type.
    from sluice.core.items import priority_of

    status = shown(item.get("status") or "open")
    return f"{shown(item['id']):<18} P{priority_of(item)} {status:<11} {shown(item.get('title'))}"


def item_lines(items) -> str:
    return "\n".join(item_line(i) for i in items) or "no items"


def item_text(item: dict) -> str:
    keys = ("issue_type", "assignee", "labels", "created_at", "closed_at", "close_reason")
    rows = [item_line(item), *(f"  {key}: {shown(item[key])}" for key in keys if item.get(key))]
    rows += [f"  depends on {shown(dep.get('depends_on_id'))} ({shown(dep.get('type'))})"
             for dep in item.get("dependencies") or ()]
    if item.get("description"):
        rows += ["", description_text(item["description"])]
    return "\n".join(rows)


def description_text(text) -> str:
    """A description keeps its line breaks (it is prose); no other control character reaches a terminal."""
    if not isinstance(text, str):
        return shown(text)
    return "\n".join(shown(line) for line in text.replace("\r\n", "\n").split("\n"))


def blocked_text(rows) -> str:
    return "\n".join(f"{item_line(r)}  ← {', '.join(map(shown, r['blocked_by']))}"
                     for r in map(json.loads, rows)) or "no blocked items"


def ready_text(rows) -> str:
    return item_lines(json.loads(r) for r in rows)


def next_text(decisions: list[dict]) -> str:
    if not decisions:
        return "No ready items."
    rows = [["skipped" if d["skipped"] else "next", shown(d["node_id"]), score_text(d["score"]),
             shown(d["graph_id"]) or "-", shown(d["dispatch_hints"]["project"]),
             shown(d["dispatch_hints"]["title"])] for d in decisions]
    return "\n".join(table(["DECISION", "ITEM", "SCORE", "GRAPH", "RIG", "TITLE"], rows, right=(2,)))


def schedule_status_text(data: dict) -> str:
    """``schedule status``: the ready count, merge pressure, then the recent decisions as a table."""
    recent = data["recent_decisions"]
    lines = ["Schedule status", "", f"  Ready items:       {data['ready_count']}",
             f"  Recent decisions:  {len(recent)} shown (newest first)"]
    pressure = data["merge_pressure"]
    lines.append("  Merge pressure:    " + (", ".join(f"{shown(rig)} ({n} in its merge queue)"
                                                   for rig, n in pressure.items()) or "none"))
    weights = data["policy"]["weights"]
    lines.append("  Weights:           " + ", ".join(f"{k} {v}" for k, v in weights.items() if v is not None))
    if recent:
        rows = [[shown(d.get("at")), "skipped" if d.get("skipped") else "next", shown(d.get("node_id")),
                 score_text(d.get("score")), shown(d.get("source") or "schedule next")] for d in recent]
        lines += ["", *table(["AT", "DECISION", "ITEM", "SCORE", "BY"], rows, right=(3,), indent="  ")]
    return "\n".join(lines)


def policy_text(p: dict) -> str:
    """``schedule policy show``: one line per setting, with what it does; graph overrides below."""
    w = p["weights"]
    settings = [
        ("priority", w["priority"], "weight of urgency (4 - priority)"),
        ("affinity", w["affinity"], "weight of a warm rig"),
        ("cost", w["cost"], "weight of cheapness, 1/(1 + tokens/1000)"),
        ("fairness", w["fairness"], "weight of the least-scheduled rigs"),
    ]
    if w.get("deadline") is not None:
        settings.append(("deadline", w["deadline"], "weight of a near due_at"))
    settings += [
        ("merge_queue_threshold", p["merge_queue_threshold"], "merge-queue depth that pressures a rig"),
        ("merge_pressure_penalty", p["merge_pressure_penalty"], "points a pressured rig loses"),
        ("skip_on_merge_pressure", p["skip_on_merge_pressure"], "pressured items are skipped, not chosen"),
    ]
    for key in ("aging", "aging_max"):
        if key in p:
            settings.append((key, p[key], "points per hour queued" if key == "aging" else "at most this"))
    rows = [[name, json.dumps(value) if isinstance(value, bool) else str(value), what]
            for name, value, what in settings]
    lines = ["Scoring policy", "", *table(["SETTING", "VALUE", "MEANING"], rows, right=(1,), indent="  ")]
    for graph, o in p["graph_overrides"].items():
        set_weights = ", ".join(f"{k} {v}" for k, v in o.items() if v is not None) or "no weights"
        lines.append(f"  graph {shown(graph)}: {set_weights}")
    return "\n".join(lines)


def queue_status_text(data: dict) -> str:
    state = f"PAUSED (by {data['paused_by'] or 'unknown'})" if data["paused"] else "active"
    if data["mode"] == "deferred":
        mode = f"deferred (scheduler.max_polecats={data['max_polecats']}; set it to -1 for direct dispatch)"
    else:
        mode = f"direct (scheduler.max_polecats={data['max_polecats']}): sling launches at once"
    active = data["active_polecats"]
    lines = [
        "Scheduler status",
        "",
        f"  State:      {state}",
        f"  Dispatch:   {mode}",
        f"  Queued:     {data['queued_total']} total, {data['queued_ready']} ready",
        f"  Polecats:   {'unknown' if active is None else active} active,"
        f" {'unknown' if data['capacity'] is None else data['capacity']} free"
        + (f" of {data['max_polecats']}" if data["mode"] == "deferred" else ""),
    ]
    if data.get("executor_error"):
        lines.append(f"  Executor:   {data['executor_error']}")
    if data["last_dispatch_at"]:
        lines.append(f"  Last dispatch: {data['last_dispatch_at']} ({data['last_dispatch_count']} item(s))")
    kept = data.get("forecast")
    if kept:
        lines.append(f"  Drains:     {drain_text(kept)}, forecast {age_text(since(kept['at']))} ago")
    if data["stale"]:
        lines.append(f"  Stale:      {data['stale']} context(s) the next cycle will close")
    if data.get("held"):
        lines.append(f"  Held:       {data['held']} context(s) whose item is missing or unreadable")
    for rig, detail in (data.get("unreadable") or {}).items():
        lines.append(f"  Unreadable: rig {shown(rig)} held (rig-unreadable): {shown(detail)}")
    for row in data.get("source_stale") or ():
        lines.append(f"  Source stale: rig {shown(row['rig'])} ({row['kind']}): {shown(row['detail'])}")
    for row in data.get("budgets", []):
        who = "town" if row["rig"] is None else f"rig {row['rig']}"
        lines.append(f"  Budget:     {who}: {row['spent']} / {row['budget']} tokens per {row['window']}")
    for row in data.get("throttles", []):
        who = "town" if row["rig"] is None else f"rig {row['rig']}"
        why = f" ({shown(row['reason'])})" if row.get("reason") else ""
        lines.append(f"  Throttled:  {who} until {row['until']}{why}")
    if data.get("circuit_broken"):
        lines.append(f"  Broken:     {data['circuit_broken']} item(s) (`sluice scheduler broken`)")
    binding = data.get("binding")
    if binding:
        detail = f": {shown(binding['detail'])}" if binding.get("detail") else ""
        lines.append(f"  Binding:    {binding['code']}{detail}")
    host = host_line(data.get("host"))
    if host:
        lines.append(f"  Host:       {host}")
    if data["items"]:
        lines += ["", queue_text(data["items"])]
    if data.get("truncated"):
        lines.append(f"… and {data['items_total'] - len(data['items'])} more"
                     " (`sluice scheduler list` shows every one; `--limit 0` here)")
    return "\n".join(lines)


def size_text(size: int) -> str:
    for unit, scale in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f}{unit}iB"
    return f"{size}B"


def host_line(host: dict | None) -> str:
    """The host guard's last reading and the hold file, in one line ("" when neither is set)."""
    if not host:
        return ""
    parts = []
    reading = host.get("reading")
    if reading:
        if reading.get("load_per_core") is not None:
            parts.append(f"load {reading['load_per_core']:.2f}/core")
        if reading.get("free_memory") is not None:
            parts.append(f"memory {size_text(reading['free_memory'])} free")
        for path, free in sorted((reading.get("free_disk") or {}).items()):
            parts.append(f"disk {size_text(free)} free on {shown(path)}")
        parts[-1:] = [f"{parts[-1]} (read {'now' if host.get('fresh') else host.get('read_at')})"] if parts \
            else []
    if host.get("hold_file"):
        holding = any(r["code"] == "hold-file" for r in host.get("held", ()))
        parts.append(f"hold file {shown(host['hold_file'])} {'present' if holding else 'absent'}")
    return "; ".join(parts)


def queue_text(rows: list[dict]) -> str:
    if not rows:
        return "Nothing scheduled.\n(Deferred dispatch is on when scheduler.max_polecats > 0.)"
    etas = "start_at" in rows[0]  # `scheduler list` rows carry the forecast; `status` rows do not
    out = []
    for n, row in enumerate(rows, start=1):
        mark = "held" if row.get("held") else "blocked" if row["blocked"] else "ready"
        fails = f"  [{row['dispatch_failures']} failed]" if row["dispatch_failures"] else ""
        text = shown(row["title"])
        if row.get("held"):
            since = f" since {row['missing_since']}" if row.get("missing_since") else ""
            closes = f", closed at {row['closes_at']} if still missing" if row.get("closes_at") else ""
            text = f"({row['held']}: item not found in any rig{since}{closes})"
        if row.get("promoted_at"):
            text += "  [promoted]"
        priority = row.get("priority")
        cells = [str(n), mark, shown(row["id"]), shown(row["target_rig"]),
                 "-" if priority is None else f"P{priority}", score_text(row.get("score")),
                 ", ".join(map(shown, row.get("why") or ())) or "-", text + fails]
        if etas:
            cells[6:6] = [clock_text(row.get("start_at")), clock_text(row.get("done_at"))]
        out.append(cells)
    header = ["#", "STATE", "ITEM", "RIG", "PRI", "SCORE", "WAITS FOR", "TITLE"]
    if etas:
        header[6:6] = ["START≈", "DONE≈"]
    lines = [f"Scheduled work ({len(rows)} item(s)) in dispatch order", "",
             *table(header, out, right=(0, 5), indent="  ")]
    if etas:
        lines.append("(START and DONE are forecast, UTC; `sluice scheduler forecast` says from what)")
    return "\n".join(lines)


def budget_text(fit: dict) -> str:
    """Whether an item's p90 tokens fit what is left of the budget that binds it, and when they next do."""
    whose = "the town's budget" if fit["scope"] == "town" else f"rig {shown(fit['scope'])}'s budget"
    of = f"{whose} ({fit['budget']} per {fit['window']})"
    need = f"p90 {fit['tokens_p90']} tokens"
    if fit["fits"]:
        return f"{need} fit the {fit['remaining']} left of {of}"
    if fit["room_at"] is None:
        return f"{need} exceed {of} by themselves: it waits until the budget is raised"
    return f"{need} do not fit the {fit['remaining']} left of {of}; room ≈{clock_text(fit['room_at'])}"


def snapshot_text(snap: dict) -> str:
    """``snapshot`` for a person: the scheduler, the forecast's drain and each rig in a line."""
    sched = snap["scheduler"]
    state = "PAUSED" if sched["paused"] else "active"
    lines = [f"sluice town {snap['town']} at {snap['at']}",
             f"  scheduler {state}, {sched['mode']} mode, {sched['active_polecats'] or 0} polecat(s) running,"
             f" {sched['queued_total']} queued ({sched['queued_ready']} ready)"]
    forecast = snap.get("forecast") or {}
    if forecast.get("error"):
        lines.append(f"  no forecast: {forecast['error']}")
    elif forecast:
        lines.append(f"  queue drains {drain_text(forecast)} (forecast, UTC)")
    for name, rig in snap["rigs"].items():
        if "error" in rig:
            lines.append(f"  {name}: {rig['error']}")
            continue
        lines.append(f"  {name}: {rig['ready']} ready, {rig['blocked']} blocked, {rig['queued']} queued,"
                     f" {rig['running']} running, merge queue {rig['merge_queue']['depth']}")
    lines.append("(`sluice snapshot --json` for everything; `sluice top` to watch it live)")
    return "\n".join(lines)


def drain_text(forecast: dict) -> str:
    """When a forecast has the queue drain: ``≈15:10 (p90 15:40)``, or that nothing was left to wait for."""
    if not forecast.get("drain_at"):
        return "nothing queued or running"
    later = forecast.get("drain_p90_at") and forecast["drain_p90_at"] != forecast["drain_at"]
    p90 = f" (p90 {clock_text(forecast['drain_p90_at'])})" if later else ""
    return f"≈{clock_text(forecast['drain_at'])}{p90}"


def duration_text(seconds: float | None) -> str:
    """A runtime in whole seconds as ``1h2m3s``, ``-`` when there is none."""
    from sluice.core.clock import format_duration

    return "-" if seconds is None else format_duration(round(seconds))


def since(at: str) -> float:
    """Seconds from an ISO time (UTC) to now."""
    from datetime import datetime

    return time.time() - datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()


def age_text(seconds: float) -> str:
    """An age as people say it: ``40 s``, ``3 min``, ``2 h``, ``3 days``."""
    seconds = max(0, int(seconds))
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    if seconds < 36 * 3600:
        return f"{round(seconds / 3600)} h"
    return f"{round(seconds / 86400)} days"


def clock_text(at: str | None, today: str | None = None) -> str:
    """An ISO time as ``HH:MM`` (UTC), with its date when it is not ``today`` (YYYY-MM-DD); ``-`` for None."""
    if not at:
        return "-"
    today = today or time.strftime("%Y-%m-%d", time.gmtime())
    return at[11:16] if at[:10] == today else f"{at[:10]} {at[11:16]}"


def hhmm(at) -> str:
    """A forecast time as ``HH:MM`` (UTC), ``-`` when there is none (the item cannot start)."""
    return str(at)[11:16] if at else "-"


def basis_text(basis: dict | None) -> str:
    """What a forecast stands on, in words: ``23 runs of api/task``, ``its estimated_minutes``."""
    if not basis:
        return "nothing"
    level, samples, kind = basis.get("level"), basis.get("samples"), basis.get("kind") or ""
    if level == "estimated_minutes":
        return "its beads estimated_minutes (no runs of its kind yet)"
    if level == "default":
        return "the default runtime (no runs of its kind yet)"
    if level == "town":
        return f"{samples} runs of the whole town"
    return f"{samples} runs of {shown(kind)}"


def forecast_text(data: dict) -> str:
    """One line per queued item: expected start, finish (p90) and what the figure stands on."""
    lines = [f"{'POS':>4}  {'ITEM':<14} {'RIG':<10} {'START':>5}  {'DONE':>5}  {'P90':>5}  BASIS"]
    for row in data["items"]:
        basis = row["basis"]
        why = f"  (cannot start: {row['why']})" if row.get("why") else ""
        fit = row.get("budget")
        if fit and not fit["fits"]:
            why += (f"  (budget: room ≈{clock_text(fit['room_at'])})" if fit["room_at"]
                    else "  (budget: exceeds it by itself)")
        lines.append(f"{row['position']:>4}  {shown(row['item_id']):<14} {shown(row['rig']):<10} "
                     f"{hhmm(row['start_at']):>5}  {hhmm(row['done_at']):>5}  {hhmm(row['done_p90_at']):>5}  "
                     f"{basis['level']} ({basis['samples']} runs){why}")
    daemon = "" if data["daemon"]["running"] else " (no daemon seen: assuming one"
    daemon += f" every {data['daemon']['interval']:g}s)" if daemon else ""
    drain = f"queue drains ≈{data['drain_at']} (p90 {data['drain_p90_at']})" if data["drain_at"] else (
        "nothing queued or running")
    lines.append(f"{drain}{daemon}; times UTC")
    return "\n".join(lines)


def explain_text(data: dict) -> str:
    item_id, context_id = shown(data["item_id"]), shown(data["context_id"])
    if data["would_dispatch"]:
        head = f"{item_id}: the next cycle would launch it (context {context_id})"
    elif data["queued"]:
        head = f"{item_id}: queued (context {context_id}), but the next cycle would not launch it"
    else:
        head = f"{item_id}: not queued"
    lines = [head]
    if data["score"] is not None:
        lines.append(f"  score: {data['score']}")
    if data.get("promoted_at"):
        lines.append(f"  promoted: {data['promoted_at']} (ahead of score order)")
    lines += [f"  {r['code']}: {shown(r['detail'])}" for r in data["reasons"]]
    if data.get("running") and data.get("done_at"):
        lines.append(f"  running since {clock_text(data['start_at'])}, done ≈{clock_text(data['done_at'])},"
                     f" from {basis_text(data.get('basis'))}")
    elif data.get("start_at"):
        later = data.get("done_p90_at") and data["done_p90_at"] != data["done_at"]
        p90 = f" (p90 {clock_text(data['done_p90_at'])})" if later else ""
        start, done = clock_text(data["start_at"]), clock_text(data["done_at"])
        lines.append(f"  would start ≈{start}, done ≈{done}{p90}, from {basis_text(data.get('basis'))}")
    elif data.get("eta_why"):
        lines.append(f"  no start forecast: {data['eta_why']}")
    if data.get("budget"):
        lines.append(f"  budget fit: {budget_text(data['budget'])}")
    if data.get("estimated_minutes") is not None:
        lines.append(f"  estimated: {data['estimated_minutes']} min (beads estimated_minutes)")
    if data.get("due"):
        lines.append(f"  {data['due']} ({shown(data['due_at'])})")
    for g in data.get("gates") or ():
        kind = shown(g["await_type"] or "an unnamed kind")
        kind += f" {shown(g['await_id'])}" if g["await_id"] else ""
        lines.append(f"  gate {shown(g['id'])} ({g['status']}): waits for {kind}"
                     + (f", timeout {g['timeout']}" if g["timeout"] else ""))
    return "\n".join(lines)


def cycle_text(data: dict) -> str | None:
    held = [f"  Held {shown(row['item_id'])}: {row['reason']} (not found in any rig"
            + (f" since {row['missing_since']}" if row.get("missing_since") else "") + ")"
            for row in data.get("held") or ()]
    text = _cycle_summary(data)
    return "\n".join([*held, text] if text else held) or None


def _cycle_summary(data: dict) -> str | None:
    if data["reason"] in ("busy", "direct") or (data["reason"] == "paused" and not data["dry_run"]):
        return None  # the messages said it (a pause *during* the cycle still reports its launches)
    if data["dry_run"]:
        if data["reason"] == "none":
            return "No ready items scheduled for dispatch"
        cap = f"{data['capacity']} free"
        if not data["planned"]:
            return f"No capacity: {cap}, {data['ready']} ready item(s) waiting"
        lines = [f"Would dispatch {len(data['planned'])} item(s) (capacity: {cap}, batch: {data['batch']},"
                 f" ready: {data['ready']}, reason: {data['reason']})"]
        lines += [f"  Would dispatch: {shown(p['item_id'])} → {p['rig']}" for p in data["planned"]]
        return "\n".join(lines)
    lines = [f"  Dispatched {shown(row['item_id'])} → {row['rig']} (polecat {row['polecat_id']})"
             for row in data["launched"]]
    lines += [f"  Failed {shown(row['item_id'])}: {shown(row['error'])}" for row in data["failures"]]
    if data["dispatched"] or data["failed"]:
        lines.append(f"Dispatched {data['dispatched']}, failed {data['failed']} (reason: {data['reason']})")
    elif data["skipped"]:
        lines.append(f"Skipped {data['skipped']} item(s): no capacity (capacity {data['capacity']})")
    else:
        lines.append("Nothing to dispatch")
    return "\n".join(lines)


# -- the command line's words for errors ---------------------------------------------------------

#: Parameters whose flag is not simply ``--`` and the name with dashes.
_FLAGS = {"vars": "--var", "deps": "--dep", "labels": "--label", "add_labels": "--add-label"}


def flag_of(parameter: str) -> str:
    return _FLAGS.get(parameter, "--" + parameter.replace("_", "-"))


def flag_words(message: str, parameters: tuple[str, ...] = ()) -> str:
    """A library message as the command line says it: the parameters it names become flags.

    The library speaks of parameters (``batch``, ``force``) because it is also
    called from Python and over MCP; an error lists the ones its message names
    (first mention), and a refusal that ``force`` overrides says "override with
    force".  Only here are they spelled as flags.
    """
    for parameter in parameters:
        pattern = rf"(?<![\w-]){re.escape(parameter)}(?![\w-])"
        message = re.sub(pattern, flag_of(parameter), message, count=1)
    return message.replace("override with force", "override with --force")


def error_text(err: Exception) -> str:
    """A library error's message, in the command line's words (see :func:`flag_words`), safe to print.

    Messages quote what was asked for (an id, a path), which may hold control characters.
    """
    return printable_text(flag_words(str(err), getattr(err, "parameters", ())))


#: The longest error message the command line prints whole: one that quotes a long input is cut.
ERROR_MOST = 2_000


def bounded(message: str, most: int = ERROR_MOST) -> str:
    """``message`` (already printable) cut to ``most`` characters with its length said, so an error
    quoting a long argument never repeats all of it."""
    if len(message) <= most:
        return message
    return f"{message[:most]}… ({len(message):,} characters)"


def failure_text(err: BaseException) -> str:
    """The line the command line ends with when ``err`` stops a command: a library error in its own
    words, the machine's refusal as ``path: reason``, anything else as the bug it is."""
    from sluice.errors import SluiceError, internal_error_text, os_error_text

    if isinstance(err, SluiceError):
        return f"error: {bounded(error_text(err))}\n"
    if isinstance(err, OSError):
        return f"error: {bounded(printable_text(os_error_text(err)))}\n"
    return f"error: {bounded(printable_text(internal_error_text(err)))}\n"


def unencodable_argument(args: list[str]) -> str | None:
    """Why the command line ``args`` is refused when one of its arguments holds text no encoding can
    hold (bytes that are not UTF-8 arrive as lone surrogates), naming that argument; else None.

    The argument is named by its place, the option it follows and its text shown escaped and clipped.
    """
    for index, arg in enumerate(args):
        if unencodable(arg) is None:
            continue
        option, eq, _value = arg.partition("=")
        if arg.startswith("--") and eq and unencodable(option) is None:
            where = f"the value of {option}"
        elif index and args[index - 1].startswith("-") and unencodable(args[index - 1]) is None:
            where = f"argument {index + 1} (after {args[index - 1]})"
        else:
            where = f"argument {index + 1}"
        return (f"{where}, '{clipped(arg)}', holds text that cannot be encoded (bytes that are not UTF-8);"
                " give it in UTF-8")
    return None
