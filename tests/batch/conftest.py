"""Shared builders of the batch tests: a spec.batch OfflineJob manifest."""

from __future__ import annotations

from typing import Any

from gleaner.testing.kube import offlinejob_manifest


def batch_manifest(name: str = "summaries", **batch: Any) -> dict[str, Any]:
    """An OfflineJob with spec.batch instead of a template (inline profile, 1000 tok/s)."""
    manifest = offlinejob_manifest(name, namespace="team-a", sla=0.2, standalone=1000.0)
    del manifest["spec"]["template"]
    manifest["spec"]["batch"] = {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "engineImage": "vllm/vllm-openai:v0.8.5",
        "claimName": "batch-data",
        "input": "jobs/in.jsonl",
        "output": "jobs/run-1",
        **batch,
    }
    manifest["metadata"]["uid"] = "uid-1"
    return manifest
