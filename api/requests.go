package api

import (
	"encoding/json"
	"fmt"
)

// Requests is the payload of RequestsKey, written by the admission webhook
// when it rewrites a pod's vGPU resources to totals (so Volcano's queues
// count what a pod really holds): each vGPU container's ask per GPU, which
// the scheduler places, and the GPU size a percentage or whole-GPU ask was
// counted at. The pod's resources must equal Totals.
type Requests struct {
	Version    string             `json:"version"`
	Containers []ContainerRequest `json:"containers"`
}

// ContainerRequest is one container's vGPU ask, per GPU.
type ContainerRequest struct {
	Name          string `json:"name"`
	Init          bool   `json:"init,omitempty"`
	Number        int    `json:"number"`                  // distinct GPUs
	MemoryMiB     int64  `json:"memoryMiB,omitempty"`     // per GPU
	MemoryPercent int    `json:"memoryPercent,omitempty"` // per GPU, of its memory (wins over MemoryMiB)
	Cores         int    `json:"cores,omitempty"`         // per GPU, percent; 0 = not asked
	// GPUMemoryMiB: the GPU size a percentage or whole-GPU ask was counted
	// at (the smallest matching GPU of the cluster, so the total fits every
	// node that could hold the pod).
	GPUMemoryMiB int64 `json:"gpuMemoryMiB,omitempty"`
}

// WholeMemory: the container asks neither memory nor a percentage, that is
// the whole memory of each GPU.
func (c ContainerRequest) WholeMemory() bool { return c.MemoryMiB == 0 && c.MemoryPercent == 0 }

// Totals are the container's vGPU resources as the pod carries them after
// admission: memory in MiB and cores in percent of one GPU, over all its
// GPUs. A whole-memory ask holds its GPUs alone, so it counts 100 cores each.
func (c ContainerRequest) Totals() (memoryMiB, cores int64) {
	n := int64(c.Number)
	per := c.MemoryMiB
	switch {
	case c.MemoryPercent > 0:
		per = c.GPUMemoryMiB * int64(c.MemoryPercent) / 100
	case c.WholeMemory():
		per = c.GPUMemoryMiB
	}
	cores = int64(c.Cores)
	if c.WholeMemory() {
		cores = 100
	}
	return n * per, n * cores
}

// Container returns the request of the named container.
func (r *Requests) Container(name string, init bool) (ContainerRequest, bool) {
	for _, c := range r.Containers {
		if c.Name == name && c.Init == init {
			return c, true
		}
	}
	return ContainerRequest{}, false
}

// EncodeRequests validates r and renders it for RequestsKey.
func EncodeRequests(r Requests) (string, error) {
	r.Version = Version
	if err := r.validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("%s: %w", RequestsKey, err)
	}
	return string(b), nil
}

// DecodeRequests parses and validates the value of RequestsKey.
func DecodeRequests(value string) (Requests, error) {
	var r Requests
	if err := decodeStrict(RequestsKey, value, &r); err != nil {
		return Requests{}, err
	}
	if err := r.validate(); err != nil {
		return Requests{}, err
	}
	return r, nil
}

// MaxRequestGPUs bounds a container's GPU count in Requests.
const MaxRequestGPUs = 64

func (r *Requests) validate() error {
	const k = RequestsKey
	if err := checkVersion(k, r.Version); err != nil {
		return err
	}
	if len(r.Containers) == 0 {
		return fieldErr(k, "containers", "at least one container", "none")
	}
	seen := map[string]bool{}
	for i, c := range r.Containers {
		f := func(name string) string { return fmt.Sprintf("containers[%d].%s", i, name) }
		id := fmt.Sprintf("%t/%s", c.Init, c.Name)
		switch {
		case c.Name == "" || len(c.Name) > 253:
			return fieldErr(k, f("name"), "a container name", fmt.Sprintf("%q", c.Name))
		case seen[id]:
			return fieldErr(k, f("name"), "a container listed once", c.Name)
		case c.Number < 1 || c.Number > MaxRequestGPUs:
			return fieldErr(k, f("number"), fmt.Sprintf("1 to %d GPUs", MaxRequestGPUs), c.Number)
		case c.MemoryMiB < 0 || c.MemoryMiB > 1<<30:
			return fieldErr(k, f("memoryMiB"), "0 (not asked) or a positive number of MiB", c.MemoryMiB)
		case c.MemoryPercent < 0 || c.MemoryPercent > 100:
			return fieldErr(k, f("memoryPercent"), "0 (not asked) to 100", c.MemoryPercent)
		case c.Cores < 0 || c.Cores > 100:
			return fieldErr(k, f("cores"), "0 (not asked) to 100", c.Cores)
		case (c.MemoryPercent > 0 || c.WholeMemory()) && (c.GPUMemoryMiB <= 0 || c.GPUMemoryMiB > 1<<30):
			return fieldErr(k, f("gpuMemoryMiB"), "the GPU size a percentage or whole-GPU ask was counted at", c.GPUMemoryMiB)
		}
		seen[id] = true
	}
	return nil
}
