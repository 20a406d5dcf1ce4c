"""A fake kubelet PodResources server for tests (docs/agent.md, "Uninstrumented processes").

Contract. :class:`FakePodResources` serves ``v1.PodResourcesLister/List`` over gRPC on a unix
socket, answering :attr:`FakePodResources.entries` (settable at any time) encoded by
:func:`gleaner.runtime_agent.podresources.encode_list_response`; :attr:`calls` counts the
``List`` calls, and :attr:`fail` set to a gRPC status code name (``"UNAVAILABLE"``) makes
``List`` answer that error instead. It is a context manager: the server runs between enter
and exit.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from concurrent import futures
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc

from gleaner.runtime_agent.podresources import ContainerDevices, encode_list_response


class FakePodResources:
    """See the module docstring."""

    def __init__(self, socket_path: Path, entries: Iterable[ContainerDevices] = ()) -> None:
        self.socket_path = socket_path
        self.entries: list[ContainerDevices] = list(entries)
        self.fail: str | None = None
        self.calls = 0
        self.called = threading.Event()
        self._server: Any = None

    def _list(self, request: bytes, context: Any) -> list[ContainerDevices]:
        self.calls += 1
        self.called.set()
        if self.fail is not None:
            context.abort(getattr(grpc.StatusCode, self.fail), "fake kubelet failure")
        return list(self.entries)

    def __enter__(self) -> FakePodResources:
        handler = grpc.method_handlers_generic_handler(
            "v1.PodResourcesLister",
            {
                "List": grpc.unary_unary_rpc_method_handler(
                    self._list,
                    request_deserializer=lambda raw: raw,
                    response_serializer=encode_list_response,
                )
            },
        )
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self._server.add_generic_rpc_handlers((handler,))
        self._server.add_insecure_port(f"unix://{self.socket_path}")
        self._server.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None
