"""The official ``openai`` client, unchanged, against the Batch API app.

The Kubernetes side is a small in-memory stand-in (TokenReview by a token table,
SubjectAccessReview by a rights table, OfflineJobs and ConfigMaps in a dict); the same
flow against the real API server is e2e/controlplane/test_batch_api_real.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import httpx
import openai
import pytest
import yaml

from gleaner.api import OfflineJob
from gleaner.api.contract import ANNOTATION_BATCH_API
from gleaner.batch.pod import template_of
from gleaner.batch.runner import main as runner_main
from gleaner.clients.kube import KubeError, SyncKubeClient
from gleaner.operator.batchapi.app import build_batch_app
from gleaner.operator.batchapi.files import FileStore
from gleaner.operator.batchapi.objects import EXPIRY_GRACE_SECONDS
from gleaner.operator.batchapi.server import ExpiryTimer
from gleaner.testing.dashboard import serving
from gleaner.testing.openai_engine import FakeOpenAIEngine, batch_api_spec

NS = "team"
SPEC = batch_api_spec("m")
LINES = [
    {
        "custom_id": f"r{i}",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    }
    for i in range(3)
]


class FakeKube:
    """What the Batch API asks of Kubernetes, in memory."""

    def __init__(self) -> None:
        self.users = {
            "alice": "system:serviceaccount:team:alice",
            "bob": "system:serviceaccount:team:bob",
            "runner": "system:serviceaccount:team:default",
            "stranger": "system:serviceaccount:other:default",
        }
        self.rights = {("system:serviceaccount:team:alice", NS)}
        self.objects: dict[str, dict[str, Any]] = {
            f"/api/v1/namespaces/{NS}/configmaps/batch-api": {
                "data": {"spec.yaml": yaml.safe_dump(SPEC)}
            }
        }
        self.reviews: list[str] = []
        self.refuse_jobs = False

    def get(self, path: str) -> dict[str, Any] | None:
        return self.objects.get(path)

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path.endswith("/tokenreviews"):
            self.reviews.append("token")
            user = self.users.get(body["spec"]["token"])
            return {"status": {"authenticated": user is not None, "user": {"username": user}}}
        if path.endswith("/subjectaccessreviews"):
            spec = body["spec"]
            self.reviews.append(spec["resourceAttributes"]["verb"])
            allowed = (spec["user"], spec["resourceAttributes"]["namespace"]) in self.rights
            return {"status": {"allowed": allowed}}
        if self.refuse_jobs:
            raise KubeError(422, "OfflineJob is invalid", path)
        self.objects[f"{path}/{body['metadata']['name']}"] = body
        return body

    def delete(self, path: str) -> bool:
        return self.objects.pop(path, None) is not None


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[str, FakeKube]]:
    kube = FakeKube()
    store = FileStore(tmp_path / "files", max_file_bytes=1 << 20)
    app = build_batch_app(store, cast(SyncKubeClient, kube), "http://gleaner-operator:8081")
    with serving(app) as url:
        yield url, kube


def client(url: str, token: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=token, max_retries=0)


def jsonl() -> bytes:
    return "".join(json.dumps(line) + "\n" for line in LINES).encode()


def test_the_openai_client_uploads_creates_retrieves_lists_and_cancels(
    api: tuple[str, FakeKube],
) -> None:
    url, kube = api
    alice = client(url, "alice")
    uploaded = alice.files.create(file=("in.jsonl", jsonl()), purpose="batch")
    assert (uploaded.bytes, uploaded.filename, uploaded.purpose) == (
        len(jsonl()),
        "in.jsonl",
        "batch",
    )
    assert alice.files.retrieve(uploaded.id).id == uploaded.id
    assert alice.files.content(uploaded.id).content == jsonl()
    assert [f.id for f in alice.files.list()] == [uploaded.id]

    batch = alice.batches.create(
        input_file_id=uploaded.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"purpose": "test"},
    )
    assert batch.status == "validating"  # a new job is Pending
    name = batch.id.replace("_", "-", 1)
    job = kube.objects[f"/apis/gleaner.dev/v1alpha1/namespaces/{NS}/offlinejobs/{name}"]
    spec = job["spec"]["batch"]
    assert (spec["input"], spec["output"]) == (
        f"batch-api/{batch.id}/input.jsonl", f"batch-api/{batch.id}/run",
    )  # fmt: skip
    assert spec["deadline"].endswith("Z") and spec["model"] == "m"
    assert job["metadata"]["annotations"][ANNOTATION_BATCH_API] == (
        f"http://gleaner-operator:8081/gleaner/v1/namespaces/{NS}/batches/{batch.id}"
    )

    job["status"] = {
        "phase": "Running",
        "batch": {"requestsTotal": 3, "requestsDone": 2, "requestsFailed": 1},
    }
    got = alice.batches.retrieve(batch.id)
    assert got.status == "in_progress"
    assert got.request_counts is not None
    assert (got.request_counts.total, got.request_counts.completed, got.request_counts.failed) == (
        3, 1, 1,
    )  # fmt: skip
    assert got.metadata == {"purpose": "test"}
    assert [b.id for b in alice.batches.list(limit=10)] == [batch.id]

    cancelled = alice.batches.cancel(batch.id)
    assert cancelled.status == "cancelled"  # the stand-in deletes at once
    assert "delete" in kube.reviews


def test_the_runner_fetches_the_input_and_uploads_results_that_the_user_downloads(
    api: tuple[str, FakeKube],
) -> None:
    url, kube = api
    alice = client(url, "alice")
    uploaded = alice.files.create(file=("in.jsonl", jsonl()), purpose="batch")
    batch = alice.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    job = next(v for k, v in kube.objects.items() if "/offlinejobs/" in k)
    job["status"] = {"phase": "Succeeded"}
    assert alice.batches.retrieve(batch.id).status == "finalizing"
    base = job["metadata"]["annotations"][ANNOTATION_BATCH_API]
    runner = {"Authorization": "Bearer runner"}
    assert (
        httpx.get(
            f"{base}/input".replace("http://gleaner-operator:8081", url), headers=runner
        ).content
        == jsonl()
    )
    out = b'{"custom_id": "r0"}\n'
    local = base.replace("http://gleaner-operator:8081", url)
    assert httpx.put(f"{local}/output", content=out, headers=runner).status_code == 200
    assert httpx.put(f"{local}/errors", content=b"", headers=runner).status_code == 200
    assert httpx.post(f"{local}/finalize", headers=runner).status_code == 200
    done = alice.batches.retrieve(batch.id)
    assert done.status == "completed" and done.output_file_id and done.error_file_id
    assert alice.files.content(done.output_file_id).content == out
    # A ServiceAccount of another namespace may not read this namespace's batch.
    refused = httpx.get(f"{local}/input", headers={"Authorization": "Bearer stranger"})
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "permission_denied"


def test_no_token_a_bad_token_and_no_rights_are_refused_in_the_openai_shape(
    api: tuple[str, FakeKube],
) -> None:
    url, kube = api
    with pytest.raises(openai.AuthenticationError):
        client(url, "forged").files.list()
    bare = httpx.get(f"{url}/v1/batches")
    assert bare.status_code == 401
    assert set(bare.json()["error"]) == {"message", "type", "param", "code"}
    with pytest.raises(openai.PermissionDeniedError) as caught:
        client(url, "bob").batches.list()
    assert "may not get offlinejobs.gleaner.dev in namespace team" in str(caught.value)
    # Naming another namespace (the organization) is authorized there, not at home.
    other = openai.OpenAI(
        base_url=f"{url}/v1", api_key="alice", organization="other", max_retries=0
    )
    with pytest.raises(openai.PermissionDeniedError):
        other.files.list()
    assert not any("/offlinejobs/" in k for k in kube.objects)


def test_bad_requests_name_the_field(api: tuple[str, FakeKube]) -> None:
    url, _ = api
    alice = client(url, "alice")
    uploaded = alice.files.create(file=("in.jsonl", jsonl()), purpose="batch")
    with pytest.raises(openai.BadRequestError) as caught:
        alice.batches.create(
            input_file_id=uploaded.id,
            endpoint="/v1/chat/completions",
            completion_window="1h",  # type: ignore[arg-type]
        )
    assert "completion_window" in str(caught.value)
    with pytest.raises(openai.NotFoundError):
        alice.batches.retrieve("batch_" + "0" * 24)
    with pytest.raises(openai.NotFoundError):
        alice.files.retrieve("file-" + "0" * 24)
    with pytest.raises(openai.BadRequestError) as missing:
        alice.batches.create(
            input_file_id=uploaded.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            metadata={"template": "nope"},
        )
    assert "no ConfigMap nope" in str(missing.value)
    big = openai.OpenAI(base_url=f"{url}/v1", api_key="alice", max_retries=0)
    with pytest.raises(openai.APIStatusError) as large:
        big.files.create(file=("big.jsonl", b"x" * (3 << 20)), purpose="batch")
    assert large.value.status_code == 413


def test_the_runner_in_remote_mode_closes_the_loop(
    api: tuple[str, FakeKube], tmp_path: Path
) -> None:
    """The openai client uploads; the runner (remote mode, as the job's Pod runs it) fetches
    the input, answers every request with the fake engine, uploads; the client downloads."""
    url, kube = api
    alice = client(url, "alice")
    uploaded = alice.files.create(file=("in.jsonl", jsonl()), purpose="batch")
    batch = alice.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    job = next(v for k, v in kube.objects.items() if "/offlinejobs/" in k)
    pod = template_of(OfflineJob.model_validate(job))
    (runner,) = pod["spec"]["containers"]
    remote = runner["args"][runner["args"].index("--remote") + 1]
    token = tmp_path / "token"
    token.write_text("runner\n")
    with FakeOpenAIEngine() as engine:
        rc = runner_main(
            [
                "--input", str(tmp_path / "in.jsonl"),
                "--state-dir", str(tmp_path / "run"),
                "--engine-url", engine.url,
                "--remote", remote.replace("http://gleaner-operator:8081", url),
                "--token-file", str(token),
            ]
        )  # fmt: skip
    assert rc == 0
    job["status"] = {"phase": "Succeeded"}
    done = alice.batches.retrieve(batch.id)
    assert done.status == "completed" and done.output_file_id is not None
    lines = alice.files.content(done.output_file_id).text.splitlines()
    assert sorted(json.loads(line)["custom_id"] for line in lines) == ["r0", "r1", "r2"]
    assert done.error_file_id is not None
    assert alice.files.content(done.error_file_id).content == b""


def test_the_runner_gives_up_on_a_refused_upload(api: tuple[str, FakeKube], tmp_path: Path) -> None:
    url, _ = api
    token = tmp_path / "token"
    token.write_text("stranger")  # another namespace's ServiceAccount: 403, final
    remote = f"{url}/gleaner/v1/namespaces/{NS}/batches/batch_{'c' * 24}"
    rc = runner_main(
        ["--input", str(tmp_path / "in.jsonl"), "--state-dir", str(tmp_path / "run"),
         "--remote", remote, "--token-file", str(token)]
    )  # fmt: skip
    assert rc == 1 and not (tmp_path / "in.jsonl").exists()


def test_a_job_the_api_server_refuses_leaves_no_batch(api: tuple[str, FakeKube]) -> None:
    url, kube = api
    alice = client(url, "alice")
    uploaded = alice.files.create(file=("in.jsonl", jsonl()), purpose="batch")
    kube.refuse_jobs = True
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        alice.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
    assert "creating the OfflineJob" in str(caught.value)
    assert list(alice.batches.list()) == []


# --- expiry: a batch past its completion window ends "expired" -----------------------------


class Clock:
    """The Batch API's clock, moved by the test."""

    def __init__(self) -> None:
        self.t = time.time()

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def timed_api(tmp_path: Path) -> Iterator[tuple[str, FakeKube, FileStore, Clock]]:
    kube = FakeKube()
    store = FileStore(tmp_path / "files", max_file_bytes=1 << 20)
    clock = Clock()
    app = build_batch_app(
        store, cast(SyncKubeClient, kube), "http://gleaner-operator:8081", clock=clock
    )
    with serving(app) as url:
        yield url, kube, store, clock


def many(n: int) -> bytes:
    line = LINES[0]
    return "".join(json.dumps(line | {"custom_id": f"r{i}"}) + "\n" for i in range(n)).encode()


def test_the_runner_stops_at_the_window_end_and_the_batch_expires_with_its_partial_results(
    timed_api: tuple[str, FakeKube, FileStore, Clock], tmp_path: Path
) -> None:
    """The job's runner stops at the end of the completion window (``--stop-at``, from the
    job's deadline), uploads the answers so far; the openai client sees ``expired`` with
    request counts, and downloads the partial output: each answered request once."""
    url, kube, _, _ = timed_api
    alice = client(url, "alice")
    n = 60
    uploaded = alice.files.create(file=("in.jsonl", many(n)), purpose="batch")
    batch = alice.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    job = next(v for k, v in kube.objects.items() if "/offlinejobs/" in k)
    (runner,) = template_of(OfflineJob.model_validate(job))["spec"]["containers"]
    args = runner["args"]
    stop_at = args[args.index("--stop-at") + 1]
    assert stop_at == job["spec"]["batch"]["deadline"]
    assert datetime.fromisoformat(stop_at).timestamp() == batch.expires_at
    remote = args[args.index("--remote") + 1].replace("http://gleaner-operator:8081", url)
    token = tmp_path / "token"
    token.write_text("runner\n")
    # The window's end, brought forward: three seconds from now (the whole batch needs 12).
    soon = datetime.fromtimestamp(time.time() + 3, UTC).isoformat()
    with FakeOpenAIEngine(delay=0.2) as engine:
        rc = runner_main(
            [
                "--input", str(tmp_path / "in.jsonl"),
                "--state-dir", str(tmp_path / "run"),
                "--engine-url", engine.url,
                "--concurrency", "1",
                "--remote", remote,
                "--token-file", str(token),
                "--stop-at", soon,
            ]
        )  # fmt: skip
    assert rc == 0
    done = alice.batches.retrieve(batch.id)
    assert done.status == "expired" and done.expired_at is not None
    assert done.request_counts is not None
    answered = done.request_counts.completed
    assert done.request_counts.total == n
    assert 0 < answered < n
    assert done.output_file_id is not None
    ids = [
        json.loads(x)["custom_id"] for x in alice.files.content(done.output_file_id).text.split()
    ]
    assert len(ids) == len(set(ids)) == answered
    assert set(ids) <= {f"r{i}" for i in range(n)}
    # an expired batch cannot be cancelled any more: cancel leaves it (and its job) as is
    assert alice.batches.cancel(batch.id).status == "expired"
    assert job in kube.objects.values()


def test_the_operator_expires_a_batch_whose_runner_is_not_running(
    timed_api: tuple[str, FakeKube, FileStore, Clock],
) -> None:
    """Past the window, the operator's expiry timer expires a batch whose job waits (no
    runner to upload partial answers): its counts are kept and its OfflineJob deleted. A
    running batch is given the grace to stop and upload first."""
    url, kube, store, clock = timed_api
    alice = client(url, "alice")
    uploaded = alice.files.create(file=("in.jsonl", jsonl()), purpose="batch")
    evicted = alice.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    running = alice.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    path = "/apis/gleaner.dev/v1alpha1/namespaces/team/offlinejobs/"
    evicted_job = path + evicted.id.replace("_", "-", 1)
    running_job = path + running.id.replace("_", "-", 1)
    kube.objects[evicted_job]["status"] = {
        "phase": "Evicted",
        "batch": {"requestsTotal": 3, "requestsDone": 1, "requestsFailed": 0},
    }
    kube.objects[running_job]["status"] = {"phase": "Running"}
    timer = ExpiryTimer(store, cast(SyncKubeClient, kube), clock=clock)
    assert timer.tick() == []  # the window is open
    assert evicted.expires_at is not None and running.expires_at is not None
    clock.t = evicted.expires_at
    assert timer.tick() == [evicted.id]
    assert evicted_job not in kube.objects and running_job in kube.objects
    gone = alice.batches.retrieve(evicted.id)
    assert gone.status == "expired" and gone.expired_at == evicted.expires_at
    assert gone.request_counts is not None
    assert (gone.request_counts.total, gone.request_counts.completed) == (3, 1)
    assert alice.batches.retrieve(running.id).status == "expired"  # what the API says
    clock.t = running.expires_at + EXPIRY_GRACE_SECONDS
    assert timer.tick() == [running.id]
    assert running_job not in kube.objects
    assert timer.tick() == []  # once


def test_stop_at_needs_remote_mode(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as caught:
        runner_main(
            ["--input", str(tmp_path / "in.jsonl"), "--state-dir", str(tmp_path / "run"),
             "--stop-at", "2030-01-01T00:00:00Z"]
        )  # fmt: skip
    assert caught.value.code == 2
