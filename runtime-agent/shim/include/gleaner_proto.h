/*
 * gleaner_proto.h - the agent <-> shim wire protocol (version 1).
 *
 * The single source of the protocol's numbers for C. The Python codec
 * (protocol/gleaner/protocol/wire.py) defines the same values; a test
 * (tests/protocol/test_protocol_c_parity.py) compiles a program that prints every
 * constant and size below and checks them against the codec.
 *
 * Transport: Unix SOCK_STREAM socket (the agent listens on $GLEANER_SOCKET,
 * default /run/gleaner/agent.sock). Every message is one frame: a 16-byte
 * little-endian header followed by `length` payload bytes. Payloads are the
 * fixed-layout little-endian structs below (variable ones: a fixed head plus
 * an array of fixed entries). A frame with GL_FLAG_HAS_FD was sent in one
 * sendmsg() carrying exactly one descriptor as SCM_RIGHTS ancillary data.
 * See docs/protocol.md.
 */
#ifndef GLEANER_PROTO_H
#define GLEANER_PROTO_H

#include <stdint.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gleaner protocol structs are sent as-is: little-endian hosts only"
#endif

#define GL_PROTO_MAGIC 0x524E4C47u /* bytes "GLNR" on the wire */
#define GL_PROTO_VERSION 1u
#define GL_HEADER_SIZE 16u
#define GL_MAX_PAYLOAD 65536u

/* Header flags. */
#define GL_FLAG_HAS_FD 0x0001u /* one fd rides along as SCM_RIGHTS */

/* Message types (header.type). Direction: S = shim/framework, A = agent. */
#define GL_MSG_HELLO 1u             /* S->A: who I am */
#define GL_MSG_HELLO_ACK 2u         /* A->S: accepted, initial gate state */
#define GL_MSG_CHANNEL_ADD 3u       /* S->A: a TSG / GPFIFO channel was allocated */
#define GL_MSG_CHANNEL_FREE 4u      /* S->A: ... was freed */
#define GL_MSG_ONLINE_BUSY 5u       /* S->A: online process turned busy */
#define GL_MSG_ONLINE_IDLE 6u       /* S->A: online process turned idle */
#define GL_MSG_DECODE_GAP 7u        /* S->A: gap between two decode iterations */
#define GL_MSG_GATE 8u              /* A->S: enable / disable offline channels */
#define GL_MSG_GATE_ACK 9u          /* S->A: result of a GATE */
#define GL_MSG_FD_REQUEST 10u       /* A->S: send me your nvidiactl fd */
#define GL_MSG_FD_PASS 11u          /* S->A: here it is (GL_FLAG_HAS_FD) */
#define GL_MSG_STATUS 12u           /* S->A: why the process waits gated, or ok */
#define GL_MSG_MEM_HANDLES 13u      /* S->A: memory handle table entries */
#define GL_MSG_INVALIDATE_BLOCKS 14u /* A->framework: KV blocks to recompute */
#define GL_MSG_HEARTBEAT 15u        /* both ways: liveness */
#define GL_MSG_ONLINE_MEMORY 16u    /* S->A: online KV bytes in use / reserved */
#define GL_MSG_OFFLINE_HANDLES 17u  /* offline hook->A: KV page handles and their blocks */
#define GL_MSG_RECLAIM 18u          /* A->offline shim: quarantine-remap and release pages */
#define GL_MSG_RECLAIM_ACK 19u      /* offline shim->A: result of a RECLAIM */
#define GL_MSG_RESTORE 20u          /* A->offline shim: back quarantined pages with fresh memory */
#define GL_MSG_RESTORE_ACK 21u      /* offline shim->A: result of a RESTORE */
#define GL_MSG_OFFLINE_PAGE_GROUPS 22u /* offline hook->A: KV page groups and their spans */
#define GL_MSG_MAX 22u

