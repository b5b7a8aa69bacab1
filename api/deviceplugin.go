package api

// Container environment set by the device plugin's Allocate. libvcuda.so
// reads its limits from the read-only file at LimiterConfigPath; EnvConfig
// names that path, and EnvConfig, EnvSharedDir and EnvPolicy are honoured by
// the limiter only when the file is missing (see vcuda/src/config.c), so
// they are informational for the workload.
const (
	// EnvVisibleDevices selects the container's GPUs (NVIDIA container runtime).
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	// EnvConfig is the limiter config path inside the container.
	EnvConfig = "VCUDA_CONFIG"
	// EnvSharedDir is the per-container directory for cross-process accounting.
	EnvSharedDir = "VCUDA_SHARED_DIR"
	// EnvPolicy is the compute policy: fixed, balance or none.
	EnvPolicy = "VCUDA_POLICY"
	// LdPreloadPath is where the device plugin mounts its ld.so.preload file.
	LdPreloadPath = "/etc/ld.so.preload"
)

// MPS mode: what Allocate gives a container on an MPS GPU. The same names
// are in vcuda/include/vcuda_mps.h (libvcuda sets them again from its config).
const (
	// MPSPipeDir is where the container sees its GPU's MPS pipe directory
	// (read-only); EnvMPSPipeDir names it.
	MPSPipeDir    = "/run/volcano-vgpu/mps"
	EnvMPSPipeDir = "CUDA_MPS_PIPE_DIRECTORY"
	// EnvMPSThreads is the container's share of the GPU's SMs (its cores).
	EnvMPSThreads = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	// EnvMPSPinnedMem is "<ordinal>=<MiB>M" per GPU (its memory cap).
	EnvMPSPinnedMem = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	// MPSShmPath is where MPS clients and their server share memory.
	MPSShmPath = "/dev/shm"
)
