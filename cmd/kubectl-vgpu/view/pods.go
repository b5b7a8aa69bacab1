package view

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/plugins/fromapi"
)

// DeviceRow is one GPU a container holds.
type DeviceRow struct {
	UUID      string `json:"uuid"`
	Index     int    `json:"index"` // NVML index on the node; -1 when the node no longer publishes the GPU
	MemoryMiB int64  `json:"memoryMiB"`
	Cores     int    `json:"cores"`
}

// ContainerRow is one container of a pod that asks vGPUs: what it holds
// (Devices, once assigned) or what it asks (Number, MemoryMiB,
// MemoryPercent, Cores per GPU, while pending).
type ContainerRow struct {
	Name          string      `json:"name"`
	Init          bool        `json:"init,omitempty"`
	Devices       []DeviceRow `json:"devices,omitempty"`
	Number        int         `json:"number,omitempty"`
	MemoryMiB     int64       `json:"memoryMiB,omitempty"`
	MemoryPercent int         `json:"memoryPercent,omitempty"`
	Cores         int         `json:"cores,omitempty"`
}

// PodRow is one pod that asks vGPUs or holds a booking.
type PodRow struct {
	Namespace  string         `json:"namespace"`
	Name       string         `json:"name"`
	Phase      string         `json:"phase"`
	Node       string         `json:"node,omitempty"` // the assigned node; "" while pending
	Policy     string         `json:"computePolicy"`  // the pod's, else its node's, else "default" (the device plugin's configuration)
	Containers []ContainerRow `json:"containers"`
	Error      string         `json:"error,omitempty"` // an unreadable ask or assignment
}

// PodsReport is `kubectl vgpu pods`.
type PodsReport struct {
	Pods []PodRow `json:"pods"`
}

// Pods lists the pods of namespace ("" = all) that ask vGPUs or hold a booking.
func (c *cluster) Pods(namespace string, o Options) PodsReport {
	r := PodsReport{Pods: []PodRow{}}
	for i := range c.pods {
		pod := &c.pods[i]
		if namespace != "" && pod.Namespace != namespace {
			continue
		}
		if row, ok := c.podRow(pod, o); ok {
			r.Pods = append(r.Pods, row)
		}
	}
	return r
}

func (c *cluster) podRow(pod *corev1.Pod, o Options) (PodRow, bool) {
	row := PodRow{Namespace: pod.Namespace, Name: pod.Name, Phase: string(pod.Status.Phase), Containers: []ContainerRow{}}
	a, booked, err := booking(pod)
	if err != nil {
		row.Error = fmt.Sprintf("annotation %s: %v", api.AssignmentKey, err)
		return row, true
	}
	if booked {
		row.Node = a.Node
		g := c.byName[a.Node]
		for _, ca := range a.Containers {
			cr := ContainerRow{Name: ca.Name, Init: ca.Init}
			for _, d := range ca.Devices {
				cr.Devices = append(cr.Devices, DeviceRow{UUID: d.UUID, Index: g.gpuIndex(d.UUID), MemoryMiB: d.MemoryMiB, Cores: d.Cores})
			}
			row.Containers = append(row.Containers, cr)
		}
	} else {
		req, _, err := fromapi.Request(pod, o.Resources, o.Defaults)
		switch {
		case err != nil:
			row.Error = err.Error()
			return row, true
		case req == nil:
			return row, false
		}
		for _, ct := range req.Containers {
			if ct.Number == 0 {
				continue
			}
			row.Containers = append(row.Containers, ContainerRow{Name: ct.Name, Init: ct.Init, Number: ct.Number,
				MemoryMiB: ct.MemoryMiB, MemoryPercent: ct.MemoryPercent, Cores: ct.Cores})
		}
	}
	row.Policy = "default"
	if opts, err := api.ParsePodOptions(pod.Annotations); err == nil && opts.ComputePolicy != "" {
		row.Policy = string(opts.ComputePolicy)
	} else if g := c.byName[row.Node]; g != nil && g.policy != "" {
		row.Policy = "node:" + string(g.policy)
	}
	return row, true
}

func (r PodsReport) table() [][]string {
	rows := [][]string{{"NAMESPACE", "POD", "STATUS", "NODE", "CONTAINER", "GPUS", "MEMORY (MiB)", "CORES", "POLICY"}}
	for _, p := range r.Pods {
		if p.Error != "" {
			rows = append(rows, []string{p.Namespace, p.Name, p.Phase, orDash(p.Node), "-", "-", "-", "-", "error: " + p.Error})
			continue
		}
		for _, ct := range p.Containers {
			var gpus, mem, cores string
			if len(ct.Devices) > 0 {
				var ix, ms, cs []string
				for _, d := range ct.Devices {
					ix = append(ix, strconv.Itoa(d.Index))
					ms = append(ms, strconv.FormatInt(d.MemoryMiB, 10))
					cs = append(cs, fmt.Sprintf("%d%%", d.Cores))
				}
				gpus, mem, cores = strings.Join(ix, ","), strings.Join(ms, ","), strings.Join(cs, ",")
			} else {
				gpus, mem, cores = fmt.Sprintf("asks %d", ct.Number), askMemory(ct), fmt.Sprintf("%d%%", ct.Cores)
			}
			name := ct.Name
			if ct.Init {
				name += " (init)"
			}
			rows = append(rows, []string{p.Namespace, p.Name, p.Phase, orDash(p.Node), name, gpus, mem, cores, p.Policy})
		}
	}
	return rows
}

func askMemory(ct ContainerRow) string {
	switch {
	case ct.MemoryPercent > 0:
		return fmt.Sprintf("%d%%", ct.MemoryPercent)
	case ct.MemoryMiB > 0:
		return strconv.FormatInt(ct.MemoryMiB, 10)
	}
	return "whole"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
