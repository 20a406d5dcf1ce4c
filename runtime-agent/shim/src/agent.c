/*
 * agent.c - the connection to the Gleaner agent, the control thread and the gate.
 *
 * Contract:
 * - One control thread per process, started when the process first opens the
 *   RM control device. It (re)connects to GLEANER_SOCKET, sends HELLO and the
 *   channels recorded so far, answers GATE / FD_REQUEST / HEARTBEAT, and sends
 *   STATUS while offline work is held.
 * - Offline (fail closed): the gate starts closed and closes whenever the agent
 *   is unreachable, silent or speaks garbage. While closed, (a) the control
 *   thread has disabled every channel group it knows (NVA06C GPFIFO_SCHEDULE on
 *   libcuda's own nvidiactl fd; the channel control for channels outside a
 *   group and as a fallback), (b) the application's own schedule(enable) calls
 *   are answered with success and deferred until the gate opens, and (c) the
 *   launch hooks hold every launching thread (gl_offline_hold). The reason goes
 *   to stderr (rate-limited) and to the agent as STATUS.
 * - Online (fail open): sends are non-blocking and dropped when the agent is
 *   missing or slow; nothing here ever waits on the agent in an online process.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

static pthread_mutex_t send_mu = PTHREAD_MUTEX_INITIALIZER; /* socket writes */
static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER; /* held threads, status */
static pthread_cond_t hold_cv = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t start_mu = PTHREAD_MUTEX_INITIALIZER;

static int sock = -1;          /* guarded by send_mu */
static int started;            /* guarded by start_mu */
static uint32_t tx_seq;        /* guarded by send_mu */
static _Atomic int gate_open;  /* offline: written with the registry lock held */
static _Atomic int agent_open; /* offline: the agent's last word (GATE, HELLO_ACK) was open */
static _Atomic uint32_t source_id; /* online: the busy-source id HELLO_ACK gave (0: none yet) */

uint32_t gl_agent_source_id(void) { return atomic_load(&source_id); }
static _Atomic int gate_mode = GL_GATE_MODE_SHIM;
static _Atomic int heartbeat_ms = 1000;

/* Guarded by hold_mu. */
static uint32_t status_code = GL_STATUS_NO_AGENT;
static char status_reason[GL_REASON_LEN] = "agent not connected yet";
static int blocked_threads;
static uint64_t blocked_since, last_hold_log, last_status_sent;
static uint32_t last_status_code_sent = 0xFFFFFFFFu;

int gl_agent_gate_open(void) { return atomic_load(&gate_open); }

/* --- sending ---------------------------------------------------------------- */

static int send_all(int s, const char *buf, size_t len, int dontwait) {
  size_t off = 0;
  while (off < len) {
    int flags = MSG_NOSIGNAL | ((dontwait && off == 0) ? MSG_DONTWAIT : 0);
    ssize_t n = send(s, buf + off, len - off, flags);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    off += (size_t)n;
  }
  return 0;
}

int gl_agent_send(uint8_t type, const void *payload, uint32_t len, int dontwait) {
  char buf[GL_HEADER_SIZE + 1024];
  if (len > sizeof buf - GL_HEADER_SIZE)
    return -1;
  pthread_mutex_lock(&send_mu);
  if (sock < 0) {
    pthread_mutex_unlock(&send_mu);
    return -1;
  }
  gl_header h = {GL_PROTO_MAGIC, GL_PROTO_VERSION, type, 0, len, ++tx_seq};
  memcpy(buf, &h, sizeof h);
  if (len)
    memcpy(buf + sizeof h, payload, len);
  int rc = send_all(sock, buf, sizeof h + len, dontwait);
  if (rc != 0 && !(dontwait && (errno == EAGAIN || errno == EWOULDBLOCK))) {
    /* Broken or timed out: make the reader notice and reconnect. */
    shutdown(sock, SHUT_RDWR);
  }
  pthread_mutex_unlock(&send_mu);
  return rc;
}

