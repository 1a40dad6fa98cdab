"""`sluice web` over real HTTP on 127.0.0.1: the API is the snapshot, actions need the token."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from helpers.polecats import configure
from helpers.scheduler import (
    database_dump,
    drop_etas,
    item,
    sleeper,
    stop_polecats,
    wait_for,
    without_etas,
    write_items,
)
from helpers.web import TOKEN, WebServer, asgi_call
from sluice.api import open_town
from sluice.errors import UsageError
from sluice.executors import get_executor
from sluice.store.files.town import Town
from sluice.surfaces.web.serve import announce, is_loopback, make_web, resolve_token

SCRIPT_TITLE = "<script>document.title='owned'</script><img src=x onerror=alert(1)>"


@pytest.fixture
def busy_files(cli, rig) -> Iterator[Town]:
    """Rig alpha with al-1 running (a sleeping polecat), a script for a title, and a blocked item."""
    write_items(cli.town, "alpha", [item("al-1", "first", priority=0), item("al-2", SCRIPT_TITLE),
                                    item("al-3", "third", deps=[("blocks", "al-2")])])
    configure(cli.town, {"scheduler.max_polecats": "1", "executor.command": sleeper(600)})
    cli.run("sling", "al-1", "al-2", "al-3", "alpha")
    cli.run("scheduler", "run")
    yield Town(cli.town)
    stop_polecats(cli.town)


@pytest.fixture
def web(busy_files) -> Iterator[WebServer]:
    server = WebServer(busy_files.root)
    yield server
    server.stop()


def _observable(cli) -> dict:
    """Everything an action could change: scheduler state and queue, polecats, the town's files."""
    status = cli.json("scheduler", "status")
    polecats = [(p["id"], p["state"]) for p in cli.json("polecat", "list")]
    sluice = cli.town / ".sluice"
    files = {str(p.relative_to(sluice)): p.read_bytes() for p in sorted(sluice.rglob("*"))
             if p.is_file() and "runtime" not in p.parts[len(sluice.parts):][:1]
             and not p.name.startswith("town.db")}
    database = sluice / "town.db"  # the scheduler and admission state among the rest, by what it holds
    files["town.db"] = database_dump(database).encode() if database.exists() else b""
    return {"status": status, "polecats": polecats, "files": files}


def test_state_is_the_snapshot(cli, web):
    code, served = web.call("GET", "/api/state")
    assert code == 200
    printed = cli.json("snapshot", "--limit", "500")
    for snap in (served, printed):
        del snap["at"], snap["forecast"]  # the forecast moves with the clock while no daemon ticks
        snap["queue"] = without_etas(snap["queue"])
        for row in snap["polecats"]:
            del row["runtime_seconds"]
    assert served == printed
    assert [r["id"] for r in served["queue"]] == ["al-2", "al-3"]


def test_the_start_up_lines_name_the_url_and_token(web):
    assert web.startup[1].strip() == f"token for actions (pause, resume, clear, stop, throttle): {TOKEN}"
    assert web.startup[2].strip() == f"open {web.url}#token={TOKEN} to act from the page"


def test_actions_without_the_right_token_change_nothing(cli, web):
    paths = ["/api/pause", "/api/resume", "/api/clear/al-2", "/api/stop/al-1", "/api/throttle"]
    for paused in (False, True):  # resume is tried on a paused town: it would have something to do
        if paused:
            cli.run("scheduler", "pause")
        before = _observable(cli)
        for path in paths:
            for token in (None, "", "wrong", TOKEN[:-1], TOKEN + "x", TOKEN.upper()):
                code, body = web.call("POST", path, token=token, body={"until": "1h", "rig": "alpha"})
                assert code == 403 and "token" in body["error"], (path, token)
            code, _ = web.call("POST", path, headers={"Authorization": f"Basic {TOKEN}"})
            assert code == 403
            code, _ = web.call("POST", path, headers={"Authorization": TOKEN})
            assert code == 403
        assert _observable(cli) == before


def test_actions_with_the_token_act(cli, web, busy_files):
    code, body = web.call("POST", "/api/pause", token=TOKEN)
    assert code == 200 and body["paused"] is True and body["paused_by"] == "sluice web"
    assert cli.json("scheduler", "status")["paused"] is True
    code, body = web.call("POST", "/api/resume", token=TOKEN)
    assert code == 200 and cli.json("scheduler", "status")["paused"] is False

    code, body = web.call("POST", "/api/clear/al-2", token=TOKEN)
    assert code == 200 and body["cleared"] == 1
    assert [r["id"] for r in cli.json("scheduler", "list")] == ["al-3"]

    running = cli.json("polecat", "list")[0]
    code, body = web.call("POST", f"/api/stop/{running['id']}", token=TOKEN)
    assert code == 200 and body[0]["stopped"] is True
    wait_for(lambda: not get_executor(busy_files).active())

    code, body = web.call("POST", "/api/stop/no-such-polecat", token=TOKEN)
    assert code == 404 and "no polecat" in body["error"]


