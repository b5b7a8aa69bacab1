package cdi

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNames(t *testing.T) {
	gpus := []GPU{{UUID: "GPU-b2", Index: 3}, {UUID: "GPU-a1", Index: 0}}
	for _, tc := range []struct {
		name     string
		kind     string
		strategy Strategy
		gpus     []GPU // nil: gpus
		want     []string
		wantErr  bool
	}{
		{name: "by UUID, in the order given", kind: DefaultKind, strategy: ByUUID, want: []string{"nvidia.com/gpu=GPU-b2", "nvidia.com/gpu=GPU-a1"}},
		{name: "by index", kind: DefaultKind, strategy: ByIndex, want: []string{"nvidia.com/gpu=3", "nvidia.com/gpu=0"}},
		{name: "another vendor's kind", kind: "example.com/accel", strategy: ByUUID, want: []string{"example.com/accel=GPU-b2", "example.com/accel=GPU-a1"}},
		{name: "unknown strategy", kind: DefaultKind, strategy: "minor", wantErr: true},
		{name: "kind without class", kind: "nvidia.com", strategy: ByUUID, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := gpus
			if tc.gpus != nil {
				in = tc.gpus
			}
			got, err := Names(tc.kind, tc.strategy, in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %t", err, tc.wantErr)
			}
			if err != nil && !errors.Is(err, ErrInvalidName) {
				t.Errorf("err = %v, want ErrInvalidName", err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("names (-want +got):\n%s", d)
			}
		})
	}
}

func TestValidateKind(t *testing.T) {
	for _, tc := range []struct {
		kind string
		ok   bool
	}{
		{"nvidia.com/gpu", true},
		{"volcano-vgpu.io/limiter", true},
		{"a/b", true},
		{"nvidia.com/mig-1g.5gb", false}, // '.' is not allowed in a class
		{"1nvidia.com/gpu", false},       // vendor starts with a digit
		{"nvidia.com/gpu-", false},       // class ends with '-'
		{"nvidia.com/", false},
		{"/gpu", false},
		{"nvidia.com/gpu/x", false},
		{"nvidia.com=gpu", false},
	} {
		if err := ValidateKind(tc.kind); (err == nil) != tc.ok {
			t.Errorf("ValidateKind(%q) = %v, want ok %t", tc.kind, err, tc.ok)
		}
	}
}

func TestValidateDeviceName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"GPU-8c3f7a2e-1b4d-4e6f-9a0b-123456789abc", true},
		{"0", true},
		{"uid-1_main", true},
		{"mig:0:1", true},
		{"", false},
		{"-0", false},
		{"0-", false},
		{"a b", false},
		{"a/b", false},
		{"a=b", false},
	} {
		if err := ValidateDeviceName(tc.name); (err == nil) != tc.ok {
			t.Errorf("ValidateDeviceName(%q) = %v, want ok %t", tc.name, err, tc.ok)
		}
	}
}

func TestParseStrategy(t *testing.T) {
	if s, err := ParseStrategy("cdi.deviceNames", "index"); err != nil || s != ByIndex {
		t.Errorf("index: %q, %v", s, err)
	}
	_, err := ParseStrategy("cdi.deviceNames", "bus-id")
	if want := `cdi.deviceNames: expected one of index, uuid, got "bus-id"`; err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
}

func TestAnnotations(t *testing.T) {
	got, err := Annotations("8c3f7a2e-1b4d-4e6f-9a0b-123456789abc", []string{"nvidia.com/gpu=GPU-a", "volcano-vgpu.io/limiter=u_main"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{ // the name part: 13 + 36 = 49 characters, under the 63 allowed
		"cdi.k8s.io/volcano-vgpu_8c3f7a2e-1b4d-4e6f-9a0b-123456789abc": "nvidia.com/gpu=GPU-a,volcano-vgpu.io/limiter=u_main",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("annotations (-want +got):\n%s", d)
	}
	for _, id := range []string{"0123456789012345678901234567890123456789012345678901", "a b", "x-"} {
		if _, err := Annotations(id, nil); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Annotations(%q): err = %v, want ErrInvalidName", id, err)
		}
	}
}
