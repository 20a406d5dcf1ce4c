"""gleaner.clients.kube against the kmock API emulator over HTTP: credentials, the async
client's calls and errors, watches, and the synchronous face."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kmock
import pytest

from gleaner.clients.kube import (
    JSON,
    USER_AGENT,
    ConflictError,
    Credentials,
    KubeClient,
    KubeConfigError,
    KubeError,
    SyncKubeClient,
    configmaps_path,
    nodetrace_status_path,
    nodetraces_path,
    offlinejob_status_path,
    offlinejobs_path,
    pods_path,
)
from gleaner.testing.kube import KubeEmulator


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[KubeEmulator]:
    with KubeEmulator(tmp_path, namespaces=("default", "team")) as emulator:
        yield emulator


@pytest.fixture
def outside_a_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No service account (whatever machine runs the tests), no default kubeconfig."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def configmap(name: str, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels or {}},
        "data": data,
    }


def dead_server() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


# --- paths ---------------------------------------------------------------------------------


def test_paths() -> None:
    assert pods_path() == "/api/v1/pods"
    assert pods_path("team", "a b") == "/api/v1/namespaces/team/pods/a%20b"
    assert configmaps_path("team") == "/api/v1/namespaces/team/configmaps"
    assert nodetraces_path("n1") == "/apis/gleaner.dev/v1alpha1/nodetraces/n1"
    assert nodetrace_status_path("n1") == "/apis/gleaner.dev/v1alpha1/nodetraces/n1/status"
    assert offlinejobs_path() == "/apis/gleaner.dev/v1alpha1/offlinejobs"
    assert (
        offlinejob_status_path("team", "j")
        == "/apis/gleaner.dev/v1alpha1/namespaces/team/offlinejobs/j/status"
    )


# --- credentials ---------------------------------------------------------------------------


@pytest.mark.usefixtures("outside_a_cluster")
def test_credentials_from_a_kubeconfig_file(kube: KubeEmulator) -> None:
    creds = Credentials.load(str(kube.kubeconfig))
    assert creds.server == kube.url
    assert creds.token == "kmock-test-token"
    assert creds.namespace == "default"
    assert creds.source == "kubeconfig" and creds.kubeconfig == str(kube.kubeconfig)
    assert creds.reload() == creds
    given = Credentials(server="http://127.0.0.1:1")
    assert given.source == "given" and given.reload() is given


@pytest.mark.usefixtures("outside_a_cluster")
def test_kubeconfig_env_is_read_on_every_call(
    kube: KubeEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(KubeConfigError):
        Credentials.load()  # neither a service account nor any kubeconfig
    other = kube.write_kubeconfig(tmp_path / "other.yaml")
    monkeypatch.setenv("KUBECONFIG", str(other))
    assert Credentials.load().server == kube.url


@pytest.mark.usefixtures("outside_a_cluster")
def test_the_context_names_the_namespace(tmp_path: Path) -> None:
    with KubeEmulator(tmp_path, namespaces=("team",), default_namespace="team") as kube:
        assert Credentials.load(str(kube.kubeconfig)).namespace == "team"
        assert Credentials.load(str(kube.kubeconfig), "kmock").namespace == "team"
        with pytest.raises(KubeConfigError, match="elsewhere"):
            Credentials.load(str(kube.kubeconfig), "elsewhere")


@pytest.mark.usefixtures("outside_a_cluster")
def test_an_unusable_kubeconfig_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError) as missing:
        Credentials.load(str(tmp_path / "absent.yaml"))
    assert "\n" not in str(missing.value) and str(missing.value)
    garbage = tmp_path / "garbage.yaml"
    garbage.write_text("clusters: 7\n")
    with pytest.raises(KubeConfigError):
        Credentials.load(str(garbage))


# --- the async client ----------------------------------------------------------------------


def test_create_get_patch_list_delete(kube: KubeEmulator) -> None:
    async def scenario() -> None:
        async with KubeClient(kube.credentials()) as client:
            path = configmaps_path("team")
            made = await client.create(path, configmap("a", {"app": "x"}, k="1", drop="me"))
            assert made["metadata"]["name"] == "a"
            await client.create(path, configmap("b", {"app": "y"}))
            with pytest.raises(ConflictError) as taken:
                await client.create(path, configmap("a"))
            assert taken.value.status == 409
            assert await client.get(configmaps_path("team", "missing")) is None
            # a merge patch: a new key is added, None deletes one, the rest stays
            patched = await client.patch(
                configmaps_path("team", "a"), {"data": {"k": "2", "drop": None}}
            )
            assert patched["data"] == {"k": "2"}
            got = await client.get(configmaps_path("team", "a"))
            assert got is not None and got["data"] == {"k": "2"}
            names = [o["metadata"]["name"] for o in await client.list(path)]
            assert sorted(names) == ["a", "b"]
            selected = await client.list(configmaps_path(), label_selector="app=y")
            assert [o["metadata"]["name"] for o in selected] == ["b"]
            items, version = await client.list_versioned(path)
            assert len(items) == 2 and version
            assert await client.delete(configmaps_path("team", "a")) is True
            assert await client.delete(configmaps_path("team", "a")) is False
            assert await client.get(configmaps_path("team", "a")) is None

    asyncio.run(scenario())
    # every call carried Gleaner's User-Agent, which is how the recorder names the client
    assert USER_AGENT.startswith("gleaner/")
    verbs = {(a.resource, a.verb) for a in kube.accesses("gleaner")}
    assert {("configmaps", "create"), ("configmaps", "patch"), ("configmaps", "delete")} <= verbs


def test_a_refusal_raises_with_the_status_and_is_not_retried(kube: KubeEmulator) -> None:
    kube.emulator[kmock.method("post")] << 403

    async def scenario() -> KubeError:
        async with KubeClient(kube.credentials()) as client:
            with pytest.raises(KubeError) as refused:
                await client.create(configmaps_path("team"), configmap("a"))
            return refused.value

    error = asyncio.run(scenario())
    assert error.status == 403 and "403" in str(error)
    assert not isinstance(error, ConflictError)


def test_an_unreachable_server_is_status_0_after_the_retries() -> None:
    async def scenario() -> KubeError:
        async with KubeClient(Credentials(server=dead_server()), retries=1) as client:
            with pytest.raises(KubeError) as down:
                await client.get(pods_path())
            return down.value

    error = asyncio.run(scenario())
    assert error.status == 0 and "connection failed" in error.message


def test_watch_streams_changes_after_the_listed_version(kube: KubeEmulator) -> None:
    async def scenario() -> list[tuple[str, str]]:
        async with KubeClient(kube.credentials()) as client:
            path = configmaps_path("team")
            await client.create(path, configmap("before"))
            _, version = await client.list_versioned(path)
            seen: list[tuple[str, str]] = []

            async def follow() -> None:
                async for event in client.watch(path, resource_version=version, timeout_seconds=3):
                    seen.append((event.type, event.object["metadata"]["name"]))
                    if event.type == "DELETED":
                        return

            watching = asyncio.create_task(follow())
            await asyncio.sleep(0.3)
            await client.create(path, configmap("after", {"app": "x"}))
            await client.patch(configmaps_path("team", "after"), {"data": {"k": "v"}})
            await client.delete(configmaps_path("team", "after"))
            await asyncio.wait_for(watching, 10)
            return seen

    seen = asyncio.run(scenario())
    # "before" was listed, not replayed; the rest arrives in order
    assert seen == [("ADDED", "after"), ("MODIFIED", "after"), ("DELETED", "after")]


def test_a_watch_ends_when_the_server_times_it_out(kube: KubeEmulator) -> None:
    async def scenario() -> int:
        async with KubeClient(kube.credentials()) as client:
            _, version = await client.list_versioned(pods_path())
            events = [e async for e in client.watch(pods_path(), resource_version=version,
                                                    timeout_seconds=1)]  # fmt: skip
            return len(events)

    assert asyncio.run(asyncio.wait_for(scenario(), 15)) == 0


# --- the sync face -------------------------------------------------------------------------


def test_the_sync_face_makes_the_same_calls_from_any_thread(kube: KubeEmulator) -> None:
    with kube.client() as client:
        client.create(configmaps_path("team"), configmap("a"))
        results: list[str] = []

        def read() -> None:
            got = client.get(configmaps_path("team", "a"))
            results.append(got["metadata"]["name"] if got else "")

        threads = [threading.Thread(target=read) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert results == ["a"] * 4
        with pytest.raises(ConflictError):
            client.create(configmaps_path("team"), configmap("a"))
        assert client.credentials.server == kube.url
    # closed: the next call starts a fresh loop and session
    assert [o["metadata"]["name"] for o in client.list(configmaps_path("team"))] == ["a"]
    client.close()


def test_the_sync_watch_is_an_iterator_that_can_be_closed(kube: KubeEmulator) -> None:
    client = kube.client()
    try:
        _, version = client.list_versioned(pods_path())
        events = client.watch(configmaps_path("team"), resource_version=version, timeout_seconds=5)

        def later() -> None:
            client.create(configmaps_path("team"), configmap("x"))

        timer = threading.Timer(0.3, later)
        timer.start()
        first = next(events)
        assert (first.type, first.object["metadata"]["name"]) == ("ADDED", "x")
        events.close()  # ends the request; the client stays usable
        assert client.get(configmaps_path("team", "x")) is not None
        timer.join()
    finally:
        client.close()


@pytest.mark.usefixtures("outside_a_cluster")
def test_sync_from_config(kube: KubeEmulator) -> None:
    with SyncKubeClient.from_config(str(kube.kubeconfig)) as client:
        assert client.list(nodetraces_path()) == []
    with pytest.raises(KubeConfigError):
        SyncKubeClient.from_config(str(kube.kubeconfig) + ".absent")


def test_a_sync_face_can_share_a_client_running_on_another_loop(kube: KubeEmulator) -> None:
    """The operator's dashboard: threaded code over the operator's own client and loop."""
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    owner = KubeClient(kube.credentials())
    try:
        face = SyncKubeClient.sharing(owner, loop)
        face.create(configmaps_path("team"), configmap("shared"))
        assert face.get(configmaps_path("team", "shared")) is not None
        assert face.credentials is owner.credentials
        face.close()  # the owner's client and loop stay up
        session = owner._session
        assert session is not None and not session.closed
        assert face.list(configmaps_path("team"))[0]["metadata"]["name"] == "shared"
        asyncio.run_coroutine_threadsafe(owner.close(), loop).result(10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(10)
    # the owner's loop has stopped: a call fails at once instead of waiting forever
    with pytest.raises(KubeError) as stopped:
        face.get(configmaps_path("team", "shared"))
    assert stopped.value.status == 0
    loop.close()


@pytest.mark.usefixtures("outside_a_cluster")
def test_a_401_reloads_the_credentials_from_their_source(kube: KubeEmulator) -> None:
    """A rotated token: the server refuses the old one; the client reads the kubeconfig
    again and retries with the new one."""
    kube.emulator[lambda request: request.headers.get("Authorization") == "Bearer old"] << 401
    loaded = Credentials.load(str(kube.kubeconfig))
    stale = dataclasses.replace(loaded, token="old")

    async def scenario() -> tuple[JSON | None, str | None]:
        async with KubeClient(stale) as client:
            got = await client.get(nodetraces_path())
            return got, client.credentials.token

    got, token = asyncio.run(scenario())
    assert got is not None and got.get("items") == []
    assert token == "kmock-test-token"
    # hand-built credentials have nowhere to reload from: the 401 is the answer
    given = Credentials(server=kube.url, token="old")

    async def refused() -> KubeError:
        async with KubeClient(given) as client:
            with pytest.raises(KubeError) as err:
                await client.get(nodetraces_path())
            return err.value

    assert asyncio.run(refused()).status == 401
