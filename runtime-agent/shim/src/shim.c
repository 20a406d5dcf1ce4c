/*
 * shim.c - configuration, logging and the libc interposition points.
 *
 * Contract: loaded with LD_PRELOAD into offline (GLEANER_ROLE=offline) and
 * online (GLEANER_ROLE=online) inference processes. Without a role it only
 * forwards every call. It tracks which fds refer to the RM control device
 * (GLEANER_NVIDIACTL_PATH, default /dev/nvidiactl), decodes RM ALLOC / FREE /
 * CONTROL calls on them after the real call succeeded, and hands what it learns
 * to registry.c and agent.c. It never changes an ioctl's result except one: an
 * offline process's own GPFIFO_SCHEDULE(enable) while the gate is closed is
 * answered with success and deferred (agent.c). No failure here may crash the
 * host process: every error path logs and forwards.
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

#include "internal.h"

gl_config gl_cfg;

typedef int (*ioctl_fn)(int, unsigned long, ...);
typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);
typedef int (*open2_fn)(const char *, int);
typedef int (*close_fn)(int);

static ioctl_fn next_ioctl;
static open_fn next_open, next_open64;
static openat_fn next_openat, next_openat64;
static open2_fn next_open_2, next_open64_2;
static close_fn next_close;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* glibc's fortified open entry points (no public prototype). */
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);

uint64_t gl_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void gl_log(int level, const char *fmt, ...) {
  if (level > gl_cfg.log_level)
    return;
  char buf[512];
  int n = snprintf(buf, sizeof buf, "gleaner-shim[%d]: ", (int)getpid());
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
  va_end(ap);
  if (m < 0)
    return;
  size_t len = (size_t)n + ((size_t)m < sizeof buf - (size_t)n - 1 ? (size_t)m : sizeof buf - (size_t)n - 2);
  buf[len++] = '\n';
  ssize_t w = write(2, buf, len);
  (void)w;
}

static void copy_env(char *dst, size_t cap, const char *name, const char *fallback) {
  const char *v = getenv(name);
  snprintf(dst, cap, "%s", (v && *v) ? v : fallback);
}

static int env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  if (!v || !*v)
    return fallback;
  char *end;
  long x = strtol(v, &end, 10);
  return (*end == '\0' && x >= 0 && x < 1000000000L) ? (int)x : fallback;
}

static void parse_gpus(void) {
  const char *uuids = getenv("NVIDIA_VISIBLE_DEVICES");
  gl_cfg.ngpus = 0;
  for (int i = 0; i < (int)GL_MAX_GPUS; i++)
    gl_cfg.gpu_index[i] = -1;
  if (uuids && strncmp(uuids, "GPU-", 4) == 0) {
    const char *p = uuids;
    while (*p && gl_cfg.ngpus < (int)GL_MAX_GPUS) {
      size_t n = strcspn(p, ",");
      if (n > 0 && n < GL_UUID_LEN)
        memcpy(gl_cfg.gpu_uuid[gl_cfg.ngpus++], p, n);
      p += n + (p[n] == ',');
    }
  }
  const char *idx = getenv(GLEANER_NODE_ENV_GPU_INDICES);
  int k = 0;
  while (idx && *idx && k < (int)GL_MAX_GPUS) {
    char *end;
    long x = strtol(idx, &end, 10);
    if (end == idx)
      break;
    gl_cfg.gpu_index[k++] = (int32_t)x;
    idx = (*end == ',') ? end + 1 : end;
  }
  if (k > gl_cfg.ngpus)
    gl_cfg.ngpus = k;
}

static void do_init(void) {
  next_ioctl = (ioctl_fn)gl_next_sym("ioctl");
  next_open = (open_fn)gl_next_sym("open");
  next_open64 = (open_fn)gl_next_sym("open64");
  next_openat = (openat_fn)gl_next_sym("openat");
  next_openat64 = (openat_fn)gl_next_sym("openat64");
  next_open_2 = (open2_fn)gl_next_sym("__open_2");
  next_open64_2 = (open2_fn)gl_next_sym("__open64_2");
  next_close = (close_fn)gl_next_sym("close");

  const char *role = getenv(GLEANER_NODE_ENV_ROLE);
  gl_cfg.role = GL_ROLE_NONE;
  if (role && strcmp(role, GLEANER_NODE_ROLE_OFFLINE) == 0)
    gl_cfg.role = GL_ROLE_OFF;
  else if (role && strcmp(role, GLEANER_NODE_ROLE_ONLINE) == 0)
    gl_cfg.role = GL_ROLE_ON;
  copy_env(gl_cfg.ctl_path, sizeof gl_cfg.ctl_path, GLEANER_NODE_ENV_NVIDIACTL_PATH,
           GLEANER_NODE_DEFAULT_NVIDIACTL_PATH);
  copy_env(gl_cfg.socket_path, sizeof gl_cfg.socket_path, GLEANER_NODE_ENV_SOCKET,
           GLEANER_NODE_SOCKET_PATH);
  copy_env(gl_cfg.job, sizeof gl_cfg.job, GLEANER_NODE_ENV_JOB, "");
  const char *lvl = getenv(GLEANER_NODE_ENV_SHIM_LOG);
  gl_cfg.log_level = 1;
  if (lvl && strcmp(lvl, "quiet") == 0)
    gl_cfg.log_level = 0;
  else if (lvl && strcmp(lvl, "debug") == 0)
    gl_cfg.log_level = 2;
  gl_cfg.reconnect_ms = env_int(GLEANER_NODE_ENV_SHIM_RECONNECT_MS, 200);
  if (gl_cfg.reconnect_ms < 1)
    gl_cfg.reconnect_ms = 1;
  gl_cfg.hold_log_ms = env_int(GLEANER_NODE_ENV_SHIM_HOLD_LOG_MS, 5000);
  gl_cfg.max_gap_ns = (uint64_t)env_int(GLEANER_NODE_ENV_MAX_DECODE_GAP_MS, 1000) * 1000000ull;
  parse_gpus();
  gl_log(2, "loaded: role=%d ctl=%s socket=%s", gl_cfg.role, gl_cfg.ctl_path, gl_cfg.socket_path);
}

