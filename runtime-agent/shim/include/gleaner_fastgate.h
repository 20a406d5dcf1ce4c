/*
 * gleaner_fastgate.h - the layout of the agent's shared-memory gate segment.
 *
 * The agent creates the file <socket dir>/GLEANER_NODE_GATE_SEGMENT_NAME (mode 0666, one page)
 * and maps it; online and offline shims map it too (docs/shim.md, "The native gate path").
 * Who writes what:
 *   agent    every field of the header and each slot's uuid/index at creation (magic last),
 *            heartbeat_ns (CLOCK_MONOTONIC) every 100 ms and at every enable, and a slot's
 *            open_seq (= its busy_seq as read when the agent decided to enable the GPU);
 *   online   (version 3, with a busy-source id) its busy word set (gl_fg_source), then
 *            slot busy_seq += 1 at every busy edge, then wake += 1 and FUTEX_WAKE on wake
 *            (while a loop runs, only for an edge that goes into the ring too);
 *            then (version 2) every busy, idle and decode-gap edge into the edge ring: take a
 *            ticket (edge_head += 1), fill edge[ticket % GL_FG_RING], store its commit
 *            (ticket + 1) last (an idle edge clears the busy word first); after an idle
 *            edge, FUTEX_WAKE on edge_head (a busy edge
 *            waits in the ring for the loop's next wakeup: the offline gates closed on
 *            busy_seq already);
 *   loop     (the native gate loop, include/gleaner_gateloop.h, when the agent runs one)
 *            loop_state, loop_beat_ns (at least every GL_FG_LOOP_BEAT_NS), edge_tail, and a
 *            slot's open_seq and open_gen (odd: the loop's gate for that GPU is open) at every
 *            decision, and open_at_ns (a pending enable: the gate opens then unless an edge
 *            comes first; open_seq is stored before it), then wake += 1 and FUTEX_WAKE on
 *            wake;
 *   offline  reads only: a watch thread waits on wake and closes its own gate when a
 *            busy_seq of its GPUs moved, refuses an enable while busy_seq != open_seq, and
 *            while a loop runs opens at the loop's word (open_gen odd, or open_at_ns passed:
 *            it waits for that time itself) unless a busy word of its GPUs is set, and
 *            fails closed when the heartbeat is older than stale_ns, and while a loop runs
 *            (loop_state RUNNING) when the loop's beat is older than stale_ns, or when the
 *            loop stopped (loop_state STOPPED).
 * Every field is naturally aligned and written with single aligned stores (C11 atomics in
 * the shim, ctypes stores in the agent). The Python mirror is
 * gleaner.runtime_agent.fastgate; a test compares both layouts.
 */
#ifndef GLEANER_FASTGATE_H
#define GLEANER_FASTGATE_H

#include <stdint.h>

#include "gleaner_proto.h"

#define GL_FG_MAGIC 0x47464c47u /* "GLFG" */
#define GL_FG_VERSION 3u
#define GL_FG_SLOTS 64u
#define GL_FG_RING 4096u                   /* edges in the ring (a power of two) */
#define GL_FG_SOURCES 64u                  /* busy words: online connections at once */
#define GL_FG_LOOP_BEAT_NS 50000000ull /* the loop beats at least this often */

enum { GL_FG_EDGE_BUSY = 1, GL_FG_EDGE_IDLE = 2, GL_FG_EDGE_GAP = 3 };
enum { GL_FG_LOOP_NONE = 0, GL_FG_LOOP_RUNNING = 1, GL_FG_LOOP_STOPPED = 2 };

typedef struct gl_fg_slot {
  char uuid[GL_UUID_LEN]; /* NUL-padded "GPU-..." (may be empty: match by index) */
  int32_t index;          /* the node's GPU index */
  uint32_t busy_seq;      /* online busy edges on this GPU (wraps) */
  uint32_t open_seq;      /* the busy_seq the agent had seen at its last enable */
  uint32_t open_gen;      /* the loop's decisions on this GPU; odd: open */
} gl_fg_slot; /* one cache line */

typedef struct gl_fg_edge {
  uint32_t commit; /* the edge's ticket + 1, stored last (release) */
  uint16_t kind;   /* GL_FG_EDGE_* */
  uint16_t reserved0;
  uint32_t source; /* the busy source: the online connection's id (HELLO_ACK source_id) */
  uint32_t reserved1;
  uint64_t mask;    /* the slots the edge is on */
  uint64_t t_ns;    /* CLOCK_MONOTONIC */
  uint64_t request; /* 0: anonymous; else the request (idle: it finished) */
  uint64_t gap_ns;  /* GL_FG_EDGE_GAP: the decode gap */
} gl_fg_edge;

