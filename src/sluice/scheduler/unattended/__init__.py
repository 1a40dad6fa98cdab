"""What runs with nobody at the keyboard: the daemon and its ticks, notifications, the witness patrol."""
