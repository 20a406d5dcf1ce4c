/*
 * fake_rm.c - a stand-in for the NVIDIA RM behind a fake control device (tests only).
 *
 * Preloaded AFTER libgleaner_shim.so (LD_PRELOAD="shim fake_rm"), so the shim's
 * "next" ioctl is this one. For fds whose /proc/self/fd link equals
 * GLEANER_NVIDIACTL_PATH it answers RM ALLOC / FREE / CONTROL like the driver
 * would (assigning handles, writing status) and appends one line per call to
 * GLEANER_FAKE_RM_LOG (a control line ends with ns=, the CLOCK_MONOTONIC time its ioctl entered
 * this library). Other fds go to libc. Knobs:
 *   GLEANER_FAKE_RM_FAIL_CMDS  comma list of hex control cmds answered 0x56 (NOT_SUPPORTED)
 *   GLEANER_FAKE_RM_DELAY_US   sleep per control (emulates a GSP RPC)
 * Ownership is emulated: a control must arrive on the fd its client was made on,
 * else status 0x1B (INSUFFICIENT_PERMISSIONS), as rmclientValidate would refuse it.
 * The constructor also checks that dlsym(RTLD_NEXT) -- which goes through the
 * shim's dlsym -- still resolves relative to this library, and logs the result.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "rm.h"

typedef int (*ioctl_fn)(int, unsigned long, ...);
static ioctl_fn libc_ioctl;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint32_t next_handle = 1;
static struct {
  uint32_t client;
  int fd;
} clients[64];
static int nclients;

int ioctl(int fd, unsigned long request, ...);

static void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_line(const char *fmt, ...) {
  const char *path = getenv("GLEANER_FAKE_RM_LOG");
  if (!path)
    return;
  char buf[512];
  int n = snprintf(buf, sizeof buf, "pid=%d ", (int)getpid());
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 2, fmt, ap);
  va_end(ap);
  if (m < 0)
    return;
  n += m < (int)(sizeof buf) - n - 2 ? m : (int)(sizeof buf) - n - 3;
  buf[n++] = '\n';
  /* Raw syscalls: keep the test's own bookkeeping out of the shim's hooks. */
  int lfd = (int)syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (lfd < 0)
    return;
  ssize_t w = write(lfd, buf, (size_t)n);
  (void)w;
  syscall(SYS_close, lfd);
}

__attribute__((constructor)) static void fake_rm_init(void) {
  libc_ioctl = (ioctl_fn)dlsym(RTLD_NEXT, "ioctl");
  void *self = dlsym(RTLD_DEFAULT, "fake_rm_marker");
  log_line("rtld_next=%s", (libc_ioctl && (void *)libc_ioctl != (void *)ioctl) ? "ok" : "wrong");
  (void)self;
}

__attribute__((visibility("default"))) int fake_rm_marker;

static int is_fake_ctl(int fd) {
  const char *want = getenv("GLEANER_NVIDIACTL_PATH");
  if (!want || fd < 0)
    return 0;
  char link[64], target[PATH_MAX], real_want[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, target, sizeof target - 1);
  if (n <= 0)
    return 0;
  target[n] = '\0';
  if (!realpath(want, real_want))
    return 0;
  return strcmp(target, real_want) == 0;
}

static int fails(uint32_t cmd) {
  const char *list = getenv("GLEANER_FAKE_RM_FAIL_CMDS");
  while (list && *list) {
    char *end;
    unsigned long x = strtoul(list, &end, 16);
    if (end == list)
      return 0;
    if ((uint32_t)x == cmd)
      return 1;
    list = *end == ',' ? end + 1 : end;
  }
  return 0;
}

static int client_fd(uint32_t client) {
  for (int i = 0; i < nclients; i++)
    if (clients[i].client == client)
      return clients[i].fd;
  return -1;
}

static void fake_alloc(int fd, const rm_call *c) {
  rm_alloc_view v = rm_alloc_read(c);
  uint32_t h = v.h_new ? v.h_new : (rm_is_root_class(v.h_class) ? 0xC1D00000u : 0x5C000000u) + next_handle++;
  uint32_t status = RM_STATUS_OK;
  const char *st = getenv("GLEANER_FAKE_RM_ALLOC_STATUS");
  if (st)
    status = (uint32_t)strtoul(st, NULL, 16);
  if (rm_is_root_class(v.h_class) && status == RM_STATUS_OK && nclients < 64) {
    clients[nclients].client = h;
    clients[nclients++].fd = fd;
  }
  if (c->size == sizeof(rm_nvos64)) {
    ((rm_nvos64 *)c->arg)->h_object_new = h;
    ((rm_nvos64 *)c->arg)->status = status;
  } else {
    ((rm_nvos21 *)c->arg)->h_object_new = h;
    ((rm_nvos21 *)c->arg)->status = status;
  }
  log_line("op=alloc form=%u fd=%d root=0x%x parent=0x%x new=0x%x class=0x%x psize=%u status=0x%x",
           c->size == sizeof(rm_nvos64) ? 64u : 21u, fd, v.h_root, v.h_parent, h, v.h_class,
           v.params_size, status);
}

/* ns: when the control reached the "RM" (benchmarks: reaction times), taken as the ioctl
 * entered this library: the fake's own work to recognise its device (a readlink and a
 * realpath per call, tens of microseconds on a VM) is no part of a real driver's path. */
static void fake_control(int fd, rm_nvos54 *p, unsigned long long ns) {
  const char *d = getenv("GLEANER_FAKE_RM_DELAY_US");
  if (d) {
    useconds_t us = (useconds_t)strtoul(d, NULL, 10);
    usleep(us);
    ns += 1000ull * us; /* an emulated RPC: the control takes effect at its end */
  }
  int owner = client_fd(p->h_client);
  uint32_t status = RM_STATUS_OK;
  if (owner != fd)
    status = 0x1B; /* NV_ERR_INSUFFICIENT_PERMISSIONS */
  else if (fails(p->cmd))
    status = 0x56; /* NV_ERR_NOT_SUPPORTED */
  int enable = -1;
  if (p->params && p->params_size == sizeof(rm_schedule_params))
    enable = ((const rm_schedule_params *)(uintptr_t)p->params)->enable;
  p->status = status;
  log_line("op=control fd=%d owner_fd=%d client=0x%x object=0x%x cmd=0x%x psize=%u enable=%d status=0x%x ns=%llu",
           fd, owner, p->h_client, p->h_object, p->cmd, p->params_size, enable, status, ns);
}

int ioctl(int fd, unsigned long request, ...) {
  va_list ap;
  va_start(ap, request);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  unsigned long long ns = (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
  if (!is_fake_ctl(fd)) {
    if (!libc_ioctl) {
      errno = ENOSYS;
      return -1;
    }
    return libc_ioctl(fd, request, arg);
  }
  rm_call c = rm_classify(request, arg);
  pthread_mutex_lock(&mu);
  switch (c.op) {
  case RM_OP_ALLOC:
    fake_alloc(fd, &c);
    break;
  case RM_OP_FREE: {
    rm_nvos00 *p = (rm_nvos00 *)c.arg;
    p->status = RM_STATUS_OK;
    log_line("op=free fd=%d root=0x%x parent=0x%x object=0x%x", fd, p->h_root, p->h_object_parent,
             p->h_object_old);
    break;
  }
  case RM_OP_CONTROL:
    fake_control(fd, (rm_nvos54 *)c.arg, ns);
    break;
  default:
    pthread_mutex_unlock(&mu);
    errno = ENOTTY;
    return -1;
  }
  pthread_mutex_unlock(&mu);
  return 0;
}
