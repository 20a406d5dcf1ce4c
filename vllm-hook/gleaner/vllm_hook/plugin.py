"""vLLM general-plugin entry point (opt-in).

vLLM calls :func:`register` in each of its processes when the ``gleaner_kv`` plugin is
installed and allowed (``VLLM_PLUGINS`` unset or naming it). It does nothing unless
``GLEANER_VLLM_HOOK`` is not ``0`` and the process is a Gleaner worker:

- ``GLEANER_ROLE=offline``: an :class:`InvalidationFeed` (HELLO role FRAMEWORK, this pid,
  this GPU) to ``GLEANER_SOCKET``; the runner's KV cache allocated through the shim
  (:mod:`alloc`); on vLLM's v1 ``Scheduler`` the memory path (:mod:`memory`) and the
  INVALIDATE_BLOCKS feed; OFFLINE_HANDLES sent by a :class:`report.Reporter`.
- ``GLEANER_ROLE=online``: a feed with HELLO role ONLINE; ONLINE_MEMORY after steps, when
  :class:`report.OnlineMemoryPolicy` says so (sent from the reporter's thread).
"""

from __future__ import annotations

import importlib
import logging
import os
import time
from typing import Any

from gleaner.protocol import wire as p
from gleaner.protocol.node import (
    ENV_JOB,
    ENV_ROLE,
    ENV_SOCKET,
    ENV_VLLM_HOOK,
    ROLE_ONLINE,
    ROLES,
    SOCKET_PATH,
)
from gleaner.vllm_hook import alloc, memory, report, shimapi
from gleaner.vllm_hook.feed import InvalidationFeed, gpu_identity

log = logging.getLogger(__name__)
_feed: InvalidationFeed | None = None
_reporter: report.Reporter[Any] | None = None


def enabled(env: dict[str, str] | None = None) -> bool:
    e = os.environ if env is None else env
    return e.get(ENV_ROLE) in ROLES and e.get(ENV_VLLM_HOOK, "1") != "0"


def register() -> None:
    global _feed, _reporter
    if not enabled() or _feed is not None:
        return
    try:
        module = importlib.import_module("vllm.v1.core.sched.scheduler")
    except ImportError:
        log.warning("gleaner: vLLM v1 scheduler not importable; KV hook off")
        return
    online = os.environ.get(ENV_ROLE) == ROLE_ONLINE
    uuids, indices = gpu_identity()
    feed = InvalidationFeed(
        os.environ.get(ENV_SOCKET, SOCKET_PATH),
        job=os.environ.get(ENV_JOB, ""),
        role=p.Role.ONLINE if online else p.Role.FRAMEWORK,
        gpu_uuids=uuids,
        gpu_indices=indices,
    )
    if online:
        rep: report.Reporter[Any] = report.Reporter(
            report.encoded, feed.send_frames, lambda: feed.sessions, 0.0
        )
        ok = install_online(module.Scheduler, rep)
    else:
        rep = report.Reporter(
            report.HandleEncoder(),
            feed.send_frames,
            lambda: feed.sessions,
            report.report_interval_s(),
        )
        try:
            runner = importlib.import_module("vllm.v1.worker.gpu_model_runner")
            alloc.wrap_runner(runner.GPUModelRunner)
        except ImportError:
            log.warning("gleaner: vLLM GPU model runner not importable; KV memory path off")
        ok = memory.install(module.Scheduler, feed.drain, _memory_for(rep))
    if ok:
        _feed, _reporter = feed, rep
    else:
        rep.close()
        feed.close()


def _memory_for(rep: report.Reporter[Any]) -> Any:
    def make(sched: Any) -> memory.MemoryHook | None:
        shim = shimapi.load()
        if shim is None or not alloc.LAYOUTS:
            log.warning("gleaner: KV cache not allocated through the shim; no handles reported")
            return None
        return memory.MemoryHook(shim, alloc.LAYOUTS, publish=rep.offer)

    return make


def install_online(scheduler_cls: type, rep: report.Reporter[Any]) -> bool:
    """Wrap ``update_from_output`` to offer ONLINE_MEMORY when the policy says so."""
    original = getattr(scheduler_cls, "update_from_output", None)
    if original is None:
        return False
    if getattr(original, "__gleaner_online__", False):
        return True
    policy = report.OnlineMemoryPolicy()

    def update_from_output(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        usage = report.online_usage(self)
        now = time.monotonic()
        if usage is not None and policy.due(now, usage[0]):
            rep.offer(p.OnlineMemory(0, usage[0], usage[1], time.monotonic_ns()))
        return out

    update_from_output.__gleaner_online__ = True  # type: ignore[attr-defined]
    scheduler_cls.update_from_output = update_from_output  # type: ignore[attr-defined]
    return True
