"""Text no encoding can hold, and text longer than its cap, refused by every surface.

The rule lives in one place (:mod:`sluice.api`: every public method of
``Town`` checks its text arguments); these tests drive each surface through
its real process — the ``sluice`` command line with an argument of bytes that
are not UTF-8, the MCP server over stdio with a raw JSON ``"\\ud800"``, the
web server over HTTP — and check that each answers with its own refusal,
names the argument and never echoes the whole input.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from helpers import Cli
from helpers.web import TOKEN, WebServer, asgi_call
from sluice import api
from sluice.api import open_town
from sluice.errors import TextRefused, UsageError

LONE = "\ud800"


# -- the library: one guard over every method ----------------------------------------------------


def test_every_text_argument_of_the_api_is_checked(cli: Cli, rig: str):
    town = open_town(cli.town)
    refused = [
        lambda: town.explain(LONE),
        lambda: town.sling([LONE], "alpha"),
        lambda: town.sling(["al-1"], LONE),
        lambda: town.throttle(until="10m", reason="x" + LONE),
        lambda: town.create_item("alpha", "a title", labels=["ok", LONE]),
        lambda: town.polecat_logs(LONE),
        lambda: town.set_policy(priority=1.0, graph_id=LONE),
        lambda: town.config_set("scheduler.max_polecats", LONE),
    ]
    for call in refused:
        with pytest.raises(TextRefused, match="cannot be encoded") as caught:
            call()
        assert LONE not in str(caught.value)
    assert isinstance(caught.value, UsageError) and caught.value.exit_code == 2
    with pytest.raises(TextRefused, match=r"^labels\[1\] holds"):
        town.create_item("alpha", "a title", labels=["ok", LONE])


def test_text_longer_than_its_cap_is_refused_before_anything_is_written(cli: Cli, rig: str):
    town = open_town(cli.town)
    cases = [
        (lambda: town.throttle(until="10m", reason="r" * (api.REASON_MOST + 1)), "reason"),
        (lambda: town.explain("i" * (api.ID_MOST + 1)), "item"),
        (lambda: town.create_item("alpha", "t" * (api.TITLE_MOST + 1)), "title"),
        (lambda: town.create_item("alpha", "t", description="d" * (api.DESCRIPTION_MOST + 1)), "description"),
        (lambda: town.import_items("alpha", "/" + "p" * api.PATH_MOST), "path"),
        (lambda: town.sling(["al-1"] * (api.ENTRIES_MOST + 1), "alpha"), "items"),
    ]
    for call, name in cases:
        with pytest.raises(TextRefused) as caught:
            call()
        message = str(caught.value)
        assert message.startswith(name) and len(message) < 200, message
    status = town.status().to_json()
    assert status["throttles"] == [] and status["queued_total"] == 0
    assert town.items("alpha").to_json() == []
    # At the cap is taken.
    town.throttle(until="10m", reason="r" * api.REASON_MOST)
    assert town.status().to_json()["throttles"][0]["reason"] == "r" * api.REASON_MOST


# -- the command line: arguments of bytes that are not UTF-8 -------------------------------------


def _sluice(cli: Cli, *args: bytes | str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLUICE_TOWN": str(cli.town)}
    return subprocess.run([sys.executable, "-m", "sluice", *args], env=env, cwd=cli.town,
                          capture_output=True, timeout=120)


@pytest.mark.parametrize("args", [
    (b"sling", b"\xff"),
    (b"sling", b"al-1", b"alpha", b"--formula", b"f\xffx"),
    (b"item", b"create", b"alpha", b"--title", b"\xc3("),
    (b"item", b"create", b"alpha", b"--title=\xff"),
    (b"scheduler", b"explain", b"\xff"),  # a hot command: the fast path hands it on
    (b"scheduler", b"throttle", b"--until", b"10m", b"--reason", b"\xed\xa0\x80"),
    (b"--town", b"/tmp/\xff", b"scheduler", b"status"),
])
def test_an_argument_of_bytes_that_are_not_utf8_exits_2_naming_it(cli: Cli, rig: str, args):
    done = _sluice(cli, *args)
    err = done.stderr.decode("utf-8")  # all of it printable UTF-8
    assert done.returncode == 2, err
    assert "cannot be encoded" in err and ("argument" in err or "--title" in err), err
    assert "internal error" not in err and "Traceback" not in err
    assert "\\udc" in err  # the argument shown escaped
    assert cli.json("scheduler", "status")["throttles"] == []
    assert cli.json("item", "list") == []


def test_an_argument_longer_than_its_cap_exits_2_without_echoing_it(cli: Cli, rig: str):
    done = cli.run("item", "create", "alpha", "--title", "t" * 5000, check=False)
    assert done.returncode == 2 and "--title is 5,000 characters long" in done.stderr
    assert len(done.stderr) < 300
    done = cli.run("scheduler", "explain", "x" * 60_000, check=False)
    assert done.returncode == 2 and len(done.stderr) < 300, done.stderr
    assert cli.json("item", "list") == []


# -- MCP: a raw JSON-RPC stdio session --------------------------------------------------------------


class RawMcp:
    """``sluice mcp`` over stdio, spoken as raw JSON-RPC lines, so a request can hold what the SDK's
    client would never send (a lone ``\\ud800`` escape)."""

    def __init__(self, town):
        env = {**os.environ, "SLUICE_TOWN": str(town)}
        self.process = subprocess.Popen([sys.executable, "-m", "sluice", "mcp"], env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL)
        self.next_id = 0
        self.request("initialize", '{"protocolVersion":"2025-06-18","capabilities":{},'
                                   '"clientInfo":{"name":"raw","version":"0"}}')
        self.send('{"jsonrpc":"2.0","method":"notifications/initialized"}')

    def send(self, line: str) -> None:
        self.process.stdin.write(line.encode("ascii") + b"\n")
        self.process.stdin.flush()

    def request(self, method: str, params: str) -> dict:
        """Send ``params`` as written (JSON text), return the reply to it."""
        self.next_id += 1
        self.send(f'{{"jsonrpc":"2.0","id":{self.next_id},"method":"{method}","params":{params}}}')
        while True:
            ready, _, _ = select.select([self.process.stdout], [], [], 60)
            assert ready, f"no reply to {method} in 60 s"
            line = self.process.stdout.readline()
            assert line, "the server closed its output"
            reply = json.loads(line)
            if reply.get("id") == self.next_id:
                return reply

    def call(self, tool: str, arguments: str) -> tuple[bool, str]:
        reply = self.request("tools/call", f'{{"name":"{tool}","arguments":{arguments}}}')
        assert "result" in reply, reply
        result = reply["result"]
        return bool(result.get("isError")), result["content"][0]["text"] if result["content"] else ""

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()


def test_a_line_the_sdk_could_not_parse_is_made_one_it_answers():
    from sluice.surfaces.mcp_server import REFUSED, readable_line

    plain = ('{"jsonrpc":"2.0","id":1,"method":"tools/call",'
             '"params":{"name":"t","arguments":{"a":"\\ud83d\\ude00"}}}\n')
    assert readable_line(plain) is plain  # a paired escape is text like any other
    call = json.loads(readable_line(plain.replace("\\ud83d\\ude00", "x\\ud800")))
    assert call["id"] == 1 and call["params"]["arguments"] == {
        REFUSED: "a holds text that cannot be encoded (a lone surrogate such as \\ud800)"}
    other = readable_line('{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"\\udc80"}}')
    other = json.loads(other)
    assert other["params"]["name"] == "\ufffd"
    assert readable_line("not json \\ud800\n") == "not json \\ud800\n"


@pytest.fixture
def mcp(cli: Cli, rig: str) -> Iterator[RawMcp]:
    server = RawMcp(cli.town)
    yield server
    server.close()


@pytest.mark.parametrize(("tool", "arguments", "named"), [
    ("sluice_scheduler_explain", '{"item_id":"\\ud800"}', "item_id"),
    ("sluice_scheduler_throttle", '{"until":"10m","reason":"why \\udfff"}', "reason"),
    ("sluice_sling", '{"item_ids":["al-1","\\ud800"],"rig":"alpha"}', "item_ids[1]"),
    ("sluice_scheduler_status", '{"\\ud800":1}', "a key"),
    ("sluice_scheduler_status", '{"limit":"\\ud800"}', "limit"),
])
def test_a_lone_surrogate_in_a_tool_argument_is_a_tool_error_and_the_server_goes_on(
        cli: Cli, mcp: RawMcp, tool: str, arguments: str, named: str):
    is_error, text = mcp.call(tool, arguments)
    assert is_error and "cannot be encoded" in text and named in text, text
    is_error, text = mcp.call("sluice_scheduler_status", "{}")
    assert not is_error and json.loads(text)["throttles"] == []


def test_a_tool_argument_longer_than_its_cap_is_a_short_tool_error(cli: Cli, mcp: RawMcp):
    reason = "r" * 200_000
    is_error, text = mcp.call("sluice_scheduler_throttle", json.dumps({"until": "10m", "reason": reason}))
    assert is_error and "reason is 200,000 characters long" in text and len(text) < 300, text[:300]
    is_error, text = mcp.call("sluice_scheduler_explain", json.dumps({"item_id": "x" * 60_000}))
    assert is_error and len(text) < 300, text[:300]
    is_error, text = mcp.call("sluice_scheduler_status", "{}")
    assert not is_error and json.loads(text)["throttles"] == []


# -- the web: bodies, paths and what an error repeats --------------------------------------------


@pytest.fixture
def web(cli: Cli, rig: str) -> Iterator[WebServer]:
    server = WebServer(cli.town)
    yield server
    server.stop()


def _post_raw(web: WebServer, path: str, data: bytes) -> tuple[int, bytes]:
    request = urllib.request.Request(web.url + path.lstrip("/"), data=data, method="POST")
    request.add_header("Content-Type", "application/json")
    request.add_header("Authorization", f"Bearer {TOKEN}")
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _get_raw(web: WebServer, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(web.url + path.lstrip("/"), timeout=20) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_a_lone_surrogate_in_a_throttle_reason_is_a_400(cli: Cli, web: WebServer):
    code, body = _post_raw(web, "/api/throttle", b'{"until": "10m", "reason": "why \\ud800"}')
    assert code == 400, body
    error = json.loads(body)["error"]
    assert "reason" in error and "cannot be encoded" in error
    code, body = _post_raw(web, "/api/throttle", b'{"until": "10m", "\\ud800": 1}')
    assert code == 400 and "\\ud800" in json.loads(body)["error"]  # the key shown escaped
    assert cli.json("scheduler", "status")["throttles"] == []


def test_a_two_megabyte_throttle_reason_is_refused_and_nothing_stored(cli: Cli, web: WebServer):
    data = json.dumps({"until": "10m", "reason": "r" * 2_000_000}).encode()
    code, body = _post_raw(web, "/api/throttle", data)
    assert code == 413 and len(body) < 300, body[:300]
    # Under the body's cap, over the reason's.
    data = json.dumps({"until": "10m", "reason": "r" * 5_000}).encode()
    code, body = _post_raw(web, "/api/throttle", data)
    assert code == 400 and "reason is 5,000 characters long" in json.loads(body)["error"], body[:300]
    assert len(body) < 300
    assert cli.json("scheduler", "status")["throttles"] == []
    code, _body = _post_raw(web, "/api/throttle", json.dumps({"until": "10m", "reason": "ok"}).encode())
    assert code == 200 and cli.json("scheduler", "status")["throttles"][0]["reason"] == "ok"


def test_a_sixty_thousand_character_logs_path_is_a_short_4xx(cli: Cli, web: WebServer):
    code, body = _get_raw(web, "/api/logs/" + "x" * 60_000)
    assert 400 <= code < 500 and len(body) < 300, (code, body[:300])
    code, body = _get_raw(web, "/api/logs/" + "x" * 5_000)  # under the address's cap, over an id's
    assert code == 400 and len(body) < 300, (code, body[:300])
    code, body = _get_raw(web, "/api/explain/" + "x" * 5_000)
    assert code == 400 and len(body) < 300, (code, body[:300])
    code, body = _get_raw(web, "/api/state?" + "q" * 60_000)
    assert code == 414 and len(body) < 300, (code, body[:300])


def test_a_body_read_past_its_cap_without_a_length_is_a_413(cli: Cli, rig: str):
    from sluice.surfaces.web.app import BODY_MOST, create_app

    app = create_app(open_town(cli.town), TOKEN)
    body = json.dumps({"until": "10m", "reason": "r" * (BODY_MOST + 10)}).encode()
    code, answer = asgi_call(app, "POST", "/api/throttle", {"authorization": f"Bearer {TOKEN}"}, body)
    assert code == 413 and "longer than" in answer["error"]
    assert cli.json("scheduler", "status")["throttles"] == []


def test_an_unexpected_error_quoting_its_input_is_clipped(cli: Cli, rig: str, monkeypatch):
    from sluice.api import Town as ApiTown
    from sluice.surfaces.web.app import ERROR_MOST, create_app

    def broken(self, *args, **kwargs):
        raise ValueError("boom " + "y" * 100_000 + LONE)

    monkeypatch.delenv("SLUICE_DEBUG", raising=False)
    monkeypatch.setattr(ApiTown, "snapshot", broken)
    code, body = asgi_call(create_app(open_town(cli.town), TOKEN), "GET", "/api/state")
    assert code == 500 and body["error"].startswith("internal error: ValueError: boom")
    assert len(body["error"]) < ERROR_MOST + 100