static int send_fd_pass(void) {
  int fd = -1;
  gl_reg_lock();
  uint32_t client = gl_reg_first_client(&fd);
  gl_reg_unlock();
  gl_fd_pass p = {GL_FD_NVIDIACTL, client, fd, 0};
  if (fd < 0) {
    gl_log(1, "agent asked for the nvidiactl fd, but no RM client exists yet");
    return -1;
  }
  gl_header h = {GL_PROTO_MAGIC, GL_PROTO_VERSION, GL_MSG_FD_PASS, GL_FLAG_HAS_FD, sizeof p, 0};
  char buf[sizeof h + sizeof p];
  union {
    char raw[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } ctl;
  memset(&ctl, 0, sizeof ctl);
  struct iovec iov = {buf, sizeof buf};
  struct msghdr msg = {0};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctl.raw;
  msg.msg_controllen = sizeof ctl.raw;
  struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
  cm->cmsg_level = SOL_SOCKET;
  cm->cmsg_type = SCM_RIGHTS;
  cm->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cm), &fd, sizeof fd);
  pthread_mutex_lock(&send_mu);
  int rc = -1;
  if (sock >= 0) {
    h.seq = ++tx_seq;
    memcpy(buf, &h, sizeof h);
    memcpy(buf + sizeof h, &p, sizeof p);
    ssize_t n;
    do
      n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    rc = (n >= 0 && send_all(sock, buf + n, sizeof buf - (size_t)n, 0) == 0) ? 0 : -1;
  }
  pthread_mutex_unlock(&send_mu);
  gl_log(1, "passed nvidiactl fd %d (client 0x%x) to the agent: %s", fd, client,
         rc == 0 ? "ok" : strerror(errno));
  return rc;
}

static void fill_channel(gl_channel *c, const gl_obj *o) {
  memset(c, 0, sizeof *c);
  c->h_client = o->h_client;
  c->h_parent = o->h_parent;
  c->h_object = o->h_object;
  c->h_class = o->h_class;
  c->kind = o->kind;
  c->gpu = o->gpu;
  c->engine_type = o->engine_type;
}

static void send_obj(const gl_obj *o, int added) {
  if (gl_cfg.role != GL_ROLE_OFF)
    return;
  if (o->kind == GL_KIND_TSG || o->kind == GL_KIND_CHANNEL) {
    gl_channel c;
    fill_channel(&c, o);
    gl_agent_send(added ? GL_MSG_CHANNEL_ADD : GL_MSG_CHANNEL_FREE, &c, sizeof c, 0);
  } else if (o->h_class == RM_CLASS_MEMORY_LOCAL_USER) {
    struct {
      gl_mem_handles head;
      gl_mem_handle e;
    } m = {{1, 0},
           {o->h_client, o->h_parent, o->h_object, o->h_class, o->gpu,
            added ? GL_MEM_ADDED : GL_MEM_FREED, o->size}};
    gl_agent_send(GL_MSG_MEM_HANDLES, &m, sizeof m, 0);
  }
}

void gl_agent_obj_added(const gl_obj *o) { send_obj(o, 1); }
void gl_agent_obj_gone(const gl_obj *o) { send_obj(o, 0); }

/* --- status and the offline hold --------------------------------------------- */

