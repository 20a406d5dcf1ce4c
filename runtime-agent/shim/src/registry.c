/*
 * registry.c - the RM objects of this process that the gate needs.
 *
 * Tracks clients (with the nvidiactl fd they were created on), devices and
 * subdevices (for the GPU they stand for), channel groups, GPFIFO channels and
 * local video memory objects, keyed by (hClient, hObject). An open-addressing
 * hash table with backward-shift deletion; fixed capacity, no malloc, so it is
 * safe inside any hooked call. All functions expect gl_reg_lock() held except
 * the ctl-fd bitmap helpers, which are lock-free.
 */
#include <stdatomic.h>
#include <string.h>

#include "internal.h"

#define REG_CAP 16384u /* power of two */
#define FD_BITS 65536

static gl_obj table[REG_CAP];
/* Which slots are used, one bit each (2 KiB): every walk (gl_reg_each, a free, an fd's
 * close) visits only those, so it reads a few cache lines, not the whole 768 KiB table
 * (tens of microseconds on a CPU that just woke, on the close path). Kept with
 * table[i].used by set_used. */
static uint64_t used_bits[REG_CAP / 64];
static unsigned count;
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t ctl_fd_bits[FD_BITS / 64];

void gl_reg_lock(void) { pthread_mutex_lock(&reg_mu); }
void gl_reg_unlock(void) { pthread_mutex_unlock(&reg_mu); }

int gl_reg_is_ctl_fd(int fd) {
  if (fd < 0 || fd >= FD_BITS)
    return 0;
  return (int)((atomic_load_explicit(&ctl_fd_bits[fd / 64], memory_order_relaxed) >> (fd % 64)) & 1u);
}

void gl_reg_mark_ctl_fd(int fd, int is_ctl) {
  if (fd < 0 || fd >= FD_BITS)
    return;
  uint64_t bit = (uint64_t)1 << (fd % 64);
  if (is_ctl)
    atomic_fetch_or(&ctl_fd_bits[fd / 64], bit);
  else
    atomic_fetch_and(&ctl_fd_bits[fd / 64], ~bit);
}

static void set_used(unsigned i, int used) {
  table[i].used = (uint8_t)(used != 0);
  if (used)
    used_bits[i / 64] |= (uint64_t)1 << (i % 64);
  else
    used_bits[i / 64] &= ~((uint64_t)1 << (i % 64));
}

/* The first used slot at or after i (REG_CAP: none). Read afresh at every step of a walk,
 * it sees what the walk removed or shifted so far, as a check of table[i].used would. */
static unsigned next_used(unsigned i) {
  while (i < REG_CAP) {
    uint64_t w = used_bits[i / 64] >> (i % 64);
    if (w)
      return i + (unsigned)__builtin_ctzll(w);
    i = (i / 64 + 1) * 64;
  }
  return REG_CAP;
}

#define FOR_USED(i) for (unsigned i = next_used(0); i < REG_CAP; i = next_used(i + 1))

static unsigned slot_of(uint32_t c, uint32_t o) {
  uint64_t h = ((uint64_t)c << 32 | o) * 0x9E3779B97F4A7C15ull;
  return (unsigned)(h >> 40) & (REG_CAP - 1);
}

gl_obj *gl_reg_find(uint32_t c, uint32_t o) {
  for (unsigned i = slot_of(c, o), n = 0; n < REG_CAP; i = (i + 1) & (REG_CAP - 1), n++) {
    if (!table[i].used)
      return NULL;
    if (table[i].h_client == c && table[i].h_object == o)
      return &table[i];
  }
  return NULL;
}

static gl_obj *insert(uint32_t c, uint32_t o) {
  gl_obj *e = gl_reg_find(c, o);
  if (e)
    return e;
  if (count >= REG_CAP - REG_CAP / 8)
    return NULL; /* full: keep a load factor that ends probes */
  unsigned i = slot_of(c, o);
  while (table[i].used)
    i = (i + 1) & (REG_CAP - 1);
  memset(&table[i], 0, sizeof table[i]);
  set_used(i, 1);
  table[i].h_client = c;
  table[i].h_object = o;
  count++;
  return &table[i];
}

static void remove_at(unsigned i) {
  set_used(i, 0);
  count--;
  unsigned j = i;
  for (;;) { /* backward-shift: keep every later probe chain reachable */
    j = (j + 1) & (REG_CAP - 1);
    if (!table[j].used)
      return;
    unsigned home = slot_of(table[j].h_client, table[j].h_object);
    int between = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
    if (between)
      continue;
    table[i] = table[j];
    set_used(i, 1);
    set_used(j, 0);
    i = j;
  }
}

static int tracked_class(uint32_t cls) {
  return rm_is_root_class(cls) || cls == RM_CLASS_DEVICE || cls == RM_CLASS_SUBDEVICE ||
         cls == RM_CLASS_CHANNEL_GROUP || rm_is_gpfifo_class(cls) ||
         cls == RM_CLASS_MEMORY_LOCAL_USER;
}

