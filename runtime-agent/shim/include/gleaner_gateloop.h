/*
 * gleaner_gateloop.h - the native gate loop: the compute gate of every node GPU, run by a
 * thread of the agent's process on the online edges of the shared-memory segment
 * (include/gleaner_fastgate.h), without the Python interpreter.
 *
 * Contract. gl_loop_start() takes a mapped, filled segment (the agent's own mapping) and a
 * gate configuration, creates one gate (include/gleaner_gate.h: the one gate rule) per slot
 * and starts one thread. The thread:
 *   - beats: stores loop_beat_ns (CLOCK_MONOTONIC) at least every GL_FG_LOOP_BEAT_NS, and
 *     loop_state = RUNNING at start; offline shims fail closed when the beat is older than
 *     the segment's stale_ns, or when loop_state is STOPPED;
 *   - consumes the edge ring in ticket order: a busy edge makes its source (the online
 *     connection's id, HELLO_ACK source_id) a busy source of
 *     the edge's GPUs (a GPU is busy while any source is; the first busy edge of a period, or
 *     a named request's, goes to gl_gate_online_busy), an idle edge removes the source (the
 *     last one: gl_gate_online_idle; a named request that finished while others are busy:
 *     gl_gate_request_done), a gap edge is gl_gate_decode_gap;
 *   - ticks each gate at its gl_gate_next_deadline (FUTEX_WAIT on edge_head with that
 *     timeout, at most GL_FG_LOOP_BEAT_NS), after consuming the ring: online shims wake it
 *     only for idle edges, so a busy edge is read at the next wakeup, always before a
 *     decision (and one written after that read leaves open_seq behind busy_seq);
 *   - carries out each decision in the slot: an enable stores open_seq = the busy edges of
 *     that GPU it consumed (each bumped busy_seq once before its ring entry, so an edge whose
 *     entry is not consumed yet keeps open_seq != busy_seq and the offline shim refuses),
 *     then open_gen += 1 (odd: open); a disable makes open_gen even; then wake += 1 and
 *     FUTEX_WAKE on wake. Accounting is kept as a log of level changes and counts (busy and
 *     enabled levels per GPU, preemptions, finished requests: gl_loop_acct) that the agent
 *     drains in batches (gl_loop_drain_log) and replays; counters and a gate's state are
 *     read with gl_loop_stats_read.
 * Lost edges (the ring overran, or an entry stayed uncommitted for GL_LOOP_COMMIT_WAIT_NS:
 * its writer died mid-entry) are counted; every gate is then held closed for
 * GL_LOOP_LOST_HOLD_S. At every wakeup, once the ring is read, the online connections' busy
 * words (gl_fg_source) are checked against the loop's busy sources: a connection busy by its
 * word but not in the loop's sources (its busy entry was lost) becomes a busy source of its
 * GPUs, so a lost busy edge never lets a busy GPU open; it stays one until its idle edge or
 * gl_loop_drop_source, which also frees its word.
 * Every other call (hold, force_disable, stats) takes the loop's lock, which the thread holds
 * while it handles a batch of edges: none waits for more than one batch. The loop never calls
 * into Python; the calls below release the GIL (ctypes.CDLL).
 */
#ifndef GLEANER_GATELOOP_H
#define GLEANER_GATELOOP_H

#include <stdint.h>

#include "gleaner_fastgate.h"
#include "gleaner_gate.h"

#define GL_LOOP_ABI 2
#define GL_LOOP_COMMIT_WAIT_NS 50000000ull /* an uncommitted entry is lost after this */
#define GL_LOOP_LOST_HOLD_S 1.0            /* gates held closed after lost edges */
#define GL_LOOP_MAX_SOURCES 64             /* busy sources tracked per GPU */

#define GL_LOOP_LOG_CAP 65536u /* accounting entries kept until drained */

typedef struct gl_loop gl_loop;

