"""The Helm chart installed for real: helm-python-sdk (Helm's own Go SDK) installs
helm/gleaner into the real kube-apiserver, upgrades it and uninstalls it, and the operator
and agent processes run locally as the chart's ServiceAccounts (docs/controlplane.md).
Installed against this API server (Kubernetes 1.36), the chart's default
``operator.finalizerAtAdmission: auto`` installs the finalizer's MutatingAdmissionPolicy, so
the job the test creates is stored with the finalizer.

No image can run here (KWOK fakes Pods), so the Deployment and DaemonSet only exist as
objects; their processes run on this machine instead, authenticated with a token the
TokenRequest API issues for the chart's ServiceAccount. The chart's ClusterRoles are then
the only thing granting them anything: a verb missing there fails the run with 403.

The API server writes an audit log of every request the two ServiceAccounts make (a policy
file limited to their group). The tests check that no request was refused and that every
verb the chart grants was either used by the run or is named in ``NOT_EXERCISED`` with the
code path that needs it, so the chart's rules stay trimmed to what the code calls.

This module starts its own control plane (module scope): the release owns the CRDs and
ClusterRoles it creates, which must not collide with those the session fixtures apply.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import helm_python as helm
import pytest
import yaml

from gleaner.api.contract import FINALIZER
from gleaner.operator.rbac import OPERATOR_RULES
from gleaner.runtime_agent.rbac import AGENT_RULES
from gleaner.testing.controlplane import (
    ControlPlane,
    ControlPlaneUnavailableError,
    GpuNode,
    apply_nodetrace,
    find_binary,
    get_json,
)
from gleaner.testing.controlplane import poll as wait_for
from gleaner.testing.kube import (
    FAST_OPERATOR_FLAGS,
    nodetrace_manifest,
    offlinejob_manifest,
    refused_lines,
)
from gleaner.testing.net import free_port
from gleaner.testing.processes import ManagedProcess

pytestmark = [pytest.mark.controlplane, pytest.mark.slow, pytest.mark.timeout(400)]

T = TypeVar("T")
Permission = tuple[str, str, str]  # (API group, resource[/subresource], verb)

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "gleaner"
RELEASE = "glh"
NAMESPACE = "gleaner-helm"
FULLNAME = f"{RELEASE}-gleaner"  # the chart's gleaner.fullname for this release
OPERATOR_ACCOUNT = f"{FULLNAME}-operator"
AGENT_ACCOUNT = f"{FULLNAME}-agent"
FINALIZER_POLICY = f"{FULLNAME}-offlinejob-finalizer"
JOB_NAMESPACE = "batch"
NODES = (GpuNode("gpu-a", gpus=8), GpuNode("gpu-b", gpus=2))

NOT_EXERCISED: dict[Permission, str] = {
    ("", "configmaps", "create"): "the SLA monitor's eviction report (handlers/sla.py)",
    ("", "configmaps", "get"): "a job's profile ConfigMap (handlers/validate.py, scheduling.py)",
    ("", "configmaps", "patch"): "profile on submit replacing a profile it measured with an "
    "older image (handlers/profiling.py)",
    ("gleaner.dev", "nodetraces", "get"): "the SLA monitor reads the job's node (handlers/sla.py)",
    ("gleaner.dev", "nodehistories", "create"): "the agent writes its node's hours of the day "
    "when an hour completes (runtime_agent/daemon.py; e2e/controlplane/test_hours_real.py)",
    ("gleaner.dev", "nodehistories/status", "patch"): "the agent writes its node's hours of the "
    "day when an hour completes (runtime_agent/daemon.py; e2e/controlplane/test_hours_real.py)",
    ("", "pods", "get"): "a restarted or newly active replica finishing a binding, and a Pod "
    "name that is taken (handlers/scheduling.py)",
    ("", "pods", "patch"): "profile on submit recording on a profiling Pod the offline GPU time "
    "its node's agent reported (handlers/profiling.py)",
    ("", "namespaces", "list"): "kopf resolves the namespaces of operator.watchNamespace",
    ("", "namespaces", "watch"): "kopf resolves the namespaces of operator.watchNamespace",
    **{
        ("kopf.dev", "kopfpeerings", verb): "kopf peering with operator.watchNamespace"
        for verb in ("get", "list", "watch", "patch")
    },
}
"""Granted verbs a plain place-run-delete does not call, with the code path that needs them."""

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "userGroups": [f"system:serviceaccounts:{NAMESPACE}"]},
        {"level": "None"},
    ],
}


def granted(rules: list[Any]) -> set[Permission]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def audit_requests(log: Path, account: str) -> list[dict[str, Any]]:
    """The audited requests of ``account`` (a ServiceAccount of ``NAMESPACE``)."""
    user = f"system:serviceaccount:{NAMESPACE}:{account}"
    events = (json.loads(line) for line in log.read_text().splitlines() if line.strip())
    return [
        e
        for e in events
        if e.get("user", {}).get("username") == user and e.get("stage") == "ResponseComplete"
    ]


ACCOUNT_RULES = ((OPERATOR_ACCOUNT, OPERATOR_RULES), (AGENT_ACCOUNT, AGENT_RULES))


def unexercised(plane: ControlPlane) -> dict[str, set[Permission]]:
    """Per account, what the chart grants that no audited request has used yet (but what
    ``NOT_EXERCISED`` names)."""
    out: dict[str, set[Permission]] = {}
    for account, rules in ACCOUNT_RULES:
        made = used_permissions(audit_requests(plane.workdir / "audit.log", account))
        left = granted(rules) - made - set(NOT_EXERCISED)
        if left:
            out[account] = left
    return out


def used_permissions(requests: list[dict[str, Any]]) -> set[Permission]:
    """The (group, resource[/subresource], verb) of the resource requests RBAC allowed (a
    404 or 409 answer still used the permission)."""
    used: set[Permission] = set()
    for event in requests:
        ref = event.get("objectRef")
        if not ref or event.get("responseStatus", {}).get("code") in (401, 403):
            continue
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        used.add((ref.get("apiGroup", ""), resource, event["verb"]))
    return used


def refused(requests: list[dict[str, Any]]) -> list[str]:
    return [
        f"{e['verb']} {e['requestURI']}"
        for e in requests
        if e.get("responseStatus", {}).get("code") in (401, 403)
    ]


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    try:
        binary = find_binary()
    except ControlPlaneUnavailableError as exc:
        if os.environ.get("GLEANER_REQUIRE_CONTROLPLANE") == "1":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    workdir = tmp_path_factory.mktemp("helm-controlplane")
    policy = workdir / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    control = ControlPlane(
        workdir,
        binary=binary,
        apiserver_args=(
            f"--audit-policy-file={policy}",
            f"--audit-log-path={workdir / 'audit.log'}",
        ),
    )
    try:
        control.start()
        control.add_gpu_nodes(*NODES)
        yield control
    finally:
        control.stop()


@pytest.fixture(scope="module")
def helm_config(plane: ControlPlane) -> Iterator[helm.Config]:
    with helm.Config(kubeconfig_path=plane.admin_kubeconfig, namespace=NAMESPACE) as config:
        yield config


def account_kubeconfig(plane: ControlPlane, account: str, path: Path) -> Path:
    """A kubeconfig with a TokenRequest token of the chart's ServiceAccount ``account``."""
    return plane.token_kubeconfig(account, NAMESPACE, path)


