"""The command lines the chart renders parse with the real ``gleaner`` CLI.

The Deployment's and DaemonSet's ``args`` are handed to the click commands of
``gleaner operator`` and ``gleaner agent`` (parsing only, nothing runs), for default values
and for every option the chart can add. While a subcommand is still the placeholder that
accepts anything, its test is skipped: there is nothing to check the arguments against.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import click
import pytest

Manifest = dict[str, Any]
Render = Callable[..., list[Manifest]]

OPERATOR_VALUES = [
    {},
    {
        "operator": {
            "watchNamespace": "ml-batch",
            "prometheusUrl": "http://prometheus.monitoring:9090",
            "httpPort": 9000,
        }
    },
    {"operator": {"peering": {"enabled": False}, "replicaCount": 1, "extraArgs": ["--verbose"]}},
    {
        "operator": {
            "profilingPool": {
                "nodeSelector": {"gleaner.dev/pool": "profiling", "zone": "a"},
                "tolerations": [{"key": "profiling", "operator": "Exists", "effect": "NoSchedule"}],
            }
        }
    },
]
AGENT_VALUES = [
    {},
    {"agent": {"backend": "simulated", "metricsPort": 9500, "reportInterval": "30s"}},
    {"agent": {"podResources": {"enabled": False}}},
    {"agent": {"nativeGateLoop": True, "uninstrumented": {"allow": True}}},
]


def real_command(module: str) -> click.Command:
    command = importlib.import_module(module).command
    assert isinstance(command, click.Command)
    if not any(isinstance(p, click.Option) for p in command.params):
        pytest.skip(f"{module} is still a placeholder")
    return command


def args_of(manifests: list[Manifest], kind: str) -> list[str]:
    workload = next(m for m in manifests if m["kind"] == kind)
    args: list[str] = workload["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


@pytest.mark.parametrize("values", OPERATOR_VALUES)
def test_operator_arguments_parse(render: Render, values: dict[str, Any]) -> None:
    command = real_command("gleaner.cli.operator")
    args = args_of(render(values), "Deployment")
    assert args[0] == "operator"
    with command.make_context("gleaner operator", args[1:], resilient_parsing=False) as ctx:
        assert ctx.params


SCHEDULING_OPTIONS = {
    "risk_target": ("scheduling", "riskTarget"),
    "planned_exit": ("scheduling", "plannedExit"),
    "record_delay": ("scheduling", "recordDelay"),
    "move_check_interval": ("scheduling", "moves", "checkInterval"),
    "move_min_stay": ("scheduling", "moves", "minStay"),
    "move_horizon": ("scheduling", "moves", "horizon"),
    "sla_violations": ("sla", "violations"),
    "sla_grace": ("sla", "grace"),
    "eviction_backoff": ("sla", "evictionBackoff"),
    "eviction_backoff_max": ("sla", "evictionBackoffMax"),
}
"""``gleaner operator`` parameter -> its key under ``operator`` in values.yaml."""


def test_the_chart_defaults_are_the_operators_defaults(render: Render) -> None:
    command = real_command("gleaner.cli.operator")
    defaults = {p.name: p.default for p in command.params if isinstance(p, click.Option)}
    args = args_of(render({}), "Deployment")
    with command.make_context("gleaner operator", args[1:], resilient_parsing=False) as ctx:
        for name in SCHEDULING_OPTIONS:
            assert ctx.params[name] == defaults[name], name


def test_the_scheduling_and_sla_values_become_the_options(render: Render) -> None:
    command = real_command("gleaner.cli.operator")
    chosen: dict[str, Any] = {
        "risk_target": "off",
        "planned_exit": False,
        "record_delay": "30s",
        "move_check_interval": "0",
        "move_min_stay": "2h",
        "move_horizon": "90m",
        "sla_violations": "2/4",
        "sla_grace": "10m",
        "eviction_backoff": "1m",
        "eviction_backoff_max": "2h",
    }
    values: dict[str, Any] = {}
    for name, path in SCHEDULING_OPTIONS.items():
        at = values.setdefault("operator", {})
        for key in path[:-1]:
            at = at.setdefault(key, {})
        at[path[-1]] = chosen[name]
    args = args_of(render(values), "Deployment")
    with command.make_context("gleaner operator", args[1:], resilient_parsing=False) as ctx:
        assert {name: ctx.params[name] for name in SCHEDULING_OPTIONS} == chosen


@pytest.mark.parametrize("values", AGENT_VALUES)
def test_agent_arguments_parse(render: Render, values: dict[str, Any]) -> None:
    command = real_command("gleaner.cli.agent")
    args = args_of(render(values), "DaemonSet")
    assert args[0] == "agent"
    with command.make_context("gleaner agent", args[1:], resilient_parsing=False) as ctx:
        assert ctx.params


@pytest.mark.parametrize("on", [False, True])
def test_agent_native_gate_loop_value_becomes_the_option(render: Render, on: bool) -> None:
    command = real_command("gleaner.cli.agent")
    args = args_of(render({"agent": {"nativeGateLoop": on}}), "DaemonSet")
    with command.make_context("gleaner agent", args[1:], resilient_parsing=False) as ctx:
        assert ctx.params["native_gate_loop"] is on


def test_the_profiling_pool_values_become_the_operators_pool(render: Render) -> None:
    from gleaner.cli.operator import _profiling_pool
    from gleaner.operator.config import ProfilingPool

    command = real_command("gleaner.cli.operator")
    toleration = {"key": "profiling", "operator": "Equal", "value": "yes", "effect": "NoExecute"}
    values = {
        "operator": {
            "profilingPool": {
                "nodeSelector": {"gleaner.dev/pool": "profiling"},
                "tolerations": [toleration],
            }
        }
    }
    args = args_of(render(values), "Deployment")
    with command.make_context("gleaner operator", args[1:], resilient_parsing=False) as ctx:
        pool = _profiling_pool(
            ctx.params["profiling_node_selector"], ctx.params["profiling_tolerations"]
        )
    assert pool == ProfilingPool({"gleaner.dev/pool": "profiling"}, (toleration,))
    # Without the values, no pool: profiling runs share GPUs.
    args = args_of(render({}), "Deployment")
    assert not any(a.startswith("--profiling") for a in args)


def _containers(manifests: list[Manifest]) -> dict[str, Manifest]:
    daemonset = next(m for m in manifests if m["kind"] == "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    return {c["name"]: c for c in pod["containers"]} | {
        f"volume:{v['name']}": v for v in pod["volumes"]
    }


@pytest.mark.parametrize("microseconds", [0, 20])
def test_the_cpu_wakeup_latency_sidecar_holds_the_value_given(
    render: Render, microseconds: int
) -> None:
    command = real_command("gleaner.cli.cpulatency")
    values = {"agent": {"cpuWakeupLatency": {"enabled": True, "microseconds": microseconds}}}
    found = _containers(render(values))
    sidecar = found["cpu-latency"]
    assert sidecar["args"][0] == "cpu-latency"
    with command.make_context("gleaner cpu-latency", sidecar["args"][1:]) as ctx:
        assert ctx.params["max_wakeup_us"] == microseconds
        device = ctx.params["device"]
    # The device the command opens is the one mounted from the node; only the sidecar is
    # privileged, the agent is not.
    assert [m["mountPath"] for m in sidecar["volumeMounts"]] == [str(device)]
    assert found["volume:cpu-dma-latency"]["hostPath"] == {
        "path": str(device),
        "type": "CharDevice",
    }
    assert sidecar["securityContext"]["privileged"] is True
    assert found["agent"]["securityContext"]["privileged"] is False


def test_no_sidecar_and_no_device_unless_asked(render: Render) -> None:
    found = _containers(render({}))
    assert "cpu-latency" not in found
    assert "volume:cpu-dma-latency" not in found
