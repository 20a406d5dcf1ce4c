"""Risk-aware admission: the spread of past windows around the prediction sets the margin."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gleaner.perfmodel.admission import meet_probability, reaches_sla, risk_factor
from gleaner.scheduler.bias import BiasConfig, BiasTable

ratios = st.lists(st.floats(min_value=0.0, max_value=2.0), min_size=20, max_size=300)


def test_without_enough_windows_the_rule_is_the_mean_rule() -> None:
    assert risk_factor([0.5] * 19, 0.99, min_samples=20) == 1.0
    assert risk_factor([], 0.9, min_samples=1) == 1.0
    assert meet_probability(0.5, 0.4, []) is None
    with pytest.raises(ValueError, match="target"):
        risk_factor([1.0], 1.0)


def test_the_factor_is_a_low_quantile_of_the_residuals() -> None:
    residuals = [0.6] * 5 + [1.0] * 95
    assert risk_factor(residuals, 0.9, 20) == 1.0  # 5% of windows fell short: allowed
    assert risk_factor(residuals, 0.99, 20) == 0.6
    # A model that is pessimistic never raises a prediction.
    assert risk_factor([1.3] * 50, 0.99, 20) == 1.0


@given(ratios, st.sampled_from([0.8, 0.9, 0.95, 0.99]), st.floats(0.05, 1.0), st.floats(0.05, 1.0))
def test_admitted_sets_meet_the_sla_in_at_least_target_of_past_windows(
    residuals: list[float], target: float, product: float, sla: float
) -> None:
    factor = risk_factor(residuals, target, 20)
    if bool(reaches_sla(product * factor, sla)):
        p = meet_probability(product, sla, residuals)
        assert p is not None and p >= target - 1e-9


def test_the_table_learns_the_spread_per_node_and_persists_it() -> None:
    table = BiasTable(BiasConfig(risk_target=0.9, min_residuals=20))
    assert table.factor("n1") == 1.0
    rng = np.random.default_rng(0)
    for x in rng.uniform(0.6, 1.0, size=300):
        table.observe("n1", "", 0.5 * float(x), 0.5)
    mean_only = BiasTable.from_json(table.to_json())  # the default config: the mean rule
    assert mean_only.factor("n1") == pytest.approx(table.entry("n1").ratio)
    risky = table.factor("n1")
    assert risky < mean_only.factor("n1")
    # A node never observed is judged by the whole table's spread.
    assert 0 < table.factor("n2") < 1.0
    again = BiasTable.from_json(table.to_json(), table.config)
    assert again.factor("n1") == pytest.approx(risky, rel=1e-4)
    assert len(table.residuals("n1")) == table.config.residuals_kept
