"""The read-only look into rig repositories."""
