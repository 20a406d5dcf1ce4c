/*
 * rm.h - the slice of the NVIDIA Resource Manager (RM) ioctl ABI the shim needs.
 *
 * Our own definitions of the public ABI documented in NVIDIA's
 * open-gpu-kernel-modules (nv_escape.h, nv-ioctl-numbers.h, nvos.h, class and
 * ctrl headers). Sizes are pinned with _Static_assert; see
 * docs/shim.md ("Where the RM facts come from") for where each fact comes from.
 */
#ifndef GLEANER_RM_H
#define GLEANER_RM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>

/* The driver keys ioctls on _IOC_NR and _IOC_SIZE; the type is 'F' by convention. */
#define RM_IOCTL_MAGIC 'F'

/* RM escapes (nv_escape.h). */
#define RM_ESC_FREE 0x29
#define RM_ESC_CONTROL 0x2A
#define RM_ESC_ALLOC 0x2B
/* Frontend escape that wraps a larger argument (nv-ioctl-numbers.h: base 200 + 11). */
#define RM_ESC_IOCTL_XFER_CMD 211

typedef struct rm_nvos00 { /* NV_ESC_RM_FREE */
  uint32_t h_root;
  uint32_t h_object_parent;
  uint32_t h_object_old;
  uint32_t status;
} rm_nvos00;

typedef struct rm_nvos21 { /* NV_ESC_RM_ALLOC, short form */
  uint32_t h_root;
  uint32_t h_object_parent;
  uint32_t h_object_new;
  uint32_t h_class;
  uint64_t p_alloc_parms; /* NvP64 */
  uint32_t params_size;
  uint32_t status;
} rm_nvos21;

typedef struct rm_nvos64 { /* NV_ESC_RM_ALLOC, with access rights */
  uint32_t h_root;
  uint32_t h_object_parent;
  uint32_t h_object_new;
  uint32_t h_class;
  uint64_t p_alloc_parms;
  uint64_t p_rights_requested;
  uint32_t params_size;
  uint32_t flags;
  uint32_t status;
  uint32_t pad;
} rm_nvos64;

typedef struct rm_nvos54 { /* NV_ESC_RM_CONTROL */
  uint32_t h_client;
  uint32_t h_object;
  uint32_t cmd;
  uint32_t flags;
  uint64_t params; /* NvP64 */
  uint32_t params_size;
  uint32_t status;
} rm_nvos54;

typedef struct rm_ioctl_xfer { /* nv_ioctl_xfer_t */
  uint32_t cmd;
  uint32_t size;
  uint64_t ptr;
} rm_ioctl_xfer;

/* NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS / NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS: NvBool x3. */
typedef struct rm_schedule_params {
  uint8_t enable;
  uint8_t skip_submit;
  uint8_t skip_enable;
} rm_schedule_params;

/* Leading fields of the alloc parameters we read. */
typedef struct rm_device_alloc { /* NV0080_ALLOC_PARAMETERS (prefix) */
  uint32_t device_id;
} rm_device_alloc;

typedef struct rm_tsg_alloc { /* NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS (prefix) */
  uint32_t h_object_error;
  uint32_t h_object_ecc_error;
  uint32_t h_va_space;
  uint32_t engine_type;
} rm_tsg_alloc;

/* NV_MEMORY_ALLOCATION_PARAMS: `size` sits at byte 64. */
#define RM_MEMORY_ALLOC_SIZE_OFFSET 64

_Static_assert(sizeof(rm_nvos00) == 16, "NVOS00 is 16 bytes");
_Static_assert(sizeof(rm_nvos21) == 32, "NVOS21 is 32 bytes");
_Static_assert(sizeof(rm_nvos64) == 48, "NVOS64 is 48 bytes");
_Static_assert(sizeof(rm_nvos54) == 32, "NVOS54 is 32 bytes");
_Static_assert(sizeof(rm_ioctl_xfer) == 16, "nv_ioctl_xfer_t is 16 bytes");
_Static_assert(sizeof(rm_schedule_params) == 3, "schedule params are 3 NvBools");
_Static_assert(offsetof(rm_nvos64, params_size) == 32, "NVOS64.paramsSize");
_Static_assert(offsetof(rm_nvos64, status) == 40, "NVOS64.status");
_Static_assert(offsetof(rm_nvos54, params) == 16, "NVOS54.params");
_Static_assert(offsetof(rm_tsg_alloc, engine_type) == 12, "TSG alloc engineType");

#define RM_IOCTL(nr, type) _IOWR(RM_IOCTL_MAGIC, nr, type)
#define RM_IOCTL_FREE RM_IOCTL(RM_ESC_FREE, rm_nvos00)
#define RM_IOCTL_ALLOC21 RM_IOCTL(RM_ESC_ALLOC, rm_nvos21)
#define RM_IOCTL_ALLOC64 RM_IOCTL(RM_ESC_ALLOC, rm_nvos64)
#define RM_IOCTL_CONTROL RM_IOCTL(RM_ESC_CONTROL, rm_nvos54)
#define RM_IOCTL_XFER RM_IOCTL(RM_ESC_IOCTL_XFER_CMD, rm_ioctl_xfer)

