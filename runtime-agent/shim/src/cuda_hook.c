/*
 * cuda_hook.c - CUDA driver entry-point interposition and online busy tracking.
 *
 * Contract:
 * - dlsym() is interposed so that lookups of cuGetProcAddress(_v2) and of the
 *   launch entry points (cuLaunchKernel, cuLaunchKernelEx, cuGraphLaunch and
 *   their _ptsz variants) on libcuda's handle return our wrappers; the CUDA
 *   runtime (static or shared) finds every driver function that way. Lookups
 *   through RTLD_NEXT are forwarded as a sibling call so that glibc still sees
 *   the original caller (tests/runtime-agent/shim checks this).
 * - cuGetProcAddress wrappers hand out the same launch wrappers.
 * - Offline: each launch wrapper first waits while the gate is closed
 *   (gl_offline_hold). Online: each successful launch marks its stream busy;
 *   one event per stream, re-recorded at most every 20 us (and on every graph
 *   launch), lets a tracker thread see completion; the first launch after idle
 *   sends ONLINE_BUSY (and DECODE_GAP, the idle gap before it), and the tracker
 *   sends ONLINE_IDLE once every tracked stream drained. Without the event
 *   entry points it falls back to "idle after GLEANER_IDLE_QUIET_US without a
 *   launch" (default 2000). Online sends never block.
 * - Offline: cuMemCreate/cuMemMap/cuMemUnmap/cuMemRelease/cuMemSetAccess are wrapped
 *   with vmm.c's wrappers (page records, RECLAIM, RESTORE, the KV-cache allocator).
 * - gl_cu_real() hands the driver's own entry points to vmm.c; gl_cu_bind_driver() binds
 *   them from the driver library when the application has not looked them up yet.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn real_dlsym;

static dlsym_fn resolve_real_dlsym(void) {
  dlsym_fn d = real_dlsym;
  if (!d) {
    static const char *versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    for (unsigned i = 0; i < sizeof versions / sizeof versions[0] && !d; i++)
      d = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    real_dlsym = d;
  }
  return d;
}

GL_HIDDEN void *gl_next_sym(const char *name) {
  dlsym_fn d = resolve_real_dlsym();
  return d ? d(RTLD_NEXT, name) : NULL;
}

/* --- CUDA driver types we need (our own minimal declarations) --- */
typedef int CUresult;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_NOT_READY 600
#define CU_EVENT_DISABLE_TIMING 0x2u
#define CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 0x2ull

typedef struct cu_launch_config { /* CUlaunchConfig */
  unsigned grid[3], block[3], shared_mem;
  void *stream;
  void *attrs;
  unsigned num_attrs;
} cu_launch_config;
_Static_assert(__builtin_offsetof(cu_launch_config, stream) == 32, "CUlaunchConfig.hStream");

typedef CUresult (*launch_kernel_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                                     unsigned, unsigned, void *, void **, void **);
typedef CUresult (*launch_kernel_ex_fn)(const cu_launch_config *, void *, void **, void **);
typedef CUresult (*graph_launch_fn)(void *, void *);
typedef CUresult (*gpa_v1_fn)(const char *, void **, int, unsigned long long);
typedef CUresult (*gpa_v2_fn)(const char *, void **, int, unsigned long long, int *);
typedef CUresult (*event_create_fn)(void **, unsigned);
typedef CUresult (*event_record_fn)(void *, void *);
typedef CUresult (*event_query_fn)(void *);
typedef CUresult (*ctx_get_fn)(void **);
typedef CUresult (*ctx_push_fn)(void *);
typedef CUresult (*ctx_pop_fn)(void **);

static void *_Atomic real_fn[GL_CU_COUNT];

static void *get_real(enum gl_cu_slot s) { return atomic_load_explicit(&real_fn[s], memory_order_acquire); }
void *gl_cu_real(enum gl_cu_slot s) { return get_real(s); }

/* --- launch wrappers --- */

#define LAUNCH_WRAPPER(name, slot, label)                                                         \
  static CUresult name(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, \
                       unsigned bz, unsigned shm, void *stream, void **params, void **extra) {   \
    gl_offline_hold(label);                                                                       \
    launch_kernel_fn real = (launch_kernel_fn)get_real(slot);                                     \
    if (!real)                                                                                    \
      return 3; /* CUDA_ERROR_NOT_INITIALIZED */                                                  \
    CUresult rc = real(f, gx, gy, gz, bx, by, bz, shm, stream, params, extra);                    \
    if (rc == CUDA_SUCCESS)                                                                       \
      gl_online_launched(stream, 0);                                                              \
    return rc;                                                                                    \
  }
