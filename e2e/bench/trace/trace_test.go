package trace

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestGenerateIsDeterministic(t *testing.T) {
	a, err := Generate(42, DefaultMix())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(42, DefaultMix())
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("same seed, different traces (-first +second):\n%s", diff)
	}
	c, _ := Generate(43, DefaultMix())
	if cmp.Equal(a, c) {
		t.Error("seeds 42 and 43 gave the same trace")
	}
}

func TestGenerateFirstJobsPinned(t *testing.T) {
	// Pins the generator: a change here changes every published benchmark.
	jobs, err := Generate(1, Mix{Fractions: 2, Wholes: 1, Gangs: map[int]int{4: 1}, GangPods: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := []Job{
		{Index: 0, Name: "j0000", Kind: Gang, Pods: 2, GPUs: 4, Cores: 100, CPUMilli: 2000, HostMiB: 8192},
		{Index: 1, Name: "j0001", Kind: Fraction, Pods: 1, GPUs: 1, MemoryMiB: 16384, Cores: 10, CPUMilli: 500, HostMiB: 2048},
		{Index: 2, Name: "j0002", Kind: Whole, Pods: 1, GPUs: 1, Cores: 100, CPUMilli: 1000, HostMiB: 4096},
		{Index: 3, Name: "j0003", Kind: Fraction, Pods: 1, GPUs: 1, MemoryMiB: 20480, Cores: 10, CPUMilli: 500, HostMiB: 2048},
	}
	if diff := cmp.Diff(want, jobs); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestGenerateMix(t *testing.T) {
	jobs, err := Generate(7, DefaultMix())
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[Kind]int{}
	gangs := map[int]int{}
	for _, j := range jobs {
		kinds[j.Kind]++
		switch j.Kind {
		case Fraction:
			if j.Pods != 1 || j.GPUs != 1 || j.MemoryMiB == 0 || j.Cores == 0 || j.Cores >= 100 {
				t.Errorf("fraction %+v: want 1 pod, 1 GPU, memory and a core share", j)
			}
			if j.MemoryMiB > 23034 {
				t.Errorf("fraction %s asks %d MiB: more than an L4 has", j.Name, j.MemoryMiB)
			}
		case Whole:
			if j.Pods != 1 || j.GPUs != 1 || j.MemoryMiB != 0 || j.Cores != 100 {
				t.Errorf("whole %+v: want 1 pod, 1 exclusive GPU", j)
			}
		case Gang:
			gangs[j.GPUs]++
			if j.Pods != 2 || j.Cores != 100 {
				t.Errorf("gang %+v: want 2 pods of exclusive GPUs", j)
			}
		}
	}
	want := map[Kind]int{Fraction: 1200, Whole: 300, Gang: 120}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("kinds (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[int]int{2: 70, 4: 35, 8: 15}, gangs); diff != "" {
		t.Errorf("gang sizes (-want +got):\n%s", diff)
	}
	// 1200 + 300 + 2×(70+35+15) = 1740 pods; whole GPUs 300 + 2×(2×70 + 4×35 + 8×15) = 1100.
	if diff := cmp.Diff(Totals{Jobs: 1620, Pods: 1740, WholeGPUs: 1100, MultiGPUContainers: 240}, Sum(jobs)); diff != "" {
		t.Errorf("totals (-want +got):\n%s", diff)
	}
}

func TestGenerateRejectsBadMix(t *testing.T) {
	for _, tc := range []struct {
		name string
		mix  Mix
	}{
		{"negative fractions", Mix{Fractions: -1, GangPods: 1}},
		{"no pods per gang", Mix{Fractions: 1}},
		{"9-GPU gang", Mix{Gangs: map[int]int{9: 1}, GangPods: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Generate(1, tc.mix); err == nil {
				t.Error("want an error")
			}
		})
	}
}
