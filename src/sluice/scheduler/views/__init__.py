"""Views of the town: the snapshot, the feed, the forecast, advice and merge queues."""
