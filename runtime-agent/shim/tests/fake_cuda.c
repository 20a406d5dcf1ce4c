/*
 * fake_cuda.c - a stand-in libcuda for the shim's tests (no GPU needed).
 *
 * Exports cuGetProcAddress / cuGetProcAddress_v2 and the entry points the shim
 * wraps or uses. A "kernel" occupies its stream for GLEANER_FAKE_KERNEL_US
 * (default 2000) microseconds after the launch; events complete when the work
 * queued before their record has; fake_cuda_launches counts real launches.
 *
 * Virtual memory management (cuMemCreate / cuMemMap / cuMemUnmap / cuMemRelease /
 * cuMemSetAccess) is modelled as tables: an allocation lives until it is released and no
 * longer mapped; cuMemMap refuses an address already mapped, cuMemUnmap one not mapped,
 * cuMemRelease an unknown or released handle (CUDA_ERROR_INVALID_VALUE = 1).
 * GLEANER_FAKE_UNMAP_FAIL=<va> makes cuMemUnmap of that address fail; fake_cuda_fail_map(va, n)
 * makes the next n cuMemMap calls at va fail.
 * GLEANER_FAKE_DEVICE_BYTES (or fake_cuda_set_device_bytes) bounds the bytes of live
 * allocations: cuMemCreate beyond it answers CUDA_ERROR_OUT_OF_MEMORY (2); an allocation's
 * bytes come back once it is released and unmapped. cuMemAddressReserve / cuMemAddressFree
 * hand out and take back address ranges (free refuses a range that still has a mapping);
 * cuMemSetAccess marks the mappings it covers; cuMemGetAllocationGranularity answers
 * GLEANER_FAKE_GRANULARITY (default 2 MiB); cuDeviceGet knows ordinals 0 and 1.
 * fake_cuda_vmm_state(), fake_cuda_vmm_counts() and fake_cuda_mapping() describe the tables.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define API __attribute__((visibility("default")))
typedef int CUresult;

API _Atomic long fake_cuda_launches;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  void *stream;
  uint64_t busy_until;
} streams[64];
static int nstreams;
static int ctx_token;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t *busy_slot(void *stream) {
  for (int i = 0; i < nstreams; i++)
    if (streams[i].stream == stream)
      return &streams[i].busy_until;
  if (nstreams == 64)
    return &streams[63].busy_until;
  streams[nstreams].stream = stream;
  streams[nstreams].busy_until = 0;
  return &streams[nstreams++].busy_until;
}

static CUresult launch_on(void *stream) {
  const char *us = getenv("GLEANER_FAKE_KERNEL_US");
  uint64_t dur = (us ? strtoull(us, NULL, 10) : 2000ull) * 1000ull;
  pthread_mutex_lock(&mu);
  uint64_t *b = busy_slot(stream);
  uint64_t start = *b > now_ns() ? *b : now_ns();
  *b = start + dur;
  pthread_mutex_unlock(&mu);
  atomic_fetch_add(&fake_cuda_launches, 1);
  return 0;
}

API CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                            unsigned bz, unsigned shm, void *stream, void **params, void **extra) {
  (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shm, (void)params,
      (void)extra;
  return launch_on(stream);
}
typedef struct {
  unsigned grid[3], block[3], shared_mem;
  void *stream;
  void *attrs;
  unsigned num_attrs;
} cfg_t;
API CUresult cuLaunchKernelEx(const cfg_t *cfg, void *f, void **params, void **extra) {
  (void)f, (void)params, (void)extra;
  return launch_on(cfg ? cfg->stream : NULL);
}
API CUresult cuGraphLaunch(void *exec, void *stream) {
  (void)exec;
  return launch_on(stream);
}

typedef struct {
  uint64_t done_at;
} fake_event;
API CUresult cuEventCreate(void **ev, unsigned flags) {
  (void)flags;
  *ev = calloc(1, sizeof(fake_event));
  return *ev ? 0 : 2;
}
API CUresult cuEventRecord(void *ev, void *stream) {
  pthread_mutex_lock(&mu);
  ((fake_event *)ev)->done_at = *busy_slot(stream);
  pthread_mutex_unlock(&mu);
  return 0;
}
API CUresult cuEventQuery(void *ev) { return now_ns() >= ((fake_event *)ev)->done_at ? 0 : 600; }
API CUresult cuCtxGetCurrent(void **ctx) {
  *ctx = &ctx_token;
  return 0;
}
API CUresult cuCtxPushCurrent_v2(void *ctx) { return ctx == &ctx_token ? 0 : 201; }
API CUresult cuCtxPopCurrent_v2(void **ctx) {
  *ctx = &ctx_token;
  return 0;
}

/* --- VMM --- */
#define VMM_MAX 8192
static struct {
  unsigned long long handle;
  size_t size;
  int released; /* the application (or the shim) released it */
  int maps;     /* live mappings */
} allocs[VMM_MAX];
static int nallocs;
static unsigned long long next_handle = 0x1000;
static struct {
  unsigned long long va, handle;
  size_t size;
  int access; /* cuMemSetAccess covered it */
} maps[VMM_MAX];
static int nmaps;
static struct {
  unsigned long long va;
  size_t size;
} reserved[256];
static int nreserved;
static unsigned long long next_va = 0x7e0000000000ull;
static size_t used_bytes; /* allocations not yet freed (released and unmapped) */
static size_t device_bytes; /* 0: unlimited */
static int device_bytes_set;

