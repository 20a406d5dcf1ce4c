"""vLLM general-plugin entry point (opt-in).

vLLM calls :func:`register` in each of its processes when the ``gleaner_kv`` plugin is
installed and allowed (``VLLM_PLUGINS`` unset or naming it). It does nothing unless the
process is a Gleaner offline worker (``GLEANER_ROLE=offline``) and
``GLEANER_VLLM_HOOK`` is not ``0``; then it connects an :class:`InvalidationFeed` to
``GLEANER_SOCKET`` and installs the hook on vLLM's v1 ``Scheduler``.
"""

from __future__ import annotations

import importlib
import logging
import os

from gleaner.agent.vllm_hook.feed import InvalidationFeed
from gleaner.agent.vllm_hook.hook import install

log = logging.getLogger(__name__)
_feed: InvalidationFeed | None = None


def enabled(env: dict[str, str] | None = None) -> bool:
    e = os.environ if env is None else env
    return e.get("GLEANER_ROLE") == "offline" and e.get("GLEANER_VLLM_HOOK", "1") != "0"


def register() -> None:
    global _feed
    if not enabled() or _feed is not None:
        return
    try:
        module = importlib.import_module("vllm.v1.core.sched.scheduler")
    except ImportError:
        log.warning("gleaner: vLLM v1 scheduler not importable; KV hook off")
        return
    feed = InvalidationFeed(
        os.environ.get("GLEANER_SOCKET", "/run/gleaner/agent.sock"),
        job=os.environ.get("GLEANER_JOB", ""),
    )
    if install(module.Scheduler, feed.drain):
        _feed = feed
    else:
        feed.close()