/* One accounting entry, in the order the loop made the change (the agent replays them). */
enum {
  GL_LOOP_ACCT_BUSY = 1,       /* value: the GPU's online busy level from t (0 or 1) */
  GL_LOOP_ACCT_ENABLED = 2,    /* value: the GPU's offline enabled level from t (0 or 1) */
  GL_LOOP_ACCT_PREEMPTION = 3, /* a preemption at t */
  GL_LOOP_ACCT_REQUEST = 4,    /* a request finished; value: its preemptions */
};
typedef struct gl_loop_acct {
  double t; /* CLOCK_MONOTONIC seconds */
  double value;
  int32_t gpu; /* the node index */
  uint32_t op; /* GL_LOOP_ACCT_* */
} gl_loop_acct;

typedef struct gl_loop_stats {
  uint64_t edges;       /* ring entries consumed */
  uint64_t lost_edges;  /* ring entries lost (overrun or never committed) */
  uint64_t wakeups;     /* times the thread woke */
  uint64_t decisions;   /* enables and disables carried out */
  uint64_t log_dropped; /* accounting entries dropped: the log was full (not drained) */
  uint32_t state;       /* GL_FG_LOOP_* as the thread last stored it */
  uint32_t busy_from_words; /* busy sources taken from a busy word, not a ring entry */
} gl_loop_stats;

int gl_loop_abi(void);
/* Start the loop on `seg` (mapped, filled, stays mapped until gl_loop_free) at CLOCK_MONOTONIC
 * now; NULL on a bad configuration, without memory or without a thread (errno set). */
gl_loop *gl_loop_start(gl_fg_segment *seg, const gl_gate_config *c);
/* Stop the thread (loop_state STOPPED: offline gates close) and wait for it. Idempotent. */
void gl_loop_stop(gl_loop *l);
/* Stop if running, then free the gates. */
void gl_loop_free(gl_loop *l);
/* Copy the loop's counters and slot k's gate view (NULL: skip); 0 when k is out of range. */
int gl_loop_stats_read(gl_loop *l, gl_loop_stats *out, uint32_t k, gl_gate_view *view);
/* Keep slot k's gate closed (or let go), as gl_gate_hold at now; the gate's answer. */
int gl_loop_hold(gl_loop *l, uint32_t k, int held);
/* Close slot k's gate without a preemption (memory reclamation); the gate's answer. */
int gl_loop_force_disable(gl_loop *l, uint32_t k);
/* Move up to `cap` accounting entries, oldest first, into `out`; returns how many. */
size_t gl_loop_drain_log(gl_loop *l, gl_loop_acct *out, size_t cap);
/* An online connection went away: its busy periods end now (the last source of a GPU:
 * gl_gate_online_idle), as if it had sent its idle edges; its ring entries are read first,
 * and its busy words are freed (a process that died busy holds its GPUs closed until then). */
void gl_loop_drop_source(gl_loop *l, uint32_t source);
/* An online edge that reached the agent as a frame (a connection without the ring: before its
 * HELLO_ACK, without a free busy word, or a framework hook naming requests), from online
 * connection `source` on the slots of `mask` at t_ns (CLOCK_MONOTONIC), into the ring with the
 * shims' own writer (gl_fg_busy_bump, gl_fg_ring_put): the loop gates and accounts it like
 * a shim's. kind is GL_FG_EDGE_*; request 0 is anonymous (idle: else the request that
 * finished); gap_ns is the decode gap of a GL_FG_EDGE_GAP. 0 on a bad kind or an empty mask. */
int gl_loop_edge(gl_loop *l, uint32_t source, uint32_t kind, uint64_t mask, uint64_t t_ns,
                 uint64_t request, uint64_t gap_ns);
/* Test hook: the thread ends at its next wakeup without a word (loop_state stays RUNNING,
 * the beat stops), as a loop that died or hangs. */
void gl_loop_test_kill(gl_loop *l);
/* Whether the thread is still running (0 after gl_loop_stop or gl_loop_test_kill took). */
int gl_loop_alive(gl_loop *l);

#endif /* GLEANER_GATELOOP_H */