static void set_status(uint32_t code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_status(uint32_t code, const char *fmt, ...) {
  pthread_mutex_lock(&hold_mu);
  status_code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(status_reason, sizeof status_reason, fmt, ap);
  va_end(ap);
  pthread_mutex_unlock(&hold_mu);
}

static void maybe_send_status(int force) {
  if (gl_cfg.role != GL_ROLE_OFF)
    return;
  uint64_t now = gl_now_ns();
  gl_status st;
  memset(&st, 0, sizeof st);
  pthread_mutex_lock(&hold_mu);
  int due = force || status_code != last_status_code_sent ||
            (blocked_threads > 0 && now - last_status_sent >= 5000000000ull);
  if (due) {
    st.code = status_code;
    st.gpu = GL_GPU_ALL;
    st.mono_ns = now;
    st.blocked_ns = blocked_since ? now - blocked_since : 0;
    st.blocked_threads = (uint32_t)blocked_threads;
    memcpy(st.reason, status_reason, sizeof st.reason);
    last_status_sent = now;
    last_status_code_sent = status_code;
  }
  pthread_mutex_unlock(&hold_mu);
  if (due)
    gl_agent_send(GL_MSG_STATUS, &st, sizeof st, 0);
}

void gl_offline_hold(const char *where) {
  if (gl_cfg.role != GL_ROLE_OFF || atomic_load(&gate_open))
    return;
  gl_agent_start();
  pthread_mutex_lock(&hold_mu);
  uint64_t now = gl_now_ns();
  if (blocked_threads++ == 0)
    blocked_since = now;
  while (!atomic_load(&gate_open)) {
    now = gl_now_ns();
    if (last_hold_log == 0 || now - last_hold_log >= (uint64_t)gl_cfg.hold_log_ms * 1000000ull) {
      last_hold_log = now;
      gl_log(1, "offline GPU work held in %s for %.3f s (%d thread(s)): %s", where,
             (double)(now - blocked_since) / 1e9, blocked_threads, status_reason);
    }
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 1;
    pthread_cond_timedwait(&hold_cv, &hold_mu, &dl);
  }
  if (--blocked_threads == 0) {
    gl_log(2, "offline GPU work released after %.3f s", (double)(gl_now_ns() - blocked_since) / 1e9);
    blocked_since = 0;
    last_hold_log = 0;
  }
  pthread_mutex_unlock(&hold_mu);
}

static void wake_holders(void) {
  pthread_mutex_lock(&hold_mu);
  pthread_cond_broadcast(&hold_cv);
  pthread_mutex_unlock(&hold_mu);
}

/* --- the gate ----------------------------------------------------------------- */

typedef struct gate_result {
  int enable;
  unsigned n_objects, n_failed;
  int err;
  uint32_t rm_status;
} gate_result;

static int schedule(const gl_obj *o, uint32_t cmd, int enable, gate_result *r) {
  rm_schedule_params sp = {(uint8_t)(enable ? 1 : 0), 0, 0};
  rm_nvos54 p = {o->h_client, o->h_object, cmd, 0, (uint64_t)(uintptr_t)&sp, sizeof sp, 0};
  if (o->fd < 0) {
    if (!r->err)
      r->err = EBADF;
    return -1;
  }
  if (gl_real_ioctl(o->fd, RM_IOCTL_CONTROL, &p) != 0) {
    if (!r->err)
      r->err = errno;
    return -1;
  }
  if (p.status != RM_STATUS_OK) {
    if (!r->rm_status)
      r->rm_status = p.status;
    return -1;
  }
  return 0;
}

typedef struct chan_ctx {
  const gl_obj *tsg;
  gate_result *r;
  int failed;
  unsigned n;
} chan_ctx;

static void channel_fallback(gl_obj *o, void *vctx) {
  chan_ctx *c = vctx;
  if (o->kind != GL_KIND_CHANNEL || o->h_client != c->tsg->h_client ||
      o->h_parent != c->tsg->h_object)
    return;
  c->n++;
  if (schedule(o, RM_CTRL_CHANNEL_GPFIFO_SCHEDULE, c->r->enable, c->r) != 0)
    c->failed = 1;
}

static void gate_one(gl_obj *o, void *vctx) {
  gate_result *r = vctx;
  int standalone = 0;
  if (o->kind == GL_KIND_CHANNEL) {
    const gl_obj *parent = gl_reg_find(o->h_client, o->h_parent);
    standalone = !(parent && parent->kind == GL_KIND_TSG);
  }
  if (o->kind != GL_KIND_TSG && !standalone)
    return;
  if (r->enable && !o->gate_off)
    return; /* never held off by us: leave it as the application set it */
  if (!r->enable && (o->gate_off || o->app_state == GL_APP_DISABLED))
    return; /* already off: no second RPC to the GPU's firmware */
  r->n_objects++;
  uint32_t cmd = o->kind == GL_KIND_TSG ? RM_CTRL_TSG_GPFIFO_SCHEDULE : RM_CTRL_CHANNEL_GPFIFO_SCHEDULE;
  int ok = schedule(o, cmd, r->enable, r) == 0;
  if (!ok && o->kind == GL_KIND_TSG) {
    chan_ctx c = {o, r, 0, 0};
    gl_reg_each(channel_fallback, &c);
    ok = c.n > 0 && !c.failed;
    gl_log(ok ? 2 : 1, "TSG 0x%x schedule(%d) refused; channel fallback on %u channel(s): %s",
           o->h_object, r->enable, c.n, ok ? "ok" : "failed");
  }
  if (!ok) {
    r->n_failed++;
    return;
  }
  if (r->enable)
    o->gate_off = 0;
  else if (o->app_state != GL_APP_DISABLED)
    o->gate_off = 1;
}

/* Open or close the gate. Closing: stop launches first, then disable channels.
 * Opening: enable channels first, then release launches. */
static gate_result apply_gate(int enable, int controls) {
  gate_result r = {enable, 0, 0, 0, 0};
  gl_reg_lock();
  if (!enable)
    atomic_store(&gate_open, 0);
  if (controls)
    gl_reg_each(gate_one, &r);
  if (enable)
    atomic_store(&gate_open, 1);
  gl_reg_unlock();
  if (enable)
    wake_holders();
  return r;
}

int gl_agent_filter_app_schedule(rm_nvos54 *p) {
  if ((p->cmd != RM_CTRL_TSG_GPFIFO_SCHEDULE && p->cmd != RM_CTRL_CHANNEL_GPFIFO_SCHEDULE) ||
      p->params_size != sizeof(rm_schedule_params) || p->params == 0)
    return 0;
  const rm_schedule_params *sp = (const rm_schedule_params *)(uintptr_t)p->params;
  int swallowed = 0;
  gl_reg_lock();
  gl_obj *o = gl_reg_find(p->h_client, p->h_object);
  if (o) {
    if (!sp->enable) {
      o->app_state = GL_APP_DISABLED;
      o->gate_off = 0;
    } else {
      o->app_state = GL_APP_ENABLED;
      if (!atomic_load(&gate_open)) {
        o->gate_off = 1;
        p->status = RM_STATUS_OK;
        swallowed = 1;
      }
    }
  }
  gl_reg_unlock();
  if (swallowed)
    gl_log(2, "deferred the application's schedule(enable) of 0x%x until the gate opens",
           p->h_object);
  return swallowed;
}

static void close_gate_fail_closed(uint32_t code, const char *why) {
  if (gl_cfg.role != GL_ROLE_OFF)
    return;
  atomic_store(&agent_open, 0); /* only the agent's next enable opens again */
  int was_open = atomic_load(&gate_open);
  gate_result r = apply_gate(0, atomic_load(&gate_mode) == GL_GATE_MODE_SHIM);
  if (r.n_failed)
    set_status(GL_STATUS_CONTROL_REFUSED, "%s; disabling %u of %u channel group(s) failed", why,
               r.n_failed, r.n_objects);
  else
    set_status(code != GL_STATUS_OK ? code : GL_STATUS_GATED_BY_AGENT, "%s", why);
  if (was_open)
    gl_log(1, "gate closed (fail closed): %s; %u object(s) disabled, %u failed", why,
           r.n_objects - r.n_failed, r.n_failed);
}

void gl_agent_fast_close(uint32_t code, const char *why, int fail) {
  if (gl_cfg.role != GL_ROLE_OFF)
    return;
  if (fail) {
    close_gate_fail_closed(code, why);
    maybe_send_status(1);
    return;
  }
  gate_result r = apply_gate(0, atomic_load(&gate_mode) == GL_GATE_MODE_SHIM);
  if (r.n_failed)
    set_status(GL_STATUS_CONTROL_REFUSED, "%s; disable refused on %u of %u object(s)", why,
               r.n_failed, r.n_objects);
  else /* the caller's code: a stale heartbeat found right after an open is NO_AGENT */
    set_status(code != GL_STATUS_OK ? code : GL_STATUS_GATED_BY_AGENT, "%s", why);
}

void gl_agent_resync(const char *why) {
  if (gl_cfg.role != GL_ROLE_OFF || atomic_load(&gate_open))
    return;
  set_status(GL_STATUS_GATED_BY_AGENT, "%s", why);
  maybe_send_status(1);
}

/* Set when a RECLAIM failed: pages may be gone that the framework was never told about, so
 * the process's GPU work stays held for good (fail closed); GATE enables are refused. */
static atomic_int reclaim_broken;

void gl_agent_fast_open(void) {
  if (gl_cfg.role != GL_ROLE_OFF || !atomic_load(&agent_open) || atomic_load(&gate_open) ||
      atomic_load(&reclaim_broken))
    return;
  char why[GL_REASON_LEN];
  uint32_t why_code = 0;
  if (!gl_fg_may_open(why, sizeof why, &why_code))
    return;
  apply_gate(1, atomic_load(&gate_mode) == GL_GATE_MODE_SHIM);
  if (!gl_fg_may_open(why, sizeof why, &why_code) || !atomic_load(&agent_open)) {
    gl_agent_fast_close(why_code ? why_code : GL_STATUS_GATED_BY_AGENT, why, 0);
    return;
  }
  set_status(GL_STATUS_OK, "running");
}

static void handle_gate(const gl_gate *g) {
  uint64_t t0 = gl_now_ns();
  atomic_store(&agent_open, g->enable != 0);
  int controls = atomic_load(&gate_mode) == GL_GATE_MODE_SHIM;
  int broken = g->enable && atomic_load(&reclaim_broken);
  char why[GL_REASON_LEN];
  uint32_t why_code = 0;
  int refused = g->enable && !broken && !gl_fg_may_open(why, sizeof why, &why_code);
  if (refused)
    broken = 1;
  gate_result r = apply_gate(g->enable != 0 && !broken, controls);
  if (g->enable && !broken && !gl_fg_may_open(why, sizeof why, &why_code)) {
    /* A busy edge landed between the check and the open, while the watch thread still saw
     * the gate closed: close again (after the open, any later edge is the watcher's). */
    gl_agent_fast_close(why_code, why, 0);
    refused = broken = 1;
  }
  gl_gate_ack ack;
  memset(&ack, 0, sizeof ack);
  ack.gate_seq = g->gate_seq;
  ack.latency_ns = gl_now_ns() - t0;
  ack.gpu = g->gpu;
  ack.enabled = g->enable && !broken ? 1 : 0;
  ack.ok = r.n_failed == 0 && (!broken || refused);
  ack.n_objects = (uint16_t)(r.n_objects > 0xFFFF ? 0xFFFF : r.n_objects);
  ack.err = r.err;
  ack.rm_status = r.rm_status;
  ack.n_failed = r.n_failed;
  gl_agent_send(GL_MSG_GATE_ACK, &ack, sizeof ack, 0);
  if (refused)
    set_status(why_code, "enable refused: %s", why);
  else if (broken)
    set_status(GL_STATUS_CONTROL_REFUSED, "memory reclamation failed: work held");
  else if (g->enable)
    set_status(GL_STATUS_OK, "running");
  else if (r.n_failed)
    set_status(GL_STATUS_CONTROL_REFUSED, "disable refused on %u of %u object(s) (rm 0x%x, errno %d)",
               r.n_failed, r.n_objects, r.rm_status, r.err);
  else
    set_status(GL_STATUS_GATED_BY_AGENT, "gated by the agent (%u object(s) disabled)", r.n_objects);
  gl_log(2, "GATE seq=%llu enable=%d: %u object(s), %u failed, %.1f us",
         (unsigned long long)g->gate_seq, g->enable, r.n_objects, r.n_failed,
         (double)ack.latency_ns / 1e3);
  maybe_send_status(1);
}

/* --- the control thread --------------------------------------------------------- */

typedef struct replay_ctx {
  gl_obj objs[512];
  unsigned n;
} replay_ctx;

static void collect(gl_obj *o, void *vctx) {
  replay_ctx *c = vctx;
  if ((o->kind || o->h_class == RM_CLASS_MEMORY_LOCAL_USER) && c->n < 512)
    c->objs[c->n++] = *o;
}

static void send_hello(void) {
  gl_hello h;
  memset(&h, 0, sizeof h);
  h.pid = (uint32_t)getpid();
  h.role = (uint8_t)gl_cfg.role;
  h.ngpus = (uint8_t)gl_cfg.ngpus;
  h.caps = GL_CAP_LAUNCH_HOOK | (gl_cfg.role == GL_ROLE_OFF ? GL_CAP_GATE_THREAD | GL_CAP_FD_PASS
                                                           : GL_CAP_BUSY_TRACK);
  for (unsigned i = 0; i < GL_MAX_GPUS; i++) {
    h.gpu_index[i] = gl_cfg.gpu_index[i];
    memcpy(h.gpu_uuid[i], gl_cfg.gpu_uuid[i], GL_UUID_LEN);
  }
  memcpy(h.job, gl_cfg.job, GL_JOB_LEN);
  gl_agent_send(GL_MSG_HELLO, &h, sizeof h, gl_cfg.role != GL_ROLE_OFF);
  if (gl_cfg.role != GL_ROLE_OFF)
    return;
  static replay_ctx rc; /* only the control thread uses it */
  rc.n = 0;
  gl_reg_lock();
  gl_reg_each(collect, &rc);
  gl_reg_unlock();
  for (unsigned i = 0; i < rc.n; i++)
    send_obj(&rc.objs[i], 1);
}

static int connect_agent(void) {
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0)
    return -1;
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  snprintf(a.sun_path, sizeof a.sun_path, "%s", gl_cfg.socket_path);
  if (connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
    int e = errno;
    close(s);
    errno = e;
    return -1;
  }
  struct timeval tv = {0, 200000}; /* an offline send never blocks longer than this */
  setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return s;
}

