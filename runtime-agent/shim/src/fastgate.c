/*
 * fastgate.c - the native gate path: the shared-memory segment the agent creates
 * (include/gleaner_fastgate.h), bumped by online shims and watched by offline shims.
 *
 * Contract:
 * - Online: gl_fg_online_busy() runs on every busy edge, before the ONLINE_BUSY frame: it
 *   adds one to the busy_seq of the process's GPUs and wakes the watchers (FUTEX_WAKE on
 *   the segment's wake word), then puts the edge (and the decode gap before it) into the
 *   edge ring for the agent's native gate loop; gl_fg_online_idle() puts an idle edge there.
 *   Both say whether a native gate loop runs and beats: then the ring replaces the socket
 *   frames of those edges (cuda_hook.c sends none). They never wait: a trylock guards the
 *   (re)mapping, done at most once a second; without a segment they do nothing (the socket
 *   frames go).
 * - Offline: gl_fg_watch_start() starts one watch thread. It maps the segment read-only
 *   (re-mapping when the agent replaced the file), sleeps in FUTEX_WAIT on the wake word,
 *   and when a busy_seq of its GPUs moved it closes the gate itself (agent.c
 *   gl_agent_fast_close): the busy edge reaches the RM controls without the agent. The
 *   agent's policy (cooldown, one preemption per request) still decides every enable.
 * - Fail closed: a heartbeat older than the segment's stale_ns, a retired or invalid
 *   segment, and a watch thread that ended all close the gate with the reason in STATUS;
 *   gl_fg_may_open() refuses enables in those states and while an online busy edge is
 *   newer than the agent's decision (busy_seq != open_seq). Only while no segment was ever
 *   found (an agent without one) does the socket path alone decide, as before.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "gleaner_fastgate.h"
#include "internal.h"

#define FG_CHECK_NS 100000000ull  /* watcher: heartbeat and file checks every 100 ms */
#define FG_REMAP_NS 1000000000ull /* online: look for a replaced file at most every 1 s */

static void fg_path(char *out, size_t cap) {
  const char *slash = strrchr(gl_cfg.socket_path, '/');
  int dir = slash ? (int)(slash - gl_cfg.socket_path) : 0;
  snprintf(out, cap, "%.*s/%s", dir, slash ? gl_cfg.socket_path : ".", GLEANER_NODE_GATE_SEGMENT_NAME);
}

/* Map the segment at `path` if it is a filled one; NULL otherwise. Raw syscalls: the shim's
 * own open/close interposition has no business with this file. */
static gl_fg_segment *fg_map(const char *path, int writable, dev_t *dev, ino_t *ino) {
  int fd = (int)syscall(SYS_openat, AT_FDCWD, path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (fd < 0)
    return NULL;
  struct stat st;
  void *m = MAP_FAILED;
  if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(gl_fg_segment))
    m = mmap(NULL, sizeof(gl_fg_segment), PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
  syscall(SYS_close, fd);
  if (m == MAP_FAILED)
    return NULL;
  gl_fg_segment *s = m;
  if (__atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) != GL_FG_MAGIC || s->version != GL_FG_VERSION ||
      s->nslots == 0 || s->nslots > GL_FG_SLOTS) {
    munmap(m, sizeof(gl_fg_segment));
    return NULL;
  }
  *dev = st.st_dev;
  *ino = st.st_ino;
  return s;
}

