package cdi

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The plugin's CDI spec of the MIG devices it hands a container. NVIDIA's
// generated spec lists the MIG devices that existed when it was generated,
// so an instance the plugin creates later does not resolve there; the
// plugin names each MIG device it hands out in a spec of its own, written
// at Allocate: the device nodes the container needs for it and
// NVIDIA_VISIBLE_DEVICES=<MIG UUIDs>.
//
// A MIG device is reached through its GPU's node and two capability nodes
// (NVIDIA's MIG user guide, "Device Nodes and Capabilities"): the access
// capabilities of its GPU instance and of its compute instance, whose
// minors the driver lists in /proc/driver/nvidia-caps/mig-minors as
// "gpu<minor>/gi<id>/access <cap minor>" and "gpu<minor>/gi<id>/ci<id>/access
// <cap minor>"; the nodes are /dev/nvidia-caps/nvidia-cap<cap minor>.

const (
	// MIGKind is the kind of the plugin's MIG devices.
	MIGKind = "volcano-vgpu.io/mig"
	// DefaultMIGMinors is where the driver lists the MIG capability minors.
	DefaultMIGMinors = "/proc/driver/nvidia-caps/mig-minors"
	// EnvVisibleDevices names the GPUs for the NVIDIA runtime hook.
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
)

// ErrNoMIGMinors: the driver's MIG capability minors cannot be read (no
// MIG-capable driver loaded, or /proc not mounted where the plugin reads
// it), or do not list a MIG device's instances.
var ErrNoMIGMinors = errors.New("no MIG capability minors")

// MIGMinors maps the driver's capability names ("gpu0/gi1/access",
// "gpu0/gi1/ci0/access") to their minors.
type MIGMinors map[string]int

// ReadMIGMinors reads the driver's mig-minors file at path.
func ReadMIGMinors(path string) (MIGMinors, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s does not exist: the node's NVIDIA driver creates it when it loads (with MIG-capable GPUs); mount the host's /proc/driver/nvidia-caps into the device plugin, or set cdi.migMinors", ErrNoMIGMinors, path)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoMIGMinors, err)
	}
	defer f.Close()
	m, err := ParseMIGMinors(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// ParseMIGMinors parses the lines "<name> <minor>" of a mig-minors file.
func ParseMIGMinors(r io.Reader) (MIGMinors, error) {
	out := MIGMinors{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("%w: line %d: expected \"<name> <minor>\", got %q", ErrNoMIGMinors, n, line)
		}
		minor, err := strconv.Atoi(f[1])
		if err != nil || minor < 0 {
			return nil, fmt.Errorf("%w: line %d: minor %q is not a number", ErrNoMIGMinors, n, f[1])
		}
		out[f[0]] = minor
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoMIGMinors, err)
	}
	return out, nil
}

// MIGDevice is one MIG device a container gets: its UUID, its GPU's
// device minor, its GPU and compute instance IDs.
type MIGDevice struct {
	UUID     string
	GPUMinor int
	GI, CI   int
}

