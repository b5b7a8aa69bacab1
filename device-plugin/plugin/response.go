package plugin

import (
	"fmt"
	"path/filepath"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/cdi"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/containerdir"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/preloadhook"
)

// Container environment variables set by Allocate (names owned by api).
const (
	EnvVisibleDevices = api.EnvVisibleDevices
	EnvConfig         = api.EnvConfig
	EnvSharedDir      = api.EnvSharedDir
	EnvPolicy         = api.EnvPolicy
	PreloadMountPath  = api.LdPreloadPath
	// VisibleDevicesVoid tells the NVIDIA runtime hook to inject no GPU (CUDA
	// images set NVIDIA_VISIBLE_DEVICES=all): in CDI mode the GPUs come from
	// the CDI devices alone.
	VisibleDevicesVoid = "void"
)

// response is the container's AllocateResponse. Both modes mount the
// limiter's files; CDI mode names the GPUs as CDI devices (plus, when the
// image's preload is kept, the container's own limiter device whose hook
// writes its preload file) and sets NVIDIA_VISIBLE_DEVICES=void, env mode
// names them in NVIDIA_VISIBLE_DEVICES. In CDI mode a MIG device is named
// in the plugin's own spec (migSpec, with the driver's capability minors
// and the toolkit spec's driver edits):
// the toolkit's spec lacks instances created after it was generated.
//
// A container on an MPS GPU (mpsThreads > 0) also gets its GPU's MPS pipe
// directory, the MPS shared memory and the MPS variables (addMPS).
func (p *Plugin) response(rec containerdir.Record, paths containerdir.Paths, mpsThreads uint32, mc migCDI) (*pluginapi.ContainerAllocateResponse, error) {
	l, c := p.opts.Config.Limiter, p.opts.Config.CDI
	r := &pluginapi.ContainerAllocateResponse{
		Envs: map[string]string{
			EnvVisibleDevices: strings.Join(visibleUUIDs(rec.Devices), ","),
			EnvConfig:         l.ConfigPath,
			EnvSharedDir:      l.SharedDir,
			EnvPolicy:         string(rec.ComputePolicy),
		},
		Mounts: []*pluginapi.Mount{
			{ContainerPath: l.ConfigPath, HostPath: paths.Config, ReadOnly: true},
			{ContainerPath: filepath.Join(filepath.Dir(l.ConfigPath), api.ControlFile), HostPath: paths.Control, ReadOnly: true},
			{ContainerPath: l.ContainerLibrary, HostPath: l.HostLibrary, ReadOnly: true},
			{ContainerPath: l.SharedDir, HostPath: paths.Shared, ReadOnly: false},
		},
	}
	if p.opts.Config.PreloadEnabled() {
		if err := containerdir.WriteContainerPreload(paths, l.ContainerLibrary); err != nil {
			return nil, err
		}
		r.Mounts = append(r.Mounts, &pluginapi.Mount{ContainerPath: PreloadMountPath, HostPath: paths.Preload, ReadOnly: true})
	}
	if mpsThreads > 0 {
		p.addMPS(r, rec, mpsThreads)
	}
	if !c.On() {
		return r, nil
	}
	names, err := cdi.Names(c.Kind, c.Strategy(), p.cdiGPUs(rec))
	if err != nil {
		return nil, fmt.Errorf("CDI names of the GPUs (cdi.kind, cdi.deviceNames): %w", err)
	}
	migNames, err := p.migSpec(rec, mc)
	if err != nil {
		return nil, err
	}
	names = append(names, migNames...)
	if c.KeepsPreload() && p.opts.Config.PreloadEnabled() {
		hook := cdi.Hook{HookName: cdi.CreateRuntime, Path: c.HookPath, Timeout: ptr(cdi.HookTimeoutSeconds),
			Args: preloadhook.Argv(preloadhook.Args{File: paths.Preload, Library: l.ContainerLibrary})}
		name, err := p.specs.WriteLimiter(rec.PodUID, rec.Container, hook)
		if err != nil {
			return nil, fmt.Errorf("writing the container's CDI spec under cdi.specDir %s: %w", c.SpecDir, err)
		}
		names = append(names, name)
	}
	r.Envs[EnvVisibleDevices] = VisibleDevicesVoid
	for _, n := range names {
		r.CdiDevices = append(r.CdiDevices, &pluginapi.CDIDevice{Name: n})
	}
	if c.Annotations {
		if r.Annotations, err = cdi.Annotations(rec.PodUID, names); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// cdiGPUs are the container's GPUs with their node indexes, in the
// assignment's order; MIG devices are left to migSpec.
func (p *Plugin) cdiGPUs(rec containerdir.Record) []cdi.GPU {
	out := make([]cdi.GPU, 0, len(rec.Devices))
	for _, d := range rec.Devices {
		if d.MIG != nil {
			continue
		}
		g := cdi.GPU{UUID: d.UUID, Index: -1}
		for _, dev := range p.devices {
			if dev.UUID == d.UUID {
				g.Index = dev.Index
			}
		}
		out = append(out, g)
	}
	return out
}

// visibleUUIDs are the UUIDs the container sees (visibleUUID).
func visibleUUIDs(devs []api.DeviceShare) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = visibleUUID(d)
	}
	return out
}

func ptr[T any](v T) *T { return &v }