void gl_ensure_init(void) { pthread_once(&init_once, do_init); }

static void after_fork_child(void) {
  gl_reg_reset();
  gl_agent_after_fork();
}

__attribute__((constructor)) static void gl_shim_ctor(void) {
  gl_ensure_init();
  pthread_atfork(NULL, NULL, after_fork_child);
}

int gl_real_ioctl(int fd, unsigned long request, void *arg) {
  gl_ensure_init();
  if (!next_ioctl) {
    errno = ENOSYS;
    return -1;
  }
  return next_ioctl(fd, request, arg);
}

/* --- open / close ------------------------------------------------------- */

static void note_open(const char *path, int fd) {
  if (fd < 0 || !path || gl_cfg.role == GL_ROLE_NONE || strcmp(path, gl_cfg.ctl_path) != 0)
    return;
  gl_reg_mark_ctl_fd(fd, 1);
  gl_log(2, "tracking %s as fd %d", path, fd);
  gl_agent_start();
}

static int has_mode(int flags) { return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE; }

#define OPEN_BODY(nextfn, ...)                                                                   \
  gl_ensure_init();                                                                              \
  mode_t mode = 0;                                                                               \
  if (has_mode(flags)) {                                                                         \
    va_list ap;                                                                                  \
    va_start(ap, flags);                                                                         \
    mode = (mode_t)va_arg(ap, int);                                                              \
    va_end(ap);                                                                                  \
  }                                                                                              \
  if (!nextfn) {                                                                                 \
    errno = ENOSYS;                                                                              \
    return -1;                                                                                   \
  }                                                                                              \
  int fd = nextfn(__VA_ARGS__, flags, mode);                                                     \
  note_open(path, fd);                                                                           \
  return fd;

__attribute__((visibility("default"))) int open(const char *path, int flags, ...) {
  OPEN_BODY(next_open, path)
}
__attribute__((visibility("default"))) int open64(const char *path, int flags, ...) {
  OPEN_BODY(next_open64, path)
}
__attribute__((visibility("default"))) int openat(int dirfd, const char *path, int flags, ...) {
  OPEN_BODY(next_openat, dirfd, path)
}
__attribute__((visibility("default"))) int openat64(int dirfd, const char *path, int flags, ...) {
  OPEN_BODY(next_openat64, dirfd, path)
}

__attribute__((visibility("default"))) int __open_2(const char *path, int flags) {
  gl_ensure_init();
  if (!next_open_2) {
    errno = ENOSYS;
    return -1;
  }
  int fd = next_open_2(path, flags);
  note_open(path, fd);
  return fd;
}

__attribute__((visibility("default"))) int __open64_2(const char *path, int flags) {
  gl_ensure_init();
  if (!next_open64_2) {
    errno = ENOSYS;
    return -1;
  }
  int fd = next_open64_2(path, flags);
  note_open(path, fd);
  return fd;
}

__attribute__((visibility("default"))) int close(int fd) {
  gl_ensure_init();
  if (gl_reg_is_ctl_fd(fd)) {
    /* Closing the file frees its RM clients: drop them before the fd number is reused. */
    gl_reg_lock();
    gl_reg_close_fd(fd, gl_agent_obj_gone);
    gl_reg_mark_ctl_fd(fd, 0);
    gl_reg_unlock();
  }
  if (!next_close) {
    errno = ENOSYS;
    return -1;
  }
  return next_close(fd);
}

/* --- ioctl ---------------------------------------------------------------- */

static void after_alloc(int fd, const rm_call *c) {
  rm_alloc_view v = rm_alloc_read(c);
  if (v.status != RM_STATUS_OK)
    return;
  gl_reg_lock();
  const gl_obj *o = gl_reg_alloc(fd, &v, (const void *)(uintptr_t)v.params);
  gl_obj copy;
  int have = o != NULL;
  if (have)
    copy = *o;
  gl_reg_unlock();
  if (have) {
    gl_log(2, "alloc client=0x%x parent=0x%x object=0x%x class=0x%x gpu=%u", copy.h_client,
           copy.h_parent, copy.h_object, copy.h_class, copy.gpu);
    gl_agent_obj_added(&copy);
  }
}

static void after_free(const rm_call *c) {
  const rm_nvos00 *p = (const rm_nvos00 *)c->arg;
  if (p->status != RM_STATUS_OK)
    return;
  gl_reg_lock();
  gl_reg_free(p->h_root, p->h_object_old, gl_agent_obj_gone);
  gl_reg_unlock();
}

__attribute__((visibility("default"))) int ioctl(int fd, unsigned long request, ...) {
  va_list ap;
  va_start(ap, request);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  if (!gl_reg_is_ctl_fd(fd))
    return gl_real_ioctl(fd, request, arg);

  rm_call c = rm_classify(request, arg);
  if (c.op == RM_OP_CONTROL && gl_cfg.role == GL_ROLE_OFF &&
      gl_agent_filter_app_schedule((rm_nvos54 *)c.arg))
    return 0;
  int rc = gl_real_ioctl(fd, request, arg);
  if (rc != 0 || gl_cfg.role != GL_ROLE_OFF)
    return rc;
  int saved = errno;
  if (c.op == RM_OP_ALLOC)
    after_alloc(fd, &c);
  else if (c.op == RM_OP_FREE)
    after_free(&c);
  errno = saved;
  return rc;
}
