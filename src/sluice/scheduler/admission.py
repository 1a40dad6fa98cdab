"""Admission in the town: the survey and the runtime state fed to the pure rules, and ``explain``.

:func:`sluice.core.admission.admit` decides; this module gathers what it
decides on — the ranked ready contexts of one :func:`~sluice.scheduler.pending.survey`,
the running polecats with their items' rigs, labels and touches, the caps from
the config, the token spend in the budget window, the running throttles — and
turns the answer into what each surface shows:

* :func:`assess` — one survey, one admission: used by ``scheduler run`` (and
  its dry run), ``list``, ``status``, ``explain``, the daemon and MCP;
* :func:`why` — the reason codes of every queued item (``list --json``'s ``why``);
* :func:`explain` — everything about one item (``scheduler explain``);
* :func:`requeue_due` — the self-healing breaker: a circuit-broken item whose
  cooldown has passed is queued again for one attempt (half-open);
* :func:`settle_exits` — a polecat that exited with
  ``scheduler.throttle_exit_code`` throttles its rig and its item is queued
  again, without counting a dispatch failure.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sluice.core import admission as rules
from sluice.core.admission import Admission, Applicant, Limits, Reason, Running
from sluice.core.clock import iso
from sluice.core.items import labels_of
from sluice.core.records import SlingContextFields
from sluice.errors import SluiceError
from sluice.store import admission_state as kept
from sluice.store import contexts as ctxs
from sluice.store import events, fsutil
from sluice.store.rigstore import Stores
from sluice.store.state import load_state

if TYPE_CHECKING:
    from sluice.core.models import TownConfig
    from sluice.executors.base import Executor, Polecat
    from sluice.scheduler.pending import Survey
    from sluice.scheduler.ranking import Work
    from sluice.store.town import Town



def touches_of(item: Mapping) -> tuple[str, ...]:
    """``metadata.touches`` of an item: the globs (relative to its rig) it says it will edit."""
    meta = item.get("metadata")
    if isinstance(meta, str):
        import json

        try:
            meta = json.loads(meta)
        except ValueError:
            return ()
    if not isinstance(meta, Mapping):
        return ()
    touches = meta.get("touches")
    if isinstance(touches, str):
        touches = [touches]
    if not isinstance(touches, list):
        return ()
    return tuple(t for t in touches if isinstance(t, str) and t.strip())


def applicant(work: Work) -> Applicant:
    return Applicant(
        key=work.context_id or work.item["id"],
        item_id=work.item["id"],
        rig=work.rig,
        tokens=work.tokens or 0,
        labels=frozenset(labels_of(work.item)),
        touches=touches_of(work.item),
        payload=work,
    )


def running(stores: Stores, active: list[Polecat]) -> list[Running]:
    """The running polecats with their items' labels and touches (an item gone counts bare)."""
    from sluice.scheduler.pending import item_store

    out = []
    for polecat in active:
        found = item_store(stores, polecat.item_id) if polecat.item_id else None
        record = found[1] if found else {}
        out.append(
            Running(
                item_id=polecat.item_id,
                rig=polecat.rig,
                labels=frozenset(labels_of(record)),
                touches=touches_of(record),
            )
        )
    return out


def limits(config: TownConfig, active: int, batch: int) -> Limits:
    sched = config.scheduler
    return Limits(
        capacity=max(0, sched.max_polecats - active),
        batch=batch,
        rig_caps={name: rig.max_polecats for name, rig in config.rigs.items() if rig.max_polecats},
        label_caps=dict(sched.label_caps),
        town_budget=sched.token_budget,
        rig_budgets={name: rig.token_budget for name, rig in config.rigs.items() if rig.token_budget},
    )


def needs_spend(config: TownConfig) -> bool:
    return config.scheduler.token_budget > 0 or any(r.token_budget for r in config.rigs.values())


@dataclass
class Assessment:
    """One survey and its admission: the answer every surface shows."""

    view: Survey
    admission: Admission
    limits: Limits
    spend: rules.Spend
    throttles: list[rules.Throttle]
    paused: bool
    deferred: bool
    now: float
    planned_keys: set[str] = field(default_factory=set)


