"""``sluice top``: the town live on a terminal, one snapshot per refresh.

Everything on screen comes from ``Town.snapshot()`` (:mod:`sluice.api`),
the document ``sluice snapshot --json`` prints, so top never disagrees with
the CLI; ``p`` calls the facade's ``pause``/``resume``.  A new snapshot is
taken at once when the signature of the town's sources moves
(:mod:`sluice.surfaces.watching`: config, state, logs, polecat records,
each rig's log and items), else only after the backstop; the frame is
redrawn every interval with the running polecats' runtimes ticked, and at
once on a resize — so an idle top costs a few stat calls a second, not a
survey of the queue.  The snapshot carries the queue's first
:data:`SCREEN_ROWS` rows (counts stay exact; a rig filter takes them all)
and a frame makes only the rows a screen can hold, so neither the survey's
rows nor the redraw grow with the queue.

* It runs on the terminal's alternate screen (rich ``Live(screen=True)``):
  each frame replaces the last in one write, so nothing flickers and the
  shell's scrollback is left as it was.  Every region is cropped to the
  terminal's current size, so a resize only changes what fits.
* Keys (read in cbreak mode, without waiting for Enter): ``q`` quits, ``p``
  pauses or resumes the scheduler (the same calls as ``scheduler
  pause|resume``), ``/`` asks for a rig name to filter by (Enter applies,
  an empty name or Esc clears).
* Titles are agents' text: they are rendered as plain ``Text`` (never rich
  markup) with control characters escaped.
* ``--once`` prints one frame, sized to the terminal or 120 columns, and exits.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from sluice.core.text import printable as plain  # agents' text as one line, control characters escaped
from sluice.errors import SluiceError
from sluice.surfaces.output import FAILED_OUTCOMES, hhmm, host_line, score_text
from sluice.surfaces.screen import Column, Section, frame, pack
from sluice.surfaces.watching import BACKSTOP, Pace, Sources

if TYPE_CHECKING:
    from sluice.api import Town

#: Queue rows a snapshot of ``top`` carries: more than any terminal shows.
SCREEN_ROWS = 500


def runtime(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def why(row: dict) -> str:
    """The queue row's reason codes (``why``), or what the row itself says when there are none."""
    if row.get("why"):
        return ", ".join(plain(c) for c in row["why"])
    parts = ["blocked" if row.get("blocked") else "ready"]
    if row.get("dispatch_failures"):
        parts.append(f"failed×{row['dispatch_failures']}")
    if row.get("retry_at"):
        parts.append(f"retry {str(row['retry_at'])[11:19]}")
    return " ".join(parts)


def limits(sched: dict) -> list[str]:
    """Admission control's state from ``scheduler status`` as short lines (none when it is not set)."""
    out = []
    binding = sched.get("binding")
    if isinstance(binding, dict):
        out.append(f"binding: {plain(binding.get('code'))}"
                   + (f" ({plain(binding['detail'])})" if binding.get("detail") else ""))
    host = host_line(sched.get("host"))
    if host:
        out.append(f"host: {host}")
    budgets = [f"{plain(b.get('rig') or 'town')} {b.get('spent')}/{b.get('budget')}"
               + (f" per {plain(b['window'])}" if b.get("window") else "")
               for b in sched.get("budgets") or [] if isinstance(b, dict)]
    throttles = [f"{plain(t.get('rig') or 'town')} until {str(t.get('until') or '')[11:19]}"
                 + (f" ({plain(t['reason'])})" if t.get("reason") else "")
                 for t in sched.get("throttles") or [] if isinstance(t, dict)]
    caps = [f"{plain(k)}={v}" for key in ("rig_caps", "label_caps")
            for k, v in (sched.get(key) or {}).items()]
    out += [f"{name}: {', '.join(parts)}" for name, parts in
            (("budgets", budgets), ("throttled", throttles), ("caps", caps)) if parts]
    if sched.get("circuit_broken"):
        out.append(f"circuit-broken: {sched['circuit_broken']}")
    return out


