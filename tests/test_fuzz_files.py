"""Fuzzed files: hostile beads records, sling-context logs, config and policy files.

Whatever is in the files, every command must end with a message and exit 1
or 2 (never a traceback), a broken store must be named with file and line,
no work item may change and nothing may be written outside ``.sluice/``.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz_helpers import (
    FUZZ,
    assert_clean_exit,
    beads_record,
    json_any,
    jsonl_file,
    raw_line,
    run_cli,
    snapshot,
)
from helpers import make_repo
from sluice.store.files.town import init_town
from sluice.store.items.rigs import add_rig

GOOD = [
    {"id": "fz-1", "title": "one", "status": "open", "priority": 1, "issue_type": "task"},
    {"id": "fz-2", "title": "two", "status": "open", "priority": 2, "issue_type": "task",
     "dependencies": [{"issue_id": "fz-2", "depends_on_id": "fz-1", "type": "blocks"}]},
]
READERS = (["item", "list", "fz", "--json"], ["item", "ready", "fz", "--limit", "0", "--json"],
           ["item", "blocked", "fz", "--json"], ["scheduler", "status", "--json"],
           ["schedule", "next", "--preview", "--json"])
SCHEDULING = (["sling", "fz-1", "--json"], ["scheduler", "list", "--json"],
              ["scheduler", "run", "--dry-run", "--json"], ["patrol", "fz", "--fix", "--json"],
              ["scheduler", "clear", "--item", "fz-1", "--json"])


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory) -> Path:
    """One town for the module (rig fz, deferred), its pristine copy beside it; examples start from that."""
    root = tmp_path_factory.mktemp("fuzz")
    town = init_town(root / "town")
    add_rig(town, "fz", make_repo(root / "repos" / "fz"), "fz")
    config = json.loads(town.config_path.read_text())
    config["scheduler"]["max_polecats"] = 2  # deferred: a sling queues, nothing is launched
    town.config_path.write_text(json.dumps(config))
    (town.dir / "rigs" / "fz" / "issues.jsonl").write_text("".join(json.dumps(r) + "\n" for r in GOOD))
    saved = root / "pristine"
    shutil.copytree(town.dir, saved)
    return town.root


def reset(town: Path) -> Path:
    """The town as the fixture built it (each example starts from there); returns the whole root."""
    shutil.rmtree(town / ".sluice")
    shutil.copytree(town.parent / "pristine", town / ".sluice")
    return town.parent


def some(commands) -> st.SearchStrategy:
    """One or two of ``commands`` per example: every command meets many inputs, each input few commands."""
    return st.lists(st.sampled_from(commands), min_size=1, max_size=2, unique_by=tuple)


def check_named(code: int, err: str, file: str, args) -> None:
    if code == 1:
        assert re.search(rf"{re.escape(file)}:\d+", err) or file not in err, (
            f"sluice {args!r}: an error about {file} must name the line: {err}")


@FUZZ
@given(body=jsonl_file(GOOD), commands=some(READERS))
def test_hostile_beads_records_get_a_clear_error_and_change_nothing(fuzz_dir, body, commands):
    root = reset(fuzz_dir)
    store = fuzz_dir / ".sluice" / "rigs" / "fz" / "issues.jsonl"
    store.write_bytes(body)
    outside = snapshot(root, skip=".sluice")
    for args in commands:
        code, out, err = run_cli(fuzz_dir, *args)
        assert_clean_exit(code, err, args, out)
        check_named(code, err, "issues.jsonl", args)
        if args[:2] == ["item", "list"] and code == 1:
            assert re.search(r"issues\.jsonl:\d+", err), err  # its only way to fail is a bad file
    assert store.read_bytes() == body, "a read changed the work items"
    assert snapshot(root, skip=".sluice") == outside


context_fields = st.fixed_dictionaries({}, optional={
    "version": json_any, "work_bead_id": st.one_of(st.sampled_from(["fz-1", "fz-2", "fz-9", ""]), json_any),
    "target_rig": st.one_of(st.sampled_from(["fz", "nope"]), json_any), "enqueued_at": json_any,
    "dispatch_failures": st.one_of(st.integers(-2, 5), json_any), "launch_started_at": json_any,
    "force": json_any, "last_failure_at": json_any,
})
context_record = st.builds(
    lambda record, fields, raw, use_raw: {**record, "labels": ["sluice:sling-context"], "ephemeral": True,
                                          "description": raw if use_raw else json.dumps(fields)},
    beads_record, context_fields, json_any, st.booleans())


@st.composite
def ephemeral_file(draw) -> bytes:
    lines = [json.dumps(draw(context_record)).encode() for _ in range(draw(st.integers(1, 3)))]
    body = b"\n".join(lines + draw(st.lists(raw_line, max_size=2)))
    return body if draw(st.booleans()) else body + b"\n"


@FUZZ
@given(body=ephemeral_file(), commands=some((*SCHEDULING, ["scheduler", "status", "--json"])))
def test_hostile_sling_contexts_never_crash_a_cycle_or_touch_items(fuzz_dir, body, commands):
    root = reset(fuzz_dir)
    (fuzz_dir / ".sluice" / "rigs" / "fz" / "ephemeral.jsonl").write_bytes(body)
    items = (fuzz_dir / ".sluice" / "rigs" / "fz" / "issues.jsonl").read_bytes()
    outside = snapshot(root, skip=".sluice")
    for args in commands:
        code, out, err = run_cli(fuzz_dir, *args)
        assert_clean_exit(code, err, args, out)
        check_named(code, err, "ephemeral.jsonl", args)
    assert (fuzz_dir / ".sluice" / "rigs" / "fz" / "issues.jsonl").read_bytes() == items
    assert snapshot(root, skip=".sluice") == outside


config_doc = st.one_of(
    st.fixed_dictionaries({}, optional={
        "version": json_any, "rigs": st.one_of(json_any, st.dictionaries(st.sampled_from(["fz", "x", ""]),
                                                                         json_any, max_size=2)),
        "scheduler": st.one_of(json_any, st.dictionaries(st.sampled_from(
            ["max_polecats", "batch_size", "spawn_delay", "max_dispatch_failures", "polecat_timeout",
             "retry_base", "retry_max", "bogus"]), json_any, max_size=3)),
        "executor": st.one_of(json_any, st.dictionaries(st.sampled_from(["kind", "ray", "bogus"]), json_any,
                                                        max_size=2)),
    }).map(lambda d: json.dumps(d).encode()),
    json_any.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=60),
)
CONFIG_READERS = (["scheduler", "status", "--json"], ["config", "get", "scheduler.max_polecats"],
                  ["rig", "list", "--json"], ["scheduler", "run", "--dry-run", "--json"],
                  ["item", "ready", "--json"])


@FUZZ
@given(body=config_doc, commands=some(CONFIG_READERS))
def test_a_hostile_config_is_named_never_a_default_or_a_crash(fuzz_dir, body, commands):
    root = reset(fuzz_dir)
    config = fuzz_dir / ".sluice" / "config.json"
    config.write_bytes(body)
    outside = snapshot(root, skip=".sluice")
    for args in commands:
        code, out, err = run_cli(fuzz_dir, *args)
        assert_clean_exit(code, err, args, out)
        if code:
            assert "config.json" in err or "rig" in err, f"{args}: {err}"
    assert config.read_bytes() == body
    assert snapshot(root, skip=".sluice") == outside


policy_doc = st.one_of(
    st.fixed_dictionaries({}, optional={
        "weights": st.one_of(json_any, st.dictionaries(st.sampled_from(
            ["priority", "affinity", "cost", "fairness", "bogus"]), json_any, max_size=3)),
        "merge_queue_threshold": json_any, "merge_pressure_penalty": json_any,
        "skip_on_merge_pressure": json_any, "graph_overrides": json_any, "version": json_any,
    }).map(lambda d: json.dumps(d).encode()),
    json_any.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=60),
)


POLICY_READERS = (["schedule", "status", "--json"], ["schedule", "next", "--preview", "--json"],
                  ["schedule", "policy", "show", "--json"], ["scheduler", "list", "--json"])


@FUZZ
@given(body=policy_doc, commands=some(POLICY_READERS))
def test_a_hostile_policy_is_named_never_a_crash(fuzz_dir, body, commands):
    root = reset(fuzz_dir)
    policy = fuzz_dir / ".sluice" / "schedule" / "policy.json"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_bytes(body)
    outside = snapshot(root, skip=".sluice")
    for args in commands:
        code, out, err = run_cli(fuzz_dir, *args)
        assert_clean_exit(code, err, args, out)
        if code:
            assert "policy.json" in err, f"{args}: {err}"
    assert policy.read_bytes() == body
    assert snapshot(root, skip=".sluice") == outside


# -- text no encoding can hold, wherever a file can put it ------------------------------------------

LONE = st.sampled_from(["\ud800", "\udfff", "a\udcffb", "\udbff" * 3])


@st.composite
def unencodable_somewhere(draw, document: dict) -> tuple[bytes, str]:
    """``document`` with a lone surrogate put at one place (a value, a list entry, a key), written as a
    JSON escape or as the bytes ``json`` also decodes to one; and where it is, as a refusal names it."""
    doc = json.loads(json.dumps(document))
    path, target = [], doc
    while True:
        keys = list(target) if isinstance(target, dict) else list(range(len(target)))
        if not keys or draw(st.booleans()):
            break
        key = draw(st.sampled_from(keys))
        if not isinstance(target[key], (dict, list)):
            break
        path.append(key)
        target = target[key]
    lone = draw(LONE)
    if isinstance(target, dict) and (not target or draw(st.booleans())):
        key = "k" + lone
        target[key] = 1
        where = "a key" + (" of " + _dotted(path) if path else "")
    elif isinstance(target, dict):
        key = draw(st.sampled_from(sorted(target)))
        target[key] = lone
        where = _dotted([*path, key])
    else:
        target.append(lone)
        where = _dotted(path) + f"[{len(target) - 1}]"
    escaped = draw(st.booleans())
    raw = json.dumps(doc, ensure_ascii=escaped).encode("utf-8", "surrogatepass")
    return raw, where


def _dotted(path: list) -> str:
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out


RICH = {"id": "fz-3", "title": "three", "status": "open", "priority": 1, "issue_type": "task",
        "assignee": "someone", "labels": ["a", "b"], "description": "text",
        "dependencies": [{"issue_id": "fz-3", "depends_on_id": "fz-1", "type": "blocks"}],
        "metadata": {"touches": ["src/a.py"], "estimated_tokens": 10}}


@FUZZ
@given(hostile=unencodable_somewhere(RICH), commands=some((*READERS, *SCHEDULING)))
def test_unencodable_text_anywhere_in_a_record_is_named_with_file_line_and_field(fuzz_dir, hostile, commands):
    raw, where = hostile
    root = reset(fuzz_dir)
    store = fuzz_dir / ".sluice" / "rigs" / "fz" / "issues.jsonl"
    body = store.read_bytes() + raw + b"\n"
    store.write_bytes(body)
    outside = snapshot(root, skip=".sluice")
    for args in commands:
        code, out, err = run_cli(fuzz_dir, *args)
        assert_clean_exit(code, err, args, out)
        check_named(code, err, "issues.jsonl", args)
    code, _out, err = run_cli(fuzz_dir, "item", "list", "fz", "--json")
    assert code == 1 and "issues.jsonl:3" in err and where in err and "cannot be encoded" in err, err
    assert store.read_bytes() == body, "a read changed the work items"
    assert snapshot(root, skip=".sluice") == outside


@FUZZ
@given(hostile=st.one_of(unencodable_somewhere({"version": 1, "scheduler": {"max_polecats": 2}}),
                         unencodable_somewhere({"weights": {"priority": 1.0}})))
def test_unencodable_text_in_the_config_or_policy_is_named_by_key(fuzz_dir, hostile):
    raw, where = hostile
    reset(fuzz_dir)
    name = "policy.json" if b"weights" in raw else "config.json"
    path = fuzz_dir / ".sluice" / ("schedule/" if name == "policy.json" else "") / name
    if name == "config.json":  # the fixture's own config, with the hostile text merged in
        config = json.loads(path.read_text())
        config.update(json.loads(raw.decode("utf-8", "surrogatepass")))
        raw = json.dumps(config, ensure_ascii=b"\\u" in raw).encode("utf-8", "surrogatepass")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw)
    code, _out, err = run_cli(fuzz_dir, "schedule", "next", "--preview", "--json")
    assert_clean_exit(code, err, "schedule next")
    assert code == 1 and name in err, err
    if b"\\u" in raw:  # as an escape the JSON is valid: the refusal names the key
        assert where in err and "cannot be encoded" in err, err
    else:  # as raw bytes the file is not UTF-8 at all
        assert "can't decode" in err, err
