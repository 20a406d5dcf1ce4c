"""gleaner.operator.injection: the online-Pod patch of the admission webhook (pure).

The patch is applied with a small RFC 6902 ``add``/``replace`` applier, the way the API
server applies it, and applying the webhook again to its own result must change nothing.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gleaner.api.contract import (
    ANNOTATION_INJECTED,
    ENV_ROLE,
    ENV_SHIM_PATH,
    ENV_SOCKET,
    LABEL_ROLE,
    ROLE_EXEMPT,
    ROLE_OFFLINE,
    ROLE_ONLINE,
    SHIM_DIR,
    SHIM_PATH,
    SOCKET_DIR,
    SOCKET_PATH,
)
from gleaner.operator.injection import (
    SHIM_VOLUME,
    SOCKET_VOLUME,
    merge_env,
    online_pod_mutation,
)
from gleaner.testing.fixtures import container_env


def _apply(doc: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for op in patch:
        assert op["op"] in ("add", "replace")
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]
        ]
        target = out
        for part in parents:
            target = target[part]
        if op["op"] == "replace":
            assert last in target
        target[last] = copy.deepcopy(op["value"])
    return out


def _pod(**spec: Any) -> dict[str, Any]:
    containers = spec.pop("containers", [{"name": "vllm", "image": "vllm/vllm-openai"}])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "server", "labels": {LABEL_ROLE: ROLE_ONLINE}},
        "spec": {"containers": containers, **spec},
    }


def _injected(pod: dict[str, Any]) -> dict[str, Any]:
    mutation = online_pod_mutation(pod)
    assert mutation.allowed, mutation.refusal
    return _apply(pod, mutation.patch)


def test_online_pod_gets_the_shim_role_socket_and_hook_env() -> None:
    pod = _pod(initContainers=[{"name": "fetch", "image": "busybox"}])
    out = _injected(pod)
    for container in out["spec"]["containers"] + out["spec"]["initContainers"]:
        assert container_env(container) == {
            "LD_PRELOAD": SHIM_PATH,
            ENV_ROLE: ROLE_ONLINE,
            ENV_SOCKET: SOCKET_PATH,
            ENV_SHIM_PATH: SHIM_PATH,
        }
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts[SHIM_VOLUME] == {"name": SHIM_VOLUME, "mountPath": SHIM_DIR, "readOnly": True}
        assert mounts[SOCKET_VOLUME] == {"name": SOCKET_VOLUME, "mountPath": SOCKET_DIR}
    volumes = {v["name"]: v["hostPath"] for v in out["spec"]["volumes"]}
    assert volumes == {
        SHIM_VOLUME: {"path": SHIM_DIR, "type": "Directory"},
        SOCKET_VOLUME: {"path": SOCKET_DIR, "type": "DirectoryOrCreate"},
    }
    assert out["metadata"]["annotations"] == {ANNOTATION_INJECTED: ROLE_ONLINE}
    assert out["metadata"]["name"] == "server"
    assert pod == _pod(initContainers=[{"name": "fetch", "image": "busybox"}])  # not mutated


def test_the_pod_keeps_its_own_env_mounts_volumes_and_ld_preload() -> None:
    container = {
        "name": "vllm",
        "image": "vllm",
        "env": [{"name": "MODEL", "value": "llama"}, {"name": "LD_PRELOAD", "value": "/x.so"}],
        "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
    }
    pod = _pod(containers=[container], volumes=[{"name": "cache", "emptyDir": {}}])
    pod["metadata"]["annotations"] = {"team": "serving"}
    out = _injected(pod)
    env = container_env(out["spec"]["containers"][0])
    assert env["MODEL"] == "llama"
    assert env["LD_PRELOAD"] == f"{SHIM_PATH}:/x.so"
    assert out["spec"]["containers"][0]["volumeMounts"][0] == {
        "name": "cache",
        "mountPath": "/cache",
    }
    assert out["spec"]["volumes"][0] == {"name": "cache", "emptyDir": {}}
    assert out["metadata"]["annotations"] == {"team": "serving", ANNOTATION_INJECTED: ROLE_ONLINE}


def test_a_second_pass_changes_nothing() -> None:
    pod = _pod(containers=[{"name": "a", "env": [{"name": "LD_PRELOAD", "value": "/x.so"}]}])
    once = _injected(pod)
    again = online_pod_mutation(once)
    assert again.allowed and again.patch == [] and again.reason == "already"


@pytest.mark.parametrize(
    ("labels", "reason"),
    [
        ({LABEL_ROLE: ROLE_OFFLINE}, "offline"),
        ({LABEL_ROLE: ROLE_EXEMPT}, "exempt"),
    ],
)
def test_offline_and_opted_out_pods_are_left_alone(labels: dict[str, str], reason: str) -> None:
    pod = _pod()
    pod["metadata"]["labels"] = labels
    mutation = online_pod_mutation(pod)
    assert mutation.allowed and mutation.patch == [] and mutation.reason == reason


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (
            {"containers": [{"name": "a", "env": [{"name": "LD_PRELOAD", "valueFrom": {}}]}]},
            "container 'a' sets LD_PRELOAD from valueFrom",
        ),
        (
            {"containers": [{"name": "a", "env": [{"name": ENV_ROLE, "value": ROLE_OFFLINE}]}]},
            f"container 'a' sets {ENV_ROLE}={ROLE_OFFLINE}",
        ),
        (
            {"containers": [{"name": "a"}], "volumes": [{"name": SHIM_VOLUME, "emptyDir": {}}]},
            f"volume {SHIM_VOLUME!r} is the Pod's own",
        ),
        (
            {
                "containers": [
                    {"name": "a", "volumeMounts": [{"name": "mine", "mountPath": SOCKET_DIR + "/"}]}
                ]
            },
            f"container 'a' mounts volume 'mine' at {SOCKET_DIR}",
        ),
    ],
)
def test_a_pod_that_cannot_be_instrumented_is_refused_with_the_reason(
    spec: dict[str, Any], words: str
) -> None:
    pod = _pod(**spec)
    mutation = online_pod_mutation(pod)
    assert not mutation.allowed and mutation.patch == []
    assert mutation.refusal is not None
    assert words in mutation.refusal
    assert f"{LABEL_ROLE}={ROLE_EXEMPT}" in mutation.refusal


def test_merge_env_keeps_a_preload_that_already_starts_with_the_shim() -> None:
    env = [{"name": "LD_PRELOAD", "value": f"{SHIM_PATH} /x.so"}]
    assert merge_env(env, {"LD_PRELOAD": SHIM_PATH}) == env


_names = st.sampled_from(["A", "B", "LD_PRELOAD", ENV_ROLE, ENV_SOCKET, "C"])
_values = st.sampled_from(["1", "/x.so", SHIM_PATH, f"{SHIM_PATH}:/y.so", ROLE_ONLINE, ""])


@given(
    st.lists(
        st.lists(st.fixed_dictionaries({"name": _names, "value": _values}), max_size=5),
        min_size=1,
        max_size=3,
    ),
    st.booleans(),
)
def test_injection_is_idempotent_for_any_literal_env(
    envs: list[list[dict[str, str]]], annotated: bool
) -> None:
    containers = [{"name": f"c{i}", "env": env} for i, env in enumerate(envs)]
    pod = _pod(containers=containers)
    if annotated:
        pod["metadata"]["annotations"] = {}
    # A role other than online is a refusal; every other literal env is instrumentable.
    mutation = online_pod_mutation(pod)
    if not mutation.allowed:
        assert any(e["name"] == ENV_ROLE and e["value"] != ROLE_ONLINE for env in envs for e in env)
        return
    once = _apply(pod, mutation.patch)
    assert online_pod_mutation(once).patch == []
    for container in once["spec"]["containers"]:
        assert container_env(container)["LD_PRELOAD"].startswith(SHIM_PATH)
