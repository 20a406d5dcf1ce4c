"""The dashboard judges a job's SLA as the SLA monitor does: over its spec.slaWindow."""

from __future__ import annotations

import copy
from datetime import datetime

from gleaner.dashboard.build import build_dashboard, record_monitor
from gleaner.dashboard.model import ClusterRecord, Point, SlaMonitorSettings
from gleaner.scheduler.measures import placement_met
from gleaner.testing.dashboard import example_record


def _record_with(samples: list[float], settings: SlaMonitorSettings | None) -> ClusterRecord:
    """The example record with 'translate' (Running, SLA 0.45) observed once a minute."""
    record = example_record()
    jobs = []
    placed_at = 0.0
    for job in record.offline_jobs:
        job = copy.deepcopy(job)
        if job["metadata"]["name"] == "translate":
            job["spec"]["slaWindow"] = "30m"
            job["status"]["observed"]["throughputFraction"] = samples[-1]
            decided = job["status"]["placement"]["decidedAt"]
            placed_at = datetime.fromisoformat(decided.replace("Z", "+00:00")).timestamp()
        jobs.append(job)
    record.offline_jobs = jobs
    series = [Point(t=placed_at + 60.0 * (i + 1), v=v) for i, v in enumerate(samples)]
    record.job_series = {**record.job_series, "batch/translate": series}
    record.sla_monitor = settings
    return record


SETTINGS = SlaMonitorSettings(window_seconds=60.0, grace_seconds=0.0, tolerance=0.02)


def test_a_short_dip_in_a_met_window_is_no_miss_and_a_missed_window_is_one() -> None:
    dip = build_dashboard(_record_with([0.6] * 30 + [0.1], SETTINGS)).snapshot
    job = dip.job("batch", "translate")
    assert job is not None and job.observed == 0.1 and job.meets_sla is True
    slow = build_dashboard(_record_with([0.2] * 30 + [0.9], SETTINGS)).snapshot
    job = slow.job("batch", "translate")
    assert job is not None and job.meets_sla is False
    # The card counts the same verdicts.
    assert dip.summary.sla_attainment is not None and slow.summary.sla_attainment is not None
    assert dip.summary.sla_attainment > slow.summary.sla_attainment


def test_before_a_window_closes_the_newest_sample_decides() -> None:
    snap = build_dashboard(_record_with([0.6] * 10 + [0.1], SETTINGS)).snapshot
    job = snap.job("batch", "translate")
    assert job is not None and job.meets_sla is False


def test_the_records_monitor_settings_are_the_ones_judged_with() -> None:
    record = _record_with([0.6] * 30 + [0.1], SETTINGS)
    monitor = record_monitor(record)
    assert (monitor.window_seconds, monitor.grace_seconds, monitor.tolerance) == (60.0, 0.0, 0.02)
    # With a 20-minute grace the only window (0-30 min after placement) has not closed by
    # the 31st minute: the newest sample (a dip) decides.
    graced = SETTINGS.model_copy(update={"grace_seconds": 1200.0})
    job = build_dashboard(_record_with([0.6] * 30 + [0.1], graced)).snapshot.job(
        "batch", "translate"
    )
    assert job is not None and job.meets_sla is False
    assert placement_met([(60.0, 0.6)], 0.45, 0.0, 1800.0, record_monitor(record)) is None
    # Without settings: the monitor's defaults.
    assert record_monitor(example_record()).window_seconds == 60.0