/* One online connection's busy word (version 3): state the ring cannot lose. The online shim
 * claims a free entry (state 0 -> source << 32, then mask) for its busy-source id, sets bit 0
 * of state before every busy edge (before busy_seq and the ring) and clears it before every
 * idle edge's ring entry, with compare-and-swap on state (only while the upper half is still
 * its id). The native loop and the offline watch threads treat a GPU of `mask` as busy while
 * bit 0 is set, whatever the ring said; the agent frees the entry (state 0) when the
 * connection goes away (gl_loop_drop_source), so a process that died busy holds its GPUs
 * closed until then. */
typedef struct gl_fg_source {
  uint64_t state; /* source id << 32 | busy (bit 0); 0: free */
  uint64_t mask;  /* the slots of the connection's GPUs */
} gl_fg_source;

typedef struct gl_fg_segment {
  uint32_t magic;   /* GL_FG_MAGIC once the agent filled the segment; 0: retired */
  uint32_t version; /* GL_FG_VERSION */
  uint32_t nslots;  /* slots in use (the node's GPUs) */
  uint32_t agent_pid;
  uint32_t wake;       /* futex word: += 1 after every busy edge and every loop decision */
  uint32_t loop_state; /* GL_FG_LOOP_* */
  uint64_t heartbeat_ns; /* the agent's CLOCK_MONOTONIC at its last beat */
  uint64_t stale_ns;     /* a heartbeat (agent's or loop's) older than this closes offline gates */
  uint64_t loop_beat_ns; /* the native loop's CLOCK_MONOTONIC at its last beat */
  uint32_t edge_head;    /* futex word: tickets taken by online shims */
  uint32_t edge_tail;    /* edges the loop consumed */
  uint64_t reserved1;
  gl_fg_slot slot[GL_FG_SLOTS];
  uint64_t open_at_ns[GL_FG_SLOTS]; /* the loop's pending enable per slot (0: none) */
  gl_fg_source source[GL_FG_SOURCES]; /* online connections' busy words */
  gl_fg_edge edge[GL_FG_RING];
} gl_fg_segment;

/* The slots that some online connection's busy word says are busy now (the one reading of
 * the busy words: the native loop and the offline shims both call it). */
static inline uint64_t gl_fg_busy_mask(const gl_fg_segment *s) {
  uint64_t busy = 0;
  for (uint32_t i = 0; i < GL_FG_SOURCES; i++)
    if (__atomic_load_n(&s->source[i].state, __ATOMIC_ACQUIRE) & 1u)
      busy |= __atomic_load_n(&s->source[i].mask, __ATOMIC_ACQUIRE);
  return busy;
}

/* The one ring writer (the online shims, and the agent for edges that reach it as frames):
 * a busy edge first bumps busy_seq of its slots (the offline watch threads close on it; the
 * loop's open_seq counts the busy entries it read, so every bump has exactly one entry), then
 * wake += 1; the caller wakes the watchers (FUTEX_WAKE on wake) before the entry goes in. */
static inline void gl_fg_busy_bump(gl_fg_segment *s, uint64_t mask) {
  for (uint32_t k = 0; k < GL_FG_SLOTS && k < s->nslots; k++)
    if (mask & (1ull << k))
      __atomic_fetch_add(&s->slot[k].busy_seq, 1, __ATOMIC_SEQ_CST);
  __atomic_fetch_add(&s->wake, 1, __ATOMIC_SEQ_CST);
}

/* One entry into the ring, many writers: take a ticket, fill the entry, commit it last. The
 * caller wakes the loop (FUTEX_WAKE on edge_head) after an idle edge. */
static inline void gl_fg_ring_put(gl_fg_segment *s, uint32_t source, uint16_t kind, uint64_t mask,
                                  uint64_t t_ns, uint64_t request, uint64_t gap_ns) {
  uint32_t ticket = __atomic_fetch_add(&s->edge_head, 1, __ATOMIC_ACQ_REL);
  gl_fg_edge *e = &s->edge[ticket & (GL_FG_RING - 1)];
  e->kind = kind;
  e->source = source;
  e->mask = mask;
  e->t_ns = t_ns;
  e->request = request;
  e->gap_ns = gap_ns;
  __atomic_store_n(&e->commit, ticket + 1, __ATOMIC_RELEASE);
}

_Static_assert(sizeof(gl_fg_slot) == 64, "gl_fg_slot is one cache line");
_Static_assert(sizeof(gl_fg_edge) == 48, "gl_fg_edge layout");
_Static_assert((GL_FG_RING & (GL_FG_RING - 1)) == 0, "GL_FG_RING is a power of two");
_Static_assert(sizeof(gl_fg_source) == 16, "gl_fg_source layout");
_Static_assert(sizeof(gl_fg_segment) == 64 + 72 * GL_FG_SLOTS + 16 * GL_FG_SOURCES + 48 * GL_FG_RING,
               "gl_fg_segment layout");

#endif /* GLEANER_FASTGATE_H */
