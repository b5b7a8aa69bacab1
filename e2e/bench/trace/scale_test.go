package trace

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// benchCapacity is e2e/sim/clusters/bench.yaml: 80 nodes × 8 × 81920 MiB,
// 80 × 8 × 40960 MiB, 40 × 8 × 23034 MiB.
var benchCapacity = Capacity{GPUs: 1600, MemoryMiB: 640*81920 + 640*40960 + 320*23034}

func TestDemandOf(t *testing.T) {
	c := Capacity{GPUs: 4, MemoryMiB: 4 * 10000} // mean GPU 10000 MiB
	tests := []struct {
		name string
		jobs []Job
		want Demand
	}{
		{name: "one whole GPU is a quarter of both", jobs: []Job{{Kind: Whole, Pods: 1, GPUs: 1, Cores: 100}},
			want: Demand{Memory: 0.25, GPUs: 0.25}},
		{name: "a gang of 2 pods × 2 GPUs is the whole cluster", jobs: []Job{{Kind: Gang, Pods: 2, GPUs: 2, Cores: 100}},
			want: Demand{Memory: 1, GPUs: 1}},
		// 2000 MiB of 40000 = 0.05; a GPU-share of max(2000/10000, 50%) = 0.5 GPU of 4 = 0.125
		{name: "a fraction counts its memory, and its cores where they are the larger share", jobs: []Job{{Kind: Fraction, Pods: 1, GPUs: 1, MemoryMiB: 2000, Cores: 50}},
			want: Demand{Memory: 0.05, GPUs: 0.125}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, DemandOf(tc.jobs, c)); diff != "" {
				t.Errorf("demand (-want +got):\n%s", diff)
			}
		})
	}
}

func TestScaledReachesTheLoad(t *testing.T) {
	for _, load := range []float64{0.5, 1.2, 1.3} {
		m, err := Scaled(1, benchCapacity, load)
		if err != nil {
			t.Fatal(err)
		}
		jobs, err := Generate(1, m)
		if err != nil {
			t.Fatal(err)
		}
		d := DemandOf(jobs, benchCapacity)
		if d.Least() < load {
			t.Errorf("load %.2f: demand %+v falls short", load, d)
		}
		if d.Least() > load*1.1 {
			t.Errorf("load %.2f: demand %+v overshoots by more than 10%%", load, d)
		}
		// every kind of the default mix stays in it
		if m.Fractions == 0 || m.Wholes == 0 || m.Gangs[2] == 0 || m.Gangs[4] == 0 || m.Gangs[8] == 0 {
			t.Errorf("load %.2f: mix %+v lost a kind", load, m)
		}
	}
}

func TestScaledIsDeterministic(t *testing.T) {
	a, err := Scaled(7, benchCapacity, 1.3)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Scaled(7, benchCapacity, 1.3)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("two calls differ (-first +second):\n%s", diff)
	}
}

func TestScaledRefusesNoLoad(t *testing.T) {
	if _, err := Scaled(1, benchCapacity, 0); err == nil {
		t.Error("load 0 accepted")
	}
	if _, err := Scaled(1, Capacity{}, 1); err == nil {
		t.Error("a cluster without GPUs accepted")
	}
}