static int same_file(const char *path, dev_t dev, ino_t ino) {
  struct stat st;
  return stat(path, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

/* The slots of this process's GPUs, as the agent maps a HELLO: by UUID, else by node index;
 * none known → all (an unknown online process closes every gate: the safe side). */
static uint64_t fg_mask(const gl_fg_segment *s) {
  uint64_t m = 0;
  for (int i = 0; i < gl_cfg.ngpus; i++) {
    uint64_t hit = 0;
    for (uint32_t k = 0; k < s->nslots && gl_cfg.gpu_uuid[i][0]; k++)
      if (strncmp(gl_cfg.gpu_uuid[i], s->slot[k].uuid, GL_UUID_LEN) == 0)
        hit |= 1ull << k;
    for (uint32_t k = 0; k < s->nslots && !hit && gl_cfg.gpu_index[i] >= 0; k++)
      if (s->slot[k].index == gl_cfg.gpu_index[i])
        hit |= 1ull << k;
    m |= hit;
  }
  if (!m)
    m = s->nslots >= 64 ? ~0ull : (1ull << s->nslots) - 1;
  return m;
}

static long futex(uint32_t *word, int op, uint32_t val, const struct timespec *timeout) {
  return syscall(SYS_futex, word, op, val, timeout, NULL, 0);
}

/* --- online ---------------------------------------------------------------------- */

static pthread_mutex_t on_mu = PTHREAD_MUTEX_INITIALIZER;
static gl_fg_segment *_Atomic on_seg;
static _Atomic uint64_t on_mask;
static uint64_t on_next_ns; /* guarded by on_mu */
static dev_t on_dev;
static ino_t on_ino;

/* The online mapping, (re)mapped at most once a second; NULL without a segment. */
static gl_fg_segment *online_segment(void) {
  if (pthread_mutex_trylock(&on_mu) == 0) {
    uint64_t now = gl_now_ns();
    if (now >= on_next_ns) {
      on_next_ns = now + FG_REMAP_NS;
      char path[160];
      fg_path(path, sizeof path);
      gl_fg_segment *cur = atomic_load(&on_seg);
      /* A retired mapping is looked up again even when the path names "the same" file: a
       * file system may hand the new file the old one's inode number (overlay mounts). */
      if (!cur || !same_file(path, on_dev, on_ino) ||
          __atomic_load_n(&cur->magic, __ATOMIC_ACQUIRE) != GL_FG_MAGIC) {
        dev_t dev;
        ino_t ino;
        gl_fg_segment *s = fg_map(path, 1, &dev, &ino);
        if (s) {
          /* The old mapping is kept (one page per agent restart): another launching
           * thread may still be bumping through it. */
          on_dev = dev;
          on_ino = ino;
          atomic_store(&on_mask, fg_mask(s));
          atomic_store(&on_seg, s);
          gl_log(2, "online busy edges also go to %s", path);
        }
      }
    }
    pthread_mutex_unlock(&on_mu);
  }
  return atomic_load(&on_seg);
}

/* One edge into the ring (see gleaner_fastgate.h), then wake the native loop. */
static void ring_push(gl_fg_segment *s, uint32_t source, uint16_t kind, uint64_t mask, uint64_t now,
                      uint64_t gap) {
  /* The shim sees no request identities: anonymous busy periods. */
  gl_fg_ring_put(s, source, kind, mask, now, 0, gap);
  /* Only an idle edge wakes the loop: it starts a cooldown. A busy edge closed the offline
   * gates already (busy_seq), and the loop reads it, with its time, before it next decides
   * (an enable it decides without it leaves open_seq behind busy_seq: refused). */
  if (kind == GL_FG_EDGE_IDLE && __atomic_load_n(&s->loop_state, __ATOMIC_ACQUIRE) == GL_FG_LOOP_RUNNING)
    futex(&s->edge_head, FUTEX_WAKE, INT_MAX, NULL);
}

/* A native gate loop runs and beats: the ring replaces the socket's edge frames. */
static int loop_live(const gl_fg_segment *s, uint64_t now) {
  if (__atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) != GL_FG_MAGIC ||
      __atomic_load_n(&s->loop_state, __ATOMIC_ACQUIRE) != GL_FG_LOOP_RUNNING)
    return 0;
  uint64_t beat = __atomic_load_n(&s->loop_beat_ns, __ATOMIC_ACQUIRE);
  return now <= beat || now - beat <= __atomic_load_n(&s->stale_ns, __ATOMIC_RELAXED);
}

/* Test fault: a busy edge's ring entry is never written (GLEANER_NODE_SHIM_FAULT_RING_LOSE_BUSY). */
static int fault_lose_busy(void) {
  static _Atomic int cached = -1;
  int v = atomic_load(&cached);
  if (v < 0) {
    const char *f = getenv(GLEANER_NODE_ENV_SHIM_FAULT);
    v = f && strcmp(f, GLEANER_NODE_SHIM_FAULT_RING_LOSE_BUSY) == 0;
    atomic_store(&cached, v);
  }
  return v;
}

/* This connection's busy word: claimed once per source id and segment, then found without a
 * lock (word_key: source << 32 | entry + 1, zeroed while word_seg changes). */
static gl_fg_segment *_Atomic word_seg;
static _Atomic uint64_t word_key;

/* This connection's busy word in `s` (see gleaner_fastgate.h); NULL without one (the table
 * is full, the agent freed it: the connection went away and this id is never claimed again,
 * or another thread is claiming: this edge goes as a frame). Never waits. */
static gl_fg_source *busy_word(gl_fg_segment *s, uint32_t source) {
  gl_fg_segment *seen = atomic_load(&word_seg);
  uint64_t key = atomic_load(&word_key);
  if (seen == s && atomic_load(&word_seg) == s && key >> 32 == source && (key & 0xffffffffu))
    return &s->source[(key & 0xffffffffu) - 1];
  if (pthread_mutex_trylock(&on_mu) != 0)
    return NULL;
  gl_fg_source *w = NULL;
  key = atomic_load(&word_key);
  if (atomic_load(&word_seg) == s && key >> 32 == source) {
    w = (key & 0xffffffffu) ? &s->source[(key & 0xffffffffu) - 1] : NULL; /* claimed, or none free */
  } else {
    atomic_store(&word_key, 0);
    atomic_store(&word_seg, s);
    uint64_t mine = (uint64_t)source << 32;
    uint32_t at = 0;
    for (uint32_t i = 0; i < GL_FG_SOURCES && !w; i++) {
      uint64_t free_state = 0;
      if (__atomic_compare_exchange_n(&s->source[i].state, &free_state, mine, 0, __ATOMIC_ACQ_REL,
                                      __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&s->source[i].mask, atomic_load(&on_mask), __ATOMIC_RELEASE);
        w = &s->source[i];
        at = i + 1;
      }
    }
    if (!w)
      gl_log(1, "no free busy word in the shared-memory gate: online edges go as frames");
    atomic_store(&word_key, mine | at);
  }
  pthread_mutex_unlock(&on_mu);
  return w;
}

/* Set (busy) or clear this connection's busy word; 0 when the word is not its own any more. */
static int set_busy(gl_fg_source *w, uint32_t source, int busy) {
  uint64_t old = __atomic_load_n(&w->state, __ATOMIC_ACQUIRE);
  for (;;) {
    if (old >> 32 != source)
      return 0;
    uint64_t next = ((uint64_t)source << 32) | (busy ? 1u : 0u);
    if (__atomic_compare_exchange_n(&w->state, &old, next, 0, __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE))
      return 1;
  }
}

/* Whether this busy period's busy edge went into the ring. An idle edge goes the way its
 * busy edge went: one that went only as a frame (before the HELLO_ACK's source id, or
 * without a free busy word) made the agent's own gate busy, and only a frame ends that busy
 * period there (an idle entry in the ring reaches the loop alone: the agent would hold the
 * offline side closed until the connection went away); the agent puts the framed idle edge
 * into the ring for the loop itself. */
static _Atomic int busy_ringed;

int gl_fg_online_busy(uint64_t now, uint64_t gap_ns) {
  atomic_store(&busy_ringed, 0);
  gl_fg_segment *s = online_segment();
  if (!s)
    return 0;
  uint64_t mask = atomic_load(&on_mask);
  /* The ring only with the agent's source id and this connection's busy word: its disconnect
   * then ends the source's busy period in the loop (a process that dies busy leaves no idle
   * edge), and a busy edge lost from the ring still holds the GPUs (the word). Without
   * either (before HELLO_ACK, a full table), the frames alone carry the edges. */
  uint32_t source = gl_agent_source_id();
  gl_fg_source *w = source ? busy_word(s, source) : NULL;
  int ring = w && set_busy(w, source, 1);
  atomic_store(&busy_ringed, ring); /* before the entry: the tracker may see the idle soon */
  /* A bump the loop would never read an entry for would hold its GPUs closed for good
   * (busy_seq ahead of the loop's open_seq): while a loop runs, an edge without an entry
   * goes as frames only, and the agent's own gates close the offline side (GATE). */
  if (!ring && loop_live(s, now))
    return 0;
  gl_fg_busy_bump(s, mask);
  futex(&s->wake, FUTEX_WAKE, INT_MAX, NULL);
  if (!ring)
    return 0;
  if (gap_ns)
    ring_push(s, source, GL_FG_EDGE_GAP, mask, now, gap_ns);
  if (fault_lose_busy())
    (void)__atomic_fetch_add(&s->edge_head, 1, __ATOMIC_ACQ_REL); /* a ticket never committed */
  else
    ring_push(s, source, GL_FG_EDGE_BUSY, mask, now, 0);
  return loop_live(s, now);
}

int gl_fg_online_idle(uint64_t now) {
  if (!atomic_exchange(&busy_ringed, 0))
    return 0; /* its busy edge went as a frame only: so does this one (busy_ringed) */
  gl_fg_segment *s = online_segment();
  uint32_t source = gl_agent_source_id();
  if (!s || !source)
    return 0;
  /* The word first: a loop that read the idle entry never sees this connection busy after. */
  gl_fg_source *w = busy_word(s, source);
  if (!w || !set_busy(w, source, 0))
    return 0;
  ring_push(s, source, GL_FG_EDGE_IDLE, atomic_load(&on_mask), now, 0);
  return loop_live(s, now);
}

/* --- offline --------------------------------------------------------------------- */

enum { FG_NONE = 0, FG_LIVE, FG_STALE, FG_DEAD };

static _Atomic int fg_state = FG_NONE;
static gl_fg_segment *_Atomic off_seg;
static _Atomic uint64_t off_mask;
static _Atomic int watch_started;

/* Why the segment does not allow work now (NULL: it does), at `now`. */
static const char *fg_unfit(const gl_fg_segment *s, uint64_t now, char *buf, size_t cap) {
  if (__atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) != GL_FG_MAGIC)
    return "the agent retired the shared-memory gate segment";
  uint64_t hb = __atomic_load_n(&s->heartbeat_ns, __ATOMIC_ACQUIRE);
  uint64_t stale = __atomic_load_n(&s->stale_ns, __ATOMIC_RELAXED);
  if (now > hb && now - hb > stale) {
    snprintf(buf, cap, "agent heartbeat in shared memory stale (%llu ms old)",
             (unsigned long long)((now - hb) / 1000000ull));
    return buf;
  }
  uint32_t loop = __atomic_load_n(&s->loop_state, __ATOMIC_ACQUIRE);
  if (loop == GL_FG_LOOP_STOPPED)
    return "the agent's native gate loop stopped";
  uint64_t beat = __atomic_load_n(&s->loop_beat_ns, __ATOMIC_ACQUIRE);
  if (loop == GL_FG_LOOP_RUNNING && now > beat && now - beat > stale) {
    snprintf(buf, cap, "native gate loop heartbeat in shared memory stale (%llu ms old)",
             (unsigned long long)((now - beat) / 1000000ull));
    return buf;
  }
  return NULL;
}

