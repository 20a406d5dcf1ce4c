"""Runtime agent: per-node compute gate, memory reservation and accounting."""
