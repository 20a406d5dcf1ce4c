/*
 * gleaner_gate.h - the compute gate of one GPU: when offline channels may run.
 *
 * The one implementation of the gate rule (docs/agent.md, "Policies"). The agent, the
 * simulator and the property tests drive it through gleaner.runtime_agent.gatelib (ctypes,
 * libgleaner_gate.so); the typed Python face is gleaner.runtime_agent.policy.ComputeGate.
 *
 * Contract. Events come in non-decreasing time order (seconds, any monotonic origin; an
 * earlier time counts as the latest one, a time that is not finite is refused with
 * GL_GATE_BAD_TIME and changes nothing):
 *   gl_gate_online_busy   the online side started executing (for a named request, or an
 *                         anonymous one that lasts one busy period: name NULL);
 *   gl_gate_finish        a named request finished (no enable decided: see online_idle);
 *   gl_gate_online_idle   the online side has nothing running (anonymous requests end);
 *   gl_gate_request_done  a named request finished while the online side may be busy;
 *   gl_gate_decode_gap    a measured gap between two decode iterations;
 *   gl_gate_tick          time passed (call it at gl_gate_next_deadline);
 *   gl_gate_force_disable close without preempting anyone (memory reclamation);
 *   gl_gate_hold          keep closed whatever the online side does, or let go.
 * Each returns what to carry out at view.now: GL_GATE_NONE, GL_GATE_DISABLE (a preemption),
 * GL_GATE_DISABLE_QUIET (no preemption) or GL_GATE_ENABLE. Guarantees:
 *   1. never enabled while the online side is busy (a busy edge disables at once);
 *   2. enabled only after the online side stayed idle for T_cool = cool_factor * G_max
 *      clamped to [cool_floor_s, cool_ceiling_s], G_max the largest decode gap seen
 *      (reported, or the idle time between two busy periods of one named request);
 *   3. at most one preemption per online request: a preemption is charged to every request
 *      in flight, and the gate does not enable while one of them was preempted; a named
 *      request silent for longer than request_timeout_s (INFINITY: never) is forgotten;
 *   4. never enabled while held.
 * No clocks, no I/O, no locks: one gate is driven by one thread at a time.
 */
#ifndef GLEANER_GATE_H
#define GLEANER_GATE_H

#include <stddef.h>
#include <stdint.h>

#define GL_GATE_ABI 1 /* gl_gate_abi(): bump with any change below */

enum {
  GL_GATE_NONE = 0,
  GL_GATE_DISABLE = 1,
  GL_GATE_DISABLE_QUIET = 2,
  GL_GATE_ENABLE = 3,
  GL_GATE_BAD_TIME = -1,
  GL_GATE_NO_MEMORY = -2,
};

typedef struct gl_gate_config {
  double cool_floor_s;      /* smallest cooldown (also before any gap is measured) */
  double cool_ceiling_s;    /* largest cooldown */
  double cool_factor;       /* T_cool = cool_factor * G_max (the paper: 2) */
  double request_timeout_s; /* forget a named request silent this long; INFINITY: never */
} gl_gate_config;

/* The gate's state, readable in place (the first member of every gate). */
typedef struct gl_gate_view {
  double now;        /* the latest event time */
  double idle_since; /* the cooldown counts from here */
  double enabled_s;  /* seconds enabled since start, up to now */
  double busy_s;     /* seconds the online side was busy since start, up to now */
  double g_max_s;    /* the largest decode gap seen */
  uint64_t preemptions;
  uint64_t online_requests;
  uint64_t max_preemptions_per_request;
  uint64_t inflight; /* requests in flight */
  uint64_t finished; /* finished requests not yet drained */
  int32_t gpu;
  uint8_t enabled; /* offline channels enabled now (starts closed) */
  uint8_t busy;
  uint8_t held;
  uint8_t reserved;
} gl_gate_view;

typedef struct gl_gate gl_gate;

int gl_gate_abi(void);
/* Why `c` is not a valid configuration (a sentence), or NULL. */
const char *gl_gate_config_error(const gl_gate_config *c);
/* A closed gate at `start`; NULL on a bad configuration or without memory. */
gl_gate *gl_gate_new(int32_t gpu, const gl_gate_config *c, double start);
void gl_gate_free(gl_gate *g);
const gl_gate_view *gl_gate_state(const gl_gate *g);

int gl_gate_online_busy(gl_gate *g, double t, const char *name, size_t len);
int gl_gate_finish(gl_gate *g, double t, const char *name, size_t len);
int gl_gate_online_idle(gl_gate *g, double t);
int gl_gate_request_done(gl_gate *g, double t, const char *name, size_t len);
int gl_gate_decode_gap(gl_gate *g, double gap_s, double t, int has_t);
int gl_gate_tick(gl_gate *g, double t);
int gl_gate_force_disable(gl_gate *g, double t);
int gl_gate_hold(gl_gate *g, double t, int held);

/* T_cool now. */
double gl_gate_cooldown(const gl_gate *g);
/* When a tick may next change something; INFINITY: only an event can. */
double gl_gate_next_deadline(const gl_gate *g);
/* Seconds enabled / busy since start up to `t` (at least now). */
double gl_gate_enabled_seconds(const gl_gate *g, double t);
double gl_gate_busy_seconds(const gl_gate *g, double t);
/* Copy up to `cap` preemption counts of finished requests (oldest first) and forget them;
 * returns how many were copied. */
size_t gl_gate_drain_finished(gl_gate *g, uint32_t *out, size_t cap);
/* The i-th request in flight (arrival order): its name (not NUL-terminated; an anonymous
 * one's starts with a NUL byte) and its preemptions; 0 when i is out of range. */
int gl_gate_inflight_at(const gl_gate *g, size_t i, const char **name, size_t *len,
                        uint32_t *preemptions);

#endif /* GLEANER_GATE_H */
