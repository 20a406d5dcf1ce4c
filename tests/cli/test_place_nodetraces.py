"""``gleaner place`` on NodeTraces and NodeHistories saved with kubectl predicts each node as
the operator's pass does: the hours ahead where the node has hours of the day, by the same
code (``gleaner.operator.traces``), so a node idle now but busy later in the horizon is
refused by both."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from gleaner.api import OfflineJob
from gleaner.cli.main import main
from gleaner.operator.placement import QueuedJob, plan_placements
from gleaner.operator.tracecache import HistoryCache
from gleaner.operator.traces import summaries_from_nodetraces, with_histories
from gleaner.perfmodel.diurnal import DiurnalProfile, hour_of, is_weekend
from gleaner.perfmodel.hours import profile_to_hours, profile_to_weekend_hours
from gleaner.perfmodel.summary import GpuSpec, NodeSummary
from gleaner.testing.kube import nodetrace_manifest, offlinejob_manifest

NOW = datetime(2026, 3, 2, 7, 20, tzinfo=UTC)


def _objects() -> tuple[dict[str, Any], dict[str, Any]]:
    """Node a: idle in its latest window and the next hours, busy 6 hours ahead (its
    NodeHistory); NodeTrace and NodeHistory as the API server returns them."""
    trace = nodetrace_manifest("a", gpus=2, offline_enabled=0.9, end=NOW)
    inventory = trace["status"]["gpus"]
    gpus = [GpuSpec(g["index"], uuid=g["uuid"], memory_gib=g["memoryGiB"]) for g in inventory]
    profile = DiurnalProfile("a")
    hour = hour_of(NOW)
    for h, busy in {hour: 0.1, (hour + 1) % 24: 0.1, (hour + 6) % 24: 0.95}.items():
        t = NOW.timestamp() - 86400 + (h - hour) * 3600 + np.arange(0, 3600, 60.0)
        b = np.full((t.size, 2), busy)
        summary = NodeSummary.from_samples("a", gpus, t, b, np.full((t.size, 2), 60.0), 1 - b)
        profile = profile.fold(h, summary)
    history = {
        "apiVersion": "gleaner.dev/v1alpha1",
        "kind": "NodeHistory",
        "metadata": {"name": "a"},
        "spec": {"nodeName": "a"},
        "status": {"gpus": inventory, "hours": [h.to_k8s() for h in profile_to_hours(profile)]},
    }
    return trace, history


def _place(tmp_path: Path, objects: list[dict[str, Any]], capsys: Any) -> dict[str, Any]:
    traces = tmp_path / "nodetraces.yaml"
    traces.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(yaml.safe_dump(offlinejob_manifest("j", sla=0.5, gpus=1)))
    argv = ["place", "--jobs", str(jobs), "--trace", str(traces), "--format", "json"]
    assert main([*argv, "--at", NOW.isoformat()]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def _operator(objects: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The operator's pass on the same objects: its NodeHistory cache, its join, its plan."""
    histories = HistoryCache()
    for obj in objects:
        if obj["kind"] == "NodeHistory":
            histories.update("ADDED", obj)
    traces = [o for o in objects if o["kind"] == "NodeTrace"]
    nodes = summaries_from_nodetraces(with_histories(traces, histories), NOW)
    job = OfflineJob.model_validate(offlinejob_manifest("j", sla=0.5, gpus=1))
    assert job.spec.profile is not None
    plan = plan_placements([QueuedJob(job, job.spec.profile)], nodes, {}, NOW)
    return [p.node for _, p in plan.placements], [message for _, message in plan.unschedulable]


@pytest.mark.parametrize("with_history", [True, False])
def test_place_predicts_nodetraces_as_the_operator_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], with_history: bool
) -> None:
    trace, history = _objects()
    objects = [trace, history] if with_history else [trace]
    placed = _place(tmp_path, objects, capsys)
    nodes, reasons = _operator(objects)
    assert [p["node"] for p in placed["placements"]] == nodes
    refused = [
        f"0/1 nodes are available: {', '.join(u['reasons'])}." for u in placed["unschedulable"]
    ]
    assert refused == reasons
    # With its hours, the node is judged by the busy hour ahead; without, by its idle window.
    assert (nodes == []) is with_history


def test_hours_an_older_agent_kept_in_the_nodetrace_are_read_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace, history = _objects()
    trace["status"]["hours"] = history["status"]["hours"]
    placed = _place(tmp_path, [trace], capsys)
    assert placed["placements"] == [] and len(placed["unschedulable"]) == 1


def test_a_broken_yaml_file_is_reported_as_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``.yaml`` trace that does not parse names the line and column, instead of being
    read as a CSV trace with missing columns."""
    path = tmp_path / "nodetraces.yaml"
    path.write_text("kind: NodeTrace\n  bad: [\n")
    rc = main(
        ["place", "--jobs", "examples/mistral-7b-profile-configmap.yaml", "--trace", str(path)]
    )
    err = capsys.readouterr().err
    assert rc == 2
    assert "not valid YAML: line 2, column 6" in err and "missing column" not in err


def test_place_reads_the_weekend_hours_of_a_nodehistory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Node a: busy every hour of the day on weekdays, idle on weekends (two weekend days
    folded, in ``weekendHours``): placed on a Saturday by ``gleaner place``, refused when
    the NodeHistory has no weekend hours (as an older agent's)."""
    saturday = datetime(2026, 3, 7, 7, 20, tzinfo=UTC)
    trace = nodetrace_manifest("a", gpus=2, offline_enabled=0.9, end=saturday)
    inventory = trace["status"]["gpus"]
    gpus = [GpuSpec(g["index"], uuid=g["uuid"], memory_gib=g["memoryGiB"]) for g in inventory]
    profile = DiurnalProfile("a")
    for hour_index in range(7 * 24):  # Saturday 28 Feb to Friday 6 March
        at = datetime(2026, 2, 28, tzinfo=UTC) + timedelta(hours=hour_index)
        busy = 0.1 if is_weekend(at) else 0.95
        t = at.timestamp() + np.arange(0, 3600, 60.0)
        b = np.full((t.size, 2), busy)
        summary = NodeSummary.from_samples("a", gpus, t, b, np.full((t.size, 2), 60.0), 1 - b)
        profile = profile.fold_at(at, summary)
    status = {
        "gpus": inventory,
        "hours": [h.to_k8s() for h in profile_to_hours(profile)],
        "weekendHours": [h.to_k8s() for h in profile_to_weekend_hours(profile)],
    }
    history = {
        "apiVersion": "gleaner.dev/v1alpha1",
        "kind": "NodeHistory",
        "metadata": {"name": "a"},
        "spec": {"nodeName": "a"},
        "status": status,
    }
    older = {**history, "status": {k: v for k, v in status.items() if k != "weekendHours"}}
    placed = []
    for objects in ([trace, history], [trace, older]):
        path = tmp_path / "nodetraces.yaml"
        path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
        jobs = tmp_path / "jobs.yaml"
        jobs.write_text(yaml.safe_dump(offlinejob_manifest("j", sla=0.5, gpus=1)))
        argv = ["place", "--jobs", str(jobs), "--trace", str(path), "--format", "json"]
        assert main([*argv, "--at", saturday.isoformat()]) == 0
        out = json.loads(capsys.readouterr().out)
        placed.append([p["node"] for p in out["placements"]])
    assert placed == [["a"], []]
