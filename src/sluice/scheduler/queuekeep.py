"""The head of the queue, kept between reads of a queue nothing changed.

A survey of a long queue costs what the queue holds: about two seconds at
100,000 queued contexts.  Most reads ask it of a queue that has not moved
since the last one (an operator's ``scheduler status`` again, a view, an
MCP client polling), so the answer a survey gave — the queue's first
:data:`HEAD_ROWS` rows with their reasons, the exact counts, what admission
said of the whole queue — is kept in ``runtime/queue-head.json`` and given
again while three things hold:

* **its inputs are as they were**: the signature (inode, size, modification
  time) of every file a survey reads — the config, the policy, the state,
  admission and decision files, the run log, the polecat records, the hold
  file and the last host reading, each rig's ephemeral log and items file —
  the git metadata each rig's warmth is read from
  (:func:`~sluice.store.gitview.warmth_stamp`), and the running polecats
  as the executor lists them now;
* **the clock has not reached its horizon**: the first moment the clock
  alone would change the answer — a backoff or a deferral ending, a
  throttle lifting, a charge leaving the budget window, a missing item's
  grace ending, an item command's refresh falling due — and never more than
  :data:`KEEP_AT_MOST` after it was made;
* **the clock has not gone back** before the moment it was made.

Otherwise the reader surveys, as before, and keeps what it found.  Nothing
is kept when the answer moves with the clock itself (policy aging or
deadlines), when a rig's warmth can only be asked of git, when a source
command is due, when a host reading was taken for this call alone, or when
the survey saw a launch in flight or a rig it cannot read.

The inputs are taken *before* the survey reads them: a file that changes
while a survey runs has another signature by the next read, which then
surveys again.  The head is written by rename and never fsynced
(:func:`~sluice.store.fsutil.write_cache`); after a crash or a power cut a
reader finds the old head, whose inputs no longer match, or a cut one,
which is no head: it surveys.  The logs stay the only truth, and a
head can only ever be an answer some survey gave for exactly these inputs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sluice.core import admission as rules
from sluice.errors import SluiceError
from sluice.store import admission_state, fsutil, gitview, runs, sources
from sluice.store.town import compacted_path

if TYPE_CHECKING:
    from sluice.scheduler.admission import Assessment
    from sluice.scheduler.pending import Survey
    from sluice.scheduler.session import Session
    from sluice.store.town import Town

#: Queue rows kept: ``scheduler status``'s 50, a screen of ``top`` and ``snapshot --limit 500``.
HEAD_ROWS = 500
#: Seconds a head answers at most, whatever its horizon: the bound on any clock-borne change it misses.
KEEP_AT_MOST = 60.0
#: Seconds the forecast's reading of the queue stands at most after the survey it comes from, carried
#: past slings, clears and cycles meanwhile (:mod:`sluice.scheduler.readingtail`): an hour, as the last
#: cycle's chain.  The horizon names every change the clock alone makes to the reading, and its replay is
#: made at the moment asked (the replay kept of it answers for :data:`KEEP_AT_MOST` only); at 60 s, a
#: view of a busy 100,000-item queue surveyed it once a minute.
READING_KEEP_AT_MOST = 3600.0
FILE = "queue-head.json"
#: The forecast's reading of every queued item, kept apart: a read of the head never loads it.
REPLAY_FILE = "queue-replay.json"
#: Its first :data:`HEAD_ROWS` rows and the queue's size: what a replay of a view's first rows reads.
REPLAY_HEAD_FILE = "queue-replay-head.json"
#: The last whole replay's head and its first :data:`HEAD_ROWS` rows' times: what ``snapshot`` shows.
REPLAY_SUMMARY_FILE = "queue-replay-summary.json"
VERSION = 3
#: Bytes a reader reads first for a kept file's key: a town of a few dozen rigs and polecats.
KEY_BYTES = 64 * 1024
#: The key's last three parts (:func:`inputs`), after the signatures of the files a survey's reading of
#: the queue stands on: the other files' signatures, the running polecats, the rigs' ephemeral logs.
OTHER_FILES, RUNNING, LOGS = -3, -2, -1


def path(town: Town, name: str = FILE) -> Path:
    return town.runtime / name


def inputs(session: Session) -> list | None:
    """The signature of everything a survey of ``session``'s queue reads; None: its answer may not be kept.

    Taken once per session, at its first read of the queue (before any
    survey of it): every later read in the session judges the same files,
    as it judges the same ``now``.
    """
    if session.queue_inputs is None:
        session.queue_inputs = (_inputs(session),)
    return session.queue_inputs[0]


def _inputs(session: Session) -> list | None:
    from sluice.core.scoring import deadline_enabled
    from sluice.scheduler.gates import READING_FILE, hold_path
    from sluice.scheduler.ranking import load_town_policy

    policy = load_town_policy(session.files)
    if float(getattr(policy, "aging", 0.0) or 0.0) > 0 or deadline_enabled(policy):
        return None
    active = session.active
    if active is None:  # the executor cannot say what runs
        return None
    town = session.files
    # What a survey's reading of the queue (the forecast's) stands on, apart from what only admission, the
    # replay and the views read: a reading may be carried past a change of the latter (readingtail).
    read = [town.config_path, town.policy_path]
    others = [town.state_path, town.decisions_path, town.workers_dir,
              town.runtime / READING_FILE, *admission_state.paths(town)]
    hold = hold_path(town)
    parts: list = [VERSION, str(hold)]
    if hold is not None:
        others.append(hold)
    logs = []
    for rig in town.rigs():
        if rig.command is not None and sources.is_due(town, rig, sources.read_state(town, rig.name),
                                                      session.now):
            return None
        stamp = gitview.warmth_stamp(rig.repo)
        if stamp is None:  # only pygit2 can tell this rig's warmth
            return None
        log, items = town.rig_files(rig)
        read += [items, compacted_path(log)]  # a compaction since: the reading's marks name another log
        logs.append(fsutil.file_signature(log))
        parts += [rig.name, stamp]
    parts.append([fsutil.file_signature(f) for f in read])
    parts += [None, None, None]  # the trailing parts, by their names below
    parts[OTHER_FILES] = [*(fsutil.file_signature(f) for f in others),
                          town.db.versions(runs.VERSION) if runs.made(town) else None]
    parts[RUNNING] = sorted([p.id, p.item_id, p.rig, p.context_id, p.state] for p in active)
    parts[LOGS] = logs
    return parts


def same_reading_inputs(kept: object, key: list) -> bool:
    """Whether a kept key names the inputs ``key`` names as far as a survey's reading of the queue reads
    them: all but the files only admission and the replay read, the running polecats and the rigs' logs
    (:data:`OTHER_FILES`, :data:`RUNNING`, :data:`LOGS`), which :mod:`sluice.scheduler.readingtail`
    follows itself."""
    return isinstance(kept, list) and len(kept) == len(key) and kept[:OTHER_FILES] == key[:OTHER_FILES]


def running_items(key: list) -> set[str]:
    """The items of the running polecats a key names (its :data:`RUNNING` part)."""
    return {str(polecat[1]) for polecat in key[RUNNING]}


def horizon(session: Session, view: Survey, assessment: Assessment, retry: tuple[float, float],
            most: float = KEEP_AT_MOST) -> float:
    """The first moment after ``session.now`` the clock alone could change this survey's answer (at most
    ``most`` seconds after it)."""
    from sluice.scheduler.polecats import retry_epoch

    now, town = session.now, session.files
    ends = [now + most]
    ends += [at for work in view.backing_off if (at := retry_epoch(work.payload.fields, *retry)) is not None]
    ends += [held.closes_at for held in view.held if held.closes_at is not None]
    ends += [t.until for t in assessment.throttles]
    ends.append(spend_horizon(session))
    for store in session.stores.all():
        try:
            ends.append(store.next_release(now))
        except (SluiceError, OSError):  # the survey read it a moment ago; unsure now, so keep nothing
            return now
        rig = store.rig
        if rig.command is not None:
            ran_at = sources.read_state(town, rig.name).get("ran_at")
            ends.append(ran_at + rig.command.refresh if isinstance(ran_at, (int, float)) else now)
    return min(e for e in ends if not math.isnan(e))


def spend_horizon(session: Session) -> float:
    """When a charge next leaves the budget window (infinity: never, or no budget applies)."""
    from sluice.scheduler.admission import needs_spend

    if not needs_spend(session.config):
        return math.inf
    moves = admission_state.spend_moves_at(session.files, session.now,
                                           session.config.scheduler.seconds("budget_window"))
    return math.inf if moves is None else moves


def admission_horizon(session: Session) -> float:
    """The part of :func:`horizon` that admission's files make (a throttle lifting, a charge leaving the
    budget window) as they are now: what a reading carried past a change of them must end by."""
    throttles = admission_state.throttles(session.files, session.now)
    return min([spend_horizon(session), *(t.until for t in throttles)])


def keepable(view: Survey, assessment: Assessment) -> bool:
    """Whether a survey's answer may be kept: every rig readable, no launch in flight, no reading of
    the machine for this call alone."""
    gates = assessment.gates
    if view.unreadable or view.launched or view.relaunch:
        return False
    return not (gates is not None and gates.fresh)


def load(session: Session, key: list, name: str = FILE) -> dict | None:
    """What was kept (in ``name``) for exactly these inputs, still inside its horizon; None: survey.

    :func:`keep` writes the key first, so a file kept for other inputs is
    told by its first bytes: the first read after a change does not parse a
    reading of 100,000 queued items (about 0.1 s) only to find it stale.
    """
    prefix = b'{"key":' + json.dumps(key, separators=(",", ":")).encode("utf-8") + b","
    try:
        with open(path(session.files, name), "rb") as fh:
            start = fh.read(len(prefix))
            if start != prefix:
                return None
            kept = json.loads(start + fh.read())
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or kept.get("key") != key:
        return None
    return _standing(kept, session.now)


def load_whole(session: Session, name: str, accept: Callable[[object], bool]) -> dict | None:
    """What was kept in ``name`` under a key ``accept`` takes, still inside its horizon; None: nothing usable.

    For a reader that may carry a kept answer past a change it can follow
    (:mod:`sluice.scheduler.readingtail`).  The key comes first in the file
    and is read from its first bytes, so one the reader cannot follow is
    refused without reading the rest (a reading of 100,000 queued items is
    about 14 MB).
    """
    start = b'{"key":'
    try:
        with open(path(session.files, name), "rb") as fh:
            data = fh.read(KEY_BYTES)
            if not data.startswith(start):
                return None
            try:  # a key longer than the bytes read (or cut inside a character) is read again from all
                key, _end = json.JSONDecoder().raw_decode(data[len(start):].decode("utf-8", "ignore"))
            except ValueError:
                data += fh.read()
                key, _end = json.JSONDecoder().raw_decode(data[len(start):].decode())
            if not accept(key):
                return None
            kept = json.loads(data + fh.read())
    except (OSError, ValueError):
        return None
    return _standing(kept, session.now) if isinstance(kept, dict) else None


def _standing(kept: dict, now: float) -> dict | None:
    """``kept`` while ``now`` is inside the span it was kept for (made, until), else None."""
    made, until = kept.get("made_at"), kept.get("until")
    if not isinstance(made, (int, float)) or not isinstance(until, (int, float)):
        return None
    return kept if made <= now < until else None


def keep(session: Session, key: list, until: float, head: dict, name: str = FILE) -> None:
    """Keep ``head`` (JSON-ready) in ``name`` for readers that find ``key`` as it is, until ``until``."""
    if until <= session.now:
        return
    data = {"key": key, "made_at": session.now, "until": until, **head}
    fsutil.write_cache(path(session.files, name), json.dumps(data, separators=(",", ":")).encode("utf-8"))


# -- a cycle with nothing to do ------------------------------------------------------------------


def cycle_summary(view: Survey, assessment: Assessment) -> dict:
    """What a dispatch cycle would report of this survey and admission, and whether it had anything to do.

    ``tidy``: nothing for the cycle to write before it plans (no stale or
    duplicate context to close, no missing item to mark or unmark).
    """
    plan = assessment.admission
    why: dict[str, int] = {}
    for reasons in plan.held.values():
        for code in dict.fromkeys(r.code for r in reasons):
            why[code] = why.get(code, 0) + 1
    if view.backing_off:
        why[rules.BACKOFF] = len(view.backing_off)
    return {"planned": len(plan.to_dispatch), "ready": len(view.ready), "backing_off": len(view.backing_off),
            "skipped": plan.skipped, "why": why, "reason": plan.reason,
            "tidy": not (view.stale or view.held or view.duplicates or view.reappeared)}


def idle_cycle(session: Session) -> dict | None:
    """The kept :func:`cycle_summary` of this session's queue when it says a cycle now would launch
    and write nothing; else None.

    A daemon at its cap over a long queue ticks again and again over a
    queue nothing changed: such a tick need not survey it to learn that.
    Not when the budget holds work or was exhausted (the cycle notes when
    that changes), nor when the host guard is on (each cycle reads the
    machine afresh, and that reading may let work go).
    """
    from sluice.scheduler.gates import host_limits

    key = inputs(session)
    if key is None or host_limits(session.config).on:
        return None
    head = load(session, key)
    summary = head.get("cycle") if head is not None else None
    if not isinstance(summary, dict) or summary.get("planned") != 0 or summary.get("tidy") is not True:
        return None
    if not all(isinstance(summary.get(name), int) for name in ("ready", "backing_off", "skipped")):
        return None
    if not isinstance(summary.get("why"), dict):
        return None
    if rules.BUDGET in summary.get("why", {}) or admission_state.read(session.files,
                                                                       admission_state.BUDGET).get("exhausted"):
        return None
    return summary