LAUNCH_WRAPPER(w_launch_kernel, GL_CU_LK, "cuLaunchKernel")
LAUNCH_WRAPPER(w_launch_kernel_ptsz, GL_CU_LK_PTSZ, "cuLaunchKernel_ptsz")

#define LAUNCH_EX_WRAPPER(name, slot, label)                                                      \
  static CUresult name(const cu_launch_config *cfg, void *f, void **params, void **extra) {       \
    gl_offline_hold(label);                                                                       \
    launch_kernel_ex_fn real = (launch_kernel_ex_fn)get_real(slot);                               \
    if (!real)                                                                                    \
      return 3;                                                                                   \
    CUresult rc = real(cfg, f, params, extra);                                                    \
    if (rc == CUDA_SUCCESS)                                                                       \
      gl_online_launched(cfg ? cfg->stream : NULL, 0);                                            \
    return rc;                                                                                    \
  }
LAUNCH_EX_WRAPPER(w_launch_kernel_ex, GL_CU_LKEX, "cuLaunchKernelEx")
LAUNCH_EX_WRAPPER(w_launch_kernel_ex_ptsz, GL_CU_LKEX_PTSZ, "cuLaunchKernelEx_ptsz")

#define GRAPH_WRAPPER(name, slot, label)                                                          \
  static CUresult name(void *exec, void *stream) {                                                \
    gl_offline_hold(label);                                                                       \
    graph_launch_fn real = (graph_launch_fn)get_real(slot);                                       \
    if (!real)                                                                                    \
      return 3;                                                                                   \
    CUresult rc = real(exec, stream);                                                             \
    if (rc == CUDA_SUCCESS)                                                                       \
      gl_online_launched(stream, 1);                                                              \
    return rc;                                                                                    \
  }
GRAPH_WRAPPER(w_graph_launch, GL_CU_GL, "cuGraphLaunch")
GRAPH_WRAPPER(w_graph_launch_ptsz, GL_CU_GL_PTSZ, "cuGraphLaunch_ptsz")

static void *wrap_proc(const char *symbol, void *real, unsigned long long flags, int version);

static CUresult w_gpa_v1(const char *symbol, void **pfn, int version, unsigned long long flags) {
  gpa_v1_fn real = (gpa_v1_fn)get_real(GL_CU_GPA1);
  if (!real)
    return 3;
  CUresult rc = real(symbol, pfn, version, flags);
  if (rc == CUDA_SUCCESS && pfn && *pfn && symbol)
    *pfn = wrap_proc(symbol, *pfn, flags, version);
  return rc;
}

static CUresult w_gpa_v2(const char *symbol, void **pfn, int version, unsigned long long flags,
                         int *status) {
  gpa_v2_fn real = (gpa_v2_fn)get_real(GL_CU_GPA2);
  if (!real)
    return 3;
  CUresult rc = real(symbol, pfn, version, flags, status);
  if (rc == CUDA_SUCCESS && pfn && *pfn && symbol)
    *pfn = wrap_proc(symbol, *pfn, flags, version);
  return rc;
}

static void *remember(enum gl_cu_slot s, void *real, void *wrapper) {
  void *expected = NULL;
  if (!atomic_compare_exchange_strong(&real_fn[s], &expected, real) && expected != real) {
    /* A second, different implementation (e.g. another libcuda): keep the first. */
    gl_log(2, "CUDA entry point slot %d already bound; not wrapping a second one", (int)s);
    return real;
  }
  return wrapper;
}

/* Offline processes only: the VMM entry points (their pages are what RECLAIM releases). */
static void *wrap_vmm(const char *symbol, void *real) {
  if (gl_cfg.role != GL_ROLE_OFF || !real)
    return NULL;
  enum gl_cu_slot s;
  void *wrapper = gl_vmm_wrapper(symbol, &s);
  return wrapper ? remember(s, real, wrapper) : NULL;
}

