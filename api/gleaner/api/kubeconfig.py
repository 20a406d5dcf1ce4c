"""Where every Gleaner process finds the API server: the in-cluster service account, else
the kubeconfig named by ``KUBECONFIG`` (else ``~/.kube/config``).

The ``kubernetes`` package reads ``KUBECONFIG`` once, when it is first imported; these helpers
read it on every call, so a process (or a test) that sets it after that import is obeyed.
The package is imported lazily: importing this module costs nothing, and the models in
``gleaner.api`` stay free of client code.
"""

from __future__ import annotations

import os


def kubeconfig_path() -> str | None:
    """``KUBECONFIG`` as the environment has it now, else ``None`` (``~/.kube/config``)."""
    return os.environ.get("KUBECONFIG") or None


def load_cluster_config() -> bool:
    """Configure the ``kubernetes`` package's default client: in-cluster, else kubeconfig.

    Returns ``True`` in-cluster. Raises ``kubernetes.config.ConfigException`` (or ``OSError``)
    when neither is there.
    """
    import kubernetes

    try:
        kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
        return True
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config(config_file=kubeconfig_path())  # type: ignore[no-untyped-call]
        return False
