"""The hot commands (and the dispatch cycle) answered without typer, rich, pydantic or pygit2.

Agents and git hooks run ``schedule next``, ``item ready`` and friends
thousands of times a day; importing typer and rich alone takes about 0.1 s,
more than the answer.  :func:`run` recognises the plain forms of these
commands with a tiny parser and calls the very library functions and output
helpers the typer commands call, so stdout is the same byte for byte.  The
config and the policy come from their validated plain copies
(:mod:`sluice.store.files.configcache`), so pydantic is not imported either while
those files are unchanged.

It answers only the success case: anything it does not recognise (``--help``,
an unknown or repeated flag, a bad number) and any error raised while
answering returns None, and the caller hands the whole command line to
typer, which parses and fails exactly as it always does.  Every library call
here either only reads or raises before it writes (``schedule next`` records
its decisions, ``hooks report`` its event, as their last step), so trying
twice changes nothing.  Once such a write happened, the answer is never
handed to typer again: should printing it fail, the command says so and
exits 1 rather than record twice.  A real dispatch cycle (``scheduler run``)
launches before it ends, so it is never tried twice at all: but for a
refusal of its command line, whatever stops it is said here, in the words
and with the exit code typer's command line would use.  Warnings logged while answering are held
back and said only when the answer stands.  With ``SLUICE_FAST_STRICT=1``
(the tests set it) a failure other than a refusal raises instead of falling
back, so a fast path that always fails cannot pass as one typer covers for.
"""

from __future__ import annotations

import gc
import os
import sys

from sluice import logs
from sluice.core.defaults import NEXT_LIMIT, READY_LIMIT
from sluice.core.recordclass import field, frozen, recordclass
from sluice.core.text import printable_text, unencodable
from sluice.errors import SluiceError

#: Set (to 1) in tests: a fast answer that fails for any reason but a refusal (a SluiceError, which
#: typer repeats and reports) raises instead of falling back, so a broken fast path cannot hide.
STRICT_ENV = "SLUICE_FAST_STRICT"


@frozen
class Spec:
    """The plain form of one command: how many positionals, which valued options, which flags."""

    positionals: tuple[int, int] = (0, 0)
    options: tuple[str, ...] = ()
    flags: tuple[str, ...] = ("--json",)
    integers: tuple[str, ...] = field(default=())


READY_OPTIONS = ("--limit", "--label", "--label-any", "--assignee", "--type", "--priority", "--sort")
COMMANDS = {
    # bd ready's filters too, each given once (a repeated --label goes to typer).
    ("item", "ready"): Spec((0, 1), READY_OPTIONS, ("--json", "--unassigned"), ("--limit", "--priority")),
    ("item", "blocked"): Spec((0, 1)),
    ("item", "show"): Spec((1, 1)),
    ("schedule", "next"): Spec((0, 0), ("--graph-id", "--limit"), ("--preview", "--json"), ("--limit",)),
    ("scheduler", "status"): Spec((0, 0), ("--limit",), integers=("--limit",)),
    ("scheduler", "list"): Spec((0, 0), ("--limit", "--offset"), integers=("--limit", "--offset")),
    ("scheduler", "explain"): Spec((1, 1)),
    # It keeps its head for `scheduler status` as it ends: written again when tried twice, the same.
    ("scheduler", "forecast"): Spec((0, 0), ("--limit",), integers=("--limit",)),
    ("hooks", "report"): Spec((0, 0), ("--rig", "--repo", "--hook")),
    # A real cycle launches: once it began it is never handed to typer (see `launches`).
    ("scheduler", "run"): Spec((0, 0), ("--batch",), ("--dry-run", "-n", "--ignore-backoff", "--json"),
                               ("--batch",)),
    # A view that looks records what has ended, as typer's would: tried twice, nothing is recorded twice.
    ("snapshot",): Spec((0, 0), ("--limit",), integers=("--limit",)),
}


@recordclass
class Command:
    town: str | None
    name: tuple[str, ...]
    positionals: list[str]
    options: dict[str, str]
    flags: set[str]


