/* t_node_run.c - the scripted node controller of t_node.h. */
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "t_node.h"

static void *watch_main(void *arg);
static void watch_set(struct watch *w, const char *usage);
static void watch_stop(struct watch *w);

static uint64_t mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void nap_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
	while (nanosleep(&ts, &ts) != 0) {
	}
}

static void publish(struct node *n, uint64_t allowance, double rate, uint64_t now)
{
	struct vcuda_control_device *d = &n->c->dev[0];
	uint64_t s = __atomic_load_n(&d->seq, __ATOMIC_RELAXED);
	uint64_t rb;
	memcpy(&rb, &rate, sizeof(rb));
	__atomic_store_n(&d->seq, s + 1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&d->allowance, allowance, __ATOMIC_SEQ_CST);
	__atomic_store_n(&d->rate_bits, rb, __ATOMIC_SEQ_CST);
	__atomic_store_n(&d->fallback_bits, rb, __ATOMIC_SEQ_CST);
	__atomic_store_n(&d->stamp_ns, now, __ATOMIC_SEQ_CST);
	__atomic_store_n(&d->mode, n->mode, __ATOMIC_SEQ_CST);
	__atomic_store_n(&d->period_us, 100000u, __ATOMIC_SEQ_CST);
	__atomic_store_n(&d->slot_period_us, n->slot[0], __ATOMIC_SEQ_CST);
	__atomic_store_n(&d->slot_start_us, n->slot[1], __ATOMIC_SEQ_CST);
	__atomic_store_n(&d->slot_len_us, n->slot[2], __ATOMIC_SEQ_CST);
	__atomic_store_n(&d->slot_flags, n->slot_flags, __ATOMIC_SEQ_CST);
	uint64_t cb;
	memcpy(&cb, &n->cost, sizeof(cb));
	if (!n->v1) /* a version 1 file ends before the costs */
		__atomic_store_n(&n->c->cost_bits[0], cb, __ATOMIC_SEQ_CST);
	__atomic_store_n(&d->seq, s + 2, __ATOMIC_SEQ_CST);
}

/* What the container launched so far, by its vcuda.usage (opened into *fd once it exists);
 * false until it can be read. */
static int launched_of(const char *usage, int *fd, uint64_t *launched)
{
	struct vcuda_usage u;
	if (*fd < 0)
		*fd = open(usage, O_RDONLY);
	if (*fd < 0 || pread(*fd, &u, sizeof(u), 0) != (ssize_t)sizeof(u) || u.magic != VCUDA_USAGE_MAGIC)
		return 0;
	*launched = u.dev[0].launched;
	return 1;
}

