/*
 * vmm.c - CUDA virtual memory management in offline processes: page records, RECLAIM,
 * RESTORE, and the KV-cache allocator the framework hook uses (docs/shim.md).
 *
 * Contract:
 * - Offline processes: cuMemCreate / cuMemMap / cuMemUnmap / cuMemRelease / cuMemSetAccess
 *   are wrapped to record allocations (with their properties) and whole-allocation mappings
 *   (with the context current at the map). RECLAIM and RESTORE act on these records only;
 *   the calls themselves are unchanged.
 * - gl_reclaim_pages (RECLAIM; control thread; gate closed): per page, cuMemUnmap, map the
 *   shared quarantine allocation of that size and device with read/write access, release
 *   the page's allocation. The page is then quarantined. Stops at the first failure.
 * - gl_restore_pages (RESTORE; control thread; gate open or closed): per quarantined page,
 *   cuMemCreate with the page's recorded properties, cuMemUnmap the quarantine, cuMemMap the
 *   new allocation, cuMemSetAccess read/write. A failure undoes that page (the quarantine
 *   mapped again) and stops; only a quarantine that cannot be put back answers -2.
 * - The KV-cache allocator (gleaner_kv_*, include/gleaner_shim.h): per allocation, a VA
 *   range and one allocation per page, each page recorded exactly like an application's
 *   whole-allocation mapping so that RECLAIM and RESTORE act on it unchanged. Page-state and
 *   page-epoch (reclaim count) arrays per allocation and a generation counter let the
 *   framework hook see changes, including a page reclaimed and restored between two reads.
 * - Tables are bounded (VMM_MAX_RECORDS, KV_MAX_REGIONS) and guarded by vmm_mu; the launch
 *   hooks never touch them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "gleaner_shim.h"
#include "internal.h"

#define GL_API __attribute__((visibility("default")))

/* --- CUDA driver types we need (our own minimal declarations) --- */
typedef int CUresult;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CU_MEM_ACCESS_FLAGS_PROT_READWRITE 3
#define CU_MEM_ALLOCATION_TYPE_PINNED 1
#define CU_MEM_LOCATION_TYPE_DEVICE 1
#define CU_MEM_ALLOC_GRANULARITY_MINIMUM 0

typedef struct cu_mem_prop { /* CUmemAllocationProp */
  int type, requested_handle_types, location_type, location_id;
  void *win32_meta;
  unsigned char alloc_flags[8];
} cu_mem_prop;
_Static_assert(sizeof(cu_mem_prop) == 32, "CUmemAllocationProp");
typedef struct cu_access_desc { /* CUmemAccessDesc */
  int location_type, location_id, flags;
} cu_access_desc;

typedef unsigned long long cu_handle;
typedef CUresult (*mem_create_fn)(cu_handle *, size_t, const cu_mem_prop *, unsigned long long);
typedef CUresult (*mem_map_fn)(unsigned long long, size_t, size_t, cu_handle, unsigned long long);
typedef CUresult (*mem_unmap_fn)(unsigned long long, size_t);
typedef CUresult (*mem_release_fn)(cu_handle);
typedef CUresult (*mem_set_access_fn)(unsigned long long, size_t, const cu_access_desc *, size_t);
typedef CUresult (*addr_reserve_fn)(unsigned long long *, size_t, size_t, unsigned long long,
                                    unsigned long long);
typedef CUresult (*addr_free_fn)(unsigned long long, size_t);
typedef CUresult (*granularity_fn)(size_t *, const cu_mem_prop *, int);
typedef CUresult (*device_get_fn)(int *, int);
typedef CUresult (*ctx_get_fn)(void **);
typedef CUresult (*ctx_push_fn)(void *);
typedef CUresult (*ctx_pop_fn)(void **);

/* --- records --- */

