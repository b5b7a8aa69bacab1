// CUDA C tenant of vgpu-gpu-check, built on the GPU machine: nvcc -O2 -o probe probe.cu -lcuda
// Modes (one JSON line on stdout):
//   ctx                          open a context with one tiny allocation, {"ready":true}, hold until stdin closes
//   mem PATH MAX_CHUNKS MAX_SECS allocate 1 GiB chunks on PATH until refused, MAX_CHUNKS held or MAX_SECS gone:
//                                {"allocated_mib":N,"refused":bool}
//                                PATH: malloc (cudaMalloc), cumemalloc (cuMemAlloc), managed (cudaMallocManaged,
//                                each chunk touched), async (cudaMallocAsync), pitch (cudaMallocPitch),
//                                vmm (cuMemCreate + cuMemAddressReserve + cuMemMap)
//   hold PATH GIB SECS [unlink]  allocate GIB 1 GiB chunks on PATH (until refused), print
//                                {"allocated_mib":N,"refused":bool} and hold them until SECS have passed;
//                                with "unlink", first (before any CUDA call) remove vcuda.region and
//                                vcuda.slots from $VCUDA_SHARED_DIR, as a tenant may: libvcuda then books
//                                this process from zero (the guard row)
//   burn SECS                    long kernels (132 blocks spinning ~1 ms), {"rate":kernels/s over the second half}
//   elem SECS                    short elementwise kernels (1M floats, 4096 blocks), {"rate":kernels/s, second half}
// burn and elem wait, set up, at the check's start line (VGPU_CHECK_READY, VGPU_CHECK_START): the
// tenants of a row run their SECS together.
#include <cuda.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

// start_line says this tenant is ready and waits (at most 120 s) for the row's start
static void start_line(void) {
	const char *ready = getenv("VGPU_CHECK_READY"), *start = getenv("VGPU_CHECK_START");
	if (!ready || !start) return;
	int fd = open(ready, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0) close(fd);
	for (double t = now(); access(start, F_OK) != 0 && now() - t < 120;) usleep(5000);
}

__global__ void spin(long long cycles) {
	long long s = clock64();
	while (clock64() - s < cycles) {
	}
}

__global__ void axpy(float *y, const float *x, float a, int n) {
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) y[i] = a * x[i] + y[i];
}

static const size_t G = 1ull << 30;

// one 1 GiB chunk on path; returns 0 when it was granted
static int chunk(const char *path) {
	if (!strcmp(path, "malloc")) {
		void *p;
		return cudaMalloc(&p, G) != cudaSuccess;
	}
	if (!strcmp(path, "cumemalloc")) {
		CUdeviceptr p;
		return cuMemAlloc(&p, G) != CUDA_SUCCESS;
	}
	if (!strcmp(path, "managed")) {
		void *p;
		if (cudaMallocManaged(&p, G, cudaMemAttachGlobal) != cudaSuccess) return 1;
		return cudaMemset(p, 1, G) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess;
	}
	if (!strcmp(path, "async")) {
		void *p;
		if (cudaMallocAsync(&p, G, 0) != cudaSuccess) return 1;
		return cudaStreamSynchronize(0) != cudaSuccess;
	}
	if (!strcmp(path, "pitch")) {
		void *p;
		size_t pitch;
		return cudaMallocPitch(&p, &pitch, 1 << 20, 1 << 10) != cudaSuccess;
	}
	if (!strcmp(path, "vmm")) {
		CUmemAllocationProp prop;
		memset(&prop, 0, sizeof prop);
		prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
		prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		prop.location.id = 0;
		CUmemGenericAllocationHandle h;
		if (cuMemCreate(&h, G, &prop, 0) != CUDA_SUCCESS) return 1;
		CUdeviceptr va;
		if (cuMemAddressReserve(&va, G, 0, 0, 0) != CUDA_SUCCESS) return 1;
		return cuMemMap(va, G, 0, h, 0) != CUDA_SUCCESS;
	}
	fprintf(stderr, "probe: unknown memory path %s (malloc, cumemalloc, managed, async, pitch, vmm)\n", path);
	exit(2);
}

int main(int argc, char **argv) {
	if (argc < 2) {
		fprintf(stderr, "usage: probe ctx | mem PATH MAX_CHUNKS MAX_SECS | hold PATH GIB SECS [unlink] | burn SECS | elem SECS\n");
		return 2;
	}
	if (!strcmp(argv[1], "hold") && argc > 5 && !strcmp(argv[5], "unlink")) {
		const char *dir = getenv("VCUDA_SHARED_DIR");
		char path[4096];
		if (!dir) {
			fprintf(stderr, "probe: hold ... unlink needs VCUDA_SHARED_DIR\n");
			return 2;
		}
		snprintf(path, sizeof path, "%s/vcuda.region", dir);
		unlink(path);
		snprintf(path, sizeof path, "%s/vcuda.slots", dir);
		unlink(path);
	}
	cudaFree(0);
	if (!strcmp(argv[1], "ctx")) {
		void *p;
		cudaMalloc(&p, 512);
		cudaDeviceSynchronize();
		printf("{\"ready\":true}\n");
		fflush(stdout);
		while (getchar() != EOF) {
		}
		return 0;
	}
	if (!strcmp(argv[1], "mem")) {
		if (argc < 5) return 2;
		long limit = atol(argv[3]), n = 0;
		double secs = atof(argv[4]), t0 = now();
		int refused = 0;
		while (n < limit && now() - t0 < secs) {
			if (chunk(argv[2])) {
				refused = 1;
				break;
			}
			n++;
		}
		printf("{\"allocated_mib\":%ld,\"refused\":%s}\n", n * 1024, refused ? "true" : "false");
		return 0;
	}
	if (!strcmp(argv[1], "hold")) {
		if (argc < 5) return 2;
		long want = atol(argv[3]), n = 0;
		double secs = atof(argv[4]), t0 = now();
		int refused = 0;
		for (; n < want; n++) {
			if (chunk(argv[2])) {
				refused = 1;
				break;
			}
		}
		printf("{\"allocated_mib\":%ld,\"refused\":%s}\n", n * 1024, refused ? "true" : "false");
		fflush(stdout);
		while (now() - t0 < secs) usleep(50000);
		return 0;
	}
	if (argc < 3) return 2;
	double secs = atof(argv[2]), th = 0;
	long it = 0, ih = 0;
	int elem = !strcmp(argv[1], "elem");
	const int n = 1 << 20;
	float *x = NULL, *y = NULL;
	if (elem && (cudaMalloc(&x, n * sizeof(float)) != cudaSuccess || cudaMalloc(&y, n * sizeof(float)) != cudaSuccess)) {
		fprintf(stderr, "probe: cudaMalloc of the elem buffers failed\n");
		return 1;
	}
	start_line();
	double t0 = now();
	while (now() - t0 < secs) {
		int batch = elem ? 64 : 8;
		for (int i = 0; i < batch; i++) {
			if (elem)
				axpy<<<n / 256, 256>>>(y, x, 1.0001f, n);
			else
				spin<<<132, 128>>>(1000000);
		}
		if (cudaDeviceSynchronize() != cudaSuccess) {
			fprintf(stderr, "probe: kernel failed: %s\n", cudaGetErrorString(cudaGetLastError()));
			return 1;
		}
		it += batch;
		if (!th && now() - t0 >= secs / 2) {
			th = now();
			ih = it;
		}
	}
	if (!th) th = t0;
	printf("{\"rate\":%f}\n", (it - ih) / (now() - th));
	return 0;
}
