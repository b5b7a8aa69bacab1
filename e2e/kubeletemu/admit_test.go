package kubeletemu

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
)

// TestHoldAfterRelease: a pod deleted while kubelet allocates its devices
// (release runs between the Allocate call and the record) must not keep
// them; before hold checked, the ID stayed in use for ever, and on a full
// GPU every later pod assigned there was refused.
func TestHoldAfterRelease(t *testing.T) {
	const res, id = "volcano.sh/vgpu-number", "GPU-a::3"
	pod := func(uid string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "ns", UID: ktypes.UID("uid-" + uid)}}
	}
	tests := []struct {
		name     string
		released bool
		wantErr  string
		inUse    bool
	}{
		{name: "admitted pod keeps its devices", inUse: true},
		{name: "pod deleted during its admission gives them back", released: true, wantErr: "during its admission"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(Options{}, "node")
			p := pod("p")
			n.enqueue(p)
			<-n.queue
			n.mu.Lock()
			n.pods[string(p.UID)] = p // admit's first step
			n.mu.Unlock()
			if tc.released {
				n.release(p)
			}
			err := n.hold(string(p.UID), "main", res, []string{id})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("hold: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("hold: error %v, want one containing %q", err, tc.wantErr)
			}
			n.mu.Lock()
			got := n.inUse(res)[id]
			n.mu.Unlock()
			if got != tc.inUse {
				t.Errorf("%s in use: %v, want %v", id, got, tc.inUse)
			}
		})
	}
}
