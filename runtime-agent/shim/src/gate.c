/*
 * gate.c - the compute gate state machine (contract: include/gleaner_gate.h).
 *
 * Requests in flight are kept in arrival order in one array (looked up by a 64-bit hash of
 * the name, then the bytes): the gate charges a preemption to all of them at once and an
 * enable looks at all of them, so a scan is the natural shape, and a node serves at most a
 * few hundred requests at a time. Built with -ffp-contract=off: the same arithmetic as the
 * reference model in the tests, to the last bit, on every architecture.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gleaner_gate.h"

#define EXPORT __attribute__((visibility("default")))

typedef struct req {
  uint64_t hash;
  char *name;
  size_t len;
  uint32_t preemptions;
  uint8_t anonymous;
  uint8_t has_idle; /* last_idle_at is set */
  double last_seen;
  double last_idle_at;
} req;

struct gl_gate {
  gl_gate_view v; /* first: gl_gate_state() hands it out in place */
  gl_gate_config c;
  req *req;
  size_t cap;
  uint64_t anon_seq;
  uint32_t *fin;
  size_t nfin, fincap;
};

static uint64_t name_hash(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 1099511628211ull;
  }
  return h;
}

EXPORT int gl_gate_abi(void) { return GL_GATE_ABI; }

EXPORT const char *gl_gate_config_error(const gl_gate_config *c) {
  if (!(0 <= c->cool_floor_s && c->cool_floor_s <= c->cool_ceiling_s))
    return "need 0 <= cool_floor_s <= cool_ceiling_s";
  if (!(c->cool_factor > 0))
    return "cool_factor must be positive";
  if (!(c->request_timeout_s > 0))
    return "request_timeout_s must be positive";
  return NULL;
}

EXPORT gl_gate *gl_gate_new(int32_t gpu, const gl_gate_config *c, double start) {
  if (gl_gate_config_error(c) || !isfinite(start))
    return NULL;
  gl_gate *g = calloc(1, sizeof *g);
  if (!g)
    return NULL;
  g->c = *c;
  g->v.gpu = gpu;
  g->v.now = start;
  g->v.idle_since = start;
  return g;
}

EXPORT void gl_gate_free(gl_gate *g) {
  if (!g)
    return;
  for (uint64_t i = 0; i < g->v.inflight; i++)
    free(g->req[i].name);
  free(g->req);
  free(g->fin);
  free(g);
}

EXPORT const gl_gate_view *gl_gate_state(const gl_gate *g) { return &g->v; }

static double cooldown(const gl_gate *g) {
  double c = g->c.cool_factor * g->v.g_max_s;
  if (c < g->c.cool_floor_s)
    c = g->c.cool_floor_s;
  return c < g->c.cool_ceiling_s ? c : g->c.cool_ceiling_s;
}

EXPORT double gl_gate_cooldown(const gl_gate *g) { return cooldown(g); }

static int any_preempted(const gl_gate *g) {
  for (uint64_t i = 0; i < g->v.inflight; i++)
    if (g->req[i].preemptions)
      return 1;
  return 0;
}

static req *find(gl_gate *g, const char *name, size_t len, uint64_t h) {
  for (uint64_t i = 0; i < g->v.inflight; i++) {
    req *r = &g->req[i];
    if (r->hash == h && r->len == len && memcmp(r->name, name, len) == 0)
      return r;
  }
  return NULL;
}

static req *add(gl_gate *g, const char *name, size_t len, uint64_t h) {
  if (g->v.inflight == g->cap) {
    size_t cap = g->cap ? 2 * g->cap : 16;
    req *n = realloc(g->req, cap * sizeof *n);
    if (!n)
      return NULL;
    g->req = n;
    g->cap = cap;
  }
  char *copy = malloc(len ? len : 1);
  if (!copy)
    return NULL;
  memcpy(copy, name, len);
  req *r = &g->req[g->v.inflight++];
  *r = (req){.hash = h, .name = copy, .len = len};
  g->v.online_requests++;
  return r;
}

