"""docs/troubleshooting.md and docs/upgrade.md, and README's install steps, stay true.

Contract: every scheduler reason the troubleshooting table explains is one the scheduler or
the operator really words (so a user can match the message they see); the finalizer, labels
and CRD names the commands use are the contract's; README's step 3 creates every
PersistentVolumeClaim and Secret the example job it applies refers to.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from gleaner.api import contract

ROOT = Path(__file__).resolve().parents[1]
TROUBLE = (ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
UPGRADE = (ROOT / "docs" / "upgrade.md").read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")

REASONS = (
    "nodes are available",
    "node unavailable: ",
    "cordoned",
    "node not ready",
    "didn't match gpuSelector node labels",
    "GPU product not reported",
    "no free GPU",
    "free GPUs",
    "aligned free GPUs",
    "runs an uninstrumented process",
    "insufficient harvestable memory",
    "predicted throughput below SLA (best ",
    "missed its SLA there before",
)


def sources(*folders: str) -> str:
    return "\n".join(
        p.read_text(encoding="utf-8") for f in folders for p in sorted((ROOT / f).rglob("*.py"))
    )


def test_every_reason_explained_is_one_the_scheduler_words() -> None:
    code = sources("scheduler/gleaner", "operator/gleaner")
    for reason in REASONS:
        assert reason in TROUBLE, reason
        assert reason in code, reason


def test_commands_use_the_contract_names() -> None:
    finalizer = contract.FINALIZER
    assert f"`{finalizer}`" in TROUBLE and finalizer in UPGRADE
    reports = f"-l {contract.LABEL_REPORT}={contract.REPORT_SLA_EVICTION}"
    assert reports in UPGRADE
    assert f"-l {contract.LABEL_ROLE}={contract.ROLE_OFFLINE}" in UPGRADE
    assert f"-l {contract.LABEL_JOB}=JOB" in TROUBLE
    for crd in sorted((ROOT / "crds").glob("*.yaml")):
        assert crd.name.removesuffix(".yaml").split(".")[0] in UPGRADE
    chart = "\n".join(p.read_text() for p in (ROOT / "helm" / "gleaner").rglob("*.yaml"))
    for name in re.findall(r"kubectl delete crd ([\w. -]+?)\s+#", UPGRADE)[0].split():
        assert name in chart


def refs(obj: Any, key: str) -> list[Any]:
    """Every value under ``key`` anywhere in ``obj``."""
    found: list[Any] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == key:
                found.append(v)
            found += refs(v, key)
    elif isinstance(obj, list):
        for v in obj:
            found += refs(v, key)
    return found


def test_readme_step_3_creates_what_the_example_needs() -> None:
    install = README.split("## Install on a real cluster", 1)[1].split("\n## ", 1)[0]
    applied = re.findall(r"kubectl apply -f (examples/\S+\.yaml)", install)
    assert applied
    for path in applied:
        for doc in yaml.safe_load_all((ROOT / path).read_text()):
            claims = refs(doc, "persistentVolumeClaim")
            secrets = refs(doc, "secretKeyRef")
            assert claims or secrets
            for claim in claims:
                assert f'"name": "{claim["claimName"]}"' in install
                assert "PersistentVolumeClaim" in install
            for secret in secrets:
                assert f"create secret generic {secret['name']} " in install
                assert f"`{secret['key']}`" in install
