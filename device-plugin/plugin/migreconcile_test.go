package plugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/volcano-vgpu/volcano-vgpu/api"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/config"
	"github.com/volcano-vgpu/volcano-vgpu/device-plugin/migledger"
)

// allocateMIG admits pod name with one container on a new 1g.5gb instance
// at slice start of GPU 2 and returns the instance's MIG UUID.
func allocateMIG(t *testing.T, e *testEnv, name string, start int) string {
	t.Helper()
	e.add(t, pod(name).app("main", migShare(2, "1g.5gb", 4864, start, 1, "")).obj(t, e))
	e.kubelet.set(name, map[string][]string{"main": nil})
	r, err := e.p.Allocate(context.Background(), []string{e.id(2, 0)})
	if err != nil {
		t.Fatal(err)
	}
	return readLimiter(t, r).Devices[0].UUID
}

// inSim reports whether the simulated NVML still has MIG device uuid.
func inSim(t *testing.T, e *testEnv, uuid string) bool {
	t.Helper()
	m, err := e.p.opts.Lib.MIG(e.gpu(2))
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range m.Instances {
		if in.UUID == uuid {
			return true
		}
	}
	return false
}

func (e *testEnv) reconcile() {
	e.p.mu.Lock()
	e.p.synced = true
	e.p.mu.Unlock()
	e.p.reconcileMIG(context.Background())
}

func TestReconcileDestroysInstanceOfDeletedPod(t *testing.T) {
	e, migUUID := migEnv(t, nil)
	mig := allocateMIG(t, e, "p-mig", 0)
	e.reconcile()
	if !inSim(t, e, mig) {
		t.Fatal("the instance of a live pod was destroyed")
	}
	published := e.p.DevicesChanged()
	e.p.deletePod("uid-p-mig")
	e.reconcile()
	if inSim(t, e, mig) || e.instanceAt(t, 0, 1) != "" {
		t.Errorf("the deleted pod's instance %s is still there (NVML or inventory %+v)", mig, e.instances(t))
	}
	if !inSim(t, e, migUUID) {
		t.Error("the instance the plugin did not create was destroyed")
	}
	select {
	case <-published:
	default:
		t.Error("the inventory was not published again after the destroy")
	}
	if en := e.p.migs.Entries(); len(en) != 0 {
		t.Errorf("ledger %+v, want empty", en)
	}
}

func TestReconcileKeepsInstanceInUse(t *testing.T) {
	e, _ := migEnv(t, nil)
	mig := allocateMIG(t, e, "p-mig", 1)
	if err := e.sim.RunOnMIG(mig, 4242); err != nil {
		t.Fatal(err)
	}
	e.p.deletePod("uid-p-mig")
	e.reconcile()
	if !inSim(t, e, mig) {
		t.Fatal("an instance processes run on was destroyed")
	}
	if _, ok := e.p.migs.Get(migledger.Key{GPU: e.gpu(2), Placement: api.MIGPlacement{Start: 1, Size: 1}}); !ok {
		t.Error("the ledger forgot an instance it must destroy later")
	}
	if err := e.sim.StopOnMIG(mig, 4242); err != nil {
		t.Fatal(err)
	}
	e.reconcile()
	if inSim(t, e, mig) {
		t.Error("the instance stayed after its last process ended")
	}
}

func TestReconcileNeverDestroysInstancesItDidNotCreate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*config.Config)
	}{
		{name: "on-demand GPU, instance made before the plugin"},
		{name: "fixed geometry", edit: func(c *config.Config) { c.MIG.Models = map[string]config.Geometry{"A100": {"3g.20gb"}} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, migUUID := migEnv(t, tc.edit)
			e.add(t, pod("p-mig").app("main", migShare(2, "3g.20gb", 19968, 4, 4, migUUID)).obj(t, e))
			e.kubelet.set("p-mig", map[string][]string{"main": nil})
			if _, err := e.p.Allocate(context.Background(), []string{e.id(2, 0)}); err != nil {
				t.Fatal(err)
			}
			e.p.deletePod("uid-p-mig")
			e.reconcile()
			if !inSim(t, e, migUUID) {
				t.Fatal("destroyed an instance the plugin did not create")
			}
			if en := e.p.migs.Entries(); len(en) != 0 {
				t.Errorf("ledger %+v: want the gone pod's use forgotten", en)
			}
		})
	}
}

