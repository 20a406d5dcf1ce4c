"""Scheduler: SLA-guaranteed placement and SLA-monitor decisions (pure)."""
