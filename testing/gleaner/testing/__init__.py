"""Reusable test harnesses: real services on loopback (Kubernetes emulator, Prometheus)."""
