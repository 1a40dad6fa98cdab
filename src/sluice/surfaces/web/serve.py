"""Serving the dashboard: the socket, the token, the start-up lines, uvicorn.

The socket is bound here, before uvicorn starts, so ``--port 0`` works (the
kernel picks a free port and the printed URL names it) and a port in use is
a plain error.  The server binds 127.0.0.1 unless told otherwise; bound
anywhere else it says so on stderr in capitals, because then anyone who can
reach the machine can read the town (actions still need the token).

The token may come from ``--token`` (visible to every local user in ``ps``,
so it is warned about), ``--token-file`` or ``SLUICE_WEB_TOKEN``; with none,
a random one is made and printed.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.core.recordclass import field, recordclass
from sluice.errors import SluiceError, UsageError

if TYPE_CHECKING:
    import uvicorn

    from sluice.api import Town

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
TOKEN_VAR = "SLUICE_WEB_TOKEN"
MIN_TOKEN = 8


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_token(token: str | None = None, token_file: str | None = None,
                  environ: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """The token actions need and where it came from (``--token``, ``--token-file``, the variable).

    None when nothing gives one (a random token is made).  A file's one line
    is the token, its line ending dropped; an empty or short token is refused
    wherever it came from, naming the source.
    """
    environ = os.environ if environ is None else environ
    if token is not None and token_file is not None:
        raise UsageError("--token and --token-file do not go together")
    if token_file is not None:
        try:
            text = Path(token_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            raise UsageError(f"--token-file {token_file}: cannot read it ({reason})") from None
        token, source = text.strip(), f"--token-file {token_file}"
    elif token is not None:
        source = "--token"
    elif environ.get(TOKEN_VAR):
        token, source = environ[TOKEN_VAR].strip(), TOKEN_VAR
    else:
        return None, "random"
    if len(token) < MIN_TOKEN:
        raise UsageError(f"the token from {source} must be at least {MIN_TOKEN} characters")
    return token, source


def machine_names() -> tuple[str, ...]:
    """This machine's host name (full and short) and the addresses it resolves to, as a Host names them."""
    try:
        name = socket.gethostname()
    except OSError:
        return ()
    names = {name, name.split(".", 1)[0]}
    with contextlib.suppress(OSError, UnicodeError):  # unresolved: the names alone (--allow-host adds)
        for *_, address in socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP):
            names.add(str(address[0]).split("%", 1)[0])
    return tuple(sorted(n for n in names if n))


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


@recordclass
class Web:
    """A bound, configured dashboard server; ``run()`` serves until stopped, ``start()`` in a thread."""

    server: uvicorn.Server
    sock: socket.socket
    url: str
    token: str
    hosts: list[str] = field(default_factory=list)
    token_source: str = "random"
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
             interval: float = 1.0, token_file: str | None = None, allow_hosts: tuple[str, ...] = (),
             allow_any_host: bool = False, max_streams: int | None = None) -> Web:
    import uvicorn

    from sluice.surfaces.web.app import allowed_hosts, create_app

    token, source = resolve_token(token, token_file)
    token = token or secrets.token_urlsafe(24)
    for name in allow_hosts:
        if not name or "*" in name or "/" in name or " " in name:
            raise UsageError(f"--allow-host {name!r} is not a host name or address"
                             " (--allow-any-host answers any)")
    town.files.load_config()  # a corrupt config stops it before it listens
    machine = () if is_loopback(host) else machine_names()
    hosts = allowed_hosts(host, (*allow_hosts, *(("*",) if allow_any_host else ())), machine)
    sock = bind(host, port)
    bound_port = sock.getsockname()[1]
    app = create_app(town, token, host=host, interval=interval, hosts=hosts,
                     **({"max_streams": max_streams} if max_streams is not None else {}))
    config = uvicorn.Config(app, log_level="warning", access_log=False, server_header=False,
                            timeout_graceful_shutdown=1, lifespan="off")
    shown = f"[{host}]" if ":" in host else host
    return Web(uvicorn.Server(config), sock, f"http://{shown}:{bound_port}/", token, hosts, source)


def announce(web: Web, host: str, say: Callable[[str], None], warn: Callable[[str], None]) -> None:
    """The start-up lines: URL and token for ``say`` (stdout); a loud warning for ``warn`` when exposed."""
    say(f"sluice web: serving the dashboard at {web.url}")
    say(f"  token for actions (pause, resume, clear, stop, throttle): {web.token}")
    say(f"  open {web.url}#token={web.token} to act from the page")
    if not is_loopback(host):
        warn(f"WARNING: LISTENING ON {host}, NOT ONLY ON THIS MACHINE: anyone who can reach it can watch"
            " the town; actions still need the token")
        if web.hosts != ["*"]:
            warn(f"  requests must name one of: {', '.join(web.hosts)} (any port; --allow-host adds more)")
    if web.hosts == ["*"]:
        warn("WARNING: --allow-any-host: ANY HOST NAME IS ANSWERED, so a page on another site can read the"
             " town by rebinding its DNS name to this machine")
    if web.token_source == "--token":
        warn(f"warning: a --token is visible to every user of this machine (ps); prefer {TOKEN_VAR} or"
             " --token-file")


def run_web(town: Town, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, token: str | None = None,
            token_file: str | None = None, allow_hosts: tuple[str, ...] = (),
            allow_any_host: bool = False) -> None:
    """Serve until interrupted (Ctrl-C, SIGTERM)."""
    web = make_web(town, host, port, token, token_file=token_file, allow_hosts=allow_hosts,
                   allow_any_host=allow_any_host)
    announce(web, host, lambda line: print(line, flush=True),
             lambda line: print(line, file=sys.stderr, flush=True))
    web.run()
