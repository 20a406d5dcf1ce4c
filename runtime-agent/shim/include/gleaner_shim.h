/*
 * gleaner_shim.h - the functions libgleaner_shim.so exports for an in-process framework
 * hook (docs/shim.md, "The KV-cache allocator"; /work contract: "Shim C API").
 *
 * gleaner_kv_malloc / gleaner_kv_free have the signatures of PyTorch's
 * CUDAPluggableAllocator entry points. Every page of a KV allocation is a VMM page the
 * agent can RECLAIM (it is then "quarantined": the shared quarantine allocation is mapped
 * there) and RESTORE (backed by fresh memory again). All functions are thread-safe.
 */
#ifndef GLEANER_SHIM_H
#define GLEANER_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GLEANER_KV_PAGE_BACKED 0
#define GLEANER_KV_PAGE_QUARANTINED 1

/* Reserve `size` bytes (rounded up to whole pages) of device `device`'s address space and
 * back every page with its own allocation; NULL on failure (nothing is left behind). */
void *gleaner_kv_malloc(ssize_t size, int device, void *stream);
/* Unmap and release every page of an allocation made by gleaner_kv_malloc; free its
 * addresses. Unknown pointers are ignored (and logged). */
void gleaner_kv_free(void *ptr, ssize_t size, int device, void *stream);
/* Page size: GLEANER_KV_PAGE_BYTES (default 2 MiB), rounded up to the device's allocation
 * granularity once the first allocation learned it. */
size_t gleaner_kv_page_bytes(void);
/* Bumped on every page state change: allocation, free, reclaim, restore. */
uint64_t gleaner_kv_generation(void);
/* The pages of live allocations in address order: va[i], state[i] (GLEANER_KV_PAGE_*).
 * Fills at most `cap` entries (either array may be NULL); returns the total count. */
size_t gleaner_kv_pages(uint64_t *va, uint8_t *state, size_t cap);
/* Per page, in gleaner_kv_pages' order: how many times it was reclaimed (its epoch; 0 for a
 * page never reclaimed). A page reclaimed and restored between two reads shows a moved epoch
 * although its state is the same. Fills at most `cap` entries (`epoch` may be NULL);
 * returns the total count. */
size_t gleaner_kv_page_epochs(uint32_t *epoch, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* GLEANER_SHIM_H */