static int alloc_idx(unsigned long long h) {
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].handle == h)
      return i;
  return -1;
}

/* An allocation released and no longer mapped is freed: its bytes return to the device. */
static void reap(int a) {
  if (a < 0 || !allocs[a].released || allocs[a].maps > 0)
    return;
  used_bytes -= allocs[a].size;
  allocs[a] = allocs[--nallocs];
}

static size_t budget(void) {
  if (!device_bytes_set) {
    const char *b = getenv("GLEANER_FAKE_DEVICE_BYTES");
    device_bytes = b ? (size_t)strtoull(b, NULL, 0) : 0;
    device_bytes_set = 1;
  }
  return device_bytes;
}

/* Tests: change the device's memory (0: unlimited). */
API void fake_cuda_set_device_bytes(size_t bytes) {
  pthread_mutex_lock(&mu);
  device_bytes = bytes;
  device_bytes_set = 1;
  pthread_mutex_unlock(&mu);
}

API CUresult cuMemCreate(unsigned long long *handle, size_t size, const void *prop,
                         unsigned long long flags) {
  (void)prop, (void)flags;
  pthread_mutex_lock(&mu);
  if (nallocs == VMM_MAX || !handle || !size) {
    pthread_mutex_unlock(&mu);
    return 1; /* CUDA_ERROR_INVALID_VALUE */
  }
  size_t cap = budget();
  if (cap && used_bytes + size > cap) {
    pthread_mutex_unlock(&mu);
    return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
  }
  allocs[nallocs].handle = next_handle++;
  allocs[nallocs].size = size;
  allocs[nallocs].released = 0;
  allocs[nallocs].maps = 0;
  used_bytes += size;
  *handle = allocs[nallocs++].handle;
  pthread_mutex_unlock(&mu);
  return 0;
}
static unsigned long long map_fail_va;
static int map_fail_left;

/* Tests: the next `n` cuMemMap calls at `va` fail (CUDA_ERROR_INVALID_VALUE). */
API void fake_cuda_fail_map(unsigned long long va, int n) {
  pthread_mutex_lock(&mu);
  map_fail_va = va;
  map_fail_left = n;
  pthread_mutex_unlock(&mu);
}

