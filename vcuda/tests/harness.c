/* harness.c - see harness.h. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

extern char **environ;

/* the harness's own state: set once at start, then read-only in children */
struct t_state {
	char tmp[200];
	char self[512];
	int failed;
	char why[2048];
	unsigned next_uuid, next_container;
};
static struct t_state ts;

int t_harness_init(void);
int t_harness_take_failure(char *why, size_t n);

int t_harness_init(void)
{
	ssize_t n = readlink("/proc/self/exe", ts.self, sizeof(ts.self) - 1);
	if (n <= 0)
		return -1;
	ts.self[n] = '\0';
	const char *dir = getenv("VCTEST_TMP");
	if (dir && *dir) {
		snprintf(ts.tmp, sizeof(ts.tmp), "%s", dir);
	} else {
		snprintf(ts.tmp, sizeof(ts.tmp), "/tmp/vctest.XXXXXX");
		if (!mkdtemp(ts.tmp))
			return -1;
		setenv("VCTEST_TMP", ts.tmp, 1);
	}
	char fake[300];
	snprintf(fake, sizeof(fake), "%s/fakegpu", ts.tmp);
	mkdir(fake, 0777);
	setenv("FAKEGPU_DIR", fake, 0);
	return 0;
}

int t_harness_take_failure(char *why, size_t n)
{
	int f = ts.failed;
	snprintf(why, n, "%s", ts.why);
	ts.failed = 0;
	ts.why[0] = '\0';
	return f;
}

void t_fail_at(const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(ts.why, sizeof(ts.why), "%s:%d: ", file, line);
	va_start(ap, fmt);
	vsnprintf(ts.why + n, sizeof(ts.why) - (size_t)n, fmt, ap);
	va_end(ap);
	ts.failed = 1;
}

