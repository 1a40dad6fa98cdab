"""Admission's state in the town database: budget charges, throttles and the breaker, each change one
transaction advancing the admission version, sums over an index, pruning by the writer, and the
migration of sluice 0.1's files."""

from __future__ import annotations

import json

import pytest

from sluice.errors import ConfigError
from sluice.store.database import admission_state as kept
from sluice.store.database.state import load_state, set_paused
from sluice.surfaces.watching import Sources

NOW = 1_800_000_000.0
HOUR = 3600.0


def version(town) -> int:
    return town.db.versions(kept.VERSION)[kept.VERSION]


def charge(town, at: float, tokens: int = 100, rig: str = "alpha", item_id: str = "al-1",
           polecat_id: str = "", window: float = HOUR) -> str:
    return kept.record_launch(town, rig=rig, item_id=item_id, context_id="c", polecat_id=polecat_id,
                              tokens=tokens, now=at, window=window)


def charge_times(town) -> list[float]:
    return [at for (at,) in town.db.query("SELECT at_ts FROM budget_charges ORDER BY at_ts")]


# -- the budget ------------------------------------------------------------------------------------


def test_spend_sums_the_window_town_wide_and_per_rig(town_files):
    charge(town_files, NOW - 2 * HOUR, 1000)  # left the window
    charge(town_files, NOW - HOUR / 2, 300, rig="alpha")
    charge(town_files, NOW - 60, 200, rig="beta")
    charge(town_files, NOW - 30, 50, rig="beta")
    spent = kept.spend(town_files, NOW, HOUR)
    assert (spent.town, dict(spent.rigs)) == (550, {"alpha": 300, "beta": 250})
    assert kept.spend(town_files, NOW + HOUR, HOUR).town == 0


def test_the_window_sums_read_an_index_not_every_charge(town_files):
    charge(town_files, NOW)
    plan = " ".join(row[-1] for row in town_files.db.query(
        "EXPLAIN QUERY PLAN SELECT rig, SUM(tokens) FROM budget_charges WHERE at_ts > ? AND at_ts <= ?"
        " GROUP BY rig", (NOW - HOUR, NOW + HOUR)))
    assert "USING COVERING INDEX budget_charges_at" in plan, plan


def test_a_charge_prunes_the_charges_no_window_counts_any_more(town_files):
    charge(town_files, NOW - HOUR + 1)
    charge(town_files, NOW - HOUR)  # exactly a window old at NOW: no window ending then or later counts it
    charge(town_files, NOW - 3 * HOUR)  # each writer prunes by its own moment: these keep the later ones
    assert len(charge_times(town_files)) == 3
    charge(town_files, NOW)
    assert charge_times(town_files) == [NOW - HOUR + 1, NOW]


def test_a_charge_named_moves_to_the_start_never_back(town_files):
    first = charge(town_files, NOW)
    kept.name_charge(town_files, first, "pc-1", NOW + 5)
    kept.name_charge(town_files, first, "pc-1", NOW + 1)  # an earlier start never moves it back
    [entry] = kept.charges(town_files, NOW, HOUR)
    assert (entry["polecat_id"], entry["at_ts"], entry["charge"]) == ("pc-1", NOW + 5, first)
    assert entry["at"] == kept.utc(NOW + 5)


def test_reported_usage_replaces_the_newest_matching_estimate(town_files):
    charge(town_files, NOW - 20, 1000, item_id="al-1", polecat_id="pc-old")
    charge(town_files, NOW - 10, 1000, item_id="al-1", polecat_id="pc-new")
    entry = kept.report_usage(town_files, "nobody", 70, item_id="al-1")  # by item: the newest launch
    assert (entry["polecat_id"], entry["tokens"], entry["reported"]) == ("pc-new", 70, True)
    assert kept.report_usage(town_files, "pc-old", 30)["tokens"] == 30
    assert kept.spend(town_files, NOW, HOUR).town == 100
    before = version(town_files)
    assert kept.report_usage(town_files, "pc-gone", 5) is None
    assert version(town_files) == before  # nothing of the window was its launch: no write


def test_a_withdrawn_charge_is_gone(town_files):
    taken = charge(town_files, NOW, 400)
    kept.withdraw_charge(town_files, taken)
    assert kept.spend(town_files, NOW, HOUR).town == 0 and charge_times(town_files) == []


def test_the_budget_spell_is_noted_once_and_only_its_changes_write(town_files):
    assert not kept.exhausted(town_files)
    before = version(town_files)
    assert kept.note_exhausted(town_files, False) is False and version(town_files) == before
    assert kept.note_exhausted(town_files, True) is True  # a spell starts
    assert kept.note_exhausted(town_files, True) is False and kept.exhausted(town_files)
    assert kept.note_exhausted(town_files, False) is False and not kept.exhausted(town_files)


# -- throttles -------------------------------------------------------------------------------------


