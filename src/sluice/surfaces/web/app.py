"""``sluice web``: the town's dashboard, served by Starlette over the one snapshot.

* ``GET /api/state`` is :func:`sluice.scheduler.views.snapshot.snapshot` with the
  queue's first :data:`QUEUE_ROWS` rows, exactly what ``sluice snapshot
  --json --limit 500`` prints (the counts are the whole queue's); ``GET
  /api/events`` streams it as
  server-sent events (``event: state``) whenever it changes — when a source
  file's signature moves (:mod:`sluice.surfaces.watching`), else after its
  backstop (the page ticks runtimes itself) — computed once for every open stream
  (:mod:`sluice.surfaces.web.feed`), at most ``max_streams`` of them.
  ``GET /api/explain/{item}`` explains one item; ``GET /api/logs/{polecat}``
  is the tail of a polecat's output.
* Actions — ``POST /api/pause``, ``/api/resume``, ``/api/clear/{item}``,
  ``/api/stop/{polecat}``, ``/api/throttle`` — need ``Authorization: Bearer
  TOKEN``.  The token is compared in constant time; a missing or wrong one is
  answered 403 before anything is read or changed.  A browser cannot send
  that header to another origin without a CORS preflight, which this server
  never grants, so a foreign page cannot drive the town.
* Requests are bounded before routing: a request target over
  :data:`TARGET_MOST` bytes is answered 414, a body over :data:`BODY_MOST`
  bytes 413.  Text the API refuses (a lone surrogate such as JSON's
  ``"\\ud800"``, or longer than its cap: :mod:`sluice.api`) is a 400, and no
  error reply repeats more than a clipped, escaped piece of what was sent.
* Every other method on a known path is refused with 405; the ``Host``
  header must name this server, whatever address it is bound to (DNS
  rebinding: see :func:`allowed_hosts`); responses carry a strict
  Content-Security-Policy (scripts only from this server, no inline code).
* The page is static HTML, CSS and JS shipped in the package (no build
  step, no CDN); the JS builds the DOM with ``textContent`` only, so item
  titles — agents' text — are shown as text.
"""

from __future__ import annotations

import asyncio
import hmac
import os
import sys
from collections import deque
from importlib import resources
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from sluice.core.text import clipped, printable
from sluice.errors import SluiceError, UnknownItem, UnknownPolecat, UsageError, internal_error_text
from sluice.surfaces.watching import Sources
from sluice.surfaces.web.feed import DEFAULT_MAX_STREAMS, Feed

if TYPE_CHECKING:
    from sluice.api import Town

STATIC = resources.files("sluice.surfaces.web") / "static"
LOG_TAIL = 200
KEEPALIVE = 5.0  # seconds: a stream with nothing new still sends a comment this often
ACTOR = "sluice web"  # who every action from the page is recorded as
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self';"
       " base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = ((b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
           (b"referrer-policy", b"no-referrer"), (b"x-frame-options", b"DENY"))


def _error(err: Exception, status: int = 400) -> JSONResponse:
    # A message may quote what was asked for: shown escaped (nothing unencodable) and clipped.
    return JSONResponse({"error": clipped(str(err), ERROR_MOST)}, status_code=status)


#: The longest error message a reply carries; what an error quotes is clipped far shorter.
ERROR_MOST = 2_000
#: The longest request target (path and query, as sent) and request body the server reads: anything
#: the API takes fits in far less (an id is at most 200 characters, a throttle's reason 1,000).
TARGET_MOST = 8_192
BODY_MOST = 64 * 1024


#: Queue rows a snapshot carries to the page: its first ones, as ``top`` takes (the counts stay exact).
QUEUE_ROWS = 500


