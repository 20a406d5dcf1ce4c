"""The hypothesis profile of tests/conftest.py reaches every property test.

Property tests set only what is their own (``max_examples``, health checks); that no example
has a deadline comes from the profile. A ``@settings(...)`` built in a test module inherits
the profile loaded when the module is imported, so these fail if the profile stops setting
it or is loaded after the test modules.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

OWN = settings(max_examples=3, suppress_health_check=[HealthCheck.too_slow])
"""Built at import, as a test module's ``@settings(...)`` is."""


def test_the_loaded_profile_has_no_deadline() -> None:
    assert settings.default is not None
    assert settings.default.deadline is None


def test_a_property_tests_own_settings_keep_the_profiles_deadline() -> None:
    assert OWN.max_examples == 3
    assert OWN.deadline is None
