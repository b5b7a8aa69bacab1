/* mps.c - sets the MPS variables of a process on an MPS GPU (include/vcuda_mps.h). */
#include <stdio.h>
#include <stdlib.h>

#include "vcuda.h"
#include "../include/vcuda_mps.h"

void vc_mps_apply(void)
{
	const struct vcuda_config *c = &vcg.cfg;
	if (!c->mps_thread_percent)
		return;
	char pct[32], pinned[VCUDA_MAX_DEVICES * 32];
	snprintf(pct, sizeof(pct), "%g",
		 vcuda_mps_threads(c->mps_thread_percent, getenv(VCUDA_ENV_MPS_THREADS)));
	setenv(VCUDA_ENV_MPS_PIPE, VCUDA_MPS_PIPE_DIR, 1);
	setenv(VCUDA_ENV_MPS_THREADS, pct, 1);
	if (vcuda_mps_pinned(c, getenv(VCUDA_ENV_MPS_PINNED), pinned, sizeof(pinned)) == 0)
		setenv(VCUDA_ENV_MPS_PINNED, pinned, 1);
}
