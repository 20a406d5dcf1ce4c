"""The one Kubernetes client of Gleaner's own calls: credentials, async client, sync face.

Contract.

- :meth:`Credentials.load` is the one way a Gleaner process finds the API server: the
  in-cluster service account first, else the kubeconfig named by ``KUBECONFIG`` (read on
  every call, not once at import), else ``~/.kube/config``. An explicit kubeconfig file or
  context skips the in-cluster step. The ``kubernetes`` package is used here only as the
  kubeconfig parser (contexts, exec plugins, inline certificates written to files); no
  request goes through it. Anything unusable raises :class:`KubeConfigError` with the
  parser's one-line reason.
- :class:`KubeClient` (async, aiohttp, one pooled session) does get / list (label and field
  selectors) / watch / create / merge-patch / delete on JSON objects by URL path, and
  nothing more. Patches are JSON merge patches (``application/merge-patch+json``): lists
  are replaced whole, ``None`` deletes a key. Transient answers (429, 500, 502, 503, 504)
  and connection failures are retried ``retries`` times with a short backoff; a 401
  reloads the credentials (service-account tokens rotate) and retries. 404 raises
  :class:`NotFoundError`, 409 :class:`ConflictError`, a watch whose version expired
  :class:`GoneError`; every other failure raises :class:`KubeError` with the API server's
  message (status 0: the server could not be reached).
- :class:`SyncKubeClient` is the same client for threaded callers (the agent's reporter
  and Pod watcher, the dashboard, ``gleaner report``): it runs one :class:`KubeClient` on
  an event loop of its own, in a daemon thread started on first use, and blocks on each
  call. A watch is a plain iterator over the same events. :meth:`SyncKubeClient.sharing`
  puts the face over a client that already runs on another thread's loop (the operator's
  dashboard uses the operator's client that way: one connection pool per process).
- Paths are built by the helpers at the bottom (``pods_path`` etc.), never by hand.

Every request carries the User-Agent ``gleaner/<version>``, which is how the API server's
audit log (and the tests' RBAC recorder) tells Gleaner's calls from kopf's.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import threading
from collections.abc import AsyncIterator, Coroutine, Generator, Mapping
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar
from urllib.parse import quote

import aiohttp

from gleaner.api import GROUP, VERSION

JSON = dict[str, Any]
T = TypeVar("T")

TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})


def _user_agent() -> str:
    try:
        version = metadata.version("gleaner")
    except metadata.PackageNotFoundError:  # a source tree that is not installed
        version = "0"
    return f"gleaner/{version}"


USER_AGENT = _user_agent()


class KubeConfigError(Exception):
    """No usable cluster configuration: the message is the parser's one-line reason."""


class KubeError(Exception):
    """A failed API call: HTTP status (0: unreachable) and the server's message."""

    def __init__(self, status: int, message: str, path: str) -> None:
        super().__init__(f"HTTP {status} on {path}: {message}")
        self.status = status
        self.message = message
        self.path = path


class NotFoundError(KubeError):
    pass


class ConflictError(KubeError):
    pass


class GoneError(KubeError):
    """410: the watched resource version is too old; list again."""


# --- credentials ---------------------------------------------------------------------------


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else repr(exc)


def kubeconfig_path() -> str | None:
    """``KUBECONFIG`` as the environment has it now, else ``None`` (``~/.kube/config``)."""
    return os.environ.get("KUBECONFIG") or None