func TestReconcileWaitsForThePodCache(t *testing.T) {
	e, _ := migEnv(t, nil)
	mig := allocateMIG(t, e, "p-mig", 0)
	e.p.deletePod("uid-p-mig")
	e.p.reconcileMIG(context.Background()) // not synced: the cache may lack live pods
	if !inSim(t, e, mig) {
		t.Error("destroyed an instance before the pod cache synced")
	}
}

// restart starts a new plugin on e's simulated GPUs and state directory.
func restart(t *testing.T, e *testEnv) *testEnv {
	t.Helper()
	modes := e.cfg.Sharing.GPUs
	return newEnvSim(t, e.cfg.StateDir, e.sim, func(c *config.Config) { c.Sharing.GPUs = modes })
}

func TestReconcileAfterRestart(t *testing.T) {
	t.Run("pod deleted while the plugin was down: its instance goes", func(t *testing.T) {
		e, _ := migEnv(t, nil)
		mig := allocateMIG(t, e, "p-mig", 0)
		e2 := restart(t, e)
		if e2.instanceAt(t, 0, 1) != mig {
			t.Fatalf("the restarted plugin publishes %+v, want the instance %s", e2.instances(t), mig)
		}
		e2.reconcile() // no pod bound: p-mig is gone
		if inSim(t, e2, mig) {
			t.Error("the instance of a pod deleted while the plugin was down stayed")
		}
	})
	t.Run("ledger lost: the live pod's instance is adopted, then destroyed with it", func(t *testing.T) {
		e, _ := migEnv(t, nil)
		mig := allocateMIG(t, e, "p-mig", 2)
		if err := os.Remove(filepath.Join(e.cfg.StateDir, migledger.File)); err != nil {
			t.Fatal(err)
		}
		e2 := restart(t, e)
		live, _ := e.client.CoreV1().Pods("ns").Get(context.Background(), "p-mig", metav1.GetOptions{})
		e2.add(t, live)
		e2.reconcile()
		en, ok := e2.p.migs.Get(migledger.Key{GPU: e2.gpu(2), Placement: api.MIGPlacement{Start: 2, Size: 1}})
		if !ok || en.PodUID != "uid-p-mig" || en.UUID != mig || !en.Created {
			t.Fatalf("ledger entry %+v (found %t): want %s adopted for uid-p-mig as created by the plugin (the scheduler asked for a new instance)", en, ok, mig)
		}
		if !inSim(t, e2, mig) {
			t.Fatal("the live pod's instance was destroyed")
		}
		e2.p.deletePod("uid-p-mig")
		e2.reconcile()
		if inSim(t, e2, mig) {
			t.Error("the adopted instance stayed after its pod was deleted")
		}
	})
}

func TestReconcileDoesNotHandAnInstanceInUseToAnotherPod(t *testing.T) {
	e, _ := migEnv(t, nil)
	mig := allocateMIG(t, e, "p-old", 3)
	if err := e.sim.RunOnMIG(mig, 4242); err != nil { // p-old's process has not exited yet
		t.Fatal(err)
	}
	e.p.deletePod("uid-p-old")
	// a new pod assigned the same placement (a scheduler that saw the instance idle)
	e.add(t, pod("p-new").app("main", migShare(2, "1g.5gb", 4864, 3, 1, mig)).obj(t, e))
	e.reconcile()
	en, _ := e.p.migs.Get(migledger.Key{GPU: e.gpu(2), Placement: api.MIGPlacement{Start: 3, Size: 1}})
	if en.PodUID != "uid-p-old" {
		t.Errorf("ledger entry %+v: an instance in use went to another pod", en)
	}
	e.kubelet.set("p-new", map[string][]string{"main": nil})
	if _, err := e.p.Allocate(context.Background(), []string{e.id(2, 0)}); err == nil || !strings.Contains(err.Error(), "processes run on the instance") {
		t.Errorf("Allocate of the new pod = %v, want a refusal while the old pod's processes run", err)
	}
	if err := e.sim.StopOnMIG(mig, 4242); err != nil {
		t.Fatal(err)
	}
	e.reconcile() // claimed by p-new now: adopted, not destroyed
	if !inSim(t, e, mig) {
		t.Fatal("the instance a live pod's assignment holds was destroyed")
	}
	if _, err := e.p.Allocate(context.Background(), []string{e.id(2, 0)}); err != nil {
		t.Errorf("Allocate of the new pod once the instance is idle: %v", err)
	}
}
