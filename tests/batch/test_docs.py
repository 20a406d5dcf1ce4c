"""docs/batch.md stays true: its OfflineJob example is valid for the models and the CRD, and
the runner flags it names are the runner's."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from gleaner.api import OfflineJob
from gleaner.api.schema_validation import validate_object
from gleaner.batch.runner import _parser

DOC = (Path(__file__).resolve().parents[2] / "docs" / "batch.md").read_text(encoding="utf-8")


def test_the_offlinejob_example_is_valid() -> None:
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", DOC, re.DOTALL) if "OfflineJob" in b]
    manifest = yaml.safe_load(block)
    assert validate_object(manifest) == []
    job = OfflineJob.model_validate(manifest)
    assert job.spec.batch is not None and job.spec.batch.deadline is not None


def test_the_runner_flags_in_the_doc_exist() -> None:
    flags = set(re.findall(r"`(--[a-z-]+)", DOC)) - {"--model", "--host", "--port"}
    known = {opt for action in _parser()._actions for opt in action.option_strings}
    assert flags and flags <= known, flags - known