@dataclass(frozen=True)
class Credentials:
    """Where the API server is and how to authenticate.

    ``namespace`` is the kubeconfig context's namespace (``default`` in-cluster or when the
    context names none). ``source`` (with ``kubeconfig`` and ``context``) remembers where
    the credentials came from, so :meth:`reload` reads the same place again; credentials
    built by hand (``source="given"``) reload to themselves.
    """

    server: str
    token: str | None = None
    ca_path: str | None = None
    cert_path: str | None = None
    key_path: str | None = None
    insecure: bool = False
    namespace: str = "default"
    kubeconfig: str | None = None
    context: str | None = None
    source: Literal["given", "in-cluster", "kubeconfig"] = "given"

    @classmethod
    def load(
        cls, kubeconfig: str | None = None, context: str | None = None, *, in_cluster: bool = True
    ) -> Credentials:
        """In-cluster service account (unless a file or context is named, or ``in_cluster``
        is false), else the kubeconfig (``kubeconfig``, else ``KUBECONFIG``, else
        ``~/.kube/config``) at ``context`` (else its current context)."""
        import kubernetes

        config: Any = kubernetes.config  # untyped in the package
        target = kubernetes.client.Configuration()
        if in_cluster and kubeconfig is None and context is None:
            try:
                config.load_incluster_config(client_configuration=target)
            except config.ConfigException:
                pass
            else:
                return cls._from(target, namespace="default", source="in-cluster")
        path = kubeconfig or kubeconfig_path() or str(Path("~/.kube/config").expanduser())
        try:
            config.load_kube_config(config_file=path, context=context, client_configuration=target)
            contexts, active = config.list_kube_config_contexts(config_file=path)
        except (config.ConfigException, OSError, TypeError, ValueError) as exc:
            raise KubeConfigError(_first_line(exc)) from exc
        chosen = active
        if context is not None:
            chosen = next((c for c in contexts or [] if c.get("name") == context), active)
        namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
        return cls._from(
            target, namespace=namespace, source="kubeconfig", kubeconfig=kubeconfig, context=context
        )

    @classmethod
    def _from(
        cls,
        config: Any,
        *,
        namespace: str,
        source: Literal["in-cluster", "kubeconfig"],
        kubeconfig: str | None = None,
        context: str | None = None,
    ) -> Credentials:
        header = config.get_api_key_with_prefix("BearerToken") or config.get_api_key_with_prefix(
            "authorization"
        )
        token = header.split(" ", 1)[-1] if header else None
        return cls(
            server=str(config.host).rstrip("/"),
            token=token,
            ca_path=config.ssl_ca_cert,
            cert_path=config.cert_file,
            key_path=config.key_file,
            insecure=not config.verify_ssl,
            namespace=namespace,
            kubeconfig=kubeconfig,
            context=context,
            source=source,
        )

    def reload(self) -> Credentials:
        """Read the same source again (a rotated token, a refreshed exec credential)."""
        if self.source == "given":
            return self
        return Credentials.load(
            self.kubeconfig, self.context, in_cluster=self.source == "in-cluster"
        )

    def at(self, server: str) -> Credentials:
        """The same credentials for another server URL (tests, port-forwards)."""
        return replace(self, server=server.rstrip("/"))


# --- the async client ----------------------------------------------------------------------


class WatchEvent(NamedTuple):
    """One event of a watch: ``ADDED``, ``MODIFIED``, ``DELETED`` or ``BOOKMARK``."""

    type: str
    object: JSON


def _selectors(label_selector: str | None, field_selector: str | None) -> dict[str, str]:
    params: dict[str, str] = {}
    if label_selector:
        params["labelSelector"] = label_selector
    if field_selector:
        params["fieldSelector"] = field_selector
    return params