/* RECLAIM (the agent disabled our channels first): quarantine-remap and release the pages,
 * then RECLAIM_ACK. Refused while our gate is open (work could be running on the pages);
 * a failure holds our work (fail closed): pages may be gone that the framework still uses. */
static void handle_reclaim(const gl_reclaim *r, const char *handles) {
  gl_reclaim_ack a;
  memset(&a, 0, sizeof a);
  a.reclaim_seq = r->reclaim_seq;
  a.gpu = r->gpu;
  if (gl_agent_gate_open()) {
    a.err = EBUSY;
  } else {
    uint64_t *va = malloc(r->count ? 8ull * r->count : 8);
    if (!va) {
      a.err = ENOMEM;
    } else {
      memcpy(va, handles, 8ull * r->count);
      uint32_t released = 0;
      int32_t err = 0;
      a.ok = gl_reclaim_pages(va, r->count, &released, &err) == 0;
      a.released = released;
      a.err = err;
      free(va);
    }
  }
  if (!a.ok) {
    gl_log(1, "RECLAIM %llu: %u of %u pages released, error %d; holding work",
           (unsigned long long)r->reclaim_seq, a.released, r->count, a.err);
    if (a.err != EBUSY) {
      atomic_store(&reclaim_broken, 1);
      close_gate_fail_closed(GL_STATUS_CONTROL_REFUSED, "memory reclamation failed: work held");
    }
  }
  gl_agent_send(GL_MSG_RECLAIM_ACK, &a, sizeof a, 0);
}

