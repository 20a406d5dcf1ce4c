"""docs/formats.md works as written: its examples parse and its commands run.

Contract: every ``$ gleaner ...`` line of the page runs from the repository root with exit
status 0; ``--write-trace`` rewrites the shipped sample trace byte for byte (checked in a
temporary folder, the shipped file is never touched); the sample trace is a valid trace of
three 4-GPU nodes; predict and place on it say what the page says; and the page's CSV,
profile, eviction-report and NodeTrace examples are accepted by the code that reads each
format.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from gleaner.api import EvictionReportDocument, NodeTrace, Profile
from gleaner.cli.main import main
from gleaner.perfmodel import read_trace_frame, validate_trace_frame
from gleaner.perfmodel.frames import summarize_samples

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "formats.md").read_text(encoding="utf-8")
SAMPLE = ROOT / "examples" / "traces" / "sample-trace.csv"
SCENARIO = ROOT / "examples" / "traces" / "sample-cluster.yaml"


def blocks(language: str) -> list[str]:
    """The bodies of the page's fenced blocks of ``language``."""
    return re.findall(rf"^```{language}\n(.*?)^```", DOC, re.MULTILINE | re.DOTALL)


def gleaner_commands() -> list[list[str]]:
    lines = [
        line[2:]
        for block in blocks("console")
        for line in block.splitlines()
        if line.startswith("$ gleaner ")
    ]
    return [shlex.split(line)[1:] for line in lines]


COMMANDS = gleaner_commands()


def test_the_page_has_the_sample_commands() -> None:
    verbs = [argv[0] for argv in COMMANDS]
    assert verbs.count("simulate") == 2 and "predict" in verbs and "place" in verbs
    assert any("--write-trace" in argv for argv in COMMANDS)


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: " ".join(argv[:2]))
def test_every_command_of_the_page_runs(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    if "--write-trace" in argv:
        # The documented command rewrites the shipped file; run it into tmp_path instead.
        i = argv.index("--write-trace")
        argv = [*argv[: i + 1], str(tmp_path / "sample-trace.csv"), *argv[i + 2 :]]
        assert main(argv) == 0
        assert (tmp_path / "sample-trace.csv").read_bytes() == SAMPLE.read_bytes()
    else:
        assert main(argv) == 0


def test_the_sample_trace_is_three_nodes_of_four_gpus() -> None:
    frame = validate_trace_frame(read_trace_frame(SAMPLE))
    assert len(frame) == 2880
    summaries = summarize_samples(frame)
    assert sorted(summaries) == ["gpu-node-0000", "gpu-node-0001", "gpu-node-0002"]
    assert all(len(s.gpus) == 4 for s in summaries.values())


def test_predict_and_place_on_the_sample_say_what_the_page_says(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    trace = ["--trace", "examples/traces/sample-trace.csv", "--format", "json"]
    job = "examples/mistral-7b-profile-configmap.yaml"
    assert main(["predict", "--job", job, "--node", "gpu-node-0001", "--gpus", "0", *trace]) == 0
    prediction = json.loads(capsys.readouterr().out)
    assert prediction["feasible"] is True
    assert prediction["sla"] == pytest.approx(0.6)
    assert prediction["throughput_fraction"] == pytest.approx(0.78, abs=0.01)
    assert "about 0.78" in DOC
    assert main(["place", "--jobs", "examples", *trace]) == 0
    text = capsys.readouterr().out
    assert "mistral-7b-ticket-triage" in text
    assert "GPU product not reported" in text and "gpuSelector" in text


def test_the_shortest_csv_is_a_valid_trace(tmp_path: Path) -> None:
    (csv,) = blocks("csv")
    (tmp_path / "t.csv").write_text(csv)
    summaries = summarize_samples(read_trace_frame(tmp_path / "t.csv"))
    assert list(summaries) == ["node-a"]
    assert len(summaries["node-a"].gpus) == 2


def test_the_profile_example_is_a_profile() -> None:
    profiles = [b for b in blocks("yaml") if "standaloneTokensPerSecond" in b]
    assert len(profiles) == 1
    profile = Profile.model_validate(yaml.safe_load(profiles[0]))
    assert profile.required_memory_gi_b == 48


def test_the_eviction_report_example_round_trips() -> None:
    (report,) = blocks("json")
    raw = json.loads(report)
    document = EvictionReportDocument.parse(report)
    assert document.serialize() == raw
    # The page's key table lists every key of the example.
    for key in raw:
        assert f"`{key}`" in DOC


def test_the_nodetrace_example_is_a_nodetrace() -> None:
    (manifest,) = [b for b in blocks("yaml") if "kind: NodeTrace" in b]
    trace = NodeTrace.model_validate(yaml.safe_load(manifest))
    assert trace.metadata.name == "gpu-node-3"


def test_the_scenario_names_the_command_that_wrote_the_sample() -> None:
    text = SCENARIO.read_text()
    assert "--write-trace examples/traces/sample-trace.csv" in text