const gl_obj *gl_reg_alloc(int fd, const rm_alloc_view *v, const void *params) {
  if (!tracked_class(v->h_class))
    return NULL;
  uint32_t client = rm_is_root_class(v->h_class) ? v->h_new : v->h_root;
  gl_obj *e = insert(client, v->h_new);
  if (!e) {
    gl_log(1, "registry full: handle 0x%x of class 0x%x not tracked", v->h_new, v->h_class);
    return NULL;
  }
  e->h_parent = v->h_parent;
  e->h_class = v->h_class;
  e->gpu = GL_GPU_UNKNOWN;
  e->fd = fd;
  const gl_obj *parent = rm_is_root_class(v->h_class) ? NULL : gl_reg_find(client, v->h_parent);
  if (parent) {
    e->gpu = parent->gpu;
    e->fd = parent->fd;
  } else if (!rm_is_root_class(v->h_class)) {
    const gl_obj *cl = gl_reg_find(client, client);
    if (cl)
      e->fd = cl->fd;
  }
  if (v->h_class == RM_CLASS_DEVICE && params && v->params_size >= sizeof(rm_device_alloc))
    e->gpu = ((const rm_device_alloc *)params)->device_id;
  if (v->h_class == RM_CLASS_CHANNEL_GROUP) {
    e->kind = GL_KIND_TSG;
    if (params && v->params_size >= sizeof(rm_tsg_alloc))
      e->engine_type = ((const rm_tsg_alloc *)params)->engine_type;
  } else if (rm_is_gpfifo_class(v->h_class)) {
    e->kind = GL_KIND_CHANNEL;
    if (parent && parent->kind == GL_KIND_TSG)
      e->engine_type = parent->engine_type;
  } else if (v->h_class == RM_CLASS_MEMORY_LOCAL_USER && params &&
             v->params_size >= RM_MEMORY_ALLOC_SIZE_OFFSET + sizeof(uint64_t)) {
    memcpy(&e->size, (const char *)params + RM_MEMORY_ALLOC_SIZE_OFFSET, sizeof e->size);
  }
  return e;
}

void gl_reg_free(uint32_t c, uint32_t o, void (*gone)(const gl_obj *)) {
  gl_obj *e = gl_reg_find(c, o);
  if (!e)
    return;
  /* The RM frees the subtree: mark it (parents before children, so at most one
   * pass per level of the handle tree), report it, then remove it. */
  e->dying = 1;
  if (o == c) {
    FOR_USED(i) {
      if (table[i].h_client == c)
        table[i].dying = 1;
    }
  } else if (e->kind != GL_KIND_CHANNEL && e->h_class != RM_CLASS_MEMORY_LOCAL_USER) {
    for (int changed = 1, pass = 0; changed && pass < 16; pass++) {
      changed = 0;
      FOR_USED(i) {
        gl_obj *x = &table[i];
        if (x->dying || x->h_client != c || x->h_parent == x->h_object)
          continue;
        const gl_obj *parent = gl_reg_find(c, x->h_parent);
        if (parent && parent->dying) {
          x->dying = 1;
          changed = 1;
        }
      }
    }
  }
  if (gone) {
    FOR_USED(i) {
      if (table[i].dying)
        gone(&table[i]);
    }
  }
  for (unsigned i = next_used(0); i < REG_CAP;) {
    if (table[i].dying)
      remove_at(i); /* a backward shift may move another entry here: look again */
    else
      i++;
    i = next_used(i);
  }
}

void gl_reg_close_fd(int fd, void (*gone)(const gl_obj *)) {
  for (;;) {
    uint32_t client = 0;
    int found = 0;
    FOR_USED(i) {
      if (rm_is_root_class(table[i].h_class) && table[i].fd == fd) {
        client = table[i].h_client;
        found = 1;
        break;
      }
    }
    if (!found)
      return;
    gl_reg_free(client, client, gone);
  }
}

void gl_reg_each(void (*fn)(gl_obj *, void *), void *ctx) {
  for (unsigned k = 0; k < REG_CAP / 64; k++) {
    for (uint64_t w = used_bits[k]; w; w &= w - 1) {
      unsigned i = k * 64 + (unsigned)__builtin_ctzll(w);
      if (table[i].used) /* fn may have removed it (a later slot's entry shifted back) */
        fn(&table[i], ctx);
    }
  }
}

uint32_t gl_reg_first_client(int *fd_out) {
  FOR_USED(i) {
    if (rm_is_root_class(table[i].h_class)) {
      if (fd_out)
        *fd_out = table[i].fd;
      return table[i].h_client;
    }
  }
  return 0;
}

void gl_reg_reset(void) {
  /* After fork: the objects and fds are inherited, a lock held by another thread is not. */
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  reg_mu = fresh;
}
