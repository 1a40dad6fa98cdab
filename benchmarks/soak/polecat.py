"""The soak's polecat: says who it is and when it ran, then behaves as its context dictates.

Run by sluice's local executor as
``python -S polecat.py SOAK_DIR SEED ITEM RIG CONTEXT TITLE`` (stdlib only, so
it starts fast).  The behaviour is a pure function of seed and context id, so
a replay with the same seed asks the same of sluice:

* ``ok``      exits 0 after a short while;
* ``fail``    exits 1 at once (a launch that came to nothing);
* ``requeue`` exits 75 (EX_TEMPFAIL: "try me again later");
* ``hang``    sleeps until the stall timeout stops it.

While it runs it holds an exclusive ``flock`` on ``running/<item>.lock``: a
second polecat of the same item that starts meanwhile cannot take it and
records an ``overlap`` — the kernel, not a clock, decides "at the same time".
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import sys
import time

KINDS = (("ok", 55), ("fail", 15), ("requeue", 15), ("hang", 15))


def kind_of(seed: str, context_id: str) -> str:
    roll = int(hashlib.sha256(f"{seed}|{context_id}".encode()).hexdigest()[:8], 16) % 100
    for kind, weight in KINDS:
        if roll < weight:
            return kind
        roll -= weight
    return "ok"


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        return int(data[data.rfind(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def main(argv: list[str]) -> int:
    soak_dir, seed, item, rig, context = argv[:5]
    log = os.path.join(soak_dir, "history", "polecats.jsonl")
    pid = os.getpid()

    def note(op: str, **fields) -> None:
        record = {"t": time.time(), "pid": pid, "op": op, "item": item, "rig": rig, "context": context,
                  "env_item": os.environ.get("SLUICE_ITEM_ID"), **fields}
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(record) + "\n").encode())
        finally:
            os.close(fd)

    kind = kind_of(seed, context)
    running = os.path.join(soak_dir, "running")
    os.makedirs(running, exist_ok=True)
    lock_fd = os.open(os.path.join(running, item.replace("/", "_") + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(lock_fd, 64, 0).decode(errors="replace").strip()
        note("overlap", kind=kind, holder=holder, start_time=_start_time(pid), cwd=os.getcwd())
        return 0
    os.ftruncate(lock_fd, 0)
    os.pwrite(lock_fd, f"{pid} {context}".encode(), 0)

    def on_term(signum, _frame):
        note("end", code=128 + signum, kind=kind)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    note("start", kind=kind, start_time=_start_time(pid), cwd=os.getcwd(),
         env_context=os.environ.get("SLUICE_CONTEXT_ID"))
    rand = int(hashlib.sha256(f"{context}|t".encode()).hexdigest()[:4], 16) / 0xFFFF
    code = 0
    if kind == "ok":
        time.sleep(0.3 + 1.7 * rand)
    elif kind == "fail":
        code = 1
    elif kind == "requeue":
        time.sleep(0.2 + 0.8 * rand)
        code = 75
    else:
        while True:
            time.sleep(3600)
    note("end", code=code, kind=kind)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
