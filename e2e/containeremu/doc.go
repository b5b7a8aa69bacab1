// Package containeremu runs a process "inside" a container of a pod bound to
// a simulated node, the way a container runtime with the NVIDIA runtime hook
// would: from the device plugin's Allocate response recorded by the kubelet
// emulator (e2e/kubeletemu), on the fake CUDA driver of vcuda/ configured with
// that node's simulated GPUs. There is no container runtime and no GPU here;
// this is the stand-in that lets one test follow a Volcano Job from the
// scheduler's assignment through Allocate to the limit libvcuda enforces.
//
// # Roles
//
// The emulator plays three parts, each kept to what the real one does:
//   - the container runtime: the container's filesystem is the host's root,
//     copy-on-write; every Allocate mount is bind-mounted at its container
//     path (read-only when the response says so); the environment is the
//     image's (PATH, HOME, LD_LIBRARY_PATH as CUDA images set it) plus exactly
//     the response's envs;
//   - the NVIDIA runtime hook and the runtime's CDI registry: the GPUs are
//     those of the response's CDI devices (nvidia.com/gpu=<UUID|index|all|MIG UUID>, as
//     the NVIDIA toolkit's generated spec names them) plus those of
//     NVIDIA_VISIBLE_DEVICES ("all", "none", "void", or a list of UUIDs or
//     node indexes), exposed as the real ones are by creating only their
//     /dev/nvidiaN nodes; the device plugin's volcano-vgpu.io/limiter devices
//     are read from the node's Config.NodeCDISpecDir and their createRuntime hooks run before
//     the process starts (see cdi.go); the driver libraries (the fake
//     libcuda.so.1 and libnvidia-ml.so.1) are mounted at /usr/local/nvidia/lib64;
//   - the node's driver: the fake driver keeps one state file per GPU under
//     <WorkDir>/<node>/gpus, created for every GPU of the node (same UUIDs,
//     same memory as e2e/sim/clusters), shared by all containers on that node, so
//     two containers given the same GPU contend on the same simulated GPU.
//     A MIG device (Container.NodeMIG, from the node's inventory) is a
//     simulated GPU of its own: its MIG UUID and its profile's memory.
//
// Visibility: libvcuda.so does NOT filter device enumeration by
// NVIDIA_VISIBLE_DEVICES. In production the runtime hook hides unassigned
// GPUs; libvcuda's own line of defence is its config: a device the driver
// shows that is not in the limiter config reports 0 MiB total, every
// allocation on it fails with CUDA_ERROR_OUT_OF_MEMORY and every launch with
// CUDA_ERROR_INVALID_DEVICE. Container.ExposeAllGPUs emulates a runtime that
// ignores NVIDIA_VISIBLE_DEVICES (a privileged container, a missing hook) so
// tests can check that second line on its own.
//
// # Modes
//
// ModeAuto picks ModeNamespace when a probe at New can unshare a mount
// namespace and mount overlayfs, else ModeFallback; Emulator.Mode and Reason
// say which and why, and VGPU_CONTAINEREMU_MODE (EnvMode) forces one.
//
// ModeNamespace (as root): a new mount namespace per container, made private
// so nothing propagates to the host, with this layout:
//
//	<dir>/mnt                 tmpfs, in the container's namespace only
//	<dir>/mnt/upper, work     the overlay's writable layer (discarded at exit)
//	<dir>/mnt/root            overlay(lower = host /): the container's root, chroot
//	  /proc                   the host's /proc (recursive bind; no pid namespace)
//	  /sys                    the host's /sys, read-only
//	  /dev                    tmpfs: null zero full random urandom tty (binds),
//	                          shm (tmpfs), fd/stdin/stdout/stderr (symlinks)
//	  /dev/fakegpu/<uuid>.fakegpu   the exposed GPUs' state files (FAKEGPU_DIR)
//	  /usr/local/nvidia/lib64 the fake driver, read-only (LD_LIBRARY_PATH)
//	  /usr/local/bin/cuda-workload   vcuda's workload program, read-only
//	  <containerPath>         every Allocate mount: /etc/vcuda/vcuda.config
//	                          (read-only), the libvcuda.so path, the shared dir
//	                          (read-write), /etc/ld.so.preload (read-only)
//
// where <dir> is <WorkDir>/<node>/containers/<podUID>.<container>.<random>.
// libvcuda.so is loaded by the dynamic loader through /etc/ld.so.preload and
// reads its limits from /etc/vcuda/vcuda.config, exactly as in a pod. Mount
// points are created in the overlay's upper layer and symlinks are resolved
// inside the container's root (/var/run -> /run), so the host is never
// touched; the namespace and all its mounts vanish with the process.
//
// ModeFallback (no mount namespace or no overlayfs), weaker: no mounts at all.
// Each container path P is <dir>/root/P, a symlink to the host path; env
// values that are container paths (VCUDA_SHARED_DIR, FAKEGPU_DIR,
// LD_LIBRARY_PATH) are prefixed with <dir>/root; libvcuda.so comes from
// LD_PRELOAD (the libraries /etc/ld.so.preload would list) instead of the
// loader's /etc/ld.so.preload; the limiter reads a copy of the config
// (<dir>/vcuda.config, shared_dir prefixed) named by VCUDA_CONFIG, which
// libvcuda honours only because /etc/vcuda/vcuda.config does not exist on the
// host (the fallback refuses to run if it does); nothing is read-only, and
// programs run from the host's filesystem. What the fallback still checks:
// the response's limits, UUIDs and shared dir reach libvcuda, and the GPUs
// are the node's. What it cannot: the preload mechanism, the read-only
// config, the container paths themselves.
//
// Processes run as the caller (root) in the host's pid and network
// namespaces; they are not killed if the caller dies (a parent-death signal
// would fire when the short-lived thread that set up the namespace exits).
// The fake driver does not reclaim device memory of a process that dies
// without freeing it: a killed workload leaks its simulated memory until the
// node's gpus directory is removed (cluster down).
package containeremu
