"""What top and the web feed watch: every source of the snapshot moves the signature, reading does not."""

from __future__ import annotations

from helpers.polecats import configure
from helpers.scheduler import item, write_items
from sluice.store.town import Town
from sluice.surfaces.watching import Sources


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
