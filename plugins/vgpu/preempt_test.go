package vgpu

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	"volcano.sh/volcano/pkg/scheduler/actions/preempt"
	"volcano.sh/volcano/pkg/scheduler/conf"
	"volcano.sh/volcano/pkg/scheduler/framework"
	"volcano.sh/volcano/pkg/scheduler/plugins"
	"volcano.sh/volcano/pkg/scheduler/plugins/conformance"
	"volcano.sh/volcano/pkg/scheduler/plugins/gang"
	"volcano.sh/volcano/pkg/scheduler/plugins/priority"
	"volcano.sh/volcano/pkg/scheduler/plugins/proportion"
	"volcano.sh/volcano/pkg/scheduler/uthelper"
	"volcano.sh/volcano/pkg/scheduler/util"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

// TestPreemptEvictsOnlyThePodsOnTheGPUItNeeds: two A100-80GB GPUs. GPU 0
// holds a high-priority pod (1024 MiB) and a low-priority one (c, 40960);
// GPU 1 two low-priority pods (a and b, 40960 each). A high-priority pod asks
// a whole GPU (81920 MiB, 100 cores): only GPU 1 can be emptied, so a and b
// are evicted and c stays, although evicting c frees as much node-level
// vgpu-memory as evicting a. Volcano's topology-aware preemption picks the
// victims through the plugin's simulation hooks.
func TestPreemptEvictsOnlyThePodsOnTheGPUItNeeds(t *testing.T) {
	high := util.BuildPriorityClass("high", 100000)
	low := util.BuildPriorityClass("low", 10)
	gpu := func(i int, mib int64, cores int) api.DeviceShare {
		return api.DeviceShare{UUID: []string{"GPU-n1-0", "GPU-n1-1"}[i], MemoryMiB: mib, Cores: cores}
	}
	running := func(name, pg string, prio *schedulingv1.PriorityClass, d api.DeviceShare) *corev1.Pod {
		p := newPod("ns", name).group(pg).gpus(1, d.MemoryMiB, int64(d.Cores)).on("n1", corev1.PodRunning).assigned(t, d).obj()
		p.Spec.PriorityClassName, p.Spec.Priority = prio.Name, &prio.Value
		return p
	}
	preemptor := newPod("ns", "p").group("pgp").gpus(1, 81920, 100).obj()
	preemptor.Spec.PriorityClassName, preemptor.Spec.Priority = high.Name, &high.Value
	pods := []*corev1.Pod{
		running("keep", "pgk", high, gpu(0, 1024, 10)),
		running("c", "pgc", low, gpu(0, 40960, 40)),
		running("a", "pga", low, gpu(1, 40960, 50)),
		running("b", "pgb", low, gpu(1, 40960, 50)),
		preemptor,
	}
	group := func(name string, prio *schedulingv1.PriorityClass, phase schedulingv1beta1.PodGroupPhase) *schedulingv1beta1.PodGroup {
		return util.BuildPodGroupWithPrio(name, "ns", "q1", 1, nil, phase, prio.Name)
	}
	trueValue, falseValue := true, false
	tc := uthelper.TestCommonStruct{
		Name:  "preempt by GPU",
		Nodes: []*corev1.Node{newGPUNode("n1", "A100-80GB", 2, 81920).obj(t)},
		Pods:  pods,
		PodGroups: []*schedulingv1beta1.PodGroup{
			group("pgk", high, schedulingv1beta1.PodGroupRunning), group("pgc", low, schedulingv1beta1.PodGroupRunning),
			group("pga", low, schedulingv1beta1.PodGroupRunning), group("pgb", low, schedulingv1beta1.PodGroupRunning),
			group("pgp", high, schedulingv1beta1.PodGroupInqueue),
		},
		Queues:         []*schedulingv1beta1.Queue{util.BuildQueue("q1", 1, nil)},
		PriClass:       []*schedulingv1.PriorityClass{high, low},
		ExpectEvicted:  []string{"ns/a", "ns/b"},
		ExpectEvictNum: 2,
	}
	shared := NewShared(func() time.Time { return testNow })
	tc.Plugins = map[string]framework.PluginBuilder{
		conformance.PluginName: conformance.New, gang.PluginName: gang.New, priority.PluginName: priority.New,
		proportion.PluginName: proportion.New, PluginName: NewBuilder(shared),
	}
	tiers := []conf.Tier{
		{Plugins: []conf.PluginOption{
			{Name: priority.PluginName, EnabledPreemptable: &trueValue, EnabledJobOrder: &trueValue, EnabledTaskOrder: &trueValue},
			{Name: gang.PluginName, EnabledPreemptable: &falseValue},
			{Name: conformance.PluginName, EnabledPreemptable: &trueValue},
		}},
		{Plugins: []conf.PluginOption{
			{Name: proportion.PluginName, EnabledOverused: &trueValue, EnabledAllocatable: &trueValue, EnabledQueueOrder: &trueValue, EnabledPredicate: &trueValue},
			{Name: PluginName},
		}},
	}
	// As in a configuration file: every switch a plugin entry leaves out is on
	// (the gang entry says enablePreemptable: false, as ours does).
	for i := range tiers {
		for j := range tiers[i].Plugins {
			plugins.ApplyPluginConfDefaults(&tiers[i].Plugins[j])
		}
	}
	ssn := tc.RegisterSession(tiers, []conf.Configuration{{Name: "preempt",
		Arguments: map[string]any{preempt.EnableTopologyAwarePreemptionKey: true}}})
	defer tc.Close()
	for _, p := range pods {
		if _, err := ssn.KubeClient().CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tc.Run([]framework.Action{preempt.New()})
	if err := tc.CheckAll(0); err != nil {
		t.Fatal(err)
	}
}
