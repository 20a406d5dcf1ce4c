/*
 * rm_client.c - a scripted stand-in for libcuda's RM traffic (tests only).
 *
 * Reads one command per line on stdin, performs it the way libcuda would
 * (real open()/ioctl()/close() calls, so an LD_PRELOADed shim sees them), and
 * answers one line per command on stdout: "ok <cmd> key=value..." or
 * "err <cmd> <why>". Commands:
 *   open | client | device N | tsg | xfer-tsg | chan CLASSHEX | chan-dev CLASSHEX
 *   mem BYTES | sched 0|1 | free-chan | free-tsg | free-client | offset | seek N
 *   launch N | launch-ex N | graph N | sleep MS | close | quit
 * Launches go through GLEANER_TEST_LIBCUDA (a fake libcuda) found the way the
 * CUDA runtime finds libcuda: dlopen + dlsym("cuGetProcAddress_v2").
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rm.h"

static int fd = -1;
static uint32_t client, device, tsg, chan;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int alloc21(uint32_t root, uint32_t parent, uint32_t cls, void *params, uint32_t psize,
                   uint32_t *out) {
  rm_nvos21 p = {root, parent, 0, cls, (uint64_t)(uintptr_t)params, psize, 0};
  int rc = ioctl(fd, RM_IOCTL_ALLOC21, &p);
  *out = p.h_object_new;
  return rc != 0 ? -1 : (int)p.status;
}

static int alloc64(uint32_t root, uint32_t parent, uint32_t cls, void *params, uint32_t psize,
                   uint32_t *out) {
  rm_nvos64 p = {root, parent, 0, cls, (uint64_t)(uintptr_t)params, 0, psize, 0, 0, 0};
  int rc = ioctl(fd, RM_IOCTL_ALLOC64, &p);
  *out = p.h_object_new;
  return rc != 0 ? -1 : (int)p.status;
}

static int rm_free(uint32_t parent, uint32_t obj) {
  rm_nvos00 p = {client, parent, obj, 0};
  int rc = ioctl(fd, RM_IOCTL_FREE, &p);
  return rc != 0 ? -1 : (int)p.status;
}

typedef int (*gpa_fn)(const char *, void **, int, unsigned long long, int *);
typedef int (*lk_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     void *, void **, void **);
typedef struct {
  unsigned grid[3], block[3], shared_mem;
  void *stream;
  void *attrs;
  unsigned num_attrs;
} cfg_t;
typedef int (*lkex_fn)(const cfg_t *, void *, void **, void **);
typedef int (*gl_fn)(void *, void *);

static void *cuda_fn(const char *name) {
  static void *lib;
  static gpa_fn gpa;
  if (!lib) {
    const char *path = getenv("GLEANER_TEST_LIBCUDA");
    lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!lib)
      return NULL;
    gpa = (gpa_fn)dlsym(lib, "cuGetProcAddress_v2");
  }
  void *fn = NULL;
  int st = 0;
  if (!gpa || gpa(name, &fn, 12040, 0, &st) != 0)
    return NULL;
  return fn;
}

static void reply(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void reply(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
  fflush(stdout);
}

int main(void) {
  char line[256];
  const char *path = getenv("GLEANER_NVIDIACTL_PATH");
  setvbuf(stdout, NULL, _IOLBF, 0);
  while (fgets(line, sizeof line, stdin)) {
    char cmd[32] = "";
    char arg[64] = "";
    if (sscanf(line, "%31s %63s", cmd, arg) < 1)
      continue;
    uint32_t h = 0;
    int st = 0;
    if (!strcmp(cmd, "open")) {
      fd = open(path ? path : "/dev/nvidiactl", O_RDWR | O_CLOEXEC);
      fd >= 0 ? reply("ok open fd=%d", fd) : reply("err open %s", strerror(errno));
    } else if (!strcmp(cmd, "client")) {
      st = alloc21(0, 0, RM_CLASS_ROOT_CLIENT, NULL, 0, &h);
      client = h;
      reply("ok client handle=0x%x status=%d", h, st);
    } else if (!strcmp(cmd, "device")) {
      rm_device_alloc d = {(uint32_t)atoi(arg)};
      st = alloc64(client, client, RM_CLASS_DEVICE, &d, sizeof d, &h);
      device = h;
      reply("ok device handle=0x%x status=%d", h, st);
    } else if (!strcmp(cmd, "tsg") || !strcmp(cmd, "xfer-tsg")) {
      rm_tsg_alloc t = {0, 0, 0, 1};
      if (!strcmp(cmd, "tsg")) {
        st = alloc21(client, device, RM_CLASS_CHANNEL_GROUP, &t, sizeof t, &h);
      } else {
        rm_nvos21 p = {client, device, 0, RM_CLASS_CHANNEL_GROUP, (uint64_t)(uintptr_t)&t, sizeof t, 0};
        rm_ioctl_xfer x = {RM_ESC_ALLOC, sizeof p, (uint64_t)(uintptr_t)&p};
        st = ioctl(fd, RM_IOCTL_XFER, &x) ? -1 : (int)p.status;
        h = p.h_object_new;
      }
      tsg = h;
      reply("ok %s handle=0x%x status=%d", cmd, h, st);
    } else if (!strcmp(cmd, "chan") || !strcmp(cmd, "chan-dev")) {
      char params[128] = {0};
      uint32_t cls = (uint32_t)strtoul(arg, NULL, 16);
      st = alloc64(client, !strcmp(cmd, "chan") ? tsg : device, cls, params, sizeof params, &h);
      chan = h;
      reply("ok %s handle=0x%x status=%d", cmd, h, st);
    } else if (!strcmp(cmd, "mem")) {
      unsigned char params[88] = {0};
      uint64_t size = strtoull(arg, NULL, 10);
      memcpy(params + RM_MEMORY_ALLOC_SIZE_OFFSET, &size, sizeof size);
      st = alloc64(client, device, RM_CLASS_MEMORY_LOCAL_USER, params, sizeof params, &h);
      reply("ok mem handle=0x%x status=%d", h, st);
    } else if (!strcmp(cmd, "sched")) {
      rm_schedule_params sp = {(uint8_t)atoi(arg), 0, 0};
      rm_nvos54 p = {client, tsg, RM_CTRL_TSG_GPFIFO_SCHEDULE, 0, (uint64_t)(uintptr_t)&sp, sizeof sp, 0};
      int rc = ioctl(fd, RM_IOCTL_CONTROL, &p);
      reply("ok sched rc=%d status=%u", rc, p.status);
    } else if (!strcmp(cmd, "free-chan")) {
      reply("ok free-chan status=%d", rm_free(tsg, chan));
    } else if (!strcmp(cmd, "free-tsg")) {
      reply("ok free-tsg status=%d", rm_free(device, tsg));
    } else if (!strcmp(cmd, "free-client")) {
      reply("ok free-client status=%d", rm_free(0, client));
    } else if (!strcmp(cmd, "offset")) {
      reply("ok offset value=%lld", (long long)lseek(fd, 0, SEEK_CUR));
    } else if (!strcmp(cmd, "seek")) {
      reply("ok seek value=%lld", (long long)lseek(fd, atoll(arg), SEEK_SET));
    } else if (!strcmp(cmd, "launch") || !strcmp(cmd, "launch-ex") || !strcmp(cmd, "graph")) {
      int n = arg[0] ? atoi(arg) : 1;
      const char *name = !strcmp(cmd, "launch") ? "cuLaunchKernel"
                         : !strcmp(cmd, "graph") ? "cuGraphLaunch" : "cuLaunchKernelEx";
      void *fn = cuda_fn(name);
      if (!fn) {
        reply("err %s no %s", cmd, name);
        continue;
      }
      uint64_t t0 = now_ns();
      int rc = 0;
      for (int i = 0; i < n && rc == 0; i++) {
        if (!strcmp(cmd, "launch"))
          rc = ((lk_fn)fn)(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        else if (!strcmp(cmd, "graph"))
          rc = ((gl_fn)fn)(NULL, NULL);
        else {
          cfg_t c = {{1, 1, 1}, {1, 1, 1}, 0, NULL, NULL, 0};
          rc = ((lkex_fn)fn)(&c, NULL, NULL, NULL);
        }
      }
      reply("ok %s rc=%d start_ns=%llu end_ns=%llu", cmd, rc, (unsigned long long)t0,
            (unsigned long long)now_ns());
    } else if (!strcmp(cmd, "vmm-map") || !strcmp(cmd, "vmm-map-rel")) {
      /* N pages of 2 MiB at 0x7f0000000000 + i * 2 MiB, the way a VMM KV allocator maps
       * them; vmm-map-rel releases each handle right after mapping it (kvcached's way). */
      typedef int (*create_fn)(unsigned long long *, size_t, const void *, unsigned long long);
      typedef int (*map_fn)(unsigned long long, size_t, size_t, unsigned long long,
                            unsigned long long);
      typedef int (*access_fn)(unsigned long long, size_t, const void *, size_t);
      typedef int (*release_fn)(unsigned long long);
      create_fn create = (create_fn)cuda_fn("cuMemCreate");
      map_fn map = (map_fn)cuda_fn("cuMemMap");
      access_fn access = (access_fn)cuda_fn("cuMemSetAccess");
      release_fn release = (release_fn)cuda_fn("cuMemRelease");
      if (!create || !map || !access || !release) {
        reply("err %s no VMM entry points", cmd);
        continue;
      }
      int n = arg[0] ? atoi(arg) : 1, rc = 0;
      const size_t page = 2u << 20;
      /* CUmemAllocationProp: pinned (1), no export handle, location device (1) 0. */
      struct { int type, handle_types, loc_type, loc_id; void *meta; unsigned char flags[8]; } prop;
      memset(&prop, 0, sizeof prop);
      prop.type = 1;
      prop.loc_type = 1;
      struct { int type, id, flags; } desc = {1, 0, 3};
      for (int i = 0; i < n && rc == 0; i++) {
        unsigned long long handle = 0, va = 0x7f0000000000ull + (unsigned long long)i * page;
        rc = create(&handle, page, &prop, 0);
        if (!rc)
          rc = map(va, page, 0, handle, 0);
        if (!rc)
          rc = access(va, page, &desc, 1);
        if (!rc && !strcmp(cmd, "vmm-map-rel"))
          rc = release(handle);
      }
      reply("ok %s rc=%d", cmd, rc);
    } else if (!strcmp(cmd, "vmm-state")) {
      typedef void (*state_fn)(char *, size_t);
      cuda_fn("cuMemCreate"); /* loads the library */
      void *lib = dlopen(getenv("GLEANER_TEST_LIBCUDA"), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
      state_fn state = lib ? (state_fn)dlsym(lib, "fake_cuda_vmm_state") : NULL;
      char buf[4096] = "";
      if (state)
        state(buf, sizeof buf);
      char *live = strstr(buf, " live=");
      if (live)
        *live = 0;
      reply("ok vmm-state maps=%s live=%s", buf[0] ? buf : "-", live ? live + 6 : "?");
    } else if (!strcmp(cmd, "sleep")) {
      usleep((useconds_t)atoi(arg) * 1000);
      reply("ok sleep");
    } else if (!strcmp(cmd, "close")) {
      reply("ok close rc=%d", close(fd));
      fd = -1;
    } else if (!strcmp(cmd, "quit")) {
      reply("ok quit");
      return 0;
    } else {
      reply("err %s unknown command", cmd);
    }
  }
  return 0;
}
