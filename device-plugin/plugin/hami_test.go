package plugin

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
)

func TestDeviceshareHandshake(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.p.hamiLoop(ctx)

	e.p.answerHandshake(ctx, nodeWith(api.HAMiHandshakeKey, api.HAMiHandshake(api.HAMiReported, t0)))
	if e.p.hamiPending {
		t.Fatal("a Reported handshake needs no answer")
	}
	e.p.answerHandshake(ctx, nodeWith(api.HAMiHandshakeKey, api.HAMiHandshake(api.HAMiRequesting, t0)))
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.clock.Step(hamiAnswerPeriod) // the loop's ticker fires
		n, err := e.client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := n.Annotations[api.HAMiHandshakeKey]; ok {
			state, _, err := api.ParseHAMiHandshake(v)
			if err != nil || state != api.HAMiReported {
				t.Fatalf("handshake = %q, %v", v, err)
			}
			devs, err := api.DecodeHAMiRegister(n.Annotations[api.HAMiRegisterKey])
			if err != nil || len(devs) != 8 || devs[0].Count != 10 || devs[0].MemoryMiB != 40960 {
				t.Fatalf("register = %+v, %v", devs, err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("handshake never answered")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