def assess(
    town: Town, stores: Stores, view: Survey, active: list[Polecat], batch: int, now: float | None = None
) -> Assessment:
    """Admit the survey's ranked ready contexts under the town's caps, budgets and throttles."""
    now = time.time() if now is None else now
    config = town.config
    window = config.scheduler.seconds("budget_window")
    spend = kept.spend(town, now, window) if needs_spend(config) else rules.Spend()
    throttles = kept.throttles(town, now)
    caps = limits(config, len(active), batch)
    admission = rules.admit(
        [applicant(w) for w in view.ready],
        running(stores, active),
        caps,
        spend=spend,
        throttles=throttles,
        now=now,
    )
    out = Assessment(
        view, admission, caps, spend, throttles, load_state(town).paused, config.scheduler.deferred, now
    )
    out.planned_keys = {a.key for a in admission.to_dispatch}
    return out


def backoff_reason(work: Work, config: TownConfig) -> Reason:
    from sluice.scheduler.polecats import retry_due_at

    sched = config.scheduler
    fields = work.payload.fields
    at = retry_due_at(fields, sched.seconds("retry_base"), sched.seconds("retry_max"))
    return Reason(
        rules.BACKOFF,
        f"{fields.dispatch_failures} failed launch(es); next attempt at {at}"
        " (`scheduler run --ignore-backoff` tries now)",
    )


def reasons_of(
    assessment: Assessment, work: Work, where: str, config: TownConfig, blockers: list[str] | None = None
) -> list[Reason]:
    """Every reason a queued item (in survey list ``where``) would not be launched by the next cycle."""
    out: list[Reason] = []
    if assessment.paused:
        out.append(Reason(rules.PAUSED, "the scheduler is paused (`sluice scheduler resume`)"))
    if not assessment.deferred:
        out.append(
            Reason(
                rules.DIRECT_MODE,
                "scheduler.max_polecats <= 0: sling launches directly, queued contexts are not dispatched",
            )
        )
    if where == "blocked":
        detail = (
            "blocked by " + ", ".join(blockers) if blockers else "not ready (blocked, deferred or running)"
        )
        out.append(Reason(rules.BLOCKED, detail))
    elif where == "backoff":
        out.append(backoff_reason(work, config))
    elif assessment.deferred:  # in direct mode no cycle admits anything: the caps say nothing
        out.extend(assessment.admission.held.get(work.context_id or work.item["id"], ()))
    return out


def why(assessment: Assessment, config: TownConfig) -> dict[str, list[str]]:
    """Reason codes of every queued item by context id (empty: the next cycle launches it)."""
    out = {}
    for where, works in (
        ("ready", assessment.view.ready),
        ("backoff", assessment.view.backing_off),
        ("blocked", assessment.view.blocked),
    ):
        for w in works:
            out[w.context_id] = list(dict.fromkeys(r.code for r in reasons_of(assessment, w, where, config)))
    return out


def note_budget(town: Town, assessment: Assessment) -> bool:
    """After a real cycle: log ``BudgetExhausted`` when the budget starts holding work (once per spell)."""
    held = any(r.code == rules.BUDGET for reasons in assessment.admission.held.values() for r in reasons)
    if not held and not kept.read(town, kept.BUDGET).get("exhausted"):
        return False

    def change(data: dict) -> bool:
        was = bool(data.get("exhausted"))
        data["exhausted"] = held
        return held and not was

    started = kept.update(town, kept.BUDGET, change)
    if started:  # what is spent now, this cycle's launches included
        spend = kept.spend(town, time.time(), town.config.scheduler.seconds("budget_window"))
        events.emit_event(town, events.BUDGET_EXHAUSTED, {"spent": spend.town, "rigs": dict(spend.rigs)})
    return started


# -- explain ----------------------------------------------------------------------------------


