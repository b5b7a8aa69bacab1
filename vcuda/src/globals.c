/* globals.c - every global of libvcuda.so lives here, in one struct. */
#include "vcuda.h"

struct vc_globals vcg = {
	.once = PTHREAD_ONCE_INIT,
	.map_mu = PTHREAD_MUTEX_INITIALIZER,
	.ctx_mu = PTHREAD_MUTEX_INITIALIZER,
	.slot = -1,
	.slots_fd = -1,
	.allocs = VC_HTAB_INIT,
	.graphs = VC_HTAB_INIT,
};
