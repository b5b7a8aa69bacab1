/* fake_mps.c - the fake driver as an MPS client (fake_mps.h). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake.h"
#include "fake_mps.h"

/* Measured on a real H100 (issue 23): percent -> share of solo throughput, a lone client. */
static const double solo_points[][2] = { { 0, 0 }, { 30, 40 }, { 50, 66 }, { 100, 100 } };

double fk_mps_solo(double p)
{
	if (p <= 0)
		return 0;
	if (p >= 100)
		return 1;
	size_t n = sizeof(solo_points) / sizeof(solo_points[0]);
	for (size_t i = 1; i < n; i++) {
		if (p <= solo_points[i][0]) {
			double x0 = solo_points[i - 1][0], y0 = solo_points[i - 1][1];
			double x1 = solo_points[i][0], y1 = solo_points[i][1];
			return (y0 + (p - x0) * (y1 - y0) / (x1 - x0)) / 100;
		}
	}
	return 1;
}

double fk_mps_speed(double self, const double *others, int n)
{
	if (n == 0)
		return fk_mps_solo(self);
	double sum = self;
	for (int i = 0; i < n; i++)
		sum += others[i];
	return self / (sum > 100 ? sum : 100);
}

uint64_t fk_mps_pinned_of(const char *v, int ordinal)
{
	while (v && *v) {
		char *end;
		long ord = strtol(v, &end, 10);
		if (end == v || *end != '=')
			return 0;
		v = end + 1;
		unsigned long long n = strtoull(v, &end, 10);
		uint64_t b = 0;
		if (*end == 'M' || *end == 'm')
			b = (uint64_t)n << 20;
		else if (*end == 'G' || *end == 'g')
			b = (uint64_t)n << 30;
		else
			return 0;
		if (ord == ordinal)
			return b;
		v = end + 1;
		if (*v == ',')
			v++;
	}
	return 0;
}

static struct fk_mps_state *map_state(const char *uuid)
{
	char path[640];
	snprintf(path, sizeof(path), "%s/%s.fakemps", fk.dir, uuid);
	int fd = open(path, O_RDWR | O_CLOEXEC | O_CREAT, 0666);
	if (fd < 0)
		return NULL;
	struct fk_mps_state *s = MAP_FAILED;
	struct stat sb;
	if (flock(fd, LOCK_EX) != 0 || fstat(fd, &sb) != 0)
		goto out;
	if ((size_t)sb.st_size < sizeof(*s) && ftruncate(fd, sizeof(*s)) != 0)
		goto out;
	s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (s != MAP_FAILED && s->magic != FK_MPS_MAGIC) {
		memset(s, 0, sizeof(*s));
		s->size = sizeof(*s);
		fk_shared_mutex_init(&s->lock);
		__atomic_store_n(&s->magic, FK_MPS_MAGIC, __ATOMIC_RELEASE);
	}
out:
	flock(fd, LOCK_UN);
	close(fd);
	return s == MAP_FAILED ? NULL : s;
}

static void lock(struct fk_mps_state *s)
{
	if (pthread_mutex_lock(&s->lock) == EOWNERDEAD)
		pthread_mutex_consistent(&s->lock);
}

static void init_once(void)
{
	if (fk_init() != CUDA_SUCCESS)
		return;
	const char *pipe = getenv("CUDA_MPS_PIPE_DIRECTORY");
	char sock[600];
	if (!pipe || !*pipe)
		pipe = "/tmp/nvidia-mps";
	/* FAKEGPU_MPS_MOUNT "<container path>:<host path>" stands for the container's mount */
	const char *mnt = getenv("FAKEGPU_MPS_MOUNT"), *colon = mnt ? strchr(mnt, ':') : NULL;
	if (colon && strlen(pipe) == (size_t)(colon - mnt) && strncmp(pipe, mnt, (size_t)(colon - mnt)) == 0)
		pipe = colon + 1;
	snprintf(sock, sizeof(sock), "%s/control", pipe);
	if (access(sock, F_OK) != 0)
		return;
	const char *pct = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
	fkm.percent = 100;
	if (pct && *pct) {
		double v = strtod(pct, NULL);
		if (v > 0 && v <= 100)
			fkm.percent = v;
	}
	const char *pinned = getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
	for (int i = 0; i < fk.ndev && i < 16; i++) {
		fkm.pinned[i] = fk_mps_pinned_of(pinned, i);
		fkm.st[i] = map_state(fk.dev[i].uuid);
		if (!fkm.st[i])
			return;
	}
	fkm.on = 1;
}

int fk_mps_on(void)
{
	pthread_once(&fkm.once, init_once);
	return fkm.on;
}

/* The caller's client entry (a dead client's or a free one is taken); under s->lock. */
static struct fk_mps_client *self_locked(struct fk_mps_state *s)
{
	struct fk_mps_client *free_c = NULL;
	for (int i = 0; i < FK_MPS_CLIENTS; i++) {
		struct fk_mps_client *c = &s->clients[i];
		if (c->pid == fk.pid && c->pidns == fk.pidns)
			return c;
		int gone = c->pid && c->pidns == fk.pidns && kill(c->pid, 0) != 0;
		if (!free_c && (c->pid == 0 || gone))
			free_c = c;
	}
	if (free_c) {
		memset(free_c, 0, sizeof(*free_c));
		free_c->pid = fk.pid;
		free_c->pidns = fk.pidns;
	}
	return free_c;
}

void fk_mps_launch(int dev, uint64_t dur)
{
	struct fk_mps_state *s = fkm.st[dev];
	for (;;) {
		lock(s);
		uint64_t now = fk_now();
		struct fk_mps_client *me = self_locked(s);
		if (!me) { /* more clients than the fake tracks: run at the solo speed */
			pthread_mutex_unlock(&s->lock);
			fk_sleep_ns(dur);
			return;
		}
		me->percent = (uint32_t)fkm.percent;
		if (me->lane_end > now + fk.max_queue_ns) {
			uint64_t wait = me->lane_end - fk.max_queue_ns - now;
			pthread_mutex_unlock(&s->lock);
			fk_sleep_ns(wait);
			continue;
		}
		double others[FK_MPS_CLIENTS];
		int n = 0;
		for (int i = 0; i < FK_MPS_CLIENTS; i++) {
			struct fk_mps_client *c = &s->clients[i];
			if (c != me && c->pid && c->lane_end > now)
				others[n++] = c->percent;
		}
		double speed = fk_mps_speed(fkm.percent, others, n);
		uint64_t took = speed > 0 ? (uint64_t)((double)dur / speed) : dur;
		uint64_t start = me->lane_end > now ? me->lane_end : now;
		me->lane_end = start + took;
		fkm.last_ns[dev] = took;
		__atomic_store_n(&fk.dev[dev].last_end, start + took, __ATOMIC_RELAXED);
		pthread_mutex_unlock(&s->lock);
		return;
	}
}

int fk_mps_mem_ok(int dev, uint64_t held)
{
	return !fk_mps_on() || dev >= 16 || fkm.pinned[dev] == 0 || held <= fkm.pinned[dev];
}

/* Test query: whether the process is an MPS client, and its last kernel's duration on dev. */
FK_EXPORT int fakegpu_mps_last(int dev, uint64_t *ns)
{
	if (!fk_mps_on() || dev < 0 || dev >= fk.ndev || dev >= 16)
		return -1;
	*ns = fkm.last_ns[dev];
	return 0;
}

FK_EXPORT double fakegpu_mps_speed(double self, const double *others, int n)
{
	return fk_mps_speed(self, others, n);
}
