/*
 * registry_check.c - the shim's object registry on its own (tests only): a table filled to
 * most of its capacity (long probe chains), then objects freed in random order; after every
 * 16th free
 * gl_reg_each must visit exactly the live objects (the used-slot bitmap kept in step with
 * every insert, removal and backward shift). Then, among those, handle trees of three
 * clients on two fds (devices, subdevices, channel groups, channels, memory): freeing a
 * device, a channel, and closing one fd must report (gone) and remove exactly that subtree,
 * or every object of the fd's clients, and leave the rest found and visited. Prints
 * "ok <visits>" and exits 0, else says what went wrong and exits 1.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void gl_log(int level, const char *fmt, ...) {
  (void)level;
  (void)fmt;
}

#define N 12000u    /* of 16384 slots: long probe chains, many backward shifts */
#define FREES 1500u /* each free scans the table: a few seconds' worth at most */

static uint32_t handle[N];
static unsigned char live[N];
static unsigned seen_count, seen_wrong;

#define BASE 0xC1000003u
static int index_of(uint32_t h) {
  uint32_t i = (h - BASE) / 16u;
  return (h - BASE) % 16u == 0 && i < N && handle[i] == h ? (int)i : -1;
}

/* The handle trees: per client, two devices, each with a subdevice, a channel group with
 * two channels, and a memory object; one device holds BULK more memory objects, so that
 * freeing them shifts entries of the same tree into the slots just emptied. */
#define TREE_TAG 0xD2u /* the top byte of their handles; the rest drawn at random */
#define TREE_MAX 400
#define BULK 300 /* memory objects of one client: removals next to each other */
typedef struct {
  uint32_t client, handle, parent, cls;
  int fd;
  unsigned char live, doomed;
  unsigned gone;
} tree_obj;
static tree_obj tree[TREE_MAX];
static unsigned n_tree, gone_wrong;

static int tree_index(uint32_t h) {
  if (h >> 24 != TREE_TAG)
    return -1;
  for (unsigned i = 0; i < n_tree; i++)
    if (tree[i].handle == h)
      return (int)i;
  return -1;
}

static void visit(gl_obj *o, void *ctx) {
  (void)ctx;
  int t = tree_index(o->h_object);
  if (t >= 0) {
    if (!tree[t].live || o->h_client != tree[t].client || !o->used)
      seen_wrong++;
    seen_count++;
    return;
  }
  int i = index_of(o->h_client);
  if (i < 0 || !live[i] || o->h_object != o->h_client || !o->used)
    seen_wrong++;
  seen_count++;
}

static void gone(const gl_obj *o) {
  int t = tree_index(o->h_object);
  if (t < 0 || o->h_client != tree[t].client)
    gone_wrong++;
  else
    tree[t].gone++;
}

static uint32_t add(uint32_t client, uint32_t parent, uint32_t cls, int fd) {
  tree_obj *x = &tree[n_tree];
  do /* random handles: random slots, so one tree's entries sit next to each other too */
    x->handle = TREE_TAG << 24 | ((uint32_t)rand() & 0xFFFFFFu);
  while (tree_index(x->handle) >= 0);
  x->client = client ? client : x->handle;
  x->parent = client ? parent : 0;
  x->cls = cls;
  x->fd = fd;
  x->live = 1;
  n_tree++;
  rm_alloc_view v = {client, x->parent, x->handle, cls, 0, 0, 0};
  return gl_reg_alloc(fd, &v, NULL) ? x->handle : 0;
}

/* Whether tree[i] is target or below it (the same client's parent chain). */
static int under(unsigned i, uint32_t target) {
  for (int t = (int)i, depth = 0; t >= 0 && depth < 8; depth++) {
    if (tree[t].handle == target)
      return 1;
    if (tree[t].handle == tree[t].client)
      return 0;
    t = tree_index(tree[t].parent);
  }
  return 0;
}

/* After a free or close: exactly the doomed objects reported once and gone, the rest
 * still found; then every doomed one is dead. */
static int settle(const char *when) {
  for (unsigned i = 0; i < n_tree; i++) {
    tree_obj *x = &tree[i];
    const gl_obj *found = gl_reg_find(x->client, x->handle);
    if (x->doomed ? (x->gone != 1 || found) : (x->gone != 0 || (x->live && !found))) {
      printf("%s: object 0x%x (class 0x%x) reported %u times, %s\n", when, x->handle, x->cls,
             x->gone, found ? "still found" : "not found");
      return 1;
    }
    if (x->doomed)
      x->live = 0;
    x->doomed = 0;
    x->gone = 0;
  }
  if (gone_wrong) {
    printf("%s: %u objects reported that were not in the freed trees\n", when, gone_wrong);
    return 1;
  }
  return 0;
}