def header(snap: dict, rig_filter: str | None = None, prompt: str | None = None,
           note: str | list | None = None, keys: bool = True, message: str | None = None) -> list[Text]:
    """The header's chunks; :func:`sluice.surfaces.screen.pack` lays them into lines (``\\n``: a new one)."""
    sched = snap["scheduler"]
    chunks: list[Text] = []
    if note:  # one line, or parts packed into as many as the width needs
        chunks += [Text(part, style="bold cyan") for part in ([note] if isinstance(note, str) else note)]
        chunks.append(Text("\n"))
    title = Text("sluice top ", style="bold")
    if sched.get("paused"):
        title.append(f" PAUSED by {plain(sched.get('paused_by') or 'unknown')} ", style="bold white on red")
    else:
        title.append(" active ", style="bold black on green")
    chunks.append(title)
    active = sched.get("active_polecats")
    of = f"/{sched.get('max_polecats')}" if sched.get("mode") == "deferred" else " (direct)"
    chunks += [Text(f"mode {sched.get('mode')}"), Text(f"polecats {'?' if active is None else active}{of}")]
    if snap.get("executor"):
        chunks.append(Text(f"executor {plain(snap['executor'])}"))
    chunks.append(Text(f"queued {sched.get('queued_total')} ({sched.get('queued_ready')} ready)"))
    drains = drain_words(snap.get("forecast"))
    if drains:
        chunks.append(Text(drains))
    if sched.get("last_dispatch_at"):
        chunks.append(Text(f"last dispatch {str(sched['last_dispatch_at'])[11:19]}"))
    chunks += [Text(line, style="yellow") for line in limits(sched)]
    if sched.get("executor_error"):
        chunks.append(Text(f"executor: {plain(sched['executor_error'])}", style="red"))
    if message:
        chunks += [Text("\n"), Text(message, style="bold red")]
    chunks += [Text("\n"), Text(f"{plain(snap.get('town'))}  {str(snap.get('at'))[11:19]}Z", style="dim")]
    if rig_filter:
        chunks.append(Text(f"rig filter: {plain(rig_filter)}", style="yellow"))
    if keys:
        chunks.append(Text("q quit  p pause/resume  / filter by rig", style="dim"))
    if prompt is not None:
        chunks += [Text("\n"), Text(f"rig to show (Enter applies, empty clears): {plain(prompt)}▏",
                                     style="bold yellow")]
    return chunks


def drain_words(forecast: dict | None) -> str:
    """When the queue drains by the snapshot's forecast (``drains ≈15:10 (p90 15:40)``); "" without one."""
    if not isinstance(forecast, dict) or "error" in forecast:
        return ""
    if not forecast.get("drain_at"):
        return "queue drained"
    p90 = f" (p90 {hhmm(forecast.get('drain_p90_at'))})" if forecast.get("drain_p90_at") else ""
    return f"drains ≈{hhmm(forecast['drain_at'])}{p90}"


def queue_section(snap: dict, rig_filter: str | None = None, limit: int | None = None) -> Section:
    """The queue in dispatch order; with ``limit`` only its first rows are made (the title counts all).

    A frame shows at most a screen of rows, and it is drawn every second:
    making every row of a queue of 10,000 to show 40 of them was most of
    what an idle ``top`` cost.
    """
    rows = [r for r in snap["queue"] if not rig_filter or r.get("target_rig") == rig_filter]
    made = rows if limit is None else rows[:limit]
    sched = snap.get("scheduler") or {}
    # a snapshot of the queue's first rows (``top``'s own) counts the rest in ``items_total``
    total = sched.get("items_total", len(rows)) if sched.get("truncated") and not rig_filter else len(rows)
    columns = [Column("#", right=True, drop=1), Column("item"), Column("rig", drop=3),
               Column("score", right=True, drop=2), Column("start≈", drop=4), Column("done≈", drop=1),
               Column("why"), Column("title", flex=True)]
    return Section(
        f"queue ({total}) — dispatch order", columns,
        [(str(n), Text(plain(r.get("id"))), Text(plain(r.get("target_rig"))), score_text(r.get("score")),
          hhmm(r.get("start_at")), hhmm(r.get("done_at")), Text(why(r)), Text(plain(r.get("title"))))
         for n, r in enumerate(made, start=1)],
        min_rows=8, empty="nothing queued",
        row_styles=["dim" if r.get("blocked") else "" for r in made], total=total)