def explain(town: Town, item_id: str, executor: Executor | None = None, now: float | None = None) -> dict:
    """Would the next cycle launch ``item_id``, and every reason it would not (``scheduler explain``)."""
    from sluice.scheduler.control import queue_view
    from sluice.scheduler.pending import item_store

    now = time.time() if now is None else now
    config, view, active, assessment = queue_view(town, executor, now=now)
    stores = Stores(town)
    out: dict[str, Any] = {
        "item_id": item_id,
        "queued": False,
        "context_id": None,
        "would_dispatch": False,
        "score": None,
        "reasons": [],
    }
    reasons: list[Reason] = []
    found = item_store(stores, item_id)
    for where, works in (("ready", view.ready), ("backoff", view.backing_off), ("blocked", view.blocked)):
        for w in works:
            if w.item["id"] != item_id:
                continue
            out.update(queued=True, context_id=w.context_id, score=w.score)
            blockers = _blockers(found, item_id, active) if where == "blocked" else None
            reasons = reasons_of(assessment, w, where, config, blockers)
            out["would_dispatch"] = not reasons and w.context_id in assessment.planned_keys
            break
        if out["queued"]:
            break
    if not out["queued"]:
        for held in view.held:  # its item is missing now; the context closes after missing_grace
            if held.context.work_id == item_id:
                out.update(queued=True, context_id=held.context.id)
                closes = f", its context closes at {rules.stamp(held.closes_at)}" if held.closes_at else ""
                reasons.append(Reason(rules.MISSING_ITEM, f"no rig has item {item_id} right now{closes}"))
                break
    if not out["queued"]:
        for stale in view.stale:
            if stale.context.work_id == item_id:
                out.update(queued=True, context_id=stale.context.id)
                code = {
                    ctxs.CIRCUIT_BROKEN: rules.CIRCUIT_BROKEN,
                    ctxs.INVALID_WORK_ITEM: rules.MISSING_ITEM,
                }.get(stale.reason, rules.NOT_QUEUED)
                reasons.append(
                    Reason(code, f"the next cycle closes its context ({stale.reason}: {stale.detail})")
                )
                break
    if not out["queued"]:
        entry = kept.broken(town).get(item_id)
        if entry is not None:
            nxt = entry.get("next_attempt_at") or "never (scheduler.breaker_cooldown is 0;"
            nxt += ")" if entry.get("next_attempt_at") is None else ""
            reasons.append(
                Reason(
                    rules.CIRCUIT_BROKEN,
                    f"{entry.get('failures')} failed launches, last: {entry.get('last_error')};"
                    f" next attempt {nxt} (`sluice scheduler reset {item_id}` queues one now)",
                )
            )
        elif found is None:
            reasons.append(Reason(rules.MISSING_ITEM, f"no rig has an item {item_id}"))
        else:
            polecat = next((p for p in active if p.item_id == item_id), None)
            detail = (
                f"a polecat ({polecat.id}) is running it"
                if polecat
                else f"no open sling context (`sluice sling {item_id} RIG` queues it)"
            )
            reasons.append(Reason(rules.NOT_QUEUED, detail))
    out["reasons"] = [r.to_json() for r in reasons]
    return out


def _blockers(found, item_id: str, active: list[Polecat]) -> list[str]:
    """What blocks a queued item: its running polecat, else its rig's blocking causes."""
    polecat = next((p for p in active if p.item_id == item_id), None)
    if polecat is not None:
        return [f"its running polecat {polecat.id}"]
    if found is None:
        return []
    for record, causes in found[0].blocked():
        if record and record.get("id") == item_id:
            return list(causes)
    return []


# -- the self-healing breaker -----------------------------------------------------------------


def sling_params(fields: SlingContextFields) -> dict:
    """The parameters a re-queued item is slung with again (everything but the failure record)."""
    keep = ("formula", "args", "vars", "agent", "force")
    return {k: getattr(fields, k) for k in keep if getattr(fields, k)}


def trip_breaker(town: Town, fields: SlingContextFields, error: str, now: float | None = None) -> dict:
    """Book that ``fields``' item was circuit-broken, so a cooldown can bring it back."""
    now = time.time() if now is None else now
    base = town.config.scheduler.seconds("breaker_cooldown")
    return kept.trip(
        town,
        item_id=fields.work_bead_id,
        rig=fields.target_rig,
        failures=fields.dispatch_failures,
        last_error=error or fields.last_failure,
        sling=sling_params(fields),
        base=base,
        now=now,
    )


def queue_again(
    town: Town, stores: Stores, item_id: str, rig: str, params: dict, failures: int, now: float | None = None
) -> dict | None:
    """A new open context for ``item_id`` with ``params``; None if one is open already (idempotent).

    The check and the create happen under the town's sling lock, as a sling's
    do, so a sling of the same item meanwhile cannot add a second open context.
    """
    from sluice.scheduler.pending import item_store
    from sluice.scheduler.sling import SLING_LOCK, SLING_LOCK_WAIT

    with fsutil.file_lock(town.lock_path(SLING_LOCK), timeout=SLING_LOCK_WAIT):
        if ctxs.find_open(stores, item_id):
            return None
        found = item_store(stores, item_id)
        if found is None or rig not in {r.name for r in town.rigs()}:
            return None
        stamp = iso()
        fields = SlingContextFields(
            work_bead_id=item_id, target_rig=rig, enqueued_at=stamp, dispatch_failures=failures, **params
        )
        [record] = ctxs.create(stores.rig(rig), [(found[1], fields, stamp)])
    return record


