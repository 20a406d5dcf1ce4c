"""Cluster level on a small cluster: summaries, real scheduler placements, monitor, baselines."""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from gleaner.api import Phase
from gleaner.perfmodel import multi_gpu_factor, predict
from gleaner.perfmodel.model import compute_factors
from gleaner.scheduler.measures import sla_attainment
from gleaner.simulator.cluster import run_cluster, trailing_idle, worst_hour_ahead
from gleaner.simulator.cluster_scenario import ClusterScenario
from gleaner.simulator.latency import MODELS
from gleaner.simulator.online import EPOCH, GateEfficiency, generate_online, node_summary


def _cfg(**kw: Any) -> ClusterScenario:
    base: dict[str, Any] = {"nodes": 4, "duration_h": 6.0, "history_h": 2.0, "window_h": 2.0}
    base.update(kw)
    return ClusterScenario(**base)


def test_summaries_follow_the_alignment_model() -> None:
    cfg = _cfg()
    online = generate_online(cfg, np.random.default_rng(3))
    for n in range(cfg.nodes):
        s = node_summary(online, n, 0, 120, 0.95)
        rows = online.rows(n)
        svc = online.service[rows]
        for a in range(8):
            for b in range(a + 1, 8):
                score = multi_gpu_factor(s, [a, b])
                if svc[a] == svc[b] and online.alignment[svc[a]] == 1.0:
                    mins = np.minimum(online.busy[rows][a, :120], online.busy[rows][b, :120])
                    maxs = np.maximum(online.busy[rows][a, :120], online.busy[rows][b, :120])
                    assert score == pytest.approx(mins.sum() / maxs.sum(), rel=1e-9)
                elif svc[a] != svc[b]:
                    assert score < 0.95
        assert s.offline_enabled_seconds is not None
        assert (s.offline_enabled_seconds <= s.window_seconds - s.online_busy_seconds + 1e-6).all()


@pytest.fixture(scope="module")
def run() -> dict[str, Any]:
    return run_cluster(_cfg(), seed=5, gate_efficiency=0.96)


def test_no_gpu_holds_two_jobs_at_once(run: dict[str, Any]) -> None:
    for policy, jobs in run["jobs"].items():
        stays: dict[tuple[str, int], list[tuple[float, float]]] = defaultdict(list)
        for job in jobs:
            for p in job.placements:
                for g in p["gpus"]:
                    stays[(p["node"], g)].append((p["t"], p["end"]))
        for intervals in stays.values():
            intervals.sort()
            for (_, end), (start, _) in itertools.pairwise(intervals):
                assert start >= end, policy


def test_placements_respect_sla_predictions_and_overlap(run: dict[str, Any]) -> None:
    for job in run["jobs"]["gleaner"]:
        for p in job.placements:
            assert p["predicted"] >= job.sla * 0.999
    multi = [j for j in run["jobs"]["gleaner"] if j.gpus > 1 and j.placements]
    online = run["online"]
    for j in multi:
        for p in j.placements:
            node = online.node_names.index(p["node"])
            svcs = {int(online.service[node * 8 + g]) for g in p["gpus"]}
            # The PairOverlap filter keeps multi-GPU jobs on one well-aligned service.
            assert len(svcs) == 1


def test_baselines_and_metrics(run: dict[str, Any]) -> None:
    pols = run["policies"]
    assert pols["no-harvest"]["gpus_saved"] == 0 and pols["no-harvest"]["utilization_gain"] == 0
    assert pols["gleaner"]["gpus_saved"] > 0
    assert pols["first-fit"]["prediction_error"]["placements"] == 0
    assert pols["gleaner"]["prediction_error"]["placements"] > 0
    for name in ("gleaner", "first-fit", "no-multi-filter"):
        m = pols[name]
        assert 0 <= m["sla_attainment"] <= 1
        assert len(m["_reports"]) == m["evictions"]
        assert m["utilization_with_offline"] <= 1.0 + 1e-9
        for r in m["_reports"]:
            assert r.to_json()["job"].startswith("batch/")


def test_trailing_idle_is_what_the_agent_reports() -> None:
    cfg = _cfg()
    online = generate_online(cfg, np.random.default_rng(4))
    idle = trailing_idle(online, 120, 0.95)
    for end in (1, 60, 120, 300):
        start = max(0, end - 120)
        for n in range(cfg.nodes):
            p_compute = compute_factors(node_summary(online, n, start, end, 0.95))
            assert idle[online.rows(n), end] == pytest.approx(p_compute, abs=1e-9)


def test_eviction_reports_are_on_the_epoch_clock(run: dict[str, Any]) -> None:
    reports = [r for m in run["policies"].values() for r in m.get("_reports", [])]
    assert reports
    for r in reports:
        assert r.time >= EPOCH.timestamp()
        if r.next_attempt_after is not None:
            assert r.next_attempt_after >= r.time  # not seconds since the start
        assert len(r.gpu_uuids) == len(r.gpus)