/* OFFLINE_HANDLES.flags */
#define GL_OFFLINE_HANDLES_RESET 0x0001u /* forget this GPU's table before adding */
/* OFFLINE_PAGE_GROUPS.flags: GL_OFFLINE_HANDLES_RESET. gl_page_group.gflags: */
#define GL_PAGE_GROUP_QUARANTINED 0x0001u /* reclaimed earlier, restorable; no spans */

/* HELLO.role */
#define GL_ROLE_OFFLINE 1u
#define GL_ROLE_ONLINE 2u
#define GL_ROLE_FRAMEWORK 3u /* the vLLM plugin: receives INVALIDATE_BLOCKS */

/* HELLO.caps bits */
#define GL_CAP_GATE_THREAD 0x0001u /* shim runs the schedule controls itself */
#define GL_CAP_FD_PASS 0x0002u     /* shim can hand its nvidiactl fd over */
#define GL_CAP_LAUNCH_HOOK 0x0004u /* launch entry points are intercepted */
#define GL_CAP_BUSY_TRACK 0x0008u  /* completion tracking is available */

/* HELLO_ACK.gate_mode */
#define GL_GATE_MODE_SHIM 0u  /* shim's control thread issues the controls */
#define GL_GATE_MODE_AGENT 1u /* agent issues them on the passed fd */

/* CHANNEL.kind */
#define GL_KIND_TSG 1u
#define GL_KIND_CHANNEL 2u

/* FD kinds */
#define GL_FD_NVIDIACTL 1u

/* STATUS.code */
#define GL_STATUS_OK 0u              /* running, gate open */
#define GL_STATUS_GATED_BY_AGENT 1u  /* agent disabled us: waiting */
#define GL_STATUS_NO_AGENT 2u        /* agent unreachable: fail closed */
#define GL_STATUS_NO_HANDLES 3u      /* no channel group found to gate */
#define GL_STATUS_CONTROL_REFUSED 4u /* the RM refused the schedule control */
#define GL_STATUS_PROTOCOL_ERROR 5u  /* agent spoke garbage: fail closed */

/* MEM_HANDLE entry flags */
#define GL_MEM_ADDED 1u
#define GL_MEM_FREED 2u

#define GL_GPU_UNKNOWN 0xFFFFFFFFu
#define GL_GPU_ALL 0xFFFFFFFFu
#define GL_MAX_GPUS 8u
#define GL_UUID_LEN 48u
#define GL_JOB_LEN 128u
#define GL_REASON_LEN 96u
#define GL_REQUEST_ID_LEN 64u

typedef struct gl_header {
  uint32_t magic;
  uint8_t version;
  uint8_t type;
  uint16_t flags;
  uint32_t length; /* payload bytes after the header */
  uint32_t seq;    /* sender's frame counter; replies echo nothing here */
} gl_header;

typedef struct gl_hello {
  uint32_t pid;
  uint8_t role;
  uint8_t ngpus;
  uint16_t caps;
  int32_t gpu_index[GL_MAX_GPUS];          /* -1: unknown / unused */
  char gpu_uuid[GL_MAX_GPUS][GL_UUID_LEN]; /* NUL-padded "GPU-..." */
  char job[GL_JOB_LEN];                    /* "<namespace>/<name>", NUL-padded */
} gl_hello;

typedef struct gl_hello_ack {
  uint32_t heartbeat_ms;
  uint8_t accepted;
  uint8_t gate_open; /* initial gate state for an offline process */
  uint8_t gate_mode; /* GL_GATE_MODE_* */
  uint8_t reserved;
  uint64_t reserved2;
} gl_hello_ack;

typedef struct gl_channel {
  uint32_t h_client;
  uint32_t h_parent;
  uint32_t h_object;
  uint32_t h_class;
  uint8_t kind; /* GL_KIND_* */
  uint8_t reserved[3];
  uint32_t gpu;         /* RM device instance, GL_GPU_UNKNOWN if unseen */
  uint32_t engine_type; /* TSG alloc engineType when parsed, else 0 */
  uint32_t reserved2;
} gl_channel;

typedef struct gl_online_edge {
  uint32_t gpu;
  uint32_t reserved;
  uint64_t mono_ns;    /* CLOCK_MONOTONIC of the transition */
  uint64_t request_id; /* 0: unknown */
} gl_online_edge;