static void *node_main(void *arg)
{
	struct node *n = arg;
	double rate = n->share / NS_PER_UNIT;
	if (n->delay_ms > 0)
		nap_ms(n->delay_ms);
	/* As the node does (device-plugin/compute, decide.go): an idle or starved container banks
	 * at most a quarter of the 100 ms period of its rate, a slotted one a slot period; else a
	 * container held off the CPU (a loaded machine) would spend the backlog later, over its
	 * share. */
	double bank_ns = n->slot[0] ? 1000.0 * n->slot[0] : 25e6;
	if (bank_ns < 25e6)
		bank_ns = 25e6;
	uint64_t allowance = 0, last = mono_ns(), launched = 0;
	int fd = -1;
	launched_of(n->usage, &fd, &allowance); /* as the node does: from what was launched so far */
	for (long i = 0; n->beats < 0 || i < n->beats; i++) {
		if (__atomic_load_n(&n->stop, __ATOMIC_ACQUIRE))
			break;
		uint64_t now = mono_ns();
		allowance += (uint64_t)(rate * (double)(now - last));
		if (launched_of(n->usage, &fd, &launched) && allowance > launched + (uint64_t)(rate * bank_ns))
			allowance = launched + (uint64_t)(rate * bank_ns);
		last = now;
		publish(n, allowance, rate, now);
		nap_ms(100);
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

/* Creates the control file beside ct's config and starts the scripted node. */
static int node_start(struct node *n, struct t_container *ct)
{
	char dir[256], path[300];
	snprintf(dir, sizeof(dir), "%s", ct->cfg);
	snprintf(path, sizeof(path), "%s/%s", dirname(dir), VCUDA_CONTROL_FILE);
	size_t size = n->v1 ? VCUDA_CONTROL_SIZE_V1 : sizeof(struct vcuda_control);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || ftruncate(fd, (off_t)size) != 0)
		return -1;
	n->c = mmap(NULL, sizeof(*n->c), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (n->c == MAP_FAILED)
		return -1;
	n->c->version = n->v1 ? 1 : VCUDA_CONTROL_VERSION;
	n->c->size = (uint32_t)size;
	n->c->device_count = 1;
	n->c->magic = VCUDA_CONTROL_MAGIC;
	snprintf(n->usage, sizeof(n->usage), "%s/%s", ct->dir, VCUDA_USAGE_FILE);
	if (n->watch) {
		watch_set(n->watch, n->usage);
		if (pthread_create(&n->watch_th, NULL, watch_main, n->watch) != 0)
			return -1;
	}
	return pthread_create(&n->th, NULL, node_main, n) == 0 ? 0 : -1;
}

static void node_stop(struct node *n)
{
	__atomic_store_n(&n->stop, 1, __ATOMIC_RELEASE);
	pthread_join(n->th, NULL);
	if (n->watch) {
		watch_stop(n->watch);
		pthread_join(n->watch_th, NULL);
	}
	munmap(n->c, sizeof(*n->c));
}

/* Device 0 of the container's vcuda.usage (zeros where it cannot be read). */
struct vcuda_usage_device t_node_usage(const struct t_container *ct)
{
	struct vcuda_usage_device d = { 0 };
	char up[300];
	snprintf(up, sizeof(up), "%s/%s", ct->dir, VCUDA_USAGE_FILE);
	int fd = open(up, O_RDONLY);
	if (fd >= 0) {
		struct vcuda_usage u;
		if (read(fd, &u, sizeof(u)) == (ssize_t)sizeof(u) && u.magic == VCUDA_USAGE_MAGIC)
			d = u.dev[0];
		close(fd);
	}
	return d;
}

/* One container of 2 burn processes (n->procs) on its own fake GPU for ms; share measured over
 * the last measure_ms. */
double t_node_run(struct t_container *ct, struct node *n, long ms, long measure_ms,
		  uint64_t *launched)
{
	char uuid[64], devs[128], cfg[300], dur[32], queue[64];
	t_uuid(uuid);
	t_container(ct, VCUDA_POLICY_FIXED);
	t_container_dev(ct, uuid, 1024, n->core ? n->core : 30); /* the config's share is the local fallback's */
	if (t_container_write(ct) != 0 || node_start(n, ct) != 0)
		return -1;
	snprintf(devs, sizeof(devs), "FAKEGPU_DEVICES=%s:81920", uuid);
	snprintf(cfg, sizeof(cfg), "VCUDA_CONFIG=%s", ct->cfg);
	snprintf(dur, sizeof(dur), "%ld", ms);
	snprintf(queue, sizeof(queue), "FAKEGPU_MAX_QUEUE_US=%ld", n->queue_us);
	const char *env[] = { devs, cfg, "FAKEGPU_NS_PER_BLOCK=1000",
			      n->capturing ? "FAKEGPU_CAPTURING=1" : "FAKEGPU_CAPTURING",
			      n->queue_us ? queue : NULL, NULL };
	const char *args[] = { "burn", "200", "256", "kernel", dur, NULL };
	int procs = n->procs ? n->procs : 2;
	pid_t pids[2];
	int out = -1;
	for (int i = 0; i < procs; i++)
		if ((pids[i] = t_spawn(env, args, i == 0 && n->capturing ? &out : NULL)) < 0)
			return -1;
	uint64_t b0, t0, b1, t1;
	nap_ms(ms - measure_ms);
	int ok = fakegpu_busy_ns(uuid, pids, procs, &b0, &t0) == 0;
	nap_ms(measure_ms - 100);
	ok &= fakegpu_busy_ns(uuid, pids, procs, &b1, &t1) == 0;
	if (out >= 0) {
		size_t got = 0;
		ssize_t r;
		while (got + 1 < sizeof(n->out) && (r = read(out, n->out + got, sizeof(n->out) - 1 - got)) > 0)
			got += (size_t)r;
		n->out[got] = 0;
		close(out);
	}
	for (int i = 0; i < procs; i++)
		ok &= t_wait(pids[i]) == 0;
	node_stop(n);
	struct vcuda_usage_device u = t_node_usage(ct);
	*launched = u.launched;
	return ok ? 100.0 * (double)(b1 - b0) / (double)(t1 - t0) : -1;
}

static void watch_set(struct watch *w, const char *usage)
{
	snprintf(w->usage, sizeof(w->usage), "%s", usage);
}

static void watch_stop(struct watch *w)
{
	__atomic_store_n(&w->stop, 1, __ATOMIC_RELEASE);
}

/* Polls the container's launched counter every 100 us and books each increase by where in the
 * slot period it was seen. An increase seen after a poll that came over 2 ms late (a loaded
 * machine, a sanitizer build) happened anywhere in that gap: it is counted apart, not placed. */
static void *watch_main(void *arg)
{
	struct watch *w = arg;
	uint64_t last = 0, last_ns = 0;
	int fd = -1;
	while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
		struct vcuda_usage u;
		if (fd < 0)
			fd = open(w->usage, O_RDONLY);
		if (fd >= 0 && pread(fd, &u, sizeof(u), 0) == (ssize_t)sizeof(u) &&
		    u.magic == VCUDA_USAGE_MAGIC) {
			uint64_t c = u.dev[0].launched, P = 1000ull * w->period_us, now = mono_ns();
			uint64_t into = (now % P + P - 1000ull * w->start_us) % P;
			if (last && c > last) {
				if (now - last_ns > 2000000ull)
					w->unplaced += c - last;
				else if (into < 1000ull * (w->len_us + 1000))
					w->in += c - last;
				else
					w->out += c - last;
			}
			last = c, last_ns = now;
		}
		struct timespec ts = { 0, 100000 };
		nanosleep(&ts, NULL);
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}
