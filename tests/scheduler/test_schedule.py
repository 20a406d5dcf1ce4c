"""Whole scheduling cycles: packing, order, best fit, reasons, guarantees (property tests)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gleaner.api import OfflineJob
from gleaner.perfmodel import JobProfile, ModelConfig, predict
from gleaner.perfmodel.summary import NodeSummary
from gleaner.scheduler import (
    DEFAULT_SLA_MARGIN,
    BiasTable,
    ClusterState,
    JobRequest,
    SchedulerConfig,
    queue_order,
    schedule,
    stale_nodes,
)
from gleaner.testing.scheduling import simple_profile, synthetic_node

PROFILE = simple_profile()


def _four_gpu_node() -> NodeSummary:
    """GPUs 0-2 aligned (one TP-3 online replica), GPU 3 on its own."""
    return synthetic_node("n1", [0.3, 0.3, 0.3, 0.4], [[0, 1, 2]])


@pytest.mark.parametrize(
    "order", list(itertools.permutations([("big", 2), ("one", 1), ("two", 1)]))
)
def test_packing_case_whatever_the_arrival_order(order: tuple[tuple[str, int], ...]) -> None:
    cluster = ClusterState({"n1": _four_gpu_node()})
    jobs = [JobRequest(f"ns/{k}", PROFILE, g, 0.5, arrival=i) for i, (k, g) in enumerate(order)]
    result = schedule(jobs, cluster)
    assert not result.unschedulable
    placed = {p.job: p.gpus for p in result.placements}
    assert len(placed["ns/big"]) == 2 and set(placed["ns/big"]) <= {0, 1, 2}
    used = [g for gpus in placed.values() for g in gpus]
    assert sorted(used) == [0, 1, 2, 3]
    assert result.placements[0].job == "ns/big"  # multi-GPU jobs are considered first


def test_packing_case_across_cycles_keeps_the_aligned_gpus() -> None:
    """Two 1-GPU jobs placed in earlier cycles still leave an aligned pair for a 2-GPU job."""
    cluster = ClusterState({"n1": _four_gpu_node()})
    for name in ("one", "two"):
        result = schedule([JobRequest(f"ns/{name}", PROFILE, 1, 0.5)], cluster)
        cluster = cluster.with_placements(result.placements)
    assert cluster.occupied["n1"][3] == "ns/one"  # the loner first: it breaks no alignment
    result = schedule([JobRequest("ns/big", PROFILE, 2, 0.5)], cluster)
    assert len(result.placements) == 1


def test_hard_jobs_get_the_good_gpus_whatever_the_order() -> None:
    node = synthetic_node("n", [0.1, 0.6], [])  # compute 0.9 and 0.4
    for first, second in (("easy", "hard"), ("hard", "easy")):
        sla = {"easy": 0.3, "hard": 0.8}
        jobs = [
            JobRequest(f"ns/{first}", PROFILE, 1, sla[first], arrival=0),
            JobRequest(f"ns/{second}", PROFILE, 1, sla[second], arrival=1),
        ]
        result = schedule(jobs, ClusterState({"n": node}))
        assert {p.job: p.gpus for p in result.placements} == {"ns/hard": (0,), "ns/easy": (1,)}


def test_best_fit_keeps_strong_nodes_free() -> None:
    nodes = {
        "strong": synthetic_node("strong", [0.05], []),
        "weak": synthetic_node("weak", [0.55], []),
    }
    best_fit = SchedulerConfig(sla_margin=0.0)
    result = schedule([JobRequest("ns/j", PROFILE, 1, 0.4)], ClusterState(nodes), best_fit)
    assert result.placements[0].node == "weak"


def test_the_default_margin_prefers_a_node_with_headroom_over_the_edge() -> None:
    nodes = {
        "strong": synthetic_node("strong", [0.05], []),
        "edge": synthetic_node("edge", [0.55], []),
    }
    # The edge node's prediction (0.45) is within the default margin of the SLA (0.4).
    result = schedule([JobRequest("ns/j", PROFILE, 1, 0.4)], ClusterState(nodes))
    assert result.placements[0].node == "strong"
    assert result.placements[0].throughput_fraction >= 0.4 + DEFAULT_SLA_MARGIN


def test_reasons_grouped_per_node_class_like_kube_scheduler() -> None:
    nodes = {f"slow-{i}": synthetic_node(f"slow-{i}", [0.65, 0.65], [[0, 1]]) for i in range(9)}
    nodes |= {f"split-{i}": synthetic_node(f"split-{i}", [0.1, 0.1], []) for i in range(3)}
    result = schedule([JobRequest("ns/j", PROFILE, 2, 0.6)], ClusterState(nodes))
    assert not result.placements
    (u,) = result.unschedulable
    assert u.reasons == (
        "9 predicted throughput below SLA (best 0.35 < 0.60, compute 0.35)",
        "3 no 2 aligned free GPUs (pair overlap < 0.95)",
    )
    assert u.message == (
        "0/12 nodes are available: 9 predicted throughput below SLA (best 0.35 < 0.60, "
        "compute 0.35), 3 no 2 aligned free GPUs (pair overlap < 0.95)."
    )


def test_reasons_cover_every_filter() -> None:
    nodes = {
        "stale": synthetic_node("stale", [0.1, 0.1], [[0, 1]]),
        "gone": synthetic_node("gone", [0.1, 0.1], [[0, 1]]),
        "full": synthetic_node("full", [0.1, 0.1], [[0, 1]]),
        "amd": synthetic_node("amd", [0.1, 0.1], [[0, 1]], product="MI300"),
        "tiny": synthetic_node("tiny", [0.1, 0.1], [[0, 1]], free_gib=2.0),
    }
    cluster = ClusterState(
        nodes,
        unavailable={"stale": "stale trace"},
        occupied={"full": {0: "x/y"}},
    )
    job = JobRequest(
        "ns/j",
        PROFILE,
        2,
        0.5,
        products=("NVIDIA H100 80GB HBM3",),
        excluded_nodes=frozenset({"gone"}),
    )
    (u,) = schedule([job], cluster).unschedulable
    assert u.reasons == (
        "1 fewer than 2 GPUs of product NVIDIA H100 80GB HBM3",
        "1 fewer than 2 free GPUs",
        "1 insufficient harvestable memory (best memory 0.00)",
        "1 job missed its SLA there before",
        "1 node unavailable: stale trace",
    )


def test_placements_match_the_model_and_the_json_contract() -> None:
    nodes = {"n1": _four_gpu_node(), "n2": synthetic_node("n2", [0.2] * 4, [[0, 1, 2, 3]])}
    jobs = [
        JobRequest("ns/a", PROFILE, 4, 0.7),
        JobRequest("ns/b", PROFILE, 2, 0.6),
        JobRequest("ns/c", PROFILE, 1, 0.95),
    ]
    result = schedule(jobs, ClusterState(nodes))
    data = result.to_json()
    assert set(data) == {"placements", "unschedulable"}
    for p in data["placements"]:
        assert list(p) == [
            "job",
            "node",
            "gpus",
            "compute",
            "memory",
            "multi_gpu",
            "throughput_fraction",
        ]
    assert [u["job"] for u in data["unschedulable"]] == ["ns/c"]
    assert list(data["unschedulable"][0]) == ["job", "reasons"]
    for p in result.placements:
        expected = predict(PROFILE, p.prediction.sla, nodes[p.node], p.gpus, ModelConfig())
        assert p.prediction.throughput_fraction == pytest.approx(expected.throughput_fraction)
        assert p.prediction.feasible
        assert p.gpu_uuids == tuple(f"GPU-{p.node}-{g}" for g in p.gpus)


def test_backoff_defers_and_duplicates_are_refused() -> None:
    cluster = ClusterState({"n1": _four_gpu_node()})
    job = JobRequest("ns/a", PROFILE, 1, 0.5, not_before=100.0)
    assert schedule([job], cluster, now=50.0).deferred == ["ns/a"]
    assert len(schedule([job], cluster, now=150.0).placements) == 1
    with pytest.raises(ValueError, match="queued twice"):
        schedule([job, job], cluster)


def test_explanations_can_be_switched_off() -> None:
    cluster = ClusterState({"n1": _four_gpu_node()})
    result = schedule(
        [JobRequest("ns/a", PROFILE, 8, 0.5)], cluster, SchedulerConfig(explain=False)
    )
    assert result.unschedulable[0].reasons == ("no feasible GPU set (explanations disabled)",)


def test_queue_order() -> None:
    jobs = [
        JobRequest("ns/small-low", PROFILE, 1, 0.3, priority=5, arrival=0),
        JobRequest("ns/small-hard", PROFILE, 1, 0.9, arrival=1),
        JobRequest("ns/big", PROFILE, 4, 0.2, arrival=2),
        JobRequest("ns/small-low-b", PROFILE, 1, 0.31, priority=9, arrival=3),
        JobRequest("ns/small-low-c", PROFILE, 1, 0.32, priority=9, arrival=4),
    ]
    assert [j.key for j in queue_order(jobs)] == [
        "ns/big",
        "ns/small-hard",
        "ns/small-low-b",
        "ns/small-low-c",
        "ns/small-low",
    ]


def test_from_offlinejob() -> None:
    job = OfflineJob.model_validate(
        {
            "metadata": {
                "name": "j",
                "namespace": "team",
                "labels": {"gleaner.dev/job-class": "llama"},
            },
            "spec": {
                "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
                "gpus": 2,
                "throughputSLA": 0.4,
                "priority": 7,
                "maxEvictions": 5,
                "gpuSelector": {"nodeSelector": {"pool": "x"}, "products": ["H100"]},
                "profile": {
                    "standaloneTokensPerSecond": 100,
                    "requiredMemoryGiB": 20,
                    "memoryCurve": [
                        {"memoryGiB": 5, "tokensPerSecond": 10},
                        {"memoryGiB": 20, "tokensPerSecond": 100},
                    ],
                    "memoryDeficitCoefficient": 1,
                },
            },
            "status": {"excludedNodes": ["bad"], "evictionCount": 2},
        }
    )
    assert job.spec.profile is not None
    req = JobRequest.from_offlinejob(job, JobProfile.from_api(job.spec.profile), arrival=3.0)
    assert (req.key, req.gpus, req.sla, req.priority) == ("team/j", 2, 0.4, 7)
    assert dict(req.node_selector) == {"pool": "x"} and req.products == ("H100",)
    assert req.excluded_nodes == frozenset({"bad"}) and req.eviction_count == 2
    assert (req.job_class, req.max_evictions, req.arrival) == ("llama", 5, 3.0)


def test_cluster_state_helpers() -> None:
    from datetime import timedelta

    node = _four_gpu_node()
    assert node.last_report_time is not None
    now = node.last_report_time + timedelta(seconds=30)
    assert stale_nodes({"n1": node}, now, 60) == {}
    assert stale_nodes({"n1": node}, now, 10) == {"n1": "stale trace"}
    cluster = ClusterState({"n1": node})
    result = schedule([JobRequest("ns/a", PROFILE, 2, 0.5)], cluster)
    after = cluster.with_placements(result.placements)
    assert len(after.free_gpus("n1")) == 2
    assert len(after.without_job("ns/a").free_gpus("n1")) == 4


def test_sixteen_gpu_node_with_a_cut_enumeration_still_finds_free_sets() -> None:
    node = synthetic_node("big", [0.2] * 16, [list(range(16))])
    occupied = {"big": {i: f"x/{i}" for i in range(6)}}
    cluster = ClusterState({"big": node}, occupied=occupied)
    config = SchedulerConfig(max_sets_per_node=5)
    result = schedule([JobRequest("ns/a", PROFILE, 4, 0.5)], cluster, config)
    assert len(result.placements) == 1
    assert min(result.placements[0].gpus) >= 6


def test_bias_below_one_blocks_an_sla_the_node_cannot_meet() -> None:
    nodes = {"n": synthetic_node("n", [0.3], [])}  # model says 0.7
    job = JobRequest("ns/a", PROFILE, 1, 0.65)
    assert schedule([job], ClusterState(nodes)).placements
    bias = BiasTable()
    for _ in range(20):
        bias.observe("n", "", observed=0.56, predicted=0.7)
    (u,) = schedule([job], ClusterState(nodes, bias=bias)).unschedulable
    assert u.reasons[0].startswith("1 predicted throughput below SLA (best 0.5")
    assert u.reasons[0].endswith("compute 0.70, bias 0.80)")


# -- properties ---------------------------------------------------------------------------


@st.composite
def _scenario(draw: st.DrawFn) -> tuple[dict[str, NodeSummary], list[JobRequest]]:
    nodes: dict[str, NodeSummary] = {}
    for i in range(draw(st.integers(1, 4))):
        g = draw(st.integers(1, 4))
        busy = draw(st.lists(st.sampled_from([0.1, 0.3, 0.5, 0.7]), min_size=g, max_size=g))
        split = draw(st.integers(0, g))
        groups = [list(range(split)), list(range(split, g))]
        free = draw(st.lists(st.sampled_from([5.0, 20.0, 60.0]), min_size=g, max_size=g))
        name = f"n{i}"
        nodes[name] = synthetic_node(name, busy, [x for x in groups if len(x) > 1], free)
    jobs = [
        JobRequest(
            f"ns/j{j}",
            PROFILE,
            draw(st.sampled_from([1, 1, 2, 3])),
            draw(st.sampled_from([0.2, 0.4, 0.6, 0.8])),
            arrival=float(j),
        )
        for j in range(draw(st.integers(1, 6)))
    ]
    return nodes, jobs


def _feasible_anywhere(job: JobRequest, cluster: ClusterState) -> bool:
    for name, node in cluster.nodes.items():
        for gpus in itertools.combinations(cluster.free_gpus(name), job.gpus):
            if predict(job.profile, job.sla, node, gpus, ModelConfig()).feasible:
                return True
    return False


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(_scenario())
def test_never_below_sla_never_double_booked_and_complete(
    scenario: tuple[dict[str, NodeSummary], list[JobRequest]],
) -> None:
    nodes, jobs = scenario
    cluster = ClusterState(nodes)
    result = schedule(jobs, cluster)
    used: set[tuple[str, int]] = set()
    for p in result.placements:
        job = next(j for j in jobs if j.key == p.job)
        assert len(p.gpus) == job.gpus
        again = predict(job.profile, job.sla, nodes[p.node], p.gpus, ModelConfig())
        assert again.feasible and p.throughput_fraction >= job.sla - 1e-9
        assert np.isclose(again.throughput_fraction, p.prediction.throughput_fraction)
        for g in p.gpus:
            assert (p.node, g) not in used
            used.add((p.node, g))
    # Completeness per job: whatever did not fit really fits nowhere on what was left.
    after = cluster.with_placements(result.placements)
    for u in result.unschedulable:
        job = next(j for j in jobs if j.key == u.job)
        assert not _feasible_anywhere(job, after)
        assert u.message.startswith(f"0/{len(nodes)} nodes are available: ")
        assert sum(int(r.split(" ", 1)[0]) for r in u.reasons) == len(nodes)
