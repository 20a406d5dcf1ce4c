"""gleaner.cli.why: an OfflineJob's phase explained in words, from its spec and status only."""

from __future__ import annotations

from typing import Any

import pytest

from gleaner.api import Phase
from gleaner.cli.main import main as gleaner_main
from gleaner.cli.why import PHASE_MEANING, explain_job, explanation_json
from gleaner.scheduler.lifecycle import PlannedExitRule

T = "2026-01-01T09:00:00Z"


def job(status: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "gleaner.dev/v1alpha1",
        "kind": "OfflineJob",
        "metadata": {"name": "summaries", "namespace": "batch"},
        "spec": {"gpus": 2, "throughputSLA": 0.5, "maxEvictions": 3},
        "status": status,
    }


def cond(type_: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": T,
    }


def text(lines: list[Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in lines:
        out.setdefault(line.label, []).append(line.text)
    return out


def test_every_phase_has_a_meaning() -> None:
    assert set(PHASE_MEANING) == set(Phase)


def test_an_unschedulable_job_gives_the_schedulers_reasons_and_the_next_attempt() -> None:
    reasons = "0/3 nodes are available: 3 didn't match gpuSelector node labels."
    lines = text(
        explain_job(
            job(
                {
                    "phase": "Unschedulable",
                    "message": reasons,
                    "nextAttemptAfter": T,
                    "conditions": [cond("Scheduled", "False", "Unschedulable", reasons)],
                }
            )
        )
    )
    assert lines["job"] == ["batch/summaries (2 GPU(s), throughputSLA 0.5)"]
    assert lines["phase"][0].startswith("Unschedulable: no node can meet its SLA now")
    assert lines["message"] == [reasons]
    assert lines["next attempt"] == ["not before 2026-01-01 09:00:00Z"]
    assert lines["condition"] == [f"Scheduled=False (Unschedulable): {reasons}"]
    assert "placed on" not in lines


def test_a_running_job_shows_its_prediction_observation_and_evictions() -> None:
    status = {
        "phase": "Running",
        "placement": {
            "node": "gpu-node-7",
            "gpuIndices": [2, 3],
            "compute": 0.8,
            "memory": 0.9,
            "multiGPU": 0.95,
            "throughputFraction": 0.684,
            "decidedAt": T,
        },
        "observed": {"throughputFraction": 0.41, "windowSeconds": 600, "updatedAt": T},
        "evictionCount": 1,
        "evictions": [
            {
                "time": "2026-01-01T07:00:00Z",
                "node": "gpu-node-3",
                "gpuIndices": [0, 1],
                "reason": "missed SLA 0.50 in 3 of the last 5 windows",
                "sla": 0.5,
                "predictedThroughputFraction": 0.7,
                "observedThroughputFraction": 0.38,
            }
        ],
        "excludedNodes": ["gpu-node-3"],
    }
    lines = text(explain_job(job(status)))
    assert lines["placed on"] == ["gpu-node-7 GPU(s) 2,3 at 2026-01-01 09:00:00Z"]
    assert lines["predicted"] == ["0.68 = compute 0.80 x memory 0.90 x multi-GPU 0.95 >= SLA 0.5"]
    assert lines["observed"][0].startswith("0.41 over the last 600s window (below SLA 0.5;")
    assert lines["evictions"] == ["1 of maxEvictions 3"]
    assert lines["evicted"] == [
        "2026-01-01 07:00:00Z from gpu-node-3: missed SLA 0.50 in 3 of the last 5 windows "
        "(predicted 0.70, observed 0.38)"
    ]
    assert lines["kept off"] == ["gpu-node-3"]


PLACEMENT = {
    "node": "gpu-node-5",
    "gpuIndices": [0, 1, 2, 3],
    "compute": 0.8,
    "memory": 0.9,
    "multiGPU": 0.95,
    "throughputFraction": 0.684,
    "decidedAt": T,
}


def test_a_planned_exit_placement_says_what_will_happen() -> None:
    lines = text(explain_job(job({"phase": "Running", "placement": PLACEMENT})))
    assert "planned exit" not in lines
    planned = {"phase": "Running", "placement": {**PLACEMENT, "plannedExit": True}}
    lines = text(explain_job(job(planned)))
    assert lines["planned exit"] == [
        "placed for the quiet hours before a forecast peak: it goes back to the queue, "
        "progress kept, when gpu-node-5 no longer admits it over the next hour and no other "
        "node does"
    ]
    # a finished job's placement is where it ran: nothing will happen any more
    done = text(explain_job(job({**planned, "phase": "Succeeded"})))
    assert "planned exit" not in done and done["placed on"]


def test_a_job_that_left_by_its_planned_exit_shows_the_move() -> None:
    reason = PlannedExitRule().exit_reason  # what the operator writes
    assert reason.startswith("planned exit: its node no longer admits it over the next 1 h")
    status = {
        "phase": "Unschedulable",
        "moveCount": 1,
        "evictions": [
            {
                "time": "2026-01-01T07:00:00Z",
                "node": "gpu-node-5",
                "gpuIndices": [0, 1, 2, 3],
                "reason": reason,
                "sla": 0.5,
                "predictedThroughputFraction": 0.68,
                "observedThroughputFraction": 0.66,
            }
        ],
    }
    lines = text(explain_job(job(status)))
    assert "evictions" not in lines and "evicted" not in lines
    assert lines["moves"] == [
        "1 (off a node before a forecast peak, planned exits included; not SLA evictions)"
    ]
    assert lines["exited"] == [
        f"2026-01-01 07:00:00Z from gpu-node-5: {reason} (predicted 0.68, observed 0.66)"
    ]


def test_each_record_is_labelled_by_how_the_job_left() -> None:
    def record(node: str, reason: str, type_: str | None) -> dict[str, object]:
        rec: dict[str, object] = {
            "time": "2026-01-01T07:00:00Z", "node": node, "gpuIndices": [0], "reason": reason,
            "sla": 0.5, "predictedThroughputFraction": 0.6, "observedThroughputFraction": 0.4,
        }  # fmt: skip
        if type_ is not None:
            rec["type"] = type_
        return rec

    status = {
        "phase": "Pending",
        "evictionCount": 1,
        "moveCount": 2,
        "evictions": [
            record("a", "missed SLA 0.50", "SLAEviction"),
            record("b", "a forecast peak on b", "Move"),
            record("c", "its node no longer admits it", "PlannedExit"),
        ],
    }
    lines = text(explain_job(job(status)))
    assert [line.split(" from ")[1].split(":")[0] for line in lines["evicted"]] == ["a"]
    assert [line.split(" from ")[1].split(":")[0] for line in lines["moved"]] == ["b"]
    assert [line.split(" from ")[1].split(":")[0] for line in lines["exited"]] == ["c"]


def test_an_invalid_job_names_the_field() -> None:
    field = "spec.profileFrom.name: ConfigMap batch/profiles not found"
    lines = text(
        explain_job(
            job({"phase": "Invalid", "conditions": [cond("Valid", "False", "InvalidSpec", field)]})
        )
    )
    assert lines["invalid"] == [field]


def test_json_has_the_same_lines_and_a_bad_status_is_one_line() -> None:
    body = job({"phase": "Pending"})
    out = explanation_json(body)
    assert out["job"] == "batch/summaries" and out["phase"] == "Pending"
    assert [line["label"] for line in out["lines"]] == ["job", "phase"]
    with pytest.raises(ValueError, match=r"^status\.phase: "):
        explain_job(job({"phase": "Sleeping"}))


def test_the_plugin_is_installed_and_shares_the_report_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from importlib import metadata

    from gleaner.cli.kubectl import main, plugin
    from gleaner.cli.report import command as report

    scripts = {e.name: e.value for e in metadata.entry_points(group="console_scripts")}
    assert scripts["kubectl-gleaner"] == "gleaner.cli.kubectl:main"
    assert plugin.commands["evictions"] is report.commands["evictions"]
    assert main(["--help"]) == 0
    assert "why" in capsys.readouterr().out
    assert main(["why"]) == 2
    assert capsys.readouterr().err.startswith("error: Missing argument 'JOB'")
    assert gleaner_main(["--help"]) == 0