def operator_argv(
    plane: ControlPlane, deployment: dict[str, Any], http_port: int, cert_dir: Path
) -> list[str]:
    """The installed Deployment's operator command line, on local ports instead of the Pod's.

    The webhook's certificate is mounted from the chart's Secret in the Pod; here the same
    Secret's ``tls.crt`` and ``tls.key`` are written to ``cert_dir`` and the flag points there.
    """
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = list(container["args"])
    args[args.index("--http-port") + 1] = str(http_port)
    if "--webhook-cert-dir" in args:
        at = args.index("--webhook-cert-dir")
        mounted = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        secret_name = volumes[mounted[args[at + 1]]]["secret"]["secretName"]
        secret = get_json(plane, "secret", secret_name, "-n", NAMESPACE)
        assert secret is not None, f"the chart's webhook Secret {secret_name} is missing"
        cert_dir.mkdir(parents=True, exist_ok=True)
        for key in ("tls.crt", "tls.key"):
            (cert_dir / key).write_bytes(base64.b64decode(secret["data"][key]))
        args[at + 1] = str(cert_dir)
        args[args.index("--webhook-port") + 1] = str(free_port())
    return [sys.executable, "-m", "gleaner.cli.main", *args, "--http-host=127.0.0.1"]


def test_helm_installs_upgrades_and_uninstalls_the_chart_and_its_rbac_suffices(
    plane: ControlPlane, helm_config: helm.Config, tmp_path: Path
) -> None:
    # ---- install: the CRDs come with the release ------------------------------------
    release = helm_config.install(
        CHART, RELEASE, {"operator": {"replicaCount": 1}}, create_namespace=True, timeout=120
    )
    assert release["status"] == "deployed"
    assert release["revision"] == 1
    plane.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s",
        "crd/offlinejobs.gleaner.dev", "crd/nodetraces.gleaner.dev",
        "crd/nodehistories.gleaner.dev",
        "crd/clusterkopfpeerings.kopf.dev", "crd/kopfpeerings.kopf.dev",
    )  # fmt: skip
    deployment = get_json(plane, "deployment", OPERATOR_ACCOUNT, "-n", NAMESPACE)
    daemonset = get_json(plane, "daemonset", AGENT_ACCOUNT, "-n", NAMESPACE)
    assert deployment is not None and daemonset is not None
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == OPERATOR_ACCOUNT
    assert daemonset["spec"]["template"]["spec"]["serviceAccountName"] == AGENT_ACCOUNT
    for account, rules in ((OPERATOR_ACCOUNT, OPERATOR_RULES), (AGENT_ACCOUNT, AGENT_RULES)):
        assert get_json(plane, "serviceaccount", account, "-n", NAMESPACE) is not None
        role = get_json(plane, "clusterrole", account)
        assert role is not None and role["rules"] == [dict(rule) for rule in rules]
        binding = get_json(plane, "clusterrolebinding", account)
        assert binding is not None
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
        ]
    assert get_json(plane, "clusterkopfpeering", "gleaner") is not None  # the post-install hook
    # This API server serves MutatingAdmissionPolicy: "auto" installed the finalizer policy,
    # and the webhook has no OfflineJob entry.
    for kind in ("mutatingadmissionpolicy", "mutatingadmissionpolicybinding"):
        assert get_json(plane, kind, FINALIZER_POLICY) is not None, kind
    webhook = get_json(plane, "mutatingwebhookconfiguration", f"{FULLNAME}-webhook")
    assert webhook is not None
    assert "offlinejobs.gleaner.dev" not in [e["name"] for e in webhook["webhooks"]]

    # ---- upgrade: a changed value reaches the Deployment -----------------------------
    upgraded = helm_config.upgrade(
        CHART,
        RELEASE,
        {"operator": {"replicaCount": 1, "extraArgs": list(FAST_OPERATOR_FLAGS)}},
        timeout=120,
    )
    assert upgraded["revision"] == 2
    assert upgraded["status"] == "deployed"
    deployment = get_json(plane, "deployment", OPERATOR_ACCOUNT, "-n", NAMESPACE)
    assert deployment is not None
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-len(FAST_OPERATOR_FLAGS) :] == list(FAST_OPERATOR_FLAGS)
    assert deployment["metadata"]["generation"] == 2
    assert [r["revision"] for r in helm_config.history(RELEASE)] == [1, 2]

    # ---- the processes, as the chart's ServiceAccounts ------------------------------
    run_operator_and_agent(plane, deployment, tmp_path)

    requests = {
        account: audit_requests(plane.workdir / "audit.log", account)
        for account in (OPERATOR_ACCOUNT, AGENT_ACCOUNT)
    }
    for account, made in requests.items():
        assert made, f"no audited request of {account}"
        assert refused(made) == [], f"{account} was refused: {refused(made)}"
    used = {account: used_permissions(made) for account, made in requests.items()}
    (tmp_path / "used-permissions.json").write_text(
        json.dumps({a: sorted(p) for a, p in used.items()}, indent=1)
    )
    print(json.dumps({a: sorted(p) for a, p in used.items()}, indent=1))
    for account, rules in ACCOUNT_RULES:
        unused = granted(rules) - used[account] - set(NOT_EXERCISED)
        assert unused == set(), f"{account}: granted but never called: {sorted(unused)}"

    # ---- uninstall: the workloads and RBAC go, the CRDs stay (crds.keep) --------------
    helm_config.uninstall(RELEASE, timeout=120)
    assert get_json(plane, "deployment", OPERATOR_ACCOUNT, "-n", NAMESPACE) is None
    assert get_json(plane, "daemonset", AGENT_ACCOUNT, "-n", NAMESPACE) is None
    assert get_json(plane, "clusterrole", OPERATOR_ACCOUNT) is None
    assert get_json(plane, "clusterrolebinding", AGENT_ACCOUNT) is None
    assert get_json(plane, "mutatingadmissionpolicy", FINALIZER_POLICY) is None
    assert get_json(plane, "serviceaccount", OPERATOR_ACCOUNT, "-n", NAMESPACE) is None
    assert get_json(plane, "crd", "offlinejobs.gleaner.dev") is not None
    assert helm_config.list() == []


