"""Serving the dashboard: the socket, the token, the start-up lines, uvicorn.

The socket is bound here, before uvicorn starts, so ``--port 0`` works (the
kernel picks a free port and the printed URL names it) and a port in use is
a plain error.  The server binds 127.0.0.1 unless told otherwise; bound
anywhere else it says so on stderr in capitals, because then anyone who can
reach the machine can read the town (actions still need the token).
"""

from __future__ import annotations

import ipaddress
import secrets
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sluice.errors import SluiceError, UsageError

if TYPE_CHECKING:
    import uvicorn

    from sluice.api import Town

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    if not 0 <= port <= 65535:
        raise UsageError(f"--port must be 0..65535 (got {port})")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise SluiceError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None
    sock.listen(64)
    sock.set_inheritable(True)
    return sock


@dataclass
class Web:
    """A bound, configured dashboard server; ``run()`` serves until stopped, ``start()`` in a thread."""

    server: uvicorn.Server
    sock: socket.socket
    url: str
    token: str
    _thread: threading.Thread | None = None

    def run(self) -> None:
        self.server.run(sockets=[self.sock])

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="sluice-web", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.sock.close()


def make_web(town: Town, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, token: str | None = None,
             interval: float = 1.0) -> Web:
    import uvicorn

    from sluice.surfaces.web.app import create_app

    if token is not None and len(token) < 8:
        raise UsageError("--token must be at least 8 characters")
    token = token or secrets.token_urlsafe(24)
    town.files.load_config()  # a corrupt config stops it before it listens
    sock = bind(host, port)
    bound_port = sock.getsockname()[1]
    app = create_app(town, token, host=host, interval=interval)
    config = uvicorn.Config(app, log_level="warning", access_log=False, server_header=False,
                            timeout_graceful_shutdown=1, lifespan="off")
    shown = f"[{host}]" if ":" in host else host
    return Web(uvicorn.Server(config), sock, f"http://{shown}:{bound_port}/", token)


def announce(web: Web, host: str, say: Callable[[str], None], warn: Callable[[str], None]) -> None:
    """The start-up lines: URL and token for ``say`` (stdout); a loud warning for ``warn`` when exposed."""
    say(f"sluice web: serving the dashboard at {web.url}")
    say(f"  token for actions (pause, resume, clear, stop, throttle): {web.token}")
    say(f"  open {web.url}#token={web.token} to act from the page")
    if not is_loopback(host):
        warn(f"WARNING: LISTENING ON {host}, NOT ONLY ON THIS MACHINE: anyone who can reach it can watch"
            " the town; actions still need the token")


def run_web(town: Town, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, token: str | None = None) -> None:
    """Serve until interrupted (Ctrl-C, SIGTERM)."""
    web = make_web(town, host, port, token)
    announce(web, host, lambda line: print(line, flush=True),
             lambda line: print(line, file=sys.stderr, flush=True))
    web.run()