typedef struct vmm_alloc { /* one cuMemCreate */
  cu_handle handle;
  size_t size;
  cu_mem_prop prop;
  unsigned long long kv_base; /* the KV allocation it backs a page of; 0: the application's */
  uint8_t app_released;  /* the application called cuMemRelease */
  uint8_t shim_released; /* the shim released it (RECLAIM): the application's release is a no-op */
  uint8_t shim_owned;    /* created by the shim (KV page, RESTORE): the shim releases it */
} vmm_alloc;
typedef struct vmm_map { /* one cuMemMap of a whole allocation */
  unsigned long long va;
  size_t size;
  cu_handle handle; /* the allocation mapped there now (the quarantine's when quarantined) */
  void *ctx;
  cu_mem_prop prop;    /* quarantined: the released allocation's properties (for RESTORE) */
  uint8_t quarantined; /* maps a quarantine page now */
  uint8_t broken;      /* a RESTORE could not put the quarantine back: not usable */
} vmm_map;
typedef struct quarantine_page {
  cu_handle handle;
  size_t size;
  int device;
} quarantine_page;

/* At most this many allocation and mapping records (512 GiB of 2 MiB pages). */
#define VMM_MAX_RECORDS (1u << 18)

static pthread_mutex_t vmm_mu = PTHREAD_MUTEX_INITIALIZER;
static vmm_alloc *vallocs;
static size_t nvallocs, cap_vallocs;
static vmm_map *vmaps;
static size_t nvmaps, cap_vmaps;
static quarantine_page quarantine[8];
static int nquarantine;

/* Room for `need` records in a table (vmm_mu held); -1 past the bound or out of memory. */
static int reserve_room(void **arr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap)
    return 0;
  if (need > VMM_MAX_RECORDS)
    return -1;
  size_t c = *cap ? *cap : 64;
  while (c < need)
    c *= 2;
  if (c > VMM_MAX_RECORDS)
    c = VMM_MAX_RECORDS;
  void *p = realloc(*arr, c * elem);
  if (!p)
    return -1;
  *arr = p;
  *cap = c;
  return 0;
}
#define ROOM_ALLOCS(n) reserve_room((void **)&vallocs, &cap_vallocs, (n), sizeof *vallocs)
#define ROOM_MAPS(n) reserve_room((void **)&vmaps, &cap_vmaps, (n), sizeof *vmaps)

static vmm_alloc *find_alloc(cu_handle h) {
  for (size_t i = 0; i < nvallocs; i++)
    if (vallocs[i].handle == h)
      return &vallocs[i];
  return NULL;
}

static vmm_map *find_map(unsigned long long va) {
  for (size_t i = 0; i < nvmaps; i++)
    if (vmaps[i].va == va)
      return &vmaps[i];
  return NULL;
}

/* Forget an allocation nobody can use any more: released (by the application, or by the
 * shim when the shim owns it) and mapped nowhere. An application allocation the shim
 * released stays recorded until the application releases it too (answered as a no-op). */
static void drop_alloc_if_dead(cu_handle h) {
  vmm_alloc *a = find_alloc(h);
  if (!a || !(a->app_released || (a->shim_owned && a->shim_released)))
    return;
  for (size_t i = 0; i < nvmaps; i++)
    if (vmaps[i].handle == h)
      return;
  *a = vallocs[--nvallocs];
}

/* --- KV allocations: regions sorted by base, page states, generation --- */

typedef struct kv_region {
  unsigned long long base;
  size_t size, page, npages;
  uint8_t *state;  /* per page: GLEANER_KV_PAGE_* */
  uint32_t *epoch; /* per page: how many times it was reclaimed (gleaner_kv_page_epochs) */
} kv_region;

#define KV_MAX_REGIONS 4096
static kv_region kv_regions[KV_MAX_REGIONS]; /* guarded by vmm_mu */
static size_t nkv;
static _Atomic uint64_t kv_gen;
static _Atomic size_t kv_page; /* the granularity-rounded page size, once known */