def polecat_section(snap: dict, rig_filter: str | None = None) -> Section:
    rows = [p for p in snap["polecats"] if not rig_filter or p.get("rig") == rig_filter]
    columns = [Column("polecat"), Column("item"), Column("rig", drop=4), Column("executor", drop=1),
               Column("started", drop=2), Column("runtime", right=True),
               Column("title", flex=True, drop=5, flex_min=20), Column("attach / logs", drop=3)]
    return Section(
        f"running polecats ({len(rows)})", columns,
        [(Text(plain(p.get("id"))), Text(plain(p.get("item_id"))), Text(plain(p.get("rig"))),
          plain(p.get("executor")), str(p.get("started_at") or "")[11:19], runtime(p.get("runtime_seconds")),
          Text(plain(p.get("title"))), Text(plain(p.get("attach") or p.get("logs_command") or "")))
         for p in rows],
        min_rows=3, empty="no polecat running")


def runs_section(snap: dict, rig_filter: str | None = None) -> Section:
    """The runs that ended most recently, failures marked ``!`` (and red)."""
    rows = [r for r in snap.get("runs") or () if r.get("outcome") != "running"
            and (not rig_filter or r.get("rig") == rig_filter)]
    columns = [Column("ended"), Column("item"), Column("rig", drop=3), Column("outcome"),
               Column("exit", right=True), Column("runtime", right=True), Column("polecat", drop=2),
               Column("", flex=True, flex_min=0)]
    return Section(
        f"recent runs ({len(rows)})", columns,
        [(str(r.get("ended_at") or "")[11:19], Text(plain(r.get("item_id"))), Text(plain(r.get("rig"))),
          ("! " if r.get("outcome") in FAILED_OUTCOMES else "  ") + plain(r.get("outcome")),
          "" if r.get("exit_code") is None else str(r["exit_code"]), runtime(r.get("runtime_seconds")),
          Text(plain(r.get("polecat_id"))), "")
         for r in rows],
        min_rows=2, max_rows=6, empty="no run ended yet",
        row_styles=["red" if r.get("outcome") in FAILED_OUTCOMES else "" for r in rows])


def rig_section(snap: dict, rig_filter: str | None = None) -> Section:
    columns = [Column("rig"), Column("ready", right=True), Column("blocked", right=True),
               Column("queued", right=True), Column("running", right=True), Column("merge", right=True),
               Column("", flex=True, flex_min=0)]
    rows = []
    for name, rig in snap["rigs"].items():
        if rig_filter and name != rig_filter:
            continue
        if "error" in rig:
            rows.append((Text(plain(name), style="bold"), "", "", "", "", "",
                         Text(plain(rig["error"]), style="red")))
            continue
        stale = rig.get("source_stale")
        note = Text(f"source stale ({plain(stale['kind'])})", style="yellow") if stale else ""
        rows.append((Text(plain(name), style="bold"), str(rig["ready"]), str(rig["blocked"]),
                     str(rig["queued"]), str(rig["running"]), str(rig["merge_queue"]["depth"]), note))
    return Section(f"rigs ({len(rows)})", columns, rows, min_rows=2, empty="no rig")


def event_words(event: dict) -> str:
    """An event as a short sentence: what happened to which item, not a dump of its payload."""
    payload = event.get("payload") or {}
    kind = str(event.get("type") or "")
    item = plain(payload.get("item_id") or "")
    rig = plain(payload.get("rig") or "")
    where = f"{item} → {rig}" if item and rig else item or rig
    if kind == "Dispatched":
        polecat = plain(payload.get("polecat_id") or "")
        return f"launched {where}" + (f" as {polecat}" if polecat else "")
    if kind == "DispatchFailed":
        return f"launch of {where} failed ({payload.get('failures')}): {plain(payload.get('error') or '')}"
    if kind == "ContextClosed":
        return f"{where} left the queue: {plain(payload.get('reason') or '')}"
    if kind == "Enqueued":
        return f"queued {where}"
    if kind == "PolecatExited":
        code = payload.get("exit_code")
        return (f"{item} ended {plain(payload.get('outcome') or '')}"
                + (f" (exit {code})" if code is not None else "")
                + (f" after {runtime(payload['runtime_seconds'])}" if payload.get("runtime_seconds") else ""))
    if kind in ("Paused", "Resumed"):
        return kind.lower() + (f" by {plain(payload['by'])}" if payload.get("by") else "")
    rest = " ".join(f"{k} {plain(v)}" for k, v in payload.items()
                    if k not in ("item_id", "rig") and isinstance(v, (str, int, float)))
    return " ".join(part for part in (kind, where, rest) if part)


