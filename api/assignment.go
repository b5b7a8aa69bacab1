package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// Phase is where an assignment is in its life.
type Phase string

const (
	// PhaseAssigned: written by the scheduler, carried onto the pod by its
	// Binding. The only phase written today.
	PhaseAssigned Phase = "assigned"
	// PhaseAllocated: written by earlier device plugins once kubelet's
	// Allocate was answered for every container. Still accepted, so pods
	// annotated then keep decoding; nothing reads it: the device plugin
	// keeps what it served in its own records on the node.
	PhaseAllocated Phase = "allocated"
)

// DeviceShare is one container's share of one GPU.
type DeviceShare struct {
	UUID      string `json:"uuid"`
	MemoryMiB int64  `json:"memoryMiB"`
	Cores     int    `json:"cores"` // percent of one GPU; 100 = exclusive
	// MIG: the container gets this MIG instance of the GPU, not a share of
	// the GPU; nil for a time-sliced or MPS share.
	MIG *MIGDevice `json:"mig,omitempty"`
}

// ContainerAssignment lists the GPUs of one container.
type ContainerAssignment struct {
	Name string `json:"name"`
	Init bool   `json:"init,omitempty"`
	// Restartable: an init container with restartPolicy Always (a native
	// sidecar), booked as running beside the app containers.
	Restartable bool          `json:"restartable,omitempty"`
	Devices     []DeviceShare `json:"devices"`
}

// Assignment is the scheduler's decision for one pod.
type Assignment struct {
	Version    string                `json:"version"`
	PodUID     string                `json:"podUID"`
	Node       string                `json:"node"`
	Time       time.Time             `json:"time"`
	Phase      Phase                 `json:"phase"`
	Containers []ContainerAssignment `json:"containers"`
}

// Container returns the assignment of the named container.
func (a *Assignment) Container(name string, init bool) (ContainerAssignment, bool) {
	for _, c := range a.Containers {
		if c.Name == name && c.Init == init {
			return c, true
		}
	}
	return ContainerAssignment{}, false
}

// EncodeAssignment validates a and renders it for AssignmentKey.
func EncodeAssignment(a Assignment) (string, error) {
	a.Version = Version
	if err := a.validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(a)
	if err != nil {
		return "", fmt.Errorf("%s: %w", AssignmentKey, err)
	}
	return string(b), nil
}

// DecodeAssignment parses and validates the value of AssignmentKey.
func DecodeAssignment(value string) (Assignment, error) {
	var a Assignment
	if err := decodeStrict(AssignmentKey, value, &a); err != nil {
		return Assignment{}, err
	}
	if err := a.validate(); err != nil {
		return Assignment{}, err
	}
	return a, nil
}

func (a *Assignment) validate() error {
	const k = AssignmentKey
	if err := checkVersion(k, a.Version); err != nil {
		return err
	}
	switch {
	case a.PodUID == "" || len(a.PodUID) > 128:
		return fieldErr(k, "podUID", "the pod's UID", fmt.Sprintf("%q", a.PodUID))
	case a.Node == "" || len(a.Node) > 253:
		return fieldErr(k, "node", "a node name", fmt.Sprintf("%q", a.Node))
	case a.Time.IsZero():
		return fieldErr(k, "time", "an RFC 3339 time", "none")
	case a.Phase != PhaseAssigned && a.Phase != PhaseAllocated:
		return fieldErr(k, "phase", fmt.Sprintf("%q or %q", PhaseAssigned, PhaseAllocated), fmt.Sprintf("%q", a.Phase))
	case len(a.Containers) == 0:
		return fieldErr(k, "containers", "at least one container", "none")
	}
	names := map[string]bool{}
	for i, c := range a.Containers {
		f := func(name string) string { return fmt.Sprintf("containers[%d].%s", i, name) }
		id := fmt.Sprintf("%t/%s", c.Init, c.Name)
		switch {
		case c.Name == "" || len(c.Name) > 253:
			return fieldErr(k, f("name"), "a container name", fmt.Sprintf("%q", c.Name))
		case names[id]:
			return fieldErr(k, f("name"), "a container listed once", c.Name)
		case len(c.Devices) == 0:
			return fieldErr(k, f("devices"), "at least one GPU", "none")
		case c.Restartable && !c.Init:
			return fieldErr(k, f("restartable"), "true only with init: true (a sidecar is an init container)", c.Restartable)
		}
		names[id] = true
		uuids := map[string]bool{}
		for j, d := range c.Devices {
			df := func(name string) string { return fmt.Sprintf("containers[%d].devices[%d].%s", i, j, name) }
			switch {
			case !validUUID(d.UUID):
				return fieldErr(k, df("uuid"), "a GPU UUID", fmt.Sprintf("%q", d.UUID))
			case uuids[d.UUID]:
				return fieldErr(k, df("uuid"), "each GPU once per container", d.UUID)
			case d.MemoryMiB <= 0:
				return fieldErr(k, df("memoryMiB"), "a positive number of MiB", d.MemoryMiB)
			case d.Cores < 0 || d.Cores > 100:
				return fieldErr(k, df("cores"), "a percentage from 0 to 100", d.Cores)
			}
			if d.MIG != nil {
				if err := d.MIG.validate(k, df); err != nil {
					return err
				}
			}
			uuids[d.UUID] = true
		}
	}
	return nil
}
