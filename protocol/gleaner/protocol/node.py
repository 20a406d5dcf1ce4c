"""Node-level contract names: the environment, paths and values an offline Pod, the shim,
the vLLM hook and the runtime agent agree on (standard library only).

Contract. Every name below is declared here once; Python code imports it from here (or
through ``gleaner.api.contract``, which re-exports the ones the operator needs). The C shim
cannot import Python, so ``runtime-agent/shim/include/gleaner_node.h`` repeats the names the
shim reads, and a test fails when the two differ. docs/protocol.md ("Contract names") lists
each name with who writes and who reads it.

- The operator writes ``ENV_ROLE``/``ENV_SOCKET``/``ENV_JOB`` and ``LD_PRELOAD`` =
  ``SHIM_PATH`` into every offline container; the shim and the vLLM hook read them.
- The runtime agent listens on ``SOCKET_DIR``/``SOCKET_NAME`` (= ``SOCKET_PATH``) and copies
  the shim from ``SHIM_IMAGE_PATH`` (inside its image) to ``SHIM_DIR`` on the node.
- The other ``ENV_*`` names are knobs of one reader (shim or hook), kept here so that tests,
  harnesses and docs name them the same way.
"""

from __future__ import annotations

from typing import Final

# --- Roles (the value of ENV_ROLE; also the operator's role label value) -----------------
ROLE_OFFLINE: Final = "offline"
"""An offline (harvesting) inference process."""
ROLE_ONLINE: Final = "online"
"""An online (latency-critical) inference process."""
ROLES: Final = (ROLE_OFFLINE, ROLE_ONLINE)

# --- Environment written by the operator, read by the shim and the vLLM hook --------------
ENV_ROLE: Final = "GLEANER_ROLE"
"""``offline`` or ``online``; without it the shim only passes calls through."""
ENV_SOCKET: Final = "GLEANER_SOCKET"
"""Path of the agent's control socket (default ``SOCKET_PATH``)."""
ENV_JOB: Final = "GLEANER_JOB"
"""``<namespace>/<OfflineJob name>`` of an offline process (sent in HELLO)."""
ENV_GPU_INDICES: Final = "GLEANER_GPU_INDICES"
"""Comma-separated node GPU indices of the process (shim and hook: HELLO's GPU list)."""

# --- Knobs of the vLLM hook -----------------------------------------------------------------
ENV_VLLM_HOOK: Final = "GLEANER_VLLM_HOOK"
"""``0`` turns the vLLM plugin off in a Gleaner worker."""
ENV_SHIM_PATH: Final = "GLEANER_SHIM_PATH"
"""Where the hook loads the shim from when it is not preloaded (default ``SHIM_PATH``)."""
ENV_KV_REPORT_MS: Final = "GLEANER_KV_REPORT_MS"
"""Milliseconds between the hook's KV-page reports."""
ENV_KV_REPORT_FORMAT: Final = "GLEANER_KV_REPORT_FORMAT"
"""``handles`` or ``groups``: how the hook reports KV pages."""

# --- Knobs of the shim ----------------------------------------------------------------------
ENV_KV_PAGE_BYTES: Final = "GLEANER_KV_PAGE_BYTES"
"""KV page size of the shim's allocator (default 2 MiB)."""
ENV_NVIDIACTL_PATH: Final = "GLEANER_NVIDIACTL_PATH"
"""The RM control device the shim watches (default ``DEFAULT_NVIDIACTL_PATH``)."""
ENV_LIBCUDA: Final = "GLEANER_LIBCUDA"
"""The driver library the shim binds its helpers from (default ``DEFAULT_LIBCUDA``)."""
ENV_SHIM_LOG: Final = "GLEANER_SHIM_LOG"
"""``quiet`` or ``debug``; anything else: normal logging."""
ENV_SHIM_RECONNECT_MS: Final = "GLEANER_SHIM_RECONNECT_MS"
ENV_SHIM_HOLD_LOG_MS: Final = "GLEANER_SHIM_HOLD_LOG_MS"
ENV_MAX_DECODE_GAP_MS: Final = "GLEANER_MAX_DECODE_GAP_MS"
ENV_IDLE_QUIET_US: Final = "GLEANER_IDLE_QUIET_US"
ENV_SHIM_FAULT: Final = "GLEANER_SHIM_FAULT"
"""Fault injection for tests: ``gate-watch-exit`` ends the offline shim's gate watch thread;
``ring-lose-busy`` makes the online shim take a ring ticket for each busy edge and never
fill it (a writer that died mid-entry: the native gate loop loses the edge)."""
SHIM_FAULT_GATE_WATCH_EXIT: Final = "gate-watch-exit"
SHIM_FAULT_RING_LOSE_BUSY: Final = "ring-lose-busy"

# --- Paths on the node ----------------------------------------------------------------------
SOCKET_DIR: Final = "/run/gleaner"
"""Host directory of the agent's control socket, mounted read-write into offline Pods."""
SOCKET_NAME: Final = "agent.sock"
SOCKET_PATH: Final = f"{SOCKET_DIR}/{SOCKET_NAME}"
"""Default of ``ENV_SOCKET``: where the agent listens and the shim and hook connect."""
GATE_SEGMENT_NAME: Final = "gate.shm"
"""The agent's shared-memory gate segment, beside the socket (``SOCKET_DIR``/``GATE_SEGMENT_NAME``
when the socket is the default): per-GPU online busy-edge counters the online shims bump and
the offline shims watch, and the agent's heartbeat (docs/shim.md, "The native gate path")."""
SHIM_DIR: Final = "/var/lib/gleaner/lib"
"""Host directory the agent installs the shim into, mounted read-only into offline Pods."""
SHIM_LIBRARY: Final = "libgleaner_shim.so"
SHIM_PATH: Final = f"{SHIM_DIR}/{SHIM_LIBRARY}"
"""The shim on the node: the offline containers' ``LD_PRELOAD``, the hook's default."""
SHIM_IMAGE_PATH: Final = f"/opt/gleaner/lib/{SHIM_LIBRARY}"
"""The shim inside the agent's image (copied to ``SHIM_DIR`` at start)."""
DEFAULT_NVIDIACTL_PATH: Final = "/dev/nvidiactl"
DEFAULT_LIBCUDA: Final = "libcuda.so.1"

# --- The shim's KV page API (gleaner_shim.h), as the hook binds it --------------------------
KV_PAGE_BACKED: Final = 0
"""Page state: backed by its own memory."""
KV_PAGE_QUARANTINED: Final = 1
"""Page state: reclaimed by the agent (the shared quarantine allocation is mapped there)."""
KV_MALLOC_SYMBOL: Final = "gleaner_kv_malloc"
KV_FREE_SYMBOL: Final = "gleaner_kv_free"
