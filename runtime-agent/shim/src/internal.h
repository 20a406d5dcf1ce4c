/*
 * internal.h - state and functions shared by the shim's translation units.
 *
 * shim.c      configuration, logging, open/close/ioctl interposition
 * registry.c  RM objects (clients, devices, channel groups, channels, memory)
 * agent.c     agent connection, control thread, compute gate, fail-closed hold
 * cuda_hook.c dlsym / cuGetProcAddress interposition, launch hooks, busy tracking
 * vmm.c       CUDA VMM page records, RECLAIM / RESTORE, the KV-cache allocator
 * fastgate.c  the native gate path: the agent's shared-memory segment, online bumps,
 *             the offline watch thread
 */
#ifndef GLEANER_INTERNAL_H
#define GLEANER_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "gleaner_node.h"
#include "gleaner_proto.h"
#include "rm.h"

#define GL_HIDDEN __attribute__((visibility("hidden")))

enum gl_role { GL_ROLE_NONE = 0, GL_ROLE_OFF = GL_ROLE_OFFLINE, GL_ROLE_ON = GL_ROLE_ONLINE };

typedef struct gl_config {
  int role;               /* enum gl_role */
  char ctl_path[256];     /* GLEANER_NVIDIACTL_PATH, default /dev/nvidiactl */
  char socket_path[108];  /* GLEANER_SOCKET, default /run/gleaner/agent.sock */
  char job[GL_JOB_LEN];   /* GLEANER_JOB */
  int ngpus;
  char gpu_uuid[GL_MAX_GPUS][GL_UUID_LEN]; /* NVIDIA_VISIBLE_DEVICES */
  int32_t gpu_index[GL_MAX_GPUS];          /* GLEANER_GPU_INDICES */
  int log_level;          /* 0 quiet, 1 info (default), 2 debug */
  int reconnect_ms;       /* GLEANER_SHIM_RECONNECT_MS, default 200 */
  int hold_log_ms;        /* GLEANER_SHIM_HOLD_LOG_MS, default 5000 */
  uint64_t max_gap_ns;    /* GLEANER_MAX_DECODE_GAP_MS, default 1000 */
} gl_config;

extern GL_HIDDEN gl_config gl_cfg;

/* --- shim.c --- */
GL_HIDDEN void gl_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
GL_HIDDEN uint64_t gl_now_ns(void);
GL_HIDDEN int gl_real_ioctl(int fd, unsigned long request, void *arg);
GL_HIDDEN void gl_ensure_init(void);

/* --- registry.c --- */
typedef struct gl_obj {
  uint32_t h_client, h_parent, h_object, h_class;
  uint32_t gpu, engine_type;
  uint64_t size;
  int fd;             /* nvidiactl fd the object's client was created on */
  uint8_t kind;       /* GL_KIND_TSG, GL_KIND_CHANNEL, or 0 */
  uint8_t app_state;  /* GL_APP_* : what the application last asked for */
  uint8_t gate_off;   /* the gate holds it off (we disabled it or deferred its enable) */
  uint8_t dying;      /* being freed (registry.c) */
  uint8_t used;
} gl_obj;

#define GL_APP_UNKNOWN 0
#define GL_APP_ENABLED 1
#define GL_APP_DISABLED 2

GL_HIDDEN void gl_reg_lock(void);
GL_HIDDEN void gl_reg_unlock(void);
/* Record a successful allocation; returns the stored object or NULL if untracked. */
GL_HIDDEN const gl_obj *gl_reg_alloc(int fd, const rm_alloc_view *v, const void *params);
/* Forget a freed object and every descendant; calls `gone` for each removed one. */
GL_HIDDEN void gl_reg_free(uint32_t h_client, uint32_t h_object, void (*gone)(const gl_obj *));
/* Forget every object whose client was created on `fd` (the fd was closed). */
GL_HIDDEN void gl_reg_close_fd(int fd, void (*gone)(const gl_obj *));
GL_HIDDEN gl_obj *gl_reg_find(uint32_t h_client, uint32_t h_object);
/* Iterate every object (registry lock held by the caller). */
GL_HIDDEN void gl_reg_each(void (*fn)(gl_obj *, void *), void *ctx);
GL_HIDDEN int gl_reg_is_ctl_fd(int fd);
GL_HIDDEN void gl_reg_mark_ctl_fd(int fd, int is_ctl);
GL_HIDDEN uint32_t gl_reg_first_client(int *fd_out);
GL_HIDDEN void gl_reg_reset(void);