/* RESTORE (the agent saw memory come back): back quarantined pages with fresh allocations,
 * then RESTORE_ACK. Allowed with the gate open: a quarantined page holds no live blocks.
 * A failure leaves the page quarantined and work running; only a page left with nothing
 * mapped (its quarantine could not be put back) fails closed, as RECLAIM does. */
static void handle_restore(const gl_restore *r, const char *handles) {
  gl_restore_ack a;
  memset(&a, 0, sizeof a);
  a.reclaim_seq = r->reclaim_seq;
  a.gpu = r->gpu;
  uint64_t *va = malloc(r->count ? 8ull * r->count : 8);
  int rc = -1;
  if (!va) {
    a.err = ENOMEM;
  } else {
    memcpy(va, handles, 8ull * r->count);
    uint32_t restored = 0;
    int32_t err = 0;
    rc = gl_restore_pages(va, r->count, &restored, &err);
    a.ok = rc == 0;
    a.released = restored;
    a.err = err;
    free(va);
  }
  if (!a.ok)
    gl_log(1, "RESTORE %llu: %u of %u pages restored, error %d%s",
           (unsigned long long)r->reclaim_seq, a.released, r->count, a.err,
           rc == -2 ? "; a page has nothing mapped: holding work" : "");
  if (rc == -2) {
    atomic_store(&reclaim_broken, 1);
    close_gate_fail_closed(GL_STATUS_CONTROL_REFUSED, "memory restore failed: work held");
  }
  gl_agent_send(GL_MSG_RESTORE_ACK, &a, sizeof a, 0);
}

