"""Simulator: trace-driven node and cluster simulation running the real policy code."""