void t_note(const char *fmt, ...)
{
	va_list ap;
	printf("      ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

void _exit_child(int code)
{
	fflush(stdout);
	fflush(stderr);
	exit(code);
}

const char *t_tmp(void) { return ts.tmp; }
const char *t_self(void) { return ts.self; }

int t_sanitized(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	return 1;
#else
	return 0;
#endif
}

void t_uuid(char out[64])
{
	unsigned n = ++ts.next_uuid;
	snprintf(out, 64, "GPU-%08x-0000-4000-8000-%012x", (unsigned)getpid(), n);
}

void t_container(struct t_container *ct, int policy)
{
	unsigned n = ++ts.next_container;
	memset(ct, 0, sizeof(*ct));
	snprintf(ct->dir, sizeof(ct->dir), "%s/c%u", ts.tmp, n);
	/* the config in a dir of its own, as the device plugin lays it out: vcuda.control (the
	 * node's, t_node.c) goes beside it */
	char cdir[sizeof(ts.tmp) + 32];
	snprintf(cdir, sizeof(cdir), "%s/c%u.etc", ts.tmp, n);
	mkdir(cdir, 0755);
	snprintf(ct->cfg, sizeof(ct->cfg), "%s/vcuda.config", cdir);
	mkdir(ct->dir, 0777);
	struct vcuda_config *c = &ct->c;
	c->magic = VCUDA_CONFIG_MAGIC;
	c->version = VCUDA_CONFIG_VERSION;
	c->size = sizeof(*c);
	c->policy = (uint32_t)policy;
	snprintf(c->pod_uid, sizeof(c->pod_uid), "0000-pod-%u", n);
	snprintf(c->pod_namespace, sizeof(c->pod_namespace), "default");
	snprintf(c->pod_name, sizeof(c->pod_name), "pod-%u", n);
	snprintf(c->container_name, sizeof(c->container_name), "main");
	snprintf(c->shared_dir, sizeof(c->shared_dir), "%s", ct->dir);
}

void t_container_dev(struct t_container *ct, const char *uuid, uint64_t mib, unsigned core)
{
	struct vcuda_config_device *d = &ct->c.devices[ct->c.device_count++];
	snprintf(d->uuid, sizeof(d->uuid), "%s", uuid);
	d->memory_limit = mib * MiB;
	d->core_percent = core;
}

int t_container_write(struct t_container *ct)
{
	vcuda_config_seal(&ct->c);
	int fd = open(ct->cfg, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, &ct->c, sizeof(ct->c));
	close(fd);
	return n == (ssize_t)sizeof(ct->c) ? 0 : -1;
}

int t_fake_gpu(struct t_fake_gpu *g)
{
	struct t_container ct;
	t_uuid(g->uuid);
	t_container(&ct, VCUDA_POLICY_FIXED);
	t_container_dev(&ct, g->uuid, 1024, 100);
	if (t_container_write(&ct) != 0)
		return -1;
	snprintf(g->devices, sizeof(g->devices), "FAKEGPU_DEVICES=%s:81920", g->uuid);
	snprintf(g->config, sizeof(g->config), "VCUDA_CONFIG=%s", ct.cfg);
	return 0;
}

static char **merged_env(const char *const *over)
{
	size_t n = 0, k = 0;
	while (environ[n])
		n++;
	while (over && over[k])
		k++;
	char **env = calloc(n + k + 1, sizeof(char *));
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		int replaced = 0;
		for (size_t j = 0; j < k && !replaced; j++) {
			const char *eq = strchr(over[j], '=');
			size_t klen = eq ? (size_t)(eq - over[j]) + 1 : strlen(over[j]);
			replaced = strncmp(environ[i], over[j], klen) == 0;
		}
		if (!replaced)
			env[m++] = environ[i];
	}
	for (size_t j = 0; j < k; j++)
		if (strchr(over[j], '=')) /* "KEY" alone removes KEY */
			env[m++] = (char *)over[j];
	env[m] = NULL;
	return env;
}

pid_t t_spawn(const char *const *env, const char *const *args, int *out_fd)
{
	const char *argv[64];
	int a = 0, p[2] = { -1, -1 };
	if (args && args[0] && args[0][0] == '/') {
		for (int i = 0; args[i] && a < 63; i++)
			argv[a++] = args[i];
	} else {
		argv[a++] = ts.self;
		argv[a++] = "child";
		for (int i = 0; args && args[i] && a < 63; i++)
			argv[a++] = args[i];
	}
	argv[a] = NULL;
	char **envp = merged_env(env);
	if (out_fd && pipe(p) != 0)
		return -1;
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid == 0) {
		if (out_fd) {
			dup2(p[1], 1);
			dup2(p[1], 2);
			close(p[0]);
			close(p[1]);
		}
		execve(argv[0], (char *const *)argv, envp);
		_exit(127);
	}
	free(envp);
	if (out_fd) {
		close(p[1]);
		*out_fd = p[0];
	}
	return pid;
}

int t_wait(pid_t pid)
{
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int t_run(const char *const *env, const char *const *args, char *out, size_t outlen)
{
	int fd;
	pid_t pid = t_spawn(env, args, &fd);
	if (pid < 0)
		return -1;
	size_t len = 0;
	char buf[4096];
	ssize_t n;
	while ((n = read(fd, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
		if (n < 0)
			continue;
		size_t c = len + (size_t)n < outlen ? (size_t)n : outlen - len - 1;
		memcpy(out + len, buf, c);
		len += c;
	}
	out[len] = '\0';
	close(fd);
	return t_wait(pid);
}

void t_ctx(int ordinal)
{
	CUdevice d;
	CUcontext c;
	CUresult rc = cuInit(0);
	CCHECK(rc == CUDA_SUCCESS, "cuInit: %d", rc);
	CCHECK(cuDeviceGet(&d, ordinal) == CUDA_SUCCESS, "cuDeviceGet(%d)", ordinal);
	CCHECK(cuCtxCreate_v2(&c, 0, d) == CUDA_SUCCESS, "cuCtxCreate");
}

double t_mono_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

uint64_t t_busy_of(const char *uuid, int pid)
{
	uint64_t b = 0, t = 0;
	CCHECK(fakegpu_busy_ns(uuid, &pid, pid ? 1 : 0, &b, &t) == 0, "fakegpu_busy_ns");
	return b;
}
