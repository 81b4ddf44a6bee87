/*
 * Calls whose C shape differs between the libfabric 1.x and 2.x headers, written once in C so the Rust side
 * never names a field that moved (fi_mr_attr.mr_iov sits in an anonymous union with dmabuf since 1.20) or an
 * option that an older header lacks. Each returns a libfabric error code (0 or -FI_E*); -FI_ENOSYS means "the
 * headers efatop was built against do not have this".
 */
#ifndef EFATOP_SHIM_H
#define EFATOP_SHIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

/* FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION) of the headers compiled in. */
uint32_t efatop_header_version(void);

/* fi_mr_regattr over one virtual-address range of `iface` memory (FI_HMEM_SYSTEM for host memory).
 * `device_only`: the memory is device memory the host cannot touch (cuMemAlloc, not managed), passed as
 * FI_HMEM_DEVICE_ONLY: shm uses its CUDA IPC protocol only for regions registered with it. */
int efatop_mr_reg_iov(struct fid_domain *domain, void *addr, size_t len, uint64_t access, uint64_t requested_key,
		      int iface, int device, bool device_only, struct fid_mr **mr);

/* fi_mr_regattr with FI_MR_DMABUF: `len` bytes at `offset` into the dma-buf `fd`, mapped at `base_addr`. */
int efatop_mr_reg_dmabuf(struct fid_domain *domain, int fd, uint64_t offset, size_t len, void *base_addr,
			 uint64_t access, uint64_t requested_key, int iface, int device, bool device_only,
			 struct fid_mr **mr);

/* fi_setopt(FI_OPT_ENDPOINT, ...) of a bool option, by efatop's own option number (below). */
int efatop_ep_set_bool(struct fid_ep *ep, int option, bool value);
/* fi_getopt(FI_OPT_ENDPOINT, ...) of a bool option, by efatop's own option number. */
int efatop_ep_get_bool(struct fid_ep *ep, int option, bool *value);

/* efatop's option numbers (stable across headers; the shim maps them to libfabric's). */
#define EFATOP_OPT_SHARED_MEMORY_PERMITTED 1
#define EFATOP_OPT_CUDA_API_PERMITTED 2
#define EFATOP_OPT_EFA_EMULATED_WRITE 3
#define EFATOP_OPT_EFA_USE_DEVICE_RDMA 4

#endif