def requeue_due(town: Town, stores: Stores, now: float | None = None) -> list[dict]:
    """Queue every broken item whose cooldown has passed for one attempt (half-open)."""
    now = time.time() if now is None else now
    out = []
    one_more = max(town.config.scheduler.max_dispatch_failures - 1, 0)
    for entry in kept.due(town, now):
        record = queue_again(town, stores, entry["item_id"], entry["rig"], entry.get("sling", {}), one_more)
        kept.mark_half_open(town, entry["item_id"])
        if record is not None:
            payload = {
                "item_id": entry["item_id"],
                "rig": entry["rig"],
                "context_id": record["id"],
                "why": "breaker-cooldown",
                "trips": entry.get("trips"),
            }
            events.emit_event(town, events.REQUEUED, payload)
            out.append(payload)
    return out


def reset(town: Town, item_id: str) -> dict:
    """``scheduler reset ITEM``: forget the breaker record and queue the item now with a fresh count."""
    from sluice.errors import InvalidOperation

    town.reload_config()
    stores = Stores(town)
    entry = kept.broken(town).get(item_id)
    if entry is None:
        raise InvalidOperation(f"{item_id} is not circuit-broken (see `sluice scheduler broken`)")
    record = queue_again(town, stores, item_id, entry["rig"], entry.get("sling", {}), 0)
    kept.heal(town, item_id)
    if record:
        context_id = record["id"]
    else:
        already = ctxs.find_open(stores, item_id)
        context_id = already[0].id if already else None
    events.emit_event(
        town, events.REQUEUED,
        {"item_id": item_id, "rig": entry["rig"], "context_id": context_id, "why": "reset"},
    )
    return {"item_id": item_id, "rig": entry["rig"], "context_id": context_id, "reset": True}


def broken_rows(town: Town) -> list[dict]:
    """``scheduler broken``: every circuit-broken item, when it is tried next (None: never by itself)."""
    town.reload_config()
    rows = []
    for entry in sorted(kept.broken(town).values(), key=lambda e: (e.get("broken_at", ""), e["item_id"])):
        rows.append(
            {
                "item_id": entry["item_id"],
                "rig": entry.get("rig"),
                "failures": entry.get("failures"),
                "last_error": entry.get("last_error"),
                "broken_at": entry.get("broken_at"),
                "trips": entry.get("trips"),
                "next_attempt_at": entry.get("next_attempt_at"),
                "half_open": bool(entry.get("half_open")),
            }
        )
    return rows


# -- throttles --------------------------------------------------------------------------------


def throttle(
    town: Town,
    until: str | None = None,
    rig: str | None = None,
    reason: str = "",
    clear: bool = False,
    now: float | None = None,
) -> dict:
    """``scheduler throttle``: hold new launches (of one rig or the town) until a time, or lift it."""
    from sluice.errors import UsageError
    from sluice.store.state import detect_actor

    config = town.reload_config()
    now = time.time() if now is None else now
    if rig is not None and rig not in config.rigs:
        raise UsageError(f"unknown rig {rig!r} (see `sluice rig list`)")
    if clear:
        if until is not None:
            raise UsageError("clear and until do not go together", parameters=("clear", "until"))
        cleared = kept.clear_throttle(town, rig, now)
        if cleared:
            events.emit_event(town, events.THROTTLE_CLEARED, {"rig": rig})
        return {"rig": rig, "cleared": cleared, "throttles": kept.throttle_rows(town, now)}
    if not until:
        raise UsageError("give until TIME|DURATION (e.g. 10m, 2026-12-01T09:00:00Z) or clear",
                         parameters=("until", "clear"))
    end = parse_until(until, now)
    entry = kept.set_throttle(town, end, rig, reason, detect_actor(), now)
    payload = {"rig": rig, "until": entry["until"], "reason": entry["reason"]}
    events.emit_event(town, events.THROTTLED, payload)
    return {
        "rig": rig,
        "until": entry["until"],
        "reason": entry["reason"],
        "by": entry["by"],
        "throttles": kept.throttle_rows(town, now),
    }