/* Returns 0 to keep reading, -1 on a protocol error. */
static int handle_frame(const gl_header *h, const char *payload) {
  switch (h->type) {
  case GL_MSG_HELLO_ACK: {
    if (h->length != sizeof(gl_hello_ack))
      return -1;
    gl_hello_ack a;
    memcpy(&a, payload, sizeof a);
    atomic_store(&source_id, (uint32_t)a.source_id); /* a new connection: a new id */
    if (a.heartbeat_ms >= 10)
      atomic_store(&heartbeat_ms, (int)a.heartbeat_ms);
    atomic_store(&gate_mode, a.gate_mode == GL_GATE_MODE_AGENT ? GL_GATE_MODE_AGENT : GL_GATE_MODE_SHIM);
    gl_log(2, "agent accepted=%d gate_open=%d mode=%d", a.accepted, a.gate_open, a.gate_mode);
    if (gl_cfg.role == GL_ROLE_OFF) {
      atomic_store(&agent_open, a.accepted && a.gate_open);
      if (!a.accepted) {
        close_gate_fail_closed(GL_STATUS_GATED_BY_AGENT, "agent did not accept this process");
      } else {
        gl_gate g = {0, GL_GPU_ALL, a.gate_open ? 1 : 0, {0}};
        char why[GL_REASON_LEN];
        uint32_t why_code = 0;
        if (a.gate_open && !gl_fg_may_open(why, sizeof why, &why_code)) {
          close_gate_fail_closed(why_code, why);
          atomic_store(&agent_open, 1); /* the agent said open: a native gate loop may open */
        } else if (a.gate_open) {
          apply_gate(1, atomic_load(&gate_mode) == GL_GATE_MODE_SHIM);
          set_status(GL_STATUS_OK, "running");
          if (!gl_fg_may_open(why, sizeof why, &why_code))
            gl_agent_fast_close(why_code, why, 0); /* an edge between the check and the open */
        } else {
          (void)g;
          close_gate_fail_closed(GL_STATUS_GATED_BY_AGENT, "gated by the agent");
        }
      }
      maybe_send_status(1);
    }
    return 0;
  }
  case GL_MSG_GATE: {
    if (h->length != sizeof(gl_gate))
      return -1;
    gl_gate g;
    memcpy(&g, payload, sizeof g);
    if (gl_cfg.role == GL_ROLE_OFF)
      handle_gate(&g);
    return 0;
  }
  case GL_MSG_FD_REQUEST:
    if (h->length != sizeof(gl_fd_request))
      return -1;
    if (gl_cfg.role == GL_ROLE_OFF)
      send_fd_pass();
    return 0;
  case GL_MSG_HEARTBEAT:
    return h->length == sizeof(gl_heartbeat) ? 0 : -1;
  case GL_MSG_INVALIDATE_BLOCKS:
    return 0; /* meant for framework hooks; harmless here */
  case GL_MSG_RECLAIM: {
    if (h->length < sizeof(gl_reclaim))
      return -1;
    gl_reclaim r;
    memcpy(&r, payload, sizeof r);
    if (h->length != sizeof r + 8ull * r.count)
      return -1;
    if (gl_cfg.role == GL_ROLE_OFF)
      handle_reclaim(&r, payload + sizeof r);
    return 0;
  }
  case GL_MSG_RESTORE: {
    if (h->length < sizeof(gl_restore))
      return -1;
    gl_restore r;
    memcpy(&r, payload, sizeof r);
    if (h->length != sizeof r + 8ull * r.count)
      return -1;
    if (gl_cfg.role == GL_ROLE_OFF)
      handle_restore(&r, payload + sizeof r);
    return 0;
  }
  default:
    return -1;
  }
}

