"""``sluice mcp``: the CLI's answers as MCP tools over stdio.

Each tool calls the same method of the Python API (:mod:`sluice.api`) as its
CLI command and returns the same JSON document as that command's ``--json``.  Inputs are typed strictly
(a string ``"false"`` is not a boolean, ``"3"`` is not an integer), and every
failure — bad arguments, no town, a refused operation — comes back as a tool
error with a readable message while the server keeps serving.  That holds for
arguments no encoding can hold too: JSON may spell a lone surrogate
(``"\\ud800"``), which the SDK's parser would drop unanswered, so each line
the client sends passes :func:`readable_line` first and such a call is
answered with a tool error naming the argument.  Text longer than the API
takes is refused by the API (:mod:`sluice.api`), and no error repeats a long
input whole.

The town is looked up on every call (``--town``, ``SLUICE_TOWN``, then the
server's working directory), so a server started before ``sluice init`` works
once the town exists.

The server stays warm: ``sluice_schedule_next`` and ``sluice_schedule_status``
answer through one :class:`sluice.api.Town` kept for as long as the lookup
finds the same town, whose rig indexes stay open between calls and are
re-checked against the files before each one (:mod:`sluice.store.items.kept`).
Every other tool opens the town afresh, as the CLI does.
"""

from __future__ import annotations

import functools
import io
import json
import os
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt

from sluice.core.defaults import NEXT_LIMIT
from sluice.core.text import clipped, may_hold_unencodable, printable_text, unencodable, unencodable_problem
from sluice.errors import SlingFailed, SluiceError, UsageError, internal_error_text, os_error_text
from sluice.surfaces.output import to_json

Weight = Annotated[StrictFloat | None, Field(description="New weight; omit to keep the current one.")]


def _given(text: str) -> str | None:
    """Optional strings are typed plain ``str`` with "" for "not given": the SDK turns the text "null"
    into None for ``str | None`` arguments, and "null" must stay a (bad) id, never mean "no filter"
    (for clear, that would close every context)."""
    return text or None


def _encodable(cls, arguments: Any) -> Any:
    """Arguments holding text no encoding can hold (JSON's ``"\\ud800"``) are refused before they are
    validated, naming the argument: a reply that quoted them could not be sent at all.  Over stdio
    they arrive already replaced by the refusal (:func:`readable_line`), raised here."""
    if isinstance(arguments, dict) and isinstance(arguments.get(REFUSED), str):
        raise ValueError(arguments[REFUSED])
    problem = unencodable_problem(arguments)
    if problem is not None:
        raise ValueError(problem)
    if isinstance(arguments, dict):  # pydantic names an unknown argument whole: a long one is clipped here
        for key in arguments:
            if isinstance(key, str) and len(key) > NAME_MOST:
                raise ValueError(f"unknown argument {clipped(key)}")
    return arguments


def _refuse_unknown_arguments(tool) -> None:
    """Make a tool refuse arguments it does not declare (the SDK ignores them by default).

    A misspelt ``preveiw`` must be an error, not a call that records decisions.
    """
    from pydantic import ConfigDict, model_validator

    base = tool.fn_metadata.arg_model
    forbid = ConfigDict(**{**base.model_config, "extra": "forbid"})
    strict = type(base.__name__, (base,), {"model_config": forbid, "__module__": base.__module__,
                                           "refuse_unencodable": model_validator(mode="before")(_encodable)})
    tool.fn_metadata.arg_model = strict
    tool.parameters = strict.model_json_schema(by_alias=True)


