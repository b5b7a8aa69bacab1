package api

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestHAMiRegister(t *testing.T) {
	inv := pairInventory()
	inv.GPUs[1].Healthy = false
	got, err := EncodeHAMiRegister(HAMiDevices(inv))
	if err != nil {
		t.Fatal(err)
	}
	// The format Volcano's deviceshare (decodeNodeDevices) reads.
	want := "GPU-0000,10,40960,NVIDIA-A100-SXM4-40GB,true,hami-core:GPU-0001,10,40960,NVIDIA-A100-SXM4-40GB,false,hami-core:"
	if got != want {
		t.Errorf("register =\n%s\nwant\n%s", got, want)
	}
	back, err := DecodeHAMiRegister(got)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(HAMiDevices(inv), back); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
	for _, bad := range []string{"", "GPU-1,10,1,T,true,hami-core", "GPU-1,x,1,T,true,hami-core:", "GPU-1,10,1,T,true:"} {
		if _, err := DecodeHAMiRegister(bad); err == nil || !strings.HasPrefix(err.Error(), HAMiRegisterKey) {
			t.Errorf("DecodeHAMiRegister(%q) err = %v", bad, err)
		}
	}
	if _, err := EncodeHAMiRegister([]HAMiDevice{{UUID: "GPU:1", Type: "T", Mode: "m"}}); err == nil {
		t.Error("a UUID with ':' was encoded")
	}
}

func TestHAMiHandshake(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 5, 0, time.Local)
	v := HAMiHandshake(HAMiReported, at)
	if v != "Reported_2026.03.01 12:00:05" {
		t.Errorf("handshake = %q", v)
	}
	state, got, err := ParseHAMiHandshake("Requesting_2026.03.01 12:00:05")
	if err != nil || state != HAMiRequesting || !got.Equal(at) {
		t.Errorf("parse = %q, %v, %v", state, got, err)
	}
	for _, bad := range []string{"Requesting", "Asking_2026.03.01 12:00:05", "Deleted_yesterday"} {
		if _, _, err := ParseHAMiHandshake(bad); err == nil {
			t.Errorf("ParseHAMiHandshake(%q) succeeded", bad)
		}
	}
}

func FuzzDecodeHAMiRegister(f *testing.F) {
	f.Add("GPU-0000,10,40960,NVIDIA-A100,true,hami-core:")
	f.Fuzz(func(t *testing.T, s string) {
		devs, err := DecodeHAMiRegister(s)
		if err != nil {
			return
		}
		again, err := EncodeHAMiRegister(devs)
		if err != nil {
			t.Fatalf("decoded devices do not encode: %v", err)
		}
		back, err := DecodeHAMiRegister(again)
		if err != nil || !cmp.Equal(devs, back) {
			t.Fatalf("round trip changed %q: %v", s, err)
		}
	})
}
