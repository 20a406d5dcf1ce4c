/*
 * cuda_hook.c - CUDA driver entry-point interposition and online busy tracking.
 *
 * Contract:
 * - dlsym() is interposed so that lookups of cuGetProcAddress(_v2) and of the
 *   launch entry points (cuLaunchKernel, cuLaunchKernelEx, cuGraphLaunch and
 *   their _ptsz variants) on libcuda's handle return our wrappers; the CUDA
 *   runtime (static or shared) finds every driver function that way. Lookups
 *   through RTLD_NEXT are forwarded as a sibling call so that glibc still sees
 *   the original caller (tests/shim checks this).
 * - cuGetProcAddress wrappers hand out the same launch wrappers.
 * - Offline: each launch wrapper first waits while the gate is closed
 *   (gl_offline_hold). Online: each successful launch marks its stream busy;
 *   one event per stream, re-recorded at most every 20 us (and on every graph
 *   launch), lets a tracker thread see completion; the first launch after idle
 *   sends ONLINE_BUSY (and DECODE_GAP, the idle gap before it), and the tracker
 *   sends ONLINE_IDLE once every tracked stream drained. Without the event
 *   entry points it falls back to "idle after GLEANER_IDLE_QUIET_US without a
 *   launch" (default 2000). Online sends never block.
 * - Offline: cuMemCreate/cuMemMap/cuMemUnmap/cuMemRelease/cuMemSetAccess are wrapped to
 *   record allocations and whole-allocation mappings; gl_reclaim_pages() (RECLAIM, on the
 *   control thread) unmaps pages, maps a shared quarantine allocation in their place and
 *   releases them (docs/shim.md, "Memory reclamation").
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

enum slot {
  S_LK, S_LK_PTSZ, S_LKEX, S_LKEX_PTSZ, S_GL, S_GL_PTSZ, S_GPA1, S_GPA2,
  S_EV_CREATE, S_EV_RECORD, S_EV_QUERY, S_CTX_GET, S_CTX_PUSH, S_CTX_POP,
  S_MEM_CREATE, S_MEM_MAP, S_MEM_UNMAP, S_MEM_RELEASE, S_MEM_SET_ACCESS, S_COUNT
};
static void *_Atomic real_fn[S_COUNT];

static void *get_real(enum slot s) { return atomic_load_explicit(&real_fn[s], memory_order_acquire); }

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
LAUNCH_WRAPPER(w_launch_kernel, S_LK, "cuLaunchKernel")
LAUNCH_WRAPPER(w_launch_kernel_ptsz, S_LK_PTSZ, "cuLaunchKernel_ptsz")

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
LAUNCH_EX_WRAPPER(w_launch_kernel_ex, S_LKEX, "cuLaunchKernelEx")
LAUNCH_EX_WRAPPER(w_launch_kernel_ex_ptsz, S_LKEX_PTSZ, "cuLaunchKernelEx_ptsz")

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
GRAPH_WRAPPER(w_graph_launch, S_GL, "cuGraphLaunch")
GRAPH_WRAPPER(w_graph_launch_ptsz, S_GL_PTSZ, "cuGraphLaunch_ptsz")

/* --- CUDA VMM: offline page records and the quarantine remap (RECLAIM) --- */

typedef struct cu_mem_prop { /* CUmemAllocationProp */
  int type, requested_handle_types, location_type, location_id;
  void *win32_meta;
  unsigned char alloc_flags[8];
} cu_mem_prop;
_Static_assert(sizeof(cu_mem_prop) == 32, "CUmemAllocationProp");
typedef struct cu_access_desc { /* CUmemAccessDesc */
  int location_type, location_id, flags;
} cu_access_desc;
#define CU_MEM_ACCESS_FLAGS_PROT_READWRITE 3
#define CUDA_ERROR_INVALID_VALUE 1

typedef unsigned long long cu_handle;
typedef CUresult (*mem_create_fn)(cu_handle *, size_t, const cu_mem_prop *, unsigned long long);
typedef CUresult (*mem_map_fn)(unsigned long long, size_t, size_t, cu_handle, unsigned long long);
typedef CUresult (*mem_unmap_fn)(unsigned long long, size_t);
typedef CUresult (*mem_release_fn)(cu_handle);
typedef CUresult (*mem_set_access_fn)(unsigned long long, size_t, const cu_access_desc *, size_t);

