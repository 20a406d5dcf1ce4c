"""Performance model: predicted throughput of an offline job on harvested GPUs (pure)."""