def build_server(town_arg: str | None = None):
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.server.mcpserver.tools import Tool

    from sluice import __version__

    tools: list[Tool] = []
    kept: list = []  # the warm town: [sluice.api.Town] once a call has found it

    def town():
        from sluice.api import open_town

        return open_town(town_arg)

    def warm_town():
        """The kept town, or a new one when the lookup now finds another (or its first) town."""
        found = town()
        if not kept or kept[0].root != found.root:
            kept[:] = [found]
        return kept[0]

    def tool(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> str:
            try:
                result = fn(*args, **kwargs)
            except SlingFailed as err:  # its message is the sling's JSON document, sent as it is
                raise ToolError(str(err)) from None
            except SluiceError as err:  # a message may quote what was asked for: shown escaped
                raise ToolError(printable_text(str(err))) from None
            except OSError as err:  # a directory where a file belongs, no permission, a full disk
                raise ToolError(printable_text(os_error_text(err))) from None
            except Exception as err:  # a bug: the caller gets the reason, stderr no traceback (as the CLI)
                if os.environ.get("SLUICE_DEBUG"):
                    raise
                raise ToolError(clipped(internal_error_text(err), 1000)) from None
            # The very text `--json` prints: one JSON document, lists included.
            return to_json(result)

        wrapper.__annotations__["return"] = str
        description = (fn.__doc__ or "").strip()
        made = Tool.from_function(wrapper, name=fn.__name__, description=description, structured_output=False)
        _refuse_unknown_arguments(made)
        tools.append(made)
        return fn

    @tool
    def sluice_schedule_next(
        graph_id: Annotated[str, Field(description="Only items under this top-level epic.")] = "",
        limit: Annotated[StrictInt, Field(ge=1, description="How many decisions, at least 1.")] = NEXT_LIMIT,
        preview: Annotated[StrictBool, Field(description="Score without recording the decision.")] = False,
    ) -> list[dict]:
        """Score ready work and return the next decision(s), as `sluice schedule next --json`."""
        return warm_town().next(limit=limit, graph_id=_given(graph_id), preview=preview).to_json()

    @tool
    def sluice_schedule_status(
        recent: Annotated[StrictInt, Field(ge=0, description="How many recent decisions.")] = 10,
    ) -> dict:
        """Policy, ready count, recent decisions and merge pressure, as `sluice schedule status --json`."""
        return warm_town().schedule_status(recent=recent).to_json()

    @tool
    def sluice_schedule_policy(
        action: Annotated[Literal["show", "set", "unset"], Field(
            description="show, set, or unset (remove graph_id's weight overrides)")] = "show",
        priority: Weight = None,
        affinity: Weight = None,
        cost: Weight = None,
        fairness: Weight = None,
        deadline: Weight = None,
        merge_queue_threshold: Annotated[StrictInt | None, Field(ge=1)] = None,
        merge_pressure_penalty: Weight = None,
        skip_on_merge_pressure: StrictBool | None = None,
        graph_id: Annotated[str, Field(description="Set the weights for this graph only.")] = "",
    ) -> dict:
        """Show or change the scoring policy, as `sluice schedule policy show|set|unset --json`."""
        fields = {"priority": priority, "affinity": affinity, "cost": cost, "fairness": fairness,
                  "deadline": deadline, "merge_queue_threshold": merge_queue_threshold,
                  "merge_pressure_penalty": merge_pressure_penalty,
                  "skip_on_merge_pressure": skip_on_merge_pressure, "graph_id": _given(graph_id)}
        given = {k: v for k, v in fields.items() if v is not None}
        if action == "show":
            if given:  # `show` changes nothing: a caller passing values meant `set`
                raise UsageError(f"action 'show' takes no other arguments (got {', '.join(sorted(given))})")
            return town().policy().to_json()
        if action == "unset":
            if set(given) != {"graph_id"}:  # unset removes one graph's overrides, nothing else
                raise UsageError("action 'unset' takes graph_id and nothing else")
            return town().unset_policy(given["graph_id"]).to_json()
        if not set(given) - {"graph_id"}:
            # JSON has no NaN or Infinity: clients send such a weight as null, which must not pass for
            # "nothing to change" and answer success.
            raise UsageError("action 'set' needs a value to change; a weight must be a finite number"
                             " (NaN and Infinity arrive as null and are refused)")
        return town().set_policy(**given).to_json()

    @tool
    def sluice_sling(
        item_ids: Annotated[list[str], Field(min_length=1, description="Items, epics or convoys to sling.")],
        rig: Annotated[str, Field(description="Target rig (default: each item's own rig).")] = "",
        dry_run: StrictBool = False,
        force: StrictBool = False,
    ) -> dict:
        """Queue (or, in direct mode, launch) work, as `sluice sling ... --json`."""
        result = town().sling(item_ids, _given(rig), dry_run=dry_run, force=force)
        if not result.ok:  # the CLI exits 1 here; the caller still gets the whole document
            raise SlingFailed(to_json(result.to_json()))
        return result.to_json()

    @tool
    def sluice_scheduler_status(
        limit: Annotated[StrictInt, Field(ge=0, description="List the first N queued items; 0 = all.")] = 50,
    ) -> dict:
        """The dispatcher's state and queue, as `sluice scheduler status --json`."""
        return town().status(limit).to_json()

    @tool
    def sluice_scheduler_list(
        limit: Annotated[StrictInt, Field(ge=0, description="At most N rows; 0 = all.")] = 0,
        offset: Annotated[StrictInt, Field(ge=0, description="Skip the first K rows.")] = 0,
    ) -> list[dict]:
        """Queued items in dispatch order, as `sluice scheduler list --json`."""
        return town().list(limit, offset).to_json()

    @tool
    def sluice_scheduler_run(
        dry_run: StrictBool = False,
        batch: Annotated[StrictInt | None, Field(ge=1, description="Override scheduler.batch_size.")] = None,
        item_id: Annotated[str, Field(description="Launch only this item now, if admission allows.")] = "",
    ) -> dict:
        """Run (or preview) one dispatch cycle, as `sluice scheduler run [--item ID] --json`."""
        return town().run_cycle(batch=batch, dry_run=dry_run, item=_given(item_id)).to_json()

    @tool
    def sluice_scheduler_promote(
        item_id: Annotated[str, Field(description="The queued item to move to the head of the order.")],
        undo: Annotated[StrictBool, Field(description="Put it back in score order.")] = False,
    ) -> dict:
        """Promote a queued item ahead of score order, as `sluice scheduler promote ITEM [--undo] --json`."""
        return town().promote(item_id, undo=undo).to_json()

    @tool
    def sluice_scheduler_pause() -> dict:
        """Pause dispatching town-wide, as `sluice scheduler pause --json`."""
        return town().pause(actor="mcp").to_json()

    @tool
    def sluice_scheduler_resume() -> dict:
        """Resume dispatching, as `sluice scheduler resume --json`."""
        return town().resume().to_json()

    @tool
    def sluice_scheduler_clear(
        item_id: Annotated[str, Field(description="Only this item's contexts (default: all).")] = "",
    ) -> dict:
        """Close queued sling contexts, as `sluice scheduler clear [--item ID] --json`."""
        return town().clear(_given(item_id)).to_json()

    @tool
    def sluice_scheduler_forecast(
        limit: Annotated[StrictInt, Field(ge=0, description="At most N items; 0 = all.")] = 0,
    ) -> dict:
        """When each queued item is expected to start and finish, as `sluice scheduler forecast --json`."""
        return town().forecast(limit).to_json()

    @tool
    def sluice_scheduler_explain(
        item_id: Annotated[str, Field(min_length=1, description="The work item to explain.")],
    ) -> dict:
        """Would the next cycle launch the item, and why not, as `sluice scheduler explain --json`."""
        return town().explain(item_id).to_json()

    @tool
    def sluice_scheduler_throttle(
        until: Annotated[str, Field(description="TIME (ISO) or DURATION (10m); empty with clear.")] = "",
        rig: Annotated[str, Field(description="Only this rig (default: the whole town).")] = "",
        reason: Annotated[str, Field(description="Why (shown by status and explain).")] = "",
        clear: Annotated[StrictBool, Field(description="Lift the throttle instead.")] = False,
    ) -> dict:
        """Hold new launches until a time, as `sluice scheduler throttle --json`."""
        return town().throttle(until=_given(until), rig=_given(rig), reason=reason, clear=clear).to_json()

    @tool
    def sluice_scheduler_broken() -> list[dict]:
        """Circuit-broken items with failures, last error and next attempt, as `sluice scheduler broken`."""
        return town().broken().to_json()

    @tool
    def sluice_runs(
        item_id: Annotated[str, Field(description="Only runs of this item.")] = "",
        rig: Annotated[str, Field(description="Only runs on this rig.")] = "",
        outcome: Annotated[str, Field(description="Only this outcome (running, ok, failed, throttled,"
                                                  " timed-out, stopped, vanished).")] = "",
        since: Annotated[str, Field(description="Only runs that started or ended this recently (1h).")] = "",
        limit: Annotated[int, Field(ge=0, description="At most this many (0 = all).")] = 100,
    ) -> list[dict]:
        """The run history, newest first, as `sluice runs --json`."""
        return town().runs(item=_given(item_id), rig=_given(rig), outcome=_given(outcome),
                           since=_given(since), limit=limit).to_json()

    @tool
    def sluice_feed(
        rig: Annotated[str, Field(description="Only events of this rig.")] = "",
        kind: Annotated[str, Field(description="Only this event type (PolecatExited, Dispatched, …).")] = "",
        since: Annotated[str, Field(description="Only events this recent (30m).")] = "",
        limit: Annotated[int, Field(ge=0, description="The last this many (0 = all).")] = 100,
    ) -> list[dict]:
        """The event log in words, oldest first, as `sluice feed --json`."""
        return town().feed(rig=_given(rig), kind=_given(kind), since=_given(since), limit=limit).to_json()

    @tool
    def sluice_patrol(
        rig: Annotated[str, Field(description="Rig to patrol.")],
        fix: Annotated[StrictBool, Field(description="Close stale and duplicate contexts.")] = False,
    ) -> dict:
        """One rig's queue health, as `sluice patrol RIG --json`."""
        return town().patrol(rig, fix).to_json()

    return MCPServer(
        name="sluice",
        version=__version__,
        log_level="WARNING",
        instructions=(
            "sluice schedules coding agents over git repositories. Use sluice_schedule_next to pick work, "
            "sluice_sling to queue it, sluice_scheduler_status to see the queue."
        ),
        tools=tools,
    )


#: The longest argument name an error repeats whole (every real one is far shorter).
NAME_MOST = 64
#: The argument a tool call's arguments are replaced by when they hold text no encoding can hold:
#: its value is the refusal, which the arguments' own validation raises (:func:`_encodable`).
REFUSED = "sluice-refused-arguments"
_SURROGATES = re.compile("[\ud800-\udfff]")


def _without_surrogates(value: Any) -> Any:
    """``value`` (JSON) with every lone surrogate replaced by U+FFFD."""
    if isinstance(value, str):
        return _SURROGATES.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_surrogates(inner) for inner in value]
    if isinstance(value, dict):
        return {_without_surrogates(key): _without_surrogates(inner) for key, inner in value.items()}
    return value


