"""``sluice top``: the town live on a terminal, one snapshot per refresh.

Everything on screen comes from ``Town.snapshot()`` (:mod:`sluice.api`),
the document ``sluice snapshot --json`` prints, so top never disagrees with
the CLI; ``p`` calls the facade's ``pause``/``resume``.  The frame is
redrawn once a second, at once when the state file, the event log or the
polecat records change, and at once on a resize.

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
from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.console import Console
from rich.layout import Layout
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from sluice.core.text import printable
from sluice.errors import SluiceError

if TYPE_CHECKING:
    from sluice.api import Town



def plain(text) -> str:
    """Agents' text as one line: control characters shown escaped (no fake rows, no terminal codes)."""
    return printable(text)


def runtime(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def why(row: dict) -> str:
    """The queue row's reason codes (``why``), or what the row itself says when there are none."""
    codes = row.get("why")
    if isinstance(codes, (list, tuple)) and codes:
        return " ".join(plain(c) for c in codes)
    if isinstance(codes, str) and codes:
        return plain(codes)
    parts = ["blocked" if row.get("blocked") else "ready"]
    if row.get("dispatch_failures"):
        parts.append(f"failed×{row['dispatch_failures']}")
    if row.get("retry_at"):
        parts.append(f"retry {str(row['retry_at'])[11:19]}")
    return " ".join(parts)


def limits(sched: dict) -> list[str]:
    """Admission control's state from ``scheduler status`` as short lines (none when it is not set)."""
    out = []
    budgets = [f"{plain(b.get('rig') or 'town')} {b.get('spent')}/{b.get('budget')}"
               + (f" per {plain(b['window'])}" if b.get("window") else "")
               for b in sched.get("budgets") or [] if isinstance(b, dict)]
    if budgets:
        out.append("budgets: " + ", ".join(budgets))
    throttles = [f"{plain(t.get('rig') or 'town')} until {str(t.get('until') or '')[11:19]}"
                 + (f" ({plain(t['reason'])})" if t.get("reason") else "")
                 for t in sched.get("throttles") or [] if isinstance(t, dict)]
    if throttles:
        out.append("throttled: " + ", ".join(throttles))
    caps = [f"{plain(k)}={v}" for key in ("rig_caps", "label_caps")
            for k, v in (sched.get(key) or {}).items()]
    if caps:
        out.append("caps: " + ", ".join(caps))
    if sched.get("circuit_broken"):
        out.append(f"circuit-broken: {sched['circuit_broken']}")
    return out


def header(snap: dict, rig_filter: str | None = None, prompt: str | None = None, note: str | None = None,
           keys: bool = True) -> Text:
    sched = snap["scheduler"]
    text = Text()
    if note:
        text.append(note + "\n", style="bold cyan")
    text.append("sluice top  ", style="bold")
    if sched.get("paused"):
        text.append(f" PAUSED by {plain(sched.get('paused_by') or 'unknown')} ", style="bold white on red")
    else:
        text.append(" active ", style="bold black on green")
    active = sched.get("active_polecats")
    cap = sched.get("max_polecats")
    cap_text = f"{'?' if active is None else active}/{cap}" if sched.get("mode") == "deferred" else "direct"
    text.append(f"  mode {sched.get('mode')}  polecats {cap_text}  queued {sched.get('queued_total')}"
                f" ({sched.get('queued_ready')} ready)")
    if sched.get("last_dispatch_at"):
        text.append(f"  last dispatch {str(sched['last_dispatch_at'])[11:19]}")
    lines = limits(sched)
    if lines:
        text.append("\n" + "   ".join(lines), style="yellow")
    if sched.get("executor_error"):
        text.append(f"\nexecutor: {plain(sched['executor_error'])}", style="red")
    text.append(f"\n{plain(snap.get('town'))}  {str(snap.get('at'))[11:19]}Z", style="dim")
    if rig_filter:
        text.append(f"  rig filter: {plain(rig_filter)}", style="yellow")
    if keys:
        text.append("   q quit  p pause/resume  / filter by rig", style="dim")
    if prompt is not None:
        text.append(f"\nrig to show (Enter applies, empty clears): {plain(prompt)}▏", style="bold yellow")
    return text


def queue_table(snap: dict, rig_filter: str | None = None) -> Table:
    rows = [r for r in snap["queue"] if not rig_filter or r.get("target_rig") == rig_filter]
    table = Table(expand=True, box=None, pad_edge=False, header_style="bold")
    for name, kw in (("#", {"justify": "right", "width": 3}), ("item", {"no_wrap": True}),
                     ("rig", {"no_wrap": True}), ("score", {"justify": "right"}),
                     ("why", {"no_wrap": True}), ("title", {"no_wrap": True, "ratio": 1})):
        table.add_column(name, overflow="ellipsis", **kw)
    for n, row in enumerate(rows, start=1):
        score = row.get("score")
        style = "dim" if row.get("blocked") else ""
        table.add_row(str(n), Text(plain(row.get("id"))), Text(plain(row.get("target_rig"))),
                      "-" if score is None else f"{score:g}", Text(why(row)), Text(plain(row.get("title"))),
                      style=style)
    return table


def polecat_table(snap: dict, rig_filter: str | None = None) -> Table:
    table = Table(expand=True, box=None, pad_edge=False, header_style="bold")
    for name in ("polecat", "item", "rig", "executor", "started", "runtime", "attach / logs"):
        table.add_column(name, no_wrap=True, overflow="ellipsis")
    for row in snap["polecats"]:
        if rig_filter and row.get("rig") != rig_filter:
            continue
        hint = row.get("attach") or row.get("logs_command") or ""
        table.add_row(Text(plain(row.get("id"))), Text(plain(row.get("item_id"))),
                      Text(plain(row.get("rig"))), plain(row.get("executor")),
                      str(row.get("started_at") or "")[11:19], runtime(row.get("runtime_seconds")),
                      Text(plain(hint)))
    return table


def rig_line(snap: dict, rig_filter: str | None = None) -> Text:
    text = Text()
    for name, rig in snap["rigs"].items():
        if rig_filter and name != rig_filter:
            continue
        if "error" in rig:
            text.append(f"{plain(name)}: {plain(rig['error'])}  ", style="red")
            continue
        text.append(plain(name), style="bold")
        text.append(f" ready {rig['ready']} blocked {rig['blocked']} queued {rig['queued']}"
                    f" running {rig['running']} merge {rig['merge_queue']['depth']}   ")
    return text


def event_lines(snap: dict, count: int, rig_filter: str | None = None) -> Text:
    text = Text()
    events = [e for e in snap["events"]
              if not rig_filter or (e.get("payload") or {}).get("rig") in (None, rig_filter)]
    for event in events[-count:] if count > 0 else []:
        payload = event.get("payload") or {}
        what = " ".join(f"{k}={plain(v)}" for k, v in payload.items() if isinstance(v, (str, int, float)))
        if text:
            text.append("\n")
        text.append(str(event.get("at", ""))[11:19] + " ", style="dim")
        text.append(plain(event.get("type")), style="bold")
        text.append(" " + what)
    return text


def _lines(text: Text, width: int) -> int:
    """How many rows ``text`` takes inside a panel ``width`` columns wide."""
    return len(text.wrap(Console(width=max(8, width - 4)), max(8, width - 4)))


def render(snap: dict, rig_filter: str | None = None, prompt: str | None = None, height: int = 40,
           width: int = 120, note: str | None = None, keys: bool = True):
    """One frame: header, queue in dispatch order, running polecats, rigs, the last events.

    ``note`` is a first header line (the demo's progress); ``keys`` shows the key help.
    """
    head = header(snap, rig_filter, prompt, note, keys)
    rigs = rig_line(snap, rig_filter)
    events_rows = max(3, min(10, height // 5))
    queue_count = sum(1 for r in snap["queue"] if not rig_filter or r.get("target_rig") == rig_filter)
    polecat_count = sum(1 for p in snap["polecats"] if not rig_filter or p.get("rig") == rig_filter)
    layout = Layout()
    layout.split_column(
        Layout(Panel(head, border_style="cyan"), name="header", size=_lines(head, width) + 2),
        Layout(Panel(queue_table(snap, rig_filter), title=f"queue ({queue_count}) — dispatch order",
                     title_align="left"), name="queue", ratio=2),
        Layout(Panel(polecat_table(snap, rig_filter), title=f"running polecats ({polecat_count})",
                     title_align="left"), name="polecats", ratio=1, minimum_size=4),
        Layout(Panel(rigs, title="rigs", title_align="left"), name="rigs",
               size=min(6, _lines(rigs, width)) + 2),
        Layout(Panel(event_lines(snap, events_rows, rig_filter), title="events", title_align="left"),
               name="events", size=events_rows + 2),
    )
    return layout


def print_once(town: Town, console: Console | None = None, rig_filter: str | None = None) -> None:
    """Print one frame (``sluice top --once``) at the terminal's size, or 120×40 when not a terminal."""
    if console is None:
        tty = sys.stdout.isatty()
        size = os.get_terminal_size(sys.stdout.fileno()) if tty else os.terminal_size((120, 40))
        console = Console(width=size.columns, height=size.lines)
    frame = render(town.snapshot(), rig_filter, height=console.height, width=console.width)
    console.print(frame, height=console.height)


def _watched(town: Town) -> tuple:
    """What changes when the town does: the state file, the event log, the polecat records."""
    out = []
    files = town.files
    for path in (files.state_path, files.events_path, files.workers_dir):
        try:
            st = os.stat(path)
            out.append((st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


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

    def __init__(self, town: Town, interval: float = 1.0, console: Console | None = None,
                 take: Callable[[Town], dict] | None = None):
        self.town = town
        self.interval = interval
        # Sized from the terminal itself: an exported COLUMNS/LINES would pin the size and break resizing.
        environ = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        self.console = console or Console(_environ=environ)
        self.take = take or (lambda t: t.snapshot())
        self.rig_filter: str | None = None
        self.prompt: str | None = None
        self.message: str | None = None
        self.snap: dict | None = None
        self.dirty = True

    def frame(self):
        if self.snap is None:
            return Text("loading…")
        layout = render(self.snap, self.rig_filter, self.prompt, self.console.height, self.console.width)
        if self.message:
            layout["rigs"].update(Panel(Text(self.message, style="bold"), title="rigs", title_align="left"))
        return layout

    def refresh(self) -> None:
        try:
            self.snap = self.take(self.town)
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
                if char in ("\r", "\n"):
                    self.rig_filter, self.prompt = (self.prompt.strip() or None), None
                elif char == "\x1b":
                    self.rig_filter, self.prompt = None, None
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
                seen = None
                next_at = 0.0
                while True:
                    now = time.monotonic()
                    watched = _watched(self.town)
                    if self.dirty or now >= next_at or watched != seen:
                        seen = watched
                        self.refresh()
                        self.dirty = False
                        next_at = now + self.interval
                        live.update(self.frame(), refresh=True)
                    elif resized:
                        resized.clear()
                        live.update(self.frame(), refresh=True)
                    data = keys.read(0.1)
                    if data:
                        if not self.key(data):
                            return
                        live.update(self.frame(), refresh=True)
        finally:
            if previous is not None:
                signal.signal(signal.SIGWINCH, previous)


def run_top(town: Town, once: bool = False, interval: float = 1.0, rig: str | None = None) -> None:
    if once:
        print_once(town, rig_filter=rig)
        return
    top = Top(town, interval)
    top.rig_filter = rig
    top.run()