API CUresult cuMemMap(unsigned long long va, size_t size, size_t offset, unsigned long long h,
                      unsigned long long flags) {
  (void)offset, (void)flags;
  pthread_mutex_lock(&mu);
  if (map_fail_left > 0 && va == map_fail_va) {
    map_fail_left--;
    pthread_mutex_unlock(&mu);
    return 1;
  }
  int a = alloc_idx(h);
  int bad = a < 0 || allocs[a].released || nmaps == VMM_MAX || size != allocs[a].size;
  for (int i = 0; i < nmaps && !bad; i++)
    if (va < maps[i].va + maps[i].size && maps[i].va < va + size)
      bad = 1;
  if (!bad) {
    maps[nmaps].va = va;
    maps[nmaps].handle = h;
    maps[nmaps].access = 0;
    maps[nmaps++].size = size;
    allocs[a].maps++;
  }
  pthread_mutex_unlock(&mu);
  return bad ? 1 : 0;
}
API CUresult cuMemUnmap(unsigned long long va, size_t size) {
  const char *fail = getenv("GLEANER_FAKE_UNMAP_FAIL");
  if (fail && strtoull(fail, NULL, 0) == va)
    return 1;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nmaps; i++) {
    if (maps[i].va == va && maps[i].size == size) {
      int a = alloc_idx(maps[i].handle);
      if (a >= 0)
        allocs[a].maps--;
      maps[i] = maps[--nmaps];
      reap(a);
      pthread_mutex_unlock(&mu);
      return 0;
    }
  }
  pthread_mutex_unlock(&mu);
  return 1;
}
API CUresult cuMemRelease(unsigned long long h) {
  pthread_mutex_lock(&mu);
  int a = alloc_idx(h);
  int bad = a < 0 || allocs[a].released;
  if (!bad) {
    allocs[a].released = 1;
    reap(a);
  }
  pthread_mutex_unlock(&mu);
  return bad ? 1 : 0;
}
/* Marks every mapping inside [va, va + size); fails when the range holds none. */
API CUresult cuMemSetAccess(unsigned long long va, size_t size, const void *desc, size_t count) {
  if (!count || !desc)
    return 1;
  pthread_mutex_lock(&mu);
  int n = 0;
  for (int i = 0; i < nmaps; i++)
    if (maps[i].va >= va && maps[i].va + maps[i].size <= va + size)
      maps[i].access = 1, n++;
  pthread_mutex_unlock(&mu);
  return n ? 0 : 1;
}
/* Addresses come from a private range, aligned as asked; freeing needs the exact range and
 * no mapping left inside it. */
