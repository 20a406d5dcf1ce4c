"""The operator's closed loop (pure): SLA samples -> bias table -> ConfigMap -> placements."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from gleaner.api import Placement
from gleaner.operator.bias import (
    BIAS_CONFIGMAP,
    BIAS_KEY,
    PERSISTED_RESIDUALS,
    PersistClock,
    document,
    feed,
    from_configmap,
    job_class,
    raw_prediction,
    to_configmap,
)
from gleaner.operator.config import DEFAULT_RISK_TARGET, OperatorConfig
from gleaner.operator.placement import plan_placements
from gleaner.operator.traces import FORECAST_HORIZON_S, summaries_from_nodetraces
from gleaner.perfmodel.admission import ADMISSION_HORIZON_H
from gleaner.scheduler import SchedulerConfig
from gleaner.scheduler.bias import BiasConfig, BiasTable
from gleaner.scheduler.lifecycle import DEFAULT_MOVE_HORIZON_H
from gleaner.simulator.cluster_scenario import ClusterScenario
from gleaner.testing.fixtures import make_placement, make_queued_job
from gleaner.testing.kube import nodetrace_manifest

NOW = datetime.now(UTC)


def _placement(node: str = "a", compute: float = 0.8, bias_corrected: float = 0.4) -> Placement:
    return make_placement(node, [0], compute=compute, fraction=bias_corrected, decided_at=NOW)


def test_the_feed_compares_with_the_raw_prediction_not_the_corrected_one() -> None:
    placement = _placement(compute=0.8, bias_corrected=0.4)
    assert raw_prediction(placement) == pytest.approx(0.8)
    table = BiasTable()
    assert feed(table, placement, "", 0.4)
    # One observation at half the raw prediction: ratio 1 -> 0.7 * 1 + 0.3 * 0.5.
    assert table.factor("a") == pytest.approx(0.85)
    # Against the corrected 0.4 it would have looked on target (ratio 1).
    other = BiasTable()
    other.observe("a", "", 0.4, placement.throughput_fraction)
    assert other.factor("a") == pytest.approx(1.0)


def test_an_under_delivering_node_converges_below_one_and_others_stay_at_one() -> None:
    table = BiasTable()
    for _ in range(10):
        feed(table, _placement("slow"), "summaries", 0.48)  # 60% of the 0.8 predicted
        feed(table, _placement("fine"), "summaries", 0.8)
    assert table.factor("slow") == pytest.approx(0.6, abs=0.02)
    assert table.factor("slow", "summaries") == pytest.approx(0.6, abs=0.02)
    assert table.factor("fine") == pytest.approx(1.0)
    assert table.factor("never-seen") == 1.0


def test_job_class_comes_from_the_label() -> None:
    assert job_class({"gleaner.dev/job-class": "eval"}) == "eval"
    assert job_class({}) == job_class(None) == ""


def test_the_table_survives_a_configmap_round_trip() -> None:
    config = BiasConfig(risk_target=0.9)
    table = BiasTable(config)
    for i in range(40):
        feed(table, _placement("a"), "eval", 0.5 + 0.005 * i)
        feed(table, _placement("b"), "", 0.79)
    body = to_configmap(table, "gleaner-system")
    assert body["metadata"] == {
        "name": BIAS_CONFIGMAP,
        "namespace": "gleaner-system",
        "labels": {"app.kubernetes.io/component": "operator"},
    }
    back = from_configmap(body, config)
    assert list(back) == list(table)
    for node, cls in (("a", "eval"), ("a", ""), ("b", ""), ("c", "")):
        assert back.factor(node, cls) == pytest.approx(table.factor(node, cls), abs=1e-5)


def test_no_configmap_is_an_empty_table_and_a_broken_one_is_an_error() -> None:
    assert len(from_configmap(None, BiasConfig())) == 0
    assert len(from_configmap({"data": {}}, BiasConfig())) == 0
    with pytest.raises(ValueError, match="malformed"):
        from_configmap({"data": {BIAS_KEY: "{not json"}}, BiasConfig())
    with pytest.raises(ValueError, match="malformed"):
        from_configmap({"data": {BIAS_KEY: '{"entries": [{"node": "a"}]}'}}, BiasConfig())


def test_the_stored_document_is_bounded() -> None:
    table = BiasTable(BiasConfig(residuals_kept=256))
    for i in range(300):
        feed(table, _placement(f"node-{i % 3}"), "", 0.7)
    data = json.loads(document(table))
    per_node = {n: v for n, v in data["residuals"].items() if n}
    assert per_node and all(len(v) == PERSISTED_RESIDUALS for v in per_node.values())
    assert len(data["residuals"][""]) == 256  # the table-wide pool is kept whole
    # Past the byte bound, per-node residuals go first; ratios and the pool stay.
    pool_only = {**data, "residuals": {"": data["residuals"][""]}}
    bound = len(json.dumps(pool_only, separators=(",", ":"), sort_keys=True)) + 10
    small = json.loads(document(table, max_bytes=bound))
    assert set(small["residuals"]) == {""}
    assert len(small["entries"]) == 3


def test_the_persist_clock_writes_on_change_at_most_once_per_interval() -> None:
    clock = PersistClock(interval=60.0)
    assert not clock.due(0.0)  # nothing changed
    clock.changed()
    assert clock.due(0.0)  # the first change is written at once
    clock.written(0.0)
    clock.changed()
    assert not clock.due(30.0)
    assert clock.due(30.0, final=True)  # at shutdown the interval is moot
    assert clock.due(60.0)
    clock.written(60.0)
    assert not clock.due(500.0)
    clock.changed()
    clock.failed(500.0)  # a failed write is retried one interval later, not at once
    assert not clock.due(530.0) and clock.due(560.0)


def test_a_learned_bias_moves_a_placement_and_is_the_one_explained() -> None:
    nodes = summaries_from_nodetraces(
        [
            nodetrace_manifest("gpu-x", gpus=1, offline_enabled=0.9),
            nodetrace_manifest("gpu-y", gpus=1, offline_enabled=0.8),
        ]
    )
    job = make_queued_job("j", sla=0.7)
    unbiased = plan_placements([job], nodes, {}, NOW)
    ((_, first),) = unbiased.placements  # whichever node the scores prefer
    other = "gpu-y" if first.node == "gpu-x" else "gpu-x"

    table = BiasTable()
    for _ in range(5):
        feed(table, first, "", 0.5 * raw_prediction(first))  # it delivers half the prediction
    assert raw_prediction(first) * table.factor(first.node) < 0.7

    plan = plan_placements([job], nodes, {}, NOW, bias=table)
    ((_, placement),) = plan.placements
    assert placement.node == other
    assert placement.throughput_fraction == pytest.approx(raw_prediction(placement))
    explanation = plan.explanations["default/j"]
    assert explanation.bias == pytest.approx(table.factor(other)) == pytest.approx(1.0)
    # The runner-up reasons judge the slow node with its learned bias.
    (why_not,) = [line for line in plan.runner_ups["default/j"] if first.node in line]
    assert f"bias {table.factor(first.node):.2f}" in why_not


def test_the_operator_admits_with_the_simulators_risk_target() -> None:
    assert ClusterScenario.model_fields["risk_target"].default == DEFAULT_RISK_TARGET
    assert OperatorConfig().bias.risk_target == DEFAULT_RISK_TARGET
    assert OperatorConfig(risk_target=None).bias.risk_target is None


def test_the_operator_admits_over_the_simulators_horizon() -> None:
    assert ClusterScenario.model_fields["forecast_horizon_h"].default == ADMISSION_HORIZON_H
    assert FORECAST_HORIZON_S == ADMISSION_HORIZON_H * 3600


def test_the_operator_moves_and_scores_by_the_simulators_defaults() -> None:
    from gleaner.api.units import parse_duration
    from gleaner.cli.operator import command

    (flag,) = [p for p in command.params if p.name == "move_horizon"]
    assert isinstance(flag.default, str)
    assert parse_duration(flag.default) == DEFAULT_MOVE_HORIZON_H * 3600
    assert OperatorConfig().move_horizon == DEFAULT_MOVE_HORIZON_H * 3600
    assert ClusterScenario.model_fields["move_horizon_h"].default == DEFAULT_MOVE_HORIZON_H
    assert ClusterScenario.model_fields["sla_margin"].default == SchedulerConfig().sla_margin
    (stay,) = [p for p in command.params if p.name == "move_min_stay"]
    assert isinstance(stay.default, str)
    assert parse_duration(stay.default) == OperatorConfig().move_min_stay
    assert ClusterScenario.model_fields["move_min_stay_s"].default == OperatorConfig().move_min_stay


def test_the_operator_exits_by_the_simulators_planned_exit() -> None:
    from gleaner.cli.operator import command

    scenario = ClusterScenario()
    assert scenario.planned_exit and OperatorConfig().planned_exit is not None
    assert scenario.planned_exit_rule() == OperatorConfig().planned_exit
    (flag,) = [p for p in command.params if p.name == "planned_exit"]
    assert flag.default is True
