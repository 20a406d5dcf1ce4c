/*
 * gateloop.c - the native gate loop (contract: include/gleaner_gateloop.h).
 *
 * One thread runs the compute gate of every node GPU (gate.c: the one gate rule) on the
 * online edges the shims put in the shared-memory segment's ring, and writes its decisions
 * back into the segment for the offline shims' watch threads: busy edge to decision without
 * the agent's Python event loop. Linked into libgleaner_gate.so with gate.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "gleaner_gateloop.h"

#define EXPORT __attribute__((visibility("default")))
#define UNCOMMITTED_POLL_NS 100000L /* re-look at an entry being written after 100 us */

struct gl_loop {
  gl_fg_segment *seg;
  uint32_t n;
  gl_gate *gate[GL_FG_SLOTS];
  uint32_t seen[GL_FG_SLOTS]; /* busy edges consumed per slot (what open_seq is set to) */
  uint32_t nsrc[GL_FG_SLOTS];
  uint32_t src[GL_FG_SLOTS][GL_LOOP_MAX_SOURCES]; /* busy sources per slot */
  uint8_t held[GL_FG_SLOTS];                     /* held by the agent (gl_loop_hold) */
  uint64_t open_at[GL_FG_SLOTS];                 /* the pending enable published per slot */
  int published;                                 /* an open_at changed since the last wake */
  double lost_until;                             /* > 0: every gate held until then */
  uint32_t tail;
  uint64_t uncommitted_since;
  gl_loop_stats st;
  gl_loop_acct *log; /* GL_LOOP_LOG_CAP entries, a ring */
  size_t log_first, log_n;
  pthread_mutex_t mu;
  pthread_t thread;
  atomic_int stop, kill, alive, joined;
};

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static long futex(uint32_t *word, int op, uint32_t val, const struct timespec *timeout) {
  return syscall(SYS_futex, word, op, val, timeout, NULL, 0);
}

static void wake_watchers(gl_fg_segment *s) {
  __atomic_fetch_add(&s->wake, 1, __ATOMIC_SEQ_CST);
  futex(&s->wake, FUTEX_WAKE, INT_MAX, NULL);
}

static void act(gl_loop *l, uint32_t k, int rc);

static void log_acct(gl_loop *l, uint32_t k, uint32_t op, double t, double value) {
  if (l->log_n == GL_LOOP_LOG_CAP) {
    l->st.log_dropped++;
    return;
  }
  gl_loop_acct *a = &l->log[(l->log_first + l->log_n++) % GL_LOOP_LOG_CAP];
  a->t = t;
  a->value = value;
  a->gpu = l->seg->slot[k].index;
  a->op = op;
}

/* Finished requests of slot k into the log (lock held). */
static void log_finished(gl_loop *l, uint32_t k) {
  const gl_gate_view *v = gl_gate_state(l->gate[k]);
  while (v->finished) {
    uint32_t n[32];
    size_t got = gl_gate_drain_finished(l->gate[k], n, 32);
    for (size_t i = 0; i < got; i++)
      log_acct(l, k, GL_LOOP_ACCT_REQUEST, v->now, (double)n[i]);
  }
}

/* Whether a tick at the gate's next deadline enables it when no event comes first: closed,
 * idle, not held, and no request in flight it preempted (then the deadline is when such a
 * request is forgotten, and a later one may still hold the gate). */
static int enables_at_deadline(const gl_gate *g) {
  const gl_gate_view *v = gl_gate_state(g);
  if (v->enabled || v->busy || v->held)
    return 0;
  const char *name;
  size_t len;
  uint32_t pre;
  for (size_t i = 0; gl_gate_inflight_at(g, i, &name, &len, &pre); i++)
    if (pre)
      return 0;
  return 1;
}

/* Publish slot k's pending enable (or that there is none) in the segment (lock held). The
 * offline watch threads open at that time themselves, unless a busy edge came (busy_seq !=
 * open_seq); the loop records the enable when it next wakes (catch_up), at that time. */
