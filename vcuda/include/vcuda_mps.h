/*
 * vcuda_mps.h - the MPS variables libvcuda sets from the limiter config (pure functions, so
 * that tests call them directly; src/mps.c applies them to the environment).
 *
 * In MPS mode (config mps_thread_percent > 0) a process gets:
 *   CUDA_MPS_PIPE_DIRECTORY            VCUDA_MPS_PIPE_DIR, always (the node's daemon is there)
 *   CUDA_MPS_ACTIVE_THREAD_PERCENTAGE  the config's percentage, or the process's own value
 *                                      where that is a lower valid number (lower, never raise)
 *   CUDA_MPS_PINNED_DEVICE_MEM_LIMIT   "<ordinal>=<MiB>M" per config device (ordinal = its
 *                                      position: an MPS container has one GPU), or the
 *                                      process's own value for a device where it is lower
 * The device plugin sets the same values in the container's environment; libvcuda sets them
 * again before the driver reads them (first CUDA call, and cuInit), so a process that edited
 * its environment is held to its container's share.
 */
#ifndef VCUDA_MPS_H
#define VCUDA_MPS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vcuda_config.h"

#define VCUDA_MPS_PIPE_DIR "/run/volcano-vgpu/mps"
#define VCUDA_ENV_MPS_PIPE "CUDA_MPS_PIPE_DIRECTORY"
#define VCUDA_ENV_MPS_THREADS "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
#define VCUDA_ENV_MPS_PINNED "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"

/* The percentage to set: cfg, or cur where cur is a number in (0, cfg). */
static inline double vcuda_mps_threads(unsigned cfg, const char *cur)
{
	if (cur && *cur) {
		char *end;
		double v = strtod(cur, &end);
		if (end != cur && *end == '\0' && v > 0 && v < (double)cfg)
			return v;
	}
	return (double)cfg;
}

/* The limit in MiB the process's own CUDA_MPS_PINNED_DEVICE_MEM_LIMIT gives ordinal, or 0
 * where it names none (or names it in a form we do not read). Units: M or G (MPS's). */
static inline unsigned long long vcuda_mps_pinned_of(const char *cur, unsigned ordinal)
{
	if (!cur)
		return 0;
	const char *p = cur;
	while (*p) {
		char *end;
		unsigned long ord = strtoul(p, &end, 10);
		if (end == p || *end != '=')
			return 0;
		p = end + 1;
		unsigned long long v = strtoull(p, &end, 10);
		if (end == p)
			return 0;
		unsigned long long mib = 0;
		if (*end == 'M' || *end == 'm')
			mib = v;
		else if (*end == 'G' || *end == 'g')
			mib = v << 10;
		else
			return 0;
		p = end + 1;
		if (ord == ordinal)
			return mib;
		if (*p == ',')
			p++;
		else if (*p)
			return 0;
	}
	return 0;
}

/* Renders CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for c into out. Returns 0, or -1 if out is short. */
static inline int vcuda_mps_pinned(const struct vcuda_config *c, const char *cur, char *out,
				   size_t outlen)
{
	size_t n = 0;
	out[0] = '\0';
	for (unsigned i = 0; i < c->device_count && i < VCUDA_MAX_DEVICES; i++) {
		unsigned long long mib = c->devices[i].memory_limit >> 20;
		unsigned long long own = vcuda_mps_pinned_of(cur, i);
		if (own > 0 && own < mib)
			mib = own;
		int w = snprintf(out + n, outlen - n, "%s%u=%lluM", i ? "," : "", i, mib);
		if (w < 0 || (size_t)w >= outlen - n)
			return -1;
		n += (size_t)w;
	}
	return 0;
}

#endif
