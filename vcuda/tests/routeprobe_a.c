/* routeprobe_a.c - a library loaded after libvcuda that looks symbols up with RTLD_NEXT,
 * the way interposers and frameworks do. */
#include <dlfcn.h>

void *vcuda_probe_next(const char *name);
int vcuda_probe(void);

void *vcuda_probe_next(const char *name)
{
	void *volatile p = dlsym(RTLD_NEXT, name); /* not a tail call: RTLD_NEXT is relative
						      to the caller's return address */
	return p;
}

int vcuda_probe(void)
{
	return 1;
}
