/* proto_dump.c - print every protocol constant and struct size, and the RM ABI facts,
 * one "NAME VALUE" per line, for tests/protocol/test_protocol_c_parity.py. */
#include <stdio.h>

#include "gleaner_proto.h"
#include "rm.h"

#define C(x) printf("%s %llu\n", #x, (unsigned long long)(x))
#define S(t) printf("sizeof:%s %zu\n", #t, sizeof(t))

int main(void) {
  C(GL_PROTO_MAGIC); C(GL_PROTO_VERSION); C(GL_HEADER_SIZE); C(GL_MAX_PAYLOAD);
  C(GL_FLAG_HAS_FD);
  C(GL_MSG_HELLO); C(GL_MSG_HELLO_ACK); C(GL_MSG_CHANNEL_ADD); C(GL_MSG_CHANNEL_FREE);
  C(GL_MSG_ONLINE_BUSY); C(GL_MSG_ONLINE_IDLE); C(GL_MSG_DECODE_GAP); C(GL_MSG_GATE);
  C(GL_MSG_GATE_ACK); C(GL_MSG_FD_REQUEST); C(GL_MSG_FD_PASS); C(GL_MSG_STATUS);
  C(GL_MSG_MEM_HANDLES); C(GL_MSG_INVALIDATE_BLOCKS); C(GL_MSG_HEARTBEAT); C(GL_MSG_MAX);
  C(GL_MSG_ONLINE_MEMORY); C(GL_MSG_OFFLINE_HANDLES); C(GL_MSG_RECLAIM); C(GL_MSG_RECLAIM_ACK);
  C(GL_MSG_RESTORE); C(GL_MSG_RESTORE_ACK); C(GL_MSG_OFFLINE_PAGE_GROUPS);
  C(GL_OFFLINE_HANDLES_RESET); C(GL_PAGE_GROUP_QUARANTINED);
  C(GL_ROLE_OFFLINE); C(GL_ROLE_ONLINE); C(GL_ROLE_FRAMEWORK);
  C(GL_CAP_GATE_THREAD); C(GL_CAP_FD_PASS); C(GL_CAP_LAUNCH_HOOK); C(GL_CAP_BUSY_TRACK);
  C(GL_GATE_MODE_SHIM); C(GL_GATE_MODE_AGENT); C(GL_KIND_TSG); C(GL_KIND_CHANNEL);
  C(GL_FD_NVIDIACTL);
  C(GL_STATUS_OK); C(GL_STATUS_GATED_BY_AGENT); C(GL_STATUS_NO_AGENT); C(GL_STATUS_NO_HANDLES);
  C(GL_STATUS_CONTROL_REFUSED); C(GL_STATUS_PROTOCOL_ERROR);
  C(GL_MEM_ADDED); C(GL_MEM_FREED); C(GL_GPU_UNKNOWN); C(GL_GPU_ALL); C(GL_MAX_GPUS);
  C(GL_UUID_LEN); C(GL_JOB_LEN); C(GL_REASON_LEN); C(GL_REQUEST_ID_LEN);
  S(gl_header); S(gl_hello); S(gl_hello_ack); S(gl_channel); S(gl_online_edge);
  S(gl_decode_gap); S(gl_gate); S(gl_gate_ack); S(gl_fd_request); S(gl_fd_pass);
  S(gl_status); S(gl_mem_handles); S(gl_mem_handle); S(gl_invalidate_blocks); S(gl_heartbeat);
  S(gl_online_memory); S(gl_offline_handles); S(gl_handle_span); S(gl_reclaim);
  S(gl_reclaim_ack); S(gl_restore); S(gl_restore_ack); S(gl_page_groups); S(gl_page_group);
  S(gl_group_span);
  /* RM ABI */
  printf("rm:sizeof:NVOS00 %zu\n", sizeof(rm_nvos00));
  printf("rm:sizeof:NVOS21 %zu\n", sizeof(rm_nvos21));
  printf("rm:sizeof:NVOS64 %zu\n", sizeof(rm_nvos64));
  printf("rm:sizeof:NVOS54 %zu\n", sizeof(rm_nvos54));
  printf("rm:ioctl:FREE 0x%lx\n", (unsigned long)RM_IOCTL_FREE);
  printf("rm:ioctl:ALLOC21 0x%lx\n", (unsigned long)RM_IOCTL_ALLOC21);
  printf("rm:ioctl:ALLOC64 0x%lx\n", (unsigned long)RM_IOCTL_ALLOC64);
  printf("rm:ioctl:CONTROL 0x%lx\n", (unsigned long)RM_IOCTL_CONTROL);
  printf("rm:ctrl:TSG_SCHEDULE 0x%x\n", RM_CTRL_TSG_GPFIFO_SCHEDULE);
  printf("rm:ctrl:CHANNEL_SCHEDULE 0x%x\n", RM_CTRL_CHANNEL_GPFIFO_SCHEDULE);
  return 0;
}
