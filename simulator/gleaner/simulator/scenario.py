"""Scenario files: what ``gleaner simulate`` runs, as YAML users can copy and edit.

Contract. A scenario is a YAML mapping validated by :class:`Scenario` (unknown keys are
refused with the field's path): a ``name``, a ``seed``, and optional ``node`` and ``cluster``
sections (``gleaner.simulator.node.NodeScenario`` and
``gleaner.simulator.cluster_scenario.ClusterScenario``; every field has a default, so
``node: {}`` is a valid section). Shipped scenarios live in ``gleaner/sim/scenarios/*.yaml``
(package data); :func:`load_scenario` takes a shipped name or a file path. :func:`quick`
shrinks a scenario for smoke runs and tests (``--quick``).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gleaner.simulator.cluster_scenario import ClusterScenario
from gleaner.simulator.node import NodeScenario

DEFAULT_SCENARIO = "default"


class Scenario(BaseModel):
    """One simulation: a node-level part, a cluster-level part, or both."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="custom", description="Shown in the report.")
    description: str = ""
    seed: int = Field(default=7, description="Default seed (``--seed`` overrides).")
    node: NodeScenario | None = Field(default=None, description="Node-level simulation.")
    cluster: ClusterScenario | None = Field(default=None, description="Cluster simulation.")


class ScenarioError(ValueError):
    """A scenario that cannot be loaded; the message is one line."""


def shipped_scenarios() -> list[str]:
    """Names of the scenarios shipped with Gleaner."""
    root = resources.files("gleaner.simulator") / "scenarios"
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".yaml"))


def scenario_text(name_or_path: str) -> tuple[str, str]:
    """(source description, YAML text) of a shipped name or a file path."""
    if name_or_path in shipped_scenarios():
        res = resources.files("gleaner.simulator") / "scenarios" / f"{name_or_path}.yaml"
        return f"scenario {name_or_path!r}", res.read_text(encoding="utf-8")
    path = Path(name_or_path)
    if not path.is_file():
        raise ScenarioError(
            f"no scenario {name_or_path!r}: not a file and not one of {shipped_scenarios()}"
        )
    return str(path), path.read_text(encoding="utf-8")


def parse_scenario(text: str, source: str = "scenario") -> Scenario:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{source}: not valid YAML ({str(exc).splitlines()[0]})") from exc
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: must be a YAML mapping")
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise ScenarioError(f"{source}: {where}: {err['msg']}") from exc
    if scenario.node is None and scenario.cluster is None:
        raise ScenarioError(f"{source}: needs a 'node' or a 'cluster' section (or both)")
    return scenario


def load_scenario(name_or_path: str = DEFAULT_SCENARIO) -> Scenario:
    """A shipped scenario by name, or a scenario file."""
    source, text = scenario_text(name_or_path)
    return parse_scenario(text, source)


def quick(scenario: Scenario) -> Scenario:
    """A smaller copy for smoke runs: ≤ 300 s node-level (of a replayed trace too), ≤ 8 nodes
    × 8 h cluster-level."""
    out = scenario.model_copy(deep=True)
    if out.node is not None:
        out.node.duration_s = min(out.node.duration_s, 300.0)
        out.node.memory.static_window_s = min(out.node.memory.static_window_s, 300.0)
        req = out.node.requests
        if req is not None:
            # At most 300 simulated seconds of the replayed window.
            most = 300.0 * req.rate_scale
            req.duration_s = most if req.duration_s is None else min(req.duration_s, most)
    if out.cluster is not None:
        c = out.cluster
        c.nodes = min(c.nodes, 8)
        c.duration_h = min(c.duration_h, 8.0)
        c.history_h = min(c.history_h, 2.0)
        c.window_h = min(c.window_h, 2.0)
    return out