def test_every_action_from_the_page_is_recorded_as_sluice_web(cli, web, busy_files):
    running = cli.json("polecat", "list")[0]
    for path, body in [("/api/pause", None), ("/api/resume", None), ("/api/throttle", {"until": "1h"}),
                       ("/api/throttle", {"clear": True}), ("/api/clear/al-2", None),
                       (f"/api/stop/{running['id']}", None)]:
        code, _ = web.call("POST", path, token=TOKEN, body=body)
        assert code == 200, path
    wanted = {"Paused", "Resumed", "Throttled", "ThrottleCleared", "Cleared", "PolecatStopped"}
    lines = busy_files.events_path.read_text().splitlines()
    recorded = [json.loads(line) for line in lines]
    by = {e["type"]: e["payload"].get("by") for e in recorded if e["type"] in wanted}
    assert by == dict.fromkeys(wanted, "sluice web"), by
    wait_for(lambda: not get_executor(busy_files).active())


def test_unknown_methods_are_refused(cli, web):
    before = _observable(cli)
    for method, path in [
        ("PUT", "/api/state"), ("DELETE", "/api/state"), ("POST", "/api/state"), ("PATCH", "/api/events"),
        ("GET", "/api/pause"), ("PUT", "/api/pause"), ("DELETE", "/api/clear/al-2"),
        ("GET", "/api/stop/al-1"),
        ("DELETE", "/api/throttle"), ("POST", "/api/explain/al-2"), ("POST", "/"), ("POST", "/static/app.js"),
        ("OPTIONS", "/api/pause"), ("TRACE", "/api/state"),
    ]:
        code, _ = web.call(method, path, token=TOKEN)
        assert code == 405, (method, path)
    assert _observable(cli) == before


def test_a_foreign_host_name_is_refused(web):
    """A page on another name that rebinds its DNS to 127.0.0.1 cannot read the town."""
    code, _ = web.call("GET", "/api/state", headers={"Host": "attacker.example"})
    assert code == 400


def test_explain_gives_the_score_breakdown(cli, web):
    code, body = web.call("GET", "/api/explain/al-2")
    assert code == 200
    assert body["item"]["title"] == SCRIPT_TITLE and body["queued"] is True and body["blocked"] is False
    assert body["reasons"][0] == "priority=2" and any(r.startswith("cost=") for r in body["reasons"])
    assert body["score"] == body["queue_row"]["score"]
    assert drop_etas(body["explain"]) == drop_etas(cli.json("scheduler", "explain", "al-2"))  # why it waits
    code, body = web.call("GET", "/api/explain/al-3")
    assert body["blocked"] is True and body["blocked_by"] == ["al-2"]
    code, body = web.call("GET", "/api/explain/al-404")
    assert code == 404 and "al-404" in body["error"]


def test_logs_are_a_tail(cli, web):
    polecat = cli.json("polecat", "list")[0]["id"]
    code, body = web.call("GET", f"/api/logs/{polecat}")
    assert code == 200 and body["polecat"] == polecat and isinstance(body["lines"], list)
    code, body = web.call("GET", "/api/logs/nobody")
    assert code == 404


def test_the_event_stream_sends_the_snapshot_and_then_changes(cli, web):
    with urllib.request.urlopen(web.url + "api/events", timeout=20) as stream:
        assert stream.headers["Content-Type"].startswith("text/event-stream")

        def next_state() -> dict:
            return _next_state(stream)

        first = next_state()
        assert first["scheduler"]["paused"] is False
        cli.run("scheduler", "pause")
        assert wait_for(lambda: next_state()["scheduler"]["paused"], timeout=20)


def test_pages_and_assets_carry_a_strict_policy(web):
    with urllib.request.urlopen(web.url, timeout=20) as page:
        html = page.read().decode()
        csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert "<script src=\"/static/app.js\"></script>" in html and "http" not in html.split("<body>")[1]
    js = urllib.request.urlopen(web.url + "static/app.js", timeout=20).read().decode()
    for name in ("common.js", "item.js"):
        js += urllib.request.urlopen(web.url + "static/" + name, timeout=20).read().decode()
    assert "innerHTML" not in js and "insertAdjacentHTML" not in js and "document.write" not in js