/* While a native gate loop runs: the node index of a GPU of `mask` that an online busy word
 * says is busy, or whose loop gate is closed (open_gen even), or -1 (all open, or no loop: the agent's socket alone decides). */
static int loop_closed_gpu(const gl_fg_segment *s, uint64_t mask, uint64_t now) {
  if (__atomic_load_n(&s->loop_state, __ATOMIC_ACQUIRE) != GL_FG_LOOP_RUNNING)
    return -1;
  /* An online connection's busy word: busy, whatever the loop read from the ring (a lost
   * busy entry never opens a busy GPU). */
  uint64_t busy = gl_fg_busy_mask(s) & mask;
  for (uint32_t k = 0; k < GL_FG_SLOTS && k < s->nslots; k++)
    if (busy & (1ull << k))
      return s->slot[k].index;
  for (uint32_t k = 0; k < GL_FG_SLOTS && k < s->nslots; k++) {
    if (!(mask & (1ull << k)) || (__atomic_load_n(&s->slot[k].open_gen, __ATOMIC_ACQUIRE) & 1u))
      continue;
    uint64_t at = __atomic_load_n(&s->open_at_ns[k], __ATOMIC_ACQUIRE);
    if (!at || now < at)
      return s->slot[k].index;
  }
  return -1;
}

