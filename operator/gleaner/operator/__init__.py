"""Operator: the kopf controller that binds OfflineJobs and watches their SLAs (I/O shell)."""
