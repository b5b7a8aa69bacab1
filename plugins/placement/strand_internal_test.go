package placement

import "testing"

func TestStrandedMiB(t *testing.T) {
	const gib = 1024
	tests := []struct {
		name  string
		cap   int64
		limit int
		u     usage
		want  int64
	}{
		{name: "idle GPU strands nothing", cap: 80 * gib, limit: 10, want: 0},
		{name: "balanced tenant: 30% memory, 30% cores", cap: 80 * gib, limit: 10, u: usage{mem: 24 * gib, cores: 30, shares: 1}, want: 0},
		{name: "memory-heavy tenant: cores go further than memory", cap: 80 * gib, limit: 10, u: usage{mem: 40 * gib, cores: 10, shares: 1}, want: 0},
		// 12 GiB per 30%: the 70% left carry 28 GiB of the 68 GiB free
		{name: "cores run out first", cap: 80 * gib, limit: 10, u: usage{mem: 12 * gib, cores: 30, shares: 1}, want: 40 * gib},
		// cores unbounded, 9 more tenants of 1 GiB: 9 of the 79 GiB free
		{name: "tenant slots run out first", cap: 80 * gib, limit: 10, u: usage{mem: 1 * gib, shares: 1}, want: 70 * gib},
		{name: "no cores left: all free memory", cap: 80 * gib, limit: 10, u: usage{mem: 20 * gib, cores: 100, shares: 3}, want: 60 * gib},
		{name: "no slots left: all free memory", cap: 80 * gib, limit: 2, u: usage{mem: 20 * gib, cores: 20, shares: 2}, want: 60 * gib},
		{name: "held exclusively: all free memory", cap: 80 * gib, limit: 10, u: usage{mem: 8 * gib, cores: 100, shares: 1, excl: 1}, want: 72 * gib},
		{name: "whole GPU: nothing free, nothing stranded", cap: 80 * gib, limit: 10, u: usage{mem: 80 * gib, cores: 100, shares: 1, excl: 1}, want: 0},
		{name: "over-committed memory strands nothing", cap: 80 * gib, limit: 10, u: usage{mem: 90 * gib, cores: 50, shares: 2}, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := strandedMiB(tt.cap, tt.limit, tt.u); got != tt.want {
				t.Errorf("strandedMiB = %d MiB, want %d", got, tt.want)
			}
		})
	}
}

func TestWholeGPUs(t *testing.T) {
	tests := []struct {
		name string
		cs   []Container
		want bool
	}{
		{name: "cores 100, memory unset", cs: []Container{{Number: 1, Cores: 100}}, want: true},
		{name: "cores 100, memory 100%", cs: []Container{{Number: 2, Cores: 100, MemoryPercent: 100}}, want: true},
		{name: "cores 100 with part of the memory", cs: []Container{{Number: 1, Cores: 100, MemoryMiB: 8192}}, want: false},
		{name: "all the memory with part of the cores", cs: []Container{{Number: 1, Cores: 50, MemoryPercent: 100}}, want: false},
		{name: "a fraction beside a whole GPU", cs: []Container{{Number: 1, Cores: 100}, {Number: 1, Cores: 20, MemoryMiB: 4096}}, want: false},
		{name: "containers without GPUs do not count", cs: []Container{{Name: "sidecar"}, {Number: 1, Cores: 100}}, want: true},
		{name: "no GPU at all", cs: []Container{{Name: "main"}}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Request{Containers: tt.cs}
			if got := r.wholeGPUs(); got != tt.want {
				t.Errorf("wholeGPUs = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestSameShapeStrandsNothingMore: a tenant shaped like the GPU's present
// ones leaves the stranded memory where it was (exactly: the integer division
// cancels), so binpack stacks same-shaped fractions as it always did.
func TestSameShapeStrandsNothingMore(t *testing.T) {
	for _, capMiB := range []int64{23034, 40960, 46068, 81920, 143771} {
		for _, mem := range []int64{1000, 3333, 4096, 7001, 10240} {
			for _, cores := range []int{3, 7, 10, 30, 33} {
				g := &GPU{MemoryMiB: capMiB, MaxShares: 10, Healthy: true}
				var u usage
				for k := 1; k <= 3 && u.mem+2*mem <= capMiB && u.cores+2*cores <= 100; k++ {
					u.add(mem, cores)
					if d := strandsMiB(g, u, mem, cores); d != 0 {
						t.Fatalf("%d MiB GPU with %d tenants of %d MiB/%d%%: one more strands %d MiB, want 0", capMiB, k, mem, cores, d)
					}
				}
			}
		}
	}
}
