"""What the fuzz tests share: Hypothesis profiles, hostile-input strategies, an in-process CLI, snapshots.

Profiles: ``fuzz-ci`` (default; bounded so the fuzzers add well under a
minute to the suite) and ``fuzz-long`` for a run by hand
(``SLUICE_FUZZ=long pytest tests/test_fuzz_*.py``; ``SLUICE_FUZZ_EXAMPLES=N``
sets its examples per test, 1500 by default).  They are applied per
test, so the other property tests keep their own settings.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from helpers import Cli

settings.register_profile(
    "fuzz-ci", max_examples=15, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
settings.register_profile(
    "fuzz-long", max_examples=int(os.environ.get("SLUICE_FUZZ_EXAMPLES", "1500")), deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
FUZZ = settings.get_profile("fuzz-long" if os.environ.get("SLUICE_FUZZ") == "long" else "fuzz-ci")

CRASH_MARKERS = ("Traceback", "internal error")

# -- strategies -----------------------------------------------------------------------

text = st.text(max_size=24)
odd_text = st.one_of(
    text,
    st.sampled_from(["", "\x00", "a\x00b", "\u2028", "\ufeff", "$(touch pwned)", "; rm -rf /", "../../x",
                     "fz-1", "fz", "-", "--", "\n", "ü" * 40]),
)
nasty_text = st.one_of(odd_text, st.sampled_from(["x" * 200_000, "é" * 70_000 + "\x00"]))  # huge ones too
#: What only a surface is handed: lone surrogates (JSON's ``"\\ud800"``, or an argument of bytes that
#: are not UTF-8 as Python decodes it) and text far past any cap the API sets.
lone_surrogates = st.one_of(
    st.sampled_from(["\ud800", "\udcff", "fz-1\udcff", "\udfff\ud800", "a\ud83d", "\udc80--json"]),
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3),
)
long_text = st.sampled_from(["x" * 201, "r" * 1_001, "t" * 5_000, "d" * 70_000, "fz-" + "1" * 200_000])
surface_text = st.one_of(odd_text, lone_surrogates, long_text)
scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True), odd_text)
json_any = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(text, inner, max_size=4), max_leaves=10)
ids = st.one_of(st.sampled_from(["fz-1", "fz-2", "fz-3", "fz-", "other-1", "fz-wisp-1"]), nasty_text)
DEP_TYPES = ("blocks", "parent-child", "waits-for", "conditional-blocks", "tracks", "related",
             "discovered-from")
STATUSES = ("open", "closed", "in_progress", "hooked", "pinned", "tombstone", "blocked", "deferred")
STAMPS = ("2026-01-01T00:00:00Z", "2026-01-01T00:00:00+05:00", "2999-01-01T00:00:00Z", "not a date", "",
          "2026-13-45T99:99:99Z", "1e400")


def maybe(strategy):
    """The plausible value, or any JSON at all (wrong types included)."""
    return st.one_of(strategy, json_any)


dependency = st.fixed_dictionaries({}, optional={
    "issue_id": maybe(ids), "depends_on_id": maybe(ids), "type": maybe(st.sampled_from(DEP_TYPES)),
    "created_at": maybe(st.sampled_from(STAMPS)),
})
beads_record = st.fixed_dictionaries({"id": maybe(ids)}, optional={
    "title": maybe(nasty_text), "description": maybe(nasty_text), "status": maybe(st.sampled_from(STATUSES)),
    "priority": maybe(st.integers(-3, 7)), "issue_type": maybe(st.sampled_from(
        ["task", "bug", "epic", "convoy", "merge-request", "gate", "molecule", "agent"])),
    "labels": maybe(st.lists(maybe(nasty_text), max_size=3)),
    "dependencies": maybe(st.lists(dependency, max_size=3)),
    "created_at": maybe(st.sampled_from(STAMPS)), "updated_at": maybe(st.sampled_from(STAMPS)),
    "defer_until": maybe(st.sampled_from(STAMPS)), "ephemeral": json_any, "pinned": json_any,
    "assignee": maybe(nasty_text), "metadata": maybe(st.dictionaries(
        st.sampled_from(["estimated_tokens", "context_budget", "x"]), json_any, max_size=2)),
})


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _as_line(record) -> bytes:
    return json.dumps(record, ensure_ascii=False).encode("utf-8", "surrogatepass")


raw_line = st.one_of(
    beads_record.map(_as_line),
    beads_record.map(_as_line),
    json_any.map(_as_line),  # not an object at all
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b" ")),  # garbage, often invalid UTF-8
    beads_record.map(lambda r: _as_line(r)[:-1] + b',"x":"\xff\xfe"}'),  # invalid UTF-8 inside a string
    st.sampled_from([_deep(100), _deep(5000), b'{"id":"fz-9","d":' + _deep(3000) + b"}",
                     b'{"id":"fz-8","title":"' + b"y" * 300_000 + b'"}', b"\x00\x00", b"{}", b"[]",
                     b'{"id":"fz-7","title":"nul\\u0000here"}']),
)


@st.composite
def jsonl_file(draw, valid: list[dict] = ()) -> bytes:
    """A JSONL file: some good records among hostile lines; maybe without its final newline."""
    lines = [json.dumps(r).encode() for r in valid]
    lines += draw(st.lists(raw_line, min_size=1, max_size=5))
    order = draw(st.permutations(lines))
    body = b"\n".join(order)
    return body if draw(st.booleans()) else body + b"\n"


# -- running the CLI in this process ------------------------------------------------


def run_cli(town: Path, *args: str) -> tuple[int, str, str]:
    """``sluice ARGS`` through its real entry point, in-process: (exit code, stdout, stderr)."""
    done = Cli(town).run(*args, check=False)
    return done.returncode, done.stdout, done.stderr


def assert_clean_exit(code: int, err: str, args, out: str = "") -> None:
    assert code in (0, 1, 2), f"sluice {args!r} exited {code}: {err[-800:]}"
    err.encode("utf-8"), out.encode("utf-8")  # what it said can be written: nothing unencodable echoed
    for marker in CRASH_MARKERS:
        assert marker not in err, f"sluice {args!r} crashed: {err[-1500:]}"
def assert_said_why(code: int, out: str, err: str, args) -> None:
    """A failure says why: on stderr, or (``--json``) in the one JSON document on stdout."""
    if code:
        assert err.strip() or ("--json" in args and out.strip()), f"sluice {args!r} exited {code} silently"


def snapshot(root: Path, skip: str = ".sluice") -> dict[str, str]:
    """sha256 of every file under ``root`` outside ``skip`` dirs: what sluice must never write."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != skip]
        for name in filenames:
            path = Path(dirpath) / name
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out
