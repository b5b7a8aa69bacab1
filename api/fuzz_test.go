package api

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzDecodeInventory: decoding never panics, and whatever decodes encodes
// back to a value that decodes to the same Inventory.
func FuzzDecodeInventory(f *testing.F) {
	good, _ := EncodeInventory(pairInventory())
	f.Add(good)
	withMIG, _ := EncodeInventory(migInventory())
	f.Add(withMIG)
	noInstances := migInventory()
	noInstances.GPUs[1].MIG.Instances = nil
	s, _ := EncodeInventory(noInstances)
	f.Add(strings.Replace(s, `"profiles"`, `"instances":[],"profiles"`, 1))
	f.Add(`{"version":"v1"}`)
	f.Fuzz(func(t *testing.T, s string) {
		inv, err := DecodeInventory(s)
		if err != nil {
			return
		}
		again, err := EncodeInventory(inv)
		if err != nil {
			t.Fatalf("decoded inventory does not encode: %v", err)
		}
		back, err := DecodeInventory(again)
		if err != nil {
			t.Fatalf("re-encoded inventory does not decode: %v", err)
		}
		if d := cmp.Diff(inv, back); d != "" {
			t.Fatalf("round trip changed the inventory:\n%s", d)
		}
	})
}

// FuzzDecodeAssignment: as FuzzDecodeInventory, for assignments.
func FuzzDecodeAssignment(f *testing.F) {
	good, _ := EncodeAssignment(sampleAssignment())
	f.Add(good)
	withMIG, _ := EncodeAssignment(migAssignment())
	f.Add(withMIG)
	f.Add(`{"version":"v1","containers":[]}`)
	f.Fuzz(func(t *testing.T, s string) {
		a, err := DecodeAssignment(s)
		if err != nil {
			return
		}
		again, err := EncodeAssignment(a)
		if err != nil {
			t.Fatalf("decoded assignment does not encode: %v", err)
		}
		back, err := DecodeAssignment(again)
		if err != nil {
			t.Fatalf("re-encoded assignment does not decode: %v", err)
		}
		if d := cmp.Diff(a, back); d != "" {
			t.Fatalf("round trip changed the assignment:\n%s", d)
		}
	})
}

// FuzzParsePodOptions: parsing annotations never panics.
func FuzzParsePodOptions(f *testing.F) {
	f.Add(TopologyKey, "required", GPUUUIDIncludeKey, "GPU-1,GPU-2")
	f.Add(VolcanoModeKey, "mig", VolcanoUUIDIncludeKey, "GPU-1,,GPU-2")
	f.Add(VolcanoPodGroupPolicyKey, "spread", DeviceShareTypeIncludeKey, "NVIDIA-NVIDIA A100")
	f.Add(VolcanoUUIDExcludeKey, "GPU-1", GPUUUIDExcludeKey, "GPU-1")
	f.Add("volcano.sh/vgpu-ids-new", "GPU-1,NVIDIA,1024,10:", "volcano.sh/vgpu-nmode", "mig")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		ann := map[string]string{k1: v1, k2: v2}
		o, err := ParsePodOptions(ann)
		if err != nil {
			return
		}
		// Nothing under either prefix is accepted and then ignored.
		for k := range ann {
			known := slices.Contains(podKeys(), k) || slices.Contains(volcanoKeys(), k) || slices.Contains(DeviceShareOutputKeys(), k)
			if (strings.HasPrefix(k, Prefix) || strings.HasPrefix(k, VolcanoVGPUPrefix)) && !known {
				t.Fatalf("unknown key %q accepted", k)
			}
		}
		if _, ok := ann[VolcanoModeKey]; ok && o.Mode == "" {
			t.Fatalf("%s=%q accepted without a mode", VolcanoModeKey, ann[VolcanoModeKey])
		}
		for _, l := range [][]string{o.UUIDInclude, o.UUIDExclude} {
			for _, u := range l {
				if !validUUID(u) {
					t.Fatalf("UUID filter item %q is not a UUID", u)
				}
			}
		}
	})
}

// FuzzModelMatches: the non-allocating matcher says what a plain
// case-folded search of the model and of deviceshare's type says.
func FuzzModelMatches(f *testing.F) {
	f.Add("NVIDIA A100-SXM4-80GB", "NVIDIA-NVIDIA a100")
	f.Add("Tesla T4", "IA-T")
	f.Fuzz(func(t *testing.T, model, filter string) {
		fold := func(s string) string { // ASCII only, byte by byte (s need not be UTF-8)
			b := []byte(s)
			for i, c := range b {
				if 'A' <= c && c <= 'Z' {
					b[i] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
		m, fl := fold(model), fold(filter)
		want := strings.Contains(m, fl) || strings.Contains(fold(DeviceShareTypePrefix)+m, fl)
		if got := ModelMatches(model, filter); got != want {
			t.Fatalf("ModelMatches(%q, %q) = %t, want %t", model, filter, got, want)
		}
	})
}