static kv_region *kv_find(unsigned long long va) {
  size_t lo = 0, hi = nkv;
  while (lo < hi) { /* first region with base > va */
    size_t mid = lo + (hi - lo) / 2;
    if (kv_regions[mid].base <= va)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0)
    return NULL;
  kv_region *r = &kv_regions[lo - 1];
  return va - r->base < r->size ? r : NULL;
}

/* Record a KV page's new state (a reclaim also bumps its epoch); 1 if `va` is a KV page. */
static int kv_set_state(unsigned long long va, uint8_t state) {
  kv_region *r = kv_find(va);
  if (!r)
    return 0;
  size_t p = (va - r->base) / r->page;
  r->state[p] = state;
  if (state == GLEANER_KV_PAGE_QUARANTINED)
    r->epoch[p]++;
  return 1;
}

/* --- wrappers of the application's VMM calls --- */

static CUresult w_mem_create(cu_handle *handle, size_t size, const cu_mem_prop *prop,
                             unsigned long long flags) {
  mem_create_fn real = (mem_create_fn)gl_cu_real(GL_CU_MEM_CREATE);
  if (!real)
    return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc = real(handle, size, prop, flags);
  if (rc == CUDA_SUCCESS && handle && prop) {
    pthread_mutex_lock(&vmm_mu);
    if (ROOM_ALLOCS(nvallocs + 1) == 0) {
      vmm_alloc *a = &vallocs[nvallocs++];
      memset(a, 0, sizeof *a);
      a->handle = *handle;
      a->size = size;
      a->prop = *prop;
    } else {
      gl_log(1, "VMM allocation table full: allocation 0x%llx not reclaimable", *handle);
    }
    pthread_mutex_unlock(&vmm_mu);
  }
  return rc;
}

static CUresult w_mem_map(unsigned long long va, size_t size, size_t offset, cu_handle h,
                          unsigned long long flags) {
  mem_map_fn real = (mem_map_fn)gl_cu_real(GL_CU_MEM_MAP);
  if (!real)
    return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc = real(va, size, offset, h, flags);
  if (rc == CUDA_SUCCESS && offset == 0) {
    void *ctx = NULL;
    ctx_get_fn get = (ctx_get_fn)gl_cu_real(GL_CU_CTX_GET);
    if (get)
      get(&ctx);
    pthread_mutex_lock(&vmm_mu);
    if (ROOM_MAPS(nvmaps + 1) == 0) {
      vmm_map *m = &vmaps[nvmaps++];
      memset(m, 0, sizeof *m);
      *m = (vmm_map){.va = va, .size = size, .handle = h, .ctx = ctx};
    } else {
      gl_log(1, "VMM mapping table full: page 0x%llx not reclaimable", va);
    }
    pthread_mutex_unlock(&vmm_mu);
  }
  return rc;
}

static CUresult w_mem_unmap(unsigned long long va, size_t size) {
  mem_unmap_fn real = (mem_unmap_fn)gl_cu_real(GL_CU_MEM_UNMAP);
  if (!real)
    return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc = real(va, size);
  if (rc == CUDA_SUCCESS) {
    pthread_mutex_lock(&vmm_mu);
    vmm_map *m = find_map(va);
    if (m) {
      cu_handle h = m->handle;
      *m = vmaps[--nvmaps];
      vmm_alloc *a = find_alloc(h);
      if (a && a->shim_owned && !a->shim_released) {
        /* A page RESTORE backed: the application never saw this allocation. */
        mem_release_fn release = (mem_release_fn)gl_cu_real(GL_CU_MEM_RELEASE);
        if (release && release(h) == CUDA_SUCCESS)
          a->shim_released = 1;
      }
      drop_alloc_if_dead(h);
    }
    pthread_mutex_unlock(&vmm_mu);
  }
  return rc;
}