static unsigned tree_live(void) {
  unsigned n = 0;
  for (unsigned i = 0; i < n_tree; i++)
    n += tree[i].live;
  return n;
}

static int check(const char *when, unsigned expect);

static int trees(unsigned n_live) {
  unsigned device = 0, channel = 0; /* indices into tree */
  const int fds[3] = {5, 5, 6};
  for (unsigned k = 0; k < 3; k++) {
    uint32_t client = add(0, 0, RM_CLASS_ROOT_CLIENT, fds[k]);
    for (unsigned d = 0; d < 2; d++) {
      uint32_t dev = add(client, client, RM_CLASS_DEVICE, fds[k]);
      add(client, dev, RM_CLASS_SUBDEVICE, fds[k]);
      uint32_t tsg = add(client, dev, RM_CLASS_CHANNEL_GROUP, fds[k]);
      add(client, tsg, 0xC56Fu, fds[k]);
      uint32_t chan = add(client, tsg, 0xC56Fu, fds[k]);
      add(client, dev, RM_CLASS_MEMORY_LOCAL_USER, fds[k]);
      for (unsigned m = 0; k == 1 && d == 0 && m < BULK; m++)
        add(client, dev, RM_CLASS_MEMORY_LOCAL_USER, fds[k]);
      if (!client || !dev || !tsg || !chan) {
        printf("handle tree %u refused\n", k);
        return 1;
      }
      if (k == 2 && d == 0)
        device = (unsigned)tree_index(dev);
      if (k == 0 && d == 1)
        channel = n_tree - 2; /* the second channel; the memory object came after */
    }
  }
  if (check("trees added", n_live + tree_live()))
    return 1;
  /* A device: itself, its subdevice, channel group, channels and memory; not its sibling. */
  for (unsigned i = 0; i < n_tree; i++)
    tree[i].doomed = (unsigned char)under(i, tree[device].handle);
  gl_reg_free(tree[device].client, tree[device].handle, gone);
  if (settle("device freed") || check("device freed", n_live + tree_live()))
    return 1;
  /* A channel: itself alone. */
  tree[channel].doomed = 1;
  gl_reg_free(tree[channel].client, tree[channel].handle, gone);
  if (settle("channel freed") || check("channel freed", n_live + tree_live()))
    return 1;
  /* fd 5 closed: both of its clients with all they hold; fd 6's client stays. */
  for (unsigned i = 0; i < n_tree; i++)
    tree[i].doomed = (unsigned char)(tree[i].live && tree[i].fd == 5);
  gl_reg_close_fd(5, gone);
  if (settle("fd 5 closed") || check("fd 5 closed", n_live + tree_live()))
    return 1;
  if (tree_live() != 7) { /* fd 6's client and its second device's six objects */
    printf("after the frees %u tree objects live, expected 7\n", tree_live());
    return 1;
  }
  return 0;
}

static int check(const char *when, unsigned expect) {
  seen_count = seen_wrong = 0;
  gl_reg_each(visit, NULL);
  if (seen_count != expect || seen_wrong) {
    printf("%s: visited %u objects (%u not live), expected %u\n", when, seen_count, seen_wrong, expect);
    return 1;
  }
  return 0;
}

int main(void) {
  srand(12345);
  unsigned n_live = 0, visits = 0;
  gl_reg_lock();
  for (unsigned i = 0; i < N; i++) {
    handle[i] = BASE + 16u * i;
    rm_alloc_view v = {0, 0, handle[i], RM_CLASS_ROOT_CLIENT, 0, 0, 0};
    if (!gl_reg_alloc(3, &v, NULL)) {
      printf("insert %u refused\n", i);
      return 1;
    }
    live[i] = 1;
    n_live++;
  }
  if (check("filled", n_live))
    return 1;
  visits += seen_count;
  for (unsigned step = 0; n_live > N - FREES; step++) {
    unsigned i = (unsigned)rand() % N;
    while (!live[i])
      i = (i + 1) % N;
    gl_reg_free(handle[i], handle[i], NULL);
    live[i] = 0;
    n_live--;
    if (gl_reg_find(handle[i], handle[i])) {
      printf("freed 0x%x still found\n", handle[i]);
      return 1;
    }
    if (step % 16 == 0) {
      char when[64];
      snprintf(when, sizeof when, "after %u frees", step + 1);
      if (check(when, n_live))
        return 1;
      visits += seen_count;
    }
  }
  if (trees(n_live))
    return 1;
  visits += seen_count;
  gl_reg_unlock();
  printf("ok %u\n", visits);
  return 0;
}
