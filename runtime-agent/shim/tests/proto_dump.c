/* proto_dump.c - print every protocol constant and struct size, and the RM ABI facts,
 * one "NAME VALUE" per line, for tests/protocol/test_protocol_c_parity.py. */
#include <stdio.h>

#include "gleaner_proto.h"
#include "rm.h"

#define C(x) printf("%s %llu\n", #x, (unsigned long long)(x));
#define S(t) printf("sizeof:%s %zu\n", #t, sizeof(t));

int main(void) {
  /* Every constant and struct of the generated header (its X-macro lists). */
  GL_PROTO_CONSTANTS(C)
  GL_PROTO_STRUCTS(S)
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
