"""The Pod template a ``spec.batch`` OfflineJob runs as: the engine and the runner (pure).

Contract (docs/batch.md, "Submitting a batch as an OfflineJob"). From ``spec.batch``,
:func:`batch_template` builds the PodTemplateSpec the operator would otherwise take from
``spec.template`` (it then adds the binding as for any job: node, GPUs, shim):

- the engine as a *sidecar* (an init container with ``restartPolicy: Always``): vLLM's
  OpenAI server, ``--model <model> --host 127.0.0.1 --port 8000`` plus ``engineArgs``. As a
  sidecar it starts first and is stopped when the runner exits, so the Pod completes when
  the batch does (Kubernetes ≥ 1.29, where sidecar containers are on by default);
- the runner (``python -m gleaner.batch.runner``, from ``runnerImage``) as the one main
  container: input ``/data/<input>``, state ``/data/<output>``, the engine on localhost,
  ``GET /progress`` on :data:`PROGRESS_PORT` for the operator;
- the claim ``claimName`` mounted at :data:`DATA_DIR` in both (the engine may read model
  files from it too).

:func:`template_of` is what the operator calls: the job's own template, or this one. A job
the Batch API created (annotation ``gleaner.dev/batch-api``: its batch's URL) runs the
runner in remote mode (``--remote <url>``: input fetched from the Batch API, results
uploaded to it; gleaner.batch.remote), stopping at ``spec.batch.deadline`` (``--stop-at``:
the end of the batch's completion window, when it expires with its answers so far).
"""

from __future__ import annotations

import posixpath
from datetime import UTC, datetime
from typing import Any

from gleaner.api import BatchSpec, OfflineJob
from gleaner.api.contract import ANNOTATION_BATCH_API

ENGINE_CONTAINER = "engine"
RUNNER_CONTAINER = "batch-runner"
DATA_VOLUME = "batch-data"
DATA_DIR = "/data"
ENGINE_PORT = 8000
PROGRESS_PORT = 8090
PROGRESS_PATH = "/progress"


def batch_template(batch: BatchSpec, remote: str | None = None) -> dict[str, Any]:
    """The PodTemplateSpec of a batch job (see the module docstring); ``remote``: the
    batch's URL in the Batch API, for the runner's remote mode."""
    mount = {"name": DATA_VOLUME, "mountPath": DATA_DIR}
    engine = {
        "name": ENGINE_CONTAINER,
        "image": batch.engine_image,
        "args": [
            "--model",
            batch.model,
            "--host",
            "127.0.0.1",
            "--port",
            str(ENGINE_PORT),
            *batch.engine_args,
        ],
        "restartPolicy": "Always",
        "volumeMounts": [mount],
        "startupProbe": {
            "httpGet": {"path": "/v1/models", "port": ENGINE_PORT, "host": "127.0.0.1"},
            "periodSeconds": 5,
            "failureThreshold": 360,  # loading a model can take many minutes
        },
    }
    runner = {
        "name": RUNNER_CONTAINER,
        "image": batch.runner_image,
        "command": ["python", "-m", "gleaner.batch.runner"],
        "args": [
            "--input",
            posixpath.join(DATA_DIR, batch.input),
            "--state-dir",
            posixpath.join(DATA_DIR, batch.output),
            "--engine-url",
            f"http://127.0.0.1:{ENGINE_PORT}",
            "--concurrency",
            str(batch.concurrency),
            "--progress-port",
            str(PROGRESS_PORT),
            *(["--remote", remote] if remote else []),
            *(["--stop-at", _rfc3339(batch.deadline)] if remote and batch.deadline else []),
        ],
        "ports": [{"name": "progress", "containerPort": PROGRESS_PORT}],
        "volumeMounts": [mount],
    }
    return {
        "metadata": {},
        "spec": {
            "initContainers": [engine],
            "containers": [runner],
            "volumes": [
                {"name": DATA_VOLUME, "persistentVolumeClaim": {"claimName": batch.claim_name}}
            ],
            "restartPolicy": "Never",
        },
    }


def _rfc3339(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def template_of(job: OfflineJob) -> dict[str, Any]:
    """The Pod template the job runs: ``spec.template``, or the one ``spec.batch`` implies."""
    if job.spec.template is not None:
        return job.spec.template
    if job.spec.batch is None:  # the model's validator rules this out
        raise ValueError("an OfflineJob needs spec.template or spec.batch")
    return batch_template(job.spec.batch, job.metadata.annotations.get(ANNOTATION_BATCH_API))


def progress_url(pod: dict[str, Any]) -> str | None:
    """Where the runner of a batch Pod serves its progress; None before the Pod has an IP."""
    ip = (pod.get("status") or {}).get("podIP")
    if not ip:
        return None
    host = f"[{ip}]" if ":" in str(ip) else str(ip)  # an IPv6 address needs brackets in a URL
    return f"http://{host}:{PROGRESS_PORT}{PROGRESS_PATH}"