/* The earliest pending enable of `mask` still ahead of `now` (0: none). */
static uint64_t loop_next_open(const gl_fg_segment *s, uint64_t mask, uint64_t now) {
  uint64_t next = 0;
  for (uint32_t k = 0; k < GL_FG_SLOTS && k < s->nslots; k++) {
    uint64_t at = (mask & (1ull << k)) ? __atomic_load_n(&s->open_at_ns[k], __ATOMIC_ACQUIRE) : 0;
    if (at > now && (!next || at < next))
      next = at;
  }
  return next;
}

int gl_fg_may_open(char *why, size_t cap, uint32_t *code) {
  int st = atomic_load(&fg_state);
  *code = GL_STATUS_NO_AGENT; /* the fail-closed reasons */
  if (st == FG_DEAD) {
    snprintf(why, cap, "native gate watch stopped");
    return 0;
  }
  gl_fg_segment *s = atomic_load(&off_seg);
  if (!s)
    return 1; /* no segment: the socket path alone decides */
  char buf[96];
  const char *bad = fg_unfit(s, gl_now_ns(), buf, sizeof buf);
  if (bad) {
    snprintf(why, cap, "%s", bad);
    return 0;
  }
  uint64_t mask = atomic_load(&off_mask);
  for (uint32_t k = 0; k < GL_FG_SLOTS && k < s->nslots; k++)
    if ((mask & (1ull << k)) && __atomic_load_n(&s->slot[k].busy_seq, __ATOMIC_ACQUIRE) !=
                                    __atomic_load_n(&s->slot[k].open_seq, __ATOMIC_ACQUIRE)) {
      snprintf(why, cap, "online busy edge on GPU %d newer than the agent's enable", s->slot[k].index);
      *code = GL_STATUS_GATED_BY_AGENT;
      return 0;
    }
  int closed = loop_closed_gpu(s, mask, gl_now_ns());
  if (closed >= 0) {
    snprintf(why, cap, "the native gate loop holds GPU %d closed (or it is busy online)", closed);
    *code = GL_STATUS_GATED_BY_AGENT;
    return 0;
  }
  return 1;
}

