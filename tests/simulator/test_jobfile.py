"""gleaner.simulator.jobfile: the simulated offline queue written as OfflineJob manifests.

The manifests validate as the API's OfflineJob, carry the very sizes, SLAs and profiles the
cluster simulation draws for the seed, and read back through ``gleaner backtest``'s loader
to the same job profiles.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gleaner.api import OfflineJob
from gleaner.cli.backtest import load_queue
from gleaner.simulator.cluster import make_jobs
from gleaner.simulator.cluster_scenario import ClusterScenario
from gleaner.simulator.jobfile import job_manifests, write_job_manifests

SMALL = ClusterScenario(nodes=2, gpus_per_node=4, history_h=0, duration_h=2, step_s=60)


def test_manifests_are_the_queue_the_simulation_draws() -> None:
    drawn = make_jobs(SMALL, np.random.default_rng(5))
    docs = job_manifests(SMALL, 5)
    assert len(docs) == len(drawn) > 0
    for doc, job in zip(docs, drawn, strict=True):
        parsed = OfflineJob.model_validate(doc)
        assert f"{parsed.metadata.namespace}/{parsed.metadata.name}" == job.key
        assert parsed.spec.gpus == job.gpus
        assert parsed.spec.throughput_sla == job.sla
        assert parsed.spec.sla_window_seconds == job.sla_window_s
    assert len(job_manifests(SMALL, 5, count=2)) == 2
    assert job_manifests(SMALL, 6) != docs


def test_written_manifests_read_back_to_the_same_profiles(tmp_path: Path) -> None:
    drawn = make_jobs(SMALL, np.random.default_rng(3))
    path = tmp_path / "jobs.yaml"
    write_job_manifests(job_manifests(SMALL, 3), path)
    requests, profiles = load_queue([path])
    assert [r.key for r in requests] == [j.key for j in drawn]
    for job in drawn:
        profile, sla = profiles[job.key]
        assert sla == job.sla
        assert profile == job.profile
