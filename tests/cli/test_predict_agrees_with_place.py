"""``gleaner predict`` and ``gleaner place`` never disagree on the same inputs.

Each job of the repository's examples (and a few more) is placed alone, with and without a
nodes file, on a two-node trace; ``predict`` is then asked about every GPU set of every
node: some set is feasible exactly when ``place`` placed the job, and on the set ``place``
chose ``predict`` gives the same throughput fraction.
"""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from gleaner.cli.main import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NODES = """\
nodes:
  - name: h100-a
    labels: {gleaner.dev/pool: h100-serving}
    gpuProduct: NVIDIA H100 80GB HBM3
    gpuMemoryGiB: 80
  - name: a100-b
    gpuProduct: NVIDIA A100-SXM4-80GB
"""
EXTRA = """\
apiVersion: gleaner.dev/v1alpha1
kind: OfflineJob
metadata: {{name: {name}, namespace: batch}}
spec:
  gpus: {gpus}
  throughputSLA: {sla}
  gpuSelector: {{products: [NVIDIA A100-SXM4-80GB]}}
  template: {{spec: {{containers: [{{name: w, image: vllm}}]}}}}
  profile:
    standaloneTokensPerSecond: 1000
    requiredMemoryGiB: 40
    memoryCurve: [{{memoryGiB: 10, tokensPerSecond: 200}}, {{memoryGiB: 40, tokensPerSecond: 1000}}]
    memoryDeficitCoefficient: 0
"""
# a100-pair fails the pair overlap and a100-hard its SLA on every node, nodes file or not.
EXPECTED = {
    True: ["a100-one", "llama-3.1-8b-batch", "mistral-7b-profile-configmap", "qwen2.5-32b-tp2"],
    False: ["mistral-7b-profile-configmap"],
}


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    rows = []
    for t in range(60):
        for gpu in range(4):  # busy one sample in five, GPUs 0-1 together, 2-3 together
            busy = float(t % 5 == gpu // 2)
            rows.append((1_700_000_000.0 + 10 * t, "h100-a", gpu, busy, 60.0 + 5 * (t % 3)))
        for gpu in range(2):  # busy half the time, at different times: pairs fail P_multi
            rows.append((1_700_000_000.0 + 10 * t, "a100-b", gpu, float(t % 2 == gpu), 50.0))
    trace = tmp_path / "trace.csv"
    pd.DataFrame(
        rows, columns=["timestamp", "node", "gpu", "online_busy", "free_memory_gib"]
    ).to_csv(trace, index=False)
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(NODES)
    out = {"trace": trace, "nodes": nodes}
    for name, gpus, sla in (("a100-one", 1, 0.4), ("a100-pair", 2, 0.4), ("a100-hard", 1, 0.9)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(EXTRA.format(name=name, gpus=gpus, sla=sla))
        out[name] = path
    for path in EXAMPLES.glob("*.yaml"):
        spec = (yaml.safe_load_all(path.read_text()).__next__() or {}).get("spec") or {}
        if (spec.get("profileFrom") or {}).get("auto"):
            continue  # profiled on submit: nothing to predict with until the operator has
        out[path.stem] = path
    return out


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    rc = main(args)
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    data: dict[str, Any] = json.loads(captured.out)
    return data


@pytest.mark.parametrize("with_nodes", [True, False])
def test_predict_and_place_agree(
    inputs: dict[str, Path], with_nodes: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ["--nodes", str(inputs["nodes"])] if with_nodes else []
    trace = ["--trace", str(inputs["trace"]), *extra, "--format", "json"]
    placed_names: list[str] = []
    for name, job in inputs.items():
        if name in ("trace", "nodes"):
            continue
        placed = _run(["place", "--jobs", str(job), *trace], capsys)
        gpus = 2 if "pair" in name or "tp2" in name else 1
        feasible_sets = []
        for node, size in (("h100-a", 4), ("a100-b", 2)):
            for subset in combinations(range(size), gpus):
                gpus_arg = ",".join(map(str, subset))
                verdict = _run(
                    ["predict", "--job", str(job), "--node", node, "--gpus", gpus_arg, *trace],
                    capsys,
                )
                if verdict["feasible"]:
                    feasible_sets.append((node, list(subset), verdict["throughput_fraction"]))
        if placed["placements"]:
            (p,) = placed["placements"]
            placed_names.append(name)
            chosen = [f for f in feasible_sets if (f[0], f[1]) == (p["node"], p["gpus"])]
            assert chosen, (name, p, feasible_sets)
            assert chosen[0][2] == pytest.approx(p["throughput_fraction"])
        else:
            assert feasible_sets == [], (name, placed["unschedulable"])
    # Both outcomes occur; the nodes file makes the examples placeable.
    assert sorted(placed_names) == EXPECTED[with_nodes]