static CUresult w_mem_release(cu_handle h) {
  mem_release_fn real = (mem_release_fn)gl_cu_real(GL_CU_MEM_RELEASE);
  if (!real)
    return CUDA_ERROR_NOT_INITIALIZED;
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
  mem_set_access_fn real = (mem_set_access_fn)gl_cu_real(GL_CU_MEM_SET_ACCESS);
  return real ? real(va, size, d, count) : CUDA_ERROR_NOT_INITIALIZED;
}

void *gl_vmm_wrapper(const char *symbol, enum gl_cu_slot *slot) {
  static const struct {
    const char *name;
    enum gl_cu_slot s;
    void *wrapper;
  } vmm[] = {{"cuMemCreate", GL_CU_MEM_CREATE, (void *)w_mem_create},
             {"cuMemMap", GL_CU_MEM_MAP, (void *)w_mem_map},
             {"cuMemUnmap", GL_CU_MEM_UNMAP, (void *)w_mem_unmap},
             {"cuMemRelease", GL_CU_MEM_RELEASE, (void *)w_mem_release},
             {"cuMemSetAccess", GL_CU_MEM_SET_ACCESS, (void *)w_mem_set_access}};
  for (unsigned i = 0; i < sizeof vmm / sizeof vmm[0]; i++) {
    if (strcmp(symbol, vmm[i].name) == 0) {
      *slot = vmm[i].s;
      return vmm[i].wrapper;
    }
  }
  return NULL;
}

/* --- RECLAIM and RESTORE (control thread) --- */

typedef struct vmm_fns {
  mem_create_fn create;
  mem_map_fn map;
  mem_unmap_fn unmap;
  mem_release_fn release;
  mem_set_access_fn access;
  ctx_push_fn push;
  ctx_pop_fn pop;
} vmm_fns;

static int load_fns(vmm_fns *f) {
  f->create = (mem_create_fn)gl_cu_real(GL_CU_MEM_CREATE);
  f->map = (mem_map_fn)gl_cu_real(GL_CU_MEM_MAP);
  f->unmap = (mem_unmap_fn)gl_cu_real(GL_CU_MEM_UNMAP);
  f->release = (mem_release_fn)gl_cu_real(GL_CU_MEM_RELEASE);
  f->access = (mem_set_access_fn)gl_cu_real(GL_CU_MEM_SET_ACCESS);
  f->push = (ctx_push_fn)gl_cu_real(GL_CU_CTX_PUSH);
  f->pop = (ctx_pop_fn)gl_cu_real(GL_CU_CTX_POP);
  return f->create && f->map && f->unmap && f->release && f->access ? 0 : -1;
}

static int push_ctx(const vmm_fns *f, void *ctx) {
  return ctx && f->push && f->pop && f->push(ctx) == CUDA_SUCCESS;
}

static void pop_ctx(const vmm_fns *f, int pushed) {
  void *old;
  if (pushed)
    f->pop(&old);
}

/* A quarantine allocation of `size` bytes on `prop`'s device (created once, shared). */
static CUresult quarantine_for(const vmm_fns *f, size_t size, const cu_mem_prop *prop,
                               cu_handle *out) {
  for (int i = 0; i < nquarantine; i++) {
    if (quarantine[i].size == size && quarantine[i].device == prop->location_id) {
      *out = quarantine[i].handle;
      return CUDA_SUCCESS;
    }
  }
  if (nquarantine == (int)(sizeof quarantine / sizeof quarantine[0]))
    return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = f->create(out, size, prop, 0);
  if (rc == CUDA_SUCCESS)
    quarantine[nquarantine++] = (quarantine_page){*out, size, prop->location_id};
  return rc;
}

