"""sluice: a git-native scheduler for multi-agent coding workspaces."""

__version__ = "0.1.0"