typedef struct vmm_alloc { /* one cuMemCreate */
  cu_handle handle;
  size_t size;
  cu_mem_prop prop;
  int app_released; /* the application called cuMemRelease */
  int shim_released; /* the shim released it (RECLAIM): the application's release is a no-op */
} vmm_alloc;
typedef struct vmm_map { /* one cuMemMap of a whole allocation */
  unsigned long long va;
  size_t size;
  cu_handle handle;
  void *ctx;
  int quarantined; /* maps a quarantine page now */
} vmm_map;
typedef struct quarantine_page {
  cu_handle handle;
  size_t size;
  int device;
} quarantine_page;

static pthread_mutex_t vmm_mu = PTHREAD_MUTEX_INITIALIZER;
static vmm_alloc *vallocs;
static size_t nvallocs, cap_vallocs;
static vmm_map *vmaps;
static size_t nvmaps, cap_vmaps;
static quarantine_page quarantine[8];
static int nquarantine;

static int grow(void **arr, size_t *cap, size_t n, size_t elem) {
  if (n < *cap)
    return 0;
  size_t c = *cap ? *cap * 2 : 64;
  void *p = realloc(*arr, c * elem);
  if (!p)
    return -1;
  *arr = p;
  *cap = c;
  return 0;
}

static vmm_alloc *find_alloc(cu_handle h) {
  for (size_t i = 0; i < nvallocs; i++)
    if (vallocs[i].handle == h)
      return &vallocs[i];
  return NULL;
}

static void drop_alloc_if_dead(cu_handle h) {
  vmm_alloc *a = find_alloc(h);
  if (!a || !(a->app_released || a->shim_released))
    return;
  for (size_t i = 0; i < nvmaps; i++)
    if (vmaps[i].handle == h)
      return;
  *a = vallocs[--nvallocs];
}

static CUresult w_mem_create(cu_handle *handle, size_t size, const cu_mem_prop *prop,
                             unsigned long long flags) {
  mem_create_fn real = (mem_create_fn)get_real(S_MEM_CREATE);
  if (!real)
    return 3;
  CUresult rc = real(handle, size, prop, flags);
  if (rc == CUDA_SUCCESS && handle && prop) {
    pthread_mutex_lock(&vmm_mu);
    if (grow((void **)&vallocs, &cap_vallocs, nvallocs, sizeof *vallocs) == 0) {
      vmm_alloc *a = &vallocs[nvallocs++];
      memset(a, 0, sizeof *a);
      a->handle = *handle;
      a->size = size;
      a->prop = *prop;
    }
    pthread_mutex_unlock(&vmm_mu);
  }
  return rc;
}

static CUresult w_mem_map(unsigned long long va, size_t size, size_t offset, cu_handle h,
                          unsigned long long flags) {
  mem_map_fn real = (mem_map_fn)get_real(S_MEM_MAP);
  if (!real)
    return 3;
  CUresult rc = real(va, size, offset, h, flags);
  if (rc == CUDA_SUCCESS && offset == 0) {
    void *ctx = NULL;
    ctx_get_fn get = (ctx_get_fn)get_real(S_CTX_GET);
    if (get)
      get(&ctx);
    pthread_mutex_lock(&vmm_mu);
    if (grow((void **)&vmaps, &cap_vmaps, nvmaps, sizeof *vmaps) == 0)
      vmaps[nvmaps++] = (vmm_map){va, size, h, ctx, 0};
    pthread_mutex_unlock(&vmm_mu);
  }
  return rc;
}

static CUresult w_mem_unmap(unsigned long long va, size_t size) {
  mem_unmap_fn real = (mem_unmap_fn)get_real(S_MEM_UNMAP);
  if (!real)
    return 3;
  CUresult rc = real(va, size);
  if (rc == CUDA_SUCCESS) {
    pthread_mutex_lock(&vmm_mu);
    for (size_t i = 0; i < nvmaps; i++) {
      if (vmaps[i].va == va) {
        cu_handle h = vmaps[i].handle;
        vmaps[i] = vmaps[--nvmaps];
        drop_alloc_if_dead(h);
        break;
      }
    }
    pthread_mutex_unlock(&vmm_mu);
  }
  return rc;
}