static CUresult map_rw(const vmm_fns *f, const vmm_map *m, cu_handle h, int device) {
  CUresult cr = f->map(m->va, m->size, 0, h, 0);
  cu_access_desc d = {CU_MEM_LOCATION_TYPE_DEVICE, device, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  if (cr == CUDA_SUCCESS)
    cr = f->access(m->va, m->size, &d, 1);
  return cr;
}

/* RECLAIM: for each page (virtual address) unmap it, map the quarantine page there with
 * read/write access, and release the page's allocation. Stops at the first failure. */
int gl_reclaim_pages(const uint64_t *va, uint32_t n, uint32_t *released, int32_t *err) {
  vmm_fns f;
  *released = 0;
  *err = 0;
  if (load_fns(&f) != 0) {
    *err = ENOSYS; /* the process never used the VMM API through us */
    return -1;
  }
  pthread_mutex_lock(&vmm_mu);
  int rc = 0, kv_changed = 0;
  for (uint32_t i = 0; i < n && rc == 0; i++) {
    vmm_map *m = find_map(va[i]);
    vmm_alloc *a = m ? find_alloc(m->handle) : NULL;
    if (!m || !a || m->quarantined) {
      *err = ENOENT; /* not a page we saw mapped (or reclaimed already) */
      rc = -1;
      break;
    }
    int pushed = push_ctx(&f, m->ctx);
    cu_handle q = 0;
    CUresult cr = quarantine_for(&f, m->size, &a->prop, &q);
    if (cr == CUDA_SUCCESS)
      cr = f.unmap(m->va, m->size);
    if (cr == CUDA_SUCCESS) {
      /* From here the page is gone: remap the quarantine page so stray accesses of the
       * (gated) offline work land somewhere harmless. */
      cr = map_rw(&f, m, q, a->prop.location_id);
      m->quarantined = 1;
      m->prop = a->prop;
      kv_changed |= kv_set_state(m->va, GLEANER_KV_PAGE_QUARANTINED);
      cu_handle h = m->handle;
      m->handle = q;
      if (!a->app_released) {
        CUresult rr = f.release(h);
        if (rr == CUDA_SUCCESS)
          a->shim_released = 1;
        else if (cr == CUDA_SUCCESS)
          cr = rr;
      }
      drop_alloc_if_dead(h);
      if (cr == CUDA_SUCCESS)
        (*released)++;
    }
    pop_ctx(&f, pushed);
    if (cr != CUDA_SUCCESS) {
      *err = cr;
      rc = -1;
    }
  }
  if (kv_changed)
    atomic_fetch_add(&kv_gen, 1);
  pthread_mutex_unlock(&vmm_mu);
  return rc;
}

/* RESTORE one quarantined page (vmm_mu held). 0 on success; else the CUresult / errno in
 * `*err` and 1 if the page is still quarantined, 2 if its quarantine could not be put back. */
static int restore_one(const vmm_fns *f, vmm_map *m, int32_t *err) {
  if (ROOM_ALLOCS(nvallocs + 1) != 0) {
    *err = ENOMEM;
    return 1;
  }
  cu_handle q = m->handle, h = 0;
  int device = m->prop.location_id;
  CUresult cr = f->create(&h, m->size, &m->prop, 0);
  if (cr != CUDA_SUCCESS) {
    /* CUDA_ERROR_OUT_OF_MEMORY is 2, which is also ENOENT ("not quarantined: forget it" to
     * the agent): answer the errno for out of memory instead, so the agent retries later. */
    *err = cr == CUDA_ERROR_OUT_OF_MEMORY ? ENOMEM : cr;
    return 1;
  }
  cr = f->unmap(m->va, m->size);
  if (cr != CUDA_SUCCESS) { /* the quarantine is still there */
    f->release(h);
    *err = cr;
    return 1;
  }
  cr = map_rw(f, m, h, device);
  if (cr != CUDA_SUCCESS) {
    /* Put the quarantine back (after taking the new allocation off if it got mapped). */
    f->unmap(m->va, m->size);
    f->release(h);
    *err = cr;
    if (map_rw(f, m, q, device) != CUDA_SUCCESS) {
      m->broken = 1;
      return 2;
    }
    return 1;
  }
  m->handle = h;
  m->quarantined = 0;
  kv_region *r = kv_find(m->va);
  vmm_alloc *a = &vallocs[nvallocs++];
  memset(a, 0, sizeof *a);
  a->handle = h;
  a->size = m->size;
  a->prop = m->prop;
  a->kv_base = r ? r->base : 0;
  a->shim_owned = 1;
  return 0;
}

int gl_restore_pages(const uint64_t *va, uint32_t n, uint32_t *restored, int32_t *err) {
  vmm_fns f;
  *restored = 0;
  *err = 0;
  if (load_fns(&f) != 0) {
    *err = ENOSYS;
    return -1;
  }
  pthread_mutex_lock(&vmm_mu);
  int rc = 0, kv_changed = 0;
  for (uint32_t i = 0; i < n && rc == 0; i++) {
    vmm_map *m = find_map(va[i]);
    if (!m || !m->quarantined || m->broken) {
      *err = ENOENT; /* not a page we reclaimed */
      rc = -1;
      break;
    }
    int pushed = push_ctx(&f, m->ctx);
    int r = restore_one(&f, m, err);
    pop_ctx(&f, pushed);
    if (r == 0) {
      kv_changed |= kv_set_state(m->va, GLEANER_KV_PAGE_BACKED);
      (*restored)++;
    } else {
      rc = r == 2 ? -2 : -1;
    }
  }
  if (kv_changed)
    atomic_fetch_add(&kv_gen, 1);
  pthread_mutex_unlock(&vmm_mu);
  return rc;
}

/* --- the KV-cache allocator (exported) --- */

typedef struct kv_fns {
  vmm_fns v;
  addr_reserve_fn reserve;
  addr_free_fn addr_free;
  granularity_fn granularity;
  device_get_fn device_get;
  ctx_get_fn ctx_get;
} kv_fns;

static int load_kv_fns(kv_fns *f) {
  for (int attempt = 0; attempt < 2; attempt++) {
    int missing = load_fns(&f->v) != 0;
    f->reserve = (addr_reserve_fn)gl_cu_real(GL_CU_MEM_ADDR_RESERVE);
    f->addr_free = (addr_free_fn)gl_cu_real(GL_CU_MEM_ADDR_FREE);
    f->granularity = (granularity_fn)gl_cu_real(GL_CU_MEM_GRANULARITY);
    f->device_get = (device_get_fn)gl_cu_real(GL_CU_DEVICE_GET);
    f->ctx_get = (ctx_get_fn)gl_cu_real(GL_CU_CTX_GET);
    missing |= !f->reserve || !f->addr_free || !f->granularity;
    if (!missing)
      return 0;
    if (attempt == 0 && gl_cu_bind_driver() != 0)
      break;
  }
  return -1;
}

static size_t env_page_bytes(void) {
  const char *v = getenv(GLEANER_NODE_ENV_KV_PAGE_BYTES);
  if (v && *v) {
    char *end;
    unsigned long long x = strtoull(v, &end, 0);
    if (*end == '\0' && x > 0 && x <= (1ull << 40))
      return (size_t)x;
  }
  return (size_t)2 << 20;
}

GL_API size_t gleaner_kv_page_bytes(void) {
  size_t p = atomic_load(&kv_page);
  return p ? p : env_page_bytes();
}

GL_API uint64_t gleaner_kv_generation(void) { return atomic_load(&kv_gen); }

GL_API size_t gleaner_kv_pages(uint64_t *va, uint8_t *state, size_t cap) {
  size_t total = 0;
  pthread_mutex_lock(&vmm_mu);
  for (size_t i = 0; i < nkv; i++) {
    const kv_region *r = &kv_regions[i];
    for (size_t p = 0; p < r->npages; p++, total++) {
      if (total >= cap)
        continue;
      if (va)
        va[total] = r->base + p * r->page;
      if (state)
        state[total] = r->state[p];
    }
  }
  pthread_mutex_unlock(&vmm_mu);
  return total;
}

GL_API size_t gleaner_kv_page_epochs(uint32_t *epoch, size_t cap) {
  size_t total = 0;
  pthread_mutex_lock(&vmm_mu);
  for (size_t i = 0; i < nkv; i++) {
    const kv_region *r = &kv_regions[i];
    for (size_t p = 0; p < r->npages; p++, total++)
      if (epoch && total < cap)
        epoch[total] = r->epoch[p];
  }
  pthread_mutex_unlock(&vmm_mu);
  return total;
}

/* Undo a partial KV allocation: unmap and release what was made, free the addresses. */
static void kv_undo(const kv_fns *f, unsigned long long base, size_t page, const cu_handle *h,
                    size_t created, size_t mapped, size_t total) {
  for (size_t i = 0; i < mapped; i++)
    f->v.unmap(base + i * page, page);
  for (size_t i = 0; i < created; i++)
    f->v.release(h[i]);
  f->addr_free(base, total);
}

GL_API void *gleaner_kv_malloc(ssize_t size, int device, void *stream) {
  (void)stream; /* allocation is synchronous */
  if (size <= 0 || device < 0)
    return NULL;
  gl_ensure_init();
  if (gl_cfg.role == GL_ROLE_OFF)
    gl_agent_start(); /* RECLAIM needs the control thread */
  kv_fns f;
  if (load_kv_fns(&f) != 0) {
    gl_log(1, "KV allocation: the CUDA driver's VMM entry points are missing");
    return NULL;
  }
  int dev = device;
  CUresult cr = f.device_get ? f.device_get(&dev, device) : CUDA_SUCCESS;
  cu_mem_prop prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location_type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location_id = dev;
  size_t gran = 0;
  if (cr == CUDA_SUCCESS)
    cr = f.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (cr != CUDA_SUCCESS || gran == 0) {
    gl_log(1, "KV allocation on device %d: no allocation granularity (CUresult %d)", device, cr);
    return NULL;
  }
  size_t page = (env_page_bytes() + gran - 1) / gran * gran;
  atomic_store(&kv_page, page);
  size_t npages = ((size_t)size + page - 1) / page, total = npages * page;
  uint8_t *state = calloc(npages, 1);
  uint32_t *epoch = calloc(npages, sizeof *epoch);
  cu_handle *h = calloc(npages, sizeof *h);
  unsigned long long base = 0;
  cr = state && epoch && h ? f.reserve(&base, total, page, 0, 0) : CUDA_ERROR_INVALID_VALUE;
  if (cr != CUDA_SUCCESS) {
    gl_log(1, "KV allocation of %zu bytes on device %d: no address range (CUresult %d)", total,
           device, cr);
    free(state);
    free(epoch);
    free(h);
    return NULL;
  }
  void *ctx = NULL;
  if (f.ctx_get)
    f.ctx_get(&ctx);
  size_t created = 0, mapped = 0;
  for (; mapped < npages && cr == CUDA_SUCCESS; mapped++) {
    cr = f.v.create(&h[created], page, &prop, 0);
    if (cr != CUDA_SUCCESS)
      break;
    created++;
    cr = f.v.map(base + mapped * page, page, 0, h[mapped], 0);
    if (cr != CUDA_SUCCESS)
      break;
  }
  cu_access_desc d = {CU_MEM_LOCATION_TYPE_DEVICE, dev, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  if (cr == CUDA_SUCCESS)
    cr = f.v.access(base, total, &d, 1);
  if (cr != CUDA_SUCCESS) {
    gl_log(1, "KV allocation of %zu bytes on device %d failed after %zu of %zu pages "
              "(CUresult %d)", total, device, created, npages, cr);
    kv_undo(&f, base, page, h, created, mapped, total);
    free(state);
    free(epoch);
    free(h);
    return NULL;
  }
  pthread_mutex_lock(&vmm_mu);
  if (nkv == KV_MAX_REGIONS || ROOM_ALLOCS(nvallocs + npages) != 0 ||
      ROOM_MAPS(nvmaps + npages) != 0) {
    pthread_mutex_unlock(&vmm_mu);
    gl_log(1, "KV allocation of %zu bytes: page tables full", total);
    kv_undo(&f, base, page, h, npages, npages, total);
    free(state);
    free(epoch);
    free(h);
    return NULL;
  }
  for (size_t i = 0; i < npages; i++) {
    vmm_alloc *a = &vallocs[nvallocs++];
    memset(a, 0, sizeof *a);
    *a = (vmm_alloc){.handle = h[i], .size = page, .prop = prop, .kv_base = base, .shim_owned = 1};
    vmm_map *m = &vmaps[nvmaps++];
    memset(m, 0, sizeof *m);
    *m = (vmm_map){.va = base + i * page, .size = page, .handle = h[i], .ctx = ctx};
  }
  size_t at = nkv;
  while (at > 0 && kv_regions[at - 1].base > base)
    at--;
  memmove(&kv_regions[at + 1], &kv_regions[at], (nkv - at) * sizeof kv_regions[0]);
  kv_regions[at] = (kv_region){base, total, page, npages, state, epoch};
  nkv++;
  atomic_fetch_add(&kv_gen, 1);
  pthread_mutex_unlock(&vmm_mu);
  free(h);
  gl_log(2, "KV allocation: %zu page(s) of %zu bytes at 0x%llx on device %d", npages, page, base,
         device);
  return (void *)(uintptr_t)base;
}

GL_API void gleaner_kv_free(void *ptr, ssize_t size, int device, void *stream) {
  (void)size, (void)device, (void)stream; /* the recorded size is authoritative */
  if (!ptr)
    return;
  unsigned long long base = (uintptr_t)ptr;
  kv_fns f;
  pthread_mutex_lock(&vmm_mu);
  kv_region *r = kv_find(base);
  if (!r || r->base != base || load_kv_fns(&f) != 0) {
    pthread_mutex_unlock(&vmm_mu);
    gl_log(1, "gleaner_kv_free of %p: not a KV allocation; ignored", ptr);
    return;
  }
  kv_region gone = *r;
  size_t idx = (size_t)(r - kv_regions);
  memmove(&kv_regions[idx], &kv_regions[idx + 1], (nkv - idx - 1) * sizeof kv_regions[0]);
  nkv--;
  /* One pass over each table: CUDA calls for the pages of this allocation, records dropped. */
  unsigned failed = 0;
  size_t w = 0;
  for (size_t i = 0; i < nvmaps; i++) {
    const vmm_map *m = &vmaps[i];
    if (m->va - base >= gone.size) {
      vmaps[w++] = *m;
      continue;
    }
    failed += f.v.unmap(m->va, m->size) != CUDA_SUCCESS && !m->broken;
    if (!m->quarantined) /* the quarantine allocation is shared: never released here */
      failed += f.v.release(m->handle) != CUDA_SUCCESS;
  }
  nvmaps = w;
  w = 0;
  for (size_t i = 0; i < nvallocs; i++)
    if (vallocs[i].kv_base != base)
      vallocs[w++] = vallocs[i];
  nvallocs = w;
  CUresult cr = f.addr_free(base, gone.size);
  atomic_fetch_add(&kv_gen, 1);
  pthread_mutex_unlock(&vmm_mu);
  free(gone.state);
  free(gone.epoch);
  if (failed || cr != CUDA_SUCCESS)
    gl_log(1, "gleaner_kv_free of %p: %u unmap/release call(s) failed, address free CUresult %d",
           ptr, failed, cr);
}
