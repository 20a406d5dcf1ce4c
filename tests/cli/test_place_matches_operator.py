"""``gleaner place`` and the operator's decision path agree on the same trace and queue.

Both build a ``SchedulingSnapshot`` and call ``gleaner.scheduler.decide``; this drives the CLI
through its main function and the operator through ``plan_placements`` (what its
scheduling pass calls), with inputs built from one trace file and one set of manifests,
and asserts the same node, the same GPUs and the same reasons text for every job, and the
same "why not node X" lines (``--explain``'s ``runner_ups``, the operator's ``NotChosen``
Event).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from gleaner.cli.main import main
from gleaner.operator.bias import feed, to_configmap
from gleaner.operator.placement import RUNNER_UPS, QueuedJob, plan_placements
from gleaner.operator.traces import unbindable_nodes
from gleaner.operator.validation import ValidJob, validate_job
from gleaner.perfmodel import FileTraceSource, NodeSummary
from gleaner.scheduler import BiasTable

PROFILE = {
    "standaloneTokensPerSecond": 1000,
    "requiredMemoryGiB": 40,
    "memoryCurve": [
        {"memoryGiB": 10, "tokensPerSecond": 200},
        {"memoryGiB": 40, "tokensPerSecond": 1000},
    ],
    "memoryDeficitCoefficient": 0,
}
# (name, GPUs, SLA): distinct shapes, so the queue order does not depend on arrival.
JOBS = [
    ("one", 1, 0.5),
    ("pair", 2, 0.6),
    ("lenient", 1, 0.2),
    ("hard", 1, 0.97),
    ("triple", 3, 0.8),
    ("huge", 8, 0.1),
]


def _manifest(name: str, gpus: int, sla: float) -> dict[str, Any]:
    return {
        "apiVersion": "gleaner.dev/v1alpha1",
        "kind": "OfflineJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "template": {"spec": {"containers": [{"name": "w", "image": "busybox"}]}},
            "gpus": gpus,
            "throughputSLA": sla,
            "profile": PROFILE,
        },
    }


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    """n1: GPUs 0-2 busy together 25% of the time, GPU 3 at other times; n2: two loners;
    n3: a half-busy GPU whose memory is tight."""
    rows = []
    for t in range(40):
        for gpu in range(4):
            busy = (t % 4 == 0) if gpu < 3 else (t % 4 == 2)
            rows.append((float(t), "n1", gpu, float(busy), 60.0))
        for gpu in range(2):
            rows.append((float(t), "n2", gpu, float(t % 2 == gpu), 60.0))
        rows.append((float(t), "n3", 0, float(t % 2 == 0), 25.0))
    path = tmp_path / "trace.csv"
    pd.DataFrame(
        rows, columns=["timestamp", "node", "gpu", "online_busy", "free_memory_gib"]
    ).to_csv(path, index=False)
    return path


def _with_uuids(nodes: dict[str, NodeSummary]) -> dict[str, NodeSummary]:
    """The summaries as the agents publish them (their NodeTraces name every GPU's UUID)."""
    return {
        name: replace(s, gpus=tuple(replace(g, uuid=f"GPU-{name}-{g.index}") for g in s.gpus))
        for name, s in nodes.items()
    }


def test_place_and_operator_choose_the_same_nodes_gpus_and_reasons(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifests = [_manifest(*j) for j in JOBS]
    jobs_file = tmp_path / "jobs.yaml"
    jobs_file.write_text(yaml.safe_dump_all(manifests))

    rc = main(
        ["place", "--jobs", str(jobs_file), "--trace", str(trace), "--format", "json", "--explain"]
    )
    assert rc == 0
    placed_cli = json.loads(capsys.readouterr().out)

    # The operator's pass: validated jobs, summaries from the same trace, the pass's time.
    nodes = _with_uuids(FileTraceSource(trace).load())
    now = max(s.last_report_time for s in nodes.values() if s.last_report_time is not None)
    queue = []
    for body in manifests:
        verdict = validate_job(body)
        assert isinstance(verdict, ValidJob)
        queue.append(QueuedJob(verdict.job, verdict.profile))
    plan = plan_placements(
        queue,
        nodes,
        {},
        now,
        stale_after_seconds=600.0,
        node_labels={},
        unavailable=unbindable_nodes(nodes),
    )

    cli_placed = {p["job"]: p for p in placed_cli["placements"]}
    op_placed = {q.key: p for q, p in plan.placements}
    assert set(cli_placed) == set(op_placed)
    assert {"default/one", "default/pair", "default/lenient"} <= set(op_placed)
    for key, placement in op_placed.items():
        cli = cli_placed[key]
        assert cli["node"] == placement.node, key
        assert cli["gpus"] == placement.gpu_indices, key
        assert cli["throughput_fraction"] == pytest.approx(placement.throughput_fraction)
        assert tuple(cli["reasons"]) == plan.explanations[key].reasons, key
        assert any(r.startswith("predicted ") and ">= SLA" in r for r in cli["reasons"])
        # "Why not node X": the same lines, every other node in place, the closest few in
        # the operator's NotChosen Event.
        assert tuple(cli["runner_ups"][:RUNNER_UPS]) == plan.runner_ups[key], key
        others = sorted(n for n in nodes if n != placement.node)
        assert sorted(r.split(":", 1)[0] for r in cli["runner_ups"]) == others, key

    cli_refused = {u["job"]: u["reasons"] for u in placed_cli["unschedulable"]}
    op_refused = {q.key: message for q, message in plan.unschedulable}
    assert set(cli_refused) == set(op_refused)
    assert {"default/hard", "default/triple", "default/huge"} <= set(op_refused)
    for key, message in op_refused.items():
        assert message == f"0/{len(nodes)} nodes are available: {', '.join(cli_refused[key])}."


def test_the_operator_writes_why_and_why_not_into_its_condition_and_events(trace: Path) -> None:
    from datetime import UTC, datetime

    from gleaner.api import OfflineJobStatus
    from gleaner.operator import status as st
    from gleaner.scheduler.explain import chosen_summary

    nodes = _with_uuids(FileTraceSource(trace).load())
    now = max(s.last_report_time for s in nodes.values() if s.last_report_time is not None)
    verdict = validate_job(_manifest("one", 1, 0.5))
    assert isinstance(verdict, ValidJob)
    plan = plan_placements([QueuedJob(verdict.job, verdict.profile)], nodes, {}, now)
    ((_, placement),) = plan.placements
    explanation = plan.explanations["default/one"]
    why_not = plan.runner_ups["default/one"]
    detail = chosen_summary(explanation, why_not)
    assert detail.startswith("compute ") and " x bias " in detail
    assert f"next best {why_not[0]}" in detail
    status = st.scheduled(OfflineJobStatus(), placement, "one-0", datetime.now(UTC), detail)
    (cond,) = [c for c in status.conditions if c.type == "Scheduled"]
    assert cond.message.startswith(status.message) and detail in cond.message
    assert status.message.startswith(f"placed on {placement.node} GPUs ")


def test_place_with_the_operators_bias_table_places_as_the_operator_does(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``gleaner place --bias`` reads the operator's ConfigMap and decides as a pass with
    that table does: same nodes, same reasons, the learned factor shown."""
    manifests = [_manifest(*j) for j in JOBS]
    jobs_file = tmp_path / "jobs.yaml"
    jobs_file.write_text(yaml.safe_dump_all(manifests))
    nodes = _with_uuids(FileTraceSource(trace).load())
    now = max(s.last_report_time for s in nodes.values() if s.last_report_time is not None)
    queue = []
    for body in manifests:
        verdict = validate_job(body)
        assert isinstance(verdict, ValidJob)
        queue.append(QueuedJob(verdict.job, verdict.profile))

    def plan(bias: BiasTable | None) -> Any:
        return plan_placements(
            queue, nodes, {}, now, unavailable=unbindable_nodes(nodes), bias=bias
        )

    # The node that takes "one" without corrections turns out to deliver 60% of it.
    unbiased = {q.key: p for q, p in plan(None).placements}
    slow = unbiased["default/one"]
    table = BiasTable()
    for _ in range(8):
        feed(table, slow, "", 0.6 * slow.compute * slow.memory * slow.multi_gpu)
    expected = plan(table)
    configmap = tmp_path / "gleaner-bias.yaml"
    configmap.write_text(yaml.safe_dump(to_configmap(table, "gleaner-system")))

    rc = main(
        ["place", "--jobs", str(jobs_file), "--trace", str(trace), "--bias", str(configmap),
         "--risk-target", "off", "--format", "json", "--explain"]
    )  # fmt: skip
    assert rc == 0
    placed = {p["job"]: p for p in json.loads(capsys.readouterr().out)["placements"]}
    op = {q.key: p for q, p in expected.placements}
    assert set(placed) == set(op)
    assert op["default/one"].node != slow.node  # the table moved it
    for key, placement in op.items():
        assert (placed[key]["node"], placed[key]["gpus"]) == (
            placement.node,
            placement.gpu_indices,
        ), key
        assert tuple(placed[key]["reasons"]) == expected.explanations[key].reasons, key
    factor = f"bias {table.factor(slow.node):.2f}"
    assert any(factor in line for line in placed["default/one"]["runner_ups"])

    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: ConfigMap\ndata:\n  bias.json: '{not json'\n")
    rc = main(["place", "--jobs", str(jobs_file), "--trace", str(trace), "--bias", str(broken)])
    assert rc == 2
    assert capsys.readouterr().err.startswith("error: --bias:")