API CUresult cuMemAddressReserve(unsigned long long *ptr, size_t size, size_t align,
                                 unsigned long long addr, unsigned long long flags) {
  (void)addr, (void)flags;
  if (!ptr || !size)
    return 1;
  pthread_mutex_lock(&mu);
  if (nreserved == 256) {
    pthread_mutex_unlock(&mu);
    return 2;
  }
  unsigned long long a = align ? align : (2u << 20);
  unsigned long long va = (next_va + a - 1) / a * a;
  next_va = va + size;
  reserved[nreserved].va = va;
  reserved[nreserved++].size = size;
  *ptr = va;
  pthread_mutex_unlock(&mu);
  return 0;
}
API CUresult cuMemAddressFree(unsigned long long ptr, size_t size) {
  pthread_mutex_lock(&mu);
  int r = -1;
  for (int i = 0; i < nreserved; i++)
    if (reserved[i].va == ptr && reserved[i].size == size)
      r = i;
  for (int i = 0; i < nmaps && r >= 0; i++)
    if (maps[i].va < ptr + size && ptr < maps[i].va + maps[i].size)
      r = -1;
  if (r >= 0)
    reserved[r] = reserved[--nreserved];
  pthread_mutex_unlock(&mu);
  return r >= 0 ? 0 : 1;
}
/* GLEANER_FAKE_GRANULARITY (default 2 MiB). */
API CUresult cuMemGetAllocationGranularity(size_t *gran, const void *prop, int option) {
  (void)option;
  if (!gran || !prop)
    return 1;
  const char *g = getenv("GLEANER_FAKE_GRANULARITY");
  *gran = g ? (size_t)strtoull(g, NULL, 0) : (2u << 20);
  return 0;
}
/* Two devices, ordinals 0 and 1; the CUdevice is the ordinal. */
API CUresult cuDeviceGet(int *dev, int ordinal) {
  if (!dev || ordinal < 0 || ordinal > 1)
    return 101; /* CUDA_ERROR_INVALID_DEVICE */
  *dev = ordinal;
  return 0;
}
/* "va:handle,..." of every mapping, then " live=<allocations neither released nor unmapped>". */
API void fake_cuda_vmm_state(char *out, size_t len) {
  pthread_mutex_lock(&mu);
  size_t off = 0;
  out[0] = 0;
  for (int i = 0; i < nmaps && off < len; i++)
    off += (size_t)snprintf(out + off, len - off, "%s0x%llx:0x%llx", i ? "," : "", maps[i].va,
                            maps[i].handle);
  int live = 0;
  for (int i = 0; i < nallocs; i++)
    live += !allocs[i].released || allocs[i].maps > 0;
  if (off < len)
    snprintf(out + off, len - off, " live=%d", live);
  pthread_mutex_unlock(&mu);
}
/* Counts for the tests: live allocations, mappings, reserved ranges, bytes in use. */
API void fake_cuda_vmm_counts(long *live, long *nmapped, long *nres, long *used) {
  pthread_mutex_lock(&mu);
  *live = nallocs;
  *nmapped = nmaps;
  *nres = nreserved;
  *used = (long)used_bytes;
  pthread_mutex_unlock(&mu);
}
/* The allocation mapped at `va` (0 if none) and whether its access was set. */
API unsigned long long fake_cuda_mapping(unsigned long long va, int *access) {
  pthread_mutex_lock(&mu);
  unsigned long long h = 0;
  *access = 0;
  for (int i = 0; i < nmaps; i++)
    if (maps[i].va == va)
      h = maps[i].handle, *access = maps[i].access;
  pthread_mutex_unlock(&mu);
  return h;
}

static void *lookup(const char *s, unsigned long long flags) {
  (void)flags;
  static const struct {
    const char *name;
    void *fn;
  } t[] = {{"cuLaunchKernel", (void *)cuLaunchKernel}, {"cuLaunchKernelEx", (void *)cuLaunchKernelEx},
           {"cuGraphLaunch", (void *)cuGraphLaunch},   {"cuEventCreate", (void *)cuEventCreate},
           {"cuEventRecord", (void *)cuEventRecord},   {"cuEventQuery", (void *)cuEventQuery},
           {"cuMemCreate", (void *)cuMemCreate},       {"cuMemMap", (void *)cuMemMap},
           {"cuMemUnmap", (void *)cuMemUnmap},         {"cuMemRelease", (void *)cuMemRelease},
           {"cuMemSetAccess", (void *)cuMemSetAccess}, {"cuCtxGetCurrent", (void *)cuCtxGetCurrent},
           {"cuMemAddressReserve", (void *)cuMemAddressReserve},
           {"cuMemAddressFree", (void *)cuMemAddressFree},
           {"cuMemGetAllocationGranularity", (void *)cuMemGetAllocationGranularity},
           {"cuDeviceGet", (void *)cuDeviceGet}};
  for (unsigned i = 0; i < sizeof t / sizeof t[0]; i++)
    if (strcmp(s, t[i].name) == 0)
      return t[i].fn;
  return NULL;
}
API CUresult cuGetProcAddress_v2(const char *s, void **pfn, int ver, unsigned long long flags, int *st) {
  (void)ver;
  *pfn = lookup(s, flags);
  if (st)
    *st = *pfn ? 0 : 1;
  return *pfn ? 0 : 500;
}
API CUresult cuGetProcAddress(const char *s, void **pfn, int ver, unsigned long long flags) {
  (void)ver;
  *pfn = lookup(s, flags);
  return *pfn ? 0 : 500;
}
