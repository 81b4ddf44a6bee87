/* See efatop_shim.h. */
#include "efatop_shim.h"

#include <string.h>
#include <sys/uio.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext.h>

#define EFATOP_HEADER_VERSION FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)

uint32_t efatop_header_version(void)
{
	return EFATOP_HEADER_VERSION;
}

/* FI_HMEM_DEVICE_ONLY where asked for and the headers have it (all 1.17+ do). */
static uint64_t device_only_flag(bool device_only)
{
#ifdef FI_HMEM_DEVICE_ONLY
	return device_only ? FI_HMEM_DEVICE_ONLY : 0;
#else
	(void)device_only;
	return 0;
#endif
}

static void set_device(struct fi_mr_attr *attr, int iface, int device)
{
	attr->iface = (enum fi_hmem_iface)iface;
	if (iface == FI_HMEM_CUDA)
		attr->device.cuda = device;
}

int efatop_mr_reg_iov(struct fid_domain *domain, void *addr, size_t len, uint64_t access, uint64_t requested_key,
		      int iface, int device, bool device_only, struct fid_mr **mr)
{
	struct iovec iov = { .iov_base = addr, .iov_len = len };
	struct fi_mr_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.mr_iov = &iov;
	attr.iov_count = 1;
	attr.access = access;
	attr.requested_key = requested_key;
	set_device(&attr, iface, device);
	return fi_mr_regattr(domain, &attr, device_only_flag(device_only), mr);
}

int efatop_mr_reg_dmabuf(struct fid_domain *domain, int fd, uint64_t offset, size_t len, void *base_addr,
			 uint64_t access, uint64_t requested_key, int iface, int device, bool device_only,
			 struct fid_mr **mr)
{
#if FI_VERSION_GE(EFATOP_HEADER_VERSION, FI_VERSION(1, 20))
	struct fi_mr_dmabuf dmabuf = { .fd = fd, .offset = offset, .len = len, .base_addr = base_addr };
	struct fi_mr_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.dmabuf = &dmabuf;
	attr.iov_count = 1;
	attr.access = access;
	attr.requested_key = requested_key;
	set_device(&attr, iface, device);
	return fi_mr_regattr(domain, &attr, FI_MR_DMABUF | device_only_flag(device_only), mr);
#else
	(void)domain; (void)fd; (void)offset; (void)len; (void)base_addr; (void)access;
	(void)requested_key; (void)iface; (void)device; (void)device_only; (void)mr;
	return -FI_ENOSYS;
#endif
}

/* libfabric's option number for one of efatop's, or 0 when these headers lack it. */
static int option_name(int option, int *name)
{
	switch (option) {
#if FI_VERSION_GE(EFATOP_HEADER_VERSION, FI_VERSION(1, 18))
	case EFATOP_OPT_SHARED_MEMORY_PERMITTED:
		*name = FI_OPT_SHARED_MEMORY_PERMITTED;
		return 1;
	case EFATOP_OPT_CUDA_API_PERMITTED:
		*name = FI_OPT_CUDA_API_PERMITTED;
		return 1;
	case EFATOP_OPT_EFA_EMULATED_WRITE:
		*name = FI_OPT_EFA_EMULATED_WRITE;
		return 1;
	case EFATOP_OPT_EFA_USE_DEVICE_RDMA:
		*name = FI_OPT_EFA_USE_DEVICE_RDMA;
		return 1;
#endif
	default:
		return 0;
	}
}

int efatop_ep_set_bool(struct fid_ep *ep, int option, bool value)
{
	int name;

	if (!option_name(option, &name))
		return -FI_ENOSYS;
	return fi_setopt(&ep->fid, FI_OPT_ENDPOINT, name, &value, sizeof(value));
}

int efatop_ep_get_bool(struct fid_ep *ep, int option, bool *value)
{
	int name;
	size_t len = sizeof(*value);

	if (!option_name(option, &name))
		return -FI_ENOSYS;
	return fi_getopt(&ep->fid, FI_OPT_ENDPOINT, name, value, &len);
}