def test_recorded_placements_are_built_as_the_operator_builds_them(run: dict[str, Any]) -> None:
    from datetime import timedelta

    from gleaner.simulator.records import offline_job

    placed = [j for j in run["jobs"]["gleaner"] if j.placements and j.decision is not None]
    assert placed
    for job in placed:
        last = job.placements[-1]
        decision = job.decision
        assert decision is not None and decision.node == last["node"]
        assert list(decision.gpus) == last["gpus"]
        # The scheduler's own explanation of the choice travels with it, bias included.
        assert decision.explanation is not None and decision.explanation.feasible
        assert decision.explanation.bias == decision.bias
        status = offline_job(job, [], 600.0).status
        assert status.placement == decision.to_placement(EPOCH + timedelta(seconds=last["t"]))
    # First-fit asks no model: its placements still go through the same builder.
    first_fit = [j for j in run["jobs"]["first-fit"] if j.placements]
    assert first_fit and all(j.decision is None for j in first_fit)
    status = offline_job(first_fit[0], [], 600.0).status
    assert status.placement is not None and status.placement.throughput_fraction == 1.0


def test_the_run_follows_the_shared_lifecycle_and_measures(run: dict[str, Any]) -> None:
    pols = run["policies"]
    # Nothing to judge without offline jobs: the dashboard's "no attainment", not 100%.
    assert pols["no-harvest"]["sla_attainment"] is None
    for name in ("gleaner", "first-fit", "no-multi-filter"):
        jobs = run["jobs"][name]
        # Every job ends in an API phase reachable by the lifecycle's table.
        assert all(isinstance(j.phase, Phase) for j in jobs)
        assert set(pols[name]["phases"]) <= {p.value for p in Phase}
        for j in jobs:
            if j.phase is Phase.EVICTED:
                assert j.evictions > 0 and j.not_before is not None
            if j.phase is Phase.FAILED:
                assert j.evictions == j.max_evictions
        # Attainment is the shared definition over every judged window of the run.
        met = [True] * sum(j.windows_met for j in jobs)
        met += [False] * (sum(j.windows_total for j in jobs) - len(met))
        assert pols[name]["sla_attainment"] == pytest.approx(sla_attainment(met))
        assert pols[name]["sla_windows"] == len(met)
        # By job size: the same windows, split by each job's GPUs.
        by_gpus = pols[name]["sla_windows_by_gpus"]
        assert set(by_gpus) == {j.gpus for j in jobs}
        for gpus, row in by_gpus.items():
            sized = [j for j in jobs if j.gpus == gpus]
            assert row == {
                "windows": sum(j.windows_total for j in sized),
                "met": sum(j.windows_met for j in sized),
            }
        assert sum(r["met"] for r in by_gpus.values()) == sum(met)
        # Per step, harvested utilization never exceeds the GPUs the jobs hold.
        used = np.array(pols[name]["series"]["offline_used"])
        assert ((used >= 0) & (used <= 1 + 1e-9)).all()


def test_online_load_and_memory_are_the_engine_models() -> None:
    """Each GPU's busy fraction and KV cache come from its request rate through the
    scenario's engine model, its resident memory from the engine's: with one resident
    scale, free memory is exactly what the engine says."""
    engine = MODELS["llama-3.1-8b-h100"]
    cfg = ClusterScenario(
        nodes=2, duration_h=1.0, history_h=0.5, load={"resident_scale": (1.5, 1.5)}
    )
    online = generate_online(cfg, np.random.default_rng(5))
    assert online.requests_per_s is not None
    load = cfg.load
    busy, tokens = engine.online_load(
        online.requests_per_s, load.prompt_tokens, load.output_tokens, load.max_seqs
    )
    np.testing.assert_allclose(online.busy, busy, rtol=1e-12)
    expected = np.clip(
        cfg.usable_gib - 1.5 * engine.resident_gib - engine.kv_gib(1.0) * tokens, 0.0, None
    )
    np.testing.assert_allclose(online.free_gib, expected, rtol=1e-12)
    assert 0.0 < float(online.busy.mean()) < 1.0