/* --- agent.c --- */
GL_HIDDEN void gl_agent_start(void);          /* idempotent: start the control thread */
GL_HIDDEN void gl_agent_obj_added(const gl_obj *o);
GL_HIDDEN void gl_agent_obj_gone(const gl_obj *o);
GL_HIDDEN int gl_agent_gate_open(void);       /* offline: may GPU work run now? */
GL_HIDDEN void gl_offline_hold(const char *where); /* offline: wait until the gate opens */
GL_HIDDEN int gl_agent_send(uint8_t type, const void *payload, uint32_t len, int dontwait);
GL_HIDDEN void gl_agent_after_fork(void);
/* Offline: the application's own schedule control; returns 1 if swallowed. */
GL_HIDDEN int gl_agent_filter_app_schedule(rm_nvos54 *p);
/* Offline: close the gate from outside the control thread (the watch thread): `fail` marks
 * a fail-closed reason (logged and sent as STATUS at once). */
GL_HIDDEN void gl_agent_fast_close(uint32_t code, const char *why, int fail);
/* Offline, gate closed: send STATUS (GATED_BY_AGENT, `why`) so that an agent that thinks
 * the gate open sends its enable again (docs/shim.md, "The native gate path"). */
GL_HIDDEN void gl_agent_resync(const char *why);

/* --- fastgate.c --- */
GL_HIDDEN uint32_t gl_agent_source_id(void); /* online: this connection's busy-source id, 0: none */
GL_HIDDEN void gl_agent_fast_open(void); /* offline: open at the native loop's word, if the agent's last word was open */
GL_HIDDEN int gl_fg_online_busy(uint64_t now, uint64_t gap_ns); /* online: a busy edge (and the
                                                                 decode gap before it), before its frame */
GL_HIDDEN int gl_fg_online_idle(uint64_t now); /* online: an idle edge, before its frame */
/* (both: 1 when a native gate loop took the edge: no socket frame then) */
GL_HIDDEN void gl_fg_watch_start(void);  /* offline: idempotent: start the watch thread */
/* Offline: may the gate open now? 0 with the reason in `why` and the STATUS code in `code`
 * (NO_AGENT: a fail-closed reason; GATED_BY_AGENT: a busy edge newer than the enable). */
GL_HIDDEN int gl_fg_may_open(char *why, size_t cap, uint32_t *code);
GL_HIDDEN void gl_fg_after_fork(void);

/* --- cuda_hook.c --- */
/* The driver entry points the shim wraps or calls itself. */
enum gl_cu_slot {
  GL_CU_LK, GL_CU_LK_PTSZ, GL_CU_LKEX, GL_CU_LKEX_PTSZ, GL_CU_GL, GL_CU_GL_PTSZ, GL_CU_GPA1,
  GL_CU_GPA2, GL_CU_EV_CREATE, GL_CU_EV_RECORD, GL_CU_EV_QUERY, GL_CU_CTX_GET, GL_CU_CTX_PUSH,
  GL_CU_CTX_POP, GL_CU_MEM_CREATE, GL_CU_MEM_MAP, GL_CU_MEM_UNMAP, GL_CU_MEM_RELEASE,
  GL_CU_MEM_SET_ACCESS, GL_CU_MEM_ADDR_RESERVE, GL_CU_MEM_ADDR_FREE, GL_CU_MEM_GRANULARITY,
  GL_CU_DEVICE_GET, GL_CU_COUNT
};
GL_HIDDEN void *gl_next_sym(const char *name); /* the next definition after the shim */
GL_HIDDEN void gl_online_launched(void *stream, int is_graph);
GL_HIDDEN void *gl_cu_real(enum gl_cu_slot s); /* the driver's function, or NULL */
/* Bind the helper slots from the driver library (GLEANER_LIBCUDA, default libcuda.so.1)
 * once; 0 if it was found. */
GL_HIDDEN int gl_cu_bind_driver(void);

/* --- vmm.c --- */
/* The wrapper for a VMM entry point (and its slot), or NULL if `symbol` is not one. */
GL_HIDDEN void *gl_vmm_wrapper(const char *symbol, enum gl_cu_slot *slot);
/* Offline RECLAIM: quarantine-remap and release the pages at `va` (recorded from cuMemMap);
 * returns 0 when all were released, else -1 with `err` (errno or CUresult). */
GL_HIDDEN int gl_reclaim_pages(const uint64_t *va, uint32_t n, uint32_t *released, int32_t *err);
/* Offline RESTORE: back quarantined pages with fresh allocations. Returns 0 when all were
 * restored; -1 with `err` when one failed and every page is still mapped (the failed one
 * quarantined); -2 when a page could not be re-mapped at all (the caller fails closed). */
GL_HIDDEN int gl_restore_pages(const uint64_t *va, uint32_t n, uint32_t *restored, int32_t *err);

#endif /* GLEANER_INTERNAL_H */
