/*
 * vcuda_config.h - the limiter config file layout (one per container, read-only mount).
 *
 * Written by the device plugin (Go mirror: api/limiterconfig.go, checked byte for byte
 * against this header by api/limiterconfig_test.go), read once by libvcuda.so.
 * Little-endian, fixed size, no pointers. Every string is NUL-terminated inside its array
 * and zero-padded after the NUL. devices[i] for i >= device_count is all zero.
 * crc32 is CRC-32/IEEE (the zlib/Go hash/crc32 one) of every byte before it.
 *
 * Header-only on purpose: the Go cross-check compiles a tiny C program with just this file.
 */
#ifndef VCUDA_CONFIG_H
#define VCUDA_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define VCUDA_CONFIG_MAGIC 0x47464356u /* bytes "VCFG" */
#define VCUDA_CONFIG_VERSION 1u
#define VCUDA_CONFIG_DEFAULT_PATH "/etc/vcuda/vcuda.config"
#define VCUDA_MAX_DEVICES 16
#define VCUDA_UUID_LEN 64
#define VCUDA_NAME_LEN 64
#define VCUDA_POD_NAME_LEN 256
#define VCUDA_PATH_LEN 256

enum vcuda_policy {
	VCUDA_POLICY_NONE = 0,    /* no compute limit */
	VCUDA_POLICY_FIXED = 1,   /* hard cap at core_percent */
	VCUDA_POLICY_BALANCE = 2, /* guaranteed core_percent, bursts while the GPU is otherwise idle */
};

struct vcuda_config_device {
	char uuid[VCUDA_UUID_LEN]; /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" or "MIG-..." */
	uint64_t memory_limit;     /* bytes, > 0 */
	uint32_t core_percent;     /* 1..100 */
	/* MiB the driver takes for each CUDA context a process opens on this GPU (measured per
	 * GPU model by the node), counted against memory_limit; 0 = not counted. */
	uint32_t context_mib;
};

struct vcuda_config {
	uint32_t magic;        /* VCUDA_CONFIG_MAGIC */
	uint32_t version;      /* VCUDA_CONFIG_VERSION */
	uint32_t size;         /* sizeof(struct vcuda_config) */
	uint32_t policy;       /* enum vcuda_policy */
	uint32_t device_count; /* 1..VCUDA_MAX_DEVICES */
	/* 0: the GPUs are time-sliced. 1..100: the container's GPU is in MPS mode; libvcuda sets
	 * CUDA_MPS_ACTIVE_THREAD_PERCENTAGE to it (a process may lower it, never raise it) and
	 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT from memory_limit. */
	uint32_t mps_thread_percent;
	char pod_uid[VCUDA_NAME_LEN];
	char pod_namespace[VCUDA_NAME_LEN];
	char pod_name[VCUDA_POD_NAME_LEN];
	char container_name[VCUDA_NAME_LEN];
	char shared_dir[VCUDA_PATH_LEN]; /* absolute; per-container, writable by every process */
	struct vcuda_config_device devices[VCUDA_MAX_DEVICES];
	uint32_t reserved_tail; /* 0 */
	uint32_t crc32;         /* CRC-32/IEEE of bytes [0, offsetof(crc32)) */
};

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "config layout is little-endian");
_Static_assert(sizeof(struct vcuda_config_device) == 80, "device entry is 80 bytes");
_Static_assert(offsetof(struct vcuda_config_device, memory_limit) == 64, "memory_limit at 64");
_Static_assert(offsetof(struct vcuda_config_device, core_percent) == 72, "core_percent at 72");
_Static_assert(offsetof(struct vcuda_config_device, context_mib) == 76, "context_mib at 76");
_Static_assert(offsetof(struct vcuda_config, policy) == 12, "policy at 12");
_Static_assert(offsetof(struct vcuda_config, mps_thread_percent) == 20, "mps_thread_percent at 20");
_Static_assert(offsetof(struct vcuda_config, pod_uid) == 24, "pod_uid at 24");
_Static_assert(offsetof(struct vcuda_config, pod_namespace) == 88, "pod_namespace at 88");
_Static_assert(offsetof(struct vcuda_config, pod_name) == 152, "pod_name at 152");
_Static_assert(offsetof(struct vcuda_config, container_name) == 408, "container_name at 408");
_Static_assert(offsetof(struct vcuda_config, shared_dir) == 472, "shared_dir at 472");
_Static_assert(offsetof(struct vcuda_config, devices) == 728, "devices at 728");
_Static_assert(offsetof(struct vcuda_config, reserved_tail) == 2008, "reserved_tail at 2008");
_Static_assert(offsetof(struct vcuda_config, crc32) == 2012, "crc32 at 2012");
_Static_assert(sizeof(struct vcuda_config) == 2016, "config is 2016 bytes");

static inline uint32_t vcuda_crc32(const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint32_t crc = 0xFFFFFFFFu;
	for (size_t i = 0; i < len; i++) {
		crc ^= p[i];
		for (int k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
	}
	return ~crc;
}

static inline void vcuda_config_seal(struct vcuda_config *c)
{
	c->crc32 = vcuda_crc32(c, offsetof(struct vcuda_config, crc32));
}

static inline int vcuda_hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* Parses "GPU-" or "MIG-" + 8-4-4-4-12 hex digits into 16 bytes. Returns 0 on success. */
static inline int vcuda_uuid_parse(const char *s, unsigned char out[16])
{
	if (strncmp(s, "GPU-", 4) != 0 && strncmp(s, "MIG-", 4) != 0)
		return -1;
	s += 4;
	int n = 0;
	for (int i = 0; i < 36; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i] != '-')
				return -1;
			continue;
		}
		int hi = vcuda_hexval(s[i]);
		if (hi < 0)
			return -1;
		if (n % 2 == 0)
			out[n / 2] = (unsigned char)(hi << 4);
		else
			out[n / 2] |= (unsigned char)hi;
		n++;
	}
	return s[36] == '\0' ? 0 : -1;
}