static void *watch_main(void *unused) {
  (void)unused;
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  /* The lowest real-time priority where the process may have it (CAP_SYS_NICE or an
   * RLIMIT_RTPRIO): a busy node's CPU hogs then cannot delay the wakeup that stops offline
   * work. Safe: this thread only sleeps in FUTEX_WAIT and does a bounded close. Elsewhere
   * it runs at the process's priority. */
  struct sched_param prio = {.sched_priority = 1};
  int prc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &prio);
  gl_log(2, "gate watch thread: %s", prc == 0 ? "SCHED_FIFO 1" : strerror(prc));
  const char *fault = getenv(GLEANER_NODE_ENV_SHIM_FAULT);
  int exit_fault = fault && strcmp(fault, GLEANER_NODE_SHIM_FAULT_GATE_WATCH_EXIT) == 0;
  char path[160];
  fg_path(path, sizeof path);
  uint32_t last[GL_FG_SLOTS];
  dev_t dev = 0;
  ino_t ino = 0;
  uint64_t next_check = 0;
  for (;;) {
    uint64_t now = gl_now_ns();
    gl_fg_segment *s = atomic_load(&off_seg);
    if (now >= next_check) {
      next_check = now + FG_CHECK_NS;
      if (!s || !same_file(path, dev, ino) ||
          __atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) != GL_FG_MAGIC) {
        gl_fg_segment *n = fg_map(path, 0, &dev, &ino);
        if (n) {
          uint64_t mask = fg_mask(n);
          for (uint32_t k = 0; k < GL_FG_SLOTS; k++)
            last[k] = k < n->nslots ? __atomic_load_n(&n->slot[k].busy_seq, __ATOMIC_ACQUIRE) : 0;
          atomic_store(&off_mask, mask);
          atomic_store(&off_seg, n);
          /* The old mapping is kept (one page per agent restart): the control thread may
           * be reading it in gl_fg_may_open. */
          s = n;
          gl_log(2, "watching the shared-memory gate %s (GPU mask 0x%llx)", path,
                 (unsigned long long)mask);
        }
      }
      if (s) {
        char buf[96];
        const char *bad = fg_unfit(s, now, buf, sizeof buf);
        int was = atomic_exchange(&fg_state, bad ? FG_STALE : FG_LIVE);
        if (bad && was != FG_STALE) {
          gl_agent_fast_close(GL_STATUS_NO_AGENT, bad, 1);
        } else if (!bad && was == FG_STALE) {
          gl_log(1, "shared-memory gate live again; telling the agent (STATUS)");
          for (uint32_t k = 0; k < GL_FG_SLOTS && k < s->nslots; k++)
            last[k] = __atomic_load_n(&s->slot[k].busy_seq, __ATOMIC_ACQUIRE);
          gl_agent_resync("shared-memory gate live again: waiting for the agent's enable");
        }
        if (exit_fault && !bad)
          break;
      }
    }
    if (s && atomic_load(&fg_state) == FG_LIVE) {
      uint32_t w = __atomic_load_n(&s->wake, __ATOMIC_ACQUIRE);
      uint64_t mask = atomic_load(&off_mask);
      int moved = 0;
      for (uint32_t k = 0; k < GL_FG_SLOTS && k < s->nslots; k++) {
        if (!(mask & (1ull << k)))
          continue;
        uint32_t v = __atomic_load_n(&s->slot[k].busy_seq, __ATOMIC_ACQUIRE);
        if (v != last[k]) {
          last[k] = v;
          moved = 1;
        }
      }
      if (moved && gl_agent_gate_open())
        gl_agent_fast_close(GL_STATUS_GATED_BY_AGENT, "online busy (shared-memory gate)", 0);
      /* A native gate loop's decisions: open when it opened every GPU of this process (and
       * the agent's last word was open; gl_agent_fast_open checks the rest), close when it
       * closed one without a busy edge (a hold, a reclamation). */
      uint64_t wake_at = next_check;
      if (__atomic_load_n(&s->loop_state, __ATOMIC_ACQUIRE) == GL_FG_LOOP_RUNNING) {
        uint64_t t = gl_now_ns();
        int closed = loop_closed_gpu(s, mask, t);
        if (closed < 0 && !gl_agent_gate_open())
          gl_agent_fast_open();
        else if (closed >= 0 && gl_agent_gate_open())
          gl_agent_fast_close(GL_STATUS_GATED_BY_AGENT, "closed by the native gate loop", 0);
        uint64_t open_at = loop_next_open(s, mask, t); /* wake for it: the loop will not */
        if (open_at && open_at < wake_at)
          wake_at = open_at;
      }
      uint64_t left = wake_at > now ? wake_at - now : 1000000ull;
      struct timespec to = {(time_t)(left / 1000000000ull), (long)(left % 1000000000ull)};
      long rc = futex(&s->wake, FUTEX_WAIT, w, &to);
      if (rc != 0 && errno != EAGAIN && errno != ETIMEDOUT && errno != EINTR) {
        gl_log(1, "futex wait on the shared-memory gate failed: %s", strerror(errno));
        break;
      }
    } else {
      uint64_t left = next_check > now ? next_check - now : 1000000ull;
      struct timespec ts = {(time_t)(left / 1000000000ull), (long)(left % 1000000000ull)};
      nanosleep(&ts, NULL);
    }
  }
  atomic_store(&fg_state, FG_DEAD);
  gl_agent_fast_close(GL_STATUS_NO_AGENT, "native gate watch stopped: offline GPU work held", 1);
  return NULL;
}

void gl_fg_watch_start(void) {
  if (gl_cfg.role != GL_ROLE_OFF || atomic_exchange(&watch_started, 1))
    return;
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 128 * 1024);
  int rc = pthread_create(&t, &attr, watch_main, NULL);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    atomic_store(&fg_state, FG_DEAD);
    gl_log(1, "cannot start the gate watch thread: %s; offline GPU work stays held", strerror(rc));
    gl_agent_fast_close(GL_STATUS_NO_AGENT, "native gate watch could not start", 1);
  }
}

void gl_fg_after_fork(void) {
  /* The child has no watch thread: it starts its own with its control thread. The
   * mappings are inherited and stay valid. */
  atomic_store(&watch_started, 0);
  if (atomic_load(&fg_state) == FG_DEAD)
    atomic_store(&fg_state, FG_NONE);
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  on_mu = m;
}