static void agent_down(const char *why) {
  /* The id named the old connection: a restarted agent may give it to another process. */
  atomic_store(&source_id, 0);
  pthread_mutex_lock(&send_mu);
  if (sock >= 0) {
    close(sock);
    sock = -1;
  }
  pthread_mutex_unlock(&send_mu);
  close_gate_fail_closed(GL_STATUS_NO_AGENT, why);
}

static void read_loop(int s) {
  static char buf[GL_HEADER_SIZE + GL_MAX_PAYLOAD];
  size_t have = 0;
  uint64_t last_rx = gl_now_ns(), last_tx = 0;
  for (;;) {
    int hb = atomic_load(&heartbeat_ms);
    struct pollfd pfd = {s, POLLIN, 0};
    int pr = poll(&pfd, 1, hb);
    uint64_t now = gl_now_ns();
    if (pr < 0 && errno != EINTR) {
      agent_down("poll on the agent socket failed");
      return;
    }
    if (now - last_tx >= (uint64_t)hb * 1000000ull) {
      gl_heartbeat beat = {now, (uint32_t)getpid(), (uint32_t)atomic_load(&gate_open)};
      gl_agent_send(GL_MSG_HEARTBEAT, &beat, sizeof beat, gl_cfg.role != GL_ROLE_OFF);
      last_tx = now;
      maybe_send_status(0);
    }
    uint64_t silence = (uint64_t)(hb * 3 > 3000 ? hb * 3 : 3000) * 1000000ull;
    if (now - last_rx > silence) {
      agent_down("agent silent for too long");
      return;
    }
    if (pr <= 0)
      continue;
    ssize_t n = recv(s, buf + have, sizeof buf - have, 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
      agent_down("agent closed the connection");
      return;
    }
    if (n < 0)
      continue;
    have += (size_t)n;
    last_rx = gl_now_ns();
    size_t off = 0;
    while (have - off >= GL_HEADER_SIZE) {
      gl_header h;
      memcpy(&h, buf + off, sizeof h);
      if (h.magic != GL_PROTO_MAGIC || h.version != GL_PROTO_VERSION || h.length > GL_MAX_PAYLOAD) {
        gl_log(1, "agent sent a bad frame header (magic 0x%x version %u)", h.magic, h.version);
        agent_down("agent protocol error");
        return;
      }
      if (have - off < GL_HEADER_SIZE + h.length)
        break;
      if (handle_frame(&h, buf + off + GL_HEADER_SIZE) != 0) {
        gl_log(1, "agent sent an invalid frame (type %u, %u bytes)", h.type, h.length);
        agent_down("agent protocol error");
        return;
      }
      off += GL_HEADER_SIZE + h.length;
    }
    memmove(buf, buf + off, have - off);
    have -= off;
  }
}