def run_operator_and_agent(plane: ControlPlane, deployment: dict[str, Any], work: Path) -> None:
    """The agent reports gpu-b's NodeTrace (the admin writes gpu-a's); the operator places a
    job on one of them, KWOK runs its Pod, and deleting the job deletes the Pod."""
    plane.kubectl("create", "namespace", JOB_NAMESPACE)
    plane.wait_service_account(JOB_NAMESPACE)
    apply_nodetrace(plane, nodetrace_manifest("gpu-a", gpus=8, offline_enabled=0.9))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "KUBERNETES_SERVICE_HOST": ""}
    agent = ManagedProcess(
        "gleaner-agent",
        [
            sys.executable, "-m", "gleaner.cli.main", "agent", "--backend=simulated",
            "--node=gpu-b", "--gpus=2", "--metrics-host=127.0.0.1",
            f"--metrics-port={free_port()}", "--report-interval=1s",
            f"--kubeconfig={account_kubeconfig(plane, AGENT_ACCOUNT, work / 'agent.kubeconfig')}",
        ],
        work / "agent.log",
        env=env,
    ).start()  # fmt: skip
    operator_config = account_kubeconfig(plane, OPERATOR_ACCOUNT, work / "operator.kubeconfig")
    operator = ManagedProcess(
        "gleaner-operator",
        operator_argv(plane, deployment, free_port(), work / "webhook-certs"),
        work / "operator.log",
        env={
            **env,
            "KUBECONFIG": str(operator_config),
            "POD_NAME": f"{OPERATOR_ACCOUNT}-local",
            "POD_NAMESPACE": NAMESPACE,
        },
    ).start()
    try:
        exercise(plane, operator, agent)
        # kopf starts one watch per resource, each when it gets to it: on a loaded machine
        # the last may start after the job has come and gone. Wait for them (a permission
        # never used still fails below, by name).
        with contextlib.suppress(AssertionError):
            wait_for(lambda: not unexercised(plane), "every granted permission used", timeout=60)
    finally:
        operator.stop(grace=15)
        agent.stop(grace=10)
        print(operator.log()[-4000:], agent.log()[-3000:])


