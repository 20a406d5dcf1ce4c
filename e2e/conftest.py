"""End-to-end scenarios: real processes (kmock API, agents, Prometheus, operator) on loopback."""