static int publish(gl_loop *l, uint32_t k) {
  double d = gl_gate_next_deadline(l->gate[k]);
  uint64_t at = 0;
  if (d < INFINITY && enables_at_deadline(l->gate[k])) {
    double ns = ceil(d * 1e9);
    at = ns < 1 ? 1 : (uint64_t)ns;
  }
  if (at == l->open_at[k])
    return 0;
  if (at)
    __atomic_store_n(&l->seg->slot[k].open_seq, l->seen[k], __ATOMIC_RELEASE);
  __atomic_store_n(&l->seg->open_at_ns[k], at, __ATOMIC_RELEASE);
  l->open_at[k] = at;
  /* A new pending enable wakes the watchers (they wait for its time). A withdrawn one
   * needs no wakeup here: they read it again when they wake, and the reasons to withdraw
   * one woke them already (a busy edge) or wake them (gl_loop_hold, gl_loop_force_disable). */
  if (at)
    l->published = 1;
  return 1;
}

/* Record every deadline up to t at its own time: the enables the watch threads carried out
 * at the published times (lock held). */
static void catch_up(gl_loop *l, double t) {
  for (uint32_t k = 0; k < l->n; k++) {
    /* A tick may leave a later deadline that is also due (the next preempted request to
     * forget); each at its own time. Bounded: every tick forgets a request or enables. */
    double d;
    for (int i = 0; i < 1024 && (d = gl_gate_next_deadline(l->gate[k])) <= t; i++) {
      act(l, k, gl_gate_tick(l->gate[k], d));
      log_finished(l, k);
    }
  }
}

/* Carry out the gate's answer `rc` for slot k (lock held). */
static void act(gl_loop *l, uint32_t k, int rc) {
  gl_fg_slot *slot = &l->seg->slot[k];
  uint32_t gen = __atomic_load_n(&slot->open_gen, __ATOMIC_RELAXED);
  int open = rc == GL_GATE_ENABLE;
  if (rc == GL_GATE_NONE || rc == GL_GATE_BAD_TIME)
    return;
  if (rc == GL_GATE_NO_MEMORY) {
    /* The gate could not record a request: close (its own state may be behind). */
    gl_gate_force_disable(l->gate[k], gl_gate_state(l->gate[k])->now);
    open = 0;
  }
  double t = gl_gate_state(l->gate[k])->now;
  log_acct(l, k, GL_LOOP_ACCT_ENABLED, t, open ? 1.0 : 0.0);
  if (rc == GL_GATE_DISABLE)
    log_acct(l, k, GL_LOOP_ACCT_PREEMPTION, t, 1.0);
  if (open)
    __atomic_store_n(&slot->open_seq, l->seen[k], __ATOMIC_RELEASE);
  if ((gen & 1u) != (uint32_t)open)
    __atomic_store_n(&slot->open_gen, gen + 1, __ATOMIC_RELEASE);
  (void)publish(l, k); /* after open_gen: an enable is never seen as neither open nor pending */
  l->st.decisions++;
  /* A busy disable needs no wakeup: the online shim's busy_seq bump already woke the
   * watchers, which closed on it. An enable the watchers carried out already at its
   * published time needs none either. */
  if (rc == GL_GATE_DISABLE_QUIET || rc == GL_GATE_NO_MEMORY)
    l->published = 1;
}

static void apply_hold(gl_loop *l, uint32_t k, double t) {
  int held = l->held[k] || l->lost_until > 0;
  act(l, k, gl_gate_hold(l->gate[k], t, held));
}

static void lost(gl_loop *l, uint64_t count, double t) {
  l->st.lost_edges += count;
  l->lost_until = t + GL_LOOP_LOST_HOLD_S;
  for (uint32_t k = 0; k < l->n; k++)
    apply_hold(l, k, t);
}

static int src_index(const gl_loop *l, uint32_t k, uint32_t source) {
  for (uint32_t i = 0; i < l->nsrc[k]; i++)
    if (l->src[k][i] == source)
      return (int)i;
  return -1;
}

static size_t req_name(char *out, uint32_t source, uint64_t request) {
  out[0] = 'r'; /* never a NUL first byte: the gate's anonymous names start with one */
  memcpy(out + 1, &source, sizeof source);
  memcpy(out + 1 + sizeof source, &request, sizeof request);
  return 1 + sizeof source + sizeof request;
}

