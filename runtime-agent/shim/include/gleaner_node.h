/*
 * gleaner_node.h - the node-level names the shim shares with the operator, the runtime
 * agent and the vLLM hook: environment variable names, their values and default paths.
 *
 * Python declares them once in gleaner.protocol.node (docs/protocol.md, "Contract names");
 * C cannot import that module, so this header repeats them, one macro per Python constant:
 * GLEANER_NODE_<NAME> mirrors gleaner.protocol.node.<NAME>. A test parses this header and
 * fails when a value differs, so change both together. The shim's sources name these
 * strings only through the macros.
 */
#ifndef GLEANER_NODE_H
#define GLEANER_NODE_H

/* Written by the operator into every offline container. */
#define GLEANER_NODE_ENV_ROLE "GLEANER_ROLE"
#define GLEANER_NODE_ENV_SOCKET "GLEANER_SOCKET"
#define GLEANER_NODE_ENV_JOB "GLEANER_JOB"
#define GLEANER_NODE_ENV_GPU_INDICES "GLEANER_GPU_INDICES"

/* The values of GLEANER_ROLE. */
#define GLEANER_NODE_ROLE_OFFLINE "offline"
#define GLEANER_NODE_ROLE_ONLINE "online"

/* The shim's own knobs. */
#define GLEANER_NODE_ENV_KV_PAGE_BYTES "GLEANER_KV_PAGE_BYTES"
#define GLEANER_NODE_ENV_NVIDIACTL_PATH "GLEANER_NVIDIACTL_PATH"
#define GLEANER_NODE_ENV_LIBCUDA "GLEANER_LIBCUDA"
#define GLEANER_NODE_ENV_SHIM_LOG "GLEANER_SHIM_LOG"
#define GLEANER_NODE_ENV_SHIM_RECONNECT_MS "GLEANER_SHIM_RECONNECT_MS"
#define GLEANER_NODE_ENV_SHIM_HOLD_LOG_MS "GLEANER_SHIM_HOLD_LOG_MS"
#define GLEANER_NODE_ENV_MAX_DECODE_GAP_MS "GLEANER_MAX_DECODE_GAP_MS"
#define GLEANER_NODE_ENV_IDLE_QUIET_US "GLEANER_IDLE_QUIET_US"
#define GLEANER_NODE_ENV_SHIM_FAULT "GLEANER_SHIM_FAULT"
#define GLEANER_NODE_SHIM_FAULT_GATE_WATCH_EXIT "gate-watch-exit"
#define GLEANER_NODE_SHIM_FAULT_RING_LOSE_BUSY "ring-lose-busy"

/* Defaults. */
#define GLEANER_NODE_SOCKET_PATH "/run/gleaner/agent.sock"
#define GLEANER_NODE_GATE_SEGMENT_NAME "gate.shm"
#define GLEANER_NODE_DEFAULT_NVIDIACTL_PATH "/dev/nvidiactl"
#define GLEANER_NODE_DEFAULT_LIBCUDA "libcuda.so.1"

#endif /* GLEANER_NODE_H */
