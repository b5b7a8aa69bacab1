/*
 * dlsym.c - our dlsym, and the table of hooks it routes to.
 *
 * dlsym(any handle, "cu..."/"nvml...") returns our hook when we hook that exact name, so
 * neither dlsym(RTLD_NEXT, ...) nor dlsym(dlopen("libcuda.so.1"), ...) reaches the driver
 * around us. Every other lookup goes to the next dlsym with the caller's return address
 * intact (a tail jump on x86-64), so RTLD_NEXT keeps meaning "next after the caller".
 *
 * Built without sanitizers and with no libc calls before the jump: sanitizer runtimes call
 * dlsym while they start, before any of their instrumentation could work.
 */

#include <dlfcn.h>
#include <stddef.h>

#include "vcuda.h"

struct vc_hook {
	const char *name;
	void *hook;     /* NULL: only called, never hooked */
	size_t real;    /* offset of the real pointer in struct vc_real */
	int nvml;
};

#define H_CUDA(n) { #n, (void *)n, offsetof(struct vc_real, n), 0 },
#define H_NVML(n) { #n, (void *)n, offsetof(struct vc_real, n), 1 },
#define C_CUDA(n) { #n, NULL, offsetof(struct vc_real, n), 0 },
#define C_NVML(n) { #n, NULL, offsetof(struct vc_real, n), 1 },

/* read-only table (no state); routing.c walks it too */
VC_HIDDEN const struct vc_hook vc_hooks[] = {
	VC_CUDA_HOOKS(H_CUDA) VC_NVML_HOOKS(H_NVML) VC_CUDA_CALLS(C_CUDA) VC_NVML_CALLS(C_NVML)
};
VC_HIDDEN const size_t vc_nhooks = sizeof(vc_hooks) / sizeof(vc_hooks[0]);

static int same(const char *a, const char *b)
{
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}

VC_HIDDEN void *vc_dlsym_route(void *handle, const char *name)
{
	(void)handle;
	if (!name || !((name[0] == 'c' && name[1] == 'u') ||
		       (name[0] == 'n' && name[1] == 'v' && name[2] == 'm' && name[3] == 'l')))
		return NULL;
	for (size_t i = 0; i < vc_nhooks; i++)
		if (vc_hooks[i].hook && same(vc_hooks[i].name, name))
			return vc_hooks[i].hook;
	return NULL;
}

static void *no_dlsym(void *h, const char *n)
{
	(void)h, (void)n;
	return NULL;
}

/* The dlsym after ours (libc's); looked up with dlvsym, which we do not override. */
VC_HIDDEN void *vc_dlsym_next(void)
{
	void *p = __atomic_load_n(&vcg.next_dlsym, __ATOMIC_ACQUIRE);
	if (p)
		return p;
	p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
	if (!p)
		p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	if (!p)
		p = (void *)no_dlsym;
	__atomic_store_n(&vcg.next_dlsym, p, __ATOMIC_RELEASE);
	return p;
}

#if defined(__x86_64__)
/* dlsym(handle, name): try the route; else restore the arguments and jump (not call) to the
 * next dlsym, so it sees our caller's return address. Stack stays 16-byte aligned at calls. */
__asm__(".text\n"
	".globl dlsym\n"
	".type dlsym,@function\n"
	"dlsym:\n"
	"	.cfi_startproc\n"
	"	endbr64\n"
	"	pushq %rdi\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	pushq %rsi\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	subq $8, %rsp\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	call vc_dlsym_route\n"
	"	testq %rax, %rax\n"
	"	jnz 1f\n"
	"	call vc_dlsym_next\n"
	"	addq $8, %rsp\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	popq %rsi\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	popq %rdi\n"
	"	.cfi_adjust_cfa_offset -8\n"
	"	jmp *%rax\n"
	"1:\n"
	"	.cfi_adjust_cfa_offset 24\n"
	"	addq $24, %rsp\n"
	"	.cfi_adjust_cfa_offset -24\n"
	"	ret\n"
	"	.cfi_endproc\n"
	".size dlsym, .-dlsym\n");
#else
/* Portable fallback: correct for hooked names; RTLD_NEXT lookups of other names resolve
 * relative to libvcuda instead of the caller. */
VC_EXPORT void *dlsym(void *handle, const char *name)
{
	void *p = vc_dlsym_route(handle, name);
	if (p)
		return p;
	return ((void *(*)(void *, const char *))vc_dlsym_next())(handle, name);
}
#endif