/* cuGetProcAddress names carry no _ptsz / _v2 suffix; the flags pick the variant. */
static void *wrap_proc(const char *symbol, void *real, unsigned long long flags, int version) {
  int ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  if (strcmp(symbol, "cuLaunchKernel") == 0)
    return ptds ? remember(GL_CU_LK_PTSZ, real, (void *)w_launch_kernel_ptsz)
                : remember(GL_CU_LK, real, (void *)w_launch_kernel);
  if (strcmp(symbol, "cuLaunchKernelEx") == 0)
    return ptds ? remember(GL_CU_LKEX_PTSZ, real, (void *)w_launch_kernel_ex_ptsz)
                : remember(GL_CU_LKEX, real, (void *)w_launch_kernel_ex);
  if (strcmp(symbol, "cuGraphLaunch") == 0)
    return ptds ? remember(GL_CU_GL_PTSZ, real, (void *)w_graph_launch_ptsz)
                : remember(GL_CU_GL, real, (void *)w_graph_launch);
  if (strcmp(symbol, "cuGetProcAddress") == 0)
    return version >= 12000 ? remember(GL_CU_GPA2, real, (void *)w_gpa_v2)
                            : remember(GL_CU_GPA1, real, (void *)w_gpa_v1);
  void *w = wrap_vmm(symbol, real);
  return w ? w : real;
}

static void bind_helpers(dlsym_fn d, void *handle) {
  static const struct {
    enum gl_cu_slot s;
    const char *name;
  } helpers[] = {{GL_CU_EV_CREATE, "cuEventCreate"},     {GL_CU_EV_RECORD, "cuEventRecord"},
                 {GL_CU_EV_QUERY, "cuEventQuery"},       {GL_CU_CTX_GET, "cuCtxGetCurrent"},
                 {GL_CU_CTX_PUSH, "cuCtxPushCurrent_v2"}, {GL_CU_CTX_POP, "cuCtxPopCurrent_v2"},
                 /* RECLAIM calls these itself, whether or not the application looked them up */
                 {GL_CU_MEM_CREATE, "cuMemCreate"},      {GL_CU_MEM_MAP, "cuMemMap"},
                 {GL_CU_MEM_UNMAP, "cuMemUnmap"},        {GL_CU_MEM_RELEASE, "cuMemRelease"},
                 {GL_CU_MEM_SET_ACCESS, "cuMemSetAccess"},
                 /* the KV-cache allocator's own calls (vmm.c) */
                 {GL_CU_MEM_ADDR_RESERVE, "cuMemAddressReserve"},
                 {GL_CU_MEM_ADDR_FREE, "cuMemAddressFree"},
                 {GL_CU_MEM_GRANULARITY, "cuMemGetAllocationGranularity"},
                 {GL_CU_DEVICE_GET, "cuDeviceGet"}};
  for (unsigned i = 0; i < sizeof helpers / sizeof helpers[0]; i++) {
    if (get_real(helpers[i].s))
      continue;
    void *p = d(handle, helpers[i].name);
    if (p)
      atomic_store(&real_fn[helpers[i].s], p);
  }
}

/* Bind the helper slots from the driver library itself (the KV-cache allocator may run
 * before the application looked anything up through us): GLEANER_LIBCUDA, default
 * libcuda.so.1, taken from the process if loaded, else loaded. Returns -1 if not found. */
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static int driver_found;
static void bind_driver_once(void) {
  const char *path = getenv(GLEANER_NODE_ENV_LIBCUDA);
  if (!path || !*path)
    path = GLEANER_NODE_DEFAULT_LIBCUDA;
  void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (!h)
    h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  dlsym_fn d = resolve_real_dlsym();
  if (!h || !d) {
    gl_log(1, "cannot load the CUDA driver %s for the KV-cache allocator: %s", path,
           h ? "no dlsym" : dlerror());
    return;
  }
  bind_helpers(d, h);
  driver_found = 1; /* the handle stays open for the life of the process */
}

int gl_cu_bind_driver(void) {
  pthread_once(&driver_once, bind_driver_once);
  return driver_found ? 0 : -1;
}

