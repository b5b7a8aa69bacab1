/*
 * config.c - read the limiter config once.
 *
 * The file (VCUDA_CONFIG_DEFAULT_PATH, mounted read-only by the device plugin) is the only
 * source in production. VCUDA_CONFIG may point elsewhere only while the default file does
 * not exist (local testing), so a workload cannot swap in its own limits. Environment limits
 * (VCUDA_DEVICES, VCUDA_POLICY, VCUDA_SHARED_DIR) are read only when the file is missing and
 * VCUDA_ALLOW_ENV_CONFIG=1.
 */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vcuda.h"

static int from_env(struct vcuda_config *c, char *err, size_t errlen)
{
	const char *devs = getenv("VCUDA_DEVICES"), *dir = getenv("VCUDA_SHARED_DIR");
	const char *pol = getenv("VCUDA_POLICY");
	if (!devs || !dir) {
		snprintf(err, errlen, "VCUDA_ALLOW_ENV_CONFIG=1 needs VCUDA_DEVICES and VCUDA_SHARED_DIR");
		return -1;
	}
	memset(c, 0, sizeof(*c));
	c->magic = VCUDA_CONFIG_MAGIC;
	c->version = VCUDA_CONFIG_VERSION;
	c->size = sizeof(*c);
	if (!pol || strcmp(pol, "fixed") == 0)
		c->policy = VCUDA_POLICY_FIXED;
	else if (strcmp(pol, "balance") == 0)
		c->policy = VCUDA_POLICY_BALANCE;
	else if (strcmp(pol, "none") == 0)
		c->policy = VCUDA_POLICY_NONE;
	else {
		snprintf(err, errlen, "VCUDA_POLICY: got %.32s, want none, fixed or balance", pol);
		return -1;
	}
	strcpy(c->pod_uid, "local");
	strcpy(c->pod_namespace, "local");
	strcpy(c->pod_name, "local");
	strcpy(c->container_name, "local");
	snprintf(c->shared_dir, sizeof(c->shared_dir), "%s", dir);
	char buf[2048];
	snprintf(buf, sizeof(buf), "%s", devs);
	char *save = NULL;
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (c->device_count == VCUDA_MAX_DEVICES) {
			snprintf(err, errlen, "VCUDA_DEVICES: more than %d devices", VCUDA_MAX_DEVICES);
			return -1;
		}
		struct vcuda_config_device *d = &c->devices[c->device_count++];
		char *mib = strchr(tok, ':'), *core = mib ? strchr(mib + 1, ':') : NULL;
		if (!core) {
			snprintf(err, errlen, "VCUDA_DEVICES: want <uuid>:<MiB>:<core%%>,...");
			return -1;
		}
		*mib++ = '\0';
		*core++ = '\0';
		snprintf(d->uuid, sizeof(d->uuid), "%s", tok);
		d->memory_limit = strtoull(mib, NULL, 10) << 20;
		d->core_percent = (uint32_t)strtoul(core, NULL, 10);
	}
	vcuda_config_seal(c);
	return vcuda_config_validate(c, err, errlen);
}

int vc_config_load(struct vcuda_config *c, char *path, size_t pathlen, char *err, size_t errlen)
{
	const char *env = getenv("VCUDA_CONFIG");
	snprintf(path, pathlen, "%s", VCUDA_CONFIG_DEFAULT_PATH);
	if (env && *env && access(VCUDA_CONFIG_DEFAULT_PATH, F_OK) != 0 && errno == ENOENT)
		snprintf(path, pathlen, "%s", env);

	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		const char *allow = getenv("VCUDA_ALLOW_ENV_CONFIG");
		if (e == ENOENT && allow && strcmp(allow, "1") == 0) {
			snprintf(path, pathlen, "environment (VCUDA_ALLOW_ENV_CONFIG=1)");
			return from_env(c, err, errlen);
		}
		snprintf(err, errlen, "%s", strerror(e));
		return -1;
	}
	ssize_t n = -1;
	off_t size = vc_fd_size(fd);
	if (size == (off_t)sizeof(*c))
		n = read(fd, c, sizeof(*c));
	int e = errno;
	close(fd);
	if (n != (ssize_t)sizeof(*c)) {
		if (n < 0 && size == (off_t)sizeof(*c))
			snprintf(err, errlen, "read: %s", strerror(e));
		else
			snprintf(err, errlen, "size: got %lld bytes, want %zu",
				 (long long)size, sizeof(*c));
		return -1;
	}
	return vcuda_config_validate(c, err, errlen);
}
