package api

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzDecodeInventory: decoding never panics, and whatever decodes encodes
// back to a value that decodes to the same Inventory.
func FuzzDecodeInventory(f *testing.F) {
	good, _ := EncodeInventory(pairInventory())
	f.Add(good)
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
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		_, _ = ParsePodOptions(map[string]string{k1: v1, k2: v2})
	})
}