static void apply_edge(gl_loop *l, const gl_fg_edge *e) {
  double t = (double)e->t_ns / 1e9;
  catch_up(l, t);
  char name[16];
  size_t len = e->request ? req_name(name, e->source, e->request) : 0;
  for (uint32_t k = 0; k < l->n; k++) {
    if (!(e->mask & (1ull << k)))
      continue;
    gl_gate *g = l->gate[k];
    int at = src_index(l, k, e->source);
    if (e->kind == GL_FG_EDGE_BUSY) {
      l->seen[k]++;
      int was_busy = l->nsrc[k] > 0;
      if (at < 0 && l->nsrc[k] < GL_LOOP_MAX_SOURCES)
        l->src[k][l->nsrc[k]++] = e->source;
      if (was_busy && !e->request)
        continue; /* already busy; an anonymous edge tells the gate nothing new */
      act(l, k, gl_gate_online_busy(g, t, e->request ? name : NULL, len));
      if (!was_busy)
        log_acct(l, k, GL_LOOP_ACCT_BUSY, gl_gate_state(g)->now, 1.0);
    } else if (e->kind == GL_FG_EDGE_IDLE) {
      if (at >= 0)
        l->src[k][at] = l->src[k][--l->nsrc[k]];
      if (l->nsrc[k] > 0) {
        if (e->request)
          act(l, k, gl_gate_request_done(g, t, name, len));
      } else {
        if (e->request)
          act(l, k, gl_gate_finish(g, t, name, len));
        log_acct(l, k, GL_LOOP_ACCT_BUSY, t > gl_gate_state(g)->now ? t : gl_gate_state(g)->now, 0.0);
        act(l, k, gl_gate_online_idle(g, t));
      }
      log_finished(l, k);
    } else if (e->kind == GL_FG_EDGE_GAP) {
      act(l, k, gl_gate_decode_gap(g, (double)e->gap_ns / 1e9, t, 1));
    }
  }
}

/* Consume every committed entry (lock held). */
static void drain(gl_loop *l, uint64_t now) {
  gl_fg_segment *s = l->seg;
  for (;;) {
    uint32_t head = __atomic_load_n(&s->edge_head, __ATOMIC_ACQUIRE);
    uint32_t behind = head - l->tail;
    if (behind == 0) {
      l->uncommitted_since = 0;
      return;
    }
    if (behind > GL_FG_RING) { /* the writers lapped the loop */
      l->tail = head;
      __atomic_store_n(&s->edge_tail, l->tail, __ATOMIC_RELEASE);
      lost(l, behind, (double)now / 1e9);
      continue;
    }
    gl_fg_edge *slot = &s->edge[l->tail & (GL_FG_RING - 1)];
    if (__atomic_load_n(&slot->commit, __ATOMIC_ACQUIRE) != l->tail + 1) {
      if (!l->uncommitted_since)
        l->uncommitted_since = now;
      if (now - l->uncommitted_since < GL_LOOP_COMMIT_WAIT_NS)
        return; /* being written: look again shortly */
      l->uncommitted_since = 0;
      l->tail++;
      lost(l, 1, (double)now / 1e9);
      continue;
    }
    l->uncommitted_since = 0;
    gl_fg_edge e = *slot;
    if (__atomic_load_n(&slot->commit, __ATOMIC_ACQUIRE) != l->tail + 1) {
      l->tail++; /* overwritten while copied: the writers lapped the loop */
      lost(l, 1, (double)now / 1e9);
      continue;
    }
    l->tail++;
    __atomic_store_n(&s->edge_tail, l->tail, __ATOMIC_RELEASE);
    l->st.edges++;
    apply_edge(l, &e);
  }
}

/* The busy words (gleaner_fastgate.h gl_fg_source) against the loop's busy sources, at t
 * (lock held, the ring read up to its last committed entry): a connection whose word is busy
 * on a GPU where the loop does not count it lost its busy entry (or is writing it now): it
 * becomes a busy source there, as its busy edge would have made it, until its idle edge or
 * its disconnect. The word is state the ring cannot lose: a lost busy edge never lets the
 * loop enable a GPU that is busy online. */
