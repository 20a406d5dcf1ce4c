"""kopf peering: replicas get distinct priorities, so exactly one of them is active.

kopf pauses a replica while a live peer has a higher priority and pauses *every* replica
when two share a priority. The Helm chart runs two replicas, so equal default priorities
would leave the cluster unserved.
"""

from __future__ import annotations

import kopf

from gleaner.operator.config import MAX_PEERING_PRIORITY, OperatorConfig, default_peering_priority
from gleaner.operator.main import configure_settings


def test_default_priorities_are_in_range_and_do_not_tie() -> None:
    drawn = [default_peering_priority() for _ in range(200)]
    assert all(1 <= p <= MAX_PEERING_PRIORITY for p in drawn)
    assert len(set(drawn)) == len(drawn)
    assert OperatorConfig().peering_priority != OperatorConfig().peering_priority


def test_settings_carry_the_configured_priority() -> None:
    settings = kopf.OperatorSettings()
    configure_settings(settings, OperatorConfig(peering="gleaner", peering_priority=1234))
    assert settings.peering.priority == 1234
    assert settings.peering.name == "gleaner" and settings.peering.mandatory
    assert not settings.peering.standalone


def test_standalone_runs_without_peering() -> None:
    settings = kopf.OperatorSettings()
    configure_settings(settings, OperatorConfig(peering=None))
    assert settings.peering.standalone