def test_throttle_needs_a_json_object(web):
    code, body = web.call("POST", "/api/throttle", token=TOKEN, body=["not", "an", "object"])
    assert code == 400 and "JSON object" in body["error"]
    code, body = web.call("POST", "/api/throttle", token=TOKEN, body={"until": "10m", "rig": "nope"})
    assert code == 400 and "unknown rig" in body["error"]
    code, body = web.call("POST", "/api/throttle", token=TOKEN, body={"until": 5})
    assert code == 400 and "until" in body["error"]


def test_throttle_with_the_token_holds_a_rig_and_clear_lifts_it(cli, web):
    code, body = web.call("POST", "/api/throttle", token=TOKEN, body={"until": "10m", "rig": "alpha"})
    assert code == 200 and body["rig"] == "alpha"
    throttles = cli.json("scheduler", "status")["throttles"]
    assert [t["rig"] for t in throttles] == ["alpha"]
    assert web.call("GET", "/api/state")[1]["scheduler"]["throttles"] == throttles
    code, body = web.call("POST", "/api/throttle", token=TOKEN, body={"rig": "alpha", "clear": True})
    assert code == 200 and cli.json("scheduler", "status")["throttles"] == []


def test_announce_is_loud_off_loopback():
    class Fake:
        url, token = "http://0.0.0.0:8765/", "t0k3n-abcdef"
        hosts, token_source = ["127.0.0.1", "localhost"], "random"

    out, err = [], []
    announce(Fake(), "0.0.0.0", out.append, err.append)
    assert err and err[0].startswith("WARNING: LISTENING ON 0.0.0.0")
    out, err = [], []
    announce(Fake(), "127.0.0.1", out.append, err.append)
    assert not err and out[0].endswith("http://0.0.0.0:8765/")
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.2")


def test_bad_options_are_refused(cli):
    done = cli.run("web", "--port", "70000", check=False)
    assert done.returncode == 2 and "--port" in done.stderr
    done = cli.run("web", "--token", "short", "--port", "0", check=False)
    assert done.returncode == 2 and "--token" in done.stderr


def test_a_throttle_beyond_the_longest_duration_is_a_400_that_says_why(cli, web):
    code, body = web.call("POST", "/api/throttle", token=TOKEN, body={"until": "999999999h"})
    assert code == 400 and "876000h" in body["error"]
    assert cli.json("scheduler", "status")["throttles"] == []


def test_an_unexpected_error_is_a_json_500_naming_it_without_a_traceback(cli, capfd, monkeypatch):
    from sluice.api import Town as ApiTown
    from sluice.surfaces.web.app import create_app

    def broken(self, *args, **kwargs):
        raise ValueError("year 11409972 is out of range")

    monkeypatch.delenv("SLUICE_DEBUG", raising=False)
    monkeypatch.setattr(ApiTown, "snapshot", broken)
    app = create_app(open_town(cli.town), TOKEN)
    code, body = asgi_call(app, "GET", "/api/state")
    assert code == 500 and body["error"].startswith("internal error: ValueError: year 11409972")
    err = capfd.readouterr().err
    assert "year 11409972" in err and "Traceback" not in err


# -- binding wide keeps the Host check; where the token comes from -------------------------------------


def _wide(town, **kw):
    web = make_web(open_town(town.root), host="0.0.0.0", port=0, token=TOKEN, **kw)
    web.sock.close()
    return web, web.server.config.app


def test_binding_every_address_still_refuses_a_foreign_host_name(busy_files):
    """`Host: evil.com` is a page on another site that rebound its name to this machine."""
    web, app = _wide(busy_files, allow_hosts=("dash.example.org",))
    name = socket.gethostname()
    for host in ("evil.com", "evil.com:8765", "127.0.0.1.evil.com"):
        assert asgi_call(app, "GET", "/api/state", headers={"Host": host})[0] == 400, host
    for host in ("127.0.0.1:9999", "localhost", "[::1]:8765", name, f"{name}:80", "dash.example.org:443"):
        assert asgi_call(app, "GET", "/api/logs/nope", headers={"Host": host})[0] == 404, host
    assert "*" not in web.hosts and {"localhost", "127.0.0.1", "[::1]", name} <= set(web.hosts)
    out, err = [], []
    announce(web, "0.0.0.0", out.append, err.append)
    assert any("requests must name one of" in line and name in line for line in err)