static void *wrap_dlsym(dlsym_fn d, void *handle, const char *symbol) {
  static const struct {
    const char *name;
    enum gl_cu_slot s;
    void *wrapper;
  } table[] = {
      {"cuGetProcAddress", GL_CU_GPA1, (void *)w_gpa_v1},
      {"cuGetProcAddress_v2", GL_CU_GPA2, (void *)w_gpa_v2},
      {"cuLaunchKernel", GL_CU_LK, (void *)w_launch_kernel},
      {"cuLaunchKernel_ptsz", GL_CU_LK_PTSZ, (void *)w_launch_kernel_ptsz},
      {"cuLaunchKernelEx", GL_CU_LKEX, (void *)w_launch_kernel_ex},
      {"cuLaunchKernelEx_ptsz", GL_CU_LKEX_PTSZ, (void *)w_launch_kernel_ex_ptsz},
      {"cuGraphLaunch", GL_CU_GL, (void *)w_graph_launch},
      {"cuGraphLaunch_ptsz", GL_CU_GL_PTSZ, (void *)w_graph_launch_ptsz},
  };
  for (unsigned i = 0; i < sizeof table / sizeof table[0]; i++) {
    if (strcmp(symbol, table[i].name) != 0)
      continue;
    void *real = d(handle, symbol);
    if (!real)
      return NULL;
    if (table[i].s == GL_CU_GPA1 || table[i].s == GL_CU_GPA2)
      bind_helpers(d, handle);
    return remember(table[i].s, real, table[i].wrapper);
  }
  if (strncmp(symbol, "cuMem", 5) == 0) {
    void *real = d(handle, symbol);
    void *w = wrap_vmm(symbol, real);
    if (w) {
      bind_helpers(d, handle);
      return w;
    }
  }
  return NULL;
}

__attribute__((visibility("default"))) void *dlsym(void *handle, const char *symbol) {
  dlsym_fn d = resolve_real_dlsym();
  if (!d)
    return NULL;
  gl_ensure_init();
  const char *volatile name = symbol; /* declared nonnull, but callers do pass NULL */
  if (handle != RTLD_NEXT && name && name[0] == 'c' && name[1] == 'u' &&
      gl_cfg.role != GL_ROLE_NONE) {
    void *w = wrap_dlsym(d, handle, symbol);
    if (w)
      return w;
  }
  /* Tail position: compiled as a jump, so glibc attributes RTLD_NEXT to our caller. */
  return d(handle, symbol);
}

/* --- online busy tracking ------------------------------------------------------ */

#define MAX_STREAMS 64
#define RERECORD_NS 20000ull

typedef struct tracked_stream {
  void *stream, *ctx, *event;
  uint64_t last_launch_ns, recorded_ns;
  int pending; /* launches after the last record */
  int outstanding;
} tracked_stream;

static pthread_mutex_t trk_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t trk_cv = PTHREAD_COND_INITIALIZER;
static tracked_stream streams[MAX_STREAMS];
static int nstreams;
static int busy;             /* guarded by trk_mu */
static uint64_t last_idle_ns; /* guarded by trk_mu */
static int tracker_started;  /* guarded by trk_mu */
static uint64_t idle_quiet_ns;

static tracked_stream *stream_slot(void *stream) {
  for (int i = 0; i < nstreams; i++)
    if (streams[i].stream == stream)
      return &streams[i];
  if (nstreams < MAX_STREAMS) {
    memset(&streams[nstreams], 0, sizeof streams[0]);
    streams[nstreams].stream = stream;
    return &streams[nstreams++];
  }
  return NULL;
}