typedef struct gl_decode_gap {
  uint32_t gpu;
  uint32_t reserved;
  uint64_t mono_ns; /* end of the gap */
  uint64_t gap_ns;
} gl_decode_gap;

typedef struct gl_gate {
  uint64_t gate_seq;
  uint32_t gpu; /* GL_GPU_ALL or one device instance */
  uint8_t enable;
  uint8_t reserved[3];
} gl_gate;

typedef struct gl_gate_ack {
  uint64_t gate_seq;
  uint64_t latency_ns; /* GATE received -> last control returned */
  uint32_t gpu;
  uint8_t enabled; /* gate state now */
  uint8_t ok;      /* every control succeeded (or nothing to control) */
  uint16_t n_objects;
  int32_t err;        /* errno of a failed ioctl, else 0 */
  uint32_t rm_status; /* first non-zero RM status, else 0 */
  uint32_t n_failed;
  uint32_t reserved;
} gl_gate_ack;

typedef struct gl_fd_request {
  uint32_t fd_kind;
  uint32_t reserved;
} gl_fd_request;

typedef struct gl_fd_pass {
  uint32_t fd_kind;
  uint32_t h_client; /* the RM client created on this fd (0 if none yet) */
  int32_t sender_fd; /* the fd number inside the shim's process */
  uint32_t reserved;
} gl_fd_pass;

typedef struct gl_status {
  uint32_t code; /* GL_STATUS_* */
  uint32_t gpu;
  uint64_t mono_ns;
  uint64_t blocked_ns; /* how long work has been held so far */
  uint32_t blocked_threads;
  uint32_t reserved;
  char reason[GL_REASON_LEN]; /* NUL-padded human-readable text */
} gl_status;

typedef struct gl_mem_handles {
  uint32_t count; /* gl_mem_handle entries that follow */
  uint32_t reserved;
} gl_mem_handles;

typedef struct gl_mem_handle {
  uint32_t h_client;
  uint32_t h_parent;
  uint32_t h_memory;
  uint32_t h_class;
  uint32_t gpu;
  uint32_t flags; /* GL_MEM_* */
  uint64_t size;  /* bytes, 0 if unknown */
} gl_mem_handle;

typedef struct gl_invalidate_blocks {
  char request_id[GL_REQUEST_ID_LEN]; /* NUL-padded framework request id */
  uint32_t count;                     /* uint32 block ids that follow */
  uint32_t reserved;
} gl_invalidate_blocks;

typedef struct gl_heartbeat {
  uint64_t mono_ns;
  uint32_t pid;
  uint32_t state; /* shim: 1 = gate open; agent: 0 */
} gl_heartbeat;

typedef struct gl_online_memory {
  uint32_t gpu; /* as in gl_online_edge */
  uint32_t reserved;
  uint64_t mono_ns;
  uint64_t kv_used_bytes;     /* KV cache bytes holding live blocks */
  uint64_t kv_reserved_bytes; /* KV cache bytes allocated (pool size) */
} gl_online_memory;

typedef struct gl_offline_handles {
  uint32_t gpu;
  uint32_t count; /* gl_handle_span entries follow, each with its block ids */
  uint32_t flags; /* GL_OFFLINE_HANDLES_* */
  uint32_t reserved;
} gl_offline_handles;

typedef struct gl_handle_span {
  uint64_t handle; /* the page's device virtual address (as mapped by cuMemMap) */
  uint64_t size;   /* page bytes */
  char request_id[GL_REQUEST_ID_LEN]; /* "" : the page holds no request's blocks */
  uint32_t tokens;  /* tokens the request recomputes if this page is lost */
  uint32_t nblocks; /* uint32 block ids that follow */
} gl_handle_span;

/* OFFLINE_PAGE_GROUPS: gl_page_groups, then count x (gl_page_group, npages x uint64 page
 * VA, nspans x (gl_group_span, nblocks x uint32 block id)). Every page of a group holds
 * every span of the group; records add to what the connection reported since the last
 * RESET (a page named in two records holds the union of their spans). */
