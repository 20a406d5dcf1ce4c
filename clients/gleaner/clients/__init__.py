"""Gleaner's clients of other systems: one Kubernetes client, one Prometheus client.

Contract. Every product component that talks to the Kubernetes API server or to Prometheus
does so through this package, and nothing else in the product opens such a connection
(kopf keeps its own connection for its watches, logged in with the credentials loaded
here):

- :mod:`gleaner.clients.kube`: where the API server is (:class:`~gleaner.clients.kube.Credentials`,
  the one kubeconfig / in-cluster loader), the async client
  (:class:`~gleaner.clients.kube.KubeClient`) and its thin synchronous face for threaded
  callers (:class:`~gleaner.clients.kube.SyncKubeClient`), and the URL paths of the
  resources Gleaner uses;
- :mod:`gleaner.clients.prometheus`: instant and range queries
  (:class:`~gleaner.clients.prometheus.PrometheusClient`).

The modules import their I/O libraries at import time; importing the package itself does
not, so ``import gleaner.clients`` stays cheap. Decision modules (perfmodel, scheduler,
agent policies) must not import this package (an import-linter contract).
"""
