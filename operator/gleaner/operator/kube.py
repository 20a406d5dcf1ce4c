"""A small async Kubernetes REST client for the operator's own calls (aiohttp).

Contract: ``KubeClient`` does get / list (with label selectors) / create / merge-patch /
delete on JSON objects by URL path, and nothing more. Credentials come from the same place
kopf's own login takes them: the ``kubernetes`` package's config loader (in-cluster service
account first, then ``KUBECONFIG``), so one kubeconfig serves kopf and these calls. Patches
are always JSON merge patches (``application/merge-patch+json``): lists are replaced whole,
``None`` deletes a key. ``NotFoundError`` and ``ConflictError`` are the errors callers act on; every
other failure raises ``KubeError`` with the API server's message.

Paths are built by the helpers at the bottom (``pod_path`` etc.), never by hand in handlers.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp

from gleaner.api import GROUP, VERSION
from gleaner.api.kubeconfig import load_cluster_config

JSON = dict[str, Any]


class KubeError(Exception):
    """A failed API call: HTTP status and the server's message."""

    def __init__(self, status: int, message: str, path: str) -> None:
        super().__init__(f"HTTP {status} on {path}: {message}")
        self.status = status
        self.message = message
        self.path = path


class NotFoundError(KubeError):
    pass


class ConflictError(KubeError):
    pass


@dataclass(frozen=True)
class Credentials:
    """Where the API server is and how to authenticate (from the kubernetes config loader)."""

    server: str
    token: str | None = None
    ca_path: str | None = None
    cert_path: str | None = None
    key_path: str | None = None
    insecure: bool = False

    @classmethod
    def load(cls) -> Credentials:
        """In-cluster service account, else ``KUBECONFIG`` / ``~/.kube/config``."""
        import kubernetes

        load_cluster_config()
        config = kubernetes.client.Configuration.get_default_copy()
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
        )


class KubeClient:
    """Async JSON calls to the API server over one pooled aiohttp session."""

    def __init__(self, credentials: Credentials, *, timeout: float = 30.0) -> None:
        self.credentials = credentials
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _ssl(self) -> ssl.SSLContext | bool:
        creds = self.credentials
        if not creds.server.startswith("https"):
            return False
        if creds.insecure:
            return False
        context = ssl.create_default_context(cafile=creds.ca_path)
        if creds.cert_path and creds.key_path:
            context.load_cert_chain(creds.cert_path, creds.key_path)
        return context

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            headers = {"Accept": "application/json"}
            if self.credentials.token:
                headers["Authorization"] = f"Bearer {self.credentials.token}"
            connector = aiohttp.TCPConnector(ssl=self._ssl(), limit=32)
            self._session = aiohttp.ClientSession(
                base_url=self.credentials.server + "/",
                headers=headers,
                connector=connector,
                timeout=self._timeout,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> JSON:
        session = self._get_session()
        url = path.lstrip("/")
        headers = {"Content-Type": content_type} if body is not None else {}
        for attempt in range(3):
            try:
                async with session.request(
                    method, url, json=body, params=params, headers=headers
                ) as resp:
                    if resp.status < 300:
                        data = await resp.json(content_type=None)
                        return data if isinstance(data, dict) else {}
                    text = await resp.text()
                    message = _status_message(text)
                    if resp.status == 404:
                        raise NotFoundError(resp.status, message, path)
                    if resp.status == 409:
                        raise ConflictError(resp.status, message, path)
                    if resp.status == 401 and attempt < 2:
                        # Service-account tokens rotate: reload them like kopf re-logins.
                        await self._reload_credentials()
                        session = self._get_session()
                        continue
                    if resp.status in (429, 500, 502, 503, 504) and attempt < 2:
                        await asyncio.sleep(0.2 * (attempt + 1))
                        continue
                    raise KubeError(resp.status, message, path)
            except aiohttp.ClientConnectionError as exc:
                if attempt == 2:
                    raise KubeError(0, f"connection failed: {exc}", path) from exc
                await asyncio.sleep(0.2 * (attempt + 1))
        raise KubeError(0, "unreachable", path)  # pragma: no cover

    async def _reload_credentials(self) -> None:
        self.credentials = await asyncio.to_thread(Credentials.load)
        await self.close()

    async def get(self, path: str) -> JSON | None:
        """The object, or None when it does not exist."""
        try:
            return await self._request("GET", path)
        except NotFoundError:
            return None

    async def list(self, path: str, *, label_selector: str | None = None) -> list[JSON]:
        params = {"labelSelector": label_selector} if label_selector else None
        data = await self._request("GET", path, params=params)
        items = data.get("items") or []
        return [i for i in items if isinstance(i, dict)]

    async def create(self, path: str, body: JSON) -> JSON:
        """Create; raises ``ConflictError`` when the name is taken."""
        return await self._request("POST", path, body=body)

    async def patch(self, path: str, body: JSON) -> JSON:
        """JSON merge patch."""
        return await self._request(
            "PATCH", path, body=body, content_type="application/merge-patch+json"
        )

    async def delete(self, path: str) -> bool:
        """Delete; False when it was already gone."""
        try:
            await self._request("DELETE", path, body={"propagationPolicy": "Background"})
        except NotFoundError:
            return False
        return True


def _status_message(text: str) -> str:
    import json

    try:
        data = json.loads(text)
    except ValueError:
        return text.strip().splitlines()[0] if text.strip() else ""
    if isinstance(data, dict):
        return str(data.get("message") or data.get("reason") or "")[:500]
    return ""


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


def pods_path(namespace: str | None = None, name: str | None = None) -> str:
    base = f"/api/v1/{_ns(namespace)}pods"
    return f"{base}/{quote(name)}" if name else base


def configmaps_path(namespace: str | None = None, name: str | None = None) -> str:
    base = f"/api/v1/{_ns(namespace)}configmaps"
    return f"{base}/{quote(name)}" if name else base


def nodes_path(name: str | None = None) -> str:
    base = "/api/v1/nodes"
    return f"{base}/{quote(name)}" if name else base