def _one_per_launch(events: list[dict]) -> list[dict]:
    """A launch logs ``Dispatched`` and its context's ``ContextClosed`` (reason dispatched): show one."""
    launched = {(e.get("payload") or {}).get("context_id") for e in events if e.get("type") == "Dispatched"}
    return [e for e in events if not (e.get("type") == "ContextClosed"
                                      and (e.get("payload") or {}).get("reason") == "dispatched"
                                      and (e.get("payload") or {}).get("context_id") in launched)]


def event_section(snap: dict, rig_filter: str | None = None) -> Section:
    events = [e for e in _one_per_launch(snap["events"])
              if not rig_filter or (e.get("payload") or {}).get("rig") in (None, rig_filter)]
    rows = [(Text(str(e.get("at", ""))[11:19], style="dim"), Text(event_words(e)))
            for e in reversed(events)]  # newest first, so the rows that fit are the latest
    return Section("events (newest first)", [Column("at"), Column("what", flex=True, flex_min=0)], rows,
                   min_rows=2, max_rows=10, empty="no events yet", header=False)


def render(snap: dict, rig_filter: str | None = None, prompt: str | None = None, height: int = 40,
           width: int = 120, note: str | list | None = None, keys: bool = True, message: str | None = None
           ) -> Text:
    """One frame: header, queue in dispatch order, running polecats, rigs, the last events.

    ``note`` is a first header line (the demo's progress); ``keys`` shows the key help;
    ``message`` an error shown under the header (a broken file, top keeps watching).
    """
    head = pack(header(snap, rig_filter, prompt, note, keys, message), width)
    sections = [queue_section(snap, rig_filter, limit=max(1, height)), polecat_section(snap, rig_filter),
                rig_section(snap, rig_filter)]
    if any(r.get("outcome") != "running" for r in snap.get("runs") or ()):  # none ended yet: no room taken
        sections.append(runs_section(snap, rig_filter))
    sections.append(event_section(snap, rig_filter))
    return frame(head, sections, width, height)


def print_once(town: Town, rig_filter: str | None = None) -> None:
    """Print one frame (``sluice top --once``) at the terminal's size, or 120×40 when not a terminal.

    On a terminal the frame is a line shorter than the screen, so the shell's
    next prompt does not scroll its first line away.
    """
    tty = sys.stdout.isatty()
    size = os.get_terminal_size(sys.stdout.fileno()) if tty else os.terminal_size((120, 40))
    height = size.lines - 1 if tty else size.lines
    frame = render(town.snapshot().to_json(), rig_filter, height=height, width=size.columns)
    Console(width=size.columns, height=size.lines).print(frame, height=height)


class _Keys:
    """Single key presses from a terminal, without echo; nothing at all when stdin is not one."""

    def __init__(self):
        self.fd = sys.stdin.fileno() if sys.stdin.isatty() else None
        self._saved = None

    def __enter__(self):
        if self.fd is not None:
            import termios
            import tty

            self._saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        return self

    def __exit__(self, *exc):
        if self._saved is not None:
            import termios

            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)

    def read(self, timeout: float) -> str | None:
        if self.fd is None:
            time.sleep(timeout)
            return None
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return None
        data = os.read(self.fd, 32)
        return data.decode("utf-8", "replace") if data else None