/* A fixed string field: NUL inside, zero after the NUL; required fields non-empty. */
static inline int vcuda_field_ok(const char *f, size_t n, int required, const char *name,
				 char *err, size_t errlen)
{
	const char *nul = memchr(f, '\0', n);
	if (!nul) {
		snprintf(err, errlen, "%s: not NUL-terminated within %zu bytes", name, n);
		return 0;
	}
	for (const char *p = nul; p < f + n; p++) {
		if (*p) {
			snprintf(err, errlen, "%s: want zero padding after the string", name);
			return 0;
		}
	}
	if (required && nul == f) {
		snprintf(err, errlen, "%s: want a non-empty string", name);
		return 0;
	}
	return 1;
}

static inline int vcuda_all_zero(const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

/* Checks everything the Go Validate checks, in the same order. 0 = valid; else err says
 * which field and what was expected. */
static inline int vcuda_config_validate(const struct vcuda_config *c, char *err, size_t errlen)
{
	if (c->magic != VCUDA_CONFIG_MAGIC) {
		snprintf(err, errlen, "magic: got 0x%08x, want 0x%08x (not a vcuda config)",
			 c->magic, VCUDA_CONFIG_MAGIC);
		return -1;
	}
	if (c->version != VCUDA_CONFIG_VERSION) {
		snprintf(err, errlen, "version: got %u, want %u", c->version, VCUDA_CONFIG_VERSION);
		return -1;
	}
	if (c->size != sizeof(*c)) {
		snprintf(err, errlen, "size: got %u, want %zu", c->size, sizeof(*c));
		return -1;
	}
	uint32_t crc = vcuda_crc32(c, offsetof(struct vcuda_config, crc32));
	if (c->crc32 != crc) {
		snprintf(err, errlen, "crc32: got 0x%08x, want 0x%08x (file corrupt)", c->crc32, crc);
		return -1;
	}
	if (c->policy > VCUDA_POLICY_BALANCE) {
		snprintf(err, errlen, "policy: got %u, want 0 (none), 1 (fixed) or 2 (balance)",
			 c->policy);
		return -1;
	}
	if (c->device_count < 1 || c->device_count > VCUDA_MAX_DEVICES) {
		snprintf(err, errlen, "device_count: got %u, want 1..%d", c->device_count,
			 VCUDA_MAX_DEVICES);
		return -1;
	}
	if (c->reserved_tail) {
		snprintf(err, errlen, "reserved: want 0");
		return -1;
	}
	if (!vcuda_field_ok(c->pod_uid, sizeof(c->pod_uid), 1, "pod_uid", err, errlen) ||
	    !vcuda_field_ok(c->pod_namespace, sizeof(c->pod_namespace), 1, "pod_namespace", err,
			    errlen) ||
	    !vcuda_field_ok(c->pod_name, sizeof(c->pod_name), 1, "pod_name", err, errlen) ||
	    !vcuda_field_ok(c->container_name, sizeof(c->container_name), 1, "container_name", err,
			    errlen) ||
	    !vcuda_field_ok(c->shared_dir, sizeof(c->shared_dir), 1, "shared_dir", err, errlen))
		return -1;
	if (c->shared_dir[0] != '/') {
		snprintf(err, errlen, "shared_dir: got %.64s, want an absolute path", c->shared_dir);
		return -1;
	}
	if (c->mps_thread_percent > 100) {
		snprintf(err, errlen, "mps_thread_percent: got %u, want 0 (not MPS) or 1..100",
			 c->mps_thread_percent);
		return -1;
	}
	for (uint32_t i = 0; i < VCUDA_MAX_DEVICES; i++) {
		const struct vcuda_config_device *d = &c->devices[i];
		char name[32];
		unsigned char raw[16];
		if (i >= c->device_count) {
			if (!vcuda_all_zero(d, sizeof(*d))) {
				snprintf(err, errlen, "devices[%u]: unused entry, want all zero", i);
				return -1;
			}
			continue;
		}
		snprintf(name, sizeof(name), "devices[%u].uuid", i);
		if (!vcuda_field_ok(d->uuid, sizeof(d->uuid), 1, name, err, errlen))
			return -1;
		if (vcuda_uuid_parse(d->uuid, raw) != 0) {
			snprintf(err, errlen, "%s: got %.64s, want GPU- or MIG- and 8-4-4-4-12 hex digits",
				 name, d->uuid);
			return -1;
		}
		for (uint32_t j = 0; j < i; j++) {
			if (strcmp(c->devices[j].uuid, d->uuid) == 0) {
				snprintf(err, errlen, "%s: %.64s repeats devices[%u]", name, d->uuid, j);
				return -1;
			}
		}
		if (d->memory_limit == 0) {
			snprintf(err, errlen, "devices[%u].memory_limit: want > 0 bytes", i);
			return -1;
		}
		if (d->core_percent < 1 || d->core_percent > 100) {
			snprintf(err, errlen, "devices[%u].core_percent: got %u, want 1..100", i,
				 d->core_percent);
			return -1;
		}
		if (((uint64_t)d->context_mib << 20) >= d->memory_limit) {
			snprintf(err, errlen,
				 "devices[%u].context_mib: got %u MiB, want less than memory_limit "
				 "(%llu bytes): no process could open a context",
				 i, d->context_mib, (unsigned long long)d->memory_limit);
			return -1;
		}
	}
	return 0;
}

#endif