// Nodes are the device nodes a container needs for MIG device d: its GPU's,
// the access capabilities of its GPU and compute instance, nvidiactl and
// nvidia-uvm.
func (m MIGMinors) Nodes(d MIGDevice) ([]DeviceNode, error) {
	gi := fmt.Sprintf("gpu%d/gi%d/access", d.GPUMinor, d.GI)
	ci := fmt.Sprintf("gpu%d/gi%d/ci%d/access", d.GPUMinor, d.GI, d.CI)
	giMinor, ok := m[gi]
	if !ok {
		return nil, fmt.Errorf("%w: MIG device %s: the driver lists no %s", ErrNoMIGMinors, d.UUID, gi)
	}
	ciMinor, ok := m[ci]
	if !ok {
		return nil, fmt.Errorf("%w: MIG device %s: the driver lists no %s", ErrNoMIGMinors, d.UUID, ci)
	}
	return []DeviceNode{
		{Path: fmt.Sprintf("/dev/nvidia%d", d.GPUMinor)},
		{Path: fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", giMinor)},
		{Path: fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", ciMinor)},
		{Path: "/dev/nvidiactl"},
		{Path: "/dev/nvidia-uvm"},
	}, nil
}

// MIGDeviceName is the name of the MIG device migUUID in the spec of one
// container: <podUID>_<container>_<MIG UUID>. It is scoped to the pod: a
// spec left behind by a gone pod (until the GC removes it) never defines
// the name the next pod on the same instance gets, which would make both
// unresolvable.
func MIGDeviceName(podUID, container, migUUID string) (string, error) {
	name := podUID + "_" + container + "_" + migUUID
	if err := ValidateDeviceName(name); err != nil {
		return "", err
	}
	return name, nil
}

// MIGUUIDOf is the MIG UUID in a MIGDeviceName ("", false when name is not one).
func MIGUUIDOf(name string) (string, bool) {
	i := strings.LastIndex(name, "_")
	if i < 0 || !strings.HasPrefix(name[i+1:], "MIG-") {
		return "", false
	}
	return name[i+1:], true
}

func (s Specs) migFile(podUID, container string) string {
	return filepath.Join(s.Dir, migFilePrefix+podUID+"_"+container+".json")
}

// WriteMIG writes the spec of one container's MIG devices, with the nodes
// minors give each and driver (the toolkit's spec-level edits,
// ToolkitEdits; none without a toolkit spec) as the spec's own edits, and
// returns their qualified names in devs' order. It replaces an earlier spec
// of the same container atomically.
func (s Specs) WriteMIG(podUID, container string, minors MIGMinors, driver ContainerEdits, devs []MIGDevice) ([]string, error) {
	if _, err := LimiterDevice(podUID, container); err != nil {
		return nil, err
	}
	sp := Spec{CDIVersion: Version, Kind: MIGKind}
	uuids := make([]string, len(devs))
	for i, d := range devs {
		uuids[i] = d.UUID
	}
	// every device sets the same variable: the runtime applies the edits
	// of the devices one after the other
	env := EnvVisibleDevices + "=" + strings.Join(uuids, ",")
	var names []string
	for _, d := range devs {
		name, err := MIGDeviceName(podUID, container, d.UUID)
		if err != nil {
			return nil, err
		}
		nodes, err := minors.Nodes(d)
		if err != nil {
			return nil, err
		}
		sp.Devices = append(sp.Devices, Device{Name: name, ContainerEdits: ContainerEdits{
			Env: []string{env}, DeviceNodes: nodes}})
		names = append(names, MIGKind+"="+name)
	}
	if top := driverEdits(driver, sp.Devices); top != nil {
		sp.ContainerEdits, sp.CDIVersion = top, specVersion(top)
	}
	if err := s.write(s.migFile(podUID, container), sp); err != nil {
		return nil, err
	}
	return names, nil
}

// driverEdits are the driver's edits without the device nodes the devices
// name themselves; nil when there are none.
func driverEdits(driver ContainerEdits, devs []Device) *ContainerEdits {
	e := driver
	e.DeviceNodes = slices.DeleteFunc(slices.Clone(e.DeviceNodes), func(n DeviceNode) bool {
		return slices.ContainsFunc(devs, func(d Device) bool {
			return slices.ContainsFunc(d.ContainerEdits.DeviceNodes, func(o DeviceNode) bool { return o.Path == n.Path })
		})
	})
	if len(e.Env)+len(e.DeviceNodes)+len(e.Hooks)+len(e.Mounts)+len(e.AdditionalGIDs) == 0 {
		return nil
	}
	return &e
}

// ReadMIG reads back the MIG spec of one container (the emulators).
func (s Specs) ReadMIG(podUID, container string) (Spec, error) {
	if _, err := LimiterDevice(podUID, container); err != nil {
		return Spec{}, err
	}
	return readSpec(s.migFile(podUID, container))
}
