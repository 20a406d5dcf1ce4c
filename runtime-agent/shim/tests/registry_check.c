/*
 * registry_check.c - the shim's object registry on its own (tests only): a table filled to
 * most of its capacity (long probe chains), then objects freed in random order; after every
 * 16th free
 * gl_reg_each must visit exactly the live objects (the used-slot bitmap kept in step with
 * every insert, removal and backward shift). Prints "ok <visits>" and exits 0, else says
 * what went wrong and exits 1.
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

static void visit(gl_obj *o, void *ctx) {
  (void)ctx;
  int i = index_of(o->h_client);
  if (i < 0 || !live[i] || o->h_object != o->h_client || !o->used)
    seen_wrong++;
  seen_count++;
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
  gl_reg_unlock();
  printf("ok %u\n", visits);
  return 0;
}