typedef struct gl_page_groups {
  uint32_t gpu;
  uint32_t count; /* gl_page_group records follow */
  uint32_t flags; /* GL_OFFLINE_HANDLES_RESET */
  uint32_t reserved;
} gl_page_groups;

typedef struct gl_page_group {
  uint64_t page_bytes;
  uint32_t npages; /* uint64 page virtual addresses follow, then the spans */
  uint32_t nspans; /* gl_group_span records (0: empty pages, or quarantined) */
  uint32_t gflags; /* GL_PAGE_GROUP_* */
  uint32_t reserved;
} gl_page_group;

typedef struct gl_group_span {
  char request_id[GL_REQUEST_ID_LEN];
  uint32_t tokens;  /* tokens the request recomputes if any page of the group is lost */
  uint32_t nblocks; /* uint32 block ids (that request's blocks in these pages) follow */
} gl_group_span;

typedef struct gl_reclaim {
  uint64_t reclaim_seq;
  uint32_t gpu;
  uint32_t count; /* uint64 handles (page virtual addresses) follow */
} gl_reclaim;

typedef struct gl_reclaim_ack {
  uint64_t reclaim_seq;
  uint32_t gpu;
  uint32_t released; /* handles unmapped, quarantined and released */
  int32_t err;       /* errno or CUresult of the first failure, else 0 */
  uint8_t ok;
  uint8_t reserved[3];
} gl_reclaim_ack;

/* RESTORE has RECLAIM's layout (restore_seq, gpu, count, then uint64 page addresses);
 * RESTORE_ACK has RECLAIM_ACK's (the count field is the pages restored). */
typedef gl_reclaim gl_restore;
typedef gl_reclaim_ack gl_restore_ack;

_Static_assert(sizeof(gl_header) == GL_HEADER_SIZE, "header is 16 bytes");
_Static_assert(sizeof(gl_hello) == 552, "gl_hello");
_Static_assert(sizeof(gl_hello_ack) == 16, "gl_hello_ack");
_Static_assert(sizeof(gl_channel) == 32, "gl_channel");
_Static_assert(sizeof(gl_online_edge) == 24, "gl_online_edge");
_Static_assert(sizeof(gl_decode_gap) == 24, "gl_decode_gap");
_Static_assert(sizeof(gl_gate) == 16, "gl_gate");
_Static_assert(sizeof(gl_gate_ack) == 40, "gl_gate_ack");
_Static_assert(sizeof(gl_fd_request) == 8, "gl_fd_request");
_Static_assert(sizeof(gl_fd_pass) == 16, "gl_fd_pass");
_Static_assert(sizeof(gl_status) == 128, "gl_status");
_Static_assert(sizeof(gl_mem_handles) == 8, "gl_mem_handles");
_Static_assert(sizeof(gl_mem_handle) == 32, "gl_mem_handle");
_Static_assert(sizeof(gl_invalidate_blocks) == 72, "gl_invalidate_blocks");
_Static_assert(sizeof(gl_heartbeat) == 16, "gl_heartbeat");
_Static_assert(sizeof(gl_online_memory) == 32, "gl_online_memory");
_Static_assert(sizeof(gl_offline_handles) == 16, "gl_offline_handles");
_Static_assert(sizeof(gl_handle_span) == 88, "gl_handle_span");
_Static_assert(sizeof(gl_reclaim) == 16, "gl_reclaim");
_Static_assert(sizeof(gl_reclaim_ack) == 24, "gl_reclaim_ack");
_Static_assert(sizeof(gl_restore) == 16, "gl_restore");
_Static_assert(sizeof(gl_restore_ack) == 24, "gl_restore_ack");
_Static_assert(sizeof(gl_page_groups) == 16, "gl_page_groups");
_Static_assert(sizeof(gl_page_group) == 24, "gl_page_group");
_Static_assert(sizeof(gl_group_span) == 72, "gl_group_span");

#endif /* GLEANER_PROTO_H */
