"""kopf settings from the operator's config: what a real API server accepts."""

from __future__ import annotations

import kopf
import pytest

from gleaner.api.contract import FINALIZER
from gleaner.operator.config import OperatorConfig
from gleaner.operator.main import NoDiffBase, changing_handlers, configure_settings, register


@pytest.mark.parametrize(("configured", "sent"), [(300.0, 300), (60.5, 60), (0.2, 1)])
def test_watch_timeout_goes_to_the_server_as_whole_seconds(configured: float, sent: int) -> None:
    # kube-apiserver parses timeoutSeconds with ParseInt: "300.0" gets the watch refused (400).
    settings = kopf.OperatorSettings()
    configure_settings(settings, OperatorConfig(watch_timeout=configured))
    assert settings.watching.server_timeout == sent
    assert isinstance(settings.watching.server_timeout, int)


def test_kopf_awaits_its_own_patch_longer_than_its_default() -> None:
    # With kopf's 5 s, a loaded API server made kopf run the creation handler twice per job.
    settings = kopf.OperatorSettings()
    default = settings.persistence.consistency_timeout
    configure_settings(settings, OperatorConfig())
    assert settings.persistence.consistency_timeout == 30.0 > default


def test_kopf_never_manages_the_operators_own_finalizer() -> None:
    # kopf removes its finalizer name from every object no kopf handler needs it on: were it
    # the operator's, kopf would strip it from every job and deletion would not wait for Pods.
    settings = kopf.OperatorSettings()
    configure_settings(settings, OperatorConfig())
    assert settings.persistence.finalizer != FINALIZER


def test_kopf_keeps_no_diff_base_because_no_handler_reads_one() -> None:
    # kopf deep-copies every object on every event to build a diff-base; only on.create /
    # on.update / on.delete / on.resume handlers and daemons read it. A registration of one
    # of those would need kopf's annotation storage back.
    settings = kopf.OperatorSettings()
    configure_settings(settings, OperatorConfig())
    assert isinstance(settings.persistence.diffbase_storage, NoDiffBase)
    assert changing_handlers(register(OperatorConfig())) == 0
    registry = kopf.OperatorRegistry()

    @kopf.on.update("gleaner.dev", "v1alpha1", "offlinejobs", registry=registry)
    def updated(**_: object) -> None: ...

    assert changing_handlers(registry) == 1