static int record(tracked_stream *t) {
  event_create_fn create = (event_create_fn)get_real(GL_CU_EV_CREATE);
  event_record_fn rec = (event_record_fn)get_real(GL_CU_EV_RECORD);
  if (!create || !rec)
    return -1;
  if (!t->event && create(&t->event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    t->event = NULL;
    return -1;
  }
  return rec(t->event, t->stream) == CUDA_SUCCESS ? 0 : -1;
}

static void *tracker_main(void *unused);

static void send_edge(uint8_t type, uint64_t now) {
  gl_online_edge e = {GL_GPU_ALL, 0, now, 0};
  gl_agent_send(type, &e, sizeof e, 1);
}

void gl_online_launched(void *stream, int is_graph) {
  if (gl_cfg.role != GL_ROLE_ON)
    return;
  uint64_t now = gl_now_ns();
  int became_busy = 0;
  uint64_t gap = 0;
  pthread_mutex_lock(&trk_mu);
  tracked_stream *t = stream_slot(stream);
  if (t) {
    ctx_get_fn get = (ctx_get_fn)get_real(GL_CU_CTX_GET);
    if (!t->ctx && get)
      get(&t->ctx);
    t->last_launch_ns = now;
    t->outstanding = 1;
    if (is_graph || !t->event || now - t->recorded_ns >= RERECORD_NS) {
      if (record(t) == 0) {
        t->recorded_ns = now;
        t->pending = 0;
      } else {
        t->pending = 1;
      }
    } else {
      t->pending = 1;
    }
  }
  if (!busy) {
    busy = 1;
    became_busy = 1;
    gap = last_idle_ns ? now - last_idle_ns : 0;
    /* The tracker is woken after the edge is out (below): woken here, it could take this
     * CPU before the offline gates hear of the edge. It rechecks `busy` under the lock. */
  }
  if (!tracker_started) {
    const char *q = getenv(GLEANER_NODE_ENV_IDLE_QUIET_US);
    idle_quiet_ns = (q && *q ? (uint64_t)strtoull(q, NULL, 10) : 2000ull) * 1000ull;
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 128 * 1024);
    tracker_started = pthread_create(&th, &attr, tracker_main, NULL) == 0 ? 1 : -1;
    pthread_attr_destroy(&attr);
  }
  pthread_mutex_unlock(&trk_mu);
  if (became_busy) {
    gl_agent_start();
    /* The offline gates close on this, without the agent; with a native gate loop the
     * segment carries the edge and its gap, and no frame goes. */
    if (!gl_fg_online_busy(now, gap && gap <= gl_cfg.max_gap_ns ? gap : 0)) {
      send_edge(GL_MSG_ONLINE_BUSY, now);
      if (gap && gap <= gl_cfg.max_gap_ns) {
        gl_decode_gap g = {GL_GPU_ALL, 0, now, gap};
        gl_agent_send(GL_MSG_DECODE_GAP, &g, sizeof g, 1);
      }
    }
    pthread_mutex_lock(&trk_mu);
    pthread_cond_signal(&trk_cv);
    pthread_mutex_unlock(&trk_mu);
  }
}

/* One stream drained? Called with trk_mu held. */
static int stream_done(tracked_stream *t, uint64_t now) {
  if (!t->outstanding)
    return 1;
  event_query_fn query = (event_query_fn)get_real(GL_CU_EV_QUERY);
  if (!t->event || !query)
    return now - t->last_launch_ns >= idle_quiet_ns ? (t->outstanding = 0, 1) : 0;
  CUresult q = query(t->event);
  if (q == CUDA_ERROR_NOT_READY)
    return 0;
  if (q != CUDA_SUCCESS) /* broken event: fall back to the quiet timer */
    return now - t->last_launch_ns >= idle_quiet_ns ? (t->outstanding = 0, 1) : 0;
  if (t->pending) {
    /* Launches after the last record: record now (this thread, the stream's context). */
    ctx_push_fn push = (ctx_push_fn)get_real(GL_CU_CTX_PUSH);
    ctx_pop_fn pop = (ctx_pop_fn)get_real(GL_CU_CTX_POP);
    int pushed = t->ctx && push && pop && push(t->ctx) == CUDA_SUCCESS;
    if (record(t) == 0) {
      t->recorded_ns = now;
      t->pending = 0;
    }
    if (pushed) {
      void *old;
      pop(&old);
    }
    if (t->pending) /* could not record: quiet timer */
      return now - t->last_launch_ns >= idle_quiet_ns ? (t->outstanding = 0, t->pending = 0, 1) : 0;
    return 0;
  }
  t->outstanding = 0;
  return 1;
}

static void *tracker_main(void *unused) {
  (void)unused;
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  pthread_mutex_lock(&trk_mu);
  for (;;) {
    while (!busy)
      pthread_cond_wait(&trk_cv, &trk_mu);
    uint64_t now = gl_now_ns();
    int all_done = 1;
    for (int i = 0; i < nstreams; i++)
      if (!stream_done(&streams[i], now))
        all_done = 0;
    if (all_done) {
      busy = 0;
      last_idle_ns = now;
      pthread_mutex_unlock(&trk_mu);
      if (!gl_fg_online_idle(now))
        send_edge(GL_MSG_ONLINE_IDLE, now);
      pthread_mutex_lock(&trk_mu);
      continue;
    }
    pthread_mutex_unlock(&trk_mu);
    struct timespec ts = {0, 50000}; /* 50 us polling while busy only */
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&trk_mu);
  }
  return NULL;
}
