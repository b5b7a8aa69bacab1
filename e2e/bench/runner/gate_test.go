package runner

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	vcfake "volcano.sh/apis/pkg/client/clientset/versioned/fake"
)

func TestHoldAndRelease(t *testing.T) {
	tests := []struct {
		name string
		was  corev1.ResourceList
	}{
		{name: "no capability before", was: nil},
		{name: "a memory capability: no cpu left behind", was: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Gi")}},
		{name: "a capability of its own is restored", was: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Gi"), corev1.ResourceCPU: resource.MustParse("32")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			vc := vcfake.NewSimpleClientset(&schedulingv1beta1.Queue{ObjectMeta: metav1.ObjectMeta{Name: backlogQueue},
				Spec: schedulingv1beta1.QueueSpec{Weight: 1, Capability: tt.was}})
			o := Options{VC: vc}
			capability := func() corev1.ResourceList {
				q, err := vc.SchedulingV1beta1().Queues().Get(ctx, backlogQueue, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if q.Spec.Weight != 1 {
					t.Errorf("the queue's weight changed to %d", q.Spec.Weight)
				}
				return q.Spec.Capability
			}
			release, err := o.hold(ctx)
			if err != nil {
				t.Fatal(err)
			}
			held := capability()
			if cpu, ok := held[corev1.ResourceCPU]; !ok || cpu.MilliValue() != 1 || len(held) != 1 {
				t.Errorf("held capability %v, want one millicore of CPU and nothing else", held)
			}
			if err := release(ctx); err != nil {
				t.Fatal(err)
			}
			got := capability()
			if len(got) != len(tt.was) {
				t.Fatalf("released capability %v, want %v", got, tt.was)
			}
			for name, q := range tt.was {
				if g := got[name]; g.Cmp(q) != 0 {
					t.Errorf("released %s = %v, want %v", name, g.String(), q.String())
				}
			}
		})
	}
	if _, err := (Options{VC: vcfake.NewSimpleClientset()}).hold(context.Background()); err == nil {
		t.Error("holding a queue that does not exist succeeded")
	}
}