static CUresult w_mem_release(cu_handle h) {
  mem_release_fn real = (mem_release_fn)get_real(S_MEM_RELEASE);
  if (!real)
    return 3;
  pthread_mutex_lock(&vmm_mu);
  vmm_alloc *a = find_alloc(h);
  if (a && a->shim_released) { /* the shim gave it to online already */
    a->app_released = 1;
    drop_alloc_if_dead(h);
    pthread_mutex_unlock(&vmm_mu);
    return CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&vmm_mu);
  CUresult rc = real(h);
  if (rc == CUDA_SUCCESS) {
    pthread_mutex_lock(&vmm_mu);
    a = find_alloc(h);
    if (a) {
      a->app_released = 1;
      drop_alloc_if_dead(h);
    }
    pthread_mutex_unlock(&vmm_mu);
  }
  return rc;
}

static CUresult w_mem_set_access(unsigned long long va, size_t size, const cu_access_desc *d,
                                 size_t count) {
  mem_set_access_fn real = (mem_set_access_fn)get_real(S_MEM_SET_ACCESS);
  return real ? real(va, size, d, count) : 3;
}

/* A quarantine allocation of `size` bytes on `prop`'s device (created once, shared). */
static CUresult quarantine_for(size_t size, const cu_mem_prop *prop, cu_handle *out) {
  for (int i = 0; i < nquarantine; i++) {
    if (quarantine[i].size == size && quarantine[i].device == prop->location_id) {
      *out = quarantine[i].handle;
      return CUDA_SUCCESS;
    }
  }
  if (nquarantine == (int)(sizeof quarantine / sizeof quarantine[0]))
    return CUDA_ERROR_INVALID_VALUE;
  mem_create_fn create = (mem_create_fn)get_real(S_MEM_CREATE);
  if (!create)
    return 3;
  CUresult rc = create(out, size, prop, 0);
  if (rc == CUDA_SUCCESS)
    quarantine[nquarantine++] = (quarantine_page){*out, size, prop->location_id};
  return rc;
}

/* RECLAIM: for each page (virtual address) unmap it, map the quarantine page there with
 * read/write access, and release the page's allocation. Stops at the first failure. */