/* Forget request i (order kept) and record its preemptions as finished. */
static int finish_at(gl_gate *g, uint64_t i) {
  if (g->nfin == g->fincap) {
    size_t cap = g->fincap ? 2 * g->fincap : 16;
    uint32_t *n = realloc(g->fin, cap * sizeof *n);
    if (!n)
      return GL_GATE_NO_MEMORY;
    g->fin = n;
    g->fincap = cap;
  }
  g->fin[g->nfin++] = g->req[i].preemptions;
  g->v.finished = g->nfin;
  free(g->req[i].name);
  memmove(&g->req[i], &g->req[i + 1], (size_t)(g->v.inflight - i - 1) * sizeof(req));
  g->v.inflight--;
  return GL_GATE_NONE;
}

static int finish_name(gl_gate *g, const char *name, size_t len) {
  uint64_t h = name_hash(name, len);
  for (uint64_t i = 0; i < g->v.inflight; i++) {
    req *r = &g->req[i];
    if (r->hash == h && r->len == len && memcmp(r->name, name, len) == 0)
      return finish_at(g, i);
  }
  return GL_GATE_NONE;
}

/* Move the clock to t (an earlier t counts as now); *out is the time the event happens. */
static int advance(gl_gate *g, double t, double *out) {
  double now = g->v.now;
  if (!(now <= t && t < INFINITY)) {
    if (!isfinite(t))
      return GL_GATE_BAD_TIME;
    *out = now;
    return GL_GATE_NONE;
  }
  double dt = t - now;
  if (g->v.enabled)
    g->v.enabled_s += dt;
  if (g->v.busy)
    g->v.busy_s += dt;
  g->v.now = t;
  if (g->v.inflight && isfinite(g->c.request_timeout_s)) {
    for (uint64_t i = 0; i < g->v.inflight;) {
      req *r = &g->req[i];
      if (!r->anonymous && t - r->last_seen > g->c.request_timeout_s) {
        if (finish_at(g, i) != GL_GATE_NONE)
          return GL_GATE_NO_MEMORY;
      } else {
        i++;
      }
    }
  }
  *out = t;
  return GL_GATE_NONE;
}

static void observe_gap(gl_gate *g, double gap) {
  if (gap > g->v.g_max_s && isfinite(gap))
    g->v.g_max_s = gap;
}

static int maybe_enable(gl_gate *g, double t) {
  if (g->v.enabled || g->v.busy || g->v.held)
    return GL_GATE_NONE;
  if (t < g->v.idle_since + cooldown(g))
    return GL_GATE_NONE;
  if (any_preempted(g))
    return GL_GATE_NONE;
  g->v.enabled = 1;
  return GL_GATE_ENABLE;
}

EXPORT int gl_gate_online_busy(gl_gate *g, double t, const char *name, size_t len) {
  int rc = advance(g, t, &t);
  if (rc)
    return rc;
  if (!name) {
    char anon[32];
    int n = snprintf(anon, sizeof anon, "%canon-%llu", 0, (unsigned long long)++g->anon_seq);
    req *r = add(g, anon, (size_t)n, name_hash(anon, (size_t)n));
    if (!r)
      return GL_GATE_NO_MEMORY;
    r->anonymous = 1;
    r->last_seen = t;
  } else {
    uint64_t h = name_hash(name, len);
    req *r = find(g, name, len, h);
    if (!r) {
      r = add(g, name, len, h);
      if (!r)
        return GL_GATE_NO_MEMORY;
    } else if (r->has_idle && !g->v.busy) {
      /* The idle time between two busy periods of one request is a decode gap. */
      observe_gap(g, t - r->last_idle_at);
    }
    r->last_seen = t;
    r->has_idle = 0;
  }
  g->v.busy = 1;
  if (!g->v.enabled)
    return GL_GATE_NONE;
  g->v.enabled = 0;
  g->v.preemptions++;
  uint64_t most = g->v.max_preemptions_per_request;
  for (uint64_t i = 0; i < g->v.inflight; i++) {
    req *r = &g->req[i];
    r->preemptions++;
    if (r->preemptions > most)
      most = r->preemptions;
  }
  g->v.max_preemptions_per_request = most;
  return GL_GATE_DISABLE;
}

EXPORT int gl_gate_finish(gl_gate *g, double t, const char *name, size_t len) {
  int rc = advance(g, t, &t);
  if (rc)
    return rc;
  return finish_name(g, name, len);
}