/* The request numbers as the Linux _IOWR encoding yields them. */
_Static_assert(RM_IOCTL_FREE == 0xC0104629u, "free ioctl number");
_Static_assert(RM_IOCTL_ALLOC21 == 0xC020462Bu, "alloc (NVOS21) ioctl number");
_Static_assert(RM_IOCTL_ALLOC64 == 0xC030462Bu, "alloc (NVOS64) ioctl number");
_Static_assert(RM_IOCTL_CONTROL == 0xC020462Au, "control ioctl number");
_Static_assert(RM_IOCTL_XFER == 0xC01046D3u, "xfer ioctl number");

/* Classes (class headers / g_allclasses.h). */
#define RM_CLASS_ROOT 0x0000u
#define RM_CLASS_ROOT_NON_PRIV 0x0001u
#define RM_CLASS_ROOT_CLIENT 0x0041u
#define RM_CLASS_MEMORY_LOCAL_USER 0x0040u
#define RM_CLASS_DEVICE 0x0080u
#define RM_CLASS_SUBDEVICE 0x2080u
#define RM_CLASS_CHANNEL_GROUP 0xA06Cu /* KEPLER_CHANNEL_GROUP_A */

/* Controls (ctrla06c.h / ctrla06f.h). */
#define RM_CTRL_TSG_GPFIFO_SCHEDULE 0xA06C0101u
#define RM_CTRL_TSG_SET_TIMESLICE 0xA06C0103u
#define RM_CTRL_TSG_PREEMPT 0xA06C0105u
#define RM_CTRL_CHANNEL_GPFIFO_SCHEDULE 0xA06F0103u

#define RM_STATUS_OK 0u

static inline int rm_is_root_class(uint32_t c) {
  return c == RM_CLASS_ROOT || c == RM_CLASS_ROOT_NON_PRIV || c == RM_CLASS_ROOT_CLIENT;
}

/* GPFIFO channel classes, Kepler to Blackwell. */
static inline int rm_is_gpfifo_class(uint32_t c) {
  switch (c) {
  case 0xA06Fu: /* KEPLER_CHANNEL_GPFIFO_A */
  case 0xA16Fu: /* KEPLER_CHANNEL_GPFIFO_B */
  case 0xA26Fu: /* KEPLER_CHANNEL_GPFIFO_C */
  case 0xB06Fu: /* MAXWELL_CHANNEL_GPFIFO_A */
  case 0xC06Fu: /* PASCAL_CHANNEL_GPFIFO_A */
  case 0xC36Fu: /* VOLTA_CHANNEL_GPFIFO_A */
  case 0xC46Fu: /* TURING_CHANNEL_GPFIFO_A */
  case 0xC56Fu: /* AMPERE_CHANNEL_GPFIFO_A */
  case 0xC86Fu: /* HOPPER_CHANNEL_GPFIFO_A */
  case 0xC96Fu: /* BLACKWELL_CHANNEL_GPFIFO_A */
  case 0xCA6Fu: /* BLACKWELL_CHANNEL_GPFIFO_B */
    return 1;
  default:
    return 0;
  }
}

/* A decoded RM request: what the ioctl hook needs to know about one call. */
enum rm_op { RM_OP_NONE = 0, RM_OP_ALLOC, RM_OP_FREE, RM_OP_CONTROL };

typedef struct rm_call {
  enum rm_op op;
  void *arg; /* the struct the driver reads (after unwrapping XFER) */
  uint32_t size;
} rm_call;

/* Classify an ioctl request on an nvidiactl fd. Pure; never dereferences `arg`
 * except to unwrap an XFER envelope. */
static inline rm_call rm_classify(unsigned long request, void *arg) {
  rm_call c = {RM_OP_NONE, arg, (uint32_t)_IOC_SIZE(request)};
  unsigned nr = _IOC_NR(request);
  if (nr == RM_ESC_IOCTL_XFER_CMD && c.size == sizeof(rm_ioctl_xfer) && arg != NULL) {
    const rm_ioctl_xfer *x = (const rm_ioctl_xfer *)arg;
    nr = x->cmd;
    c.size = x->size;
    c.arg = (void *)(uintptr_t)x->ptr;
  }
  if (c.arg == NULL)
    return c;
  if (nr == RM_ESC_ALLOC && (c.size == sizeof(rm_nvos21) || c.size == sizeof(rm_nvos64)))
    c.op = RM_OP_ALLOC;
  else if (nr == RM_ESC_FREE && c.size == sizeof(rm_nvos00))
    c.op = RM_OP_FREE;
  else if (nr == RM_ESC_CONTROL && c.size == sizeof(rm_nvos54))
    c.op = RM_OP_CONTROL;
  return c;
}

/* The common fields of an ALLOC in either form. */
typedef struct rm_alloc_view {
  uint32_t h_root, h_parent, h_new, h_class, params_size, status;
  uint64_t params;
} rm_alloc_view;

static inline rm_alloc_view rm_alloc_read(const rm_call *c) {
  rm_alloc_view v;
  if (c->size == sizeof(rm_nvos64)) {
    const rm_nvos64 *p = (const rm_nvos64 *)c->arg;
    v = (rm_alloc_view){p->h_root, p->h_object_parent, p->h_object_new, p->h_class,
                        p->params_size, p->status, p->p_alloc_parms};
  } else {
    const rm_nvos21 *p = (const rm_nvos21 *)c->arg;
    v = (rm_alloc_view){p->h_root, p->h_object_parent, p->h_object_new, p->h_class,
                        p->params_size, p->status, p->p_alloc_parms};
  }
  return v;
}

#endif /* GLEANER_RM_H */
