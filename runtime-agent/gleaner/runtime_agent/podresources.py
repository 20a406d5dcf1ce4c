"""Which pods hold which GPUs, from the kubelet's PodResources API (docs/agent.md,
"Uninstrumented processes").

Contract. The kubelet serves ``v1.PodResourcesLister`` over gRPC on a unix socket
(``KUBELET_POD_RESOURCES_SOCKET``); its ``List`` answers, per pod and container, the device
ids each device plugin allocated (the NVIDIA device plugin's ids are the GPUs' UUIDs). The
agent needs four fields of that answer, so the messages are encoded here by hand from the
public API description rather than generated:

- :func:`decode_list_response` turns a ``ListPodResourcesResponse`` into
  :class:`ContainerDevices` (pod ``namespace/name``, container, resource, device ids),
  skipping every other field (CPU ids, memory, topology, dynamic resources) by its wire type;
  :func:`encode_list_response` is its inverse (the fake server of the tests). A malformed
  message raises :class:`ValueError`.
- :func:`gpu_holders` is pure: device ids → the agent's GPU indices through the inventory's
  UUIDs (a bare decimal id is an index); ids of other devices (MIG slices, other resources)
  are ignored.
- :class:`PodResourcesClient` makes the ``List`` call (grpcio, imported on first use, one
  channel, a deadline of ``timeout_s``); any failure raises :class:`PodResourcesError`.
- :class:`KubeletGpuHolders` keeps the latest answer: a daemon thread lists every
  ``interval_s`` and :meth:`KubeletGpuHolders.__call__` answers from that cache at once (the
  agent's loop asks every poll). It answers None — unknown — before the first answer and
  once ``stale_s`` passed since the last good one (a kubelet that stopped answering says
  nothing about who holds a GPU now).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gleaner.api import GpuInfo
from gleaner.api.contract import KUBELET_POD_RESOURCES_SOCKET

log = logging.getLogger("gleaner.runtime_agent.podresources")

LIST_METHOD = "/v1.PodResourcesLister/List"
"""The gRPC method path: package ``v1``, service ``PodResourcesLister``, rpc ``List``."""

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
"""Protobuf wire types this decoder can skip or read (groups, 3 and 4, are not used)."""


@dataclass(frozen=True, slots=True)
class ContainerDevices:
    """Devices of one resource that the kubelet allocated to one container."""

    pod: str
    """``namespace/name``."""
    container: str
    resource: str
    device_ids: tuple[str, ...]


class PodResourcesError(Exception):
    """The kubelet's PodResources API could not be read."""