int gl_reclaim_pages(const uint64_t *va, uint32_t n, uint32_t *released, int32_t *err) {
  mem_map_fn map = (mem_map_fn)get_real(S_MEM_MAP);
  mem_unmap_fn unmap = (mem_unmap_fn)get_real(S_MEM_UNMAP);
  mem_release_fn release = (mem_release_fn)get_real(S_MEM_RELEASE);
  mem_set_access_fn access = (mem_set_access_fn)get_real(S_MEM_SET_ACCESS);
  ctx_push_fn push = (ctx_push_fn)get_real(S_CTX_PUSH);
  ctx_pop_fn pop = (ctx_pop_fn)get_real(S_CTX_POP);
  *released = 0;
  *err = 0;
  if (!map || !unmap || !release || !access) {
    *err = ENOSYS; /* the process never used the VMM API through us */
    return -1;
  }
  pthread_mutex_lock(&vmm_mu);
  int rc = 0;
  for (uint32_t i = 0; i < n && rc == 0; i++) {
    vmm_map *m = NULL;
    for (size_t j = 0; j < nvmaps; j++)
      if (vmaps[j].va == va[i])
        m = &vmaps[j];
    vmm_alloc *a = m ? find_alloc(m->handle) : NULL;
    if (!m || !a || m->quarantined) {
      *err = ENOENT; /* not a page we saw mapped (or reclaimed already) */
      rc = -1;
      break;
    }
    int pushed = m->ctx && push && pop && push(m->ctx) == CUDA_SUCCESS;
    cu_handle q = 0;
    CUresult cr = quarantine_for(m->size, &a->prop, &q);
    if (cr == CUDA_SUCCESS)
      cr = unmap(m->va, m->size);
    if (cr == CUDA_SUCCESS) {
      /* From here the page is gone: remap the quarantine page so stray accesses of the
       * (gated) offline work land somewhere harmless. */
      cr = map(m->va, m->size, 0, q, 0);
      cu_access_desc d = {1 /* device */, a->prop.location_id, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
      if (cr == CUDA_SUCCESS)
        cr = access(m->va, m->size, &d, 1);
      m->quarantined = 1;
      cu_handle h = m->handle;
      m->handle = q;
      if (!a->app_released) {
        CUresult rr = release(h);
        if (rr == CUDA_SUCCESS)
          a->shim_released = 1;
        else if (cr == CUDA_SUCCESS)
          cr = rr;
      }
      drop_alloc_if_dead(h);
      if (cr == CUDA_SUCCESS)
        (*released)++;
    }
    if (pushed) {
      void *old;
      pop(&old);
    }
    if (cr != CUDA_SUCCESS) {
      *err = cr;
      rc = -1;
    }
  }
  pthread_mutex_unlock(&vmm_mu);
  return rc;
}

static void *wrap_proc(const char *symbol, void *real, unsigned long long flags, int version);

static CUresult w_gpa_v1(const char *symbol, void **pfn, int version, unsigned long long flags) {
  gpa_v1_fn real = (gpa_v1_fn)get_real(S_GPA1);
  if (!real)
    return 3;
  CUresult rc = real(symbol, pfn, version, flags);
  if (rc == CUDA_SUCCESS && pfn && *pfn && symbol)
    *pfn = wrap_proc(symbol, *pfn, flags, version);
  return rc;
}

static CUresult w_gpa_v2(const char *symbol, void **pfn, int version, unsigned long long flags,
                         int *status) {
  gpa_v2_fn real = (gpa_v2_fn)get_real(S_GPA2);
  if (!real)
    return 3;
  CUresult rc = real(symbol, pfn, version, flags, status);
  if (rc == CUDA_SUCCESS && pfn && *pfn && symbol)
    *pfn = wrap_proc(symbol, *pfn, flags, version);
  return rc;
}

static void *remember(enum slot s, void *real, void *wrapper) {
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
  static const struct {
    const char *name;
    enum slot s;
    void *wrapper;
  } vmm[] = {{"cuMemCreate", S_MEM_CREATE, (void *)w_mem_create},
             {"cuMemMap", S_MEM_MAP, (void *)w_mem_map},
             {"cuMemUnmap", S_MEM_UNMAP, (void *)w_mem_unmap},
             {"cuMemRelease", S_MEM_RELEASE, (void *)w_mem_release},
             {"cuMemSetAccess", S_MEM_SET_ACCESS, (void *)w_mem_set_access}};
  if (gl_cfg.role != GL_ROLE_OFF || !real)
    return NULL;
  for (unsigned i = 0; i < sizeof vmm / sizeof vmm[0]; i++)
    if (strcmp(symbol, vmm[i].name) == 0)
      return remember(vmm[i].s, real, vmm[i].wrapper);
  return NULL;
}

/* cuGetProcAddress names carry no _ptsz / _v2 suffix; the flags pick the variant. */
static void *wrap_proc(const char *symbol, void *real, unsigned long long flags, int version) {
  int ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  if (strcmp(symbol, "cuLaunchKernel") == 0)
    return ptds ? remember(S_LK_PTSZ, real, (void *)w_launch_kernel_ptsz)
                : remember(S_LK, real, (void *)w_launch_kernel);
  if (strcmp(symbol, "cuLaunchKernelEx") == 0)
    return ptds ? remember(S_LKEX_PTSZ, real, (void *)w_launch_kernel_ex_ptsz)
                : remember(S_LKEX, real, (void *)w_launch_kernel_ex);
  if (strcmp(symbol, "cuGraphLaunch") == 0)
    return ptds ? remember(S_GL_PTSZ, real, (void *)w_graph_launch_ptsz)
                : remember(S_GL, real, (void *)w_graph_launch);
  if (strcmp(symbol, "cuGetProcAddress") == 0)
    return version >= 12000 ? remember(S_GPA2, real, (void *)w_gpa_v2)
                            : remember(S_GPA1, real, (void *)w_gpa_v1);
  void *w = wrap_vmm(symbol, real);
  return w ? w : real;
}

static void bind_helpers(dlsym_fn d, void *handle) {
  static const struct {
    enum slot s;
    const char *name;
  } helpers[] = {{S_EV_CREATE, "cuEventCreate"},     {S_EV_RECORD, "cuEventRecord"},
                 {S_EV_QUERY, "cuEventQuery"},       {S_CTX_GET, "cuCtxGetCurrent"},
                 {S_CTX_PUSH, "cuCtxPushCurrent_v2"}, {S_CTX_POP, "cuCtxPopCurrent_v2"},
                 /* RECLAIM calls these itself, whether or not the application looked them up */
                 {S_MEM_CREATE, "cuMemCreate"},      {S_MEM_MAP, "cuMemMap"},
                 {S_MEM_UNMAP, "cuMemUnmap"},        {S_MEM_RELEASE, "cuMemRelease"},
                 {S_MEM_SET_ACCESS, "cuMemSetAccess"}};
  for (unsigned i = 0; i < sizeof helpers / sizeof helpers[0]; i++) {
    if (get_real(helpers[i].s))
      continue;
    void *p = d(handle, helpers[i].name);
    if (p)
      atomic_store(&real_fn[helpers[i].s], p);
  }
}

static void *wrap_dlsym(dlsym_fn d, void *handle, const char *symbol) {
  static const struct {
    const char *name;
    enum slot s;
    void *wrapper;
  } table[] = {
      {"cuGetProcAddress", S_GPA1, (void *)w_gpa_v1},
      {"cuGetProcAddress_v2", S_GPA2, (void *)w_gpa_v2},
      {"cuLaunchKernel", S_LK, (void *)w_launch_kernel},
      {"cuLaunchKernel_ptsz", S_LK_PTSZ, (void *)w_launch_kernel_ptsz},
      {"cuLaunchKernelEx", S_LKEX, (void *)w_launch_kernel_ex},
      {"cuLaunchKernelEx_ptsz", S_LKEX_PTSZ, (void *)w_launch_kernel_ex_ptsz},
      {"cuGraphLaunch", S_GL, (void *)w_graph_launch},
      {"cuGraphLaunch_ptsz", S_GL_PTSZ, (void *)w_graph_launch_ptsz},
  };
  for (unsigned i = 0; i < sizeof table / sizeof table[0]; i++) {
    if (strcmp(symbol, table[i].name) != 0)
      continue;
    void *real = d(handle, symbol);
    if (!real)
      return NULL;
    if (table[i].s == S_GPA1 || table[i].s == S_GPA2)
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
  event_create_fn create = (event_create_fn)get_real(S_EV_CREATE);
  event_record_fn rec = (event_record_fn)get_real(S_EV_RECORD);
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
    ctx_get_fn get = (ctx_get_fn)get_real(S_CTX_GET);
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
    pthread_cond_signal(&trk_cv);
  }
  if (!tracker_started) {
    const char *q = getenv("GLEANER_IDLE_QUIET_US");
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
    send_edge(GL_MSG_ONLINE_BUSY, now);
    if (gap && gap <= gl_cfg.max_gap_ns) {
      gl_decode_gap g = {GL_GPU_ALL, 0, now, gap};
      gl_agent_send(GL_MSG_DECODE_GAP, &g, sizeof g, 1);
    }
  }
}

/* One stream drained? Called with trk_mu held. */
static int stream_done(tracked_stream *t, uint64_t now) {
  if (!t->outstanding)
    return 1;
  event_query_fn query = (event_query_fn)get_real(S_EV_QUERY);
  if (!t->event || !query)
    return now - t->last_launch_ns >= idle_quiet_ns ? (t->outstanding = 0, 1) : 0;
  CUresult q = query(t->event);
  if (q == CUDA_ERROR_NOT_READY)
    return 0;
  if (q != CUDA_SUCCESS) /* broken event: fall back to the quiet timer */
    return now - t->last_launch_ns >= idle_quiet_ns ? (t->outstanding = 0, 1) : 0;
  if (t->pending) {
    /* Launches after the last record: record now (this thread, the stream's context). */
    ctx_push_fn push = (ctx_push_fn)get_real(S_CTX_PUSH);
    ctx_pop_fn pop = (ctx_pop_fn)get_real(S_CTX_POP);
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
