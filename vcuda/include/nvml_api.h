/*
 * nvml_api.h - the few NVML declarations vcuda needs, written for this project from public
 * ABI facts (names, enum values, struct layouts).
 */
#ifndef VCUDA_NVML_API_H
#define VCUDA_NVML_API_H

typedef int nvmlReturn_t;
enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_UNKNOWN = 999,
};

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct {
	unsigned int version;
	unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
#define NVML_MEMORY_V2_VERSION ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct {
	unsigned int pid;
	unsigned long long timeStamp; /* microseconds */
	unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

typedef enum { NVML_GPU_UTILIZATION_SAMPLES = 1 } nvmlSamplingType_t;
typedef enum {
	NVML_VALUE_TYPE_DOUBLE = 0,
	NVML_VALUE_TYPE_UNSIGNED_INT = 1,
	NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
	NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
} nvmlValueType_t;
typedef union {
	double dVal;
	unsigned int uiVal;
	unsigned long ulVal;
	unsigned long long ullVal;
} nvmlValue_t;
typedef struct {
	unsigned long long timeStamp; /* microseconds */
	nvmlValue_t sampleValue;
} nvmlSample_t;

#define NVML_UUID_BUFFER_SIZE 96

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t *);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t, nvmlMemory_v2_t *);
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *, nvmlDevice_t *);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t, char *, unsigned int);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t, nvmlUtilization_t *);
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t, nvmlProcessUtilizationSample_t *,
					     unsigned int *, unsigned long long);
nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t, nvmlSamplingType_t, unsigned long long,
				  nvmlValueType_t *, unsigned int *, nvmlSample_t *);
nvmlReturn_t nvmlInit(void);
nvmlReturn_t nvmlShutdown(void);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *);
nvmlReturn_t nvmlDeviceGetCount(unsigned int *);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t *);
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int, nvmlDevice_t *);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t, char *, unsigned int);

/* A process using a GPU, keyed by its pid in the caller's pid namespace (the host's, for a
 * node agent), with the device memory it holds in bytes. v1 has only the first two fields. */
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t, unsigned int *, nvmlProcessInfo_v1_t *);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
typedef enum { NVML_CLOCK_GRAPHICS = 0, NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2, NVML_CLOCK_VIDEO = 3 } nvmlClockType_t;
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t, nvmlClockType_t, unsigned int *);

#endif