static void busy_words(gl_loop *l, double t) {
  for (uint32_t i = 0; i < GL_FG_SOURCES; i++) {
    uint64_t state = __atomic_load_n(&l->seg->source[i].state, __ATOMIC_ACQUIRE);
    if (!(state & 1u))
      continue;
    uint32_t source = (uint32_t)(state >> 32);
    uint64_t mask = __atomic_load_n(&l->seg->source[i].mask, __ATOMIC_ACQUIRE);
    for (uint32_t k = 0; k < l->n; k++) {
      if (!(mask & (1ull << k)) || src_index(l, k, source) >= 0 || l->nsrc[k] >= GL_LOOP_MAX_SOURCES)
        continue;
      int was_busy = l->nsrc[k] > 0;
      l->src[k][l->nsrc[k]++] = source;
      l->st.busy_from_words++;
      if (was_busy)
        continue;
      act(l, k, gl_gate_online_busy(l->gate[k], t, NULL, 0));
      log_acct(l, k, GL_LOOP_ACCT_BUSY, gl_gate_state(l->gate[k])->now, 1.0);
    }
  }
}

/* Record every deadline up to t, publish the pending enables; the earliest deadline the loop
 * must wake for itself (seconds; INFINITY): one the watch threads cannot carry out. */
static double tick(gl_loop *l, double t) {
  catch_up(l, t);
  if (!l->uncommitted_since)
    busy_words(l, t); /* before any enable it publishes or a lost-edge hold ends */
  if (l->lost_until > 0 && t >= l->lost_until) {
    l->lost_until = 0;
    for (uint32_t k = 0; k < l->n; k++) {
      /* Busy edges of the lost entries are counted again from the segment. */
      l->seen[k] = __atomic_load_n(&l->seg->slot[k].busy_seq, __ATOMIC_ACQUIRE);
      apply_hold(l, k, t);
    }
  }
  double next = l->lost_until > 0 ? l->lost_until : INFINITY;
  for (uint32_t k = 0; k < l->n; k++) {
    (void)publish(l, k);
    double d = gl_gate_next_deadline(l->gate[k]);
    if (!l->open_at[k] && d < next)
      next = d;
  }
  if (l->published) {
    l->published = 0;
    wake_watchers(l->seg);
  }
  return next;
}

static void *loop_main(void *arg) {
  gl_loop *l = arg;
  gl_fg_segment *s = l->seg;
  pthread_setname_np(pthread_self(), "gleaner-gate");
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  /* As the shims' watch thread: the lowest real-time priority where allowed. */
  struct sched_param prio = {.sched_priority = 1};
  (void)pthread_setschedparam(pthread_self(), SCHED_FIFO, &prio);
  for (;;) {
    if (atomic_load(&l->kill)) {
      atomic_store(&l->alive, 0); /* died: no word, the beat stops */
      return NULL;
    }
    if (atomic_load(&l->stop))
      break;
    uint64_t now = mono_ns();
    __atomic_store_n(&s->loop_beat_ns, now, __ATOMIC_RELEASE);
    pthread_mutex_lock(&l->mu);
    l->st.wakeups++;
    drain(l, now);
    double next = tick(l, (double)now / 1e9);
    int pending = l->uncommitted_since != 0;
    uint32_t tail = l->tail;
    pthread_mutex_unlock(&l->mu);
    uint64_t wait = GL_FG_LOOP_BEAT_NS;
    if (pending) {
      wait = UNCOMMITTED_POLL_NS;
    } else if (next < INFINITY) {
      double left = next * 1e9 - (double)now;
      if (left < (double)wait)
        wait = left > 0 ? (uint64_t)left + 1 : 0;
    }
    if (wait == 0)
      continue;
    struct timespec to = {(time_t)(wait / 1000000000ull), (long)(wait % 1000000000ull)};
    if (pending)
      nanosleep(&to, NULL);
    else
      futex(&s->edge_head, FUTEX_WAIT, tail, &to); /* returns at once if an edge came */
  }
  __atomic_store_n(&s->loop_state, GL_FG_LOOP_STOPPED, __ATOMIC_RELEASE);
  pthread_mutex_lock(&l->mu);
  l->st.state = GL_FG_LOOP_STOPPED;
  pthread_mutex_unlock(&l->mu);
  wake_watchers(s);
  atomic_store(&l->alive, 0);
  return NULL;
}

EXPORT int gl_loop_abi(void) { return GL_LOOP_ABI; }