def _status_message(text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip().splitlines()[0] if text.strip() else ""
    if isinstance(data, dict):
        return str(data.get("message") or data.get("reason") or "")[:500]
    return ""


def _error(status: int, message: str, path: str) -> KubeError:
    if status == 404:
        return NotFoundError(status, message, path)
    if status == 409:
        return ConflictError(status, message, path)
    if status == 410:
        return GoneError(status, message, path)
    return KubeError(status, message, path)


class KubeClient:
    """Async JSON calls to the API server over one pooled aiohttp session."""

    def __init__(
        self,
        credentials: Credentials,
        *,
        timeout: float = 30.0,
        retries: int = 2,
        user_agent: str = USER_AGENT,
    ) -> None:
        self.credentials = credentials
        self.timeout = timeout
        self.retries = max(0, retries)
        self.user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_config(
        cls, kubeconfig: str | None = None, context: str | None = None, **kwargs: Any
    ) -> KubeClient:
        """A client on :meth:`Credentials.load` (raises :class:`KubeConfigError`)."""
        return cls(Credentials.load(kubeconfig, context), **kwargs)

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _ssl(self) -> ssl.SSLContext | bool:
        creds = self.credentials
        if not creds.server.startswith("https") or creds.insecure:
            return False
        context = ssl.create_default_context(cafile=creds.ca_path)
        if creds.cert_path and creds.key_path:
            context.load_cert_chain(creds.cert_path, creds.key_path)
        return context

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            headers = {"Accept": "application/json", "User-Agent": self.user_agent}
            if self.credentials.token:
                headers["Authorization"] = f"Bearer {self.credentials.token}"
            connector = aiohttp.TCPConnector(ssl=self._ssl(), limit=32)
            self._session = aiohttp.ClientSession(
                base_url=self.credentials.server + "/",
                headers=headers,
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _reload_credentials(self) -> None:
        self.credentials = await asyncio.to_thread(self.credentials.reload)
        await self.close()

    async def _request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        request_timeout: float | None = None,
    ) -> JSON:
        url = path.lstrip("/")
        headers = {"Content-Type": content_type} if body is not None else {}
        per_call = aiohttp.ClientTimeout(
            total=request_timeout if request_timeout is not None else self.timeout
        )
        attempts = self.retries + 1
        for attempt in range(attempts):
            last = attempt == attempts - 1
            session = self._get_session()
            try:
                async with session.request(
                    method,
                    url,
                    json=body,
                    params=params,
                    headers=headers,
                    timeout=per_call,
                ) as resp:
                    if resp.status < 300:
                        data = await resp.json(content_type=None)
                        return data if isinstance(data, dict) else {}
                    message = _status_message(await resp.text())
                    if resp.status == 401 and not last:
                        await self._reload_credentials()
                        continue
                    if resp.status in TRANSIENT_STATUSES and not last:
                        await asyncio.sleep(0.2 * (attempt + 1))
                        continue
                    raise _error(resp.status, message, path)
            except aiohttp.ClientConnectionError as exc:
                if last:
                    raise KubeError(0, f"connection failed: {_first_line(exc)}", path) from exc
                await asyncio.sleep(0.2 * (attempt + 1))
        raise KubeError(0, "unreachable", path)  # pragma: no cover

    async def get(self, path: str, *, request_timeout: float | None = None) -> JSON | None:
        """The object, or None when it does not exist."""
        try:
            return await self._request("GET", path, request_timeout=request_timeout)
        except NotFoundError:
            return None

    async def list_versioned(
        self, path: str, *, label_selector: str | None = None, field_selector: str | None = None
    ) -> tuple[list[JSON], str | None]:
        """The items and the list's ``resourceVersion`` (where a watch resumes)."""
        data = await self._request(
            "GET", path, params=_selectors(label_selector, field_selector) or None
        )
        items = [i for i in data.get("items") or [] if isinstance(i, dict)]
        version = (data.get("metadata") or {}).get("resourceVersion")
        return items, str(version) if version else None

    async def list(
        self, path: str, *, label_selector: str | None = None, field_selector: str | None = None
    ) -> list[JSON]:
        items, _ = await self.list_versioned(
            path, label_selector=label_selector, field_selector=field_selector
        )
        return items

    async def watch(
        self,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Events after ``resource_version`` until the server ends the watch (after
        ``timeout_seconds``); an ``ERROR`` event raises (410: :class:`GoneError`)."""
        params = {"watch": "true", **_selectors(label_selector, field_selector)}
        if resource_version:
            params["resourceVersion"] = resource_version
        if timeout_seconds is not None:
            params["timeoutSeconds"] = str(int(timeout_seconds))
        # The session's total timeout would cut a long watch: bound the connect and each
        # read instead (the server closes the stream after timeoutSeconds).
        read = None if timeout_seconds is None else timeout_seconds + self.timeout
        stream_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.timeout, sock_read=read
        )
        session = self._get_session()
        try:
            async with session.get(path.lstrip("/"), params=params, timeout=stream_timeout) as resp:
                if resp.status >= 300:
                    raise _error(resp.status, _status_message(await resp.text()), path)
                buffer = b""
                async for chunk in resp.content.iter_any():
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        event = self._event(line, path)
                        if event is not None:
                            yield event
                event = self._event(buffer, path)
                if event is not None:
                    yield event
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise KubeError(0, f"watch failed: {_first_line(exc)}", path) from exc

    @staticmethod
    def _event(line: bytes, path: str) -> WatchEvent | None:
        if not line.strip():
            return None
        try:
            data = json.loads(line)
        except ValueError as exc:
            raise KubeError(0, f"undecodable watch event: {line[:80]!r}", path) from exc
        kind = str(data.get("type") or "")
        obj = data.get("object")
        if not isinstance(obj, dict):
            return None
        if kind == "ERROR":
            raise _error(int(obj.get("code") or 0), str(obj.get("message") or ""), path)
        return WatchEvent(kind, obj)

    async def create(self, path: str, body: JSON, *, request_timeout: float | None = None) -> JSON:
        """Create; raises ``ConflictError`` when the name is taken."""
        return await self._request("POST", path, body=body, request_timeout=request_timeout)

    async def patch(self, path: str, body: JSON, *, request_timeout: float | None = None) -> JSON:
        """JSON merge patch."""
        return await self._request(
            "PATCH",
            path,
            body=body,
            content_type="application/merge-patch+json",
            request_timeout=request_timeout,
        )

    async def delete(self, path: str) -> bool:
        """Delete; False when it was already gone."""
        try:
            await self._request("DELETE", path, body={"propagationPolicy": "Background"})
        except NotFoundError:
            return False
        return True


# --- the sync face -------------------------------------------------------------------------


class _LoopThread:
    """The event loop a sync face runs its client on: a daemon thread of its own, started
    on first use, or an existing loop that another thread runs (``shared``)."""

    def __init__(self, shared: asyncio.AbstractEventLoop | None = None) -> None:
        self._lock = threading.Lock()
        self._shared = shared
        self._loop: asyncio.AbstractEventLoop | None = shared
        self._thread: threading.Thread | None = None

    @property
    def started(self) -> bool:
        return self._loop is not None

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="gleaner-kube-client", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        loop = self._running_loop()
        if loop.is_closed() or not loop.is_running():
            coro.close()  # never awaited: say so instead of waiting forever
            raise KubeError(0, "the client's event loop is not running", "")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def stop(self) -> None:
        if self._shared is not None:
            return  # its owner stops it
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            loop.close()


async def _next(events: AsyncIterator[WatchEvent]) -> WatchEvent | None:
    try:
        return await anext(events)
    except StopAsyncIteration:
        return None


async def _close(events: AsyncIterator[WatchEvent]) -> None:
    close = getattr(events, "aclose", None)
    if close is not None:
        await close()


class SyncKubeClient:
    """:class:`KubeClient` for threaded callers: same calls, same errors, blocking."""

    def __init__(
        self,
        credentials: Credentials,
        *,
        timeout: float = 30.0,
        retries: int = 2,
        user_agent: str = USER_AGENT,
    ) -> None:
        self._client = KubeClient(
            credentials, timeout=timeout, retries=retries, user_agent=user_agent
        )
        self._portal = _LoopThread()
        self._owns_client = True

    @classmethod
    def sharing(cls, client: KubeClient, loop: asyncio.AbstractEventLoop) -> SyncKubeClient:
        """A sync face over ``client``, which runs on ``loop`` in another thread (the
        operator's): threaded code of that process shares its connections. Closing this
        face leaves the client and the loop to their owner."""
        face = cls.__new__(cls)
        face._client = client
        face._portal = _LoopThread(shared=loop)
        face._owns_client = False
        return face

    @classmethod
    def from_config(
        cls,
        kubeconfig: str | None = None,
        context: str | None = None,
        *,
        in_cluster: bool = True,
        **kwargs: Any,
    ) -> SyncKubeClient:
        """A client on :meth:`Credentials.load` (raises :class:`KubeConfigError`)."""
        return cls(Credentials.load(kubeconfig, context, in_cluster=in_cluster), **kwargs)

    @property
    def credentials(self) -> Credentials:
        return self._client.credentials

    def get(self, path: str, *, request_timeout: float | None = None) -> JSON | None:
        return self._portal.run(self._client.get(path, request_timeout=request_timeout))

    def list_versioned(
        self, path: str, *, label_selector: str | None = None, field_selector: str | None = None
    ) -> tuple[list[JSON], str | None]:
        return self._portal.run(
            self._client.list_versioned(
                path, label_selector=label_selector, field_selector=field_selector
            )
        )

    def list(
        self, path: str, *, label_selector: str | None = None, field_selector: str | None = None
    ) -> list[JSON]:
        return self._portal.run(
            self._client.list(path, label_selector=label_selector, field_selector=field_selector)
        )

    def watch(
        self,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
    ) -> Generator[WatchEvent, None, None]:
        """The events of :meth:`KubeClient.watch`; closing the generator ends the watch."""
        events = self._client.watch(
            path,
            label_selector=label_selector,
            field_selector=field_selector,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
        )
        try:
            while (event := self._portal.run(_next(events))) is not None:
                yield event
        finally:
            self._portal.run(_close(events))

    def create(self, path: str, body: JSON, *, request_timeout: float | None = None) -> JSON:
        return self._portal.run(self._client.create(path, body, request_timeout=request_timeout))

    def patch(self, path: str, body: JSON, *, request_timeout: float | None = None) -> JSON:
        return self._portal.run(self._client.patch(path, body, request_timeout=request_timeout))

    def delete(self, path: str) -> bool:
        return self._portal.run(self._client.delete(path))

    def close(self) -> None:
        """Close the connections and stop the loop thread (a later call starts them again)."""
        if not self._owns_client:
            return
        if self._portal.started:
            self._portal.run(self._client.close())
        self._portal.stop()

    def __enter__(self) -> SyncKubeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- paths -------------------------------------------------------------------------------


def _ns(namespace: str | None) -> str:
    return f"namespaces/{quote(namespace)}/" if namespace else ""


def offlinejobs_path(namespace: str | None = None, name: str | None = None) -> str:
    base = f"/apis/{GROUP}/{VERSION}/{_ns(namespace)}offlinejobs"
    return f"{base}/{quote(name)}" if name else base


def offlinejob_status_path(namespace: str, name: str) -> str:
    return offlinejobs_path(namespace, name) + "/status"


def nodetraces_path(name: str | None = None) -> str:
    base = f"/apis/{GROUP}/{VERSION}/nodetraces"
    return f"{base}/{quote(name)}" if name else base


def nodetrace_status_path(name: str) -> str:
    return nodetraces_path(name) + "/status"


def nodehistories_path(name: str | None = None) -> str:
    base = f"/apis/{GROUP}/{VERSION}/nodehistories"
    return f"{base}/{quote(name)}" if name else base


def nodehistory_status_path(name: str) -> str:
    return nodehistories_path(name) + "/status"


def pods_path(namespace: str | None = None, name: str | None = None) -> str:
    base = f"/api/v1/{_ns(namespace)}pods"
    return f"{base}/{quote(name)}" if name else base


def configmaps_path(namespace: str | None = None, name: str | None = None) -> str:
    base = f"/api/v1/{_ns(namespace)}configmaps"
    return f"{base}/{quote(name)}" if name else base


def nodes_path(name: str | None = None) -> str:
    base = "/api/v1/nodes"
    return f"{base}/{quote(name)}" if name else base
