"""Each filter and score plugin on its own: masks, reasons and normalized scores."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gleaner.scheduler import ClusterState, JobRequest, SchedulerConfig
from gleaner.scheduler.config import FILTER_PLUGINS, SCORE_PLUGINS
from gleaner.scheduler.framework import JobContext
from gleaner.scheduler.plugins.gpu_free import GPUFree
from gleaner.scheduler.plugins.gpu_selector import GPUSelector
from gleaner.scheduler.plugins.keep_aligned import KeepAligned
from gleaner.scheduler.plugins.memory_fit import MemoryFit
from gleaner.scheduler.plugins.node_excluded import NodeExcluded
from gleaner.scheduler.plugins.node_usable import NodeUsable
from gleaner.scheduler.plugins.pack_nodes import PackNodes
from gleaner.scheduler.plugins.pair_overlap import PairOverlap
from gleaner.scheduler.plugins.sla_fit import SLAFit
from gleaner.scheduler.plugins.throughput_sla import ThroughputSLA
from gleaner.scheduler.registry import FILTERS, SCORES
from gleaner.scheduler.schedule import Scheduler
from gleaner.testing.scheduling import simple_profile, synthetic_node

CONFIG = SchedulerConfig()
PROFILE = simple_profile()


def _cluster(**kwargs: object) -> ClusterState:
    nodes = {
        "a": synthetic_node("a", [0.2, 0.2, 0.2, 0.6], [[0, 1, 2]], labels={"pool": "x"}),
        "b": synthetic_node("b", [0.5, 0.5], [], product="A100", labels={"pool": "y"}),
        "c": synthetic_node("c", [0.1, 0.1], [[0, 1]], free_gib=5.0, labels={"pool": "x"}),
    }
    return ClusterState(nodes, **kwargs)  # type: ignore[arg-type]


def _ctx(cluster: ClusterState, job: JobRequest) -> tuple[Scheduler, JobContext]:
    sched = Scheduler(cluster, CONFIG)
    return sched, sched.context(job)


def _job(gpus: int = 1, sla: float = 0.5, **kw: object) -> JobRequest:
    return JobRequest("ns/j", PROFILE, gpus, sla, **kw)  # type: ignore[arg-type]


def test_registry_names_match_classes() -> None:
    assert set(FILTERS) == {
        "NodeUsable",
        "NodeExcluded",
        "GPUSelector",
        "GPUFree",
        "Instrumented",
        "PairOverlap",
        "MemoryFit",
        "ThroughputSLA",
    }
    assert set(SCORES) == {"SLAFit", "KeepAligned", "PackNodes"}
    with pytest.raises(ValueError, match="unknown filter"):
        SchedulerConfig(filters=("NoSuchFilter",))
    with pytest.raises(ValueError, match="unknown score"):
        SchedulerConfig(scores={"Nope": 1.0})


def test_config_knows_exactly_the_registered_plugins() -> None:
    # SchedulerConfig validates names without importing the registry (no import cycle);
    # this keeps its name sets and the registry's classes the same.
    assert set(FILTERS) == FILTER_PLUGINS
    assert set(SCORES) == SCORE_PLUGINS


def test_node_usable() -> None:
    _, ctx = _ctx(_cluster(unavailable={"b": "stale trace"}), _job())
    f = NodeUsable(CONFIG)
    assert f.mask(ctx).tolist() == [True, False, True]
    assert f.reasons(ctx, np.array([1])) == ["node unavailable: stale trace"]


def test_node_excluded() -> None:
    _, ctx = _ctx(_cluster(), _job(excluded_nodes=frozenset({"a", "zz"})))
    f = NodeExcluded(CONFIG)
    assert f.mask(ctx).tolist() == [False, True, True]
    assert f.reasons(ctx, np.array([0])) == ["job missed its SLA there before"]


def test_gpu_selector_labels_and_products() -> None:
    f = GPUSelector(CONFIG)
    _, ctx = _ctx(_cluster(), _job(node_selector={"pool": "x"}))
    assert f.mask(ctx).tolist() == [True, False, True]
    assert f.reasons(ctx, np.array([1])) == ["didn't match gpuSelector node labels"]
    _, ctx = _ctx(_cluster(), _job(gpus=2, products=("A100",)))
    assert f.mask(ctx).tolist() == [False, True, False]
    assert f.reasons(ctx, np.array([0])) == ["fewer than 2 GPUs of product A100"]
    # node_labels from the ClusterState override the summary's own labels
    _, ctx = _ctx(_cluster(node_labels={"b": {"pool": "x"}}), _job(node_selector={"pool": "x"}))
    assert f.mask(ctx).tolist() == [True, True, True]


def test_gpu_selector_says_when_the_product_is_not_reported() -> None:
    # A trace file names no GPU product: a products selector rules such a node out, and the
    # reason says that the product is unknown rather than wrong.
    f = GPUSelector(CONFIG)
    cluster = ClusterState(
        nodes={
            "known": synthetic_node("known", [0.2, 0.2], [[0, 1]], product="A100"),
            "unknown": synthetic_node("unknown", [0.2, 0.2], [[0, 1]], product=""),
        }
    )
    _, ctx = _ctx(cluster, _job(products=("H100",)))
    assert f.mask(ctx).tolist() == [False, False]
    assert f.reasons(ctx, np.array([0, 1])) == [
        "fewer than 1 GPU of product H100",
        "fewer than 1 GPU of product H100 (GPU product not reported)",
    ]
    _, ctx = _ctx(cluster, _job())  # no products asked: the unknown product does not matter
    assert f.mask(ctx).tolist() == [True, True]


def test_gpu_free_counts_only_free_allowed_gpus() -> None:
    f = GPUFree(CONFIG)
    cluster = _cluster(occupied={"a": {0: "x/1", 1: "x/2"}, "b": {0: "x/3"}})
    _, ctx = _ctx(cluster, _job(gpus=2))
    assert f.mask(ctx).tolist() == [True, False, True]
    assert f.reasons(ctx, np.array([1])) == ["fewer than 2 free GPUs"]
    _, ctx = _ctx(_cluster(occupied={"c": {0: "x/1", 1: "x/2"}}), _job(gpus=1))
    assert f.mask(ctx).tolist() == [True, True, False]
    assert f.reasons(ctx, np.array([2])) == ["no free GPU"]


def test_pair_overlap_only_proposes_aligned_sets() -> None:
    sched, ctx = _ctx(_cluster(), _job(gpus=2, sla=0.01))
    batch = sched.candidates(ctx, np.ones(3, dtype=bool), ctx.allowed & sched.view.free)
    sets = {
        (sched.view.names[int(n)], tuple(s))
        for n, s in zip(batch.node, batch.slots.tolist(), strict=True)
    }
    assert sets == {("a", (0, 1)), ("a", (0, 2)), ("a", (1, 2)), ("c", (0, 1))}
    f = PairOverlap(CONFIG)
    assert f.check(ctx, batch).all()
    assert f.no_sets_reason(ctx) == "no 2 aligned free GPUs (pair overlap < 0.95)"
    low = batch.take([0])
    low = type(low)(**{**low.__dict__, "multi": np.array([0.9])})
    assert not f.check(ctx, low).any()


def test_memory_fit() -> None:
    # node c has 5 GiB free, below the profile's first curve point (10 GiB): memory 0
    sched, ctx = _ctx(_cluster(), _job())
    f = MemoryFit(CONFIG)
    slot = f.slot_mask(ctx)
    assert slot[sched.view.row["c"]].sum() == 0 and slot[sched.view.row["a"]].all()
    batch = sched.candidates(ctx, np.ones(3, dtype=bool), ctx.allowed & sched.view.free)
    ok = f.check(ctx, batch)
    assert set(batch.node[~ok].tolist()) == {sched.view.row["c"]}
    assert f.explain(ctx, batch.take(~ok)) == "insufficient harvestable memory (best memory 0.00)"


def test_throughput_sla_reason_names_limiting_factor() -> None:
    sched, ctx = _ctx(_cluster(), _job(sla=0.9))
    f = ThroughputSLA(CONFIG)
    batch = sched.candidates(ctx, np.ones(3, dtype=bool), ctx.allowed & sched.view.free)
    ok = f.check(ctx, batch)
    assert not ok.any()
    text = f.explain(ctx, batch.take(~ok))
    # best GPU: node c (busy 0.1) has compute 0.9 but memory 0 -> product 0; node a GPU 0..2 0.8
    assert text == "predicted throughput below SLA (best 0.80 < 0.90, compute 0.80)"
    assert f.slot_mask(ctx).sum() == 0


def test_sla_fit_prefers_least_surplus() -> None:
    sched, ctx = _ctx(_cluster(), _job(sla=0.4))
    batch = sched.candidates(ctx, np.ones(3, dtype=bool), ctx.allowed & sched.view.free)
    scores = SLAFit(replace(CONFIG, sla_margin=0.0)).score(ctx, batch)
    by = {
        (sched.view.names[int(n)], int(s[0])): v
        for n, s, v in zip(batch.node, batch.slots, scores, strict=True)
    }
    # product 0.4 (GPU a/3) -> 100; 0.5 (b) -> 100*(1-0.1/0.6); 0.8 (a/0) -> 100*(1-0.4/0.6)
    assert by[("a", 3)] == pytest.approx(100.0)
    assert by[("b", 0)] == pytest.approx(100 * (1 - 0.1 / 0.6))
    assert by[("a", 0)] == pytest.approx(100 * (1 - 0.4 / 0.6))
    assert all(0.0 <= v <= 100.0 for v in scores)


def test_sla_fit_margin_prefers_a_set_above_the_edge() -> None:
    sched, ctx = _ctx(_cluster(), _job(sla=0.4))
    batch = sched.candidates(ctx, np.ones(3, dtype=bool), ctx.allowed & sched.view.free)
    scores = SLAFit(replace(CONFIG, sla_margin=0.1)).score(ctx, batch)
    by = {
        (sched.view.names[int(n)], int(s[0])): v
        for n, s, v in zip(batch.node, batch.slots, scores, strict=True)
    }
    # product 0.4 (a/3) is within 0.1 of the SLA -> 0; 0.5 (b) has the margin and is the
    # best fit among those with it; 0.8 (a/0) keeps its best-fit score
    assert by[("a", 3)] == 0.0
    assert by[("b", 0)] == pytest.approx(100 * (1 - 0.1 / 0.6))
    assert by[("a", 0)] == pytest.approx(100 * (1 - 0.4 / 0.6))
    assert max(by, key=lambda k: by[k]) == ("b", 0)


def test_sla_margin_is_validated() -> None:
    with pytest.raises(ValueError, match="sla_margin"):
        replace(CONFIG, sla_margin=1.0)


def test_keep_aligned_prefers_the_loner() -> None:
    sched, ctx = _ctx(_cluster(), _job(sla=0.1))
    batch = sched.candidates(ctx, np.ones(3, dtype=bool), ctx.allowed & sched.view.free)
    a = sched.view.row["a"]
    on_a = batch.take(batch.node == a)
    scores = KeepAligned(CONFIG).score(ctx, on_a)
    by = dict(zip(on_a.slots[:, 0].tolist(), scores.tolist(), strict=True))
    # taking GPU 3 breaks nothing; taking GPU 0 leaves 1 and 2 (aligned with 0) of 3 free
    assert by[3] == pytest.approx(100.0)
    assert by[0] == pytest.approx(100.0 * (1 - 2 / 3))


def test_pack_nodes_prefers_fuller_nodes() -> None:
    sched, ctx = _ctx(_cluster(occupied={"a": {3: "x/1"}}), _job(sla=0.1))
    batch = sched.candidates(ctx, np.ones(3, dtype=bool), ctx.allowed & sched.view.free)
    scores = PackNodes(CONFIG).score(ctx, batch)
    by_node = {sched.view.names[int(n)]: v for n, v in zip(batch.node, scores, strict=True)}
    assert by_node["a"] == pytest.approx(100 * 2 / 4)
    assert by_node["b"] == pytest.approx(100 * 1 / 2)