def test_any_host_only_with_the_explicit_flag_and_a_warning(busy_files):
    web, app = _wide(busy_files, allow_any_host=True)
    assert web.hosts == ["*"]
    assert asgi_call(app, "GET", "/api/logs/nope", headers={"Host": "evil.com"})[0] == 404
    out, err = [], []
    announce(web, "0.0.0.0", out.append, err.append)
    assert any("ANY HOST NAME" in line for line in err)
    with pytest.raises(UsageError, match="allow-any-host"):
        _wide(busy_files, allow_hosts=("*",))


def test_the_token_comes_from_a_file_or_the_environment_not_only_argv(busy_files, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("from-a-file-0123456789\n")
    assert resolve_token(token_file=str(token_file), environ={}) == ("from-a-file-0123456789",
                                                                      f"--token-file {token_file}")
    assert resolve_token(environ={"SLUICE_WEB_TOKEN": "from-the-env-01234"})[0] == "from-the-env-01234"
    assert resolve_token("argv-token-0123", environ={"SLUICE_WEB_TOKEN": "x" * 12})[0] == "argv-token-0123"
    assert resolve_token(environ={}) == (None, "random")
    for bad in ({"token_file": str(tmp_path / "missing")}, {"token": "a" * 9, "token_file": str(token_file)}):
        with pytest.raises(UsageError):
            resolve_token(**bad, environ={})
    token_file.write_text("short\n")
    with pytest.raises(UsageError, match="--token-file"):
        resolve_token(token_file=str(token_file), environ={})
    token_file.write_text("from-a-file-0123456789\n")
    for server in (WebServer(busy_files.root, token=None, args=("--token-file", str(token_file))),
                   WebServer(busy_files.root, token=None, env={"SLUICE_WEB_TOKEN": "from-the-env-01234"})):
        try:
            from_file = "--token-file" in server.process.args
            given = "from-a-file-0123456789" if from_file else "from-the-env-01234"
            assert server.call("POST", "/api/pause", token="wrong-token-0000")[0] == 403
            assert server.call("POST", "/api/pause", token=given)[0] == 200
            assert server.call("POST", "/api/resume", token=given)[0] == 200
        finally:
            server.stop()


def test_a_served_town_bound_wide_refuses_a_foreign_host(busy_files):
    server = WebServer(busy_files.root, token=None,
                       args=("--host", "0.0.0.0", "--allow-host", "dash.example.org"),
                       env={"SLUICE_WEB_TOKEN": TOKEN})
    try:
        assert server.call("GET", "/api/state", headers={"Host": "evil.com"})[0] == 400
        assert server.call("GET", "/api/state", headers={"Host": "dash.example.org:1"})[0] == 200
        assert server.call("GET", "/api/state")[0] == 200
    finally:
        server.stop()


# -- one snapshot per change for every open stream, and a bound on open streams ------------------------


def _next_state(stream) -> dict:
    data, kind = None, ""
    for raw in stream:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: ") and kind == "state":
            data = json.loads(line[6:])
        elif line == "" and data is not None:
            return data
    raise AssertionError("stream ended")


def test_open_streams_share_one_snapshot_per_change_and_are_bounded(cli, rig, monkeypatch):
    from sluice.api import Town as ApiTown

    write_items(cli.town, "alpha", [item("al-1", "first")])
    computed = []
    real = ApiTown.snapshot

    def counted(self, *args, **kwargs):
        computed.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ApiTown, "snapshot", counted)
    # A long interval: only a change of a watched file computes the snapshot again.
    web = make_web(open_town(cli.town), port=0, token=TOKEN, interval=600, max_streams=3)
    web.start()
    url = web.url + "api/events"
    try:
        streams = [urllib.request.urlopen(url, timeout=30) for _ in range(3)]
        assert all(_next_state(s)["scheduler"]["paused"] is False for s in streams)
        assert len(computed) == 1  # three streams, one snapshot
        with pytest.raises(urllib.error.HTTPError) as refused:  # a fourth stream is over the bound
            urllib.request.urlopen(url, timeout=30)
        assert refused.value.code == 503
        assert "too many open event streams (3)" in refused.value.read().decode()
        cli.run("scheduler", "pause")
        assert all(_next_state(s)["scheduler"]["paused"] is True for s in streams)
        assert len(computed) <= 3  # the change (state file, then event log): not once per stream
        streams.pop().close()
        board = web.server.config.app.state.dashboard
        assert wait_for(lambda: board.feed.streams == 2, timeout=20)  # a closed stream frees its place
        with urllib.request.urlopen(url, timeout=30) as again:
            assert _next_state(again)["scheduler"]["paused"] is True
        for stream in streams:
            stream.close()
    finally:
        web.stop()