def test_a_throttle_holds_until_its_end_and_a_later_end_never_shortens(town_files):
    kept.set_throttle(town_files, NOW + 600, "alpha", "429", "ops", NOW)
    kept.set_throttle(town_files, NOW + 60, "alpha", "shorter", "ops", NOW)  # kept: the later end
    kept.set_throttle(town_files, NOW + 300, None, "deploy", "ops", NOW)
    assert [(t.rig, t.until, t.reason) for t in kept.throttles(town_files, NOW)] == [
        (None, NOW + 300, "deploy"), ("alpha", NOW + 600, "429")]
    assert kept.throttle_rows(town_files, NOW)[1] == {"rig": "alpha", "until": kept.utc(NOW + 600),
                                                      "reason": "429", "by": "ops", "at": kept.utc(NOW)}
    assert [t.rig for t in kept.throttles(town_files, NOW + 400)] == ["alpha"]
    assert kept.clear_throttle(town_files, "alpha", NOW) is True
    assert kept.clear_throttle(town_files, "alpha", NOW) is False
    assert [t.rig for t in kept.throttles(town_files, NOW)] == [None]


def test_a_throttles_writer_deletes_the_ended_ones(town_files):
    kept.set_throttle(town_files, NOW + 10, "alpha", "short", "ops", NOW)
    kept.set_throttle(town_files, NOW + 10, None, "short", "ops", NOW)
    kept.set_throttle(town_files, NOW + 600, "beta", "long", "ops", NOW + 20)
    assert [s for (s,) in town_files.db.query("SELECT scope FROM throttles")] == ["beta"]


def test_reasons_and_names_are_bound_never_spliced_into_the_sql(town_files):
    reason = "x'); DROP TABLE throttles; --"
    kept.set_throttle(town_files, NOW + 60, "al'pha", reason, "o'brien", NOW)
    [row] = kept.throttle_rows(town_files, NOW)
    assert (row["rig"], row["reason"], row["by"]) == ("al'pha", reason, "o'brien")


# -- the breaker -----------------------------------------------------------------------------------


def trip(town, item_id: str = "al-1", now: float = NOW, base: float = 60.0) -> dict:
    return kept.trip(town, item_id=item_id, rig="alpha", failures=3, last_error="boom",
                     sling={"formula": "f", "args": ["a"]}, base=base, now=now)


def test_each_trip_doubles_the_cooldown_and_due_items_come_back_once(town_files):
    first = trip(town_files)
    assert (first["trips"], first["cooldown"], first["next_attempt_ts"]) == (1, 60.0, NOW + 60)
    assert kept.due(town_files, NOW + 59) == []
    [due] = kept.due(town_files, NOW + 60)
    assert due["sling"] == {"formula": "f", "args": ["a"]} and due["half_open"] is False
    kept.mark_half_open(town_files, "al-1")
    assert kept.due(town_files, NOW + 60) == [] and kept.broken_entry(town_files, "al-1")["half_open"]
    second = trip(town_files, now=NOW + 100)
    assert (second["trips"], second["cooldown"], second["half_open"]) == (2, 120.0, False)
    assert kept.count_broken(town_files) == 1 and list(kept.broken(town_files)) == ["al-1"]


def test_a_zero_cooldown_latches(town_files):
    entry = trip(town_files, base=0)
    assert entry["next_attempt_at"] is None and kept.due(town_files, NOW + 10 * 365 * 86400) == []


def test_healing_forgets_the_item_and_the_common_case_writes_nothing(town_files):
    trip(town_files)
    before = version(town_files)
    assert kept.heal(town_files, "al-2") is None and version(town_files) == before
    assert kept.heal(town_files, "al-1")["item_id"] == "al-1"
    assert version(town_files) == before + 1 and kept.broken(town_files) == {}


# -- transactions and versions ---------------------------------------------------------------------


def test_every_change_advances_the_admission_version(town_files):
    seen = [version(town_files)]
    taken = charge(town_files, NOW)
    seen.append(version(town_files))
    for change in (lambda: kept.name_charge(town_files, taken, "pc", NOW + 1),
                   lambda: kept.report_usage(town_files, "pc", 10),
                   lambda: kept.withdraw_charge(town_files, taken),
                   lambda: kept.set_throttle(town_files, NOW + 60, None, "r", "b", NOW),
                   lambda: kept.clear_throttle(town_files, None, NOW),
                   lambda: trip(town_files),
                   lambda: kept.mark_half_open(town_files, "al-1"),
                   lambda: kept.heal(town_files, "al-1")):
        change()
        seen.append(version(town_files))
    assert seen == list(range(seen[0], seen[0] + len(seen)))