# -- the wire encoding ---------------------------------------------------------------------


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf: bytes) -> Iterable[tuple[int, int, bytes | int]]:
    """(field number, wire type, value) of one message: bytes for length-delimited fields,
    an int otherwise."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, pos = _varint(buf, pos)
            yield number, wire, value
        elif wire == _LEN:
            size, pos = _varint(buf, pos)
            if pos + size > len(buf):
                raise ValueError("truncated field")
            yield number, wire, buf[pos : pos + size]
            pos += size
        elif wire in (_I64, _I32):
            size = 8 if wire == _I64 else 4
            if pos + size > len(buf):
                raise ValueError("truncated field")
            yield number, wire, int.from_bytes(buf[pos : pos + size], "little")
            pos += size
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _text(value: bytes | int) -> str:
    if not isinstance(value, bytes):
        raise ValueError("a string field with a numeric wire type")
    return value.decode("utf-8")


def _sub(value: bytes | int) -> bytes:
    if not isinstance(value, bytes):
        raise ValueError("a message field with a numeric wire type")
    return value


def decode_list_response(buf: bytes) -> list[ContainerDevices]:
    """The devices of a ``ListPodResourcesResponse``, one entry per container and resource."""
    out: list[ContainerDevices] = []
    for number, _, pod_value in _fields(buf):
        if number != 1:  # pod_resources
            continue
        name = namespace = ""
        containers: list[bytes] = []
        for n, _, v in _fields(_sub(pod_value)):
            if n == 1:
                name = _text(v)
            elif n == 2:
                namespace = _text(v)
            elif n == 3:
                containers.append(_sub(v))
        for container in containers:
            cname = ""
            devices: list[tuple[str, tuple[str, ...]]] = []
            for n, _, v in _fields(container):
                if n == 1:
                    cname = _text(v)
                elif n == 2:  # ContainerDevices
                    resource, ids = "", list[str]()
                    for dn, _, dv in _fields(_sub(v)):
                        if dn == 1:
                            resource = _text(dv)
                        elif dn == 2:
                            ids.append(_text(dv))
                    devices.append((resource, tuple(ids)))
            for resource, device_ids in devices:
                out.append(ContainerDevices(f"{namespace}/{name}", cname, resource, device_ids))
    return out


def _key(number: int, wire: int) -> bytes:
    return _encode_varint(number << 3 | wire)


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _len_field(number: int, payload: bytes) -> bytes:
    return _key(number, _LEN) + _encode_varint(len(payload)) + payload


def encode_list_response(entries: Iterable[ContainerDevices]) -> bytes:
    """A ``ListPodResourcesResponse`` holding ``entries`` (pods and containers grouped in the
    order they first appear)."""
    pods: dict[str, dict[str, list[ContainerDevices]]] = {}
    for entry in entries:
        pods.setdefault(entry.pod, {}).setdefault(entry.container, []).append(entry)
    out = bytearray()
    for pod, containers in pods.items():
        namespace, _, name = pod.partition("/")
        body = _len_field(1, name.encode()) + _len_field(2, namespace.encode())
        for cname, devices in containers.items():
            cbody = _len_field(1, cname.encode())
            for d in devices:
                dbody = _len_field(1, d.resource.encode())
                dbody += b"".join(_len_field(2, i.encode()) for i in d.device_ids)
                cbody += _len_field(2, dbody)
            body += _len_field(3, cbody)
        out += _len_field(1, body)
    return bytes(out)


# -- the decision ----------------------------------------------------------------------------


def gpu_holders(
    entries: Iterable[ContainerDevices], inventory: Sequence[GpuInfo]
) -> dict[int, tuple[str, ...]]:
    """GPU index → the pods holding it (sorted, each once); GPUs nobody holds are left out."""
    index_of = {gpu.uuid: gpu.index for gpu in inventory}
    indices = {gpu.index for gpu in inventory}
    held: dict[int, set[str]] = {}
    for entry in entries:
        for device in entry.device_ids:
            gpu = index_of.get(device)
            if gpu is None and device.isdecimal() and int(device) in indices:
                gpu = int(device)
            if gpu is not None:
                held.setdefault(gpu, set()).add(entry.pod)
    return {gpu: tuple(sorted(pods)) for gpu, pods in sorted(held.items())}


# -- the shells ------------------------------------------------------------------------------


class PodResourcesClient:
    """See the module docstring."""

    def __init__(self, socket_path: str = KUBELET_POD_RESOURCES_SOCKET, timeout_s: float = 2.0):
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        self._channel: Any = None
        self._list: Any = None

    def list(self) -> list[ContainerDevices]:
        """The kubelet's answer to ``List`` now."""
        import grpc

        if self._list is None:
            self._channel = grpc.insecure_channel(f"unix://{self.socket_path}")
            self._list = self._channel.unary_unary(
                LIST_METHOD,
                request_serializer=lambda _request: b"",
                response_deserializer=decode_list_response,
            )
        try:
            answer: list[ContainerDevices] = self._list(None, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise PodResourcesError(f"{self.socket_path}: {exc.code().name}") from exc
        except ValueError as exc:
            raise PodResourcesError(f"{self.socket_path}: malformed answer: {exc}") from exc
        return answer

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = self._list = None


class KubeletGpuHolders:
    """See the module docstring."""

    def __init__(
        self,
        inventory: Sequence[GpuInfo],
        list_devices: Callable[[], list[ContainerDevices]],
        *,
        interval_s: float = 1.0,
        stale_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inventory = tuple(inventory)
        self.list_devices = list_devices
        self.interval_s = interval_s
        self.stale_s = stale_s
        self.clock = clock
        self.errors = 0
        self.last_error: str | None = None
        self._holders: dict[int, tuple[str, ...]] | None = None
        self._at: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self) -> Mapping[int, Sequence[str]] | None:
        at, holders = self._at, self._holders
        if at is None or self.clock() - at > self.stale_s:
            return None
        return holders

    def refresh(self) -> None:
        """List now (blocking); a failure keeps the last answer until it goes stale."""
        try:
            entries = self.list_devices()
        except PodResourcesError as exc:
            self.errors += 1
            if self.last_error != str(exc):  # once per distinct failure, not every second
                log.warning("kubelet PodResources: %s", exc)
            self.last_error = str(exc)
            return
        self._holders = gpu_holders(entries, self.inventory)
        self._at = self.clock()
        self.last_error = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pod-resources", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(self.interval_s)
