package kubeletemu

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/cdi"
)

// Record is <base>/<node>/records/<podUID>.json.
type Record struct {
	PodUID    string `json:"podUID"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Node      string `json:"node"`
	// Admitted: every container got its devices.
	Admitted   bool              `json:"admitted"`
	Error      string            `json:"error,omitempty"`
	Containers []ContainerRecord `json:"containers"`
	Time       time.Time         `json:"time"`
}

// ContainerRecord is what one container got for one resource.
type ContainerRecord struct {
	Name     string `json:"name"`
	Init     bool   `json:"init,omitempty"`
	Resource string `json:"resource"`
	// Reused are devices of earlier init containers taken first.
	Reused []string `json:"reused,omitempty"`
	// PreferredRequest/Preferred: GetPreferredAllocation's input and answer.
	PreferredRequest *PreferredRequest `json:"preferredRequest,omitempty"`
	Preferred        []string          `json:"preferred,omitempty"`
	PreferredError   string            `json:"preferredError,omitempty"`
	// DeviceIDs were sent in the Allocate request.
	DeviceIDs     []string          `json:"deviceIDs"`
	Response      *AllocateResponse `json:"response,omitempty"`
	AllocateError string            `json:"allocateError,omitempty"`
	PreStart      bool              `json:"preStart,omitempty"`
	PreStartError string            `json:"preStartError,omitempty"`
}

// PreferredRequest mirrors one ContainerPreferredAllocationRequest.
type PreferredRequest struct {
	Available   []string `json:"available"`
	MustInclude []string `json:"mustInclude,omitempty"`
	Size        int      `json:"size"`
}

// AllocateResponse mirrors a ContainerAllocateResponse.
type AllocateResponse struct {
	Envs        map[string]string `json:"envs,omitempty"`
	Mounts      []Mount           `json:"mounts,omitempty"`
	Devices     []DeviceSpec      `json:"devices,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	CDIDevices  []string          `json:"cdiDevices,omitempty"`
}

// Mount mirrors pluginapi.Mount.
type Mount struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	ReadOnly      bool   `json:"readOnly"`
}

// DeviceSpec mirrors pluginapi.DeviceSpec.
type DeviceSpec struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	Permissions   string `json:"permissions"`
}

func fromProto(r *pluginapi.ContainerAllocateResponse) *AllocateResponse {
	out := &AllocateResponse{Envs: r.GetEnvs(), Annotations: r.GetAnnotations()}
	for _, m := range r.GetMounts() {
		out.Mounts = append(out.Mounts, Mount{ContainerPath: m.GetContainerPath(), HostPath: m.GetHostPath(), ReadOnly: m.GetReadOnly()})
	}
	for _, d := range r.GetDevices() {
		out.Devices = append(out.Devices, DeviceSpec{ContainerPath: d.GetContainerPath(), HostPath: d.GetHostPath(), Permissions: d.GetPermissions()})
	}
	for _, c := range r.GetCdiDevices() {
		out.CDIDevices = append(out.CDIDevices, c.GetName())
	}
	return out
}

// GPUs names the GPUs the answer gives the container, as the runtime reads
// them: the devices of the NVIDIA toolkit's CDI kind (nvidia.com/gpu=<name>)
// and the MIG UUIDs of the device plugin's MIG devices
// (volcano-vgpu.io/mig=<pod UID>_<container>_<MIG UUID>) when there are any
// (CDI mode), else NVIDIA_VISIBLE_DEVICES (env mode).
func (r *AllocateResponse) GPUs() []string {
	var out []string
	for _, n := range r.CDIDevices {
		if name, ok := strings.CutPrefix(n, cdi.DefaultKind+"="); ok {
			out = append(out, name)
		}
		if name, ok := strings.CutPrefix(n, cdi.MIGKind+"="); ok {
			if uuid, ok := cdi.MIGUUIDOf(name); ok {
				out = append(out, uuid)
			}
		}
	}
	if len(r.CDIDevices) > 0 {
		return out
	}
	if v := r.Envs["NVIDIA_VISIBLE_DEVICES"]; v != "" {
		out = strings.Split(v, ",")
	}
	return out
}

// Mount returns the mount at containerPath, if any.
func (r *AllocateResponse) Mount(containerPath string) (Mount, bool) {
	for _, m := range r.Mounts {
		if m.ContainerPath == containerPath {
			return m, true
		}
	}
	return Mount{}, false
}

func (n *Node) writeRecord(r *Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	p := filepath.Join(n.RecordsDir(), r.PodUID+".json")
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// ReadRecord reads one pod's record.
func ReadRecord(baseDir, node, podUID string) (Record, error) {
	var r Record
	b, err := os.ReadFile(filepath.Join(baseDir, node, "records", podUID+".json"))
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("record of pod %s: %w", podUID, err)
	}
	return r, nil
}

// Record reads one pod's record from this node.
func (n *Node) Record(podUID string) (Record, error) {
	return ReadRecord(filepath.Dir(n.dir), n.name, podUID)
}

func readRecords(dir string) ([]Record, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []Record
	var errs []error
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var r Record
		if err := json.Unmarshal(b, &r); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f, err))
			continue
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}