EXPORT gl_loop *gl_loop_start(gl_fg_segment *seg, const gl_gate_config *c) {
  if (!seg || gl_gate_config_error(c) || seg->nslots == 0 || seg->nslots > GL_FG_SLOTS) {
    errno = EINVAL;
    return NULL;
  }
  gl_loop *l = calloc(1, sizeof *l);
  if (!l)
    return NULL;
  l->seg = seg;
  l->n = seg->nslots;
  pthread_mutex_init(&l->mu, NULL);
  l->log = calloc(GL_LOOP_LOG_CAP, sizeof *l->log);
  if (!l->log) {
    pthread_mutex_destroy(&l->mu);
    free(l);
    return NULL;
  }
  uint64_t now = mono_ns();
  for (uint32_t k = 0; k < l->n; k++) {
    l->gate[k] = gl_gate_new(seg->slot[k].index, c, (double)now / 1e9);
    if (!l->gate[k]) {
      atomic_store(&l->joined, 1); /* no thread yet */
      gl_loop_free(l);
      errno = ENOMEM;
      return NULL;
    }
    /* Edges before the loop: counted as seen (a running online burst still holds its
     * sources' next idle edge back from nothing: the gate starts closed). */
    l->seen[k] = __atomic_load_n(&seg->slot[k].busy_seq, __ATOMIC_ACQUIRE);
  }
  l->tail = __atomic_load_n(&seg->edge_head, __ATOMIC_ACQUIRE);
  __atomic_store_n(&seg->edge_tail, l->tail, __ATOMIC_RELEASE);
  __atomic_store_n(&seg->loop_beat_ns, now, __ATOMIC_RELEASE);
  __atomic_store_n(&seg->loop_state, GL_FG_LOOP_RUNNING, __ATOMIC_RELEASE);
  l->st.state = GL_FG_LOOP_RUNNING;
  atomic_store(&l->alive, 1);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  int rc = pthread_create(&l->thread, &attr, loop_main, l);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    __atomic_store_n(&seg->loop_state, GL_FG_LOOP_STOPPED, __ATOMIC_RELEASE);
    atomic_store(&l->alive, 0);
    atomic_store(&l->joined, 1);
    gl_loop_free(l);
    errno = rc;
    return NULL;
  }
  return l;
}

EXPORT void gl_loop_stop(gl_loop *l) {
  if (!l || atomic_exchange(&l->joined, 1))
    return;
  atomic_store(&l->stop, 1);
  futex(&l->seg->edge_head, FUTEX_WAKE, INT_MAX, NULL);
  pthread_join(l->thread, NULL);
  /* A killed thread left loop_state RUNNING; a stopped loop says so either way. */
  __atomic_store_n(&l->seg->loop_state, GL_FG_LOOP_STOPPED, __ATOMIC_RELEASE);
  l->st.state = GL_FG_LOOP_STOPPED;
}

EXPORT void gl_loop_free(gl_loop *l) {
  if (!l)
    return;
  gl_loop_stop(l);
  for (uint32_t k = 0; k < GL_FG_SLOTS; k++)
    gl_gate_free(l->gate[k]);
  pthread_mutex_destroy(&l->mu);
  free(l->log);
  free(l);
}

EXPORT int gl_loop_stats_read(gl_loop *l, gl_loop_stats *out, uint32_t k, gl_gate_view *view) {
  if (k >= l->n)
    return 0;
  double now = (double)mono_ns() / 1e9;
  pthread_mutex_lock(&l->mu);
  if (out)
    *out = l->st;
  if (view) {
    *view = *gl_gate_state(l->gate[k]);
    view->enabled_s = gl_gate_enabled_seconds(l->gate[k], now);
    view->busy_s = gl_gate_busy_seconds(l->gate[k], now);
  }
  pthread_mutex_unlock(&l->mu);
  return 1;
}

static double now_for(gl_loop *l, uint32_t k) {
  double now = (double)mono_ns() / 1e9, last = gl_gate_state(l->gate[k])->now;
  return now > last ? now : last;
}

EXPORT int gl_loop_hold(gl_loop *l, uint32_t k, int held) {
  if (k >= l->n)
    return GL_GATE_NONE;
  pthread_mutex_lock(&l->mu);
  catch_up(l, now_for(l, k));
  int changed = l->held[k] != (held != 0);
  l->held[k] = held != 0;
  int eff = l->held[k] || l->lost_until > 0;
  int rc = gl_gate_hold(l->gate[k], now_for(l, k), eff);
  act(l, k, rc);
  if (publish(l, k) || l->published) {
    l->published = 0;
    wake_watchers(l->seg);
  }
  pthread_mutex_unlock(&l->mu);
  /* A new deadline, maybe. The agent repeats its holds every poll: a hold that changed
   * nothing leaves the loop asleep (its deadlines are the ones it already waits for). */
  if (changed || rc != GL_GATE_NONE)
    futex(&l->seg->edge_head, FUTEX_WAKE, INT_MAX, NULL);
  return rc;
}