def readable_line(line: str) -> str:
    """One JSON-RPC line from the client, made one the SDK can read.

    JSON may spell a lone surrogate (``"\\ud800"``), which the SDK's parser
    refuses: the message would be dropped and the client never answered.  A
    tool call holding one gets, in place of its arguments, the refusal naming
    the argument, so the SDK answers it as a tool error (``isError``) to its
    id; anything else has its lone surrogates replaced by U+FFFD, so it is
    answered as it would be otherwise (an unknown tool, a bad request).
    """
    if not may_hold_unencodable(line.encode("utf-8", "surrogatepass")):
        return line
    try:
        message = json.loads(line)
    except ValueError:
        return line  # not JSON: the SDK says so
    if unencodable(message) is None:
        return line  # paired escapes only
    if isinstance(message, dict) and message.get("method") == "tools/call" \
            and isinstance(message.get("params"), dict):
        problem = unencodable_problem(message["params"].get("arguments"))
        if problem is not None:
            message["params"]["arguments"] = {REFUSED: problem}
    return json.dumps(_without_surrogates(message), ensure_ascii=False) + "\n"


class _Readable:
    """The server's stdin as the SDK reads it, every line through :func:`readable_line`."""

    def __init__(self, stream: io.TextIOBase):
        self.stream = stream

    def readline(self, *args: Any) -> str:
        line = self.stream.readline(*args)
        return readable_line(line) if line else line

    def __iter__(self):
        return iter(self.readline, "")

    def close(self) -> None:
        self.stream.close()


def serve(town_arg: str | None = None) -> None:
    import anyio
    from mcp.server.stdio import stdio_server

    server = build_server(town_arg)
    # The SDK's own stdin, claimed as it claims it: the server reads a private copy of fd 0 and fd 0
    # itself reads the null device, so a child (a polecat) cannot take the client's messages.
    try:
        private = os.dup(0)
    except OSError:  # no stdin at all: the SDK's own transport says what it makes of that
        server.run("stdio")
        return
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    stdin = io.TextIOWrapper(os.fdopen(private, "rb", closefd=False), encoding="utf-8", errors="replace")

    async def run() -> None:
        async with stdio_server(stdin=anyio.wrap_file(_Readable(stdin))) as (read_stream, write_stream):
            lowlevel = server._lowlevel_server
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())

    anyio.run(run)
