"""`gleaner operator` and `gleaner report evictions`: bad input is one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from gleaner.cli.main import main


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--namespace", "a", "--all-namespaces"], "mutually exclusive"),
        (["--sla-window", "soon"], "--sla-window: not a duration"),
        (["--sla-violations", "3"], "--sla-violations: expected K/N"),
        (["--sla-violations", "4/2"], "SLA monitor: violation_windows"),
        (["--http-port", "70000"], "--http-port"),
        (["--webhook-port", "70000"], "--webhook-port: 70000 is not a port"),
        (["--webhook-port", "9443"], "--webhook-port needs --webhook-cert-dir"),
        (
            ["--webhook-port", "9443", "--webhook-cert-dir", "/nonexistent"],
            "--webhook-cert-dir: no tls.crt or tls.key in /nonexistent",
        ),
        (
            [
                *("--batch-api-port", "8081", "--batch-api-dir", "/tmp"),
                *("--batch-api-url", "http://x", "--batch-api-cert-dir", "/nonexistent"),
            ],
            "--batch-api-cert-dir: no tls.crt or tls.key in /nonexistent",
        ),
        (["--requeue-interval", "0"], "--requeue-interval must be positive"),
        (["--peering-priority", "high"], "--peering-priority: not an integer"),
        (["--peering-priority", "0"], "--peering-priority: must be between 1 and"),
        (["--profiling-node-selector", "pool"], "--profiling-node-selector: expected KEY=VALUE"),
        (
            ["--profiling-node-selector", "pool=p", "--profiling-tolerations", "[{"],
            "--profiling-tolerations: not JSON",
        ),
        (
            ["--profiling-node-selector", "pool=p", "--profiling-tolerations", '{"key": "a"}'],
            "--profiling-tolerations: expected a JSON list of Toleration objects",
        ),
        (
            ["--profiling-tolerations", '[{"key": "a", "operator": "Exists"}]'],
            "--profiling-tolerations needs --profiling-node-selector",
        ),
    ],
)
def test_operator_bad_flags(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["operator", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_report_bad_since_and_missing_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "evictions", "--since", "-5h"]) == 2
    assert "--since" in capsys.readouterr().err
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nope.yaml"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["report", "evictions"]) == 2
    assert capsys.readouterr().err.startswith("error: no cluster configuration")


def test_help_lists_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["operator", "--help"]) == 0
    out = capsys.readouterr().out
    for flag in (
        "--namespace",
        "--all-namespaces",
        "--http-port",
        "--prometheus-url",
        "--peering",
        "--standalone",
        "--peering-priority",
        "--webhook-port",
        "--webhook-cert-dir",
        "--verbose",
    ):
        assert flag in out