class _Held:
    """Keeps log lines until the answer is known to stand.

    Its handler joins the ``sluice`` logger only once something logs
    (:func:`sluice.logs.when_made`): an answer that logs nothing never
    imports ``logging``.
    """

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.installed: list[tuple] = []

    def install(self, logger) -> None:
        import logging

        lines = self.lines

        class Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                lines.append(printable_text(f"{record.levelname.lower()}: {record.getMessage()}") + "\n")

        handler = Handler()
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG if os.environ.get("SLUICE_DEBUG") else logging.WARNING)
        logger.propagate = False
        self.installed.append((logger, handler))

    def remove(self) -> None:
        logs.forget(self.install)
        for logger, handler in self.installed:
            logger.removeHandler(handler)


def parse(args: list[str]) -> Command | None:
    """The command, or None for anything but the plain forms (typer then says what it means)."""
    town = None
    if args and args[0] == "--town" and len(args) > 1:
        town, args = args[1], args[2:]
    elif args and args[0].startswith("--town="):
        town, args = args[0].split("=", 1)[1], args[1:]
    name = tuple(args[:2])
    spec = COMMANDS.get(name)  # type: ignore[arg-type]
    if spec is None and args:  # a command of one word (``snapshot``)
        name = (args[0],)
        spec = COMMANDS.get(name)  # type: ignore[arg-type]
    if spec is None:
        return None
    command = Command(town, name, [], {}, set())  # type: ignore[arg-type]
    rest = args[len(name):]
    position = 0
    while position < len(rest):
        token = rest[position]
        position += 1
        flag, eq, value = token.partition("=")
        if token in spec.flags and token not in command.flags:
            command.flags.add(token)
        elif flag in spec.options and flag not in command.options:
            if not eq:
                if position >= len(rest):
                    return None
                value = rest[position]
                position += 1
            if value.startswith("-") and flag not in spec.integers:
                return None  # a value that looks like a flag: typer decides what it means
            command.options[flag] = value
        elif token.startswith("-"):
            return None  # --help, an unknown or repeated flag
        else:
            command.positionals.append(token)
    low, high = spec.positionals
    if not low <= len(command.positionals) <= high:
        return None
    for option in spec.integers:
        if option in command.options:
            try:
                int(command.options[option])
            except ValueError:
                return None
    return command


def writes(command: Command) -> bool:
    """Whether answering records something: ``schedule next`` its decisions, ``hooks report`` its event,
    a real cycle its launches."""
    return command.name == ("hooks", "report") or launches(command) or (
        command.name == ("schedule", "next") and "--preview" not in command.flags)


def launches(command: Command) -> bool:
    """A real dispatch cycle: it may launch before it fails, so it is never tried twice.

    Its refusals of the command line (a bad ``--batch``, exit 2) come before
    it takes the dispatch lock and go to typer as any other; every other
    error ends it here, said as typer says it (:func:`output.failure_text`).
    """
    return command.name == ("scheduler", "run") and not command.flags & {"--dry-run", "-n"}