def test_a_slower_engine_makes_the_cluster_busier(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same request rates on an engine with a costlier iteration (k5, the weight read)
    or more KV bytes per token: busier GPUs, or less free memory."""
    base = MODELS["llama-3.1-8b-h100"]
    monkeypatch.setitem(MODELS, "slow", replace(base, k5=2 * base.k5))
    monkeypatch.setitem(
        MODELS, "wide-kv", replace(base, kv_bytes_per_token=4 * base.kv_bytes_per_token)
    )
    runs = {
        model: generate_online(
            ClusterScenario(nodes=2, duration_h=2.0, history_h=1.0, model=model),
            np.random.default_rng(3),
        )
        for model in ("llama-3.1-8b-h100", "slow", "wide-kv")
    }
    shipped, slow, wide = runs["llama-3.1-8b-h100"], runs["slow"], runs["wide-kv"]
    assert shipped.requests_per_s is not None and slow.requests_per_s is not None
    np.testing.assert_array_equal(shipped.requests_per_s, slow.requests_per_s)
    assert float(slow.busy.mean()) > float(shipped.busy.mean()) + 0.01
    assert (slow.busy >= shipped.busy).all()
    np.testing.assert_array_equal(wide.busy, shipped.busy)
    assert float(wide.free_gib.mean()) < float(shipped.free_gib.mean()) - 0.1


def test_longer_prompts_make_a_service_busier_on_the_same_requests() -> None:
    """``load.prompt_scale`` draws each service's prompt length where the queue's random
    stream has room for it: the requests and the job queue stay those of the seed."""

    def run(scale: float) -> tuple[Any, float]:
        rng = np.random.default_rng(4)
        cfg = ClusterScenario(
            nodes=2, duration_h=2.0, history_h=1.0, load={"prompt_scale": (scale, scale)}
        )
        return generate_online(cfg, rng), float(rng.random())

    (short, after_short), (long, after_long) = run(1.0), run(2.0)
    assert short.requests_per_s is not None and long.requests_per_s is not None
    np.testing.assert_array_equal(short.requests_per_s, long.requests_per_s)
    assert after_short == after_long
    assert (long.busy >= short.busy).all() and float(long.busy.mean()) > float(short.busy.mean())
    assert float(long.free_gib.mean()) < float(short.free_gib.mean())


def test_moves_go_to_another_node_at_once_and_are_not_sla_evictions() -> None:
    cfg = _cfg(nodes=8, duration_h=12.0, history_h=24.0, policies=["gleaner", "no-move"])
    out = run_cluster(cfg, seed=5, gate_efficiency=0.96)
    assert out["policies"]["no-move"]["moves"] == 0
    moved = 0
    for job in out["jobs"]["gleaner"]:
        for before, after in itertools.pairwise(job.placements):
            if before["end"] == after["t"]:  # a move: off one node and on another at once
                moved += 1
                assert before["node"] != after["node"]
                assert after["t"] - before["t"] >= cfg.move_min_stay_s
    assert moved == out["policies"]["gleaner"]["moves"] >= 1
    assert out["policies"]["gleaner"]["evictions"] == sum(
        j.evictions for j in out["jobs"]["gleaner"]
    )
    # The recorded status says so as the operator's does: moveCount, and a Move record of
    # the node each move left, beside the SLA evictions' records.
    from gleaner.api import LeaveType
    from gleaner.simulator.records import offline_job

    reports = out["policies"]["gleaner"]["_reports"]
    assert sum(j.moves for j in out["jobs"]["gleaner"]) == moved
    for job in out["jobs"]["gleaner"]:
        status = offline_job(job, reports, 600.0).status
        assert status.move_count == job.moves
        moves = [r for r in status.evictions if r.type is LeaveType.MOVE]
        assert [r.node for r in moves] == [p["node"] for p in job.placements if "left" in p]
        assert all("forecast peak" in r.reason for r in moves)
        evicted = [r for r in status.evictions if r.type is LeaveType.SLA_EVICTION]
        assert len(evicted) == job.evictions
        assert [r.time for r in status.evictions] == sorted(r.time for r in status.evictions)


def test_the_sla_margin_is_gleaners_and_leaves_the_papers_placements_alone() -> None:
    def edge_share_and_paper(margin: float) -> tuple[float, list[Any]]:
        cfg = _cfg(nodes=6, policies=["gleaner", "paper"], sla_margin=margin)
        out = run_cluster(cfg, seed=5, gate_efficiency=0.96)
        placed = [(p, j.sla) for j in out["jobs"]["gleaner"] for p in j.placements]
        assert placed
        edge = sum(1 for p, sla in placed if p["predicted"] - sla < 0.15) / len(placed)
        paper = [
            (j.key, p["node"], p["gpus"], p["t"])
            for j in out["jobs"]["paper"]
            for p in j.placements
        ]
        return edge, paper

    edge_best_fit, paper_best_fit = edge_share_and_paper(0.0)
    edge_margin, paper_margin = edge_share_and_paper(0.15)
    # With the margin, a set at the edge of its SLA is placed only where none has the margin.
    assert edge_margin < edge_best_fit
    assert paper_margin == paper_best_fit


def test_planned_exits_send_large_short_horizon_jobs_back_to_the_queue() -> None:
    cfg = _cfg(
        nodes=8,
        duration_h=18.0,
        history_h=24.0,
        policies=["gleaner", "no-planned-exit"],
        jobs={"gpus": {1: 0.5, 4: 0.5}},
    )
    out = run_cluster(cfg, seed=3, gate_efficiency=0.96)
    off = out["policies"]["no-planned-exit"]
    assert off["planned_exits"] == 0
    assert not any(
        p.get("planned_exit") for j in out["jobs"]["no-planned-exit"] for p in j.placements
    )
    on = out["policies"]["gleaner"]
    jobs = out["jobs"]["gleaner"]
    planned = [p for j in jobs for p in j.placements if p.get("planned_exit")]
    exited = [(j, i) for j in jobs for i, p in enumerate(j.placements) if p.get("exited")]
    assert planned, "the shorter admission pass placed no job"
    assert len(exited) == on["planned_exits"] >= 1
    assert on["moves"] >= on["planned_exits"]
    rule = cfg.planned_exit_rule()
    from gleaner.api import LeaveType
    from gleaner.simulator.records import offline_job

    for job, i in exited:
        status = offline_job(job, on["_reports"], 600.0).status
        exits = [r for r in status.evictions if r.type is LeaveType.PLANNED_EXIT]
        assert exits and all(r.reason == rule.exit_reason for r in exits)
        assert status.move_count == job.moves >= len(exits)
        left = job.placements[i]
        # Only a placement the shorter pass made exits, after its minimum stay, and the job
        # is no SLA eviction: it keeps its count and its excluded nodes.
        assert left["planned_exit"] and job.gpus >= rule.min_gpus
        assert left["end"] - left["t"] >= cfg.move_min_stay_s
        assert job.evictions == 0 and not job.excluded
        if i + 1 < len(job.placements):
            assert job.placements[i + 1]["t"] >= left["end"]


def test_the_planned_exit_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="exit_horizon_h"):
        ClusterScenario(planned_exit_admission_h=1.0, planned_exit_horizon_h=2.0)
    with pytest.raises(ValueError):
        ClusterScenario(planned_exit_min_gpus=0)
    rule = ClusterScenario(planned_exit_admission_h=2.0).planned_exit_rule()
    assert rule.admission_horizon_h == 2.0


def test_the_oracle_admits_by_each_gpus_worst_hour_of_the_future() -> None:
    cfg = _cfg()
    online = generate_online(cfg, np.random.default_rng(3))
    eta = GateEfficiency(0.96)
    start, horizon_s = online.t0_step, 3 * 3600.0
    hour = round(3600 / online.step_s)
    s = worst_hour_ahead(online, 1, start, horizon_s, eta)
    rows = online.busy[online.rows(1), start : start + round(horizon_s / online.step_s)]
    whole = node_summary(online, 1, start, start + rows.shape[1], eta)
    assert s.window_seconds == whole.window_seconds
    for g in range(cfg.gpus_per_node):
        # Brute force over the hour-long windows every 15 min: the lowest enabled share,
        # and the busy share of that same hour.
        hours = [
            (eta.enabled(rows[g, w : w + hour]).mean(), rows[g, w : w + hour].mean())
            for w in range(0, rows.shape[1] - hour + 1, hour // 4)
        ]
        enabled, busy = min(hours)
        assert s.offline_enabled_seconds is not None
        assert s.offline_enabled_seconds[g] / s.window_seconds == pytest.approx(enabled)
        assert s.online_busy_seconds[g] / s.window_seconds == pytest.approx(busy)
        # Never idler than the horizon on average.
        assert s.online_busy_seconds[g] >= whole.online_busy_seconds[g] - 1e-6
    assert s.pair_overlap_seconds[0, 1] == whole.pair_overlap_seconds[0, 1]


def test_the_oracle_places_by_the_future_it_sees() -> None:
    cfg = _cfg(policies=["oracle"])
    out = run_cluster(cfg, seed=5, gate_efficiency=0.96)
    online, gate = out["online"], out["gate"]
    # First placements (moves and the planned exit's shorter pass aside), each judged by
    # the future from the forecast's last hourly refresh before it.
    first = [
        (j, j.placements[0])
        for j in out["jobs"]["oracle"]
        if j.placements and j.gpus < cfg.planned_exit_min_gpus
    ]
    assert len(first) >= 5
    horizon_s = cfg.forecast_horizon_h * 3600
    refresh = round(cfg.summary_refresh_s / cfg.step_s)
    for job, placed in first:
        node = online.node_names.index(placed["node"])
        step = online.t0_step + int(placed["t"] / cfg.step_s) // refresh * refresh
        seen = worst_hour_ahead(online, node, step, horizon_s, gate)
        expected = predict(job.profile, job.sla, seen, placed["gpus"]).throughput_fraction
        assert placed["predicted"] == pytest.approx(expected)