def exercise(plane: ControlPlane, operator: ManagedProcess, agent: ManagedProcess) -> None:
    def agent_reported() -> bool:
        if not agent.alive():
            raise AssertionError(f"the agent exited:\n{agent.log()[-3000:]}")
        trace = get_json(plane, "nt", "gpu-b")
        return bool(trace and trace.get("status", {}).get("gpus"))

    wait_for(agent_reported, lambda: agent.log()[-3000:])
    created = plane.kubectl(
        "create", "-o", "json", "-f", "-",
        input=json.dumps(offlinejob_manifest("llama", namespace=JOB_NAMESPACE, sla=0.5)),
    )  # fmt: skip
    # Stored with the operator's finalizer: the chart's admission policy put it there.
    assert json.loads(created.stdout)["metadata"]["finalizers"] == [FINALIZER]

    def job() -> dict[str, Any]:
        return get_json(plane, "oj", "llama", "-n", JOB_NAMESPACE) or {}

    def log() -> str:
        return f"job: {job().get('status')}\n" + "\n".join(operator.log_tail(40))

    def running() -> dict[str, Any] | None:
        if not operator.alive():
            raise AssertionError(f"the operator exited ({operator.state()}):\n{log()}")
        got = job()
        return got if got.get("status", {}).get("phase") == "Running" else None

    placed = wait_for(running, log)
    node = placed["status"]["placement"]["node"]
    assert node in {n.name for n in NODES}
    pod = get_json(plane, "pod", "llama-0", "-n", JOB_NAMESPACE)
    assert pod is not None and pod["spec"]["nodeName"] == node
    assert pod["status"]["phase"] == "Running"  # KWOK ran it

    plane.kubectl("delete", "oj", "llama", "-n", JOB_NAMESPACE, "--wait=false")

    def deleted() -> bool:
        pods = get_json(plane, "pods", "-n", JOB_NAMESPACE)
        return not job() and pods is not None and pods["items"] == []

    wait_for(deleted, log)
    assert refused_lines(operator.log()) == []
    assert refused_lines(agent.log()) == []
