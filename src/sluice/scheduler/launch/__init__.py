"""Launching queued work: admission, the dispatch cycle, sling, the launch path, polecats, runs, ends."""