def test_two_writers_composed_in_one_transaction_commit_or_roll_back_together(town_files):
    """A launch's budget charge and the scheduler state, written by two modules in the caller's one
    transaction: an error after both leaves neither, and no version moved."""
    before = town_files.db.versions(kept.VERSION, "state")
    with pytest.raises(RuntimeError), town_files.db.transaction():
        charge(town_files, NOW, 500)
        set_paused(town_files, actor="ops")
        assert kept.spend(town_files, NOW, HOUR).town == 500  # the transaction sees its own writes
        raise RuntimeError("the launch intent could not be recorded")
    assert kept.spend(town_files, NOW, HOUR).town == 0 and not load_state(town_files).paused
    assert town_files.db.versions(kept.VERSION, "state") == before
    with town_files.db.transaction():
        charge(town_files, NOW, 500)
        set_paused(town_files, actor="ops")
    assert kept.spend(town_files, NOW, HOUR).town == 500 and load_state(town_files).paused


def test_a_change_the_views_cannot_see_in_any_file_still_moves_their_signature(town_files):
    """A throttle set or a trip booked by the library writes no file a view watches (no event): the
    database's admission version moves the signature instead."""
    sources = Sources(town_files)
    seen = sources.signature()
    for change in (lambda: kept.set_throttle(town_files, NOW + 60, None, "r", "b", NOW),
                   lambda: trip(town_files), lambda: charge(town_files, NOW)):
        change()
        now = sources.signature()
        assert now != seen
        seen = now


# -- a town made by sluice 0.1 ---------------------------------------------------------------------


def write_old(town, name: str, data) -> None:
    town.runtime.mkdir(parents=True, exist_ok=True)
    (town.runtime / f"{name}.json").write_text(data if isinstance(data, str) else json.dumps(data))


def migrate(town) -> list:
    with town.db.transaction() as conn:
        return kept.migrate_from_files(town, conn)


def test_migration_brings_charges_throttles_the_breaker_and_the_spell(town_files):
    write_old(town_files, "budget", {"exhausted": True, "launches": [
        {"charge": "aa11", "at": kept.utc(NOW - 60), "at_ts": NOW - 60, "rig": "alpha", "item_id": "al-1",
         "context_id": "al-wisp-1", "polecat_id": "pc-1", "tokens": 700, "reported": True},
        {"at": kept.utc(NOW - 30), "at_ts": NOW - 30, "rig": "beta", "item_id": "be-1", "context_id": "",
         "polecat_id": "", "tokens": 300, "reported": False},  # from before charges had ids
        {"at": "no time", "rig": "beta", "tokens": 5},  # 0.1 could not count it: left behind
    ]})
    write_old(town_files, "throttles", {"throttles": {
        "": {"rig": None, "until": kept.utc(NOW + 600), "until_ts": NOW + 600, "reason": "deploy",
             "by": "ops", "at": kept.utc(NOW), "at_ts": NOW},
        "alpha": {"rig": "alpha", "until_ts": NOW + 60, "reason": "429", "by": "sluice"},  # no at_ts
    }})
    write_old(town_files, "breaker", {"items": {"al-9": {
        "item_id": "al-9", "rig": "alpha", "failures": 3, "run_failures": 0, "broken_by": "launches",
        "last_error": "boom", "broken_at": kept.utc(NOW - 100), "trips": 2, "cooldown": 120.0,
        "next_attempt_at": kept.utc(NOW + 20), "next_attempt_ts": NOW + 20, "half_open": False,
        "sling": {"formula": "f"}}}})
    moved = migrate(town_files)
    assert sorted(p.name for p in moved) == ["breaker.json", "budget.json", "throttles.json"]
    assert all(p.exists() for p in moved)  # the caller moves them aside; nothing is deleted here
    spent = kept.spend(town_files, NOW, HOUR)
    assert (spent.town, dict(spent.rigs)) == (1000, {"alpha": 700, "beta": 300})
    assert kept.exhausted(town_files)
    assert kept.report_usage(town_files, "pc-1", 10)["charge"] == "aa11"
    assert [(t.rig, t.until) for t in kept.throttles(town_files, NOW)] == [(None, NOW + 600),
                                                                           ("alpha", NOW + 60)]
    [entry] = kept.due(town_files, NOW + 20)
    assert (entry["item_id"], entry["trips"], entry["sling"]) == ("al-9", 2, {"formula": "f"})
    assert trip(town_files, "al-9")["trips"] == 3  # the count goes on from the old file's


def test_migration_without_the_files_brings_nothing(town_files):
    assert migrate(town_files) == []
    assert kept.spend(town_files, NOW, HOUR).town == 0 and kept.broken(town_files) == {}


@pytest.mark.parametrize("name", ["budget", "throttles", "breaker"])
@pytest.mark.parametrize("text", ["{not json", "[]"])
def test_a_corrupt_old_file_is_an_error_naming_it_and_the_migration_changes_nothing(town_files, name, text):
    write_old(town_files, "budget", {"launches": [{"at_ts": NOW, "rig": "alpha", "tokens": 9}]})
    write_old(town_files, name, text)
    with pytest.raises(ConfigError, match=rf"{name}\.json"):
        migrate(town_files)
    assert kept.spend(town_files, NOW, HOUR).town == 0  # the transaction rolled back whole