def _answer(command: Command):
    """(data, as_json, text formatter, stderr lines) of a command, from the library."""
    from sluice.api import open_town
    from sluice.surfaces import output

    town = open_town(command.town)
    as_json = "--json" in command.flags
    args, options = command.positionals, command.options
    match command.name:
        case ("item", "show"):
            return town.item(args[0]).to_json(), as_json, output.item_text, []
        case ("item", "ready"):
            given = options.get
            rows = town.ready(
                args[0] if args else None, int(given("--limit", READY_LIMIT)),
                labels=[given("--label")] if "--label" in options else (),
                labels_any=[given("--label-any")] if "--label-any" in options else (),
                assignee=given("--assignee"), unassigned="--unassigned" in command.flags,
                issue_type=given("--type"),
                priority=int(options["--priority"]) if "--priority" in options else None,
                sort=given("--sort", "priority"))
            return output.RawJSON(rows.lines), as_json, output.ready_text, []
        case ("item", "blocked"):
            rows = town.blocked(args[0] if args else None)
            return output.RawJSON(rows.lines), as_json, output.blocked_text, []
        case ("schedule", "next"):
            limit, preview = int(options.get("--limit", NEXT_LIMIT)), "--preview" in command.flags
            decisions = town.next(limit=limit, graph_id=options.get("--graph-id"), preview=preview)
            return decisions.to_json(), as_json, output.next_text, []
        case ("scheduler", "status"):
            return town.status(int(options.get("--limit", "50"))).to_json(), as_json, \
                output.queue_status_text, []
        case ("scheduler", "list"):
            rows = town.list(int(options.get("--limit", "0")), int(options.get("--offset", "0")))
            return rows.to_json(), as_json, output.queue_text, []
        case ("scheduler", "explain"):
            return town.explain(args[0]).to_json(), as_json, output.explain_text, []
        case ("scheduler", "forecast"):
            limit = int(options.get("--limit", "0"))
            return town.forecast(limit).to_json(), as_json, output.forecast_text, []
        case ("hooks", "report"):
            queue = town.hooks_report(options.get("--rig"), options.get("--repo"), options.get("--hook", ""))
            return queue.to_json(), as_json, None, [queue.line()]
        case ("snapshot",):
            snap = town.snapshot(int(options.get("--limit", "0")))
            return snap.to_json(), as_json, output.snapshot_text, []
        case ("scheduler", "run"):
            batch = options.get("--batch")
            report = town.run_cycle(batch=int(batch) if batch is not None else None,
                                    dry_run=not launches(command),
                                    ignore_backoff="--ignore-backoff" in command.flags)
            return report.to_json(), as_json, output.cycle_text, [] if as_json else list(report.messages)
    raise AssertionError(command.name)  # every name in COMMANDS has a case


def run(args: list[str]) -> int | None:
    """Answer a hot command and return its exit code, or None to let typer handle it."""
    if unencodable(args) is not None:
        return None  # an argument of bytes that are not UTF-8: typer's command line refuses it
    command = parse(args)
    if command is None:
        return None
    held = _Held()
    logs.when_made(held.install)
    # A hot command reads up to 10,000 contexts and items into objects that all live until it ends:
    # collecting garbage among them only walks survivors (a seventh of a dispatch dry run).  What
    # it leaves is freed with the process; in a test process collection resumes afterwards.
    collecting = gc.isenabled()
    if not launches(command):  # a real cycle may wait out spawn delays for minutes: it collects as typer's
        gc.disable()
    strict = os.environ.get(STRICT_ENV) == "1"
    try:
        data, as_json, human, say = _answer(command)
    except SluiceError as err:
        if launches(command) and err.exit_code != 2:
            return _ended(held, err)
        return None  # refused before anything was written: typer says so, as it always does
    except KeyboardInterrupt:
        if not launches(command):
            raise
        sys.stderr.write("".join(held.lines) + "interrupted\n")
        return 130
    except Exception as err:
        if not launches(command):
            if strict:
                raise
            return None
        if isinstance(err, BrokenPipeError):
            return 0  # the reader left, as typer's command line takes it
        if os.environ.get("SLUICE_DEBUG") and not isinstance(err, OSError):
            sys.stderr.write("".join(held.lines))
            raise  # a bug, with its traceback, as typer's command line shows it
        return _ended(held, err)
    finally:
        held.remove()
        if collecting:
            gc.enable()
    import contextlib
    import io

    from sluice.surfaces import output

    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer):
            if human is not None or as_json:
                output.emit(data, as_json, human)
    except Exception as err:
        if strict:
            raise
        if writes(command):  # its decisions or event are recorded: answering again would record twice
            sys.stderr.write(printable_text(f"error: the answer could not be written: {err}") + "\n")
            return 1
        return None  # a formatting bug: typer answers again and reports it plainly
    try:
        sys.stderr.write("".join(held.lines) + "".join(printable_text(line) + "\n" for line in say))
        sys.stdout.write(buffer.getvalue())
        sys.stdout.flush()
    except BrokenPipeError:
        return 0
    return 0


def _ended(held: _Held, err: BaseException) -> int:
    """A real cycle stopped by ``err``: what was logged, then the error as typer says it; exit 1."""
    from sluice.surfaces.output import failure_text

    sys.stderr.write("".join(held.lines) + failure_text(err))
    return getattr(err, "exit_code", 1)