class Top:
    """The live loop: snapshot, draw, wait for a key, a change, a resize or the next second."""

    def __init__(self, town: Town, interval: float = 1.0):
        self.town = town
        self.interval = interval
        # Sized from the terminal itself: an exported COLUMNS/LINES would pin the size and break resizing.
        environ = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        self.console = Console(_environ=environ)
        # The queue's first rows only, unless a rig filter needs all of them to pick that rig's.
        self.take = lambda t: t.snapshot(limit=0 if self.rig_filter else SCREEN_ROWS).to_json()
        self.rig_filter: str | None = None
        self.prompt: str | None = None
        self.message: str | None = None
        self.snap: dict | None = None
        self.taken = 0.0  # when (monotonic) the snapshot was taken
        self.dirty = True

    def frame(self):
        if self.snap is None:
            return Text("loading…")
        return render(self.ticked(), self.rig_filter, self.prompt, self.console.height, self.console.width,
                      message=self.message)

    def ticked(self) -> dict:
        """The snapshot with its running polecats' runtimes moved on to now (no new survey for that)."""
        late = time.monotonic() - self.taken
        if late < 0.5 or not self.snap.get("polecats"):
            return self.snap
        polecats = [{**p, "runtime_seconds": p["runtime_seconds"] + late}
                    if isinstance(p.get("runtime_seconds"), int | float) else p
                    for p in self.snap["polecats"]]
        return {**self.snap, "polecats": polecats}

    def refresh(self) -> None:
        try:
            self.snap = self.take(self.town)
            self.taken = time.monotonic()
            self.message = None
        except SluiceError as err:  # a broken file is shown, and top keeps watching for the fix
            self.message = f"error: {err}"

    def toggle_pause(self) -> None:
        try:
            if self.snap is not None and self.snap["scheduler"].get("paused"):
                self.town.resume()
            else:
                self.town.pause(actor="sluice top")
        except SluiceError as err:
            self.message = f"error: {err}"

    def key(self, data: str) -> bool:
        """Handle typed characters; False when the user asked to quit."""
        for char in data:
            if self.prompt is not None:
                if char in ("\r", "\n", "\x1b"):  # Enter applies the rig typed, Esc clears the filter
                    self.rig_filter = None if char == "\x1b" else self.prompt.strip() or None
                    self.prompt = None
                    self.dirty = True  # a filtered view is taken from the whole queue, an unfiltered one not
                elif char in ("\x7f", "\b"):
                    self.prompt = self.prompt[:-1]
                elif char.isprintable():
                    self.prompt += char
            elif char in ("q", "Q", "\x03"):
                return False
            elif char in ("p", "P"):
                self.toggle_pause()
                self.dirty = True
            elif char == "/":
                self.prompt = ""
        return True

    def run(self) -> None:
        from rich.live import Live

        resized = []
        previous = None
        with contextlib.suppress(ValueError):  # not the main thread: no resize signal, the tick still redraws
            previous = signal.signal(signal.SIGWINCH, lambda *_: resized.append(1))
        try:
            with _Keys() as keys, Live(console=self.console, screen=True, auto_refresh=False,
                                       redirect_stdout=False, redirect_stderr=False) as live:
                sources, pace = Sources(self.town.files), Pace()
                seen = None
                next_at = drawn_at = 0.0
                while True:
                    now = time.monotonic()
                    due = self.dirty or now >= next_at  # a key pressed, or the backstop
                    watched = sources.signature() if due or pace.ready(now) else seen
                    changed = due or watched != seen
                    if changed:
                        seen = watched
                        taken = time.monotonic()
                        self.refresh()
                        pace.took(taken, time.monotonic())
                        self.dirty = False
                        next_at = now + max(self.interval, BACKSTOP)
                    # a new snapshot, or the clock moved on (the same one, runtimes ticked), or a resize
                    if changed or now >= drawn_at or resized:
                        drawn_at = now + self.interval
                        resized.clear()
                        live.update(self.frame(), refresh=True)
                    data = keys.read(0.25)
                    if data:
                        if not self.key(data):
                            return
                        live.update(self.frame(), refresh=True)
        finally:
            if previous is not None:
                signal.signal(signal.SIGWINCH, previous)


def run_top(town: Town, once: bool = False, interval: float = 1.0, rig: str | None = None) -> None:
    if rig is not None:
        town.files.rig(rig)  # UnknownRig names it and the known ones (exit 1), not an empty screen
    if once:
        print_once(town, rig_filter=rig)
        return
    top = Top(town, interval)
    top.rig_filter = rig
    top.run()