EXPORT int gl_loop_force_disable(gl_loop *l, uint32_t k) {
  if (k >= l->n)
    return GL_GATE_NONE;
  pthread_mutex_lock(&l->mu);
  catch_up(l, now_for(l, k));
  int rc = gl_gate_force_disable(l->gate[k], now_for(l, k));
  act(l, k, rc);
  if (publish(l, k) || l->published) {
    l->published = 0;
    wake_watchers(l->seg);
  }
  pthread_mutex_unlock(&l->mu);
  futex(&l->seg->edge_head, FUTEX_WAKE, INT_MAX, NULL);
  return rc;
}

EXPORT size_t gl_loop_drain_log(gl_loop *l, gl_loop_acct *out, size_t cap) {
  pthread_mutex_lock(&l->mu);
  size_t n = l->log_n < cap ? l->log_n : cap;
  for (size_t i = 0; i < n; i++)
    out[i] = l->log[(l->log_first + i) % GL_LOOP_LOG_CAP];
  l->log_first = (l->log_first + n) % GL_LOOP_LOG_CAP;
  l->log_n -= n;
  pthread_mutex_unlock(&l->mu);
  return n;
}

EXPORT void gl_loop_drop_source(gl_loop *l, uint32_t source) {
  pthread_mutex_lock(&l->mu);
  double t = (double)mono_ns() / 1e9;
  for (uint32_t k = 0; k < l->n; k++)
    if (t < gl_gate_state(l->gate[k])->now)
      t = gl_gate_state(l->gate[k])->now;
  drain(l, mono_ns()); /* its edges already in the ring first */
  catch_up(l, t);
  /* Its busy words go: nothing else clears a word of a process that died busy. */
  for (uint32_t i = 0; i < GL_FG_SOURCES; i++) {
    uint64_t state = __atomic_load_n(&l->seg->source[i].state, __ATOMIC_ACQUIRE);
    while (state >> 32 == source &&
           !__atomic_compare_exchange_n(&l->seg->source[i].state, &state, 0, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_ACQUIRE)) {
    }
  }
  int woke = 0;
  for (uint32_t k = 0; k < l->n; k++) {
    int at = src_index(l, k, source);
    if (at < 0)
      continue;
    l->src[k][at] = l->src[k][--l->nsrc[k]];
    if (l->nsrc[k] == 0) {
      log_acct(l, k, GL_LOOP_ACCT_BUSY, t, 0.0);
      act(l, k, gl_gate_online_idle(l->gate[k], t));
      log_finished(l, k);
    }
    woke |= publish(l, k);
  }
  if (woke || l->published) {
    l->published = 0;
    wake_watchers(l->seg);
  }
  pthread_mutex_unlock(&l->mu);
}

EXPORT int gl_loop_edge(gl_loop *l, uint32_t source, uint32_t kind, uint64_t mask, uint64_t t_ns,
                        uint64_t request, uint64_t gap_ns) {
  gl_fg_segment *s = l->seg;
  mask &= l->n >= 64 ? ~0ull : (1ull << l->n) - 1;
  if (!mask || kind < GL_FG_EDGE_BUSY || kind > GL_FG_EDGE_GAP)
    return 0;
  if (kind == GL_FG_EDGE_BUSY) {
    gl_fg_busy_bump(s, mask); /* one bump, one entry: the loop's open_seq stays in step */
    futex(&s->wake, FUTEX_WAKE, INT_MAX, NULL);
  }
  gl_fg_ring_put(s, source, (uint16_t)kind, mask, t_ns, request, kind == GL_FG_EDGE_GAP ? gap_ns : 0);
  if (kind == GL_FG_EDGE_IDLE)
    futex(&s->edge_head, FUTEX_WAKE, INT_MAX, NULL);
  return 1;
}

EXPORT void gl_loop_test_kill(gl_loop *l) {
  atomic_store(&l->kill, 1);
  futex(&l->seg->edge_head, FUTEX_WAKE, INT_MAX, NULL);
}

EXPORT int gl_loop_alive(gl_loop *l) { return atomic_load(&l->alive); }