static void *control_main(void *unused) {
  (void)unused;
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL); /* the application's handlers never run here */
  int logged_down = 0;
  for (;;) {
    int s = connect_agent();
    if (s < 0) {
      int e = errno;
      char why[GL_REASON_LEN];
      snprintf(why, sizeof why, "agent socket %.40s unreachable: %s", gl_cfg.socket_path, strerror(e));
      close_gate_fail_closed(GL_STATUS_NO_AGENT, why);
      if (!logged_down && gl_cfg.role == GL_ROLE_OFF)
        gl_log(1, "%s; offline GPU work stays held until it answers", why);
      logged_down = 1;
      struct timespec ts = {gl_cfg.reconnect_ms / 1000, (long)(gl_cfg.reconnect_ms % 1000) * 1000000L};
      nanosleep(&ts, NULL);
      continue;
    }
    logged_down = 0;
    pthread_mutex_lock(&send_mu);
    sock = s;
    pthread_mutex_unlock(&send_mu);
    gl_log(2, "connected to the agent at %s", gl_cfg.socket_path);
    if (gl_cfg.role == GL_ROLE_OFF)
      set_status(GL_STATUS_GATED_BY_AGENT, "waiting for the agent's HELLO_ACK");
    send_hello();
    maybe_send_status(1);
    read_loop(s);
  }
  return NULL;
}

void gl_agent_start(void) {
  if (gl_cfg.role == GL_ROLE_NONE)
    return;
  pthread_mutex_lock(&start_mu);
  if (!started) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    int rc = pthread_create(&t, &attr, control_main, NULL);
    pthread_attr_destroy(&attr);
    if (rc == 0)
      started = 1;
    else
      gl_log(1, "cannot start the control thread: %s%s", strerror(rc),
             gl_cfg.role == GL_ROLE_OFF ? "; offline GPU work stays held" : "");
    gl_fg_watch_start();
  }
  pthread_mutex_unlock(&start_mu);
}

void gl_agent_after_fork(void) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  send_mu = m;
  hold_mu = m;
  start_mu = m;
  hold_cv = c;
  if (sock >= 0)
    close(sock); /* the parent's connection stays the parent's */
  sock = -1;
  started = 0;
  blocked_threads = 0;
  blocked_since = 0;
  atomic_store(&gate_open, 0);
  gl_fg_after_fork();
  status_code = GL_STATUS_NO_AGENT;
  snprintf(status_reason, sizeof status_reason, "forked child: agent not connected yet");
}