def parse_until(text: str, now: float) -> float:
    """``10m`` (a duration from now) or an ISO time; a time in the past is refused."""
    from sluice.core.clock import parse_duration
    from sluice.core.items import parse_ts
    from sluice.errors import UsageError

    try:
        end = now + parse_duration(text)
    except ValueError:
        stamp = parse_ts(text)
        if stamp is None:
            raise UsageError(f"until {text!r} is neither a duration (10m, 1h30m) nor an ISO time",
                             parameters=("until",)) from None
        end = stamp
    if end <= now:
        raise UsageError(f"until {text!r} is not in the future", parameters=("until",))
    return end


def settle_exits(town: Town, stores: Stores, polecats: list[Polecat], now: float | None = None) -> list[dict]:
    """Polecats that exited with ``scheduler.throttle_exit_code``: throttle the rig, queue the item again.

    The re-queue is not a dispatch failure (the polecat ran; the provider said
    "later").  Each polecat is settled once: its id is remembered with the
    throttle it caused.
    """
    now = time.time() if now is None else now
    sched = town.config.scheduler
    code = sched.throttle_exit_code
    out = []
    candidates = [
        p for p in polecats if p.state not in ("running", "pending") and p.detail.get("exit_code") == code
    ]
    if not candidates:
        return out
    settled = set(kept.read(town, kept.THROTTLES).get("settled", []))
    for polecat in candidates:
        if polecat.id in settled:
            continue
        until = now + sched.seconds("throttle_for")
        reason = f"polecat {polecat.id} exited with {code}"
        kept.set_throttle(town, until, polecat.rig, reason, "sluice", now)
        _remember_settled(town, polecat.id)
        params = _params_of_polecat(stores, polecat)
        record = queue_again(town, stores, polecat.item_id, polecat.rig, params, 0)
        payload = {
            "item_id": polecat.item_id,
            "rig": polecat.rig,
            "polecat_id": polecat.id,
            "until": kept.utc(until),
            "context_id": record["id"] if record else None,
        }
        events.emit_event(town, events.THROTTLED, payload)
        out.append(payload)
    return out


def _remember_settled(town: Town, polecat_id: str) -> None:
    def change(data: dict) -> None:
        settled = data.setdefault("settled", [])
        settled.append(polecat_id)
        del settled[:-1000]  # only recent polecats can still be met unsettled

    kept.update(town, kept.THROTTLES, change)


def _params_of_polecat(stores: Stores, polecat: Polecat) -> dict:
    """The sling parameters of the context that launched ``polecat`` (same parameters again)."""
    if not polecat.context_id:
        return {}
    try:
        store = stores.rig(polecat.rig)
    except SluiceError:  # a removed rig: queue with defaults
        return {}
    record = ctxs.read_fresh(store).get(polecat.context_id)
    fields = SlingContextFields.from_description(record.get("description")) if record else None
    return sling_params(fields) if fields is not None else {}


# -- reported usage -----------------------------------------------------------------------------


def report_usage(town: Town, ref: str, tokens: int, executor: Executor | None = None) -> dict:
    """``polecat usage ITEM|ID --tokens N``: replace the launch's estimate with what was really used."""
    from sluice.errors import UnknownPolecat, UsageError
    from sluice.executors import get_executor
    from sluice.scheduler.polecats import resolve

    town.reload_config()
    if tokens < 0:
        raise UsageError(f"tokens must be >= 0 (got {tokens})", parameters=("tokens",))
    try:
        polecat_id = resolve(executor or get_executor(town), ref)[0].id
    except UnknownPolecat:  # reaped already: the budget ledger still knows its launch
        polecat_id = None
    entry = kept.report_usage(town, polecat_id or ref, tokens, item_id=None if polecat_id else ref)
    if entry is None and polecat_id is None:
        raise UnknownPolecat(f"no polecat with id or item id {ref!r} (see `sluice polecat list`)")
    return {
        "polecat_id": entry["polecat_id"] if entry else polecat_id,
        "item_id": entry["item_id"] if entry else None,
        "tokens": tokens,
        "counted": entry is not None,
    }