class Dashboard:
    """The routes, bound to one town and one token."""

    def __init__(self, town: Town, token: str, interval: float = 1.0, max_streams: int = DEFAULT_MAX_STREAMS):
        if not token:
            raise UsageError("the dashboard needs a token for its actions")
        self.town = town
        self.token = token.encode("utf-8")
        self.interval = interval
        self.feed = Feed(self._snapshot, Sources(town.files).signature, interval, max_streams)

    # -- reading -----------------------------------------------------------------
    def _snapshot(self) -> dict:
        return self.town.snapshot(limit=QUEUE_ROWS).to_json()

    async def state(self, request: Request) -> Response:
        try:
            return JSONResponse(await asyncio.to_thread(self._snapshot))
        except SluiceError as err:
            return _error(err, 500)

    async def events(self, request: Request) -> Response:
        feed = self.feed
        if not feed.join():
            return JSONResponse({"error": f"too many open event streams ({feed.max_streams}); close one,"
                                          " or read /api/state"}, status_code=503,
                                headers={"Retry-After": "5"})

        async def stream():
            try:
                yield "retry: 2000\n\n"
                sent = 0
                while not await request.is_disconnected():
                    version, message = await feed.next_after(sent, min(self.interval, KEEPALIVE))
                    if version != sent:
                        sent = version
                        yield message
                    else:
                        yield ": unchanged\n\n"
            finally:
                feed.leave()

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    async def explain(self, request: Request) -> Response:
        item_id = request.path_params["item"]
        try:
            return JSONResponse(await asyncio.to_thread(self._explain, item_id))
        except UnknownItem as err:
            return _error(err, 404)
        except SluiceError as err:
            return _error(err)

    def _explain(self, item_id: str) -> dict:
        """The item page's data: its detail, and ``scheduler explain`` (would it launch, why it waits)."""
        detail = self.town.item_detail(item_id).to_json()
        detail["explain"] = self.town.explain(item_id).to_json()
        return detail

    async def logs(self, request: Request) -> Response:
        ref = request.path_params["polecat"]
        try:
            lines = await asyncio.to_thread(lambda: list(deque(self.town.polecat_logs(ref), maxlen=LOG_TAIL)))
            return JSONResponse({"polecat": ref, "lines": lines})
        except UsageError as err:
            return _error(err)
        except SluiceError as err:
            return _error(err, 404)

    # -- acting --------------------------------------------------------------------
    def authorised(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer":
            given = ""
        return hmac.compare_digest(given.strip().encode("utf-8"), self.token)

    async def act(self, request: Request) -> Response:
        if not self.authorised(request):
            return JSONResponse({"error": "a valid token is needed (Authorization: Bearer TOKEN)"},
                                status_code=403)
        action = request.url.path.removeprefix("/api/").split("/", 1)[0]
        body = {}
        if action == "throttle":
            try:
                body = await request.json()
                if not isinstance(body, dict):
                    raise ValueError("not a JSON object")
            except ValueError as err:
                return _error(UsageError(f'the body must be a JSON object {{"until": …, "rig": …}} ({err})'))
        try:
            result = await asyncio.to_thread(self._do, action, dict(request.path_params), body)
        except (UnknownItem, UnknownPolecat) as err:
            return _error(err, 404)
        except SluiceError as err:
            return _error(err)
        return JSONResponse(result)

    def _do(self, action: str, params: dict, body: dict):
        """Every action is recorded as done by ``sluice web`` (the events' and the state's ``by``)."""
        if action == "pause":
            return self.town.pause(actor=ACTOR).to_json()
        if action == "resume":
            return self.town.resume(actor=ACTOR).to_json()
        if action == "clear":
            return self.town.clear(params["item"], actor=ACTOR).to_json()
        if action == "stop":
            return self.town.stop_polecat(params["polecat"], actor=ACTOR).to_json()
        return self._throttle(body)

    def _throttle(self, body: dict):
        """``scheduler throttle``: ``{"until": "10m" or ISO, "rig": name or null}``; ``clear`` lifts it."""
        unknown = set(body) - {"until", "rig", "reason", "clear"}
        if unknown:
            named = clipped(", ".join(sorted(unknown)), 200)
            raise UsageError(f"unknown throttle field(s): {named} (use until, rig, reason, clear)")
        for key in ("until", "rig", "reason"):
            if body.get(key) is not None and not isinstance(body[key], str):
                raise UsageError(f"throttle {key} must be a string")
        return self.town.throttle(until=body.get("until"), rig=body.get("rig"),
                                  reason=body.get("reason") or "", clear=body.get("clear") is True,
                                  actor=ACTOR).to_json()

    # -- the page ------------------------------------------------------------------
    async def page(self, request: Request) -> Response:
        """The town's page, or an item's (``/item/{item}``: the page reads its id from the address)."""
        name = "item.html" if "item" in request.path_params else "index.html"
        return FileResponse(str(STATIC / name), media_type="text/html")


class _TooLarge(Exception):
    """A request body went past :data:`BODY_MOST` while it was read."""


class _NoTracebacks:
    """Pure-ASGI middleware: the security headers on every response (streams included), and an
    exception nothing expected answered as a JSON 500 naming it, never a traceback.

    It bounds each request before routing: a request target longer than
    :data:`TARGET_MOST` is answered 414, a body longer than :data:`BODY_MOST`
    413 (by its ``Content-Length``, or once that much of it was read); neither
    reply repeats what was sent.

    Starlette's own error middleware answers a bare 500 and has the server
    print the traceback; a caller deserves the reason, and the terminal only
    one line.  ``SLUICE_DEBUG=1`` lets the traceback through.
    """

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False
        read = 0

        async def send_with_headers(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message = {**message, "headers": [*message.get("headers", []), *HEADERS]}
            await send(message)

        async def bounded_receive():
            nonlocal read
            message = await receive()
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
                if read > BODY_MOST:
                    raise _TooLarge
            return message

        path = scope.get("raw_path") or scope.get("path", "").encode("utf-8", "surrogateescape")
        target = len(path) + len(scope.get("query_string", b""))
        if target > TARGET_MOST:
            said = f"the request target is {target:,} bytes long; at most {TARGET_MOST:,} are read"
            await JSONResponse({"error": said}, status_code=414)(scope, receive, send_with_headers)
            return
        length = dict(scope.get("headers") or ()).get(b"content-length", b"")
        if length.isdigit() and int(length) > BODY_MOST:
            await self._too_large(scope, receive, send_with_headers)
            return
        try:
            await self.app(scope, bounded_receive, send_with_headers)
        except _TooLarge:
            if not started:
                await self._too_large(scope, receive, send_with_headers)
        except Exception as err:
            if os.environ.get("SLUICE_DEBUG"):
                raise
            text = clipped(internal_error_text(err), ERROR_MOST)
            path = clipped(scope.get("path", ""), 200)
            print(f"sluice web: {path}: {printable(text)}", file=sys.stderr, flush=True)
            if not started:
                await JSONResponse({"error": text}, status_code=500)(scope, receive, send_with_headers)

    @staticmethod
    async def _too_large(scope, receive, send):
        said = f"the request body is longer than {BODY_MOST:,} bytes"
        reply = JSONResponse({"error": said}, status_code=413, headers={"Connection": "close"})
        await reply(scope, receive, send)


def allowed_hosts(host: str, extra: tuple[str, ...] = (), machine: tuple[str, ...] = ()) -> list[str]:
    """The names a request's ``Host`` may carry (any port): never every name unless ``extra`` says ``*``.

    A page on another site that rebinds its DNS name to this machine sends
    that name as its ``Host``; refusing names we do not know is what stops it,
    and binding every address (``0.0.0.0``) changes nothing about that.  So
    the list is the loopback names, the bound address, the machine's own
    names and addresses (``machine``), and what ``--allow-host`` adds.
    """
    if "*" in extra:
        return ["*"]
    names = {"127.0.0.1", "localhost", "[::1]", *machine, *extra}
    if host not in ("0.0.0.0", "::", ""):
        names.add(host)
    return sorted(f"[{name}]" if ":" in name and not name.startswith("[") else name.lower() for name in names)


def create_app(town: Town, token: str, host: str = "127.0.0.1", interval: float = 1.0,
               hosts: list[str] | None = None, max_streams: int = DEFAULT_MAX_STREAMS) -> Starlette:
    board = Dashboard(town, token, interval, max_streams)
    action = ["POST"]
    routes = [
        Route("/", board.page, methods=["GET"]),
        Route("/item/{item}", board.page, methods=["GET"]),
        Route("/api/state", board.state, methods=["GET"]),
        Route("/api/events", board.events, methods=["GET"]),
        Route("/api/explain/{item}", board.explain, methods=["GET"]),
        Route("/api/logs/{polecat}", board.logs, methods=["GET"]),
        Route("/api/pause", board.act, methods=action),
        Route("/api/resume", board.act, methods=action),
        Route("/api/clear/{item}", board.act, methods=action),
        Route("/api/stop/{polecat}", board.act, methods=action),
        Route("/api/throttle", board.act, methods=action),
        Mount("/static", app=StaticFiles(directory=str(STATIC)), name="static"),
    ]
    middleware = [Middleware(_NoTracebacks),
                  Middleware(TrustedHostMiddleware, allowed_hosts=hosts or allowed_hosts(host))]
    app = Starlette(routes=routes, middleware=middleware)
    app.state.dashboard = board
    return app
