"""What top and the web feed watch: every source of the snapshot moves the signature, reading does not."""

from __future__ import annotations

from helpers.polecats import configure
from helpers.scheduler import item, write_items
from sluice.store.database import runs as runlog
from sluice.store.files.town import Town
from sluice.surfaces.watching import Pace, Sources


def test_every_source_of_the_snapshot_moves_the_signature_and_reading_does_not(cli, rig):
    write_items(cli.town, "alpha", [item("al-1", "first"), item("al-2", "second")])
    configure(cli.town, {"scheduler.max_polecats": "2"})
    sources = Sources(Town(cli.town))
    for command in (("scheduler", "list"), ("snapshot", "--json"), ("scheduler", "status")):
        cli.run(*command)  # the first reads keep their caches (index, digests, config copy)
    seen = sources.signature()
    for command in (("scheduler", "list"), ("snapshot", "--json"), ("item", "ready")):
        cli.run(*command)
        assert sources.signature() == seen, f"{command} read, and the views would survey again"
    changes = [
        ("sling", "al-1", "alpha"),  # the rig's ephemeral log
        ("scheduler", "pause"),  # the state file and the event log
        ("scheduler", "throttle", "--until", "10m"),  # an admission file
        ("config", "set", "scheduler.batch_size", "3"),  # the config
        ("item", "create", "alpha", "--title", "third"),  # the rig's items
    ]
    for command in changes:
        cli.run(*command)
        now = sources.signature()
        assert now != seen, f"{command} changed the town, and the views would not see it"
        seen = now
    run = {"run_id": "r-1", "item_id": "al-1", "rig": "alpha", "outcome": "running"}
    runlog.append(Town(cli.town), [run])
    assert sources.signature() != seen, "a run record was written, and the views would not see it"


def test_the_rest_after_a_snapshot_is_in_proportion_to_what_it_cost():
    pace = Pace()
    assert pace.ready(0.0)
    pace.took(10.0, 10.5)  # half a second: the next change waits two more
    assert not pace.ready(11.0) and not pace.ready(12.49) and pace.ready(12.5)
    pace.took(20.0, 20.01)  # a small town's snapshot: the next change shows at once
    assert pace.ready(20.06)
    pace.took(30.0, 40.0)  # a snapshot of ten seconds on a machine at its limit: never more than 15 s behind
    assert not pace.ready(54.9) and pace.ready(55.0)


def test_a_town_that_changes_all_the_time_is_not_snapshotted_back_to_back():
    import asyncio
    import itertools
    import time

    from sluice.surfaces.web.feed import Feed

    ticks = itertools.count()

    def slow_snapshot() -> dict:
        time.sleep(0.3)  # a long queue's snapshot after a change
        return {"n": next(ticks)}

    changing = itertools.count()  # every look at the files finds them changed

    async def listen(feed: Feed, seconds: float) -> None:
        assert feed.join()
        await asyncio.sleep(seconds)
        feed.leave()

    feed = Feed(slow_snapshot, lambda: next(changing), interval=1.0)
    asyncio.run(listen(feed, 3.0))
    # Back to back, a snapshot every 0.3 s plus a look every 0.25 s: six or more in 3 s. With a rest of
    # four times what each took, at most one every 1.5 s, whatever the machine's load adds to each.
    assert 1 <= next(ticks) <= 3  # the snapshots taken
