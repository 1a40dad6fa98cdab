"""A real `sluice web` server in a subprocess on 127.0.0.1, and plain HTTP calls to it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

TOKEN = "test-token-0123456789"


class WebServer:
    """``token=None`` passes no ``--token`` (the token then comes from ``args`` or ``env``)."""

    def __init__(self, town: Path, token: str | None = TOKEN, args: tuple[str, ...] = (),
                 env: dict | None = None):
        env = {**os.environ, "SLUICE_TOWN": str(town), **(env or {})}
        given = ("--token", token) if token is not None else ()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sluice", "web", "--port", "0", *given, *args],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        first = self.process.stdout.readline()
        if not first.startswith("sluice web: serving the dashboard at "):
            self.process.kill()
            raise AssertionError(f"no start-up line: {first!r} {self.process.stderr.read()}")
        self.url = first.rsplit(" ", 1)[1].strip().replace("//0.0.0.0:", "//127.0.0.1:")
        self.startup = [first] + [self.process.stdout.readline() for _ in range(2)]
        assert self.url.startswith("http://127.0.0.1:")

    def call(self, method: str, path: str, token: str | None = None, body: object = None,
             headers: dict | None = None) -> tuple[int, object]:
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        request = urllib.request.Request(self.url + path.lstrip("/"), data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        for key, value in (headers or {}).items():
            request.add_header(key, value)
        try:
            with urllib.request.urlopen(request, timeout=20) as response:
                return response.status, _decode(response.read())
        except urllib.error.HTTPError as err:
            return err.code, _decode(err.read())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()
        self.process.stderr.close()


def _decode(raw: bytes):
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


def asgi_call(app, method: str, path: str, headers: dict | None = None,
              body: bytes = b"") -> tuple[int, object]:
    """One request straight into an ASGI app, no socket: (status, decoded body).

    For what a real client cannot easily make happen: a Host header of any
    name on a server bound to every address, or an error deep inside a route.
    """
    import asyncio

    head = {"host": "127.0.0.1:8765", **{k.lower(): v for k, v in (headers or {}).items()}}
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in head.items()],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8765),
    }
    sent: list[dict] = []
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, _decode(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))
