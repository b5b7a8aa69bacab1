/* fake_globals.c - every global of the fake driver and fake NVML (one copy per library). */
#include "fake.h"
#include "fake_mps.h"

struct fk_globals fk = {
	.once = PTHREAD_ONCE_INIT,
	.allocs = VC_HTAB_INIT,
	.module_obj = FK_MAGIC,
	.function_obj = FK_MAGIC,
	.stream_obj = FK_MAGIC,
	.peek_mu = PTHREAD_MUTEX_INITIALIZER,
	.ctx_mu = PTHREAD_MUTEX_INITIALIZER,
};

__thread struct fk_ctx *fk_cur;
__thread CUstreamCaptureMode fk_capture_mode; /* 0: CU_STREAM_CAPTURE_MODE_GLOBAL, as CUDA starts a thread */

struct fk_mps_globals fkm = { .once = PTHREAD_ONCE_INIT };
