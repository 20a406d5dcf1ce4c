"""Agent policies: pure, typed state machines (no I/O)."""
