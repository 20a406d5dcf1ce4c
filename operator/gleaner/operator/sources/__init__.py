"""Trace sources that do I/O (the pure ones live in ``gleaner.perfmodel.sources``).

``prometheus.PrometheusTraceSource`` reads agent metrics, else DCGM exporter metrics,
through prometheus-api-client and yields ``gleaner.perfmodel.NodeSummary`` objects.
"""
