/*
 * routing.c - resolving the real driver/NVML entry points, cuInit and cuGetProcAddress.
 *
 * cuGetProcAddress(_v2): the real driver picks the versioned entry point for the name, CUDA
 * version and per-thread-stream flag; we then return the hook of exactly that entry point
 * (found by comparing the returned pointer with the real pointers we resolved by name). A
 * pointer we do not know for a name whose family we hook is refused rather than passed on.
 */

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "vcuda.h"

struct vc_hook {
	const char *name;
	void *hook;
	size_t real;
	int nvml;
};
extern const struct vc_hook vc_hooks[] VC_HIDDEN;
extern const size_t vc_nhooks VC_HIDDEN;
void *vc_dlsym_next(void) VC_HIDDEN;

static CUresult cuda_missing(void)
{
	return CUDA_ERROR_NOT_FOUND;
}

static nvmlReturn_t nvml_missing(void)
{
	return 13; /* NVML_ERROR_FUNCTION_NOT_FOUND */
}

static void **real_slot(const struct vc_hook *h)
{
	return (void **)((char *)&vcg.real + h->real);
}

int vc_resolve_real(char *err, size_t errlen)
{
	void *(*next)(void *, const char *) = (void *(*)(void *, const char *))vc_dlsym_next();
	vcg.cuda = dlopen("libcuda.so.1", RTLD_LAZY);
	if (!vcg.cuda) {
		snprintf(err, errlen, "cannot load the driver libcuda.so.1: %s", dlerror());
		return -1;
	}
	vcg.nvml = dlopen("libnvidia-ml.so.1", RTLD_LAZY);
	for (size_t i = 0; i < vc_nhooks; i++) {
		const struct vc_hook *h = &vc_hooks[i];
		void *lib = h->nvml ? vcg.nvml : vcg.cuda;
		void *p = lib ? next(lib, h->name) : NULL;
		if (!p)
			p = h->nvml ? (void *)nvml_missing : (void *)cuda_missing;
		*real_slot(h) = p;
	}
	return 0;
}

void *vc_hook_by_name(const char *name)
{
	for (size_t i = 0; i < vc_nhooks; i++)
		if (vc_hooks[i].hook && strcmp(vc_hooks[i].name, name) == 0)
			return vc_hooks[i].hook;
	return NULL;
}

/* length of name without _v2/_v3/_ptsz/_ptds suffixes */
static size_t base_len(const char *s)
{
	static const char *const sfx[] = { "_v2", "_v3", "_ptsz", "_ptds" };
	size_t n = strlen(s);
	for (int again = 1; again;) {
		again = 0;
		for (size_t k = 0; k < sizeof(sfx) / sizeof(sfx[0]); k++) {
			size_t m = strlen(sfx[k]);
			if (n > m && strncmp(s + n - m, sfx[k], m) == 0) {
				n -= m;
				again = 1;
			}
		}
	}
	return n;
}

static int hooked_family(const char *sym)
{
	size_t n = base_len(sym);
	for (size_t i = 0; i < vc_nhooks; i++) {
		const char *h = vc_hooks[i].name;
		if (vc_hooks[i].hook && !vc_hooks[i].nvml && base_len(h) == n && strncmp(h, sym, n) == 0)
			return 1;
	}
	return 0;
}

static CUresult route_proc(const char *sym, void **pfn, CUresult rc)
{
	if (rc != CUDA_SUCCESS || !pfn || !*pfn)
		return rc;
	for (size_t i = 0; i < vc_nhooks; i++) {
		const struct vc_hook *h = &vc_hooks[i];
		if (h->hook && !h->nvml && *real_slot(h) == *pfn) {
			*pfn = h->hook;
			return rc;
		}
	}
	/* not a pointer we resolved: the exported symbol it is exactly, if any */
	Dl_info di;
	if (dladdr(*pfn, &di) && di.dli_sname && di.dli_saddr == *pfn) {
		void *hook = vc_hook_by_name(di.dli_sname);
		if (hook) {
			*pfn = hook;
			return rc;
		}
	}
	if (sym && hooked_family(sym)) {
		vc_say_once(VC_MSG_ROUTING, "vcuda: cuGetProcAddress(\"%s\") returned an entry point "
			    "vcuda does not know; refused (it would bypass the limits)", sym);
		*pfn = NULL;
		return CUDA_ERROR_NOT_FOUND;
	}
	return rc;
}

VC_EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags)
{
	CUresult rc = vc_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	return route_proc(sym, pfn, REAL(cuGetProcAddress)(sym, pfn, ver, flags));
}

VC_EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags,
				       CUdriverProcAddressQueryResult *status)
{
	CUresult rc = vc_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	return route_proc(sym, pfn, REAL(cuGetProcAddress_v2)(sym, pfn, ver, flags, status));
}

VC_EXPORT CUresult cuInit(unsigned int flags)
{
	CUresult rc = vc_enter();
	if (rc != CUDA_SUCCESS)
		return rc;
	vc_mps_apply(); /* again: the process may have edited its environment since */
	rc = REAL(cuInit)(flags);
	return rc == CUDA_SUCCESS ? vc_cuda_map() : rc;
}