EXPORT int gl_gate_online_idle(gl_gate *g, double t) {
  int rc = advance(g, t, &t);
  if (rc)
    return rc;
  for (uint64_t i = 0; i < g->v.inflight;) {
    if (g->req[i].anonymous) {
      if (finish_at(g, i) != GL_GATE_NONE)
        return GL_GATE_NO_MEMORY;
    } else {
      i++;
    }
  }
  if (g->v.busy) {
    g->v.busy = 0;
    g->v.idle_since = t;
    for (uint64_t i = 0; i < g->v.inflight; i++) {
      g->req[i].has_idle = 1;
      g->req[i].last_idle_at = t;
      g->req[i].last_seen = t;
    }
  }
  return maybe_enable(g, t);
}

EXPORT int gl_gate_request_done(gl_gate *g, double t, const char *name, size_t len) {
  int rc = advance(g, t, &t);
  if (rc)
    return rc;
  rc = finish_name(g, name, len);
  if (rc)
    return rc;
  return maybe_enable(g, t);
}

EXPORT int gl_gate_decode_gap(gl_gate *g, double gap_s, double t, int has_t) {
  if (has_t) {
    int rc = advance(g, t, &t);
    if (rc)
      return rc;
  }
  observe_gap(g, gap_s);
  return GL_GATE_NONE;
}

EXPORT int gl_gate_tick(gl_gate *g, double t) {
  int rc = advance(g, t, &t);
  if (rc)
    return rc;
  return maybe_enable(g, t);
}

EXPORT int gl_gate_force_disable(gl_gate *g, double t) {
  int rc = advance(g, t, &t);
  if (rc)
    return rc;
  if (t > g->v.idle_since)
    g->v.idle_since = t;
  if (!g->v.enabled)
    return GL_GATE_NONE;
  g->v.enabled = 0;
  return GL_GATE_DISABLE_QUIET;
}

EXPORT int gl_gate_hold(gl_gate *g, double t, int held) {
  int rc = advance(g, t, &t);
  if (rc)
    return rc;
  held = held != 0;
  if (held == g->v.held)
    return GL_GATE_NONE;
  g->v.held = (uint8_t)held;
  if (held) {
    if (!g->v.enabled)
      return GL_GATE_NONE;
    g->v.enabled = 0;
    return GL_GATE_DISABLE_QUIET;
  }
  if (t > g->v.idle_since)
    g->v.idle_since = t;
  return maybe_enable(g, t);
}

EXPORT double gl_gate_next_deadline(const gl_gate *g) {
  if (g->v.enabled || g->v.busy || g->v.held)
    return INFINITY;
  double at = g->v.idle_since + cooldown(g);
  if (!any_preempted(g))
    return at;
  /* Held off by a preempted request: until it is forgotten (INFINITY when never). */
  double oldest = INFINITY;
  for (uint64_t i = 0; i < g->v.inflight; i++)
    if (g->req[i].preemptions && g->req[i].last_seen < oldest)
      oldest = g->req[i].last_seen;
  double forget = oldest + g->c.request_timeout_s;
  return forget > at ? forget : at;
}

EXPORT double gl_gate_enabled_seconds(const gl_gate *g, double t) {
  double extra = t - g->v.now;
  return g->v.enabled_s + (g->v.enabled && extra > 0 ? extra : 0.0);
}

EXPORT double gl_gate_busy_seconds(const gl_gate *g, double t) {
  double extra = t - g->v.now;
  return g->v.busy_s + (g->v.busy && extra > 0 ? extra : 0.0);
}

EXPORT size_t gl_gate_drain_finished(gl_gate *g, uint32_t *out, size_t cap) {
  size_t n = g->nfin < cap ? g->nfin : cap;
  memcpy(out, g->fin, n * sizeof *out);
  memmove(g->fin, g->fin + n, (g->nfin - n) * sizeof *out);
  g->nfin -= n;
  g->v.finished = g->nfin;
  return n;
}

EXPORT int gl_gate_inflight_at(const gl_gate *g, size_t i, const char **name, size_t *len,
                               uint32_t *preemptions) {
  if (i >= g->v.inflight)
    return 0;
  *name = g->req[i].name;
  *len = g->req[i].len;
  *preemptions = g->req[i].preemptions;
  return 1;
}
