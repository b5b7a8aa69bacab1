package match

import (
	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// podBuilder builds test pods: pod("p1").init("setup", "A").app("main", "A", "B").obj().
// GPU names are short test UUIDs ("A" becomes "GPU-A").
type podBuilder struct{ p Pod }

func pod(name string) *podBuilder {
	return &podBuilder{p: Pod{UID: "uid-" + name, Namespace: "ns", Name: name}}
}

func (b *podBuilder) container(name string, init, restartable bool, gpus ...string) *podBuilder {
	c := Container{Name: name, Init: init, Restartable: restartable, Count: len(gpus)}
	for _, g := range gpus {
		c.Devices = append(c.Devices, api.DeviceShare{UUID: "GPU-" + g, MemoryMiB: 1024, Cores: 10})
	}
	b.p.Containers = append(b.p.Containers, c)
	return b
}

func (b *podBuilder) init(name string, gpus ...string) *podBuilder {
	return b.container(name, true, false, gpus...)
}
func (b *podBuilder) sidecar(name string, gpus ...string) *podBuilder {
	return b.container(name, true, true, gpus...)
}
func (b *podBuilder) app(name string, gpus ...string) *podBuilder {
	return b.container(name, false, false, gpus...)
}
func (b *podBuilder) broken(err error) *podBuilder { b.p.Err = err; return b }
func (b *podBuilder) obj() *Pod                    { p := b.p; return &p }

func podMap(pods ...*Pod) map[string]*Pod {
	m := map[string]*Pod{}
	for _, p := range pods {
		m[p.UID] = p
	}
	return m
}

// id returns replica k of test GPU g.
func id(g string, k int) string { return "GPU-" + g + "::" + string(rune('0'+k)) }

func knownOnly(names ...string) Known {
	set := map[string]bool{}
	for _, n := range names {
		set["ns/"+n] = true
	}
	return func(ns, name string) bool { return set[ns+"/"+name] }
}
