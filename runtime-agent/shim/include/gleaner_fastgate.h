/*
 * gleaner_fastgate.h - the layout of the agent's shared-memory gate segment.
 *
 * The agent creates the file <socket dir>/GLEANER_NODE_GATE_SEGMENT_NAME (mode 0666, one page)
 * and maps it; online and offline shims map it too (docs/shim.md, "The native gate path").
 * Who writes what:
 *   agent    every field of the header and each slot's uuid/index at creation (magic last),
 *            heartbeat_ns (CLOCK_MONOTONIC) every 100 ms and at every enable, and a slot's
 *            open_seq (= its busy_seq as read when the agent decided to enable the GPU);
 *   online   slot busy_seq += 1 at every busy edge, then wake += 1 and FUTEX_WAKE on wake;
 *   offline  reads only: a watch thread waits on wake and closes its own gate when a
 *            busy_seq of its GPUs moved, refuses an enable while busy_seq != open_seq, and
 *            fails closed when the heartbeat is older than stale_ns.
 * Every field is naturally aligned and written with single aligned stores (C11 atomics in
 * the shim, ctypes stores in the agent). The Python mirror is
 * gleaner.runtime_agent.fastgate; a test compares both layouts.
 */
#ifndef GLEANER_FASTGATE_H
#define GLEANER_FASTGATE_H

#include <stdint.h>

#include "gleaner_proto.h"

#define GL_FG_MAGIC 0x47464c47u /* "GLFG" */
#define GL_FG_VERSION 1u
#define GL_FG_SLOTS 64u

typedef struct gl_fg_slot {
  char uuid[GL_UUID_LEN]; /* NUL-padded "GPU-..." (may be empty: match by index) */
  int32_t index;          /* the node's GPU index */
  uint32_t busy_seq;      /* online busy edges on this GPU (wraps) */
  uint32_t open_seq;      /* the busy_seq the agent had seen at its last enable */
  uint32_t reserved;
} gl_fg_slot; /* one cache line */

typedef struct gl_fg_segment {
  uint32_t magic;   /* GL_FG_MAGIC once the agent filled the segment; 0: retired */
  uint32_t version; /* GL_FG_VERSION */
  uint32_t nslots;  /* slots in use (the node's GPUs) */
  uint32_t agent_pid;
  uint32_t wake; /* futex word: += 1 after every busy edge on any GPU */
  uint32_t reserved0;
  uint64_t heartbeat_ns; /* the agent's CLOCK_MONOTONIC at its last beat */
  uint64_t stale_ns;     /* a heartbeat older than this closes offline gates */
  uint64_t reserved1[3];
  gl_fg_slot slot[GL_FG_SLOTS];
} gl_fg_segment;

_Static_assert(sizeof(gl_fg_slot) == 64, "gl_fg_slot is one cache line");
_Static_assert(sizeof(gl_fg_segment) == 64 + 64 * GL_FG_SLOTS, "gl_fg_segment layout");

#endif /* GLEANER_FASTGATE_H */
